/*
 * arrangement/batch_writer_record.c - how the batch writer ends: the last
 * chunk sealed, the key filter built from the hashes push took (or, for a
 * resumed batch, from every chunk again), and the batch record written
 * (finish) or left partial (suspend); and its free.  Layouts: batch_int.h,
 * filter.h.
 *
 * Runs once per batch.  It never writes a record before every chunk it
 * names is sealed, and never gives a partial record a filter.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_writer_int.h"
#include "arrangement/filter.h"

static void buf_free(pool *p, buf *b)
{
	if (b->p)
		pool_free(p, b->p, b->cap);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* Hashes ahead whose blocks fill_filter asks for early: a large batch's
 * filter (10 bits a key: 6 MB at 5M keys) is past the caches, and each
 * key's block is a random one. */
#define FILL_AHEAD 16

/* Sets the bits of every hashed key in nb zeroed checked blocks, then
 * each block's check, bound to id (filter.h: hash 3 and 4; 0: hash 2). */
static void fill_filter(const batch_writer *w, uint64_t *blocks, uint64_t nb,
                        uint64_t id)
{
	uint64_t nh = w->khash.len / 8;

	memset(blocks, 0, FILTER_BLOCK * nb);
	for (uint64_t i = 0; i < nh; i++) {
		uint64_t h;
		if (i + FILL_AHEAD < nh) {
			memcpy(&h, w->khash.p + 8 * (i + FILL_AHEAD), 8);
			__builtin_prefetch(blocks + filter_block_of(nb, h) *
			                                FILTER_WORDS, 1);
		}
		memcpy(&h, w->khash.p + 8 * i, 8);
		filter_add_checked(blocks, nb, h);
	}
	for (uint64_t i = 0; i < nb; i++)
		filter_block_seal(blocks + FILTER_WORDS * i, i, id);
}

/* The hash of the filters written in a chunk of their own: 4, or 2 and 3
 * for the tests that read what binaries of heap formats 5 and 6 wrote
 * (batch_filter_write_hash), whose records also list no chunk sums. */
static uint8_t chunk_filter_hash = BFILT_HASH_SUMS; /* atomic */

void batch_filter_write_hash(uint8_t hash)
{
	__atomic_store_n(&chunk_filter_hash,
	                 hash == BFILT_HASH_CHECKED || hash == BFILT_HASH_BOUND
	                 ? hash : BFILT_HASH_SUMS,
	                 __ATOMIC_RELAXED);
}

/* What a filter chunk cid of hash writes its blocks' checks bound to. */
static uint64_t filter_bind(const batch *b, uint8_t hash, uint64_t cid)
{
	return hash == BFILT_HASH_BOUND ? cid
	       : hash == BFILT_HASH_SUMS
	       ? bfilt_bind_sums(cid, b->chunk_sums, b->nchunks) : 0;
}

/* The XXH3 of each chunk named, as its header states it, for the record
 * (BREC_SUMS); waits for a write in flight (heap_chunk_sum).  NULL when
 * a test writes as format 5 or 6 did. */
static int chunk_sums(batch_writer *w, batch *b)
{
	int rc;

	b->chunk_sums = NULL;
	if (__atomic_load_n(&chunk_filter_hash, __ATOMIC_RELAXED) !=
	    BFILT_HASH_SUMS)
		return 0;
	uint64_t *s = malloc(8 * (size_t)b->nchunks + 1);
	if (!s)
		return AH_ENOMEM;
	for (uint32_t i = 0; i < b->nchunks; i++)
		if ((rc = heap_chunk_sum(w->t, b->chunk_ids[i], &s[i]))) {
			free(s);
			return rc == AH_ENOTFOUND
			       ? CORRUPT("a batch's chunk is not there") : rc;
		}
	b->chunk_sums = s;
	return 0;
}

