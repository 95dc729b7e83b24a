/*
 * arrangement/batch_writer_resume.c - how the batch writer starts (new,
 * resume, new_detached) and its detached mode: a resumed writer reloads the last chunk of a partial
 * batch into staging (checking every range: the chunk is data read from
 * the map) and frees it, so a suspended-and-resumed batch has exactly the
 * chunk bodies of one written in one go; a detached writer seals chunks
 * as images in memory, installed into a write txn by batch_writer_attach;
 * a range writer's images (a key range of a merge computed on another
 * thread: merge_par.c) are appended to an ordinary writer by
 * batch_writer_absorb.
 *
 * It never adopts a partial batch record it did not check, and never
 * frees the adopted chunk outside the txn that writes its replacement.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_writer_int.h"

static int writer_alloc(heap_txn *t, pool *p, batch_writer **out)
{
	if (!t || !p || !out)
		return AH_EINVAL;
	batch_writer *w = pool_malloc(p, sizeof *w);
	if (!w)
		return AH_ENOMEM;
	memset(w, 0, sizeof *w);
	w->t = t;
	w->pool = p;
	w->max_body = heap_chunk_max_body(heap_txn_heap(t));
	bw_stage_reset(w);
	int rc = put32(p, &w->fence_offs, 0);
	buf *hb[POOL_HINTS];
	size_t nh;
	bw_hinted(w, hb, &nh);
	for (size_t i = 0; i < nh && !rc; i++)
		rc = bw_grow(p, hb[i], pool_hint(p, (unsigned)i));
	if (rc) {
		batch_writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int batch_writer_new(heap_txn *t, pool *p, batch_writer **out)
{
	return writer_alloc(t, p, out);
}

static int resume(heap_txn *t, pool *p, uint64_t partial_id, bool detach,
                  batch_writer **out)
{
	batch_writer *w = NULL;
	batch *b = NULL;
	bchunk c;
	int rc;

	if ((rc = writer_alloc(t, p, &w)) || (rc = batch_load_listed(t, partial_id, &b)))
		goto out;
	w->adopted = partial_id;
	w->v1_chunks = b->nchunks > 1 && !(b->rec_flags & BREC_COLS);
	w->no_filter = true;
	if (b->nchunks == 0)
		goto out;
	/* The finished record lists the adopted chunks' sums as their
	 * headers state them (write_record): each must be the one the
	 * partial record lists, or a stale chunk (a lost write) would be
	 * vouched for afresh. */
	for (uint32_t i = 0; i + 1 < b->nchunks; i++) {
		uint64_t sum;
		if (b->chunk_sums &&
		    ((rc = heap_chunk_sum(t, b->chunk_ids[i], &sum)) ||
		     sum != b->chunk_sums[i])) {
			rc = rc && rc != AH_ENOTFOUND ? rc
			     : CORRUPT("a partial batch's chunk is not the one its record names");
			goto out;
		}
		if ((rc = put(p, &w->ids, &b->chunk_ids[i], 8)) ||
		    (rc = put(p, &w->fences, b->fence[i], b->fence_len[i])) ||
		    (rc = put32(p, &w->fence_offs, (uint32_t)w->fences.len)))
			goto out;
	}
	uint64_t last = b->chunk_ids[b->nchunks - 1];
	if ((rc = bchunk_get(t, last, HEAP_CHUNK_WHOLE, &c)))
		goto out;
	if (!batch_chunk_sum_ok(b, b->nchunks - 1, &c.hv)) {
		rc = CORRUPT("a partial batch's chunk is not the one its record names");
		goto out;
	}
	if ((rc = bw_stage_chunk(w, &c)))
		goto out;
	w->size_ub = bw_staged_size(w);
	size_t last_cap = c.hv.value_bytes;
	if (((c.flags & BCHUNK_CONT) && b->nchunks == 1) || b->bytes < c.used ||
	    b->chunk_bytes < last_cap) {
		rc = CORRUPT("partial batch record");
		goto out;
	}
	w->updates = b->updates;
	w->keys = b->keys;
	w->vals = b->vals;
	w->bytes = b->bytes - c.used;
	w->chunk_bytes = b->chunk_bytes - last_cap;
	w->have_last = true;
	if (detach) /* freed by batch_writer_attach, in the write txn */
		w->free_last = last;
	else
		rc = heap_chunk_free(t, last);
