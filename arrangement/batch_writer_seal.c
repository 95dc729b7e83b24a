/*
 * arrangement/batch_writer_seal.c - the batch writer's chunk sealing: the
 * staged columns (batch_writer.c) become one version-2 chunk body (layout:
 * batch_int.h), copied into a reserved chunk (or, detached, an image in
 * memory), sealed, and named in the batch's chunk list with its fence.
 *
 * Runs once per chunk, never per update.  It never writes a chunk after
 * sealing it, and never seals one whose header disagrees with its
 * columns.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_writer_int.h"

/* Copies n bytes into the map in pieces of at most 1 MiB, zero-padding to
 * 8 bytes; returns the next offset. */
static uint32_t emit(uint8_t *body, uint32_t off, const void *src, size_t n)
{
	const uint8_t *s = src;
	size_t done = 0;
	while (done < n) {
		size_t piece = n - done < (1u << 20) ? n - done : (1u << 20);
		memcpy(body + off + done, s + done, piece);
		done += piece;
	}
	size_t pad = a8(n) - n;
	memset(body + off + n, 0, pad);
	return off + (uint32_t)(n + pad);
}

/* Offsets relative to a byte column become offsets from the body start. */
static void emit_offs(uint8_t *body, uint32_t off, const buf *b, uint32_t n,
                      uint32_t base)
{
	uint32_t *dst = (uint32_t *)(body + off);
	for (uint32_t i = 0; i < n; i++)
		dst[i] = u32at(b, i) + base;
	memset(body + off + 4 * (size_t)n, 0, a8(4 * (uint64_t)n) - 4 * (uint64_t)n);
}

/* Writes the staged (times or diffs) column at off: full, or its
 * dictionary d of nd entries and (nd > 1) the staged indexes ix; returns
 * the next offset. */
static uint32_t emit_col(uint8_t *body, uint32_t off, const buf *full,
                         const dict *d, uint32_t nd, const buf *ix)
{
	if (nd == 0)
		return emit(body, off, full->p, full->len);
	off = emit(body, off, d->val, 8 * (size_t)nd);
	return nd > 1 ? emit(body, off, ix->p, ix->len) : off;
}

static void write_header(uint8_t *body, const batch_writer *w,
                         const uint32_t off[8], uint32_t used, uint32_t flags,
                         uint32_t tnd, uint32_t dnd)
{
	uint16_t ver = BCHUNK_VERSION_COLS;
	memset(body, 0, BCHUNK_HDR_COLS);
	memcpy(body, BCHUNK_MAGIC, 4);
	memcpy(body + 4, &ver, 2);
	body[6] = (uint8_t)flags;
	body[7] = 8;
	put_u32(body + 8, w->nk);
	put_u32(body + 12, w->nv);
	put_u32(body + 16, w->nu);
	put_u32(body + 20, used);
	memcpy(body + 24, off, 32);
	put_u32(body + 56, (flags & BCHUNK_KEY_FIXED) ? w->kw : 0);
	put_u32(body + 60, (flags & BCHUNK_VAL_FIXED) ? w->vw : 0);
	put_u16(body + 64, (uint16_t)tnd);
	put_u16(body + 66, (uint16_t)dnd);
}

/* The fence of the staged chunk, whose first key is kb[0, klen): the
 * shortest prefix of it that is greater than the previous chunk's last
 * key (a seek for any key in between lands on this chunk's first key
 * either way), so a long key is not stored again in the record; the
 * whole key when it continues the previous chunk's (KEY_CONT) or that
 * key is not known (a resumed writer's first chunk); empty for the
 * batch's first chunk. */
static uint32_t fence_len(const batch_writer *w, uint32_t klen)
{
	if (w->ids.len == 0)
		return w->whole_first ? klen : 0;
	if ((w->flags & BCHUNK_KEY_CONT) || !w->have_prev)
		return klen;
	const uint8_t *p = w->prev_last.p, *k = w->kb.p;
	size_t pl = w->prev_last.len, j = 0;
	while (j < pl && j < klen && p[j] == k[j])
		j++;
	return j < klen ? (uint32_t)j + 1 : klen; /* k > p: j < klen */
}