static int write_filter(batch_writer *w, batch *b, uint64_t **inl)
{
	uint64_t nh = w->khash.len / 8, nb = filter_blocks_checked(nh), cid;
	uint64_t *blocks;
	void *body;
	size_t cap;
	int rc;

	*inl = NULL;
	if (w->no_filter) {
		if ((rc = bw_rehash_chunks(w)))
			return rc;
		nh = w->khash.len / 8;
		nb = filter_blocks_checked(nh);
	}
	if (nh != w->keys)
		return 0;
	if (nb > (UINT32_MAX - BFILT_CHUNK_HDR) / FILTER_BLOCK)
		return AH_ELIMIT;
	b->filter_blocks = nb;
	b->filter_keys = nh;
	b->filter_hash = BFILT_HASH_CHECKED;
	if (FILTER_BLOCK * nb <= FILTER_INLINE_MAX) {
		if (!(*inl = pool_malloc(w->pool, FILTER_BLOCK * nb)))
			return AH_ENOMEM;
		fill_filter(w, *inl, nb, 0);
		b->filter = *inl;
		b->filter_sum = filter_sum(*inl, nb);
		return 0;
	}
	size_t used = BFILT_CHUNK_HDR + FILTER_BLOCK * nb;
	if ((rc = heap_chunk_reserve(w->t, used, &cid, &body, &cap)))
		return rc;
	uint8_t *p = body;
	blocks = (uint64_t *)(p + BFILT_CHUNK_HDR); /* the body is 16-aligned */
	memcpy(p, BFILT_MAGIC, 4);
	put_u32(p + 4, 0);
	put_u64(p + 8, nb);
	b->filter_hash = b->chunk_sums ? BFILT_HASH_SUMS
	                 : __atomic_load_n(&chunk_filter_hash, __ATOMIC_RELAXED);
	if (!b->chunk_sums && b->filter_hash == BFILT_HASH_SUMS)
		b->filter_hash = BFILT_HASH_BOUND;
	fill_filter(w, blocks, nb, filter_bind(b, b->filter_hash, cid));
	b->filter_sum = filter_sum(blocks, nb);
	if ((rc = heap_chunk_seal(w->t, cid, body, used)))
		return rc;
	b->filter_chunk = cid;
	return 0;
}

/* Flushes and writes the record (flags BREC_*); *id = 0 when empty. */
static int write_record(batch_writer *w, const batch_desc *d, uint32_t flags,
                        uint64_t *id)
{
	batch b;
	uint64_t *inl = NULL;
	int rc;

	memset(&b, 0, sizeof b);
	*id = 0;
	if (w->detached) /* its images are not in the heap yet */
		return AH_ESTATE;
	if ((rc = bw_flush(w)))
		return rc;
	if (w->adopted && (rc = heap_del(w->t, HEAP_T_BATCH, &w->adopted, 8)))
		return rc;
	w->adopted = 0;
	if (w->updates == 0)
		return 0;
	uint32_t n = (uint32_t)(w->ids.len / 8);
	const uint8_t **fence = malloc(n * sizeof *fence + 1);
	size_t *flen = malloc(n * sizeof *flen + 1);
	if (!fence || !flen) {
		rc = AH_ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t lo = u32at(&w->fence_offs, i);
		fence[i] = w->fences.p + lo;
		flen[i] = u32at(&w->fence_offs, i + 1) - lo;
	}
	memset(&b, 0, sizeof b);
	b.desc = *d;
	b.time_width = 8;
	b.updates = w->updates;
	b.keys = w->keys;
	b.vals = w->vals;
	b.bytes = w->bytes;
	b.chunk_bytes = w->chunk_bytes;
	b.nchunks = n;
	b.chunk_ids = (uint64_t *)w->ids.p;
	b.fence = fence;
	b.fence_len = flen;
	b.rec_flags = flags | (w->v1_chunks ? 0 : BREC_COLS);
	if ((rc = chunk_sums(w, &b)))
		goto out;
	/* a partial record gets none: the writer that finishes it builds it */
	if (!(flags & BREC_PARTIAL) && (rc = write_filter(w, &b, &inl)))
		goto out;
	if ((rc = batch_new_id(w->t, &b.id)) || (rc = batch_record_put(w->t, &b)))
		goto out;
	*id = b.id;
out:
	if (inl)
		pool_free(w->pool, inl, FILTER_BLOCK * b.filter_blocks);
	free(fence);
	free(flen);
	free(b.chunk_sums);
	return rc;
}

int batch_writer_finish(batch_writer *w, const batch_desc *d, uint64_t *id)
{
	if (!w || !d || !id) {
		batch_writer_free(w);
		return AH_EINVAL;
	}
	int rc = write_record(w, d, 0, id);
	batch_writer_free(w);
	return rc;
}

int batch_writer_suspend(batch_writer *w, const batch_desc *d, uint64_t *id)
{
	if (!w || !d || !id) {
		batch_writer_free(w);
		return AH_EINVAL;
	}
	int rc = write_record(w, d, BREC_PARTIAL, id);
	batch_writer_free(w);
	return rc;
}

void batch_writer_free(batch_writer *w)
{
	if (!w)
		return;
	pool *p = w->pool;
	buf *hb[POOL_HINTS];
	size_t nh;
	bw_hinted(w, hb, &nh);
	for (size_t i = 0; i < nh; i++) /* key hashes grow with the batch */
		pool_set_hint(p, (unsigned)i,
		              hb[i]->cap < BW_HINT_MAX ? hb[i]->cap : BW_HINT_MAX);
	buf *bufs[] = {&w->ko, &w->kb, &w->kv, &w->vo, &w->vb, &w->vu,
	               &w->tm, &w->df, &w->ti, &w->di, &w->prev_last, &w->ids, &w->fences, &w->fence_offs,
	               &w->khash};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		buf_free(p, bufs[i]);
	bw_images_free(w);
	pool_free(p, w, sizeof *w);
}
