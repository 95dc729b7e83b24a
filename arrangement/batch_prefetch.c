/*
 * arrangement/batch_prefetch.c - the read plan of a cold point query: which
 * pages of which batches a seek to one key is going to read, named before
 * it reads them, so that heap_prefetch_issue asks for them together
 * (heap/prefetch.c; the pattern and its rounds: ARCHITECTURE.md section 7,
 * "Cold point reads").
 *
 * A seek reads, per batch, a filter block, then in each batch the filter
 * lets through: the chunk header, the keys its search compares, and the key's key_vals,
 * vals, val_upds, times and diffs entries.  All but the header follow from
 * the header and a guess of the key's index: bchunk_guess interpolates the
 * key between the fences the batch record holds (in memory), and the
 * search starts from the same guess (batch_cursor.c search_from), so the
 * keys it compares are the ones planned.  Each column's range is the
 * guess's expected error wide (bchunk_guess_span) on both sides.
 *
 * Nothing here reads a column byte: the plan needs the header only (read
 * through bchunk_get_head, checked as every open checks it), and a wrong
 * plan costs reads, never an answer.  The reads themselves stay where they
 * were, each checked by its block's checksum when touched.
 */
#include <string.h>

#include "arrangement/batch_int.h"
#include "arrangement/filter.h"

uint32_t bchunk_guess(const batch *b, uint32_t ci, uint32_t nkeys,
                      const void *key, size_t len)
{
	uint64_t lo, hi, k;

	if (ci >= b->nchunks || b->nchunks < 2 || nkeys == 0)
		return UINT32_MAX;
	lo = bytes_prefix8(b->fence[ci], b->fence_len[ci]);
	k = bytes_prefix8(key, len);
	if (ci + 1 < b->nchunks) {
		hi = bytes_prefix8(b->fence[ci + 1], b->fence_len[ci + 1]);
	} else { /* the last chunk spans about what the others did */
		uint64_t f0 = bytes_prefix8(b->fence[0], b->fence_len[0]);
		uint64_t span = lo > f0 ? (lo - f0) / ci : 0;
		hi = span > UINT64_MAX - lo ? UINT64_MAX : lo + span;
	}
	if (hi <= lo || k <= lo)
		return 0;
	if (k >= hi)
		return nkeys - 1;
	unsigned __int128 g = (unsigned __int128)(k - lo) * nkeys / (hi - lo);
	return g >= nkeys ? nkeys - 1 : (uint32_t)g;
}

/* Items [i - e, i + e] (clipped to [0, n)) of a column of w-byte items at
 * col in view cv. */
static void want_items(heap_prefetch *pf, const bchunk *cv, const void *col,
                       uint32_t w, uint64_t n, uint64_t i, uint64_t e)
{
	uint64_t a = i > e ? i - e : 0, z = i + e + 1 < n ? i + e + 1 : n;

	if (col != NULL && a < z)
		heap_prefetch_view(pf, &cv->hv, (const uint8_t *)col + a * w,
		                   (size_t)((z - a) * w));
}

/* A byte column (offsets o, or fixed items of fw bytes) around item i of
 * n: the offsets and, where the bytes are variable, the same share of
 * the bytes [blo, bhi). */
static void want_field(heap_prefetch *pf, const bchunk *cv, const uint32_t *o,
                       uint32_t fw, uint32_t blo, uint32_t bhi, uint64_t n,
                       uint64_t i, uint64_t e)
{
	const uint8_t *bytes = cv->body + blo;

	if (o == NULL) {
		want_items(pf, cv, bytes, fw, n, i, e);
		return;
	}
	want_items(pf, cv, o, 4, n + 1, i, e + 1);
	uint64_t span = bhi - blo, at = n ? span * i / n : 0, m = n ? span * e / n + 64 : 0;
	uint64_t a = at > m ? at - m : 0, z = at + m < span ? at + m : span;
	if (a < z)
		heap_prefetch_view(pf, &cv->hv, bytes + a, (size_t)(z - a));
}

/* A u64 column of updates around update u: the values, or the
 * dictionary and its indexes. */
static void want_col(heap_prefetch *pf, const bchunk *cv, const bcol *k,
                     uint64_t n, uint64_t u, uint64_t e)
{
	if (k->full) {
		want_items(pf, cv, k->full, 8, n, u, e);
		return;
	}
	heap_prefetch_view(pf, &cv->hv, k->dict, 8 * (size_t)k->nd);
	if (k->idx)
		want_items(pf, cv, k->idx, 1, n, u, e);
}

/* The pages a seek to key reads in chunk cv (the one batch_chunk_for
 * names) when the key sits near key index g: see the top of the file.
 * *probe: the byte the search reads first, for a residency sample. */
