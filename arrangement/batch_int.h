/*
 * arrangement/batch_int.h - private to batch*.c, batch_writer*.c and
 * batch_cursor.c (and, for the inline batch cursor accessors, to merge.c and
 * cursor.c, which call them per (key, val)): the byte layouts of batch
 * chunks and batch records, the checked chunk view (bchunk), and the batch
 * cursor's state.
 *
 * It must never be included above arrangement/ (txn/ sees
 * arrangement/arrangement.h only), and nothing outside the files above may
 * depend on a layout here: the layouts change with the format, their users
 * do not.
 */
#ifndef ARRANGEMENT_BATCH_INT_H
#define ARRANGEMENT_BATCH_INT_H

#include "arrangement/batch.h"
#include "arrangement/filter.h" /* XXH3, inline */

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
#define BCHUNK_CONT (BCHUNK_KEY_CONT | BCHUNK_VAL_CONT)

/*
 * Batch chunk body, version 2 (BCHUNK_VERSION_COLS, what writers write;
 * heap format 4): version 1's columns, each dropped or narrowed when it
 * carries nothing.  Header (72 bytes):
 *
 *   off  size  field
 *     0    56  as version 1 (version field 2)
 *     6     1  flags: KEY_CONT 0x1, VAL_CONT 0x2 as version 1, and
 *              BCHUNK_KEY_FIXED 0x4: every key is key_width bytes, key i is
 *                at off_key_bytes + i * key_width, key_offs is empty;
 *              BCHUNK_VAL_FIXED 0x8: likewise for vals (val_offs empty);
 *              BCHUNK_KV_ONE 0x10: every key has one val (nvals = nkeys,
 *                key i owns val i), key_vals is empty;
 *              BCHUNK_VU_ONE 0x20: every val has one update (nupds =
 *                nvals, val j owns update j), val_upds is empty
 *    56     4  key_width (KEY_FIXED), else 0
 *    60     4  val_width (VAL_FIXED), else 0
 *    64     2  time dictionary entries nt: 0 = the times column is u64[nupds]
 *              as in version 1; 1..256 = it is u64[nt] distinct times, then
 *              (nt > 1) u8[nupds] indexes into them; nt = 1: every update
 *              has that time
 *    66     2  diff dictionary entries nd, the same for the diffs column
 *    68     4  reserved, 0
 *    72        columns (off_key_offs = 72), in version 1's order; an empty
 *              column has its next column's offset
 *
 * A reader checks the flags against the counts and every column's size
 * against what it must hold (O(1)); an index into a dictionary is checked
 * where it is read.  Version-1 chunks stay readable (written before format
 * 4, or by a heap upgraded from format 1).
 */
#define BCHUNK_VERSION_COLS 2
#define BCHUNK_HDR_COLS 72
#define BCHUNK_KEY_FIXED 0x4u
#define BCHUNK_VAL_FIXED 0x8u
#define BCHUNK_KV_ONE 0x10u
#define BCHUNK_VU_ONE 0x20u
#define BCHUNK_DICT_MAX 256

