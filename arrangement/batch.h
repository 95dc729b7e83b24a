/*
 * arrangement/batch.h - immutable batches: record, chunk format, writer and
 * single-batch cursor.  Contract of batch.c / batch_writer.c / batch_cursor.c
 * to the rest of arrangement/ and to txn/.
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
 *  B3 lower <= time < upper for fresh batches; a compacted batch holds
 *     times advanced to max(t, since), so since <= upper and times < upper.
 *  B4 every offset and range lies inside its chunk body.
 *  B5 counts in the record equal the sums over chunks (logical keys/vals,
 *     continued ones counted once).
 * Data read from the map is untrusted: violations are AH_ECORRUPT, never an
 * assert.
 */
#ifndef ARRANGEMENT_BATCH_H
#define ARRANGEMENT_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "arrangement/order.h"
#include "heap/heap.h"

typedef struct batch_desc {
	uint64_t lower, upper, since;
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
	const uint8_t **fence;/* nchunks: first key of each chunk */
	size_t *fence_len;    /* nchunks */
	uint32_t rec_flags;   /* BREC_* (BREC_PARTIAL: a suspended merge) */
} batch;

/* Loads batch id.  Errors: AH_ENOTFOUND, AH_ECORRUPT, AH_ENOMEM. */
int batch_load(heap_txn *t, uint64_t id, batch **out);
/* batch_load of an id that a spine or a merge lists: a missing record is
 * AH_ECORRUPT (its key was damaged or it was lost), never "not found". */
int batch_load_listed(heap_txn *t, uint64_t id, batch **out);
void batch_free(batch *b);
/* Deletes the batch record and frees all its chunks. */
int batch_drop(heap_txn *t, uint64_t id);
/* Rewrites the record of b with a new Description (chunks unchanged). */
int batch_set_desc(heap_txn *t, uint64_t id, const batch_desc *d);
/* Allocates a fresh batch id (max existing + 1; ids are never reused while
 * the record exists). */
int batch_new_id(heap_txn *t, uint64_t *id);
/* Structural check of every chunk (B1-B5) and, if checksums, each chunk's
 * XXH3.  Reports the first problem in msg (naming batch and chunk).
 * Errors: AH_ECORRUPT. */
int batch_check(heap_txn *t, const batch *b, bool checksums, char *msg,
                size_t msglen);

/* --------------------------------------------------------- batch writer */

typedef struct batch_writer batch_writer;

/* A writer takes updates in strictly increasing (key, val, time) order with
 * diff != 0 (already consolidated) and fills chunks in the map.  Memory:
 * one chunk's columns of staging in the pool.  If prev_key is given, the
 * writer continues a batch whose last written (key, val) was (prev_key,
 * prev_val): used by a resumed merge; chunks then start with the proper
 * continuation flags.  Errors: AH_ENOMEM. */
int batch_writer_new(heap_txn *t, pool *p, batch_writer **out);
/* Continue a partially written batch (a suspended merge): adopts the chunks
 * of record partial_id (the record is deleted at finish/suspend). */
int batch_writer_resume(heap_txn *t, pool *p, uint64_t partial_id,
                        batch_writer **out);
/* Errors: AH_EINVAL (out of order, diff 0), AH_EFULL, AH_ELIMIT, AH_EIO,
 * AH_ENOMEM. */
int batch_writer_push(batch_writer *w, const void *key, size_t klen,
                      const void *val, size_t vlen, uint64_t time,
                      int64_t diff);
/* Flushes, writes the batch record with Description d and frees the
 * writer.  *id = 0 and nothing written when no update was pushed (any
 * chunks of an adopted partial batch are freed).  */
int batch_writer_finish(batch_writer *w, const batch_desc *d, uint64_t *id);
/* Flushes and writes a partial record (Description d, not linked to any
 * spine) so the work can be resumed in a later transaction; frees w. */
int batch_writer_suspend(batch_writer *w, const batch_desc *d, uint64_t *id);
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
int bcur_open(heap_txn *t, const batch *b, uint64_t since, batch_cursor **out);
/* Like bcur_open, but positioned at the first key >= key, reading only the
 * chunk that can hold it (the fences say which). */
int bcur_open_at(heap_txn *t, const batch *b, uint64_t since, const void *key,
                 size_t len, batch_cursor **out);
void bcur_close(batch_cursor *c);
/* bcur_key_valid, bcur_val_valid, bcur_key, bcur_val (the current key /
 * val: pointers into the map) are inline, at the end of this header. */
