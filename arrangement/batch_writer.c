/*
 * arrangement/batch_writer.c - writes a sorted, consolidated update stream
 * as batch chunks plus one batch record (layouts: batch.h); this file
 * holds the writer's column staging, its per-update entry points (push,
 * push_run) and the filter's input (every new key's hash); the other
 * batch_writer_*.c files the rest of it (batch_writer_int.h).
 *
 * One chunk's columns are staged in the pool; when the next item would push
 * the staged chunk past the largest class, the chunk is reserved, the
 * columns are copied in (in pieces of at most 1 MiB: large single copies
 * into fresh map pages are slow) and sealed (batch_writer_seal.c).  The
 * last chunk takes the smallest class that fits; a key or val too big for
 * the largest class gets a jumbo chunk of its own.  A key (or (key, val))
 * cut by a chunk boundary is written again at the start of the next
 * chunk, flagged KEY_CONT (VAL_CONT).  A resumed writer reloads the last
 * chunk of the partial batch into staging and frees it, so a
 * suspended-and-resumed batch has exactly the chunk bodies of one written
 * in one go (batch_writer_resume.c).  finish and suspend write the filter
 * and the record (batch_writer_record.c).
 * It never reads a chunk it did not validate, and never writes a chunk after
 * sealing it.  What push and push_run call per update stays static in this
 * file (or static inline in batch_writer_int.h), so that the compiler keeps
 * inlining it as it did: keep it so, for their speed.
 */
#include <string.h>

#include "arrangement/batch_writer_int.h"
#include "arrangement/filter.h"

_Static_assert(sizeof(time_diff) == 16, "time_diff is two u64s");

/* Runs of at most this many pairs probe the dictionaries once. */
#define RUN_PROBE 8

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

void bw_hinted(batch_writer *w, buf **out, size_t *n)
{
	buf *b[] = { &w->ko, &w->kb, &w->kv, &w->vo, &w->vb, &w->vu,
	             &w->tm, &w->df, &w->ti, &w->di, &w->khash };

	*n = sizeof b / sizeof *b;
	memcpy(out, b, sizeof b);
}

size_t batch_writer_hinted_caps(batch_writer *w, size_t *caps)
{
	buf *b[POOL_HINTS];
	size_t n;

	bw_hinted(w, b, &n);
	for (size_t i = 0; i < n; i++)
		caps[i] = b[i]->cap;
	return n;
}

int batch_writer_grow_hinted(batch_writer *w, size_t i, size_t bytes)
{
	buf *b[POOL_HINTS];
	size_t n;

	bw_hinted(w, b, &n);
	return i < n ? bw_grow(w->pool, b[i], bytes) : AH_EINVAL;
}

int bw_grow(pool *p, buf *b, size_t add)
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


/* Body bytes of a version-1 chunk with these counts (layout: batch.h):
 * no version-2 chunk is larger. */
static uint64_t chunk_size(uint64_t nk, uint64_t kbytes, uint64_t nv,
                           uint64_t vbytes, uint64_t nu)
{
	return BCHUNK_HDR + 2 * a8(4 * (nk + 1)) + a8(kbytes) +
	       2 * a8(4 * (nv + 1)) + a8(vbytes) + 16 * nu;
}

/* Inline: gcc inlined it into shape_size by itself while flush, in this
 * file then, also called col_dict; it must stay so (push's speed). */
static inline uint64_t col_size(uint32_t nd, uint64_t nu)
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

static uint64_t staged_size(const batch_writer *w)
{
	shape sh = staged_shape(w);
	return shape_size(&sh);
}

uint64_t bw_staged_size(const batch_writer *w)
{
	return staged_size(w);
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

void bw_stage_reset(batch_writer *w)
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
	if ((w->tm.len + 8 * n > w->tm.cap && (rc = bw_grow(w->pool, &w->tm, 8 * n))) ||
	    (w->df.len + 8 * n > w->df.cap && (rc = bw_grow(w->pool, &w->df, 8 * n))) ||
	    (w->ti.len + n > w->ti.cap && (rc = bw_grow(w->pool, &w->ti, n))) ||
	    (w->di.len + n > w->di.cap && (rc = bw_grow(w->pool, &w->di, n))))
		return rc;
	return 0;
}

/* Appends one update to the update columns (room made by upd_room); ti,
 * di: the dictionary entries of its time and diff when known, else -1. */
static inline __attribute__((always_inline)) void
upd_put_ix(batch_writer *w, uint64_t time, int64_t diff, int ti, int di)
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
int bw_stage_chunk(batch_writer *w, bchunk *c)
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

