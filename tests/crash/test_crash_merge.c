/*
 * tests/crash/test_crash_merge.c - SIGKILL in the middle of one large
 * merge (issue 7): two batches of 500k updates are appended (the merge of
 * the two starts suspended: the quantum is 65536), then a child runs the
 * whole merge with ah_maintain(fuel 0) in one commit and is killed at a
 * random moment within the time the merge takes.  Afterwards the heap
 * verifies and equals either the pre-merge state exactly (same spine shape:
 * both inputs and the suspended merge, same contents) or the post-merge
 * one.  Children never call Criterion.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_rand.h"
#include "tl_run.h"

#define BATCH 340000u /* x TL_FANIN appends */
#define SEED 424242u

static ah_open_opts opts(void)
{
	return tl_opts(AH_OPEN_NOSYNC, 1024 * TL_MiB, 0);
}

static void put_model(ah_txn *t, uint64_t m)
{
	cr_assert_eq(ah_source_put(t, "model", &m, sizeof m), 0);
}

static void make_template(const char *path)
{
	ah_open_opts o = opts();
	ah_heap *h;
	ah_txn *t;
	ah_update *ups = calloc(BATCH, sizeof *ups);
	uint64_t *keys = calloc(BATCH, sizeof *keys), s = SEED;
	ah_arrangement_info in;

	cr_assert(ups && keys);
	o.flags |= AH_OPEN_CREATE;
	cr_assert_eq(ah_open(path, &o, &h), 0);
	for (uint64_t c = 0; c < TL_FANIN; c++) {
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		if (c == 0) {
			cr_assert_eq(ah_arrangement_create(t, "big"), 0);
			cr_assert_eq(ah_arrangement_create(t, "side"), 0);
		}
		for (uint64_t i = 0; i < BATCH; i++) {
			keys[i] = tl_rand(&s) % (4 * BATCH);
			ups[i] = (ah_update){ &keys[i], 8, "v", 1, c,
			                      (i % 7) ? 1 : -1 };
		}
		cr_assert_eq(ah_append(t, "big", c, c + 1, ups, BATCH), 0);
		cr_assert_eq(ah_append(t, "side", c, c + 1, ups, 100), 0);
		put_model(t, c + 1);
		cr_assert_eq(ah_txn_commit(t), 0);
	}
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "big", &in), 0);
	cr_assert_geq(in.merging, 1, "the big merge should be suspended");
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	free(ups);
	free(keys);
}

/* The merge commit; in a child it reports 'g' before the work. */
static int merge_all(const char *path, int fd)
{
	ah_open_opts o = opts();
	ah_heap *h;
	ah_txn *t;
	uint64_t m = TL_FANIN + 1;
	int rc, idle = 0;

	if ((rc = ah_open(path, &o, &h)) != 0)
		return rc;
	if (fd >= 0 && write(fd, "g", 1) != 1)
		return AH_EIO;
	if ((rc = ah_txn_begin(h, 0, &t)) != 0)
		return rc;
	rc = ah_maintain(t, "big", 0, &idle);
	if (rc == 0)
		rc = ah_source_put(t, "model", &m, sizeof m);
	if (rc == 0)
		rc = ah_txn_commit(t);
	else
		ah_txn_abort(t);
	if (rc == 0)
		rc = ah_close(h);
	return rc;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

Test(crash, kill_during_big_merge, .timeout = 600)
{
	tl_dir d;
	char tmpl[160];
	ah_open_opts o = opts();
	ah_heap *h;
	tl_state pre, post, st;
	ah_arrangement_info in;
	ah_txn *t;
	uint64_t s = tl_seed("crash/kill_during_big_merge", SEED);
	uint64_t t0, span, rounds = tl_torture() ? 25 : 4;
	uint64_t kept_pre = 0, kept_post = 0;

	d = tl_tmpdir("crash");
	snprintf(tmpl, sizeof tmpl, "%s/template", d.dir);
	make_template(tmpl);
	cr_assert_eq(tl_copy(tmpl, d.path), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(tl_state_hash(h, 1, &pre), 0);
	cr_assert_eq(ah_close(h), 0);
	t0 = now_us();
	cr_assert_eq(merge_all(d.path, -1), 0);
	span = now_us() - t0;
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(tl_state_hash(h, 1, &post), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "big", &in), 0);
	cr_assert_eq(in.merging, 0);
	cr_assert_eq(in.batches, 1);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(pre.model, TL_FANIN);
	cr_assert_eq(post.model, TL_FANIN + 1);
	cr_log_info("merge of %u updates takes %" PRIu64 " us",
	            TL_FANIN * BATCH, span);

	for (uint64_t r = 0; r < rounds; r++) {
		int fds[2], status, rc;
		uint64_t delay = tl_rand(&s) % (span + span / 5 + 1);
		char c;
		pid_t pid;

		cr_assert_eq(tl_copy(tmpl, d.path), 0);
		cr_assert_eq(pipe(fds), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(fds[0]);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(merge_all(d.path, fds[1]) == 0 ? 0 : 2);
		}
		close(fds[1]);
		cr_assert_eq(read(fds[0], &c, 1), 1, "child failed to open");
		close(fds[0]);
		usleep((useconds_t)delay);
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFSIGNALED(status) ||
		          (WIFEXITED(status) && WEXITSTATUS(status) == 0));
		cr_assert_eq(ah_open(d.path, &o, &h), 0, "round %" PRIu64, r);
		rc = tl_verify(h, NULL);
		cr_assert_eq(rc, 0, "round %" PRIu64 ": verify %s", r,
		             ah_err_name(rc));
		cr_assert_eq(tl_state_hash(h, 1, &st), 0);
		cr_assert_eq(ah_close(h), 0);
		if (st.model == TL_FANIN) {
			cr_assert_eq(st.hash, pre.hash,
			             "round %" PRIu64 " (delay %" PRIu64
			             " us): pre-merge spine changed", r, delay);
			kept_pre++;
		} else {
			cr_assert_eq(st.model, TL_FANIN + 1);
			cr_assert_eq(st.hash, post.hash);
			kept_post++;
		}
	}
	printf("crash/kill_during_big_merge: %" PRIu64 " kills (merge %" PRIu64
	       " ms): %" PRIu64 " pre-merge spines intact, %" PRIu64
	       " merges done\n", rounds, span / 1000, kept_pre, kept_post);
	tl_rmdir(&d);
}