/* All movement returns 0 or AH_ECORRUPT; past the end is a no-op. */
int bcur_step_key(batch_cursor *c);
int bcur_seek_key(batch_cursor *c, const void *key, size_t len); /* >= key, forward only */
int bcur_step_val(batch_cursor *c);
int bcur_seek_val(batch_cursor *c, const void *val, size_t len);
int bcur_rewind_keys(batch_cursor *c);
int bcur_rewind_vals(batch_cursor *c);
/* (time, diff) of the current (key, val), in stored order, across chunk
 * continuations.  Returns 1 with a pair, 0 at the end, or AH_ECORRUPT. */
int bcur_time_next(batch_cursor *c, uint64_t *time, int64_t *diff);
int bcur_times_rewind(batch_cursor *c);

/* ------------------------------------------------- format 1 byte layouts */

/*
 * Batch chunk body (inside a heap chunk; the body is 16-byte aligned).  All
 * integers native-endian (the heap records the byte order; another order is
 * AH_EFORMAT at open).  Every byte offset is relative to the body start;
 * every column starts 8-byte aligned, padding is zero.
 *
 *   off  size  field
 *     0     4  magic "AHBC"
 *     4     2  version (BCHUNK_VERSION, 1)
 *     6     1  flags: BCHUNK_KEY_CONT 0x1 = key 0 continues the previous
 *              chunk's last key; BCHUNK_VAL_CONT 0x2 = (key 0, val 0)
 *              continues the previous chunk's last (key, val) (implies
 *              KEY_CONT)
 *     7     1  time_width (8)
 *     8     4  nkeys (>= 1)
 *    12     4  nvals (>= nkeys)
 *    16     4  nupds (>= nvals)
 *    20     4  used: body bytes used (<= the heap chunk's body_used)
 *    24     4  off_key_offs   u32[nkeys+1]  byte offsets of key i's bytes
 *    28     4  off_key_bytes  u8[]          key bytes, concatenated
 *    32     4  off_key_vals   u32[nkeys+1]  key i owns vals [kv[i], kv[i+1])
 *    36     4  off_val_offs   u32[nvals+1]  byte offsets of val j's bytes
 *    40     4  off_val_bytes  u8[]          val bytes, concatenated
 *    44     4  off_val_upds   u32[nvals+1]  val j owns updates [vu[j], vu[j+1])
 *    48     4  off_times      u64[nupds]
 *    52     4  off_diffs      i64[nupds]
 *    56     8  reserved, 0
 *    64        columns, in the order above (off_key_offs = 64)
 *
 * key i = body[ko[i] .. ko[i+1]), with off_key_bytes <= ko[i] <= ko[i+1] <=
 * off_key_vals; likewise vals inside [off_val_bytes, off_val_upds).  A
 * reader checks the header once per chunk (O(1)) and every offset or range
 * it dereferences (O(1) each), so a damaged chunk is AH_ECORRUPT, never an
 * out-of-bounds read; batch_check checks the whole order (B1-B5).
 * A continued key (val) is stored again at the start of the next chunk, so
 * every chunk is self-contained and fence[i] is simply chunk i's key 0.
 */
#define BCHUNK_MAGIC "AHBC"
#define BCHUNK_VERSION 1
#define BCHUNK_HDR 64
#define BCHUNK_KEY_CONT 0x1u
#define BCHUNK_VAL_CONT 0x2u

/*
 * Batch record (table HEAP_T_BATCH, key = u64 batch id, native-endian; the
 * value is only 2-byte aligned in the map, so it is decoded with memcpy).
 *
 *   off       size  field
 *     0          4  magic "AHBR"
 *     4          2  version (BREC_VERSION, 1)
 *     6          1  time_width (8)
 *     7          1  flags: BREC_PARTIAL 0x1 = a suspended merge's output,
 *                   linked to no spine
 *     8          8  desc.lower
 *    16          8  desc.upper
 *    24          8  desc.since
 *    32          8  updates
 *    40          8  keys (logical: a continued key counts once)
 *    48          8  vals (logical)
 *    56          8  bytes (sum of chunk body bytes used)
 *    64          8  chunk_bytes (sum of the chunks' stored bytes: their
 *                   class's value size)
 *    72          4  nchunks
 *    76          4  reserved, 0
 *    80     8*nchunks  chunk ids, in key order
 *    F      4*(nchunks+1)  fence offsets, relative to F2 = F + 4*(nchunks+1)
 *    F2         ...  fence key bytes (fence i = chunk i's first key)
 *
 * Batch ids: the key of 8 bytes 0xff (BATCH_ID_COUNTER) holds a u64, the
 * next id to hand out; batch_new_id reads and bumps it, so ids are never
 * reused, even after a drop.  Iterations over HEAP_T_BATCH skip that key.
 */
