/*
 * tests/stress/test_pagecheck_live.c - the page check against a writer in
 * another process that commits as fast as it can, each commit freeing and
 * reusing pages.  A page check reads LMDB's pages itself, so it must read
 * one snapshot: ah_open's check (no reader slot: a commit may reuse the
 * newest snapshot's pages while it walks) never fails a sound heap, and
 * ah_verify / ah_verify_pages in a read transaction (its pages pinned, its
 * meta page rewritten by the second commit after it) never report a
 * problem; the second returns AH_EBUSY when both commits came before the
 * check began.  The writer child never calls Criterion: _exit codes.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "tl_dir.h"
#include "tl_heap.h"

#define ROUNDS 2000
#define KEYS 40

static ah_open_opts opts(unsigned flags)
{
	return tl_opts(flags | AH_OPEN_NOSYNC, 256 * TL_MiB, 512);
}

/* Round r retracts round r-1's val of every key and adds its own, moves
 * since to r and maintains fully: old chunks and tree pages are freed and
 * reused by the next commits. */
static int writer_round(ah_heap *h, uint64_t r)
{
	static ah_update ups[2 * KEYS];
	static char keys[KEYS][8];
	static uint8_t vals[2];
	ah_txn *t;
	size_t n = 0;
	int idle, rc;

	if ((rc = ah_txn_begin(h, 0, &t)) != 0)
		return rc;
	vals[0] = (uint8_t)(r - 1);
	vals[1] = (uint8_t)r;
	for (int i = 0; i < KEYS; i++) {
		snprintf(keys[i], sizeof keys[i], "k%05d", i);
		if (r > 0)
			ups[n++] = (ah_update){ keys[i], 6, &vals[0], 1, r, -1 };
		ups[n++] = (ah_update){ keys[i], 6, &vals[1], 1, r, 1 };
	}
	if ((rc = ah_append(t, "g", r, r + 1, ups, n)) != 0 ||
	    (rc = ah_set_since(t, "g", r)) != 0 ||
	    (rc = ah_maintain(t, "g", 0, &idle)) != 0) {
		ah_txn_abort(t);
		return rc;
	}
	return ah_txn_commit(t);
}

static void writer(const char *path, volatile uint64_t *commits)
{
	ah_open_opts o = opts(0);
	ah_heap *h;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (ah_open(path, &o, &h) != 0)
		_exit(2);
	for (uint64_t r = 1;; r++) {
		if (writer_round(h, r) != 0)
			_exit(3);
		__atomic_store_n(commits, r, __ATOMIC_RELEASE);
	}
}

static uint64_t now_commits(volatile uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_ACQUIRE);
}

static int count_problem(const ah_problem *p, void *user)
{
	size_t *n = user;

	if (*n == 0)
		fprintf(stderr, "stress/pagecheck_live: %s\n", p->message);
	++*n;
	return 0;
}

Test(stress, pagecheck_against_live_writer, .timeout = 240)
{
	tl_dir d = tl_tmpdir("pclive");
	volatile uint64_t *commits;
	char path[256];
	ah_open_opts o = opts(AH_OPEN_CREATE);
	ah_heap *h;
	ah_txn *t;
	pid_t pid;
	int st, rc;
	size_t problems = 0, busy_pages = 0, busy_verify = 0, overtaken = 0;
	uint64_t c0;

	tl_dir_file(&d, "h", path, sizeof path);
	commits = mmap(NULL, sizeof *commits, PROT_READ | PROT_WRITE,
	               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq((void *)commits, MAP_FAILED);
	*commits = 0;
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "g"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(writer_round(h, 0), 0);
	cr_assert_eq(ah_close(h), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		writer(path, commits);
	while (now_commits(commits) < 10)
		usleep(1000);
	for (int r = 0; r < ROUNDS; r++) {
		o = opts(AH_OPEN_RDONLY);
		rc = ah_open(path, &o, &h);
		cr_assert_eq(rc, 0, "round %d: open: %s", r, ah_strerror(rc));
		/* checks that start at once: no problem, whatever commits */
		cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
		rc = ah_verify_pages(t, count_problem, &problems, NULL);
		cr_assert(rc == 0 || rc == AH_EBUSY, "round %d: %s", r,
		          ah_strerror(rc));
		busy_pages += rc == AH_EBUSY;
		rc = ah_verify(t, count_problem, &problems, NULL);
		cr_assert(rc == 0 || rc == AH_EBUSY, "round %d: %s", r,
		          ah_strerror(rc));
		busy_verify += rc == AH_EBUSY;
		ah_txn_abort(t);
		/* a check begun after two commits: its meta is gone */
		if (r % 10 == 0) {
			cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
			c0 = now_commits(commits);
			while (now_commits(commits) < c0 + 3)
				usleep(200);
			rc = ah_verify_pages(t, count_problem, &problems, NULL);
			cr_assert_eq(rc, AH_EBUSY, "round %d: %s", r, ah_strerror(rc));
			ah_txn_abort(t);
			overtaken++;
		}
		cr_assert_eq(problems, 0, "round %d: %zu problems", r, problems);
		cr_assert_eq(ah_close(h), 0);
	}
	c0 = now_commits(commits);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st), "writer exited %d", WEXITSTATUS(st));
	/* and the heap the writer left is sound */
	o = opts(0);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	fprintf(stderr, "stress/pagecheck_live: %d opens and checks against %llu "
	        "commits; %zu page checks and %zu verifies overtaken (AH_EBUSY), "
	        "%zu overtaken on purpose\n", ROUNDS, (unsigned long long)c0,
	        busy_pages, busy_verify, overtaken);
	munmap((void *)commits, sizeof *commits);
	tl_rmdir(&d);
}