/* Hashes keys [i0, nkeys) of fixed width kw (the key column checked
 * whole first) onto w->khash: the column walked directly, with kw a
 * constant where the caller passes one (a fueled merge's finish hashed
 * each key through bchunk_key: 4% of a 1M load's instructions). */
static inline __attribute__((always_inline)) int
rehash_fixed(batch_writer *w, bchunk *c, uint32_t i0, uint32_t kw)
{
	const uint8_t *col = c->body + c->kb_lo + (size_t)i0 * kw;
	size_t n = c->nkeys - i0;
	int rc;

	if ((kw && (rc = heap_chunk_touch(&c->hv, col, n * kw))) ||
	    (rc = bw_grow(w->pool, &w->khash, 8 * n)))
		return rc;
	uint8_t *o = w->khash.p + w->khash.len;
	for (size_t i = 0; i < n; i++)
		put_u64(o + 8 * i, filter_hash(col + i * kw, kw));
	w->khash.len += 8 * n;
	return 0;
}

/* A resumed writer has not seen the keys of the chunks it adopted: the
 * finished batch's keys are hashed again from all its chunks (once per
 * batch, each chunk's pages checked as they are read; a key continued
 * from the previous chunk counts once). */
int bw_rehash_chunks(batch_writer *w)
{
	int rc = 0;

	w->khash.len = 0;
	for (size_t ci = 0; ci < w->ids.len / 8 && !rc; ci++) {
		uint64_t id;
		bchunk c;
		memcpy(&id, w->ids.p + 8 * ci, 8);
		if ((rc = bchunk_get(w->t, id, HEAP_CHUNK_PAGES, &c)))
			break;
		uint32_t i0 = (c.flags & BCHUNK_KEY_CONT) ? 1 : 0;
		if (c.ko == NULL) { /* fixed width: bchunk_open checked the column */
			if (i0 < c.nkeys)
				rc = c.kw == 8 ? rehash_fixed(w, &c, i0, 8)
				               : rehash_fixed(w, &c, i0, c.kw);
			continue;
		}
		for (uint32_t i = i0; i < c.nkeys && !rc; i++) {
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
		if ((rc = bw_flush(w)))
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

/* Order of (key, val) (prefixes kp, vp: bytes_prefix8) against the last
 * one staged, as bytes_cmp of the key then of the val: settled on the
 * prefixes when they differ (the common case in a merge), else on the
 * bytes.  kc: the key compare, or 0 when the caller knows the key is the
 * last one's (same_key). */
static inline __attribute__((always_inline)) int
order_after_last(const batch_writer *w, const void *key, size_t klen,
                 uint64_t kp, const void *val, size_t vlen, uint64_t vp,
                 bool same_key, int *kc)
{
	const void *lk, *lv;
	size_t lkl, lvl;

	*kc = 0;
	if (!same_key) {
		if (kp != w->lkp)
			return *kc = kp > w->lkp ? 1 : -1;
		(void)batch_writer_last(w, &lk, &lkl, &lv, &lvl);
		if ((*kc = bytes_cmp_rest(key, klen, lk, lkl)) != 0)
			return *kc;
	}
	if (vp != w->lvp)
		return vp > w->lvp ? 1 : -1;
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
	if (have && order_after_last(w, key, klen, same_key ? 0 : bytes_prefix8(key, klen),
	                      val, vlen, bytes_prefix8(val, vlen), same_key,
	                      &kc) <= 0)
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

/* Grows the per-item staging columns to room for 256 more updates past
 * nu and records the bound in ulim (ulim's invariant: batch_writer_int.h). */
static int item_room(batch_writer *w)
{
	size_t n = (size_t)w->nu + 256;
	buf *u32s[] = { &w->ko, &w->kv, &w->vo, &w->vu };
	buf *u64s[] = { &w->tm, &w->df };
	buf *u8s[] = { &w->ti, &w->di };
	size_t lim = SIZE_MAX;
	int rc;

	if (n > UINT32_MAX)
		return AH_ELIMIT;
	for (size_t i = 0; i < 4; i++) {
		if ((rc = bw_grow(w->pool, u32s[i], 4 * (n + 1) - u32s[i]->len)))
			return rc;
		if (u32s[i]->cap / 4 - 1 < lim)
			lim = u32s[i]->cap / 4 - 1;
	}
	for (size_t i = 0; i < 2; i++) {
		if ((rc = bw_grow(w->pool, u64s[i], 8 * n - u64s[i]->len)) ||
		    (rc = bw_grow(w->pool, u8s[i], n - u8s[i]->len)))
			return rc;
		if (u64s[i]->cap / 8 < lim)
			lim = u64s[i]->cap / 8;
		if (u8s[i]->cap < lim)
			lim = u8s[i]->cap;
	}
	w->ulim = lim > UINT32_MAX ? UINT32_MAX : (uint32_t)lim;
	return 0;
}

/* put of a key or val: 8 to 16 bytes (the common fields: a u64, two)
 * as two 8-byte moves that may overlap, not a memcpy call. */
static inline int put_field(pool *p, buf *b, const void *src, size_t n)
{
	int rc;

	if (n < 8 || n > 16)
		return put(p, b, src, n);
	if (b->len + n > b->cap && (rc = bw_grow(p, b, n)))
		return rc;
	memcpy(b->p + b->len, src, 8);
	memcpy(b->p + b->len + n - 8, (const uint8_t *)src + n - 8, 8);
	b->len += n;
	return 0;
}

/* The common case of one pair after the last staged (key, val), newkey
 * told: the dictionaries hold its time and diff, no column changes form
 * and the bound leaves room.  1 when it is not that case (nothing staged:
 * the run's path is exact there), else 0 or an error. */
static inline __attribute__((always_inline)) int
push_staged(batch_writer *w, const void *key, size_t klen, uint64_t kp,
            const void *val, size_t vlen, uint64_t vp, bool newkey,
            uint64_t time, int64_t diff)
{
	int ti = w->td.over ? 0 : dict_find(&w->td, time);
	int di = w->dd.over ? 0 : dict_find(&w->dd, (uint64_t)diff);
	uint64_t g;
	int rc;

	if (ti < 0 || di < 0 ||
	    !grow_bound(w, newkey, klen, vlen, 1, true, true, &g) ||
	    w->size_ub + g > w->max_body)
		return 1;
	if (w->nu >= w->ulim && (rc = item_room(w)))
		return rc;
	if (newkey) {
		if ((rc = put_field(w->pool, &w->kb, key, klen)))
			return rc;
		put_u32(w->ko.p + w->ko.len, (uint32_t)w->kb.len);
		w->ko.len += 4;
		put_u32(w->kv.p + w->kv.len, w->nv);
		w->kv.len += 4;
		w->nk++;
		w->lkp = kp;
		if ((rc = hash_key(w, key, klen)))
			return rc;
	}
	if ((rc = put_field(w->pool, &w->vb, val, vlen)))
		return rc;
	put_u32(w->vo.p + w->vo.len, (uint32_t)w->vb.len);
	w->vo.len += 4;
	put_u32(w->vu.p + w->vu.len, w->nu);
	w->vu.len += 4;
	w->nv++;
	w->lvp = vp;
	put_u32(w->kv.p + 4 * w->nk, w->nv);
	upd_put_ix(w, time, diff, w->td.over ? -1 : ti, w->dd.over ? -1 : di);
	w->nu++;
	put_u32(w->vu.p + 4 * w->nv, w->nu);
	w->size_ub += g;
	w->updates++;
	w->keys += newkey;
	w->vals++;
	return 0;
}

int batch_writer_push_one(batch_writer *w, const void *key, size_t klen,
                          uint64_t kp, const void *val, size_t vlen,
                          uint64_t vp, bool same_key, uint64_t time,
                          int64_t diff)
{
	time_diff td = { time, diff };
	int rc, kc;

	if (!w || diff == 0 || (klen && !key) || (vlen && !val) ||
	    !w->have_last || w->nu == 0)
		return batch_writer_push_run(w, key, klen, val, vlen, same_key,
		                             &td, 1);
	if (order_after_last(w, key, klen, kp, val, vlen, vp, same_key, &kc) <= 0)
		return AH_EINVAL;
	rc = push_staged(w, key, klen, kp, val, vlen, vp, kc != 0, time, diff);
	if (rc == 1)
		return batch_writer_push_run(w, key, klen, val, vlen, kc == 0,
		                             &td, 1);
	return rc;
}

int batch_writer_push_next(batch_writer *w, const void *key, size_t klen,
                           uint64_t kp, const void *val, size_t vlen,
                           uint64_t vp, bool newkey, uint64_t time,
                           int64_t diff)
{
	int rc = 1;

	if (w->have_last && w->nu != 0 && diff != 0)
		rc = push_staged(w, key, klen, kp, val, vlen, vp, newkey, time,
		                 diff);
	if (rc == 1)
		return batch_writer_push_one(w, key, klen, kp, val, vlen, vp,
		                             !newkey, time, diff);
	return rc;
}
