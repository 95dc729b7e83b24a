/*
 * tests/crash/test_crash_kill.c - crash at every step (issue 7): a child
 * process runs a deterministic workload (appends to four arrangements in
 * every commit, since advances, merges with a tiny quantum, ah_maintain,
 * reopens) and reports each acknowledged commit (its model id, committed
 * as source "model") through a pipe; the parent SIGKILLs it at random
 * moments: during open, mid-commit, right after an acknowledgement (between
 * two commits), and in the middle of one large merge.  After each kill the
 * heap opens, verifies, and its whole state (frontiers, spine shape,
 * contents) equals a reference run's state at the last acknowledged commit
 * or at the one in flight.  The next child resumes from what it finds.
 *
 * Children never call Criterion: plain checks and _exit codes.  ~25 kills
 * in make test, 1,000 under AH_TORTURE.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"
#include "tl_run.h"

#define NARR 4
#define STEPS 160
#define QUANTUM 64
#define SEED 20240607u

static const char *const arr[NARR] = { "a0", "a1", "a2", "a3" };

/* ----------------------------------------------------------- workload */

/* Commit k of the workload; deterministic in (seed, k, state). */
static int step(ah_heap *h, uint64_t k)
{
	uint64_t s = SEED * 1000003ull + k;
	ah_txn *t = NULL;
	ah_update *ups = NULL;
	char (*keys)[12] = NULL, (*vals)[4] = NULL;
	int rc = ah_txn_begin(h, 0, &t), idle;

	for (int a = 0; rc == 0 && a < NARR; a++) {
		ah_arrangement_info in;
		uint64_t r = tl_rand(&s), n, dt;

		if (k == 1 && (rc = ah_arrangement_create(t, arr[a])) != 0)
			break;
		if ((rc = ah_arrangement_info_get(t, arr[a], &in)) != 0)
			break;
		switch (r % 10) {
		case 6:
			rc = ah_advance(t, arr[a], in.upper, in.upper + 1);
			break;
		case 7:
			rc = ah_set_since(t, arr[a],
			                  in.since + (r >> 8) % 4 > in.upper
			                          ? in.upper
			                          : in.since + (r >> 8) % 4);
			break;
		case 8:
			rc = ah_maintain(t, arr[a], 1 + (r >> 8) % 400, &idle);
			break;
		case 9:
			break;
		default:
			n = 1 + (r >> 8) % 100;
			if ((r >> 20) % 29 == 0)
				n = 2000;
			dt = 1 + (r >> 32) % 3;
			ups = realloc(ups, n * sizeof *ups);
			keys = realloc(keys, n * sizeof *keys);
			vals = realloc(vals, n * sizeof *vals);
			if (!ups || !keys || !vals)
				return AH_ENOMEM;
			for (uint64_t i = 0; i < n; i++) {
				uint64_t x = tl_rand(&s);

				snprintf(keys[i], sizeof keys[i], "k%05u",
				         (unsigned)(x % 700 + (uint64_t)a * 7));
				snprintf(vals[i], sizeof vals[i], "v%u",
				         (unsigned)((x >> 16) % 3));
				ups[i] = (ah_update){ keys[i], strlen(keys[i]),
				                      vals[i], 2,
				                      in.upper + (x >> 24) % dt,
				                      (x >> 40) % 5 ? 1 : -1 };
			}
			rc = ah_append(t, arr[a], in.upper, in.upper + dt, ups,
			               n);
		}
	}
	if (rc == 0)
		rc = ah_source_put(t, "model", &k, sizeof k);
	if (rc == 0)
		rc = ah_txn_commit(t);
	else
		ah_txn_abort(t);
	free(ups);
	free(keys);
	free(vals);
	return rc;
}

static ah_open_opts work_opts(unsigned flags)
{
	return tl_opts(AH_OPEN_CREATE | flags, 256 * TL_MiB, QUANTUM);
}

/* The model id the heap holds (0 when none yet). */
static int read_model(ah_heap *h, uint64_t *model)
{
	ah_txn *t;
	const void *pos;
	size_t len;
	int rc = ah_txn_begin(h, AH_TXN_RDONLY, &t);

	if (rc != 0)
		return rc;
	rc = ah_source_get(t, "model", &pos, &len);
	if (rc == 0 && len == sizeof *model)
		memcpy(model, pos, sizeof *model);
	else if (rc == 0)
		rc = AH_ECORRUPT;
	else if (rc == AH_ENOTFOUND)
		rc = 0;
	ah_txn_abort(t);
	return rc;
}

/* The child: resume from the heap's model id, run to STEPS, reopening
 * every 10 commits; acknowledge each commit on fd. */
static void child_run(const char *path, unsigned flags, int fd)
{
	ah_open_opts o = work_opts(flags);
	ah_heap *h = NULL;
	uint64_t model = 0;
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if ((rc = ah_open(path, &o, &h)) != 0 ||
	    (rc = read_model(h, &model)) != 0) {
		fprintf(stderr, "child: open/model: %s\n", ah_err_name(rc));
		_exit(2);
	}
	for (uint64_t k = model + 1; k <= STEPS; k++) {
		if ((rc = step(h, k)) != 0) {
			fprintf(stderr, "child: step %" PRIu64 ": %s\n", k,
			        ah_err_name(rc));
			_exit(3);
		}
		if (write(fd, &k, sizeof k) != sizeof k)
			_exit(4);
		if (k % 10 == 0 &&
		    (ah_close(h) != 0 || ah_open(path, &o, &h) != 0))
			_exit(5);
	}
	ah_close(h);
	_exit(0);
}

