/*
 * arrangement/batch_writer_int.h - private to the batch writer's files
 * (batch_writer.c: staging and push; batch_writer_seal.c: chunk sealing;
 * batch_writer_record.c: the key filter, the batch record and free;
 * batch_writer_resume.c: new, resuming a partial batch, detached
 * writers): the
 * writer's struct, its staging buffers and dictionaries, and the helpers
 * those files share.
 *
 * The small helpers are static inline here so that every caller keeps
 * them in its own translation unit; anything hot that is not here stays
 * static in batch_writer.c beside push and push_run (the bw_ functions
 * are the ones that cross files: none of them runs per update, but
 * bw_grow when a staging buffer grows).  It must never
 * be included outside the batch writer's files (the layers above see
 * batch.h only).
 */
#ifndef AH_ARRANGEMENT_BATCH_WRITER_INT_H
#define AH_ARRANGEMENT_BATCH_WRITER_INT_H

#include <string.h>

#include "arrangement/batch_int.h"
#include "heap/codec.h"

/* A growable pool buffer. */
typedef struct buf {
	uint8_t *p;
	size_t len, cap;
} buf;

/* The distinct values of a staged chunk's times (or diffs), up to
 * BCHUNK_DICT_MAX, in the order first seen: the column's dictionary
 * (layout: batch_int.h).  An open-addressing table of DICT_SLOTS slots;
 * over once a value past the last entry is seen (the column is then
 * written full). */
#define DICT_SLOTS 512
typedef struct dict {
	uint32_t n;
	bool over;
	int li;      /* the entry last found or added (-1: none), of value lv: */
	uint64_t lv; /* consecutive updates mostly share their time or diff */
	uint16_t slot[DICT_SLOTS]; /* 0: empty, else entry + 1 */
	uint64_t val[BCHUNK_DICT_MAX];
} dict;

static inline uint32_t dict_hash(uint64_t v)
{
	return (uint32_t)((v * 0x9e3779b97f4a7c15ull) >> 55); /* 9 bits */
}

/* Entry of v, or -1. */
static inline int dict_find(dict *d, uint64_t v)
{
	if (d->li >= 0 && d->lv == v)
		return d->li;
	for (uint32_t h = dict_hash(v);; h = (h + 1) & (DICT_SLOTS - 1)) {
		uint16_t s = d->slot[h];
		if (s == 0)
			return -1;
		if (d->val[s - 1] == v) {
			d->lv = v;
			return d->li = s - 1;
		}
	}
}

/* Entry of v, added if new; 0 (no entry) once over. */
static inline uint8_t dict_add(dict *d, uint64_t v)
{
	if (d->over)
		return 0;
	if (d->li >= 0 && d->lv == v)
		return (uint8_t)d->li;
	uint32_t h = dict_hash(v);
	for (;; h = (h + 1) & (DICT_SLOTS - 1)) {
		uint16_t s = d->slot[h];
		if (s == 0)
			break;
		if (d->val[s - 1] == v)
			return (uint8_t)(s - 1);
	}
	if (d->n == BCHUNK_DICT_MAX) {
		d->over = true;
		return 0;
	}
	d->val[d->n] = v;
	d->slot[h] = (uint16_t)++d->n;
	d->lv = v;
	d->li = (int)d->n - 1;
	return (uint8_t)(d->n - 1);
}

