/*
 * bench/arrheap.c - ah-bench-arrheap: the arrheap side of the benchmark
 * (systems arrheap-warm, arrheap-cold and rebuild), over include/arrheap.h
 * only.
 *
 *   load DIR LOG N          appends of BENCH_APPEND updates, one durable
 *                           commit each; every 10th also advances since to
 *                           upper - 1 and spends MAINTAIN_FUEL of merging
 *   start DIR N RUN T0_NS   restart: open, first answer, timed gets
 *   scan DIR N              open and a full scan
 *   merge DIR N             ah_maintain with no fuel limit: merge throughput
 *   rebuild LOG N RUN T0_NS hydration: read the log, build the arrangement
 *                           with the builder, answer, timed gets, scan
 *
 * rebuild has no in-memory heap in the public API, so it builds in a heap
 * on /dev/shm (tmpfs: RAM) opened with AH_OPEN_NOSYNC and removed after.
 * A query is a read transaction, a cursor, seek_key and an accumulate per
 * val as of the latest time; it never writes.
 *
 * It must never carry on past a failed call: every library error ends the
 * child through bench_die (exit 1, which stops the driver), so no figure
 * comes from a run that failed.  rebuild's heap on /dev/shm is unlinked
 * right after it is opened, so a killed run leaves nothing there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrheap.h"
#include "bench/bench.h"

#define ARR "bench"
#define MAINTAIN_EVERY 10
#define MAINTAIN_FUEL 1000000u

typedef struct db {
	ah_heap *heap;
	uint64_t as_of;
} db;

static void check(int rc, ah_txn *t, const char *what)
{
	if (rc != 0)
		bench_die("arrheap %s: %s %s", what, ah_strerror(rc),
		          t ? ah_txn_errmsg(t) : "");
}

/* A cursor movement: 1 (positioned) or 0 (the end); an error dies. */
static int moved(int rc, ah_txn *t, const char *what)
{
	if (rc < 0)
		check(rc, t, what);
	return rc;
}

/* The sparse map: large enough for any size here, allocated only as used. */
static uint64_t max_bytes(uint64_t n)
{
	uint64_t m = n * 400;

	return m < (4ull << 30) ? (4ull << 30) : m;
}

/* AH_BENCH_BGMERGE=1 in the environment: merges on the merge thread. */
static unsigned bg_flag(void)
{
	const char *e = getenv("AH_BENCH_BGMERGE");

	return e && *e && *e != '0' ? AH_OPEN_BGMERGE : 0;
}

static ah_heap *open_heap(const char *path, unsigned flags, uint64_t n)
{
	ah_open_opts o = { .size = sizeof o, .flags = flags | bg_flag(),
	                   .max_bytes = max_bytes(n) };
	ah_heap *h;

	check(ah_open(path, &o, &h), NULL, path);
	return h;
}

static void heap_path(char *buf, size_t len, const char *dir)
{
	snprintf(buf, len, "%s/heap", dir);
}

static void to_updates(const bench_rec *r, ah_update *u, size_t k,
                       int force_time, uint64_t time)
{
	for (size_t i = 0; i < k; i++)
		u[i] = (ah_update){ r[i].key, 8, r[i].val, 16,
		                    force_time ? time : r[i].time, r[i].diff };
}

static void put_info(ah_heap *h, const char *prefix)
{
	ah_txn *t;
	ah_arrangement_info in;
	char name[64];

	check(ah_txn_begin(h, AH_TXN_RDONLY, &t), NULL, "begin");
	check(ah_arrangement_info_get(t, ARR, &in), t, "info");
	ah_txn_abort(t);
#define PUT(f) snprintf(name, sizeof name, "%s" #f, prefix), bench_put(name, (double)in.f)
	PUT(batches);
	PUT(updates);
	PUT(keys);
	PUT(chunks);
	PUT(bytes);
	PUT(chunk_bytes);
#undef PUT
	ah_heap_stat hs;
	check(ah_heap_stat_get(h, &hs), NULL, "stat");
	/* pages in use: the file's high-water mark minus LMDB's free list */
	snprintf(name, sizeof name, "%slive_bytes", prefix);
	bench_put(name, (double)(hs.pages_used - hs.pages_free) * hs.page_size);
	snprintf(name, sizeof name, "%sfree_bytes", prefix);
	bench_put(name, (double)hs.pages_free * hs.page_size);
}