/* ------------------------------------------------------------- parent */

static uint64_t ref_hash[STEPS + 1];

static void reference(const char *path)
{
	ah_open_opts o = work_opts(AH_OPEN_NOSYNC);
	ah_heap *h;
	tl_state st;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(tl_state_hash(h, 1, &st), 0);
	ref_hash[0] = st.hash;
	for (uint64_t k = 1; k <= STEPS; k++) {
		int rc = step(h, k);

		cr_assert_eq(rc, 0, "reference step %" PRIu64 ": %s", k,
		             ah_err_name(rc));
		cr_assert_eq(tl_state_hash(h, 1, &st), 0);
		cr_assert_eq(st.model, k);
		ref_hash[k] = st.hash;
	}
	cr_assert_eq(ah_close(h), 0);
}

static void sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000),
	                       (long)(us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

/* Reads acknowledgements for up to ms (-1: until one arrives or EOF);
 * returns the number read, -1 at EOF. */
static int read_acks(int fd, int ms, uint64_t *last)
{
	struct pollfd p = { fd, POLLIN, 0 };
	uint64_t k;
	int got = 0;

	while (poll(&p, 1, ms) > 0) {
		ssize_t r = read(fd, &k, sizeof k);

		if (r == 0)
			return got ? got : -1;
		if (r != sizeof k)
			return -1;
		*last = k;
		got++;
		if (ms < 0)
			break;
		ms = 0;
	}
	return got;
}

typedef struct kill_stats {
	uint64_t kills, in_flight_done, finished_rounds, early_kills;
} kill_stats;

/* Checks the heap after a kill against the model; returns the model id. */
static uint64_t check_after(const char *path, uint64_t last_ack, uint64_t kill)
{
	ah_open_opts o = work_opts(0);
	ah_heap *h;
	tl_state st;
	int rc = ah_open(path, &o, &h);


	cr_assert_eq(rc, 0, "kill %" PRIu64 ": open: %s", kill,
	             ah_err_name(rc));
	rc = tl_verify(h, NULL);
	cr_assert_eq(rc, 0, "kill %" PRIu64 ": verify: %s", kill,
	             ah_err_name(rc));
	cr_assert_eq(tl_state_hash(h, 1, &st), 0);
	cr_assert(st.model == last_ack || st.model == last_ack + 1,
	          "kill %" PRIu64 ": heap at model %" PRIu64
	          ", last acknowledged %" PRIu64, kill, st.model, last_ack);
	cr_assert_eq(st.hash, ref_hash[st.model],
	             "kill %" PRIu64 ": state at model %" PRIu64
	             " differs from the reference (seed %u)", kill, st.model,
	             SEED);
	cr_assert_eq(ah_close(h), 0);
	return st.model;
}

Test(crash, kill_random, .timeout = 600)
{
	tl_dir d;
	uint64_t seed = tl_seed("crash/kill_random", SEED);
	uint64_t nkills = tl_torture() ? 1000 : 25;
	uint64_t known = 0; /* model id the heap is known to hold */
	kill_stats ks = { 0 };
	char ref[160];

	d = tl_tmpdir("crash");
	snprintf(ref, sizeof ref, "%s/ref", d.dir);
	reference(ref);
	unlink(ref);
	while (ks.kills < nkills) {
		int fds[2], status, mode = (int)(tl_rand(&seed) % 4);
		unsigned flags = (ks.kills % 3 == 2) ? 0 : AH_OPEN_NOSYNC;
		uint64_t last = known, first = known, r = tl_rand(&seed);
		pid_t pid;

		cr_assert_eq(pipe(fds), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(fds[0]);
			child_run(d.path, flags, fds[1]);
		}
		close(fds[1]);
		if (mode == 0) {            /* early: open, first commit */
			sleep_us(r % 3000);
		} else if (mode == 1) {     /* anywhere */
			sleep_us(r % 40000);
		} else {                    /* right after the n-th ack */
			for (uint64_t n = 1 + r % 6; n > 0; n--)
				if (read_acks(fds[0], -1, &last) < 0)
					break;
			if (mode == 3)
				sleep_us((r >> 32) % 1500);
		}
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		while (read_acks(fds[0], 0, &last) > 0)
			;
		close(fds[0]);
		if (WIFEXITED(status)) {
			cr_assert_eq(WEXITSTATUS(status), 0,
			             "child failed with %d", WEXITSTATUS(status));
			cr_assert_eq(last, STEPS);
			check_after(d.path, STEPS, ks.kills);
			ks.finished_rounds++;
			cr_assert_eq(unlink(d.path), 0);
			known = 0;
			continue;
		}
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		ks.kills++;
		known = check_after(d.path, last, ks.kills);
		if (known == last + 1)
			ks.in_flight_done++;
		if (last == first)
			ks.early_kills++;
		if (ks.kills % 8 == 0) {
			/* Start over, so that kills also land in creation. */
			cr_assert_eq(unlink(d.path), 0);
			known = 0;
		}
	}
	printf("crash/kill_random: %" PRIu64 " kills survived (%" PRIu64
	       " with the commit in flight done, %" PRIu64
	       " before the child's first commit), %" PRIu64 " workloads finished\n",
	       ks.kills, ks.in_flight_done, ks.early_kills, ks.finished_rounds);
	tl_rmdir(&d);
}
