/*
 * heap/table.c - the small catalog tables (heap_table): one LMDB named DB
 * each, plain get/put/del/next.  HEAP_T_BATCH is MDB_INTEGERKEY: its keys
 * must be exactly 8 bytes (a native u64), which keeps them in numeric order.
 *
 * Values point into the map and are only 2-byte aligned (LMDB leaf nodes):
 * callers decode with memcpy.  Every value is stored framed with a
 * checksum over (table, key, bytes) and checked on every read (record.c);
 * the layers above see only the bytes.  Every MDB_* code is translated
 * here.
 *
 * heap_next never answers a key that is not after `after`: on a damaged
 * tree LMDB's MDB_SET_RANGE + MDB_NEXT can go back, and every loop driven
 * by the previous key (listing arrangements, sources, batch records) would
 * then spin forever.  Such an answer is AH_ECORRUPT.
 *
 * A tree a page check found damaged (heap/pagecheck.c) is never handed to
 * LMDB: every call on it is AH_ECORRUPT (heap_trees_usable).
 *
 * It must never hand out a value whose frame did not check, nor a key that
 * does not follow `after`.
 */
#include <string.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

#define MAX_KEY 511u
/* A write also touches the free list (at commit). */
#define WRITE_TREES(tb) (HEAP_TREE_BIT(tb) | HEAP_TREE_BIT(HEAP_TREE_FREE))

static int check_key(enum heap_table tb, const void *key, size_t klen)
{
	if ((unsigned)tb >= HEAP_T__ALL || key == NULL || klen == 0 ||
	    klen > MAX_KEY)
		return AH_EINVAL;
	if (tb == HEAP_T_BATCH && klen != sizeof(uint64_t))
		return AH_EINVAL;
	/* A hold key never names a catalog record of the meta DB. */
	if (tb == HEAP_T_HOLD && memchr(key, 0, klen) == NULL)
		return AH_EINVAL;
	return 0;
}

/* The meta DB's own records, which a walk of the holds table skips: every
 * other key there is a hold's (and is checked as one). */
static bool catalog_key(enum heap_table tb, const MDB_val *k)
{
	static const char *const keys[] = { HEAP_META_KEY, "arrheap.names" };

	if (tb != HEAP_T_HOLD)
		return false;
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (k->mv_size == strlen(keys[i]) &&
		    memcmp(k->mv_data, keys[i], k->mv_size) == 0)
			return true;
	return false;
}

int heap_get(heap_txn *t, enum heap_table tb, const void *key, size_t klen,
             const void **val, size_t *vlen)
{
	MDB_val k = { klen, (void *)key }, v;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (val == NULL || vlen == NULL || (rc = check_key(tb, key, klen)))
		return AH_EINVAL;
	if ((rc = heap_trees_usable(t->h, HEAP_TREE_BIT(tb))) != 0)
		return rc;
	rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[tb], &k, &v)));
	if (rc == 0) {
		*val = v.mv_data;
		*vlen = v.mv_size;
		rc = heap_record_unframe(t->h, tb, key, klen, val, vlen);
	} else if (rc == AH_ENOTFOUND) {
		/* Missing, or stored under a damaged key? (names.c) */
		int nrc = heap_names_check(t, tb);

		if (nrc != 0)
			rc = nrc;
	}
	return rc;
}

int heap_put(heap_txn *t, enum heap_table tb, const void *key, size_t klen,
             const void *val, size_t vlen)
{
	MDB_val k = { klen, (void *)key }, v = { vlen, (void *)val };
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if ((rc = check_key(tb, key, klen)) != 0 ||
	    (val == NULL && vlen > 0) || vlen > UINT32_MAX - HEAP_RECORD_FRAME)
		return AH_EINVAL;
	if ((rc = heap_trees_usable(t->h, WRITE_TREES(tb))) != 0)
		return heap_txn_fail(t, rc);
	v.mv_size = vlen + HEAP_RECORD_FRAME;
	rc = heap_space_need(t, (klen + v.mv_size + 16) / t->h->psize + 1);
	/* A hold makes the file format 3 (hold.c), in the same txn. */
	if (rc == 0 && tb == HEAP_T_HOLD)
		rc = heap_format_mark(t, HEAP_FORMAT_HOLDS);
	/* Reserved, then framed in place: the bytes are written once.  A new
	 * name of the arr or source table also goes into the names digest. */
	if (rc == 0 && (tb == HEAP_T_ARR || tb == HEAP_T_SOURCE)) {
		rc = HEAP_MDB(mdb_put(t->txn, t->h->dbi[tb], &k, &v,
		                      MDB_RESERVE | MDB_NOOVERWRITE));
		if (rc == 0)
			rc = heap_names_note(t, tb, key, klen, +1);
		else if (rc == MDB_KEYEXIST) {
			v.mv_size = vlen + HEAP_RECORD_FRAME;
			rc = heap_err(HEAP_MDB(mdb_put(t->txn, t->h->dbi[tb], &k, &v,
			                               MDB_RESERVE)));
		} else {
			rc = heap_err(rc);
		}
	} else if (rc == 0) {
		rc = heap_err(HEAP_MDB(mdb_put(t->txn, t->h->dbi[tb], &k, &v,
		                               MDB_RESERVE)));
	}
	if (rc == 0)
		heap_record_frame(tb, key, klen, val, vlen, v.mv_data);
	return heap_txn_fail(t, rc);
}