struct batch_writer {
	heap_txn *t;
	pool *pool;
	size_t max_body;
	/* staged chunk: offsets relative to their byte column; ti, di the
	 * dictionary index of each update's time and diff */
	buf ko, kb, kv, vo, vb, vu, tm, df, ti, di;
	uint32_t nk, nv, nu, flags;
	/* what the staged chunk's columns need (format 2 chunks): every key
	 * (val) kw (vw) bytes; the times' and diffs' dictionaries */
	bool kfix, vfix;
	uint32_t kw, vw;
	dict td, dd;
	uint64_t size_ub;    /* >= the staged chunk's body bytes (shape_size) */
	bool format_marked;
	bool have_last;
	uint64_t lkp, lvp;    /* bytes_prefix8 of the last key and val staged */
	/* The per-item staging columns (ko kv vo vu tm df ti di) have room
	 * for the staged chunk to reach ulim updates (and so ulim keys and
	 * vals: nk <= nv <= nu); buffers only grow, so a stale ulim is still
	 * a safe bound (batch_writer_push_one; 0: not computed). */
	uint32_t ulim;
	/* batch so far */
	buf ids, fences, fence_offs; /* u64, bytes, u32 (nchunks + 1) */
	uint64_t updates, keys, vals, bytes, chunk_bytes;
	uint64_t adopted; /* record id of a resumed partial batch, or 0 */
	bool v1_chunks;   /* it adopted chunks that may be version 1 */
	/* The key filter's input: the XXH3 of every distinct key (u64 each),
	 * 8 bytes per key until finish.  A resumed writer has not seen the
	 * adopted chunks' keys (no_filter): it hashes them all from the
	 * chunks at finish. */
	buf khash;
	bool no_filter;
	buf prev_last;  /* the last key of the chunk flushed last */
	bool have_prev;
	/* A range writer's (batch_writer_new_range): its first chunk's fence
	 * is the whole first key, cut by batch_writer_absorb. */
	bool whole_first;
	/* Detached (batch_writer_detach): chunks become images in memory,
	 * installed by batch_writer_attach into a write txn. */
	bool detached;
	uint64_t free_last;  /* the adopted last chunk, freed at attach */
	uint32_t img_first;  /* ids[img_first + i] is image i's (0 until then) */
	uint32_t nimg, img_cap;
	struct bw_image { uint8_t *p; size_t size, used; } *img; /* malloc'd:
	                      * heap_chunk_image_new, size = the value's bytes */
	uint64_t img_bytes;
};

/* Grows b to hold add more bytes (batch_writer.c). */
int bw_grow(pool *p, buf *b, size_t add);
/* The buffers whose capacities the writer's pool remembers (pool_hint):
 * a writer starts each at the last freed writer's capacity.  n: out. */
void bw_hinted(batch_writer *w, buf **out, size_t *n);
#define BW_HINT_MAX ((size_t)16 << 20)

/* The staging appends run once per key, val and update: inlined, with the
 * fixed-size ones copying a constant number of bytes (a move, not a call). */
static inline int put(pool *p, buf *b, const void *src, size_t n)
{
	int rc;
	if (b->len + n > b->cap && (rc = bw_grow(p, b, n)))
		return rc;
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
	return 0;
}

static inline int put32(pool *p, buf *b, uint32_t v)
{
	int rc;
	if (b->len + 4 > b->cap && (rc = bw_grow(p, b, 4)))
		return rc;
	put_u32(b->p + b->len, v);
	b->len += 4;
	return 0;
}

static inline int put64(pool *p, buf *b, uint64_t v)
{
	int rc;
	if (b->len + 8 > b->cap && (rc = bw_grow(p, b, 8)))
		return rc;
	put_u64(b->p + b->len, v);
	b->len += 8;
	return 0;
}

static inline uint32_t u32at(const buf *b, size_t i)
{
	uint32_t v;
	memcpy(&v, b->p + 4 * i, 4);
	return v;
}

static inline uint64_t a8(uint64_t x)
{
	return (x + 7) & ~(uint64_t)7;
}

/* Entries of a column's dictionary, or 0: the column is written full (it
 * is smaller so, or has more than BCHUNK_DICT_MAX distinct values). */
static inline uint32_t col_dict(uint32_t nd, uint64_t nu)
{
	if (nd == 0 || nd > BCHUNK_DICT_MAX)
		return 0;
	uint64_t bytes = 8 * (uint64_t)nd + (nd > 1 ? a8(nu) : 0);
	return bytes < 8 * nu ? nd : 0;
}

/* batch_writer.c: staging back to empty; chunk c's items into the
 * (empty) staging, every range checked. */
void bw_stage_reset(batch_writer *w);
int bw_stage_chunk(batch_writer *w, bchunk *c);
/* batch_writer.c: the body bytes of the staged chunk as it is now; the
 * hashes of every key of the batch's chunks again, for the filter of a
 * resumed batch (the staging's own per-update helpers stay static there,
 * beside their callers). */
uint64_t bw_staged_size(const batch_writer *w);
int bw_rehash_chunks(batch_writer *w);
/* batch_writer_seal.c: reserves (detached: makes an image), fills and
 * seals a chunk from the staged columns; nothing when none are staged. */
int bw_flush(batch_writer *w);
/* batch_writer_resume.c: frees a detached writer's images. */
void bw_images_free(batch_writer *w);

#endif
