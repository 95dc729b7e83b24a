/*
 * arrangement/batch.h - immutable batches: record, chunk format, writer and
 * single-batch cursor.  Contract of batch*.c / batch_writer*.c /
 * batch_cursor.c to the rest of arrangement/ and to txn/.
 *
 * A batch is a sorted, consolidated run of updates (key, val, time, diff)
 * with a Description {lower, upper, since} (differential dataflow's
 * trace::Description).  It is stored as
 *   - one batch record in table HEAP_T_BATCH (key: u64 batch id), holding
 *     the Description, counts, the list of chunk ids and the fence keys (the
 *     first key of each chunk, so seek_key finds its chunk by binary search);
 *   - a sequence of chunks (heap/), each a position-independent columnar
 *     trie like differential dataflow's ord_neu layout.  Every offset is
 *     relative to the chunk body, every column 8-byte aligned.  A key whose
 *     vals do not fit one chunk continues in the next (flag KEY_CONT on the
 *     next chunk), and likewise a (key, val) whose times do not fit (VAL_CONT).
 * The byte layout is drawn in ARCHITECTURE.md ("Batch chunk").
 *
 * Invariants (checked by batch_check):
 *  B1 (key, val, time) strictly increasing over the whole batch;
 *     keys/vals compare as unsigned bytes, shorter prefix first.
 *  B2 no diff is 0.
 *  B3 lower <= t, and t < upper or t <= since (as ARCHITECTURE.md §4): a
 *     compacted batch holds times advanced by its since, which may lie
 *     beyond its upper (a merge with since past its inputs' upper).
 *  B4 every offset and range lies inside its chunk body (version 2: every
 *     dropped column's flag agrees with the counts, every fixed-width and
 *     dictionary column fits its room, every dictionary index is below
 *     its entries; a batch marked BREC_COLS holds version-2 chunks only).
 *  B5 counts in the record equal the sums over chunks (logical keys/vals,
 *     continued ones counted once).
 *  B6 a key filter (record version 2) counts the batch's keys, its blocks
 *     match the record's checksum, and every key of the batch passes it.
 *  B7 fence i is a prefix of chunk i's first key: all of it when the key
 *     continues the previous chunk's (KEY_CONT), else one greater than
 *     chunk i-1's last key (writers write the shortest such prefix).
 * Data read from the map is untrusted: violations are AH_ECORRUPT, never an
 * assert.
 *
 * This is the contract of batches to the rest of arrangement/ (spine.c,
 * merge.c, builder.c, cursor.c, arrangement.c); the byte layouts and the
 * chunk views that only batch*.c share are in batch_int.h.  Nothing above
 * arrangement/ includes either: txn/ sees arrangement/arrangement.h.
 */
#ifndef ARRANGEMENT_BATCH_H
#define ARRANGEMENT_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "arrangement/order.h"
#include "arrangement/time.h"
#include "heap/heap.h"

/* differential dataflow's Description: the batch holds updates at times
 * beyond lower and before upper, advanced by since (arrangement/time.h). */
typedef struct batch_desc {
	frontier lower, upper, since;
} batch_desc;

/* --------------------------------------------------------- batch record */

/* A decoded batch record.  Owned by whoever loaded it (batch_free); plain
 * malloc, not the pool, since readers on any thread load batches.  fence[i]
 * points into the map (valid until the txn ends). */
