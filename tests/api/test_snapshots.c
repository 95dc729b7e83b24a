/*
 * tests/api/test_snapshots.c - MVCC snapshots and space reuse:
 * a reader (thread, or another process) holding a snapshot reads identical
 * results while the writer appends, merges and compacts; once readers end,
 * space is reused; empty advances and full retraction cost no space.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_heap.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The contents of every arrangement as of upper - 1, in txn t; NULL on
 * error.  No Criterion assertions: forked children call it. */
static char *snapshot_text(ah_txn *t)
{
	tl_buf b = { 0 };
	tl_put(&b, "snap\n");
	char name[AH_NAME_MAX + 1], prev[AH_NAME_MAX + 1];
	const char *after = NULL;
	while (ah_arrangement_next(t, after, name) == 0) {
		ah_arrangement_info in;
		if (ah_arrangement_info_get(t, name, &in) ||
		    (in.upper > in.since &&
		     tl_try_dump_as_of(t, name, in.upper - 1, &b))) {
			free(b.p);
			return NULL;
		}
		tl_put(&b, "%s %" PRIu64 " %" PRIu64 "\n", name, in.upper, in.since);
		strcpy(prev, name);
		after = prev;
	}
	return b.p;
}

/* One round of writer work: append inserts of round r and retractions of
 * round r-1 to both arrangements, advance since, maintain.  Commits. */
static void write_round(ah_heap *h, int r, int n)
{
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	static const char *arr[2] = { "x", "y" };
	for (int a = 0; a < 2; a++) {
		ah_update *u = calloc((size_t)n * 2, sizeof *u);
		char (*kb)[24] = calloc((size_t)n * 2, 24);
		size_t m = 0;
		uint64_t upper = (uint64_t)r;
		for (int i = 0; i < n; i++) {
			snprintf(kb[m], 24, "r%06d-k%06d", r, i);
			u[m] = (ah_update){ kb[m], strlen(kb[m]), "value-value-value", 17, upper, 1 };
			m++;
			if (r > 0) {
				snprintf(kb[m], 24, "r%06d-k%06d", r - 1, i);
				u[m] = (ah_update){ kb[m], strlen(kb[m]), "value-value-value", 17, upper, -1 };
				m++;
			}
		}
		int rc = ah_append(t, arr[a], upper, upper + 1, u, m);
		cr_assert_eq(rc, 0, "%s", ah_txn_errmsg(t));
		cr_assert_eq(ah_set_since(t, arr[a], upper + 1), 0);
		cr_assert_eq(ah_maintain(t, arr[a], 0, NULL), 0);
		free(u);
		free(kb);
	}
	cr_assert_eq(ah_txn_commit(t), 0);
}

