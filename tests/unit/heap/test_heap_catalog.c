/*
 * tests/unit/heap/test_heap_catalog.c - LMDB files whose catalog is not
 * arrheap's: a "meta" DB without the other named DBs, one named DB gone
 * or made with other flags, a meta record of another size, magic or
 * checksum.  heap_open decides most opens from the pages it reads with
 * pread (heap/format.c, heap/pagecheck.c) and asks a read-only LMDB
 * environment only when those pages do not prove the catalog sound; each
 * case here must fail with its exact code, writable or read-only, and
 * leave the file's bytes and size as they were (a writable environment
 * would have grown the file to its map at once).
 */
#include <lmdb.h>

#include "heap_test.h"

#define SEED 556u

/* heap_open fails with want and leaves the file as it was (XXH3 of every
 * byte, and the size). */
static void expect_open(const char *path, unsigned flags, int want)
{
	ah_open_opts o = tl_opts(flags, 0, 0);
	uint64_t size, size2, hash = tl_file_hash(path, &size);
	heap *h = NULL;
	int rc = heap_open(path, &o, &h);

	cr_assert_neq(size, 0);
	cr_assert_eq(rc, want, "open %s (flags 0x%x): got %s, want %s", path,
	             flags, ah_err_name(rc), ah_err_name(want));
	cr_assert_null(h);
	cr_assert_eq(tl_file_hash(path, &size2), hash, "the file changed");
	cr_assert_eq(size2, size, "size %" PRIu64 " -> %" PRIu64, size, size2);
}

/* Both kinds of open, each refused alike. */
static void expect_refused(const char *path, int want)
{
	expect_open(path, 0, want);
	expect_open(path, AH_OPEN_CREATE, want);
	expect_open(path, AH_OPEN_RDONLY, want);
}

/* A plain LMDB environment on path (no WRITEMAP: the file never grows to
 * a map) and a write txn in it. */
static void lmdb_begin(const char *path, MDB_env **env, MDB_txn **txn)
{
	cr_assert_eq(mdb_env_create(env), 0);
	cr_assert_eq(mdb_env_set_maxdbs(*env, 8), 0);
	cr_assert_eq(mdb_env_open(*env, path, MDB_NOSUBDIR, 0644), 0);
	cr_assert_eq(mdb_txn_begin(*env, NULL, 0, txn), 0);
}

static void lmdb_end(MDB_env *env, MDB_txn *txn)
{
	cr_assert_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

/* A heap with a few chunks; its meta record in rec. */
static void make_heap(const char *path, unsigned char rec[64])
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 4 * MiB, 0);
	heap *h;
	heap_txn *t;
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = { 12, "arrheap.meta" }, v;

	cr_assert_eq(heap_open(path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 3; i++)
		ht_put_chunk(t, 20000, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	lmdb_begin(path, &env, &txn);
	cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
	cr_assert_eq(v.mv_size, 64);
	memcpy(rec, v.mv_data, 64);
	mdb_txn_abort(txn);
	mdb_env_close(env);
}

/* Drops named DB name; when flags >= 0, makes it anew (empty) with them. */
static void remake_db(const char *path, const char *name, int flags)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;

	lmdb_begin(path, &env, &txn);
	cr_assert_eq(mdb_dbi_open(txn, name, 0, &dbi), 0);
	cr_assert_eq(mdb_drop(txn, dbi, 1), 0);
	if (flags >= 0)
		cr_assert_eq(mdb_dbi_open(txn, name, (unsigned)flags | MDB_CREATE,
		                          &dbi), 0);
	lmdb_end(env, txn);
}

/* A foreign LMDB file: named DB "meta" (with meta_flags) holding val of
 * len bytes under arrheap's key, and the named DBs in others, each with
 * arrheap's flags. */
static void foreign(const char *path, unsigned meta_flags, const void *val,
                    size_t len, const char *const *others)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = { 12, "arrheap.meta" }, v = { len, (void *)val };

	unlink(path);
	lmdb_begin(path, &env, &txn);
	cr_assert_eq(mdb_dbi_open(txn, "meta", meta_flags | MDB_CREATE, &dbi), 0);
	cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
	for (; *others != NULL; others++) {
		unsigned f = strcmp(*others, "batch") == 0 ||
		             strcmp(*others, "chunks") == 0 ? MDB_INTEGERKEY : 0;

		cr_assert_eq(mdb_dbi_open(txn, *others, f | MDB_CREATE, &dbi), 0);
	}
	lmdb_end(env, txn);
}

/* A heap that lost one named DB, or has one of other flags: damaged. */
Test(heap_catalog, named_db_missing_or_of_other_flags)
{
	static const struct {
		const char *name;
		int flags; /* -1: dropped */
	} cases[] = {
		{ "source", -1 }, { "chunks", -1 }, { "arr", -1 },
		{ "batch", 0 },   /* INTEGERKEY lost */
		{ "arr", MDB_INTEGERKEY },
		{ "source", MDB_DUPSORT },
	};
	unsigned char rec[64];
	tl_dir d = tl_tmpdir("heap");

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cr_log_info("%s flags %d", cases[i].name, cases[i].flags);
		make_heap(d.path, rec);
		remake_db(d.path, cases[i].name, cases[i].flags);
		expect_refused(d.path, AH_ECORRUPT);
		unlink(d.path);
	}
	tl_rmdir(&d);
}