typedef struct batch {
	uint64_t id;
	batch_desc desc;
	uint32_t time_width;  /* bytes per time: 8 (u64) in format 1 */
	uint64_t updates;     /* (time, diff) entries */
	uint64_t keys;        /* distinct keys */
	uint64_t vals;        /* distinct (key, val) */
	uint64_t bytes;       /* chunk body bytes used */
	uint64_t chunk_bytes; /* chunk bytes reserved (class capacity + header) */
	uint32_t nchunks;
	uint64_t *chunk_ids;  /* nchunks */
	/* nchunks: each chunk's XXH3 as the record lists it (BREC_SUMS), or
	 * NULL (a record from before heap format 7): a reader takes chunk i
	 * only when its header states chunk_sums[i] (batch_chunk_sum_ok). */
	uint64_t *chunk_sums;
	const uint8_t **fence;/* nchunks: first key of each chunk */
	size_t *fence_len;    /* nchunks */
	uint32_t rec_flags;   /* BREC_* (BREC_PARTIAL: a suspended merge) */
	/* The key filter (filter.h), record version 2: filter_keys keys
	 * hashed into filter_blocks blocks (0: none, a version-1 record),
	 * inline in the record at filter_off or, when larger than
	 * FILTER_INLINE_MAX, in chunk filter_chunk; the blocks hash to
	 * filter_sum.  filter points to checked blocks only in a batch of the
	 * cache (batch_cache.c); elsewhere it is NULL and the batch is always
	 * visited.  The writer sets filter (inline) or filter_chunk for
	 * batch_record_put. */
	const uint64_t *filter;
	uint64_t filter_chunk, filter_blocks, filter_keys, filter_sum;
	/* what the checks of a hash-3 or 4 filter's blocks are bound to: the
	 * filter chunk's id (3), xor the XXH3-64 of the chunk sums (4) */
	uint64_t filter_bind;
	uint8_t filter_hash;         /* BFILT_HASH_*: its bit mapping */
	uint32_t filter_off;         /* inline: the blocks' offset in the record */
	const uint8_t *filter_bytes; /* inline: the blocks as decoded (like
	                              * fence[]: in the map or copied) */
	/* batch_cache.c: a shared batch (refs > 0) is freed by the last
	 * batch_free; own_rec (the record, fence[] points into it) and
	 * own_filter (the blocks) are its own copies. */
	unsigned refs;
	void *own_rec, *own_filter;
	/* batch_cache.c: where each chunk was found (heap_chunk_open_at),
	 * nchunks + 1 words, the filter chunk's last; NULL elsewhere. */
	uint64_t *chunk_loc;
	/* batch_prefetch.c: the whole filter chunk was asked for (a cached
	 * batch only; atomic) */
	bool filter_asked;
} batch;

/* Loads batch id.  Errors: AH_ENOTFOUND, AH_ECORRUPT, AH_ENOMEM. */
int batch_load(heap_txn *t, uint64_t id, batch **out);
/* batch_load_listed through the per-heap cache of decoded records
 * (batch_cache.c): in a read-only txn the batch may be shared (freed by
 * the last batch_free, any thread) and carries its checked key filter; in
 * a write txn it is batch_load_listed's.  Read it only, and only while t
 * lives (its chunks are in t's snapshot).  Errors: as batch_load_listed,
 * and AH_ECORRUPT for a filter whose blocks fail their checksum. */
int batch_load_cached(heap_txn *t, uint64_t id, batch **out);
/* The record of id as stored (pointer into the map, valid until t ends).
 * Errors: AH_EINVAL (the id counter's key), heap_get's. */
int batch_record_get(heap_txn *t, uint64_t id, const uint8_t **rec,
                     size_t *len);
/* Decodes a record held in memory that the batch will own or outlive
 * (fence[] points into rec); the filter is not read.  Errors: AH_ECORRUPT,
 * AH_ENOMEM. */
int batch_decode(uint64_t id, const uint8_t *rec, size_t len, batch **out);
/* The blocks of b's filter, checked against the record's checksum: inline
 * (filter_bytes) or in its chunk, read whole (its checksums).  *blocks =
 * NULL without a filter; pointers into the map or b, valid while both
 * are, not 8-byte aligned.  Errors: AH_ECORRUPT. */
int batch_filter_blocks(heap_txn *t, const batch *b, const uint8_t **blocks);
/* batch_filter_blocks, copied into b->own_filter (b->filter then points
 * there).  Errors: AH_ECORRUPT, AH_ENOMEM. */
int batch_filter_load(heap_txn *t, batch *b);
/* Whether b can hold the key of hash h (filter_hash): true when b has no
 * checked filter. */
bool batch_may_hold(const batch *b, uint64_t h);
/* Whether the blocks of b's filter (b->filter_hash's mapping, checked)
 * hold h's bits. */
bool batch_filter_may_hold(const batch *b, const uint64_t *blocks, uint64_t h);
/* batch_may_hold, also for a filter kept in its chunk and not loaded (a
 * large one): in a read-only txn the probed block is read in place,
 * checked by its own check (hash 2) or, in a regular chunk, by its page's
 * sum (hash 1; a jumbo chunk of hash 1 is not probed: *may true).  *may is
 * true without a filter, or in a write txn.  Errors: AH_ECORRUPT,
 * heap_chunk_open's. */
