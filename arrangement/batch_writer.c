/*
 * arrangement/batch_writer.c - writes a sorted, consolidated update stream
 * as batch chunks plus one batch record (layouts: batch.h).
 *
 * One chunk's columns are staged in the pool; when the next item would push
 * the staged chunk past the largest class, the chunk is reserved, the
 * columns are copied in (in pieces of at most 1 MiB: large single copies
 * into fresh map pages are slow) and sealed.  The last chunk takes the
 * smallest class that fits; a key or val too big for the largest class gets
 * a jumbo chunk of its own.  A key (or (key, val)) cut by a chunk boundary
 * is written again at the start of the next chunk, flagged KEY_CONT
 * (VAL_CONT).  A resumed writer reloads the last chunk of the partial batch
 * into staging and frees it, so a suspended-and-resumed batch has exactly the
 * chunk bodies of one written in one go.
 * It never reads a chunk it did not validate, and never writes a chunk after
 * sealing it.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_int.h"
#include "arrangement/filter.h"
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

_Static_assert(sizeof(time_diff) == 16, "time_diff is two u64s");

/* Runs of at most this many pairs probe the dictionaries once. */
#define RUN_PROBE 8

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

static void dict_reset(dict *d)
{
	d->n = 0;
	d->over = false;
	d->li = -1;
	memset(d->slot, 0, sizeof d->slot);
}

