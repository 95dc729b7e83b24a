/*
 * arrangement/batch_filter.c - a batch's key filter as stored: inline in
 * its record or in a chunk of its own (layouts: batch_int.h), read whole
 * (checked against the record's XXH3), loaded into the batch cache, or
 * probed in place one block at a time (the point query's path).
 *
 * Probing in place: a filter of hash 2 (checked blocks, filter.h) is read
 * through a chunk opened without any checksum (HEAP_CHUNK_SELF), and the
 * one 64-byte block probed is checked by its own check before a bit of it
 * is used, so a probe costs a cache line whatever the filter's size, in a
 * regular chunk or a jumbo one.  The open reads the chunk's header (its
 * first page), whose id check is what tells that the block is this
 * filter's.  A filter of hash 3 (heap format 6) needs no header: its
 * blocks' checks are bound to the chunk's id, so the probe finds the
 * block where the chunk's place and size put it (heap_chunk_place: no
 * byte read) and the block's own check tells both that it is intact and
 * that it is this chunk's; a block that fails it at a remembered place is
 * looked for again through LMDB before it is AH_ECORRUPT.  That is one
 * page a probe instead of two: at 10M updates a restart's first answer
 * probes five filters.  Hash 4 (heap format 7) binds the checks also to
 * the XXH3-64 of the batch's chunk sums (batch_int.h), so a filter block
 * left at the chunk's place by an earlier write of the same id (an
 * aborted append whose ids were handed out again, and a later write the
 * storage lost) fails its check unless that write was of the same keys.
 * A filter of hash 1 (written before heap
 * format 5) is read page by page from a regular chunk (the probed block's
 * page checked by its sum); one in a jumbo chunk, checked only whole, is
 * not probed (its batch is visited).
 *
 * It must never use a filter byte it has not checked, and never say
 * "cannot hold" for a key the batch holds (B6, batch_check).
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_int.h"
#include "arrangement/filter.h"
#include "heap/codec.h"

/* Opens b's filter chunk (how: whole, page by page or self-checked) and,
 * unless self-checked (whose header bytes are not checked), checks its
 * header against the record.  *blocks: where the blocks start. */
static int filter_chunk_open(heap_txn *t, const batch *b,
                             enum heap_chunk_how how, heap_chunk_view *v,
                             const uint8_t **blocks)
{
	int rc = heap_chunk_open_at(t, b->filter_chunk,
	                            b->chunk_loc ? &b->chunk_loc[b->nchunks] : NULL,
	                            how, v);

	if (rc == AH_ENOTFOUND)
		return CORRUPT("a batch record names a filter chunk that is not there");
	if (rc)
		return rc;
	if (b->filter_blocks > (SIZE_MAX - BFILT_CHUNK_HDR) / FILTER_BLOCK)
		return CORRUPT("batch key filter chunk");
	size_t used = BFILT_CHUNK_HDR + FILTER_BLOCK * b->filter_blocks;
	*blocks = v->body + BFILT_CHUNK_HDR;
	if (how == HEAP_CHUNK_SELF)
		/* only where the value holds the blocks: the header's fields
		 * (body_used, magic) are not checked in this mode */
		return (uint64_t)(v->body - v->value) + used <= v->value_bytes
		       ? 0 : CORRUPT("batch key filter chunk");
	if (v->body_used != used || memcmp(v->body, BFILT_MAGIC, 4) ||
	    get_u32(v->body + 4) || get_u64(v->body + 8) != b->filter_blocks)
		return CORRUPT("batch key filter chunk");
	return 0;
}

int batch_filter_blocks(heap_txn *t, const batch *b, const uint8_t **blocks)
{
	heap_chunk_view v;
	int rc = 0;

	*blocks = NULL;
	if (!b->filter_blocks)
		return 0;
	if (b->filter_chunk)
		rc = filter_chunk_open(t, b, HEAP_CHUNK_WHOLE, &v, blocks);
	else
		*blocks = b->filter_bytes;
	if (!rc && filter_sum(*blocks, b->filter_blocks) != b->filter_sum)
		rc = CORRUPT("batch key filter checksum");
	return rc;
}

int batch_filter_load(heap_txn *t, batch *b)
{
	const uint8_t *p;
	int rc = batch_filter_blocks(t, b, &p);

	if (rc || !p)
		return rc;
	size_t fb = FILTER_BLOCK * b->filter_blocks;
	if (!(b->own_filter = aligned_alloc(FILTER_BLOCK, fb)))
		return AH_ENOMEM;
	memcpy(b->own_filter, p, fb);
	b->filter = b->own_filter;
	return 0;
}

bool batch_filter_may_hold(const batch *b, const uint64_t *blocks, uint64_t h)
{
	return bfilt_checked(b->filter_hash)
	       ? filter_may_hold_checked(blocks, b->filter_blocks, h)
	       : filter_may_hold(blocks, b->filter_blocks, h);
}

bool batch_may_hold(const batch *b, uint64_t h)
{
	return !b->filter || batch_filter_may_hold(b, b->filter, h);
}

/* What the checks of b's filter blocks are bound to (0: hash 2). */
static uint64_t bound_id(const batch *b)
{
	return bfilt_bound(b->filter_hash) ? b->filter_bind : 0;
}

/* Hash 3 and 4 without the header: block blk where the chunk's place puts
 * it (through the remembered place, else LMDB), if it is there and checks
 * with what this filter is bound to (its chunk's id; with hash 4 also the
 * batch's chunk sums); true when it did (in w). */