static void load(const char *dir, const char *log, uint64_t n)
{
	char path[4096];
	bench_log l;
	bench_rec *r = malloc(BENCH_APPEND * sizeof *r);
	ah_update *u = malloc(BENCH_APPEND * sizeof *u);
	ah_txn *t;
	uint64_t maint = 0, k, a;

	if (!r || !u)
		bench_die("out of memory");
	heap_path(path, sizeof path, dir);
	bench_log_open(&l, log);
	uint64_t t0 = bench_now_ns();
	ah_heap *h = open_heap(path, AH_OPEN_CREATE, n);
	check(ah_txn_begin(h, 0, &t), NULL, "begin");
	check(ah_arrangement_create(t, ARR), t, "create");
	check(ah_txn_commit(t), NULL, "commit");
	for (a = 0; (k = bench_log_read(&l, r, BENCH_APPEND)) > 0; a++) {
		to_updates(r, u, k, 0, 0);
		check(ah_txn_begin(h, 0, &t), NULL, "begin");
		check(ah_append(t, ARR, a, a + 1, u, k), t, "append");
		if ((a + 1) % MAINTAIN_EVERY == 0) {
			uint64_t m = bench_now_ns();
			check(ah_set_since(t, ARR, a), t, "since");
			check(ah_maintain(t, ARR, MAINTAIN_FUEL, NULL), t, "maintain");
			maint += bench_now_ns() - m;
		}
		check(ah_txn_commit(t), NULL, "commit");
	}
	/* With the merge thread: until it caught up (no merge left behind
	 * the last commit), so the figure includes all the merge work. */
	uint64_t tc = bench_now_ns();
	ah_merge_stats ms;
	check(ah_merge_wait(h, &ms), NULL, "merge wait");
	uint64_t t1 = bench_now_ns();
	if (bg_flag()) {
		bench_put("bg_slices_installed", (double)ms.installed);
		bench_put("bg_slices_discarded", (double)ms.discarded);
	}
	bench_log_close(&l);
	bench_put("ingest_ups", (double)n / ((double)(t1 - t0) / 1e9));
	bench_put("merge_wait_s", (double)(t1 - tc) / 1e9);
	bench_put("load_s", (double)(t1 - t0) / 1e9);
	bench_put("maintain_s", (double)maint / 1e9);
	bench_put("peak_rss_steady_bytes", (double)bench_maxrss());
	put_info(h, "");
	check(ah_close(h), NULL, "close");
	bench_put("file_bytes", (double)bench_alloc_bytes(path));
	free(r);
	free(u);
}

static void *db_open(const char *dir, uint64_t n)
{
	char path[4096];
	db *d = malloc(sizeof *d);
	ah_txn *t;
	ah_arrangement_info in;

	if (!d)
		bench_die("out of memory");
	heap_path(path, sizeof path, dir);
	d->heap = open_heap(path, 0, n);
	bench_madv_random(path);
	/* an engine reads its frontier when it starts */
	check(ah_txn_begin(d->heap, AH_TXN_RDONLY, &t), NULL, "begin");
	check(ah_arrangement_info_get(t, ARR, &in), t, "info");
	ah_txn_abort(t);
	if (in.upper == 0)
		bench_die("arrheap: empty arrangement");
	d->as_of = in.upper - 1;
	return d;
}

static int64_t db_get(void *p, const uint8_t key[8])
{
	db *d = p;
	ah_txn *t;
	ah_cursor *c;
	const void *k;
	size_t kl;
	int64_t sum = 0, s;

	check(ah_txn_begin(d->heap, AH_TXN_RDONLY, &t), NULL, "begin");
	check(ah_cursor_open_at(t, ARR, key, 8, &c), t, "cursor");
	if (ah_cursor_key_valid(c)) {
		check(ah_cursor_key(c, &k, &kl), t, "key");
		if (kl == 8 && memcmp(k, key, 8) == 0)
			for (int v = ah_cursor_val_valid(c); v == 1;
			     v = moved(ah_cursor_step_val(c), t, "step")) {
				check(ah_cursor_accumulate(c, d->as_of, &s), t, "acc");
				sum += s;
			}
	}
	check(ah_cursor_close(c), t, "cursor");
	ah_txn_abort(t);
	return sum;
}

static void db_scan(void *p, uint64_t *groups, int64_t *sum)
{
	db *d = p;
	ah_txn *t;
	ah_cursor *c;
	int64_t s;

	check(ah_txn_begin(d->heap, AH_TXN_RDONLY, &t), NULL, "begin");
	check(ah_cursor_open(t, ARR, &c), t, "cursor");
	for (int k = ah_cursor_key_valid(c); k == 1;
	     k = moved(ah_cursor_step_key(c), t, "step"))
		for (int v = ah_cursor_val_valid(c); v == 1;
		     v = moved(ah_cursor_step_val(c), t, "step")) {
			check(ah_cursor_accumulate(c, d->as_of, &s), t, "acc");
			*groups += s != 0;
			*sum += s;
		}
	check(ah_cursor_close(c), t, "cursor");
	ah_txn_abort(t);
}

static void db_close(void *p)
{
	db *d = p;

	check(ah_close(d->heap), NULL, "close");
	free(d);
}