/* A "meta" DB of other flags is not arrheap's: refused before anything
 * reads it (liblmdb would read it with another compare). */
Test(heap_catalog, meta_db_of_other_flags)
{
	static const char *const all[] = { "arr", "batch", "source", "chunks",
	                                   NULL };
	unsigned char rec[64];
	tl_dir d = tl_tmpdir("heap");

	make_heap(d.path, rec);
	foreign(d.path, MDB_DUPSORT, rec, sizeof rec, all);
	expect_refused(d.path, AH_EFORMAT);
	foreign(d.path, MDB_REVERSEKEY, rec, sizeof rec, all);
	expect_refused(d.path, AH_EFORMAT);
	tl_rmdir(&d);
}

/* A "meta" DB holding a good record, the other DBs partly there. */
Test(heap_catalog, meta_db_without_the_others)
{
	static const char *const none[] = { NULL };
	static const char *const three[] = { "arr", "batch", "source", NULL };
	static const char *const no_arr[] = { "batch", "source", "chunks",
	                                      NULL };
	unsigned char rec[64];
	tl_dir d = tl_tmpdir("heap");

	make_heap(d.path, rec);
	foreign(d.path, 0, rec, sizeof rec, none);
	expect_refused(d.path, AH_ECORRUPT);
	foreign(d.path, 0, rec, sizeof rec, three);
	expect_refused(d.path, AH_ECORRUPT);
	foreign(d.path, 0, rec, sizeof rec, no_arr);
	expect_refused(d.path, AH_ECORRUPT);
	tl_rmdir(&d);
}

/* Every named DB there, the meta record wrong. */
Test(heap_catalog, meta_record_wrong)
{
	static const char *const all[] = { "arr", "batch", "source", "chunks",
	                                   NULL };
	unsigned char rec[64], bad[65];
	tl_dir d = tl_tmpdir("heap");

	make_heap(d.path, rec);
	foreign(d.path, 0, rec, 63, all); /* short */
	expect_refused(d.path, AH_EFORMAT);
	memcpy(bad, rec, 64);
	bad[64] = 0;
	foreign(d.path, 0, bad, 65, all); /* long */
	expect_refused(d.path, AH_EFORMAT);
	memcpy(bad, rec, 64);
	bad[0] ^= 1; /* magic */
	foreign(d.path, 0, bad, 64, all);
	expect_refused(d.path, AH_EFORMAT);
	memcpy(bad, rec, 64);
	bad[50] ^= 1; /* a uuid byte: the record's checksum fails */
	foreign(d.path, 0, bad, 64, all);
	expect_refused(d.path, AH_ECORRUPT);
	foreign(d.path, 0, "", 0, all); /* empty value */
	expect_refused(d.path, AH_EFORMAT);
	tl_rmdir(&d);
}

/* The controls: the untouched heap opens (writable: its catalog proven
 * from the pages read), and so does the hand-made copy of its catalog. */
Test(heap_catalog, sound_catalog_opens)
{
	static const char *const all[] = { "arr", "batch", "source", "chunks",
	                                   NULL };
	unsigned char rec[64];
	ah_open_opts o = tl_opts(0, 0, 0);
	tl_dir d = tl_tmpdir("heap");
	heap *h;

	make_heap(d.path, rec);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_close(h), 0);
	o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_close(h), 0);
	foreign(d.path, 0, rec, sizeof rec, all);
	o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* Adds n plain keys of 200-byte values to the main DB of path. */
static void main_keys(const char *path, int n)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	char key[16], val[200];

	memset(val, 'v', sizeof val);
	lmdb_begin(path, &env, &txn);
	cr_assert_eq(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
	for (int i = 0; i < n; i++) {
		MDB_val k = { (size_t)snprintf(key, sizeof key, "k%05d", i), key },
		        v = { sizeof val, val };

		cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
	}
	lmdb_end(env, txn);
}

/* A main DB of many pages: open reads up to 32 of its pages, and refuses
 * one of more, which no arrheap heap has, as foreign. */
Test(heap_catalog, main_db_of_many_pages)
{
	static const char *const all[] = { "arr", "batch", "source", "chunks",
	                                   NULL };
	unsigned char rec[64];
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	ah_heap_stat st;
	tl_dir d = tl_tmpdir("heap");
	heap *h;

	make_heap(d.path, rec);
	foreign(d.path, 0, rec, sizeof rec, all);
	main_keys(d.path, 150); /* about 10 leaves and their branch */
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_gt(st.pages_used, 2 + 8);
	cr_assert_eq(heap_close(h), 0);
	foreign(d.path, 0, rec, sizeof rec, all);
	main_keys(d.path, 1000); /* about 60 leaves */
	expect_refused(d.path, AH_EFORMAT);
	tl_rmdir(&d);
}
