/*
 * heap/names.c - the names digest: how many keys the arr and source
 * tables hold, and an order-free sum of their hashes, kept in the meta DB
 * and updated by every put of a new key and every delete, in the same
 * transaction.  Format 2.
 *
 * Why: record frames (record.c) catch a damaged key when the record is
 * read, but a lookup by name never reads a record whose key was damaged:
 * LMDB simply does not find "orders" any more, and the arrangement would
 * silently not exist.  So a lookup that finds nothing checks the digest
 * against the table (one walk over its keys, at most once per transaction
 * and table, and only on that miss): a mismatch is AH_ECORRUPT.  Verify
 * compares both tables with the digest always.
 *
 * Record, key "arrheap.names" in the meta DB, native byte order:
 *
 *   off  size  field
 *     0     8  keys in the arr table
 *     8     8  sum over them of XXH3-64(key, seed NAMES_SEED + 0)
 *    16     8  keys in the source table
 *    24     8  sum over them of XXH3-64(key, seed NAMES_SEED + 2)
 *    32     8  XXH3-64 of bytes [0, 32)
 *
 * This file never reads a record's value: only keys.
 */
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

#define NAMES_KEY "arrheap.names"
#define NAMES_SEED 0x6e616d6573ull
#define NAMES_BYTES 40

static bool counted(enum heap_table tb)
{
	return tb == HEAP_T_ARR || tb == HEAP_T_SOURCE;
}

static int slot(enum heap_table tb)
{
	return tb == HEAP_T_ARR ? 0 : 2;
}

static uint64_t key_hash(enum heap_table tb, const void *key, size_t klen)
{
	return XXH3_64bits_withSeed(key, klen, NAMES_SEED + (uint64_t)tb);
}

static void encode(const uint64_t d[4], uint8_t out[NAMES_BYTES])
{
	uint64_t c;

	memcpy(out, d, 32);
	c = XXH3_64bits(out, 32);
	memcpy(out + 32, &c, 8);
}

int heap_names_put_raw(MDB_txn *txn, MDB_dbi meta, const uint64_t d[4])
{
	uint8_t rec[NAMES_BYTES];
	MDB_val k = { sizeof NAMES_KEY - 1, (void *)NAMES_KEY },
		v = { sizeof rec, rec };

	encode(d, rec);
	return heap_err(HEAP_MDB(mdb_put(txn, meta, &k, &v, 0)));
}

/* Loads the digest into t (once).  A format-1 heap has none: no checks. */
static int load(heap_txn *t)
{
	MDB_val k = { sizeof NAMES_KEY - 1, (void *)NAMES_KEY }, v;
	uint64_t c;
	int rc;

	if (t->names_loaded)
		return 0;
	rc = HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_META], &k, &v));
	if (rc == MDB_NOTFOUND && heap_format_of(t->h) < 2) {
		t->names_loaded = true;
		return 0;
	}
	if (rc == MDB_NOTFOUND)
		return CORRUPT("names digest missing");
	if ((rc = heap_err(rc)) != 0)
		return rc;
	if (v.mv_size != NAMES_BYTES)
		return CORRUPT("names digest size");
	memcpy(&c, (const uint8_t *)v.mv_data + 32, 8);
	if (c != XXH3_64bits(v.mv_data, 32))
		return CORRUPT("names digest checksum");
	memcpy(t->names, v.mv_data, 32);
	t->names_have = true;
	t->names_loaded = true;
	return 0;
}

int heap_names_note(heap_txn *t, enum heap_table tb, const void *key,
                    size_t klen, int delta)
{
	int rc;

	if (!counted(tb))
		return 0;
	if ((rc = load(t)) != 0 || !t->names_have)
		return rc;
	t->names[slot(tb)] += (uint64_t)(int64_t)delta;
	t->names[slot(tb) + 1] += (uint64_t)(int64_t)delta * key_hash(tb, key, klen);
	t->names_dirty = true;
	return 0;
}

int heap_names_store(heap_txn *t)
{
	int rc;

	if (!t->names_dirty)
		return 0;
	if ((rc = heap_space_need(t, 2)) != 0)
		return rc;
	return heap_names_put_raw(t->txn, t->h->dbi[HEAP_DBI_META], t->names);
}

/* Walks the keys of tb: their count and hash sum. */
static int walk(MDB_txn *txn, MDB_dbi dbi, enum heap_table tb, uint64_t *n,
                uint64_t *sum)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int rc, op = MDB_FIRST;

	*n = *sum = 0;
	TRY(heap_err(HEAP_MDB(mdb_cursor_open(txn, dbi, &cur))));
	while ((rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, op))) == 0) {
		op = MDB_NEXT;
		++*n;
		*sum += key_hash(tb, k.mv_data, k.mv_size);
	}
	rc = rc == MDB_NOTFOUND ? 0 : heap_err(rc);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}

int heap_names_compute(MDB_txn *txn, const MDB_dbi *dbi, uint64_t d[4])
{
	int rc = walk(txn, dbi[HEAP_T_ARR], HEAP_T_ARR, &d[0], &d[1]);

	return rc ? rc : walk(txn, dbi[HEAP_T_SOURCE], HEAP_T_SOURCE, &d[2], &d[3]);
}

int heap_names_check(heap_txn *t, enum heap_table tb)
{
	uint64_t n, sum;
	int rc;

	if (!counted(tb) || (t->names_ok & (1u << tb)))
		return 0;
	if ((rc = load(t)) != 0)
		return rc;
	if (!t->names_have)
		return 0;
	if ((rc = heap_trees_usable(t->h, HEAP_TREE_BIT(tb))) != 0 ||
	    (rc = walk(t->txn, t->h->dbi[tb], tb, &n, &sum)) != 0)
		return rc;
	if (n != t->names[slot(tb)] || sum != t->names[slot(tb) + 1])
		return CORRUPT("a table's keys differ from the names digest "
		                    "(a key is damaged or lost)");
	t->names_ok |= 1u << tb; /* puts and deletes keep them in step */
	return 0;
}

int heap_catalog_check(heap_txn *t, void (*fn)(const char *problem, void *user),
                       void *user)
{
	MDB_val k = { sizeof HEAP_META_KEY - 1, (void *)HEAP_META_KEY }, v;
	uint8_t uuid[16];
	uint32_t ver;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if ((rc = heap_trees_usable(t->h, HEAP_TREE_BIT(HEAP_TREE_META))) != 0)
		return rc;
	rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_META], &k, &v)));
	if (rc == AH_ENOTFOUND)
		fn("meta record missing", user);
	else if (rc != 0)
		return rc;
	else if (heap_meta_check(v.mv_data, v.mv_size, t->h->psize, uuid, &ver) ||
	         memcmp(uuid, t->h->uuid, 16) != 0)
		fn("meta record damaged (checksum or fields)", user);
	t->names_loaded = false; /* read it as stored now */
	t->names_ok = 0;
	if ((rc = load(t)) == AH_ECORRUPT) {
		fn("names digest damaged or missing", user);
		return 0;
	}
	if (rc != 0 || !t->names_have)
		return rc;
	for (int tb = HEAP_T_ARR; tb <= HEAP_T_SOURCE; tb += 2) {
		rc = heap_names_check(t, (enum heap_table)tb);
		if (rc == AH_ECORRUPT)
			fn(tb == HEAP_T_ARR ? "arrangement names differ from the names "
			                      "digest (a name damaged or lost)"
			                    : "source names differ from the names digest "
			                      "(a name damaged or lost)", user);
		else if (rc != 0)
			return rc;
	}
	return 0;
}
