/*
 * tests/unit/heap/test_heap_format.c - foreign and damaged files: random
 * bytes, an empty file, truncated heaps, plain LMDB files made by another
 * program, and heaps whose meta record is of another version or byte order.
 * Each open must fail with the exact code designed in heap/format.c, never
 * crash, and leave the file's bytes unchanged.
 */
#include <lmdb.h>

#include "heap_test.h"

#define SEED 555u

static void expect_open(const char *path, unsigned flags, int want)
{
	ah_open_opts o = tl_opts(flags, 0, 0);
	tl_print before = tl_fingerprint(path), after;
	heap *h = NULL;
	int rc = heap_open(path, &o, &h);

	cr_assert_eq(rc, want, "open %s: got %s, want %s", path,
	             ah_err_name(rc), ah_err_name(want));
	cr_assert_null(h);
	after = tl_fingerprint(path);
	cr_assert_eq(after.size, before.size);
	cr_assert_eq(after.hash, before.hash);
}

static void write_file(const char *path, const void *buf, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, buf, n), (ssize_t)n);
	close(fd);
}

/* A small heap with a few chunks; returns pages_used. */
static uint64_t make_heap(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 4 * MiB, 0);
	heap *h;
	heap_txn *t;
	ah_heap_stat st;

	cr_assert_eq(heap_open(path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 4; i++)
		ht_put_chunk(t, 200000, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_eq(heap_close(h), 0);
	return st.pages_used;
}

Test(heap_format, random_empty_short)
{
	tl_dir d;
	unsigned char buf[65536];
	uint64_t s = SEED;

	cr_log_info("seed %u", SEED);
	d = tl_tmpdir("heap");
	ht_fill(buf, sizeof buf, s, 1);
	write_file(d.path, buf, sizeof buf);
	expect_open(d.path, 0, AH_EFORMAT);
	expect_open(d.path, AH_OPEN_RDONLY, AH_EFORMAT);
	write_file(d.path, buf, 100);
	expect_open(d.path, AH_OPEN_CREATE, AH_EFORMAT);
	write_file(d.path, buf, 0);
	expect_open(d.path, AH_OPEN_CREATE, AH_EFORMAT);
	expect_open(d.path, AH_OPEN_RDONLY, AH_EFORMAT);
	tl_rmdir(&d);
}

Test(heap_format, missing_and_args)
{
	tl_dir d;
	heap *h = NULL;
	ah_open_opts o = tl_opts(0, 0, 0);

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), AH_ENOTFOUND);
	o.flags = AH_OPEN_CREATE | AH_OPEN_RDONLY;
	cr_assert_eq(heap_open(d.path, &o, &h), AH_EREADONLY);
	cr_assert_eq(access(d.path, F_OK), -1, "a failed open creates nothing");
	o.flags = 0x100;
	cr_assert_eq(heap_open(d.path, &o, &h), AH_EINVAL);
	o.flags = AH_OPEN_CREATE;
	o.size = 0;
	cr_assert_eq(heap_open(d.path, &o, &h), AH_EINVAL);
	cr_assert_eq(heap_open(NULL, NULL, &h), AH_EINVAL);
	cr_assert_null(h);
	tl_rmdir(&d);
}

Test(heap_format, truncated)
{
	tl_dir d;
	uint64_t used, ps = (uint64_t)sysconf(_SC_PAGESIZE);

	d = tl_tmpdir("heap");
	used = make_heap(d.path);
	cr_assert_gt(used, 100);
	cr_assert_eq(truncate(d.path, (off_t)(used / 2 * ps)), 0);
	expect_open(d.path, 0, AH_ECORRUPT);
	expect_open(d.path, AH_OPEN_RDONLY, AH_ECORRUPT);
	cr_assert_eq(truncate(d.path, (off_t)ps), 0); /* meta page 1 gone */
	expect_open(d.path, 0, AH_ECORRUPT);
	tl_rmdir(&d);
}

static void lmdb_plain(const char *path, const char *key, bool named)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = { strlen(key), (void *)key }, v = { 5, "value" };

	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(env, 4), 0);
	cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0644), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, named ? "meta" : NULL,
	                          named ? MDB_CREATE : 0, &dbi),
	             0);
	cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