/*
 * Batch record (table HEAP_T_BATCH, key = u64 batch id, native-endian; the
 * value is only 2-byte aligned in the map, so it is decoded with memcpy).
 *
 *   off       size  field
 *     0          4  magic "AHBR"
 *     4          2  version: 1 (BREC_VERSION), or 2 with a key filter
 *     6          1  time_width (8)
 *     7          1  flags: BREC_PARTIAL 0x1 = a suspended merge's output,
 *                   linked to no spine; BREC_COLS 0x2 = every chunk is
 *                   body version 2 (written from format 4 on; a batch
 *                   without it may hold version-1 chunks); BREC_SUMS
 *                   0x4 = the chunk ids are followed by the chunks' XXH3
 *                   (heap format 7)
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
 *    76          4  version 1: reserved, 0 (not read); version 2: the
 *                   offset F3 of the filter reference
 *    80     8*nchunks  chunk ids, in key order
 *    S      8*nchunks  BREC_SUMS only (S = 80 + 8*nchunks): each chunk's
 *                   XXH3 as its header states it (heap_chunk_sum); a
 *                   reader that opens chunk i takes it only with this
 *                   XXH3, so a stale chunk at its place with its id (a
 *                   write the storage lost) is AH_ECORRUPT
 *    F      4*(nchunks+1)  fence offsets, relative to F2 = F + 4*(nchunks+1)
 *    F2         ...  fence key bytes (fence i = chunk i's first key)
 *
 * Version 2 (BREC_VERSION_FILTER) adds the key filter reference, which
 * ends the record exactly (F3 >= the end of the fence bytes):
 *    F3+0        4  magic "AHBF"
 *    F3+4        1  probes per key (FILTER_PROBES, 6)
 *    F3+5        1  hash: 1 = XXH3-64 seed 0, the mapping of filter.c;
 *                   2 = the same hash, checked blocks (filter.h: 480
 *                   bits and a check per block; heap format 5);
 *                   3 = as 2, each block's check bound to the filter
 *                   chunk's id (filter.h; heap format 6: filters in a
 *                   chunk of their own); 4 = as 3, bound to the chunk's
 *                   id xor the XXH3-64 of the record's chunk sums (S, so
 *                   BREC_SUMS only; heap format 7: what this library
 *                   writes in a chunk)
 *    F3+6        2  reserved, 0
 *    F3+8        8  nkeys hashed (= keys above)
 *    F3+16       8  nblocks (= filter_blocks(nkeys): ceil(10 nkeys / 512);
 *                   hash 2: filter_blocks_checked, ceil(10 nkeys / 480))
 *    F3+24       8  XXH3-64 of the nblocks * 64 block bytes
 *    F3+32       8  filter chunk id
 * Filter chunk body (a heap chunk of its own, freed with the batch):
 *     0          4  magic "AHBF"
 *     4          4  reserved, 0
 *     8          8  nblocks
 *    16  64*nblocks  blocks, each 8 native-endian u64 (512 bits)
 * A writer writes version 2 when it has a filter, else version 1 (partial
 * records, batches finished by a resumed writer).  A decoder from before
 * filters accepts only version 1: it reports a version-2 record as
 * AH_ECORRUPT (see ARCHITECTURE.md, "Batch record").
 *
 * Batch ids: the key of 8 bytes 0xff (BATCH_ID_COUNTER) holds a u64, the
 * next id to hand out; batch_new_id reads and bumps it, so ids are never
 * reused, even after a drop.  Iterations over HEAP_T_BATCH skip that key.
 */
#define BREC_MAGIC "AHBR"
#define BREC_VERSION 1
#define BREC_HDR 80
#define BREC_PARTIAL 0x1u
#define BREC_COLS 0x2u /* every chunk is body version 2 (format 4) */
#define BREC_SUMS 0x4u /* the chunks' XXH3 follow their ids (format 7) */
#define BATCH_ID_COUNTER UINT64_MAX
#define BREC_VERSION_FILTER 2
#define BFILT_MAGIC "AHBF"
#define BFILT_REF 40
#define BFILT_CHUNK_HDR 16
#define BFILT_HASH_XXH3 1
#define BFILT_HASH_CHECKED 2
#define BFILT_HASH_BOUND 3
#define BFILT_HASH_SUMS 4
/* Checked blocks (hash 2, 3 or 4). */
static inline bool bfilt_checked(uint8_t hash)
{
	return hash >= BFILT_HASH_CHECKED && hash <= BFILT_HASH_SUMS;
}
/* What the checks of a hash-4 filter in chunk cid are bound to: cid xor
 * the XXH3-64 of the record's n chunk sums (8·n bytes as stored, S);
 * the writer, the decoder and the tests take it from here. */
static inline uint64_t bfilt_bind_sums(uint64_t cid, const void *sums,
                                       uint32_t n)
{
	return cid ^ XXH3_64bits(sums, 8 * (size_t)n);
}
/* Blocks bound to their chunk (hash 3 or 4): a probe reads no header. */
static inline bool bfilt_bound(uint8_t hash)
{
	return hash == BFILT_HASH_BOUND || hash == BFILT_HASH_SUMS;
}

/* ----------------------------------------------------- the chunk view */

/* A u64 column of a chunk (times, diffs): full (a value per update) or a
 * dictionary of nd values with a u8 index per update (none when nd = 1). */
typedef struct bcol {
	const uint64_t *full; /* the values, or NULL: dictionary */
	const uint64_t *dict;
	const uint8_t *idx;   /* NULL when nd = 1 */
	uint32_t nd;
} bcol;

/* A chunk body whose header passed bchunk_open: column pointers into the
 * map.  The per-item accessors check each offset they use, and touch
 * (heap_chunk_touch) every byte they hand out first, so a chunk opened
 * page by page is checked exactly where it is read.  A column a version-2
 * chunk drops is NULL here: ko (keys of kw bytes), vo (vals of vw bytes),
 * kv (key i owns val i), vu (val j owns update j). */