#define BREC_MAGIC "AHBR"
#define BREC_VERSION 1
#define BREC_HDR 80
#define BREC_PARTIAL 0x1u
#define BATCH_ID_COUNTER UINT64_MAX

/* ------------------------------------ internal: shared by batch*.c only */

/* A chunk body whose header passed bchunk_open: column pointers into the
 * map.  The per-item accessors check each offset they use, and touch
 * (heap_chunk_touch) every byte they hand out first, so a chunk opened
 * page by page is checked exactly where it is read. */
typedef struct bchunk {
	heap_chunk_view hv;
	const uint8_t *body;
	uint32_t used, flags, nkeys, nvals, nupds;
	const uint32_t *ko, *kv, *vo, *vu;
	const uint64_t *times;
	const int64_t *diffs;
	uint32_t kb_lo, kb_hi, vb_lo, vb_hi; /* byte columns' bounds */
} bchunk;

/* Checks the header (magic, version, flags, counts, column offsets and
 * sizes against body_used, alignment) of a body already checked whole (a
 * test's or a writer's own bytes).  Errors: AH_ECORRUPT. */
int bchunk_open(const void *body, size_t body_used, bchunk *out);
/* Key i / val j bytes; val range of key i (non-empty, inside [0, nvals]);
 * update range of val j (non-empty).  Errors: AH_ECORRUPT. */
int bchunk_key(bchunk *c, uint32_t i, const uint8_t **p, size_t *len);
int bchunk_val(bchunk *c, uint32_t j, const uint8_t **p, size_t *len);
int bchunk_key_vals(bchunk *c, uint32_t i, uint32_t *lo, uint32_t *hi);
int bchunk_val_upds(bchunk *c, uint32_t j, uint32_t *lo, uint32_t *hi);
/* Updates [lo, hi) of the chunk's times and diffs are about to be read. */
int bchunk_touch_upds(bchunk *c, uint32_t lo, uint32_t hi);
/* heap_chunk_open (how: HEAP_CHUNK_WHOLE for a walk, HEAP_CHUNK_PAGES for
 * a seek) + the header checks of bchunk_open. */
int bchunk_get(heap_txn *t, uint64_t id, enum heap_chunk_how how, bchunk *out);

/* Encodes b (id, desc, counts, chunk ids, fences, rec_flags) as its record
 * and puts it.  Errors: AH_ENOMEM, AH_ELIMIT, heap_put's. */
int batch_record_put(heap_txn *t, const batch *b);

/* The batch cursor's state: private to batch_cursor.c, defined here only so
 * that the accessors below inline (merges call them per (key, val)). */
struct batch_cursor {
	heap_txn *t;
	const batch *b;
	uint64_t since;
	bchunk cv;          /* chunk c */
	uint32_t c, ki, vi, vend; /* vend: end of key ki's vals in chunk c */
	uint32_t kc, kk;    /* where the current key starts (rewind_vals) */
	uint32_t ahead;     /* chunks [.., ahead) were prefetched (load_at) */
	bool kvalid, vvalid;
	const uint8_t *key, *val;
	size_t klen, vlen;
	/* time walk */
	bchunk tv;
	uint32_t tc, tvi, tu, tend;
	bool tpending, tdone;
};

static inline bool bcur_key_valid(const batch_cursor *c)
{
	return c && c->kvalid;
}

static inline bool bcur_val_valid(const batch_cursor *c)
{
	return c && c->kvalid && c->vvalid;
}

static inline void bcur_key(const batch_cursor *c, const void **key,
                            size_t *len)
{
	bool ok = bcur_key_valid(c);
	*key = ok ? c->key : NULL;
	*len = ok ? c->klen : 0;
}

static inline void bcur_val(const batch_cursor *c, const void **val,
                            size_t *len)
{
	bool ok = bcur_val_valid(c);
	*val = ok ? c->val : NULL;
	*len = ok ? c->vlen : 0;
}

#endif /* ARRANGEMENT_BATCH_H */