Test(heap_format, foreign_lmdb)
{
	tl_dir d;

	d = tl_tmpdir("heap");
	lmdb_plain(d.path, "hello", false);
	expect_open(d.path, 0, AH_EFORMAT);
	expect_open(d.path, AH_OPEN_RDONLY, AH_EFORMAT);
	unlink(d.path);
	lmdb_plain(d.path, "meta", false); /* "meta" is a plain key */
	expect_open(d.path, AH_OPEN_CREATE, AH_EFORMAT);
	unlink(d.path);
	lmdb_plain(d.path, "other", true); /* a "meta" DB, no record */
	expect_open(d.path, AH_OPEN_CREATE, AH_EFORMAT);
	tl_rmdir(&d);
}

/* Rewrites the u32 at off in the arrheap meta record. */
static void patch_meta(const char *path, size_t off, uint32_t val)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = { 12, "arrheap.meta" }, v, nv;
	unsigned char rec[64];

	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(env, 8), 0);
	cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0644), 0);
	cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
	cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
	cr_assert_eq(v.mv_size, sizeof rec);
	memcpy(rec, v.mv_data, sizeof rec);
	memcpy(rec + off, &val, 4);
	nv.mv_size = sizeof rec;
	nv.mv_data = rec;
	cr_assert_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

Test(heap_format, meta_record)
{
	static const struct {
		size_t off;
		uint32_t val;
	} patches[] = {
		{ 8, 99 },          /* format version */
		{ 12, 65536 },      /* page size */
		{ 16, 0x04030201 }, /* byte order */
		{ 20, 6 },          /* number of classes */
		{ 40, 512 },        /* a class size */
		{ 0, 0x41414141 },  /* magic */
	};
	tl_dir d;
	ah_open_opts o = tl_opts(0, 0, 0);
	heap *h;

	d = tl_tmpdir("heap");
	for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
		make_heap(d.path);
		patch_meta(d.path, patches[i].off, patches[i].val);
		expect_open(d.path, 0, AH_EFORMAT);
		expect_open(d.path, AH_OPEN_RDONLY | AH_OPEN_CREATE,
		            AH_EFORMAT);
		unlink(d.path);
	}
	/* And the unpatched heap opens. */
	make_heap(d.path);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_format, lmdb_meta_pages)
{
	tl_dir d;
	uint32_t v;
	int fd;

	d = tl_tmpdir("heap");
	make_heap(d.path);
	fd = open(d.path, O_RDWR);
	cr_assert_geq(fd, 0);
	v = 0xDEC0EFBE; /* LMDB's magic, other byte order */
	cr_assert_eq(pwrite(fd, &v, 4, 16), 4);
	close(fd);
	expect_open(d.path, 0, AH_EFORMAT);
	unlink(d.path);

	make_heap(d.path);
	fd = open(d.path, O_RDWR);
	v = 2; /* another LMDB data version */
	cr_assert_eq(pwrite(fd, &v, 4, 20), 4);
	close(fd);
	expect_open(d.path, 0, AH_EFORMAT);
	unlink(d.path);

	make_heap(d.path);
	fd = open(d.path, O_RDWR);
	v = 0; /* meta page 1 damaged */
	cr_assert_eq(pwrite(fd, &v, 4, sysconf(_SC_PAGESIZE) + 16), 4);
	close(fd);
	expect_open(d.path, 0, AH_ECORRUPT);
	tl_rmdir(&d);
}

/* A process killed inside ah_open(AH_OPEN_CREATE), after LMDB wrote its
 * meta pages and before the first commit, leaves an LMDB file with txnid 0:
 * it holds nothing, so AH_OPEN_CREATE finishes creating it; without
 * AH_OPEN_CREATE it is still refused. */
Test(heap_format, interrupted_create_is_finished)
{
	tl_dir d;
	MDB_env *env;
	heap *h;

	d = tl_tmpdir("heap");
	cr_assert_eq(mdb_env_create(&env), 0);
	cr_assert_eq(mdb_env_set_mapsize(env, 1 << 20), 0);
	cr_assert_eq(mdb_env_open(env, d.path, MDB_NOSUBDIR | MDB_WRITEMAP, 0644), 0);
	mdb_env_close(env);
	expect_open(d.path, 0, AH_EFORMAT);
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 4 * MiB, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_close(h), 0);
	o = tl_opts(0, 4 * MiB, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