static void create_xy(ah_heap *h)
{
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "x"), 0);
	cr_assert_eq(ah_arrangement_create(t, "y"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
}

typedef struct reader_arg {
	ah_txn *t; /* begun by the main thread: snapshots move between threads */
	double seconds;
	int reads, mismatches;
	char *first;
} reader_arg;

static void *reader(void *p)
{
	reader_arg *ra = p;
	ah_txn *t = ra->t;
	ra->first = snapshot_text(t);
	double end = now_s() + ra->seconds;
	do {
		char *s = snapshot_text(t);
		ra->reads++;
		if (!s || !ra->first || strcmp(s, ra->first))
			ra->mismatches++;
		free(s);
	} while (now_s() < end);
	ah_txn_abort(t);
	return NULL;
}

Test(api_snapshots, reader_thread_sees_one_commit, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 64);
	create_xy(h);
	for (int r = 0; r < 5; r++)
		write_round(h, r, 200);
	reader_arg ra = { NULL, 5.0, 0, 0, NULL };
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &ra.t), 0);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, reader, &ra), 0);
	int r = 5;
	double end = now_s() + 5.0;
	while (now_s() < end)
		write_round(h, r++, 200);
	pthread_join(th, NULL);
	cr_log_info("reader thread: %d reads, writer: %d rounds", ra.reads, r - 5);
	cr_assert_not_null(ra.first);
	cr_assert_geq(ra.reads, 1);
	cr_assert_eq(ra.mismatches, 0);
	cr_assert(strstr(ra.first, "\nx 5 5\n"), "snapshot shows the commit it began on: %.40s", ra.first);
	free(ra.first);
	/* A new snapshot sees the writer's last commit. */
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	ah_arrangement_info in;
	cr_assert_eq(ah_arrangement_info_get(t, "x", &in), 0);
	cr_assert_eq(in.upper, (uint64_t)r);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(api_snapshots, reader_process_sees_one_commit, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	int go[2], ready[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ready), 0);
	{
		ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 64);
		create_xy(h);
		for (int r = 0; r < 5; r++)
			write_round(h, r, 200);
		cr_assert_eq(ah_close(h), 0);
	}
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char path[512], c;
		snprintf(path, sizeof path, "%s", d.path);
		ah_heap *ch;
		ah_open_opts o = { .size = sizeof o };
		if (ah_open(path, &o, &ch))
			_exit(2);
		ah_txn *t;
		if (ah_txn_begin(ch, AH_TXN_RDONLY, &t))
			_exit(3);
		char *first = snapshot_text(t);
		if (!first)
			_exit(6);
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(4);
		int bad = 0, reads = 0;
		double end = now_s() + 5.0;
		do {
			char *s = snapshot_text(t);
			bad += !s || strcmp(s, first) != 0;
			reads++;
			free(s);
		} while (now_s() < end);
		ah_txn_abort(t);
		_exit(bad ? 1 : (ah_close(ch) ? 5 : 0));
	}
	char c;
	cr_assert_eq(read(ready[0], &c, 1), 1);
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 64);
	cr_assert_eq(write(go[1], "g", 1), 1);
	int r = 5;
	double end = now_s() + 5.0;
	while (now_s() < end)
		write_round(h, r++, 200);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader process status %d", st);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(api_snapshots, space_reused_after_readers_end, .timeout = 300)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	create_xy(h);
	/* A reader pins the first snapshot while 20 rounds are written. */
	ah_txn *pin;
	int r = 0;
	write_round(h, r++, 2000);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &pin), 0);
	ah_heap_stat st;
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	uint64_t pinned_start = st.pages_used;
	for (; r < 21; r++)
		write_round(h, r, 2000);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	uint64_t pinned_end = st.pages_used;
	cr_assert_gt(pinned_end, pinned_start, "a pinned snapshot makes the file grow");
	ah_txn_abort(pin);
	/* Readers gone: after a warm-up, 100 rounds do not grow the file. */
	for (; r < 41; r++)
		write_round(h, r, 2000);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	uint64_t warm = st.pages_used;
	for (; r < 141; r++)
		write_round(h, r, 2000);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_log_info("pages: pinned %" PRIu64 " -> %" PRIu64 ", warm %" PRIu64 ", after 100 rounds %" PRIu64,
	            pinned_start, pinned_end, warm, st.pages_used);
	cr_assert_leq(st.pages_used, warm > pinned_end ? warm : pinned_end,
	              "file grew from %" PRIu64 " to %" PRIu64 " pages", warm, st.pages_used);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(api_snapshots, empty_advances_cost_nothing, .timeout = 300)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	create_xy(h);
	write_round(h, 0, 10);
	ah_heap_stat st;
	uint64_t upper = 1, pages_after_first = 0;
	for (int c = 0; c < 100; c++) {
		ah_txn *t;
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		for (int i = 0; i < 1000; i++, upper++)
			cr_assert_eq(ah_advance(t, "x", upper, upper + 1), 0);
		cr_assert_eq(ah_txn_commit(t), 0);
		if (c == 0) {
			cr_assert_eq(ah_heap_stat_get(h, &st), 0);
			pages_after_first = st.pages_used;
		}
	}
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	ah_arrangement_info in;
	cr_assert_eq(ah_arrangement_info_get(t, "x", &in), 0);
	cr_assert_eq(in.upper, 100001);
	cr_assert_eq(in.batches, 1);
	ah_txn_abort(t);
	cr_assert_eq(st.pages_used, pages_after_first, "100,000 empty advances grew the file");
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(api_snapshots, retract_all_gives_space_back, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "z"), 0);
	enum { N = 50000 };
	ah_update *u = calloc(N, sizeof *u);
	char (*kb)[16] = calloc(N, 16);
	for (int i = 0; i < N; i++) {
		snprintf(kb[i], 16, "k%08d", i);
		u[i] = (ah_update){ kb[i], 9, "v", 1, 0, 1 };
	}
	cr_assert_eq(ah_append(t, "z", 0, 1, u, N), 0);
	for (int i = 0; i < N; i++)
		u[i].time = 1, u[i].diff = -1;
	cr_assert_eq(ah_append(t, "z", 1, 2, u, N), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	ah_arrangement_info in;
	cr_assert_eq(ah_arrangement_info_get(t, "z", &in), 0);
	cr_assert_gt(in.chunks, 0);
	cr_assert_eq(ah_set_since(t, "z", 2), 0);
	int idle = 0;
	cr_assert_eq(ah_maintain(t, "z", 0, &idle), 0);
	cr_assert_eq(idle, 1);
	cr_assert_eq(ah_arrangement_info_get(t, "z", &in), 0);
	cr_assert_eq(in.batches, 0);
	cr_assert_eq(in.chunks, 0);
	cr_assert_eq(in.updates, 0);
	cr_assert_eq(in.upper, 2);
	cr_assert_eq(ah_txn_commit(t), 0);
	free(u);
	free(kb);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
