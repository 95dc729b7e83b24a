/*
 * arrangement/batch.c - batch records and the chunk format's readers.
 *
 * Holds the byte comparison every layer above uses (bytes_cmp), the checked
 * view of one batch chunk (bchunk_*, shared with the writer and the cursor),
 * the batch record codec (load, put, set_desc, drop), id allocation and the
 * structural checker (B1-B5 of batch.h).  Layouts: batch.h.
 * Bytes read from the map are untrusted: every offset is checked before it
 * is dereferenced and damage is AH_ECORRUPT, never an assert or a read out
 * of bounds.  Nothing here writes a chunk body.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_int.h"
#include "arrangement/filter.h"
#include "heap/codec.h"


/* ----------------------------------------------------------- chunk view */

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
 * of their own: bchunk_get_head leaves them for the reader's open). */
static int open_view(bchunk *c, const uint8_t *b, size_t body_used, bool ends)
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
	return open_view(c, body, body_used, true);
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
	if (*lo >= *hi || *hi > c->nvals)
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
	if (*lo >= *hi || *hi > c->nupds)
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
	return open_view(out, out->hv.body, out->hv.body_used, true);
}

int bchunk_get_head(heap_txn *t, uint64_t id, uint64_t *loc, bchunk *out)
{
	int rc = heap_chunk_open_at(t, id, loc, HEAP_CHUNK_PAGES, &out->hv);
	if (rc == AH_ENOTFOUND)
		return CORRUPT("a batch record names a chunk that is not there");
	if (rc)
		return rc;
	return open_view(out, out->hv.body, out->hv.body_used, false);
}

/* ---------------------------------------------------------- batch record */

int batch_record_get(heap_txn *t, uint64_t id, const uint8_t **rec,
                     size_t *len)
{
	const void *v;
	if (id == BATCH_ID_COUNTER)
		return AH_EINVAL;
	int rc = heap_get(t, HEAP_T_BATCH, &id, sizeof id, &v, len);
	*rec = v;
	return rc;
}

/* The filter reference at f3 of a version-2 record of len bytes: its
 * block count must be that of its key count, and it (with its blocks when
 * they are inline) must end the record (layout: batch_int.h).  That the
 * key count is the batch's is batch_check's (B6). */
static int filter_decode(batch *b, const uint8_t *rec, size_t len, uint64_t f3)
{
	if (f3 > len || len - f3 < BFILT_REF || memcmp(rec + f3, BFILT_MAGIC, 4) ||
	    rec[f3 + 4] != FILTER_PROBES ||
	    (rec[f3 + 5] != BFILT_HASH_XXH3 && rec[f3 + 5] != BFILT_HASH_CHECKED) ||
	    rec[f3 + 6] || rec[f3 + 7])
		return CORRUPT("batch key filter reference");
	b->filter_hash = rec[f3 + 5];
	b->filter_keys = get_u64(rec + f3 + 8);
	b->filter_blocks = get_u64(rec + f3 + 16);
	b->filter_sum = get_u64(rec + f3 + 24);
	b->filter_chunk = get_u64(rec + f3 + 32);
	uint64_t inl = b->filter_chunk ? 0 : FILTER_BLOCK * b->filter_blocks;
	if (b->filter_blocks != (b->filter_hash == BFILT_HASH_CHECKED
	                         ? filter_blocks_checked(b->filter_keys)
	                         : filter_blocks(b->filter_keys)) ||
	    b->filter_blocks > UINT32_MAX ||
	    len - f3 - BFILT_REF != inl)
		return CORRUPT("batch key filter reference");
	b->filter_off = b->filter_chunk ? 0 : (uint32_t)(f3 + BFILT_REF);
	return 0;
}

/* Decodes rec into a fresh struct batch; the fence bytes are copied when
 * copy is set (write txns: a later put may move the record's page). */
