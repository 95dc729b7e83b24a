/*
 * arrangement/batch_chunk.c - the checked view of one batch chunk
 * (bchunk_*, shared with the writer, the cursor and the checker): the
 * header checks of bchunk_open_view, the columns' accessors that touch
 * (check) the heap chunk's blocks they read, and the gets that open a
 * heap chunk and its view.  Layouts: batch_int.h.
 *
 * Bytes read from the map are untrusted: every offset is checked before it
 * is dereferenced and damage is AH_ECORRUPT, never an assert or a read out
 * of bounds; no byte is read before its block was touched.  Nothing here
 * writes a chunk body.
 */
#include <string.h>

#include "arrangement/batch_chunk_int.h"
#include "heap/codec.h"

/* Bytes of a times or diffs column of n updates with nd dictionary entries
 * (0: full). */
static uint64_t col_need(uint32_t nd, uint64_t n)
{
	return nd == 0 ? 8 * n : 8 * (uint64_t)nd + (nd > 1 ? n : 0);
}

/* Sets column k at off of a version-2 chunk from its dictionary size nd,
 * checked against the column's room. */
static bool col_open(bcol *k, const uint8_t *b, uint32_t off, uint32_t room,
                     uint32_t nd, uint32_t n)
{
	if (nd > BCHUNK_DICT_MAX || col_need(nd, n) > room)
		return false;
	memset(k, 0, sizeof *k);
	k->nd = nd;
	if (nd == 0)
		k->full = (const uint64_t *)(b + off);
	else {
		k->dict = (const uint64_t *)(b + off);
		k->idx = nd > 1 ? b + off + 8 * (size_t)nd : NULL;
	}
	return true;
}

/* The header checks on a view whose page 0 (the header) is checked; with
 * ends, also the first and last entries of key_vals and val_upds (pages
 * of their own).  A seek's view checked page by page leaves them to the
 * accessors that read them (bchunk_key_vals and bchunk_val_upds: key 0's
 * range must start at val 0 and the last key's end at nvals, and so for
 * vals), so a point read does not fault up to four pages it does not
 * otherwise read; whatever reads an end checks it. */