int batch_probe(heap_txn *t, const batch *b, uint64_t h, bool *may);
/* Adds to pf the page batch_probe(b, h) is going to read (and its filter
 * chunk's header page), by its place alone: nothing when batch_probe reads
 * nothing from the map.  Errors: as heap_prefetch_chunk. */
int batch_probe_want(heap_prefetch *pf, const batch *b, uint64_t h);

/* The read plan of a cold point query (batch_prefetch.c; ARCHITECTURE.md
 * section 7, "Cold point reads").  Round 1, before the filters are probed: asks
 * for each batch's filter block and for the header page of the chunk of
 * each batch that can hold key.  Round 2, before the batches the filters
 * let through are searched (skip[i]: a batch that is not): reads those
 * chunks' headers and asks for the pages the search and the key's
 * columns are expected to read (bchunk_guess), when cold; with sample,
 * the first such batch's first key page is sampled first
 * (heap_prefetch_sample), which sets cold; with lazy (the caller's first
 * query, whose round 1 found its pages cached) a resident sample also
 * leaves the round unasked.  batches_prefetch_heads returns true when it
 * found the oldest batch's pages cached and asked for nothing.  Advisory: they fail nothing
 * (a chunk they cannot find or whose header fails its checks is left to
 * the seek's own reads, which report it) and change no answer.  They do
 * nothing in a write txn or under AH_OPEN_VERIFY_READS (whose opens read
 * every chunk whole). */
bool batches_prefetch_heads(heap_txn *t, batch *const *batches, size_t n,
                            const void *key, size_t len);
void batches_prefetch_keys(heap_txn *t, batch *const *batches, size_t n,
                           const bool *skip, bool cold, bool sample,
                           bool lazy, const void *key, size_t len);
/* After a cold query's rounds: asks once per cached batch for its whole
 * filter chunk (up to BATCH_FILTER_AHEAD_MAX bytes), so that later
 * queries find their filter blocks cached, as a table format that reads
 * its filters at open does.  Advisory, as above. */
#define BATCH_FILTER_AHEAD_MAX (4u << 20)
void batches_prefetch_filters(heap_txn *t, batch *const *batches, size_t n);
/* The first of b's filter blocks (8-byte aligned) whose own check fails
 * (hash 2), or b->filter_blocks: all hold (always, for hash 1). */
uint64_t batch_filter_first_bad(const batch *b, const uint64_t *blocks);
/* batch_load of an id that a spine or a merge lists: a missing record is
 * AH_ECORRUPT (its key was damaged or it was lost), never "not found". */
int batch_load_listed(heap_txn *t, uint64_t id, batch **out);
void batch_free(batch *b);
/* Deletes the batch record and frees all its chunks (and its filter's). */
int batch_drop(heap_txn *t, uint64_t id);
/* Rewrites the record of b with a new Description (chunks unchanged). */
int batch_set_desc(heap_txn *t, uint64_t id, const batch_desc *d);
/* Allocates a fresh batch id (max existing + 1; ids are never reused while
 * the record exists). */
int batch_new_id(heap_txn *t, uint64_t *id);
/* Structural check of every chunk (B1-B7) and, if checksums, each chunk's
 * XXH3.  Reports the first problem in msg (naming batch and chunk).
 * Errors: AH_ECORRUPT. */
int batch_check(heap_txn *t, const batch *b, bool checksums, char *msg,
                size_t msglen);

/* --------------------------------------------------------- batch writer */

typedef struct batch_writer batch_writer;

/* The batch writer is differential dataflow's Builder: it takes updates
 * already sorted and consolidated (the Batcher is builder.h).
 * A writer takes updates in strictly increasing (key, val, time) order with
 * diff != 0 (already consolidated) and fills chunks in the map.  Memory:
 * one chunk's columns of staging in the pool.  A resumed merge continues a
 * partial batch with batch_writer_resume instead (its chunks then start
 * with the proper continuation flags).  Errors: AH_ENOMEM. */
int batch_writer_new(heap_txn *t, pool *p, batch_writer **out);
/* For tests of the pool's writer hints (ARCHITECTURE.md section 7): the
 * capacities of w's hinted buffers into caps[] (at most POOL_HINTS; the
 * last is the key hashes), returning how many; and buffer i grown to at
 * least bytes (AH_ENOMEM, AH_EINVAL for no such buffer). */
