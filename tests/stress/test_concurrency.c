/*
 * tests/stress/test_concurrency.c - readers against a busy writer (issue
 * 7): two reader threads and two reader processes run cursors over fresh
 * snapshots while the writer appends, merges (tiny quantum) and compacts
 * (since + ah_maintain), for 10 s (60 s under AH_TORTURE).  Every snapshot
 * must be one whole commit: arrangements x and y receive the same updates
 * in every commit, so they must have the same frontiers and contents, the
 * source position must equal their upper, and the live count must be the
 * one the commit history implies.  The suite also runs under `make tsan`.
 * Threads and children never call Criterion: they count failures and keep
 * the first message; children exit with a code.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_run.h"

#define NTHREADS 2
#define NPROCS 2

/* Keys inserted by commit k: m(k) of them; commit k retracts commit k-2's. */
static uint64_t m_of(uint64_t k)
{
	return k == 0 ? 0 : 1 + (k * 7) % 23;
}

static ah_open_opts opts(void)
{
	return tl_opts(AH_OPEN_NOSYNC, 512 * TL_MiB, 32);
}

static int writer_commit(ah_heap *h, uint64_t k)
{
	ah_update ups[64];
	char keys[64][48];
	size_t n = 0;
	ah_txn *t;
	int rc, idle;
	const char *names[2] = { "x", "y" };

	for (uint64_t i = 0; i < m_of(k); i++, n++) {
		snprintf(keys[n], sizeof keys[n], "k%" PRIu64 "-%" PRIu64, k, i);
		ups[n] = (ah_update){ keys[n], strlen(keys[n]), "v", 1, k - 1, 1 };
	}
	for (uint64_t i = 0; k > 2 && i < m_of(k - 2); i++, n++) {
		snprintf(keys[n], sizeof keys[n], "k%" PRIu64 "-%" PRIu64, k - 2,
		         i);
		ups[n] = (ah_update){ keys[n], strlen(keys[n]), "v", 1, k - 1,
		                      -1 };
	}
	if ((rc = ah_txn_begin(h, 0, &t)) != 0)
		return rc;
	for (int a = 0; a < 2 && rc == 0; a++) {
		if (k == 1)
			rc = ah_arrangement_create(t, names[a]);
		if (rc == 0)
			rc = ah_append(t, names[a], k - 1, k, ups, n);
		if (rc == 0 && k > 4)
			rc = ah_set_since(t, names[a], k - 4);
		if (rc == 0)
			rc = ah_maintain(t, names[a], k % 50 == 0 ? 0 : 40,
			                 &idle);
	}
	if (rc == 0)
		rc = ah_source_put(t, "k", &k, sizeof k);
	if (rc == 0)
		return ah_txn_commit(t);
	ah_txn_abort(t);
	return rc;
}

/* Live count and content hash of name at as_of. */
static int scan(ah_txn *t, const char *name, uint64_t as_of, uint64_t *live,
                uint64_t *hash)
{
	ah_cursor *c = NULL;
	const void *p;
	size_t len;
	int64_t sum;
	int rc = ah_cursor_open(t, name, &c);

	*live = 0;
	*hash = 0;
	while (rc == 0 && ah_cursor_key_valid(c)) {
		if ((rc = ah_cursor_key(c, &p, &len)) != 0 ||
		    (rc = ah_cursor_accumulate(c, as_of, &sum)) != 0)
			break;
		if (sum != 0 && sum != 1) {
			rc = AH_ECORRUPT;
			break;
		}
		if (sum) {
			(*live)++;
			*hash += XXH3_64bits(p, len);
		}
		if ((rc = ah_cursor_step_key(c)) > 0)
			rc = 0;
	}
	ah_cursor_close(c);
	return rc;
}

/* One snapshot check.  0, 1 (nothing committed yet) or an error; *msg
 * says what was wrong. */
static int check_snapshot(ah_heap *h, char *msg, size_t cap)
{
	ah_txn *t;
	ah_arrangement_info x, y;
	const void *pos;
	size_t len;
	uint64_t k, lx, ly, hx, hy;
	int rc = ah_txn_begin(h, AH_TXN_RDONLY, &t);

	if (rc != 0) {
		snprintf(msg, cap, "begin: %s", ah_err_name(rc));
		return rc;
	}
	rc = ah_source_get(t, "k", &pos, &len);
	if (rc == AH_ENOTFOUND) {
		ah_txn_abort(t);
		return 1;
	}
	if (rc == 0 && len == 8)
		memcpy(&k, pos, 8);
	if (rc == 0 && len != 8)
		rc = AH_ECORRUPT;
	if (rc == 0)
		rc = ah_arrangement_info_get(t, "x", &x);
	if (rc == 0)
		rc = ah_arrangement_info_get(t, "y", &y);
	if (rc == 0)
		rc = scan(t, "x", k - 1, &lx, &hx);
	if (rc == 0)
		rc = scan(t, "y", k - 1, &ly, &hy);
	/* And a point query (chunks checked page by page: the verified cache
	 * is shared by the threads) of the last commit's first key. */
	int64_t one = -1;
	if (rc == 0 && k > 1 && m_of(k) > 0) {
		char key[48];
		ah_cursor *c;
		const void *p;
		size_t kl;

		snprintf(key, sizeof key, "k%" PRIu64 "-0", k);
		if ((rc = ah_cursor_open_at(t, "y", key, strlen(key), &c)) == 0) {
			if ((rc = ah_cursor_key(c, &p, &kl)) == 0 &&
			    kl == strlen(key) && memcmp(p, key, kl) == 0)
				rc = ah_cursor_accumulate(c, k - 1, &one);
			ah_cursor_close(c);
		}
	}
	ah_txn_abort(t);
	if (rc == 0 && k > 1 && m_of(k) > 0 && one != 1) {
		snprintf(msg, cap, "point query of commit %" PRIu64 ": %" PRId64,
		         k, one);
		return AH_ECORRUPT;
	}
	if (rc != 0) {
		snprintf(msg, cap, "read: %s", ah_err_name(rc));
		return rc;
	}
	if (x.upper != k || y.upper != k || x.since != y.since ||
	    lx != m_of(k) + m_of(k - 1) || ly != lx || hx != hy) {
		snprintf(msg, cap,
		         "torn snapshot: k %" PRIu64 " uppers %" PRIu64 "/%" PRIu64
		         " live %" PRIu64 "/%" PRIu64 " want %" PRIu64, k,
		         x.upper, y.upper, lx, ly, m_of(k) + m_of(k - 1));
		return AH_ECORRUPT;
	}
	return 0;
}