static int merge(const char *dir, uint64_t n)
{
	char path[4096];
	ah_txn *t;
	ah_arrangement_info in;
	int idle = 0;

	heap_path(path, sizeof path, dir);
	ah_heap *h = open_heap(path, 0, n);
	check(ah_txn_begin(h, 0, &t), NULL, "begin");
	check(ah_arrangement_info_get(t, ARR, &in), t, "info");
	uint64_t a = bench_now_ns();
	check(ah_maintain(t, ARR, 0, &idle), t, "maintain");
	uint64_t b = bench_now_ns();
	check(ah_txn_commit(t), NULL, "commit");
	uint64_t c = bench_now_ns();
	bench_put("merge_in_bytes", (double)in.bytes);
	bench_put("merge_in_updates", (double)in.updates);
	bench_put("merge_in_batches", (double)in.batches);
	bench_put("merge_s", (double)(b - a) / 1e9);
	bench_put("merge_commit_s", (double)(c - b) / 1e9);
	bench_put("merge_mbps", (double)in.bytes / 1e6 / ((double)(c - a) / 1e9));
	bench_put("merge_ups", (double)in.updates / ((double)(c - a) / 1e9));
	put_info(h, "after_");
	check(ah_close(h), NULL, "close");
	bench_put("file_bytes_after_merge", (double)bench_alloc_bytes(path));
	return 0;
}

static const bench_sys sys;

static int rebuild(const char *log, uint64_t n, uint64_t run, uint64_t t0)
{
	char path[256], lock[300];
	bench_log l;
	bench_rec *r = malloc(BENCH_APPEND * sizeof *r);
	ah_update *u = malloc(BENCH_APPEND * sizeof *u);
	uint64_t appends = bench_appends(n), k;
	ah_txn *t;
	ah_builder *b;
	db d;
	uint8_t key[8];

	if (!r || !u)
		bench_die("out of memory");
	snprintf(path, sizeof path, "/dev/shm/ah-bench-rebuild-%ld", (long)getpid());
	snprintf(lock, sizeof lock, "%s-lock", path);
	unlink(path);
	unlink(lock);
	uint64_t a = bench_now_ns();
	d.heap = open_heap(path, AH_OPEN_CREATE | AH_OPEN_NOSYNC, n);
	unlink(path); /* the map stays: nothing is left behind by a kill */
	unlink(lock);
	d.as_of = appends - 1;
	bench_log_open(&l, log);
	check(ah_txn_begin(d.heap, 0, &t), NULL, "begin");
	check(ah_arrangement_create(t, ARR), t, "create");
	check(ah_builder_begin(t, ARR, 0, appends, &b), t, "builder");
	/* hydration as of the latest time: times advanced to it, consolidated */
	while ((k = bench_log_read(&l, r, BENCH_APPEND)) > 0) {
		to_updates(r, u, k, 1, appends - 1);
		check(ah_builder_push(b, u, k), t, "push");
	}
	check(ah_builder_finish(b), t, "finish");
	check(ah_txn_commit(t), NULL, "commit");
	bench_log_close(&l);
	uint64_t built = bench_now_ns();
	bench_query_key(BENCH_SEED, n, run, 0, key);
	int64_t ans = db_get(&d, key);
	uint64_t c = bench_now_ns();

	bench_put("open_ms", (double)(built - a) / 1e6);
	bench_put("first_answer_ms", (double)(c - t0) / 1e6);
	bench_put("query_ms", (double)(c - built) / 1e6);
	bench_put("exec_to_open_ms", (double)(a - t0) / 1e6);
	bench_put("answer", (double)ans);
	bench_put("ingest_ups", (double)n / ((double)(built - a) / 1e9));
	bench_put("peak_rss_restart_bytes", (double)bench_maxrss());
	bench_timed_gets(&sys, &d, n, run);
	uint64_t groups = 0;
	int64_t sum = 0;
	uint64_t s0 = bench_now_ns();
	db_scan(&d, &groups, &sum);
	bench_put("scan_ms", (double)(bench_now_ns() - s0) / 1e6);
	bench_put("scan_groups", (double)groups);
	bench_put("scan_sum", (double)sum);
	bench_put("peak_rss_steady_bytes", (double)bench_maxrss());
	ah_heap_stat hs;
	check(ah_heap_stat_get(d.heap, &hs), NULL, "stat");
	bench_put("build_heap_bytes", (double)hs.file_alloc_bytes);
	bench_put("file_bytes", (double)bench_alloc_bytes(log));
	check(ah_close(d.heap), NULL, "close");
	free(r);
	free(u);
	return 0;
}

static int extra(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "merge") == 0)
		return merge(argv[2], bench_arg_u64(argv[3]));
	if (argc >= 6 && strcmp(argv[1], "rebuild") == 0)
		return rebuild(argv[2], bench_arg_u64(argv[3]),
		               bench_arg_u64(argv[4]), bench_arg_u64(argv[5]));
	fprintf(stderr, "ah-bench-arrheap: also merge DIR N | rebuild LOG N RUN T0_NS\n");
	return 2;
}

static const bench_sys sys = {
	"arrheap", load, db_open, db_get, db_scan, db_close, extra,
};

int main(int argc, char **argv)
{
	return bench_child_main(&sys, argc, argv);
}