size_t batch_writer_hinted_caps(batch_writer *w, size_t *caps);
int batch_writer_grow_hinted(batch_writer *w, size_t i, size_t bytes);
/* Continue a partially written batch (a suspended merge): adopts the chunks
 * of record partial_id (the record is deleted at finish/suspend). */
int batch_writer_resume(heap_txn *t, pool *p, uint64_t partial_id,
                        batch_writer **out);
/* A detached writer (the background merge, ARCHITECTURE §6): t may be a
 * read txn; every chunk it fills becomes an image in malloc'd memory (the
 * body, exactly as it would be in the map) instead of a reserved chunk,
 * and the chunk id in its record is 0 until batch_writer_attach.
 * partial_id (0: none) is resumed as by batch_writer_resume, except that
 * its last chunk, read into staging, is freed only at attach.  Errors: as
 * batch_writer_resume. */
int batch_writer_new_detached(heap_txn *t, pool *p, uint64_t partial_id,
                              batch_writer **out);
/* Installs a detached writer's images into write txn wt: frees the
 * adopted last chunk, reserves one chunk per image (ids in order), copies
 * and seals it, and makes w an ordinary writer of wt (its staging stays:
 * finish/suspend write the last chunk directly).  Errors: AH_EINVAL (not
 * detached), heap_chunk_reserve/seal/free's (wt is then poisoned). */
int batch_writer_attach(batch_writer *w, heap_txn *wt);
/* A key range of a batch computed apart (merge_par.c): a detached writer
 * (t may be a read txn) whose first chunk's fence is its whole first
 * key.  batch_writer_seal_staged makes its staged chunk an image (call it
 * when its range is done; AH_EINVAL when not detached).
 * batch_writer_absorb appends range writer b, sealed, to ordinary writer
 * w: w's staged chunk sealed, then b's images stored in w's txn in order
 * (heap_chunk_image_put), their fences (the first cut against w's last
 * key, B7), key hashes and counts added to w's.  Every key of b must be
 * greater than every key written to w.  b stays its caller's to free.
 * Errors: AH_EINVAL (not such a pair), AH_ESTATE (b not sealed),
 * heap_chunk_image_put's and bw_flush's (w's txn is then poisoned),
 * AH_ENOMEM. */
int batch_writer_new_range(heap_txn *t, pool *p, batch_writer **out);
int batch_writer_seal_staged(batch_writer *w);
int batch_writer_absorb(batch_writer *w, batch_writer *b);
/* True until batch_writer_attach (finish and suspend refuse it). */
bool batch_writer_detached(const batch_writer *w);
/* Bytes of images held (0 when not detached). */
uint64_t batch_writer_image_bytes(const batch_writer *w);
/* Errors: AH_EINVAL (out of order, diff 0), AH_EFULL, AH_ELIMIT, AH_EIO,
 * AH_ENOMEM. */
int batch_writer_push(batch_writer *w, const void *key, size_t klen,
                      const void *val, size_t vlen, uint64_t time,
                      int64_t diff);
/* Pushes a whole (key, val)'s consolidated (time, diff) run: n > 0 pairs in
 * increasing time, no zero diff; same_key true says the key equals the
 * last pushed key (the caller, a merge, knows it: the writer then compares
 * only the val); false means not known (the writer compares the key).  Equal to n batch_writer_push calls, minus their per-update
 * order checks and staging calls.  Errors: as batch_writer_push. */
int batch_writer_push_run(batch_writer *w, const void *key, size_t klen,
                          const void *val, size_t vlen, bool same_key,
                          const time_diff *td, size_t n);
/* batch_writer_push_run of one pair (time, diff), for a caller that
 * holds the key's and val's bytes_prefix8 (kp, vp: order.h; a merge's
 * cursors keep them): the order check settles on them, and the common
 * case (the pair fits the staged chunk and no column changes form) stages
 * without the run's loops.  Same result and errors as
 * batch_writer_push_run(w, key, klen, val, vlen, same_key, {time, diff},
 * 1); kp and vp must be the prefixes of key and val (not checked). */
int batch_writer_push_one(batch_writer *w, const void *key, size_t klen,
                          uint64_t kp, const void *val, size_t vlen,
                          uint64_t vp, bool same_key, uint64_t time,
                          int64_t diff);