out:
	batch_free(b);
	if (rc) {
		batch_writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int batch_writer_resume(heap_txn *t, pool *p, uint64_t partial_id,
                        batch_writer **out)
{
	return resume(t, p, partial_id, false, out);
}

int batch_writer_new_detached(heap_txn *t, pool *p, uint64_t partial_id,
                              batch_writer **out)
{
	int rc = partial_id ? resume(t, p, partial_id, true, out)
	                    : writer_alloc(t, p, out);

	if (rc == 0) {
		(*out)->detached = true;
		(*out)->img_first = (uint32_t)((*out)->ids.len / 8);
	}
	return rc;
}

bool batch_writer_detached(const batch_writer *w)
{
	return w && w->detached;
}

uint64_t batch_writer_image_bytes(const batch_writer *w)
{
	return w ? w->img_bytes : 0;
}

void bw_images_free(batch_writer *w)
{
	for (uint32_t i = 0; i < w->nimg; i++)
		free(w->img[i].p);
	free(w->img);
	w->img = NULL;
	w->nimg = w->img_cap = 0;
	w->img_bytes = 0;
}

int batch_writer_attach(batch_writer *w, heap_txn *wt)
{
	int rc = 0;

	if (!w || !wt || !w->detached)
		return AH_EINVAL;
	w->t = wt;
	if ((w->nimg && (rc = heap_format_mark(wt, HEAP_FORMAT_COLS))) ||
	    (w->free_last && (rc = heap_chunk_free(wt, w->free_last))))
		return rc;
	w->free_last = 0;
	for (uint32_t i = 0; i < w->nimg; i++) {
		uint64_t id;

		if ((rc = heap_chunk_image_put(wt, w->img[i].p, w->img[i].size,
		                               &id)))
			return rc;
		memcpy(w->ids.p + 8 * ((size_t)w->img_first + i), &id, 8);
	}
	bw_images_free(w);
	w->detached = false;
	return 0;
}


int batch_writer_new_range(heap_txn *t, pool *p, batch_writer **out)
{
	int rc = batch_writer_new_detached(t, p, 0, out);

	if (rc == 0)
		(*out)->whole_first = true;
	return rc;
}

int batch_writer_seal_staged(batch_writer *w)
{
	if (!w || !w->detached)
		return AH_EINVAL;
	return bw_flush(w);
}

/* The shortest prefix of k (klen bytes) greater than p (B7), k > p. */
static uint32_t cut(const buf *p, const uint8_t *k, uint32_t klen)
{
	size_t j = 0;

	while (j < p->len && j < klen && p->p[j] == k[j])
		j++;
	return j < klen ? (uint32_t)j + 1 : klen;
}

int batch_writer_absorb(batch_writer *w, batch_writer *b)
{
	int rc;

	if (!w || !b || w->detached || !b->detached || !b->whole_first ||
	    b->adopted || b->free_last || b->img_first != 0 ||
	    b->nimg != b->ids.len / 8 || w->no_filter)
		return AH_EINVAL;
	if (b->nu != 0)
		return AH_ESTATE; /* batch_writer_seal_staged first */
	if (b->nimg == 0)
		return 0;
	/* w's staged chunk comes before b's chunks */
	if ((rc = bw_flush(w)) || (rc = heap_format_mark(w->t, HEAP_FORMAT_COLS)))
		return rc;
	for (uint32_t i = 0; i < b->nimg; i++) {
		uint32_t lo = u32at(&b->fence_offs, i),
		         fl = u32at(&b->fence_offs, i + 1) - lo;
		const uint8_t *f = b->fences.p + lo;
		uint64_t id;

		if (i == 0) /* b's whole first key: the batch's first (none) */
			fl = w->ids.len == 0 ? 0 : w->have_prev ? cut(&w->prev_last, f, fl) : fl;
		if ((rc = heap_chunk_image_put(w->t, b->img[i].p, b->img[i].size,
		                               &id)) ||
		    (rc = put(w->pool, &w->ids, &id, 8)) ||
		    (rc = put(w->pool, &w->fences, f, fl)) ||
		    (rc = put32(w->pool, &w->fence_offs, (uint32_t)w->fences.len)))
			return rc;
	}
	if ((rc = put(w->pool, &w->khash, b->khash.p, b->khash.len)))
		return rc;
	w->prev_last.len = 0;
	if ((rc = put(w->pool, &w->prev_last, b->prev_last.p, b->prev_last.len)))
		return rc;
	w->have_prev = b->have_prev;
	w->updates += b->updates;
	w->keys += b->keys;
	w->vals += b->vals;
	w->bytes += b->bytes;
	w->chunk_bytes += b->chunk_bytes;
	return 0;
}