int heap_del(heap_txn *t, enum heap_table tb, const void *key, size_t klen)
{
	MDB_val k = { klen, (void *)key }, v;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if ((rc = check_key(tb, key, klen)) != 0)
		return rc;
	if ((rc = heap_trees_usable(t->h, WRITE_TREES(tb))) != 0)
		return heap_txn_fail(t, rc);
	rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[tb], &k, &v)));
	if (rc == 0)
		rc = heap_space_need(t, v.mv_size / t->h->psize / 500 + 1);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_del(t->txn, t->h->dbi[tb], &k, NULL)));
	if (rc == 0)
		rc = heap_names_note(t, tb, key, klen, -1);
	return heap_txn_fail(t, rc);
}

/* LMDB's order of the table: mdb_cmp_long on native u64 keys
 * (MDB_INTEGERKEY), else mdb_cmp_memn (bytes, then length). */
static int key_cmp(enum heap_table tb, const void *a, size_t alen,
                   const void *b, size_t blen)
{
	if (tb == HEAP_T_BATCH) {
		uint64_t x, y;

		memcpy(&x, a, sizeof x);
		memcpy(&y, b, sizeof y);
		return x < y ? -1 : x > y;
	}
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c ? c : alen < blen ? -1 : alen > blen;
}

int heap_next(heap_txn *t, enum heap_table tb, const void *after, size_t alen,
              const void **key, size_t *klen, const void **val, size_t *vlen)
{
	MDB_cursor *cur = NULL;
	MDB_val k = { alen, (void *)after }, v;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (key == NULL || klen == NULL || val == NULL || vlen == NULL)
		return AH_EINVAL;
	*key = NULL;
	if (after != NULL && (rc = check_key(tb, after, alen)) != 0)
		return rc;
	if ((unsigned)tb >= HEAP_T__ALL)
		return AH_EINVAL;
	if ((rc = heap_trees_usable(t->h, HEAP_TREE_BIT(tb))) != 0)
		return rc;
	TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[tb], &cur))));
	if (after == NULL) {
		rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_FIRST));
	} else {
		rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE));
		if (rc == 0 && k.mv_size == alen &&
		    memcmp(k.mv_data, after, alen) == 0)
			rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_NEXT));
	}
	/* Two catalog keys at most; each skip still moves forward. */
	for (int skips = 0; rc == 0 && catalog_key(tb, &k) && skips < 2; skips++)
		rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_NEXT));
	TRY(heap_err(rc));
	if (k.mv_size == 0 || k.mv_size > MAX_KEY ||
	    (tb == HEAP_T_BATCH && k.mv_size != sizeof(uint64_t)) ||
	    (after != NULL &&
	     key_cmp(tb, k.mv_data, k.mv_size, after, alen) <= 0)) {
		rc = CORRUPT("table key out of order or of a bad size");
		goto out;
	}
	*key = k.mv_data;
	*klen = k.mv_size;
	*val = v.mv_data;
	*vlen = v.mv_size;
	rc = heap_record_unframe(t->h, tb, k.mv_data, k.mv_size, val, vlen);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}

int heap_last_below(heap_txn *t, enum heap_table tb, uint64_t below,
                    uint64_t *id)
{
	MDB_cursor *cur = NULL;
	MDB_val k = { sizeof below, &below }, v;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (tb != HEAP_T_BATCH || id == NULL)
		return AH_EINVAL;
	if ((rc = heap_trees_usable(t->h, HEAP_TREE_BIT(tb))) != 0)
		return rc;
	*id = 0;
	TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[tb], &cur))));
	/* The first key >= below, then the one before it (or the last). */
	rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE));
	rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, rc == 0 ? MDB_PREV : MDB_LAST));
	if (rc == MDB_NOTFOUND) {
		rc = 0;
		goto out;
	}
	TRY(heap_err(rc));
	if (k.mv_size != sizeof *id) {
		rc = CORRUPT("batch key is not a u64");
		goto out;
	}
	memcpy(id, k.mv_data, sizeof *id);
	if (*id >= below)
		rc = CORRUPT("table key out of order");
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}