/* A detached chunk's image (heap_chunk_image_new): its body at *body. */
static int image_new(batch_writer *w, uint64_t size, void **body)
{
	void *img;
	size_t bytes;
	int rc;

	if (w->nimg == w->img_cap) {
		uint32_t ncap = w->img_cap ? 2 * w->img_cap : 8;
		struct bw_image *ni = realloc(w->img, ncap * sizeof *ni);

		if (!ni)
			return AH_ENOMEM;
		w->img = ni;
		w->img_cap = ncap;
	}
	if ((rc = heap_chunk_image_new(heap_txn_heap(w->t), size, &img, &bytes,
	                               body, NULL)))
		return rc;
	w->img[w->nimg].p = img;
	w->img[w->nimg].size = bytes;
	w->img[w->nimg++].used = 0;
	w->img_bytes += bytes;
	return 0;
}

/* Reserves (detached: makes an image), fills and seals a chunk from the
 * staged columns. */
int bw_flush(batch_writer *w)
{
	uint64_t size = bw_staged_size(w), id;
	uint32_t off[8], o, nk1 = w->nk + 1, nv1 = w->nv + 1;
	void *vbody;
	size_t cap;
	int rc;

	if (w->nu == 0)
		return 0;
	if (size > UINT32_MAX)
		return AH_ELIMIT;
	/* the heap becomes format 4 with its first version-2 chunk, in the
	 * txn that writes it (a detached writer's: at attach) */
	if (!w->detached && !w->format_marked &&
	    (rc = heap_format_mark(w->t, HEAP_FORMAT_COLS)))
		return rc;
	w->format_marked = !w->detached;
	if (w->detached)
		rc = image_new(w, size, &vbody);
	else
		rc = heap_chunk_reserve(w->t, size, &id, &vbody, &cap);
	if (rc)
		return rc;
	uint8_t *body = vbody;
	uint32_t flags = w->flags, tnd = col_dict(w->td.over ? 0 : w->td.n, w->nu),
	         dnd = col_dict(w->dd.over ? 0 : w->dd.n, w->nu);
	flags |= (w->kfix ? BCHUNK_KEY_FIXED : 0) | (w->vfix ? BCHUNK_VAL_FIXED : 0) |
	         (w->nv == w->nk ? BCHUNK_KV_ONE : 0) |
	         (w->nu == w->nv ? BCHUNK_VU_ONE : 0);
	off[0] = BCHUNK_HDR_COLS;
	off[1] = off[0] + (w->kfix ? 0 : (uint32_t)a8(4 * (uint64_t)nk1));
	off[2] = emit(body, off[1], w->kb.p, w->kb.len);
	off[3] = (flags & BCHUNK_KV_ONE) ? off[2]
	                                 : emit(body, off[2], w->kv.p, 4 * (size_t)nk1);
	off[4] = off[3] + (w->vfix ? 0 : (uint32_t)a8(4 * (uint64_t)nv1));
	off[5] = emit(body, off[4], w->vb.p, w->vb.len);
	off[6] = (flags & BCHUNK_VU_ONE) ? off[5]
	                                 : emit(body, off[5], w->vu.p, 4 * (size_t)nv1);
	off[7] = emit_col(body, off[6], &w->tm, &w->td, tnd, &w->ti);
	o = emit_col(body, off[7], &w->df, &w->dd, dnd, &w->di);
	if (!w->kfix)
		emit_offs(body, off[0], &w->ko, nk1, off[1]);
	if (!w->vfix)
		emit_offs(body, off[3], &w->vo, nv1, off[4]);
	write_header(body, w, off, o, flags, tnd, dnd);
	if (w->detached) {
		struct bw_image *im = &w->img[w->nimg - 1];

		im->used = o;
		id = 0; /* attach sets it */
		if ((rc = heap_chunk_image_seal(heap_txn_heap(w->t), im->p,
		                                im->size, o)))
			return rc;
	} else if ((rc = heap_chunk_seal(w->t, id, body, o))) {
		return rc;
	}

	uint32_t key0_len = u32at(&w->ko, 1), f = fence_len(w, key0_len);
	uint32_t lk0 = u32at(&w->ko, w->nk - 1), lk1 = u32at(&w->ko, w->nk);
	if ((rc = put(w->pool, &w->ids, &id, 8)) ||
	    (rc = put(w->pool, &w->fences, w->kb.p, f)) ||
	    (rc = put32(w->pool, &w->fence_offs, (uint32_t)w->fences.len)))
		return rc;
	/* this chunk's last key: the next chunk's fence is cut against it */
	w->prev_last.len = 0;
	if ((rc = put(w->pool, &w->prev_last, w->kb.p + lk0, lk1 - lk0)))
		return rc;
	w->have_prev = true;
	w->bytes += o;
	w->chunk_bytes += heap_chunk_stored(heap_txn_heap(w->t), size);
	bw_stage_reset(w);
	return 0;
}