static int bound_block(heap_txn *t, const batch *b, uint64_t blk, bool use_loc,
                       uint64_t w[FILTER_WORDS], bool *ok)
{
	const uint8_t *body;
	uint64_t cap;
	int rc = heap_chunk_place(t, b->filter_chunk,
	                          b->chunk_loc ? &b->chunk_loc[b->nchunks] : NULL,
	                          use_loc, &body, &cap);

	*ok = false;
	if (rc == AH_ENOTFOUND)
		return CORRUPT("a batch record names a filter chunk that is not there");
	if (rc)
		return rc;
	if (cap < BFILT_CHUNK_HDR ||
	    blk >= (cap - BFILT_CHUNK_HDR) / FILTER_BLOCK)
		return 0;
	memcpy(w, body + BFILT_CHUNK_HDR + FILTER_BLOCK * blk, 8 * FILTER_WORDS);
	*ok = filter_block_ok(w, blk, b->filter_bind);
	return 0;
}

/* Hash 2, 3 and 4: the probed block, read in place and checked alone. */
static int probe_checked(heap_txn *t, const batch *b, uint64_t h, bool *may)
{
	heap_chunk_view v;
	const uint8_t *base;
	uint64_t blk = filter_block_of(b->filter_blocks, h), w[FILTER_WORDS];
	bool ok;
	int rc;

	if (bfilt_bound(b->filter_hash) && !heap_verify_reads(heap_txn_heap(t))) {
		if ((rc = bound_block(t, b, blk, true, w, &ok)))
			return rc;
		if (!ok && (rc = bound_block(t, b, blk, false, w, &ok)))
			return rc;
		if (!ok)
			return CORRUPT("batch key filter block check");
		*may = filter_block_may_hold_checked(w, h);
		return 0;
	}
	if ((rc = filter_chunk_open(t, b, HEAP_CHUNK_SELF, &v, &base)))
		return rc;
	memcpy(w, base + FILTER_BLOCK * blk, sizeof w);
	if (!filter_block_ok(w, blk, bound_id(b)))
		return CORRUPT("batch key filter block check");
	*may = filter_block_may_hold_checked(w, h);
	return 0;
}

int batch_probe(heap_txn *t, const batch *b, uint64_t h, bool *may)
{
	heap_chunk_view v;
	const uint8_t *base;
	int rc;

	*may = true;
	if (b->filter) {
		*may = batch_filter_may_hold(b, b->filter, h);
		return 0;
	}
	if (!b->filter_chunk || !b->filter_blocks || !heap_txn_rdonly(t))
		return 0;
	if (bfilt_checked(b->filter_hash))
		return probe_checked(t, b, h, may);
	/* Hash 1 in a jumbo chunk (larger than the largest regular class),
	 * which has no page sums and is checked whole at every open: probing
	 * it would hash all of it per query, loading it would at a restart.
	 * Its batch is visited (the filter is still verified, B6). */
	if (BFILT_CHUNK_HDR + FILTER_BLOCK * b->filter_blocks >
	    heap_chunk_max_body(heap_txn_heap(t)))
		return 0;
	/* Page by page: page 0 (the header) is checked at open, the probed
	 * block's page by its own sum when touched; the whole filter's
	 * checksum is verify's (B6).  A restart reads one page per batch,
	 * not the filter. */
	if ((rc = filter_chunk_open(t, b, HEAP_CHUNK_PAGES, &v, &base)))
		return rc;
	uint64_t blk = filter_block_of(b->filter_blocks, h);
	if ((rc = heap_chunk_touch(&v, base + FILTER_BLOCK * blk, FILTER_BLOCK)))
		return rc;
	*may = filter_may_hold((const uint64_t *)(const void *)base,
	                       b->filter_blocks, h);
	return 0;
}

int batch_probe_want(heap_prefetch *pf, const batch *b, uint64_t h)
{
	uint64_t blk;

	if (b->filter || !b->filter_chunk || !b->filter_blocks)
		return 0;
	if (!bfilt_checked(b->filter_hash) &&
	    BFILT_CHUNK_HDR + FILTER_BLOCK * b->filter_blocks >
	    heap_chunk_max_body(heap_txn_heap(pf->t)))
		return 0; /* not probed (batch_probe) */
	blk = filter_block_of(b->filter_blocks, h);
	/* hash 3 and 4: the probe reads no header, so neither does this */
	return heap_prefetch_chunk_at(pf, b->filter_chunk,
	                              b->chunk_loc ? &b->chunk_loc[b->nchunks] : NULL,
	                              BFILT_CHUNK_HDR + FILTER_BLOCK * blk,
	                              FILTER_BLOCK,
	                              !bfilt_bound(b->filter_hash) ||
	                              heap_verify_reads(heap_txn_heap(pf->t)));
}

/* B6 for checked blocks: each block's own check (batch_check, after the
 * whole filter's XXH3): the index of the first that fails, or nblocks. */
uint64_t batch_filter_first_bad(const batch *b, const uint64_t *blocks)
{
	if (!bfilt_checked(b->filter_hash))
		return b->filter_blocks;
	for (uint64_t i = 0; i < b->filter_blocks; i++)
		if (!filter_block_ok(blocks + FILTER_WORDS * i, i, bound_id(b)))
			return i;
	return b->filter_blocks;
}