int bchunk_open_view(bchunk *c, const uint8_t *b, size_t body_used,
                     bool ends)
{
	int rc;
	uint32_t off[9], hdr = BCHUNK_HDR, ok = BCHUNK_KEY_CONT | BCHUNK_VAL_CONT;
	uint64_t nk, nv, nu;

	if (!b || body_used < BCHUNK_HDR || ((uintptr_t)b & 7u))
		return CORRUPT("batch chunk header");
	if ((rc = heap_chunk_touch(&c->hv, b, BCHUNK_HDR)) != 0)
		return rc;
	if (memcmp(b, BCHUNK_MAGIC, 4) != 0)
		return CORRUPT("batch chunk header");
	uint16_t ver;
	memcpy(&ver, b + 4, 2);
	if ((ver != BCHUNK_VERSION && ver != BCHUNK_VERSION_COLS) || b[7] != 8)
		return CORRUPT("batch chunk header");
	if (ver == BCHUNK_VERSION_COLS) {
		hdr = BCHUNK_HDR_COLS;
		ok |= BCHUNK_KEY_FIXED | BCHUNK_VAL_FIXED | BCHUNK_KV_ONE |
		      BCHUNK_VU_ONE;
		if (body_used < hdr ||
		    (rc = heap_chunk_touch(&c->hv, b + BCHUNK_HDR, hdr - BCHUNK_HDR)))
			return rc ? rc : CORRUPT("batch chunk header");
	}
	c->version = ver;
	c->body = b;
	c->flags = b[6];
	if (c->flags & ~ok)
		return CORRUPT("batch chunk header");
	if ((c->flags & BCHUNK_VAL_CONT) && !(c->flags & BCHUNK_KEY_CONT))
		return CORRUPT("batch chunk header");
	nk = c->nkeys = get_u32(b + 8);
	nv = c->nvals = get_u32(b + 12);
	nu = c->nupds = get_u32(b + 16);
	c->used = get_u32(b + 20);
	if (nk == 0 || nv < nk || nu < nv || c->used > body_used)
		return CORRUPT("batch chunk header");
	for (int i = 0; i < 8; i++)
		off[i] = get_u32(b + 24 + 4 * i);
	off[8] = c->used;
	for (int i = 0; i < 8; i++)
		if ((off[i] & 7u) || off[i] > off[i + 1])
			return CORRUPT("batch chunk header");
	if (off[0] != hdr)
		return CORRUPT("batch chunk header");
	uint32_t f = c->flags, tnd = 0, dnd = 0;
	c->kw = c->vw = 0;
	if (ver == BCHUNK_VERSION_COLS) {
		c->kw = get_u32(b + 56);
		c->vw = get_u32(b + 60);
		tnd = get_u16(b + 64);
		dnd = get_u16(b + 66);
		if ((!(f & BCHUNK_KEY_FIXED) && c->kw) ||
		    (!(f & BCHUNK_VAL_FIXED) && c->vw) || get_u32(b + 68) ||
		    ((f & BCHUNK_KV_ONE) && nv != nk) ||
		    ((f & BCHUNK_VU_ONE) && nu != nv))
			return CORRUPT("batch chunk header");
	}
	/* Each column must fit before the next column starts. */
	uint64_t kcol = (f & BCHUNK_KEY_FIXED) ? 0 : 4 * (nk + 1);
	uint64_t kvcol = (f & BCHUNK_KV_ONE) ? 0 : 4 * (nk + 1);
	uint64_t vcol = (f & BCHUNK_VAL_FIXED) ? 0 : 4 * (nv + 1);
	uint64_t vucol = (f & BCHUNK_VU_ONE) ? 0 : 4 * (nv + 1);
	if (kcol > (uint64_t)off[1] - off[0] ||
	    ((f & BCHUNK_KEY_FIXED) && nk * c->kw > (uint64_t)off[2] - off[1]) ||
	    kvcol > (uint64_t)off[3] - off[2] ||
	    vcol > (uint64_t)off[4] - off[3] ||
	    ((f & BCHUNK_VAL_FIXED) && nv * c->vw > (uint64_t)off[5] - off[4]) ||
	    vucol > (uint64_t)off[6] - off[5] ||
	    !col_open(&c->tm, b, off[6], off[7] - off[6], tnd, (uint32_t)nu) ||
	    !col_open(&c->df, b, off[7], off[8] - off[7], dnd, (uint32_t)nu))
		return CORRUPT("batch chunk header");
	c->ko = kcol ? (const uint32_t *)(b + off[0]) : NULL;
	c->kb_lo = off[1];
	c->kb_hi = off[2];
	c->kv = kvcol ? (const uint32_t *)(b + off[2]) : NULL;
	c->vo = vcol ? (const uint32_t *)(b + off[3]) : NULL;
	c->vb_lo = off[4];
	c->vb_hi = off[5];
	c->vu = vucol ? (const uint32_t *)(b + off[5]) : NULL;
	if (!ends)
		return 0;
	if (c->kv && ((rc = heap_chunk_touch(&c->hv, &c->kv[0], 4)) ||
	              (rc = heap_chunk_touch(&c->hv, &c->kv[nk], 4))))
		return rc;
	if (c->vu && ((rc = heap_chunk_touch(&c->hv, &c->vu[0], 4)) ||
	              (rc = heap_chunk_touch(&c->hv, &c->vu[nv], 4))))
		return rc;
	if ((c->kv && (c->kv[0] != 0 || c->kv[nk] != nv)) ||
	    (c->vu && (c->vu[0] != 0 || c->vu[nv] != nu)))
		return CORRUPT("batch chunk header");
	return 0;
}

int bchunk_open(const void *body, size_t body_used, bchunk *c)
{
	memset(&c->hv, 0, sizeof c->hv);
	c->hv.all = true; /* the caller's own, checked bytes */
	return bchunk_open_view(c, body, body_used, true);
}

/* Field i (< n) of a byte column whose offsets are o (NULL: fixed, w
 * bytes each), touched. */
static int field_get(bchunk *c, const uint32_t *o, uint32_t w, uint32_t i,
                     uint32_t lo, uint32_t hi, const uint8_t **p, size_t *len)
{
	int rc;

	if (o && (rc = heap_chunk_touch(&c->hv, &o[i], 8)) != 0)
		return rc;
	if (!bchunk_field(c, o, w, i, lo, hi, p, len))
		return AH_ECORRUPT;
	return heap_chunk_touch(&c->hv, *p, *len);
}

