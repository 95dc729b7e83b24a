/*
 * heap/hold.c - read hold records: their key and byte layout, their place
 * in the meta DB, and the format-3 mark the first of them sets.
 *
 * A hold is a reader's promise from the writer: the arrangement's since
 * will not pass its frontier while it lives (txn/hold.c decides what
 * "lives" means: leases, release).  Records live in the meta DB beside the
 * catalog records ("arrheap.meta", "arrheap.names"), as table HEAP_T_HOLD:
 * a heap without holds has exactly the named DBs a format-2 binary knows,
 * and the transaction that writes a heap's first hold rewrites the meta
 * record as format 3, which such binaries refuse (AH_EFORMAT), so none of
 * them can ever compact past a hold.
 *
 * Key: arrangement name, one NUL byte, hold name (each 1 to AH_NAME_MAX
 * bytes): every hold of an arrangement is contiguous, and no catalog key
 * has a NUL.  Value, framed by record.c (checksum over table, key, bytes),
 * native byte order:
 *
 *   off  size  field
 *     0     4  magic      "AHHD"
 *     4     2  version    1
 *     6     2  flags      HEAP_HOLD_RELEASED 0x1; other bits 0
 *     8     8  frontier   since <= frontier while it holds
 *    16     8  lease_ms   0: no lease
 *    24     8  renewed_ms CLOCK_REALTIME ms since the epoch of the last set
 *
 * Every record read is checked (frame, magic, version, flags, size, key
 * shape); a bad one is AH_ECORRUPT, never a hold that silently is not
 * there.  This file never decides whether a hold blocks a since.
 */
#include <string.h>

#include "heap/codec.h"
#include "heap/fault.h"
#include "heap/heap_int.h"

#define HOLD_MAGIC "AHHD"
#define HOLD_VERSION 1
#define HOLD_BYTES 32

static int key_make(const char *arr, const char *name, uint8_t *key,
                    size_t *klen)
{
	size_t a, n;

	if (arr == NULL || name == NULL)
		return AH_EINVAL;
	a = strlen(arr);
	n = strlen(name);
	if (a == 0 || a > AH_NAME_MAX || n == 0 || n > AH_NAME_MAX)
		return AH_EINVAL;
	memcpy(key, arr, a);
	key[a] = 0;
	memcpy(key + a + 1, name, n);
	*klen = a + 1 + n;
	return 0;
}

/* Splits a stored key into out->arr and out->name: 0 or AH_ECORRUPT. */
static int key_split(const uint8_t *key, size_t klen, heap_hold *out)
{
	const uint8_t *nul = klen ? memchr(key, 0, klen) : NULL;
	size_t a, n;

	if (nul == NULL)
		return CORRUPT("hold key without its separator");
	a = (size_t)(nul - key);
	n = klen - a - 1;
	if (a == 0 || a > AH_NAME_MAX || n == 0 || n > AH_NAME_MAX ||
	    memchr(nul + 1, 0, n) != NULL)
		return CORRUPT("hold key of a bad shape");
	memcpy(out->arr, key, a);
	out->arr[a] = 0;
	memcpy(out->name, nul + 1, n);
	out->name[n] = 0;
	return 0;
}

static int decode(const void *val, size_t vlen, heap_hold *out)
{
	const uint8_t *p = val;

	if (vlen != HOLD_BYTES || memcmp(p, HOLD_MAGIC, 4) != 0 ||
	    get_u16(p + 4) != HOLD_VERSION ||
	    (get_u16(p + 6) & ~HEAP_HOLD_RELEASED) != 0)
		return CORRUPT("hold record: size, magic, version or flags");
	out->flags = get_u16(p + 6);
	out->frontier = get_u64(p + 8);
	out->lease_ms = get_u64(p + 16);
	out->renewed_ms = get_u64(p + 24);
	return 0;
}

int heap_hold_get(heap_txn *t, const char *arr, const char *name,
                  heap_hold *out)
{
	uint8_t key[HEAP_HOLD_KEY_MAX];
	const void *v;
	size_t klen, vlen;
	int rc;

	if (out == NULL || (rc = key_make(arr, name, key, &klen)) != 0)
		return AH_EINVAL;
	if ((rc = heap_get(t, HEAP_T_HOLD, key, klen, &v, &vlen)) != 0)
		return rc;
	if ((rc = key_split(key, klen, out)) != 0)
		return rc;
	return decode(v, vlen, out);
}

int heap_hold_put(heap_txn *t, const heap_hold *hd)
{
	uint8_t key[HEAP_HOLD_KEY_MAX], val[HOLD_BYTES];
	size_t klen;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (hd == NULL || (hd->flags & ~HEAP_HOLD_RELEASED) != 0 ||
	    key_make(hd->arr, hd->name, key, &klen) != 0)
		return AH_EINVAL;
	memcpy(val, HOLD_MAGIC, 4);
	put_u16(val + 4, HOLD_VERSION);
	put_u16(val + 6, (uint16_t)hd->flags);
	put_u64(val + 8, hd->frontier);
	put_u64(val + 16, hd->lease_ms);
	put_u64(val + 24, hd->renewed_ms);
	return heap_put(t, HEAP_T_HOLD, key, klen, val, sizeof val);
}

int heap_hold_del(heap_txn *t, const char *arr, const char *name)
{
	uint8_t key[HEAP_HOLD_KEY_MAX];
	size_t klen;

	if (key_make(arr, name, key, &klen) != 0)
		return AH_EINVAL;
	return heap_del(t, HEAP_T_HOLD, key, klen);
}

int heap_hold_next(heap_txn *t, heap_hold_pos *pos, heap_hold *out)
{
	const void *k, *v;
	size_t klen, vlen;
	int rc;

	if (pos == NULL || out == NULL || pos->klen > HEAP_HOLD_KEY_MAX)
		return AH_EINVAL;
	rc = heap_next(t, HEAP_T_HOLD, pos->klen ? pos->key : NULL, pos->klen,
	               &k, &klen, &v, &vlen);
	if (rc != 0 && rc != AH_ECORRUPT)
		return rc;
	if (k == NULL)
		return rc; /* the table itself could not be walked */
	if (klen > HEAP_HOLD_KEY_MAX) {
		/* Longer than any hold key: no record of ours.  Not
		 * representable as a place; the walk ends here. */
		return CORRUPT("hold key longer than any hold's");
	}
	memcpy(pos->key, k, klen);
	pos->klen = klen;
	if (rc != 0)
		return rc;
	if ((rc = key_split(k, klen, out)) != 0)
		return rc;
	return decode(v, vlen, out);
}
