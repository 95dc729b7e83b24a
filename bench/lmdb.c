/*
 * bench/lmdb.c - ah-bench-lmdb: systems lmdb-kv-warm and lmdb-kv-cold, the
 * naive LMDB design: one B-tree entry per update, key | val | time (big
 * endian) -> diff, in one LMDB file (MDB_NOSUBDIR) with default durability.
 *
 * An append is one write transaction of its (consolidated) puts, committed
 * with a sync.  A query is a read transaction, MDB_SET_RANGE on the key's
 * 8-byte prefix and a walk summing diffs with time <= the latest time.
 *
 *   load DIR LOG N | start DIR N RUN T0_NS | scan DIR N
 *
 * It must never weaken LMDB's durability (no MDB_NOSYNC, MDB_NOMETASYNC,
 * MDB_MAPASYNC or MDB_WRITEMAP): every append's commit is synced, as in the
 * systems it is compared with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lmdb.h>

#include "bench/bench.h"

typedef struct db {
	MDB_env *env;
	MDB_dbi dbi;
	uint64_t as_of;
} db;

static void check(int rc, const char *what)
{
	if (rc != 0)
		bench_die("lmdb %s: %s", what, mdb_strerror(rc));
}

static void path_of(char *buf, size_t len, const char *dir)
{
	snprintf(buf, len, "%s/lmdb.mdb", dir);
}

static db *open_db(const char *dir, uint64_t n, unsigned txn_flags)
{
	char path[4096];
	db *d = malloc(sizeof *d);
	MDB_txn *t;
	uint64_t map = n * 400;

	if (!d)
		bench_die("out of memory");
	path_of(path, sizeof path, dir);
	check(mdb_env_create(&d->env), "env");
	check(mdb_env_set_mapsize(d->env, map < (4ull << 30) ? (4ull << 30) : map),
	      "mapsize");
	check(mdb_env_open(d->env, path, MDB_NOSUBDIR, 0644), "open");
	if (txn_flags & MDB_RDONLY)
		bench_madv_random(path);
	check(mdb_txn_begin(d->env, NULL, txn_flags, &t), "begin");
	check(mdb_dbi_open(t, NULL, 0, &d->dbi), "dbi");
	check(mdb_txn_commit(t), "commit");
	d->as_of = bench_appends(n) - 1;
	return d;
}

static void close_db(void *p)
{
	db *d = p;

	mdb_env_close(d->env);
	free(d);
}

static void encode(const bench_rec *r, uint8_t k[32])
{
	memcpy(k, r->key, 8);
	memcpy(k + 8, r->val, 16);
	for (int i = 0; i < 8; i++)
		k[24 + i] = (uint8_t)(r->time >> (56 - 8 * i));
}

static uint64_t time_of(const uint8_t *k)
{
	uint64_t t = 0;

	for (int i = 0; i < 8; i++)
		t = t << 8 | k[24 + i];
	return t;
}

static void load(const char *dir, const char *log, uint64_t n)
{
	char path[4096];
	bench_log l;
	bench_rec *r = malloc(BENCH_APPEND * sizeof *r);
	size_t k;
	uint8_t key[32];
	MDB_txn *t;

	if (!r)
		bench_die("out of memory");
	bench_log_open(&l, log);
	uint64_t t0 = bench_now_ns();
	db *d = open_db(dir, n, 0);
	while ((k = bench_log_read(&l, r, BENCH_APPEND)) > 0) {
		k = bench_consolidate(r, k);
		check(mdb_txn_begin(d->env, NULL, 0, &t), "begin");
		for (size_t i = 0; i < k; i++) {
			encode(&r[i], key);
			MDB_val kv = { sizeof key, key }, dv = { 8, &r[i].diff };
			check(mdb_put(t, d->dbi, &kv, &dv, 0), "put");
		}
		check(mdb_txn_commit(t), "commit");
	}
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
	return open_db(dir, n, MDB_RDONLY);
}

static int64_t db_get(void *p, const uint8_t key[8])
{
	db *d = p;
	MDB_txn *t;
	MDB_cursor *c;
	MDB_val kv = { 8, (void *)key }, dv;
	int64_t sum = 0, diff;
	int rc;

	check(mdb_txn_begin(d->env, NULL, MDB_RDONLY, &t), "begin");
	check(mdb_cursor_open(t, d->dbi, &c), "cursor");
	for (rc = mdb_cursor_get(c, &kv, &dv, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(c, &kv, &dv, MDB_NEXT)) {
		if (kv.mv_size != 32 || dv.mv_size != 8 || memcmp(kv.mv_data, key, 8))
			break;
		memcpy(&diff, dv.mv_data, 8);
		if (time_of(kv.mv_data) <= d->as_of)
			sum += diff;
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		check(rc, "get");
	mdb_cursor_close(c);
	mdb_txn_abort(t);
	return sum;
}

static void db_scan(void *p, uint64_t *groups, int64_t *sum)
{
	db *d = p;
	MDB_txn *t;
	MDB_cursor *c;
	MDB_val kv, dv;
	uint8_t prev[24];
	int have = 0, rc;
	int64_t g = 0, diff;

	check(mdb_txn_begin(d->env, NULL, MDB_RDONLY, &t), "begin");
	check(mdb_cursor_open(t, d->dbi, &c), "cursor");
	for (rc = mdb_cursor_get(c, &kv, &dv, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(c, &kv, &dv, MDB_NEXT)) {
		if (kv.mv_size != 32 || dv.mv_size != 8)
			bench_die("lmdb: unexpected entry");
		if (have && memcmp(prev, kv.mv_data, 24) != 0) {
			*groups += g != 0;
			g = 0;
		}
		memcpy(prev, kv.mv_data, 24);
		have = 1;
		memcpy(&diff, dv.mv_data, 8);
		g += diff;
		*sum += diff;
	}
	if (rc != MDB_NOTFOUND)
		check(rc, "scan");
	*groups += have && g != 0;
	mdb_cursor_close(c);
	mdb_txn_abort(t);
}

static const bench_sys sys = {
	"lmdb", load, db_open, db_get, db_scan, close_db, NULL,
};

int main(int argc, char **argv)
{
	return bench_child_main(&sys, argc, argv);
}