/* batch_writer_push_one for a caller that has checked the order itself
 * (a merge's run loop, merge_run.c): (key, val) is strictly after the last
 * (key, val) pushed, and newkey says whether key differs from the last
 * pushed key; neither is checked again.  The same staged bytes as
 * batch_writer_push_one; its checks (and its run's path) where the common
 * case does not apply (a new chunk, a dictionary entry, a column changing
 * form).  Errors: as batch_writer_push. */
int batch_writer_push_next(batch_writer *w, const void *key, size_t klen,
                           uint64_t kp, const void *val, size_t vlen,
                           uint64_t vp, bool newkey, uint64_t time,
                           int64_t diff);
/* Flushes, writes the batch record with Description d and frees the
 * writer.  *id = 0 and nothing written when no update was pushed (any
 * chunks of an adopted partial batch are freed).  */
int batch_writer_finish(batch_writer *w, const batch_desc *d, uint64_t *id);
/* Flushes and writes a partial record (Description d, not linked to any
 * spine) so the work can be resumed in a later transaction; frees w. */
int batch_writer_suspend(batch_writer *w, const batch_desc *d, uint64_t *id);
/* Tests: the hash of the key filters written from now on in a chunk of
 * their own, process-wide: BFILT_HASH_CHECKED (2, as format-5 binaries
 * wrote them), anything else BFILT_HASH_BOUND (3, the default). */
void batch_filter_write_hash(uint8_t hash);
/* Frees w without writing a record (the txn must then be aborted). */
void batch_writer_free(batch_writer *w);
/* The last (key, val) pushed; pointers valid until the next push. */
bool batch_writer_last(const batch_writer *w, const void **key, size_t *klen,
                       const void **val, size_t *vlen);

/* --------------------------------------------------------- batch cursor */

typedef struct batch_cursor batch_cursor;

/* A cursor over one batch, reporting times advanced to max(t, since).
 * Starts at the first key and its first val.  malloc'd; close with
 * bcur_close before the txn ends.  Errors: AH_ENOMEM, AH_ECORRUPT. */
int bcur_open(heap_txn *t, const batch *b, frontier since, batch_cursor **out);
/* Like bcur_open, but positioned at the first key >= key, reading only the
 * chunk that can hold it (the fences say which). */
int bcur_open_at(heap_txn *t, const batch *b, frontier since, const void *key,
                 size_t len, batch_cursor **out);
void bcur_close(batch_cursor *c);
/* bcur_key_valid, bcur_val_valid, bcur_key, bcur_val (the current key /
 * val: pointers into the map) are inline, in batch_int.h. */
/* All movement returns 0 or AH_ECORRUPT; past the end is a no-op. */
int bcur_step_key(batch_cursor *c);
int bcur_seek_key(batch_cursor *c, const void *key, size_t len); /* >= key, forward only */
/* The cursor walks on from where its seeks land (a merge resumed at its
 * boundary, a range of merge_par.c): a seek loads chunks as the walk does
 * (checked whole, the next one read ahead), so that the merge's run loop
 * takes them, instead of a point read's page at a time. */
void bcur_set_walk(batch_cursor *c);
int bcur_step_val(batch_cursor *c);
int bcur_seek_val(batch_cursor *c, const void *val, size_t len);
int bcur_rewind_keys(batch_cursor *c);
int bcur_rewind_vals(batch_cursor *c);
/* (time, diff) of the current (key, val), in stored order, across chunk
 * continuations.  Returns 1 with a pair, 0 at the end, or AH_ECORRUPT. */
int bcur_time_next(batch_cursor *c, uint64_t *time, int64_t *diff);
/* The stored (time, diff) pairs of the current (key, val) in the current
 * chunk, checked, times NOT advanced by since: *n pairs at *times and
 * *diffs (into the map, or, for a chunk whose times or diffs are a
 * dictionary, decoded into the cursor: valid while the cursor stays on this
 * val and until its next bcur_times).  0 when these are all of its pairs,
 * 1 when it may go on in the next chunk or is a dictionary chunk's list of
 * more than BCUR_TSCRATCH pairs (walk it with bcur_time_next then), or
 * AH_ECORRUPT. */
int bcur_times(batch_cursor *c, const atime **times, const int64_t **diffs,
               uint32_t *n);
int bcur_times_rewind(batch_cursor *c);

#endif /* ARRANGEMENT_BATCH_H */