/* Entries of d once the n values vs are added (at most). */
static uint32_t dict_after(dict *d, const uint64_t *vs, size_t n,
                           size_t stride)
{
	uint64_t e = d->n;
	if (d->over)
		return BCHUNK_DICT_MAX + 1;
	for (size_t i = 0; i < n && e <= BCHUNK_DICT_MAX; i++)
		e += dict_find(d, vs[i * stride]) < 0;
	return (uint32_t)e;
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

static int grow(pool *p, buf *b, size_t add)
{
	if (b->len + add <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + add)
		cap *= 2;
	uint8_t *np = b->p ? pool_realloc(p, b->p, b->cap, cap)
	                   : pool_malloc(p, cap);
	if (!np)
		return AH_ENOMEM;
	b->p = np;
	b->cap = cap;
	return 0;
}

/* The staging appends run once per key, val and update: inlined, with the
 * fixed-size ones copying a constant number of bytes (a move, not a call). */
static inline int put(pool *p, buf *b, const void *src, size_t n)
{
	int rc;
	if (b->len + n > b->cap && (rc = grow(p, b, n)))
		return rc;
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
	return 0;
}

static inline int put32(pool *p, buf *b, uint32_t v)
{
	int rc;
	if (b->len + 4 > b->cap && (rc = grow(p, b, 4)))
		return rc;
	put_u32(b->p + b->len, v);
	b->len += 4;
	return 0;
}

static inline int put64(pool *p, buf *b, uint64_t v)
{
	int rc;
	if (b->len + 8 > b->cap && (rc = grow(p, b, 8)))
		return rc;
	put_u64(b->p + b->len, v);
	b->len += 8;
	return 0;
}

static void buf_free(pool *p, buf *b)
{
	if (b->p)
		pool_free(p, b->p, b->cap);
	b->p = NULL;
	b->len = b->cap = 0;
}

static uint32_t u32at(const buf *b, size_t i)
{
	uint32_t v;
	memcpy(&v, b->p + 4 * i, 4);
	return v;
}

static uint64_t a8(uint64_t x)
{
	return (x + 7) & ~(uint64_t)7;
}

/* Body bytes of a version-1 chunk with these counts (layout: batch.h):
 * no version-2 chunk is larger. */
static uint64_t chunk_size(uint64_t nk, uint64_t kbytes, uint64_t nv,
                           uint64_t vbytes, uint64_t nu)
{
	return BCHUNK_HDR + 2 * a8(4 * (nk + 1)) + a8(kbytes) +
	       2 * a8(4 * (nv + 1)) + a8(vbytes) + 16 * nu;
}

/* Entries of a column's dictionary, or 0: the column is written full (it
 * is smaller so, or has more than BCHUNK_DICT_MAX distinct values). */
static uint32_t col_dict(uint32_t nd, uint64_t nu)
{
	if (nd == 0 || nd > BCHUNK_DICT_MAX)
		return 0;
	uint64_t bytes = 8 * (uint64_t)nd + (nd > 1 ? a8(nu) : 0);
	return bytes < 8 * nu ? nd : 0;
}

static uint64_t col_size(uint32_t nd, uint64_t nu)
{
	nd = col_dict(nd, nu);
	return nd == 0 ? 8 * nu : 8 * (uint64_t)nd + (nd > 1 ? a8(nu) : 0);
}

/* What a staged chunk is: its counts and what its columns need. */
typedef struct shape {
	uint64_t nk, kbytes, nv, vbytes, nu;
	bool kfix, vfix;
	uint32_t tnd, dnd; /* distinct times, diffs (> BCHUNK_DICT_MAX: many) */
} shape;

/* Body bytes of a version-2 chunk of that shape (layout: batch_int.h).
 * It never shrinks as items are added: counts only grow, a column once
 * needed stays needed (a key with two vals keeps nvals > nkeys), and a
 * dictionary only gains entries. */
static uint64_t shape_size(const shape *s)
{
	return BCHUNK_HDR_COLS + (s->kfix ? 0 : a8(4 * (s->nk + 1))) +
	       a8(s->kbytes) + (s->nv == s->nk ? 0 : a8(4 * (s->nk + 1))) +
	       (s->vfix ? 0 : a8(4 * (s->nv + 1))) + a8(s->vbytes) +
	       (s->nu == s->nv ? 0 : a8(4 * (s->nv + 1))) +
	       col_size(s->tnd, s->nu) + col_size(s->dnd, s->nu);
}

/* How much a column of nu updates may grow by with n more whose values
 * its dictionary holds (or it is full for good). */
static inline uint64_t col_grow(const dict *d, uint64_t nu, uint64_t n)
{
	if (d->over || col_dict(d->n, nu) == 0)
		return 8 * n; /* full (a dictionary it may become is smaller) */
	return d->n == 1 ? 0 : n + 8;
}

/* An upper bound on what the staged chunk grows by with a key of klen
 * (newkey), a val of vlen and n pairs whose times and diffs its
 * dictionaries hold (tknown, dknown), each a8 step counted whole; false
 * when a column may change form (shape_after is exact then). */
static inline bool grow_bound(const batch_writer *w, bool newkey, size_t klen,
                              size_t vlen, size_t n, bool tknown, bool dknown,
                              uint64_t *ub)
{
	if ((newkey && w->kfix && klen != w->kw) || (w->vfix && vlen != w->vw) ||
	    (!newkey && w->nv == w->nk) || (n > 1 && w->nu == w->nv) ||
	    !tknown || !dknown || w->nk == 0)
		return false;
	uint64_t g = vlen + 8 + (w->vfix ? 0 : 8) + (w->nu == w->nv ? 0 : 8);
	if (newkey)
		g += klen + 8 + (w->kfix ? 0 : 8) + (w->nv == w->nk ? 0 : 8);
	*ub = g + col_grow(&w->td, w->nu, n) + col_grow(&w->dd, w->nu, n);
	return true;
}

static shape staged_shape(const batch_writer *w)
{
	shape s = { w->nk, w->kb.len, w->nv, w->vb.len, w->nu, w->kfix,
	            w->vfix, w->td.over ? BCHUNK_DICT_MAX + 1 : w->td.n,
	            w->dd.over ? BCHUNK_DICT_MAX + 1 : w->dd.n };
	return s;
}

/* The staged shape with a key (klen, when newkey), a val (vlen, when
 * newval) and n pairs (times at ts, diffs at ds, stride u64s apart)
 * added. */
static shape shape_after(batch_writer *w, bool newkey, size_t klen,
                         bool newval, size_t vlen, const uint64_t *ts,
                         const uint64_t *ds, size_t n, size_t stride)
{
	shape s = staged_shape(w);

	if (newkey) {
		s.kfix = s.nk == 0 || (s.kfix && klen == w->kw);
		s.nk++;
		s.kbytes += klen;
	}
	if (newval) {
		s.vfix = s.nv == 0 || (s.vfix && vlen == w->vw);
		s.nv++;
		s.vbytes += vlen;
	}
	s.nu += n;
	s.tnd = dict_after(&w->td, ts, n, stride);
	s.dnd = dict_after(&w->dd, ds, n, stride);
	return s;
}

static void stage_reset(batch_writer *w)
{
	w->ko.len = w->kb.len = w->kv.len = 0;
	w->vo.len = w->vb.len = w->vu.len = 0;
	w->tm.len = w->df.len = w->ti.len = w->di.len = 0;
	w->nk = w->nv = w->nu = 0;
	w->flags = 0;
	w->kfix = w->vfix = true;
	w->kw = w->vw = 0;
	dict_reset(&w->td);
	dict_reset(&w->dd);
	w->size_ub = 0;
}

/* The staged chunk's offset arrays carry a leading 0 entry. */
static int stage_begin(batch_writer *w)
{
	int rc = 0;
	if (w->ko.len == 0) {
		if ((rc = put32(w->pool, &w->ko, 0)) ||
		    (rc = put32(w->pool, &w->kv, 0)) ||
		    (rc = put32(w->pool, &w->vo, 0)) ||
		    (rc = put32(w->pool, &w->vu, 0)))
			return rc;
	}
	return 0;
}

static int stage_key(batch_writer *w, const void *k, size_t klen)
{
	int rc;
	if ((rc = put(w->pool, &w->kb, k, klen)) ||
	    (rc = put32(w->pool, &w->ko, (uint32_t)w->kb.len)) ||
	    (rc = put32(w->pool, &w->kv, w->nv)))
		return rc;
	if (w->nk == 0)
		w->kw = (uint32_t)klen;
	w->kfix = w->kfix && klen == w->kw;
	w->nk++;
	w->lkp = bytes_prefix8(k, klen);
	return 0;
}

static int stage_val(batch_writer *w, const void *v, size_t vlen)
{
	int rc;
	if ((rc = put(w->pool, &w->vb, v, vlen)) ||
	    (rc = put32(w->pool, &w->vo, (uint32_t)w->vb.len)) ||
	    (rc = put32(w->pool, &w->vu, w->nu)))
		return rc;
	if (w->nv == 0)
		w->vw = (uint32_t)vlen;
	w->vfix = w->vfix && vlen == w->vw;
	w->nv++;
	w->lvp = bytes_prefix8(v, vlen);
	/* the key's val range ends after this val */
	uint32_t end = w->nv;
	memcpy(w->kv.p + 4 * w->nk, &end, 4);
	return 0;
}

/* Room for n more updates in the update columns. */
static inline int upd_room(batch_writer *w, size_t n)
{
	int rc = 0;
	if (w->tm.len + 8 * n <= w->tm.cap && w->df.len + 8 * n <= w->df.cap &&
	    w->ti.len + n <= w->ti.cap && w->di.len + n <= w->di.cap)
		return 0;
	if ((w->tm.len + 8 * n > w->tm.cap && (rc = grow(w->pool, &w->tm, 8 * n))) ||
	    (w->df.len + 8 * n > w->df.cap && (rc = grow(w->pool, &w->df, 8 * n))) ||
	    (w->ti.len + n > w->ti.cap && (rc = grow(w->pool, &w->ti, n))) ||
	    (w->di.len + n > w->di.cap && (rc = grow(w->pool, &w->di, n))))
		return rc;
	return 0;
}

/* Appends one update to the update columns (room made by upd_room); ti,
 * di: the dictionary entries of its time and diff when known, else -1. */
static inline void upd_put_ix(batch_writer *w, uint64_t time, int64_t diff,
                              int ti, int di)
{
	put_u64(w->tm.p + w->tm.len, time);
	put_u64(w->df.p + w->df.len, (uint64_t)diff);
	w->ti.p[w->ti.len++] = ti >= 0 ? (uint8_t)ti : dict_add(&w->td, time);
	w->di.p[w->di.len++] = di >= 0 ? (uint8_t)di
	                               : dict_add(&w->dd, (uint64_t)diff);
	w->tm.len += 8;
	w->df.len += 8;
}

static inline void upd_put(batch_writer *w, uint64_t time, int64_t diff)
{
	upd_put_ix(w, time, diff, -1, -1);
}

static int stage_upd(batch_writer *w, uint64_t time, int64_t diff)
{
	int rc;
	if ((rc = upd_room(w, 1)))
		return rc;
	upd_put(w, time, diff);
	w->nu++;
	uint32_t end = w->nu;
	memcpy(w->vu.p + 4 * w->nv, &end, 4);
	return 0;
}

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

static uint64_t staged_size(const batch_writer *w)
{
	shape sh = staged_shape(w);
	return shape_size(&sh);
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
		return 0;
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
static int flush(batch_writer *w)
{
	uint64_t size = staged_size(w), id;
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
	stage_reset(w);
	return 0;
}

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
	stage_reset(w);
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

/* Stages update u of chunk c. */
static int stage_upd_of(batch_writer *w, const bchunk *c, uint32_t u)
{
	atime t;
	int64_t d;

	if (!bchunk_upd(c, u, &t, &d))
		return CORRUPT("partial batch: dictionary index");
	return stage_upd(w, t, d);
}

/* Copies chunk c's items into the (empty) staging, checking every range. */
static int stage_chunk(batch_writer *w, bchunk *c)
{
	int rc = 0;
	if ((rc = stage_begin(w)))
		return rc;
	w->flags = c->flags & BCHUNK_CONT;
	for (uint32_t i = 0; i < c->nkeys; i++) {
		const uint8_t *k;
		size_t kl;
		uint32_t vlo, vhi;
		if ((rc = bchunk_key(c, i, &k, &kl)) ||
		    (rc = bchunk_key_vals(c, i, &vlo, &vhi)) ||
		    (rc = stage_key(w, k, kl)))
			return rc;
		if (vlo != w->nv)
			return CORRUPT("partial batch: val ranges");
		for (uint32_t j = vlo; j < vhi; j++) {
			const uint8_t *v;
			size_t vl;
			uint32_t ulo, uhi;
			if ((rc = bchunk_val(c, j, &v, &vl)) ||
			    (rc = bchunk_val_upds(c, j, &ulo, &uhi)) ||
			    (rc = stage_val(w, v, vl)))
				return rc;
			if (ulo != w->nu)
				return CORRUPT("partial batch: update ranges");
			for (uint32_t u = ulo; u < uhi; u++)
				if ((rc = stage_upd_of(w, c, u)))
					return rc;
		}
	}
	return 0;
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
	    (rc = stage_chunk(w, &c)))
		goto out;
	w->size_ub = staged_size(w);
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

static void images_free(batch_writer *w)
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
	images_free(w);
	w->detached = false;
	return 0;
}

bool batch_writer_last(const batch_writer *w, const void **key, size_t *klen,
                       const void **val, size_t *vlen)
{
	if (!w || !w->have_last || w->nk == 0)
		return false;
	uint32_t k0 = u32at(&w->ko, w->nk - 1), k1 = u32at(&w->ko, w->nk);
	uint32_t v0 = u32at(&w->vo, w->nv - 1), v1 = u32at(&w->vo, w->nv);
	*key = w->kb.p + k0;
	*klen = k1 - k0;
	*val = w->vb.p + v0;
	*vlen = v1 - v0;
	return true;
}

/* Remembers a new key's hash for the filter. */
static int hash_key(batch_writer *w, const void *key, size_t klen)
{
	return w->no_filter ? 0 : put64(w->pool, &w->khash, filter_hash(key, klen));
}

/* Sets the bits of every hashed key in nb zeroed checked blocks, then
 * each block's check (filter.h, hash 2). */
static void fill_filter(const batch_writer *w, uint64_t *blocks, uint64_t nb)
{
	uint64_t nh = w->khash.len / 8;

	memset(blocks, 0, FILTER_BLOCK * nb);
	for (uint64_t i = 0; i < nh; i++) {
		uint64_t h;
		memcpy(&h, w->khash.p + 8 * i, 8);
		filter_add_checked(blocks, nb, h);
	}
	for (uint64_t i = 0; i < nb; i++)
		filter_block_seal(blocks + FILTER_WORDS * i, i);
}

/* A resumed writer has not seen the keys of the chunks it adopted: the
 * finished batch's keys are hashed again from all its chunks (once per
 * batch, each chunk's pages checked as they are read; a key continued
 * from the previous chunk counts once). */
static int rehash_chunks(batch_writer *w)
{
	int rc = 0;

	w->khash.len = 0;
	for (size_t ci = 0; ci < w->ids.len / 8 && !rc; ci++) {
		uint64_t id;
		bchunk c;
		memcpy(&id, w->ids.p + 8 * ci, 8);
		if ((rc = bchunk_get(w->t, id, HEAP_CHUNK_PAGES, &c)))
			break;
		for (uint32_t i = (c.flags & BCHUNK_KEY_CONT) ? 1 : 0;
		     i < c.nkeys && !rc; i++) {
			const uint8_t *k;
			size_t kl;
			if (!(rc = bchunk_key(&c, i, &k, &kl)))
				rc = put64(w->pool, &w->khash, filter_hash(k, kl));
		}
	}
	return rc;
}

/* Builds the key filter from the hashes, into b (inline: *inl, pool
 * memory the caller frees, FILTER_BLOCK * b->filter_blocks bytes) or as a
 * chunk of its own, named in b; nothing when the writer has not hashed
 * every key (filter.h, layouts: batch_int.h). */
static int write_filter(batch_writer *w, batch *b, uint64_t **inl)
{
	uint64_t nh = w->khash.len / 8, nb = filter_blocks_checked(nh), cid;
	uint64_t *blocks;
	void *body;
	size_t cap;
	int rc;

	*inl = NULL;
	if (w->no_filter) {
		if ((rc = rehash_chunks(w)))
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
		fill_filter(w, *inl, nb);
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
	fill_filter(w, blocks, nb);
	b->filter_sum = filter_sum(blocks, nb);
	if ((rc = heap_chunk_seal(w->t, cid, body, used)))
		return rc;
	b->filter_chunk = cid;
	return 0;
}

/* Where the update goes relative to the last one: order check. */
static int classify(const batch_writer *w, const void *key, size_t klen,
                    const void *val, size_t vlen, uint64_t time,
                    bool *newkey, bool *newval)
{
	const void *lk, *lv;
	size_t lkl, lvl;
	uint64_t lt;

	*newkey = *newval = true;
	if (!batch_writer_last(w, &lk, &lkl, &lv, &lvl))
		return 0;
	memcpy(&lt, w->tm.p + 8 * (size_t)(w->nu - 1), 8);
	int c = bytes_cmp(key, klen, lk, lkl);
	if (c < 0)
		return AH_EINVAL;
	if (c > 0)
		return 0;
	*newkey = false;
	int cv = bytes_cmp(val, vlen, lv, lvl);
	if (cv < 0 || (cv == 0 && time_cmp(time, lt) <= 0))
		return AH_EINVAL;
	*newval = cv > 0;
	return 0;
}

int batch_writer_push(batch_writer *w, const void *key, size_t klen,
                      const void *val, size_t vlen, uint64_t time,
                      int64_t diff)
{
	bool newkey, newval;
	int rc;

	if (!w || diff == 0 || (klen && !key) || (vlen && !val))
		return AH_EINVAL;
	if (chunk_size(1, klen, 1, vlen, 1) > UINT32_MAX)
		return AH_ELIMIT;
	if ((rc = classify(w, key, klen, val, vlen, time, &newkey, &newval)))
		return rc;
	uint64_t dv = (uint64_t)diff;
	shape sh = shape_after(w, newkey, klen, newval, vlen, &time, &dv, 1, 1);
	uint64_t after = shape_size(&sh);
	/* a jumbo chunk fills up to its own (multiple-of-largest) class */
	uint64_t limit = w->max_body, now = staged_size(w);
	if (now > limit)
		limit = heap_chunk_fit(heap_txn_heap(w->t), now);
	if (w->nu > 0 && after > limit) {
		if ((rc = flush(w)))
			return rc;
		w->flags = (newkey ? 0 : BCHUNK_KEY_CONT) |
		           (newval ? 0 : BCHUNK_VAL_CONT);
	}
	bool fresh = w->nu == 0;
	if ((rc = stage_begin(w)))
		return rc;
	/* a fresh chunk repeats a continued key (val) */
	if ((newkey || fresh) && (rc = stage_key(w, key, klen)))
		return rc;
	if ((newval || fresh) && (rc = stage_val(w, val, vlen)))
		return rc;
	if ((rc = stage_upd(w, time, diff)))
		return rc;
	if (newkey && (rc = hash_key(w, key, klen)))
		return rc;
	w->updates++;
	w->keys += newkey;
	w->vals += newval;
	w->have_last = true;
	w->size_ub = staged_size(w);
	return 0;
}

/* Order of (key, val) against the last one staged, as bytes_cmp of the
 * key then of the val: settled on the cached prefixes when they differ
 * (the common case in a merge), else on the bytes.  kc: the key compare,
 * or 0 when the caller knows the key is the last one's. */
static int run_order(const batch_writer *w, const void *key, size_t klen,
                     const void *val, size_t vlen, bool same_key, int *kc)
{
	const void *lk, *lv;
	size_t lkl, lvl;
	uint64_t p;

	*kc = 0;
	if (!same_key) {
		p = bytes_prefix8(key, klen);
		if (p != w->lkp)
			return *kc = p > w->lkp ? 1 : -1;
		(void)batch_writer_last(w, &lk, &lkl, &lv, &lvl);
		if ((*kc = bytes_cmp_rest(key, klen, lk, lkl)) != 0)
			return *kc;
	}
	p = bytes_prefix8(val, vlen);
	if (p != w->lvp)
		return p > w->lvp ? 1 : -1;
	(void)batch_writer_last(w, &lk, &lkl, &lv, &lvl);
	return bytes_cmp_rest(val, vlen, lv, lvl);
}

int batch_writer_push_run(batch_writer *w, const void *key, size_t klen,
                          const void *val, size_t vlen, bool same_key,
                          const time_diff *td, size_t n)
{
	int rc, kc = 1;

	if (!w || (klen && !key) || (vlen && !val))
		return AH_EINVAL;
	if (n == 0)
		return 0;
	bool have = w->have_last && w->nk != 0;
	/* One order check for the run (B1): the run's (key, val) follows
	 * the last one; its times increase and its diffs are not zero.  A
	 * false same_key is only "not known": the key is compared. */
	if (have && run_order(w, key, klen, val, vlen, same_key, &kc) <= 0)
		return AH_EINVAL;
	bool newkey = kc != 0;
	for (size_t i = 0; i < n; i++)
		if (td[i].diff == 0 || (i && time_cmp(td[i - 1].time, td[i].time) >= 0))
			return AH_EINVAL;
	/* Does it fit the staged chunk?  Cheaply when no column changes
	 * form and the bound leaves room (the dictionaries probed once: the
	 * entries found are staged as they are), else exactly. */
	int ti[RUN_PROBE], di[RUN_PROBE];
	bool tk = n <= RUN_PROBE, dk = tk;
	for (size_t i = 0; i < n && (tk || dk) && n <= RUN_PROBE; i++) {
		ti[i] = w->td.over ? 0 : dict_find(&w->td, td[i].time);
		di[i] = w->dd.over ? 0 : dict_find(&w->dd, (uint64_t)td[i].diff);
		tk = tk && ti[i] >= 0;
		dk = dk && di[i] >= 0;
	}
	uint64_t g, after;
	bool fast = w->nu != 0 && grow_bound(w, newkey, klen, vlen, n, tk, dk, &g) &&
	            w->size_ub + g <= w->max_body;
	if (fast) {
		after = w->size_ub + g;
	} else {
		/* time_diff is two u64s: the times at td[i].time, the diffs
		 * after */
		shape sh = shape_after(w, newkey, klen, true, vlen, &td[0].time,
		                       (const uint64_t *)&td[0].diff, n, 2);
		after = shape_size(&sh);
	}
	/* Across a chunk boundary, a new chunk, or a huge value: one update
	 * at a time, where the boundary logic lives. */
	if (w->nu == 0 || after > w->max_body || after > UINT32_MAX) {
		for (size_t i = 0; i < n; i++)
			if ((rc = batch_writer_push(w, key, klen, val, vlen,
			                            td[i].time, td[i].diff)))
				return rc;
		return 0;
	}
	if ((rc = stage_begin(w)) ||
	    (newkey && (rc = stage_key(w, key, klen))) ||
	    (rc = stage_val(w, val, vlen)))
		return rc;
	if ((rc = upd_room(w, n)))
		return rc;
	for (size_t i = 0; i < n; i++)
		upd_put_ix(w, td[i].time, td[i].diff,
		           fast && !w->td.over ? ti[i] : -1,
		           fast && !w->dd.over ? di[i] : -1);
	w->nu += (uint32_t)n;
	w->size_ub = after;
	put_u32(w->vu.p + 4 * w->nv, w->nu);
	if (newkey && (rc = hash_key(w, key, klen)))
		return rc;
	w->updates += n;
	w->keys += newkey;
	w->vals++;
	w->have_last = true;
	return 0;
}

/* Flushes and writes the record (flags BREC_*); *id = 0 when empty. */
static int write_record(batch_writer *w, const batch_desc *d, uint32_t flags,
                        uint64_t *id)
{
	batch b;
	uint64_t *inl = NULL;
	int rc;

	*id = 0;
	if (w->detached) /* its images are not in the heap yet */
		return AH_ESTATE;
	if ((rc = flush(w)))
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
	buf *bufs[] = {&w->ko, &w->kb, &w->kv, &w->vo, &w->vb, &w->vu,
	               &w->tm, &w->df, &w->ti, &w->di, &w->prev_last, &w->ids, &w->fences, &w->fence_offs,
	               &w->khash};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		buf_free(p, bufs[i]);
	images_free(w);
	pool_free(p, w, sizeof *w);
}