typedef struct bchunk {
	heap_chunk_view hv;
	const uint8_t *body;
	uint32_t used, flags, nkeys, nvals, nupds, version;
	const uint32_t *ko, *kv, *vo, *vu;
	uint32_t kw, vw;
	bcol tm, df;
	uint32_t kb_lo, kb_hi, vb_lo, vb_hi; /* byte columns' bounds */
} bchunk;

/* Value u of column k; false when a dictionary index is out of range. */
static inline bool bcol_at(const bcol *k, uint32_t u, uint64_t *out)
{
	if (k->full) {
		*out = k->full[u];
		return true;
	}
	uint32_t x = k->idx ? k->idx[u] : 0;
	if (x >= k->nd)
		return false;
	*out = k->dict[x];
	return true;
}

/* Update u's time and diff (u < nupds). */
static inline bool bchunk_upd(const bchunk *c, uint32_t u, atime *t,
                              int64_t *d)
{
	uint64_t dv;

	if (!bcol_at(&c->tm, u, t) || !bcol_at(&c->df, u, &dv))
		return false;
	*d = (int64_t)dv;
	return true;
}

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
 * a seek) + the header checks of bchunk_open; a seek's view leaves the
 * ends of key_vals and val_upds to the accessors that read them
 * (bchunk_open_view). */
int bchunk_get(heap_txn *t, uint64_t id, enum heap_chunk_how how, bchunk *out);
/* bchunk_get through a remembered place (heap_chunk_open_at; loc NULL:
 * none). */
int bchunk_get_at(heap_txn *t, uint64_t id, uint64_t *loc,
                  enum heap_chunk_how how, bchunk *out);
/* bchunk_get_at(HEAP_CHUNK_PAGES): reads and checks the header only, for
 * a reader that plans its reads (batch_prefetch.c) and reads no column
 * through this view.  Errors: as bchunk_get_at. */
int bchunk_get_head(heap_txn *t, uint64_t id, uint64_t *loc, bchunk *out);
/* Whether chunk ci of b, opened in v, is the one b's record names: its
 * header's XXH3 is the record's (BREC_SUMS; always true for a record
 * without sums).  A chunk of the right id at the right place but of
 * another write (the storage lost the write of this one) fails it. */
static inline bool batch_chunk_sum_ok(const batch *b, uint32_t ci,
                                      const heap_chunk_view *v)
{
	return !b->chunk_sums || b->chunk_sums[ci] == v->xxh3;
}
/* The chunk of b that can hold key (the last whose fence is <= key, or
 * chunk 0); b has chunks. */
uint32_t batch_chunk_for(const batch *b, const void *key, size_t len);
/* Where key is likely to be among the nkeys keys of chunk ci of b, by
 * interpolation between its fence and the next (the last chunk: the mean
 * span of the chunks before it) on the keys' 8-byte prefixes; UINT32_MAX
 * when the fences do not tell (one chunk, equal prefixes).  A guess only:
 * the search from it (batch_cursor.c) is exact whatever it says. */
uint32_t bchunk_guess(const batch *b, uint32_t ci, uint32_t nkeys,
                      const void *key, size_t len);
/* How far (keys) a guess is expected to be off: about sqrt(nkeys), the
 * spread of uniform keys around their interpolated place, a power of 2. */
static inline uint32_t bchunk_guess_span(uint32_t nkeys)
{
	return nkeys < 4 ? 1 : 1u << ((32 - __builtin_clz(nkeys)) / 2);
}

/* Encodes b (id, desc, counts, chunk ids, fences, rec_flags) as its record
 * and puts it.  Errors: AH_ENOMEM, AH_ELIMIT, heap_put's. */
int batch_record_put(heap_txn *t, const batch *b);

#define BCUR_TSCRATCH 12

/* The batch cursor's state: private to batch_cursor.c, defined here only so
 * that the accessors below inline (merges call them per (key, val)). */