int bchunk_key(bchunk *c, uint32_t i, const uint8_t **p, size_t *len)
{
	int rc;

	if (i >= c->nkeys)
		return CORRUPT("batch chunk key offsets");
	rc = field_get(c, c->ko, c->kw, i, c->kb_lo, c->kb_hi, p, len);
	return rc == AH_ECORRUPT ? CORRUPT("batch chunk key offsets") : rc;
}

int bchunk_val(bchunk *c, uint32_t j, const uint8_t **p, size_t *len)
{
	int rc;

	if (j >= c->nvals)
		return CORRUPT("batch chunk val offsets");
	rc = field_get(c, c->vo, c->vw, j, c->vb_lo, c->vb_hi, p, len);
	return rc == AH_ECORRUPT ? CORRUPT("batch chunk val offsets") : rc;
}

int bchunk_key_vals(bchunk *c, uint32_t i, uint32_t *lo, uint32_t *hi)
{
	int rc;

	if (i >= c->nkeys)
		return CORRUPT("batch chunk key_vals");
	if (c->kv && (rc = heap_chunk_touch(&c->hv, &c->kv[i], 8)) != 0)
		return rc;
	bchunk_range(c->kv, i, lo, hi);
	if (*lo >= *hi || *hi > c->nvals || (i == 0 && *lo != 0) ||
	    (i + 1 == c->nkeys && *hi != c->nvals))
		return CORRUPT("batch chunk key_vals");
	return 0;
}

int bchunk_val_upds(bchunk *c, uint32_t j, uint32_t *lo, uint32_t *hi)
{
	int rc;

	if (j >= c->nvals)
		return CORRUPT("batch chunk val_upds");
	if (c->vu && (rc = heap_chunk_touch(&c->hv, &c->vu[j], 8)) != 0)
		return rc;
	bchunk_range(c->vu, j, lo, hi);
	if (*lo >= *hi || *hi > c->nupds || (j == 0 && *lo != 0) ||
	    (j + 1 == c->nvals && *hi != c->nupds))
		return CORRUPT("batch chunk val_upds");
	return 0;
}

/* Touches updates [lo, hi) of column k. */
static int col_touch(bchunk *c, const bcol *k, uint32_t lo, uint32_t hi)
{
	int rc;

	if (k->full)
		return heap_chunk_touch(&c->hv, &k->full[lo], 8 * (size_t)(hi - lo));
	if ((rc = heap_chunk_touch(&c->hv, k->dict, 8 * (size_t)k->nd)) != 0)
		return rc;
	return k->idx ? heap_chunk_touch(&c->hv, k->idx + lo, hi - lo) : 0;
}

int bchunk_touch_upds(bchunk *c, uint32_t lo, uint32_t hi)
{
	int rc;

	if (lo > hi || hi > c->nupds)
		return CORRUPT("batch chunk update range");
	if ((rc = col_touch(c, &c->tm, lo, hi)) != 0)
		return rc;
	return col_touch(c, &c->df, lo, hi);
}

int bchunk_get(heap_txn *t, uint64_t id, enum heap_chunk_how how, bchunk *out)
{
	return bchunk_get_at(t, id, NULL, how, out);
}

int bchunk_get_at(heap_txn *t, uint64_t id, uint64_t *loc,
                  enum heap_chunk_how how, bchunk *out)
{
	int rc = heap_chunk_open_at(t, id, loc, how, &out->hv);
	if (rc == AH_ENOTFOUND)
		return CORRUPT("a batch record names a chunk that is not there"); /* a record names a chunk that is not there */
	if (rc)
		return rc;
	/* A view checked whole (a walk's, AH_OPEN_VERIFY_READS, a chunk of
	 * one block, jumbo and version-1 chunks) is read by the walk's inline
	 * steps, which do not check the ends: they are checked here. */
	return bchunk_open_view(out, out->hv.body, out->hv.body_used,
	                        how == HEAP_CHUNK_WHOLE || out->hv.all);
}

int bchunk_get_head(heap_txn *t, uint64_t id, uint64_t *loc, bchunk *out)
{
	int rc = heap_chunk_open_at(t, id, loc, HEAP_CHUNK_PAGES, &out->hv);
	if (rc == AH_ENOTFOUND)
		return CORRUPT("a batch record names a chunk that is not there");
	if (rc)
		return rc;
	return bchunk_open_view(out, out->hv.body, out->hv.body_used, false);
}