typedef struct shared {
	ah_heap *h;
	atomic_int stop;
	atomic_uint_fast64_t checks;
	atomic_int failed;
	char msg[256];
	pthread_mutex_t mu;
} shared;

static void *reader_thread(void *arg)
{
	shared *s = arg;
	char msg[256];

	while (!atomic_load(&s->stop)) {
		int rc = check_snapshot(s->h, msg, sizeof msg);

		if (rc < 0) {
			pthread_mutex_lock(&s->mu);
			if (!atomic_load(&s->failed))
				snprintf(s->msg, sizeof s->msg, "%s", msg);
			atomic_store(&s->failed, 1);
			pthread_mutex_unlock(&s->mu);
			break;
		}
		if (rc == 0)
			atomic_fetch_add(&s->checks, 1);
	}
	return NULL;
}

/* A reader process: checks until its pipe closes; exit 0 or 2.  It
 * reports the number of checks on out. */
static void reader_process(const char *path, int in, int out)
{
	ah_open_opts o = opts();
	struct pollfd p = { in, POLLIN, 0 };
	ah_heap *h;
	uint64_t n = 0;
	char msg[256];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (ah_open(path, &o, &h) != 0)
		_exit(2);
	while (poll(&p, 1, 0) == 0) {
		int rc = check_snapshot(h, msg, sizeof msg);

		if (rc < 0) {
			fprintf(stderr, "reader process: %s\n", msg);
			_exit(3);
		}
		n += rc == 0;
	}
	ah_close(h);
	if (write(out, &n, sizeof n) != sizeof n)
		_exit(4);
	_exit(0);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

Test(stress, readers_vs_writer, .timeout = 300)
{
	tl_dir d;
	ah_open_opts o = opts();
	shared s = { 0 };
	pthread_t th[NTHREADS];
	pid_t pids[NPROCS];
	int go[2], back[2], status;
	uint64_t k = 0, end, proc_checks = 0, secs = tl_torture() ? 60 : 10;

	d = tl_tmpdir("stress");
	o.flags |= AH_OPEN_CREATE;
	cr_assert_eq(ah_open(d.path, &o, &s.h), 0);
	pthread_mutex_init(&s.mu, NULL);
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(back), 0);
	for (int i = 0; i < NPROCS; i++) {
		pids[i] = fork();
		cr_assert_geq(pids[i], 0);
		if (pids[i] == 0) {
			close(go[1]);
			close(back[0]);
			reader_process(d.path, go[0], back[1]);
		}
	}
	close(go[0]);
	close(back[1]);
	for (int i = 0; i < NTHREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, reader_thread, &s), 0);
	end = now_ms() + secs * 1000;
	while (now_ms() < end && !atomic_load(&s.failed)) {
		int rc = writer_commit(s.h, ++k);

		if (rc != 0) {
			atomic_store(&s.stop, 1);
			cr_assert_fail("writer commit %" PRIu64 ": %s", k,
			               ah_err_name(rc));
		}
	}
	atomic_store(&s.stop, 1);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	close(go[1]);
	for (int i = 0; i < NPROCS; i++) {
		uint64_t n = 0;

		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		          "reader process %d failed (status %d)", i, status);
		cr_assert_eq(read(back[0], &n, sizeof n), (ssize_t)sizeof n);
		proc_checks += n;
	}
	close(back[0]);
	cr_assert_eq(atomic_load(&s.failed), 0, "reader thread: %s", s.msg);
	cr_assert_gt(atomic_load(&s.checks), 0);
	cr_assert_gt(proc_checks, 0);
	cr_assert_eq(tl_verify(s.h, NULL), 0);
	cr_assert_eq(ah_close(s.h), 0);
	printf("stress/readers_vs_writer: %" PRIu64 " s, %" PRIu64
	       " commits, %" PRIu64 " thread snapshot checks, %" PRIu64
	       " process snapshot checks\n", secs, k,
	       (uint64_t)atomic_load(&s.checks), proc_checks);
	pthread_mutex_destroy(&s.mu);
	tl_rmdir(&d);
}