struct batch_cursor {
	heap_txn *t;
	const batch *b;
	frontier since;
	bchunk cv;          /* chunk c */
	uint32_t c, ki, vi, vend; /* vend: end of key ki's vals in chunk c */
	uint32_t kc, kk;    /* where the current key starts (rewind_vals) */
	uint32_t ahead;     /* chunks [.., ahead) were prefetched (load_at) */
	bool walk;          /* a merge's input: seeks load chunks as the walk
	                     * does (whole, read ahead), bcur_set_walk */
	bool kvalid, vvalid;
	const uint8_t *key, *val;
	size_t klen, vlen;
	/* time walk: on cv while in the position's chunk, on tv (a copy)
	 * once it follows the (key, val) into the next chunks */
	bchunk tv;
	bchunk *tw;
	uint32_t tc, tvi, tu, tend;
	bool tpending, tdone;
	/* bcur_times' pairs of a val whose columns are dictionaries, decoded
	 * (at most BCUR_TSCRATCH; longer lists are walked) */
	atime tsc[BCUR_TSCRATCH];
	int64_t dsc[BCUR_TSCRATCH];
	/* bytes_prefix8 of key and val while valid: the trace cursor's merge
	 * compares these first (order.h) */
	uint64_t kp, vp;
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

/* ------------------------------------------- the walk's inline steps */

/*
 * The hot steps of a walk (a scan, a merge input), inline so that the trace
 * cursor and the merger step a batch with index increments inside the
 * current chunk.  They apply only while the position's chunk was checked
 * whole (cv.hv.all: a walk entered it, HEAP_CHUNK_WHOLE), where a touch is
 * free; they still bounds-check every offset they use, exactly as
 * bchunk_key / bchunk_val / bchunk_key_vals / bchunk_val_upds do (a
 * checksum says the bytes are the ones written, not that they are sane).
 * Anything else (a chunk boundary, a continuation, a chunk a seek opened
 * page by page) goes to the out-of-line path in batch_cursor.c.
 */

/* How far ahead (bytes) of a walk's position in each column to prefetch. */
#ifndef BCUR_AHEAD
#define BCUR_AHEAD 1024
#endif

/* Field i of a byte column: [o[i], o[i+1]) inside [lo, hi), or, for a
 * fixed-width column (o NULL), the i-th of w bytes (the header check put
 * every field inside [lo, hi)); else false. */
static inline bool bchunk_field(const bchunk *c, const uint32_t *o, uint32_t w,
                                uint32_t i, uint32_t lo, uint32_t hi,
                                const uint8_t **p, size_t *len)
{
	if (!o) {
		*p = c->body + lo + (size_t)i * w;
		*len = w;
		return true;
	}
	uint32_t a = o[i], b = o[i + 1];

	if (a < lo || a > b || b > hi)
		return false;
	*p = c->body + a;
	*len = b - a;
	return true;
}

/* The val range of key i / update range of val j from a column that may
 * be dropped (one each); not yet checked. */
static inline void bchunk_range(const uint32_t *r, uint32_t i, uint32_t *lo,
                                uint32_t *hi)
{
	*lo = r ? r[i] : i;
	*hi = r ? r[i + 1] : i + 1;
}

/* Positions on val c->vi (< c->vend <= nvals) of a chunk checked whole. */
static inline int bcur_walk_val(batch_cursor *c)
{
	const bchunk *v = &c->cv;

	if (!bchunk_field(v, v->vo, v->vw, c->vi, v->vb_lo, v->vb_hi, &c->val,
	                  &c->vlen))
		return CORRUPT("batch chunk val offsets");
	c->vp = bytes_prefix8(c->val, c->vlen);
	c->vvalid = true;
	c->tpending = true;
	c->tdone = false;
	/* a walk of several batches runs more streams than the hardware
	 * prefetcher follows: ask for the lines a few vals ahead (a prefetch
	 * never faults, wherever it points) */
	__builtin_prefetch(c->val + BCUR_AHEAD);
	if (v->vo)
		__builtin_prefetch(&v->vo[c->vi] + BCUR_AHEAD / 4);
	if (v->vu)
		__builtin_prefetch(&v->vu[c->vi] + BCUR_AHEAD / 4);
	return 0;
}

/* Positions on key ki (< nkeys) of the position's chunk, checked whole,
 * and its first val. */
static inline int bcur_walk_key(batch_cursor *c, uint32_t ki)
{
	const bchunk *v = &c->cv;
	uint32_t lo, hi;

	if (!bchunk_field(v, v->ko, v->kw, ki, v->kb_lo, v->kb_hi, &c->key,
	                  &c->klen))
		return CORRUPT("batch chunk key offsets");
	bchunk_range(v->kv, ki, &lo, &hi);
	if (lo >= hi || hi > v->nvals)
		return CORRUPT("batch chunk key_vals");
	c->ki = c->kk = ki;
	c->kc = c->c;
	c->vi = lo;
	c->vend = hi;
	c->kp = bytes_prefix8(c->key, c->klen);
	c->kvalid = true;
	__builtin_prefetch(c->key + BCUR_AHEAD);
	if (v->ko)
		__builtin_prefetch(&v->ko[ki] + BCUR_AHEAD / 4);
	if (v->kv)
		__builtin_prefetch(&v->kv[ki] + BCUR_AHEAD / 4);
	return bcur_walk_val(c);
}

/* bcur_step_val, and bcur_step_key, with the step inside a chunk checked
 * whole inline, and the step off a key's last val that cannot continue in
 * the next chunk (the key is not the chunk's last). */
static inline int bcur_next_val(batch_cursor *c)
{
	if (c->kvalid && c->vvalid) {
		if (c->vi + 1 < c->vend && c->cv.hv.all) {
			c->vi++;
			return bcur_walk_val(c);
		}
		/* the key's last val, and not the chunk's last key: no
		 * continuation can follow (what bcur_step_val finds) */
		if (c->vi + 1 >= c->vend && c->ki + 1 < c->cv.nkeys) {
			c->vi++;
			c->vvalid = false;
			return 0;
		}
	}
	return bcur_step_val(c);
}

static inline int bcur_next_key(batch_cursor *c)
{
	if (c->cv.hv.all && c->kvalid && c->ki + 1 < c->cv.nkeys)
		return bcur_walk_key(c, c->ki + 1);
	return bcur_step_key(c);
}

/* bcur_times, with a val of a chunk checked whole that is not the chunk's
 * last (so its pairs lie in this chunk) read inline: pointers into full
 * columns, or one pair decoded from the dictionaries. */
static inline int bcur_times_next(batch_cursor *c, const atime **times,
                                  const int64_t **diffs, uint32_t *n)
{
	const bchunk *v = &c->cv;

	if (v->hv.all && bcur_val_valid(c) && c->vi + 1 < v->nvals) {
		uint32_t lo, hi;

		bchunk_range(v->vu, c->vi, &lo, &hi);
		if (lo >= hi || hi > v->nupds)
			return CORRUPT("batch chunk val_upds");
		if (v->tm.full && v->df.full) {
			*times = v->tm.full + lo;
			*diffs = (const int64_t *)v->df.full + lo;
			*n = hi - lo;
			return 0;
		}
		if (hi - lo == 1) {
			if (!bchunk_upd(v, lo, &c->tsc[0], &c->dsc[0]))
				return CORRUPT("batch chunk dictionary index");
			*times = c->tsc;
			*diffs = c->dsc;
			*n = 1;
			return 0;
		}
	}
	return bcur_times(c, times, diffs, n);
}

/* bcur_times_rewind, inline. */
static inline void bcur_times_reset(batch_cursor *c)
{
	c->tpending = true;
	c->tdone = false;
}

/* The out-of-line half of bcur_accumulate: the (key, val) may go on in the
 * next chunk, or the chunk was opened page by page. */
int bcur_accumulate_walk(batch_cursor *c, atime as_of, diff_sum *s);

/* Adds to *s the diffs of the current (key, val) whose time, advanced by
 * the cursor's since, is <= as_of: what summing bcur_time_next's pairs
 * gives, without moving the time walk (bcur_accumulate_walk may leave it
 * anywhere: rewind it before walking).  The current val's pairs lie in
 * this chunk unless it is the chunk's last val (VAL_CONT).  0 or
 * AH_ECORRUPT. */
static inline int bcur_accumulate(batch_cursor *c, atime as_of, diff_sum *s)
{
	const bchunk *v = &c->cv;
	uint32_t lo, hi;

	if (!v->hv.all || !bcur_val_valid(c) || c->vi + 1 >= v->nvals)
		return bcur_accumulate_walk(c, as_of, s);
	bchunk_range(v->vu, c->vi, &lo, &hi);
	if (lo >= hi || hi > v->nupds)
		return CORRUPT("batch chunk val_upds");
	if (v->tm.full)
		__builtin_prefetch(&v->tm.full[lo] + BCUR_AHEAD / 8);
	if (v->df.full)
		__builtin_prefetch(&v->df.full[lo] + BCUR_AHEAD / 8);
	/* t advanced by since is <= as_of iff both t and since are (the
	 * advance is a join) */
	bool none = !time_le(c->since.t, as_of);
	if (hi - lo == 1) { /* the common case: one update */
		atime t;
		int64_t d;

		if (!bchunk_upd(v, lo, &t, &d))
			return CORRUPT("batch chunk dictionary index");
		if (!none && time_le(t, as_of))
			*s += d;
		return 0;
	}
	diff_sum sum = 0;
	for (uint32_t u = lo; u < hi; u++) {
		atime t;
		int64_t d;

		if (!bchunk_upd(v, u, &t, &d))
			return CORRUPT("batch chunk dictionary index");
		if (time_le(t, as_of))
			sum += d;
	}
	if (!none)
		*s += sum;
	return 0;
}

#endif /* ARRANGEMENT_BATCH_INT_H */