static int record_decode(uint64_t id, const uint8_t *rec, size_t len,
                         bool copy, batch **out)
{
	batch *b = NULL;
	uint64_t n, ftab, fbytes, fend;
	int rc = 0;

	if (len < BREC_HDR || memcmp(rec, BREC_MAGIC, 4) != 0)
		return CORRUPT("batch record");
	uint16_t ver;
	memcpy(&ver, rec + 4, 2);
	if ((ver != BREC_VERSION && ver != BREC_VERSION_FILTER) || rec[6] != 8 ||
	    (rec[7] & ~(BREC_PARTIAL | BREC_COLS)))
		return CORRUPT("batch record");
	n = get_u32(rec + 72);
	ftab = BREC_HDR + 8 * n;
	fbytes = ftab + 4 * (n + 1);
	if (fbytes > len)
		return CORRUPT("batch record");
	fend = get_u32(rec + ftab + 4 * n);
	if (fend > len - fbytes)
		return CORRUPT("batch record");
	b = calloc(1, sizeof *b);
	if (!b)
		return AH_ENOMEM;
	b->id = id;
	b->time_width = rec[6];
	b->rec_flags = rec[7];
	b->desc.lower = frontier_of(get_u64(rec + 8));
	b->desc.upper = frontier_of(get_u64(rec + 16));
	b->desc.since = frontier_of(get_u64(rec + 24));
	b->updates = get_u64(rec + 32);
	b->keys = get_u64(rec + 40);
	b->vals = get_u64(rec + 48);
	b->bytes = get_u64(rec + 56);
	b->chunk_bytes = get_u64(rec + 64);
	b->nchunks = (uint32_t)n;
	uint32_t f3 = ver == BREC_VERSION_FILTER ? get_u32(rec + 76) : 0;
	if (ver == BREC_VERSION_FILTER &&
	    (f3 < fbytes + fend || (rc = filter_decode(b, rec, len, f3)))) {
		rc = rc ? rc : CORRUPT("batch key filter reference");
		goto out;
	}
	/* One block: ids, fence pointers, fence lengths, copied fence bytes
	 * and what follows them (an inline filter). */
	size_t sz = n * (sizeof(uint64_t) + sizeof(void *) + sizeof(size_t)) +
	            (copy ? len - fbytes : 0) + 1;
	uint8_t *blk = malloc(sz);
	if (!blk) {
		rc = AH_ENOMEM;
		goto out;
	}
	b->chunk_ids = (uint64_t *)blk;
	b->fence = (const uint8_t **)(blk + n * sizeof(uint64_t));
	b->fence_len = (size_t *)(blk + n * (sizeof(uint64_t) + sizeof(void *)));
	const uint8_t *fb = rec + fbytes;
	if (copy) {
		uint8_t *dst = blk + n * (sizeof(uint64_t) + sizeof(void *) +
		                          sizeof(size_t));
		memcpy(dst, fb, len - fbytes);
		fb = dst;
	}
	if (b->filter_off)
		b->filter_bytes = fb + (b->filter_off - fbytes);
	for (uint64_t i = 0; i < n; i++) {
		b->chunk_ids[i] = get_u64(rec + BREC_HDR + 8 * i);
		uint32_t lo = get_u32(rec + ftab + 4 * i);
		uint32_t hi = get_u32(rec + ftab + 4 * (i + 1));
		if (lo > hi || hi > fend) {
			rc = CORRUPT("batch record");
			goto out;
		}
		b->fence[i] = fb + lo;
		b->fence_len[i] = hi - lo;
	}
out:
	if (rc) {
		batch_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

int batch_load(heap_txn *t, uint64_t id, batch **out)
{
	const uint8_t *rec;
	size_t len;
	if (!t || !out)
		return AH_EINVAL;
	int rc = batch_record_get(t, id, &rec, &len);
	if (rc)
		return rc;
	return record_decode(id, rec, len, !heap_txn_rdonly(t), out);
}

int batch_decode(uint64_t id, const uint8_t *rec, size_t len, batch **out)
{
	return record_decode(id, rec, len, false, out);
}

int batch_load_listed(heap_txn *t, uint64_t id, batch **out)
{
	int rc = batch_load(t, id, out);

	return rc == AH_ENOTFOUND ? CORRUPT("a listed batch record is missing") : rc;
}

void batch_free(batch *b)
{
	if (!b)
		return;
	/* refs is 0 for good in a private batch, >= 1 in a shared one until
	 * this caller's own decrement */
	if (__atomic_load_n(&b->refs, __ATOMIC_RELAXED) &&
	    __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return; /* shared (batch_cache.c): not the last reference */
	free(b->chunk_ids); /* the one block of batch_load */
	free(b->own_rec);
	free(b->own_filter);
	free(b->chunk_loc);
	free(b);
}

int batch_record_put(heap_txn *t, const batch *b)
{
	uint64_t n = b->nchunks, fsum = 0;
	for (uint64_t i = 0; i < n; i++)
		fsum += b->fence_len[i];
	uint64_t ftab = BREC_HDR + 8 * n, fbytes = ftab + 4 * (n + 1);
	bool inl = b->filter_blocks && !b->filter_chunk;
	uint64_t f3 = b->filter_blocks ? fbytes + fsum : 0;
	uint64_t total = fbytes + fsum + (f3 ? BFILT_REF : 0) +
	                 (inl ? FILTER_BLOCK * b->filter_blocks : 0);
	if (n > UINT32_MAX / 8 || fsum > UINT32_MAX || total > UINT32_MAX)
		return AH_ELIMIT;
	uint8_t *rec = malloc(total);
	if (!rec)
		return AH_ENOMEM;
	uint16_t ver = f3 ? BREC_VERSION_FILTER : BREC_VERSION;
	uint32_t n32 = (uint32_t)n, off = 0;
	memcpy(rec, BREC_MAGIC, 4);
	memcpy(rec + 4, &ver, 2);
	rec[6] = 8;
	rec[7] = (uint8_t)b->rec_flags;
	put_u64(rec + 8, frontier_time(b->desc.lower));
	put_u64(rec + 16, frontier_time(b->desc.upper));
	put_u64(rec + 24, frontier_time(b->desc.since));
	put_u64(rec + 32, b->updates);
	put_u64(rec + 40, b->keys);
	put_u64(rec + 48, b->vals);
	put_u64(rec + 56, b->bytes);
	put_u64(rec + 64, b->chunk_bytes);
	put_u32(rec + 72, n32);
	put_u32(rec + 76, (uint32_t)f3);
	for (uint64_t i = 0; i < n; i++) {
		memcpy(rec + BREC_HDR + 8 * i, &b->chunk_ids[i], 8);
		memcpy(rec + ftab + 4 * i, &off, 4);
		if (b->fence_len[i])
			memcpy(rec + fbytes + off, b->fence[i], b->fence_len[i]);
		off += (uint32_t)b->fence_len[i];
	}
	memcpy(rec + ftab + 4 * n, &off, 4);
	if (f3) {
		uint8_t *f = rec + f3;
		memcpy(f, BFILT_MAGIC, 4);
		f[4] = FILTER_PROBES;
		f[5] = b->filter_hash;
		f[6] = f[7] = 0;
		put_u64(f + 8, b->filter_keys);
		put_u64(f + 16, b->filter_blocks);
		put_u64(f + 24, b->filter_sum);
		put_u64(f + 32, b->filter_chunk);
		if (inl)
			memcpy(f + BFILT_REF, b->filter ? (const void *)b->filter
			                                : b->filter_bytes,
			       FILTER_BLOCK * b->filter_blocks);
	}
	/* Checked filter blocks are format 5 (heap/heap.h): binaries of 4
	 * would refuse the record. */
	int rc = f3 && b->filter_hash == BFILT_HASH_CHECKED
	         ? heap_format_mark(t, HEAP_FORMAT_BLOCKS) : 0;
	if (!rc)
		rc = heap_put(t, HEAP_T_BATCH, &b->id, sizeof b->id, rec, total);
	free(rec);
	return rc;
}

int batch_set_desc(heap_txn *t, uint64_t id, const batch_desc *d)
{
	const uint8_t *rec;
	size_t len;
	if (!t || !d)
		return AH_EINVAL;
	int rc = batch_record_get(t, id, &rec, &len);
	if (rc)
		return rc;
	if (len < BREC_HDR || memcmp(rec, BREC_MAGIC, 4) != 0)
		return CORRUPT("batch record");
	uint8_t *copy = malloc(len);
	if (!copy)
		return AH_ENOMEM;
	memcpy(copy, rec, len);
	put_u64(copy + 8, frontier_time(d->lower));
	put_u64(copy + 16, frontier_time(d->upper));
	put_u64(copy + 24, frontier_time(d->since));
	rc = heap_put(t, HEAP_T_BATCH, &id, sizeof id, copy, len);
	free(copy);
	return rc;
}

int batch_drop(heap_txn *t, uint64_t id)
{
	batch *b = NULL;
	int rc = batch_load(t, id, &b);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < b->nchunks && !rc; i++) {
		rc = heap_chunk_free(t, b->chunk_ids[i]);
		if (rc == AH_ENOTFOUND)
			rc = CORRUPT("batch: batch_drop");
	}
	if (!rc && b->filter_chunk &&
	    (rc = heap_chunk_free(t, b->filter_chunk)) == AH_ENOTFOUND)
		rc = CORRUPT("batch: batch_drop: filter chunk");
	if (!rc)
		rc = heap_del(t, HEAP_T_BATCH, &id, sizeof id);
	batch_free(b);
	return rc;
}

int batch_new_id(heap_txn *t, uint64_t *id)
{
	uint64_t key = BATCH_ID_COUNTER, next = 1;
	const void *v;
	size_t len;
	if (!t || !id)
		return AH_EINVAL;
	uint64_t last;
	int rc = heap_get(t, HEAP_T_BATCH, &key, sizeof key, &v, &len);
	if (rc == 0) {
		if (len != 8)
			return CORRUPT("batch id counter");
		memcpy(&next, v, 8);
		if (next == 0 || next == BATCH_ID_COUNTER)
			return next ? AH_ELIMIT : CORRUPT("batch id counter");
	} else if (rc != AH_ENOTFOUND) {
		return rc;
	}
	/* The counter outlives every batch it handed out: missing, or not
	 * past the largest id in use, it was damaged, and a fresh id could
	 * overwrite a live batch record. */
	if ((rc = heap_last_below(t, HEAP_T_BATCH, BATCH_ID_COUNTER, &last)))
		return rc;
	if (last >= next)
		return CORRUPT("batch id counter");
	uint64_t after = next + 1;
	rc = heap_put(t, HEAP_T_BATCH, &key, sizeof key, &after, sizeof after);
	if (rc)
		return rc;
	*id = next;
	return 0;
}

/* ------------------------------------------------------------ checking */

/* The last (key, val, time) seen by the checker, across chunks. */
typedef struct check_state {
	const batch *b;
	char *msg;
	size_t msglen;
	bool any;
	const uint8_t *key, *val;
	size_t klen, vlen;
	atime time;
	uint64_t keys, vals, updates, bytes, chunk_bytes;
	uint64_t *filter; /* the key filter's blocks (aligned copy), or NULL */
} check_state;

static int check_fail(check_state *s, uint32_t ci, const char *what)
{
	if (s->msg && s->msglen)
		snprintf(s->msg, s->msglen, "batch %llu chunk %llu (#%u): %s",
		         (unsigned long long)s->b->id,
		         (unsigned long long)s->b->chunk_ids[ci], ci, what);
	return CORRUPT(what);
}

static bool time_ok(const batch_desc *d, atime t)
{
	/* B3; a batch compacted past its upper holds times advanced by since,
	 * which may lie beyond its upper (times <= since) */
	return time_beyond(t, d->lower) &&
	       (time_before(t, d->upper) || time_le(t, frontier_time(d->since)));
}

/* Checks val j's updates: B1 (times increasing), B2, B3. */
static const char *check_upds(check_state *s, bchunk *c, uint32_t j,
                              bool cont)
{
	uint32_t lo, hi;
	if (bchunk_val_upds(c, j, &lo, &hi))
		return "bad update range";
	for (uint32_t u = lo; u < hi; u++) {
		atime t;
		int64_t d;
		if (!bchunk_upd(c, u, &t, &d))
			return "dictionary index out of range";
		if ((u > lo || cont) && !time_lt(s->time, t))
			return "times out of order";
		if (d == 0)
			return "zero diff";
		if (!time_ok(&s->b->desc, t))
			return "time outside the description";
		s->time = t;
	}
	return NULL;
}

static const char *check_key(check_state *s, bchunk *c, uint32_t i)
{
	const uint8_t *k, *v;
	size_t kl, vl;
	uint32_t lo, hi;
	bool kcont = i == 0 && (c->flags & BCHUNK_KEY_CONT);
	bool vcont = i == 0 && (c->flags & BCHUNK_VAL_CONT);

	if (bchunk_key(c, i, &k, &kl) || bchunk_key_vals(c, i, &lo, &hi))
		return "bad key offsets";
	int kc = s->any ? bytes_cmp(k, kl, s->key, s->klen) : 1;
	if (kcont ? kc != 0 : kc <= 0)
		return kcont ? "continued key differs" : "keys out of order";
	if (!kcont && s->filter &&
	    !batch_filter_may_hold(s->b, s->filter, filter_hash(k, kl)))
		return "key missing from the batch's key filter (B6)";
	s->keys += !kcont;
	s->key = k;
	s->klen = kl;
	for (uint32_t j = lo; j < hi; j++) {
		bool cont = j == lo && vcont;
		const char *e;
		if (bchunk_val(c, j, &v, &vl))
			return "bad val offsets";
		int vc = (j > lo || kcont) ? bytes_cmp(v, vl, s->val, s->vlen) : 1;
		if (cont ? vc != 0 : vc <= 0)
			return cont ? "continued val differs" : "vals out of order";
		s->vals += !cont;
		s->val = v;
		s->vlen = vl;
		if ((e = check_upds(s, c, j, cont)))
			return e;
	}
	s->any = true;
	return NULL;
}

static int check_chunk(check_state *s, heap_txn *t, uint32_t ci,
                       bool checksums)
{
	const batch *b = s->b;
	bchunk c;
	const char *e = NULL;

	/* Checked whole: the structure pass must not read unchecked bytes. */
	int rc = heap_chunk_open(t, b->chunk_ids[ci], HEAP_CHUNK_WHOLE, &c.hv);
	if (rc == AH_ENOTFOUND)
		return check_fail(s, ci, "chunk missing");
	if (rc || (checksums && heap_chunk_verify(t, b->chunk_ids[ci])))
		return check_fail(s, ci, heap_chunk_verify(t, b->chunk_ids[ci]) ?
		                  "checksum mismatch" : "bad chunk header");
	if (open_view(&c, c.hv.body, c.hv.body_used, true) || c.used != c.hv.body_used)
		return check_fail(s, ci, "bad batch chunk header (B4)");
	if ((b->rec_flags & BREC_COLS) && c.version != BCHUNK_VERSION_COLS)
		return check_fail(s, ci, "version-1 chunk in a batch of version-2 chunks");
	if (ci == 0 && (c.flags & BCHUNK_CONT))
		return check_fail(s, ci, "first chunk flagged as continuation");
	/* B4: offsets monotone and inside their columns (a dropped column
	 * has nothing to check: its fields are inside by the header check) */
	for (uint32_t i = 0; i < c.nkeys; i++)
		if ((c.ko && c.ko[i] > c.ko[i + 1]) || (c.kv && c.kv[i] >= c.kv[i + 1]))
			return check_fail(s, ci, "key offsets not monotone (B4)");
	for (uint32_t j = 0; j < c.nvals; j++)
		if ((c.vo && c.vo[j] > c.vo[j + 1]) || (c.vu && c.vu[j] >= c.vu[j + 1]))
			return check_fail(s, ci, "val offsets not monotone (B4)");
	if ((c.ko && (c.ko[0] != c.kb_lo || c.ko[c.nkeys] > c.kb_hi)) ||
	    (c.vo && (c.vo[0] != c.vb_lo || c.vo[c.nvals] > c.vb_hi)))
		return check_fail(s, ci, "byte column bounds (B4)");
	/* B7: fence i is a prefix of chunk i's first key that is greater
	 * than chunk i-1's last (all of it when the key continues) */
	const uint8_t *k0;
	size_t k0len, fl = b->fence_len[ci];
	if (bchunk_key(&c, 0, &k0, &k0len) || fl > k0len ||
	    memcmp(k0, b->fence[ci], fl) ||
	    ((c.flags & BCHUNK_KEY_CONT) && fl != k0len) ||
	    (ci > 0 && !(c.flags & BCHUNK_KEY_CONT) &&
	     bytes_cmp(b->fence[ci], fl, s->key, s->klen) <= 0))
		return check_fail(s, ci, "fence key is not a separator before the "
		                  "first key (B7)");
	for (uint32_t i = 0; i < c.nkeys && !e; i++)
		e = check_key(s, &c, i);
	if (e)
		return check_fail(s, ci, e);
	s->updates += c.nupds;
	s->bytes += c.used;
	s->chunk_bytes += c.hv.value_bytes;
	return 0;
}

/* B6: the filter's blocks, checked against the record's checksum, copied
 * (aligned) for the walk to probe every key. */
static int check_filter_load(check_state *s, heap_txn *t)
{
	const batch *b = s->b;
	const uint8_t *p;
	int rc;

	if (!b->filter_blocks)
		return 0;
	if (b->filter_keys != b->keys) {
		rc = CORRUPT("batch key filter key count");
		goto fail;
	}
	if ((rc = batch_filter_blocks(t, b, &p)))
		goto fail;
	if (!(s->filter = malloc(FILTER_BLOCK * b->filter_blocks)))
		return AH_ENOMEM;
	memcpy(s->filter, p, FILTER_BLOCK * b->filter_blocks);
	uint64_t bad = batch_filter_first_bad(b, s->filter);
	if (bad == b->filter_blocks)
		return 0;
	rc = AH_ECORRUPT;
	if (s->msg && s->msglen)
		snprintf(s->msg, s->msglen, "batch %llu: key filter (B6): block "
		         "%llu fails its check", (unsigned long long)b->id,
		         (unsigned long long)bad);
	return rc;
fail:
	if (s->msg && s->msglen)
		snprintf(s->msg, s->msglen, "batch %llu: key filter (B6): %s",
		         (unsigned long long)b->id,
		         b->filter_keys != b->keys ? "key count differs from the "
		         "batch's" : "damaged (checksum or chunk)");
	return rc;
}

static int check_counts(check_state *s)
{
	const batch *b = s->b;
	char *msg = s->msg;
	size_t msglen = s->msglen;

	if (s->updates == b->updates && s->keys == b->keys && s->vals == b->vals &&
	    s->bytes == b->bytes && s->chunk_bytes == b->chunk_bytes)
		return 0;
	if (msg && msglen)
		snprintf(msg, msglen,
		         "batch %llu: counts differ from its chunks (B5): "
		         "updates %llu/%llu keys %llu/%llu vals %llu/%llu "
		         "bytes %llu/%llu chunk_bytes %llu/%llu",
		         (unsigned long long)b->id,
		         (unsigned long long)b->updates,
		         (unsigned long long)s->updates,
		         (unsigned long long)b->keys,
		         (unsigned long long)s->keys,
		         (unsigned long long)b->vals,
		         (unsigned long long)s->vals,
		         (unsigned long long)b->bytes,
		         (unsigned long long)s->bytes,
		         (unsigned long long)b->chunk_bytes,
		         (unsigned long long)s->chunk_bytes);
	return CORRUPT("batch record counts differ from its chunks");
}

int batch_check(heap_txn *t, const batch *b, bool checksums, char *msg,
                size_t msglen)
{
	check_state s;
	int rc = 0;

	if (!t || !b)
		return AH_EINVAL;
	memset(&s, 0, sizeof s);
	s.b = b;
	s.msg = msg;
	s.msglen = msglen;
	if (msg && msglen)
		msg[0] = '\0';
	if (b->time_width != 8 || !frontier_le(b->desc.lower, b->desc.upper)) {
		if (msg && msglen)
			snprintf(msg, msglen, "batch %llu: bad record header",
			         (unsigned long long)b->id);
		return CORRUPT("batch record header");
	}
	/* B5 before B6: counts that differ say more than a filter that
	 * disagrees with them */
	bool counts_ok = b->filter_keys == b->keys;
	if (counts_ok && (rc = check_filter_load(&s, t)))
		return rc;
	for (uint32_t ci = 0; ci < b->nchunks && !rc; ci++)
		rc = check_chunk(&s, t, ci, checksums);
	if (!rc)
		rc = check_counts(&s);
	if (!rc && !counts_ok && b->filter_blocks)
		rc = check_filter_load(&s, t);
	free(s.filter);
	return rc;
}
