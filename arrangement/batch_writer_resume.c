/*
 * arrangement/batch_writer_resume.c - how the batch writer starts (new,
 * resume, new_detached) and its detached mode: a resumed writer reloads the last chunk of a partial
 * batch into staging (checking every range: the chunk is data read from
 * the map) and frees it, so a suspended-and-resumed batch has exactly the
 * chunk bodies of one written in one go; a detached writer seals chunks
 * as images in memory, installed into a write txn by batch_writer_attach.
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
	if (rc) {
		pool_free(p, w, sizeof *w);
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
	for (uint32_t i = 0; i + 1 < b->nchunks; i++)
		if ((rc = put(p, &w->ids, &b->chunk_ids[i], 8)) ||
		    (rc = put(p, &w->fences, b->fence[i], b->fence_len[i])) ||
		    (rc = put32(p, &w->fence_offs, (uint32_t)w->fences.len)))
			goto out;
	uint64_t last = b->chunk_ids[b->nchunks - 1];
	if ((rc = bchunk_get(t, last, HEAP_CHUNK_WHOLE, &c)) ||
	    (rc = bw_stage_chunk(w, &c)))
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

