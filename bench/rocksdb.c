/*
 * bench/rocksdb.c - ah-bench-rocksdb: systems rocksdb-warm and rocksdb-cold,
 * through RocksDB's C API (rocksdb/c.h, Debian's librocksdb-dev).
 *
 * The updates are stored as Flink's and Materialize's RocksDB state stores
 * do: key | val | time (big endian) -> diff, one entry per (key, val, time).
 * An append is one WriteBatch written with sync = true (durable commit);
 * the harness consolidates equal (key, val) within an append first, since
 * a put replaces.  A query seeks the key's 8-byte prefix and sums the diffs
 * with time <= the latest time.  Options are RocksDB's defaults plus
 * create_if_missing and increase_parallelism(2) (this machine's cores).
 *
 *   load DIR LOG N | start DIR N RUN T0_NS | scan DIR N
 *   kill DIR N     writes one more unsynced append, then SIGKILLs itself, so
 *                  the next open replays the WAL
 *
 * It must never let the kill test's unsynced append into an answer (get and
 * scan count only times <= the loaded state's latest), nor load without
 * sync: every load append is one WriteBatch written with sync = true.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "bench/bench.h"

typedef struct db {
	rocksdb_t *db;
	rocksdb_options_t *opt;
	rocksdb_readoptions_t *ro;
	uint64_t as_of;  /* the latest time of the loaded state */
} db;

static void check(char *err, const char *what)
{
	if (err)
		bench_die("rocksdb %s: %s", what, err);
}

static void path_of(char *buf, size_t len, const char *dir)
{
	snprintf(buf, len, "%s/rocks", dir);
}

static db *open_db(const char *dir, uint64_t n, int create)
{
	char path[4096];
	char *err = NULL;
	db *d = malloc(sizeof *d);

	if (!d)
		bench_die("out of memory");
	path_of(path, sizeof path, dir);
	d->opt = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(d->opt, create);
	rocksdb_options_increase_parallelism(d->opt, 2);
	d->db = rocksdb_open(d->opt, path, &err);
	check(err, "open");
	d->ro = rocksdb_readoptions_create();
	d->as_of = bench_appends(n) - 1;
	return d;
}

static void close_db(void *p)
{
	db *d = p;

	rocksdb_readoptions_destroy(d->ro);
	rocksdb_close(d->db);
	rocksdb_options_destroy(d->opt);
	free(d);
}

static void encode(const bench_rec *r, char k[32], char v[8])
{
	memcpy(k, r->key, 8);
	memcpy(k + 8, r->val, 16);
	for (int i = 0; i < 8; i++)
		k[24 + i] = (char)(r->time >> (56 - 8 * i));
	memcpy(v, &r->diff, 8);
}

static void write_append(db *d, bench_rec *r, size_t k, int sync)
{
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	char key[32], val[8], *err = NULL;

	k = bench_consolidate(r, k);
	for (size_t i = 0; i < k; i++) {
		encode(&r[i], key, val);
		rocksdb_writebatch_put(wb, key, sizeof key, val, sizeof val);
	}
	rocksdb_writeoptions_set_sync(wo, (unsigned char)sync);
	rocksdb_write(d->db, wo, wb, &err);
	check(err, "write");
	rocksdb_writeoptions_destroy(wo);
	rocksdb_writebatch_destroy(wb);
}

static void load(const char *dir, const char *log, uint64_t n)
{
	char path[4096];
	bench_log l;
	bench_rec *r = malloc(BENCH_APPEND * sizeof *r);
	size_t k;

	if (!r)
		bench_die("out of memory");
	bench_log_open(&l, log);
	uint64_t t0 = bench_now_ns();
	db *d = open_db(dir, n, 1);
	while ((k = bench_log_read(&l, r, BENCH_APPEND)) > 0)
		write_append(d, r, k, 1);
	uint64_t t1 = bench_now_ns();
	bench_put("ingest_ups", (double)n / ((double)(t1 - t0) / 1e9));
	bench_put("load_s", (double)(t1 - t0) / 1e9);
	bench_put("peak_rss_steady_bytes", (double)bench_maxrss());
	close_db(d);
	bench_log_close(&l);
	path_of(path, sizeof path, dir);
	bench_put("file_bytes", (double)bench_alloc_bytes(path));
	free(r);
}

static void *db_open(const char *dir, uint64_t n)
{
	return open_db(dir, n, 0);
}

static uint64_t time_of(const char *k)
{
	uint64_t t = 0;

	for (int i = 0; i < 8; i++)
		t = t << 8 | (uint8_t)k[24 + i];
	return t;
}

/* the sum as of the loaded state's latest time (the kill test's later
 * append stays out of the answer) */
static int64_t db_get(void *p, const uint8_t key[8])
{
	db *d = p;
	rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, d->ro);
	int64_t sum = 0, diff;
	size_t kl, vl;

	for (rocksdb_iter_seek(it, (const char *)key, 8); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		const char *k = rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		if (kl != 32 || vl != 8 || memcmp(k, key, 8) != 0)
			break;
		memcpy(&diff, v, 8);
		if (time_of(k) <= d->as_of)
			sum += diff;
	}
	rocksdb_iter_destroy(it);
	return sum;
}

static void db_scan(void *p, uint64_t *groups, int64_t *sum)
{
	db *d = p;
	rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, d->ro);
	char prev[24];
	int have = 0;
	int64_t g = 0, diff;
	size_t kl, vl;

	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		const char *k = rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		if (kl != 32 || vl != 8)
			bench_die("rocksdb: unexpected entry");
		if (have && memcmp(prev, k, 24) != 0) {
			*groups += g != 0;
			g = 0;
		}
		memcpy(prev, k, 24);
		have = 1;
		memcpy(&diff, v, 8);
		if (time_of(k) > d->as_of)
			diff = 0;
		g += diff;
		*sum += diff;
	}
	*groups += have && g != 0;
	rocksdb_iter_destroy(it);
}

/* one more append of fresh updates at time `appends`, in the WAL only */
static int kill_after_write(const char *dir, uint64_t n)
{
	bench_rec *r = malloc(BENCH_APPEND * sizeof *r);
	uint64_t t = bench_appends(n);

	if (!r)
		bench_die("out of memory");
	for (uint64_t i = 0; i < BENCH_APPEND; i++) {
		bench_gen(BENCH_SEED ^ 0xdead, n, i, &r[i]);
		r[i].time = t;
	}
	db *d = open_db(dir, n, 0);
	write_append(d, r, BENCH_APPEND, 0);
	fflush(stdout);
	raise(SIGKILL);
	return 1;
}

static int extra(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "kill") == 0)
		return kill_after_write(argv[2], bench_arg_u64(argv[3]));
	fprintf(stderr, "ah-bench-rocksdb: also kill DIR N\n");
	return 2;
}

static const bench_sys sys = {
	"rocksdb", load, db_open, db_get, db_scan, close_db, extra,
};

int main(int argc, char **argv)
{
	return bench_child_main(&sys, argc, argv);
}