static void want_chunk(heap_prefetch *pf, const bchunk *cv, uint64_t g,
                       const uint8_t **probe)
{
	uint64_t nk = cv->nkeys, nv = cv->nvals, nu = cv->nupds;
	uint64_t e = bchunk_guess_span(cv->nkeys);
	uint64_t gv = cv->kv ? g * nv / nk : g, ev = cv->kv ? e * nv / nk + 1 : e;
	uint64_t gu = cv->vu ? gv * nu / nv : gv, eu = cv->vu ? ev * nu / nv + 1 : ev;

	*probe = cv->ko ? (const uint8_t *)&cv->ko[g]
	                : cv->body + cv->kb_lo + g * cv->kw;
	if (cv->kv)
		want_items(pf, cv, cv->kv, 4, nk + 1, g, e + 1);
	if (cv->vu)
		want_items(pf, cv, cv->vu, 4, nv + 1, gv, ev + 1);
	want_field(pf, cv, cv->ko, cv->kw, cv->kb_lo, cv->kb_hi, nk, g, e);
	want_field(pf, cv, cv->vo, cv->vw, cv->vb_lo, cv->vb_hi, nv, gv, ev);
	want_col(pf, cv, &cv->tm, nu, gu, eu);
	want_col(pf, cv, &cv->df, nu, gu, eu);
}

/* Round 1 for one batch: its filter block and the header page of the
 * chunk that can hold key (batch_chunk_for), by their places alone. */
static int want_heads(heap_prefetch *pf, const batch *b, uint64_t h,
                      const void *key, size_t len)
{
	int rc = batch_probe_want(pf, b, h);
	uint32_t ci;

	if (rc || b->nchunks == 0)
		return rc;
	ci = batch_chunk_for(b, key, len);
	return heap_prefetch_chunk(pf, b->chunk_ids[ci],
	                           b->chunk_loc ? &b->chunk_loc[ci] : NULL, 0,
	                           BCHUNK_HDR_COLS);
}

/* Under AH_OPEN_VERIFY_READS every chunk is checked whole at its open,
 * so a seek reads its chunks whole: nothing to plan. */
static bool planned(heap_txn *t)
{
	return heap_txn_rdonly(t) && !heap_verify_reads(heap_txn_heap(t));
}

/* Are the pages pf names (one batch's: at most three) all cached? */
static bool heads_cached(heap_txn *t, const heap_prefetch *pf)
{
	bool resident = true;

	for (unsigned j = 0; j < pf->n && resident; j++)
		(void)heap_prefetch_sample(heap_txn_heap(t),
		                           (const void *)pf->lo[j], &resident);
	return pf->n > 0 && resident;
}

bool batches_prefetch_heads(heap_txn *t, batch *const *batches, size_t n,
                            const void *key, size_t len)
{
	heap_prefetch pf;
	uint64_t h = filter_hash(key, len);

	if (!planned(t))
		return false;
	heap_prefetch_begin(t, &pf);
	for (size_t i = 0; i < n; i++) { /* an error is the reads' to report */
		(void)want_heads(&pf, batches[i], h, key, len);
		/* the pages of the oldest, largest batch (the least likely to
		 * be cached) are sampled: all resident, and the round is not
		 * worth its syscall */
		if (i == 0 && heads_cached(t, &pf))
			return true;
	}
	heap_prefetch_issue(&pf);
	return false;
}

void batches_prefetch_keys(heap_txn *t, batch *const *batches, size_t n,
                           const bool *skip, bool cold, bool sample,
                           bool lazy, const void *key, size_t len)
{
	heap_prefetch pf;
	bool resident = false;

	if (!planned(t))
		return;
	heap_prefetch_begin(t, &pf);
	for (size_t i = 0; i < n && (cold || sample); i++) {
		const batch *b = batches[i];
		const uint8_t *probe;
		bchunk cv;

		if (skip[i] || b->nchunks == 0)
			continue;
		uint32_t ci = batch_chunk_for(b, key, len);
		/* a header that fails its checks: the seek's own open of it
		 * reports that (this plans no more) */
		if (bchunk_get_head(t, b->chunk_ids[ci],
		                    b->chunk_loc ? &b->chunk_loc[ci] : NULL, &cv) ||
		    !batch_chunk_sum_ok(b, ci, &cv.hv))
			break;
		uint32_t g = bchunk_guess(b, ci, cv.nkeys, key, len);
		want_chunk(&pf, &cv, g < cv.nkeys ? g : cv.nkeys / 2, &probe);
		if (sample) { /* the first batch visited decides */
			cold = heap_prefetch_sample(heap_txn_heap(t), probe,
			                            &resident);
			sample = false;
		}
	}
	if (cold && !(lazy && resident))
		heap_prefetch_issue(&pf);
}

void batches_prefetch_filters(heap_txn *t, batch *const *batches, size_t n)
{
	heap_prefetch pf;

	if (!planned(t))
		return;
	heap_prefetch_begin(t, &pf);
	for (size_t i = 0; i < n && pf.n == 0; i++) { /* one per query */
		batch *b = batches[i];
		uint64_t bytes = BFILT_CHUNK_HDR + FILTER_BLOCK * b->filter_blocks;

		/* only a cached batch remembers that it asked */
		if (b->filter || !b->filter_chunk || !b->chunk_loc ||
		    b->filter_blocks > BATCH_FILTER_AHEAD_MAX / FILTER_BLOCK ||
		    __atomic_load_n(&b->filter_asked, __ATOMIC_RELAXED) ||
		    __atomic_exchange_n(&b->filter_asked, true, __ATOMIC_RELAXED))
			continue;
		(void)heap_prefetch_chunk(&pf, b->filter_chunk,
		                          &b->chunk_loc[b->nchunks], 0, bytes);
	}
	heap_prefetch_issue(&pf);
}
