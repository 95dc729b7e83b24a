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

struct batch_writer {
	heap_txn *t;
	pool *pool;
	size_t max_body;
	/* staged chunk: offsets relative to their byte column */
	buf ko, kb, kv, vo, vb, vu, tm, df;
	uint32_t nk, nv, nu, flags;
	bool have_last;
	uint64_t lkp, lvp;    /* bytes_prefix8 of the last key and val staged */
	/* batch so far */
	buf ids, fences, fence_offs; /* u64, bytes, u32 (nchunks + 1) */
	uint64_t updates, keys, vals, bytes, chunk_bytes;
	uint64_t adopted; /* record id of a resumed partial batch, or 0 */
	/* The key filter's input: the XXH3 of every distinct key (u64 each),
	 * 8 bytes per key until finish.  A resumed writer has not seen the
	 * adopted chunks' keys (no_filter): it hashes them all from the
	 * chunks at finish. */
	buf khash;
	bool no_filter;
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

/* Body bytes of a chunk with these counts (layout: batch.h). */
static uint64_t chunk_size(uint64_t nk, uint64_t kbytes, uint64_t nv,
                           uint64_t vbytes, uint64_t nu)
{
	return BCHUNK_HDR + 2 * a8(4 * (nk + 1)) + a8(kbytes) +
	       2 * a8(4 * (nv + 1)) + a8(vbytes) + 16 * nu;
}

static void stage_reset(batch_writer *w)
{
	w->ko.len = w->kb.len = w->kv.len = 0;
	w->vo.len = w->vb.len = w->vu.len = 0;
	w->tm.len = w->df.len = 0;
	w->nk = w->nv = w->nu = 0;
	w->flags = 0;
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
	w->nv++;
	w->lvp = bytes_prefix8(v, vlen);
	/* the key's val range ends after this val */
	uint32_t end = w->nv;
	memcpy(w->kv.p + 4 * w->nk, &end, 4);
	return 0;
}

static int stage_upd(batch_writer *w, uint64_t time, int64_t diff)
{
	int rc;
	if ((rc = put64(w->pool, &w->tm, time)) ||
	    (rc = put64(w->pool, &w->df, (uint64_t)diff)))
		return rc;
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
	return chunk_size(w->nk, w->kb.len, w->nv, w->vb.len, w->nu);
}

static void write_header(uint8_t *body, const batch_writer *w,
                         const uint32_t off[8], uint32_t used)
{
	uint16_t ver = BCHUNK_VERSION;
	memset(body, 0, BCHUNK_HDR);
	memcpy(body, BCHUNK_MAGIC, 4);
	memcpy(body + 4, &ver, 2);
	body[6] = (uint8_t)w->flags;
	body[7] = 8;
	put_u32(body + 8, w->nk);
	put_u32(body + 12, w->nv);
	put_u32(body + 16, w->nu);
	put_u32(body + 20, used);
	memcpy(body + 24, off, 32);
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
	if (w->detached)
		rc = image_new(w, size, &vbody);
	else
		rc = heap_chunk_reserve(w->t, size, &id, &vbody, &cap);
	if (rc)
		return rc;
	uint8_t *body = vbody;
	off[0] = BCHUNK_HDR;
	off[1] = off[0] + (uint32_t)a8(4 * (uint64_t)nk1);
	off[2] = emit(body, off[1], w->kb.p, w->kb.len);
	off[3] = emit(body, off[2], w->kv.p, 4 * (size_t)nk1);
	off[4] = off[3] + (uint32_t)a8(4 * (uint64_t)nv1);
	off[5] = emit(body, off[4], w->vb.p, w->vb.len);
	off[6] = emit(body, off[5], w->vu.p, 4 * (size_t)nv1);
	off[7] = emit(body, off[6], w->tm.p, 8 * (size_t)w->nu);
	o = emit(body, off[7], w->df.p, 8 * (size_t)w->nu);
	emit_offs(body, off[0], &w->ko, nk1, off[1]);
	emit_offs(body, off[3], &w->vo, nv1, off[4]);
	write_header(body, w, off, o);
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

	uint32_t key0_len = u32at(&w->ko, 1);
	if ((rc = put(w->pool, &w->ids, &id, 8)) ||
	    (rc = put(w->pool, &w->fences, w->kb.p, key0_len)) ||
	    (rc = put32(w->pool, &w->fence_offs, (uint32_t)w->fences.len)))
		return rc;
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

/* Copies chunk c's items into the (empty) staging, checking every range. */
static int stage_chunk(batch_writer *w, bchunk *c)
{
	int rc = 0;
	if ((rc = stage_begin(w)))
		return rc;
	w->flags = c->flags;
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
				if ((rc = stage_upd(w, c->times[u], c->diffs[u])))
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
	size_t last_cap = c.hv.value_bytes;
	if ((c.flags && b->nchunks == 1) || b->bytes < c.used ||
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
	if (w->free_last && (rc = heap_chunk_free(wt, w->free_last)))
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

/* Sets the bits of every hashed key in nb zeroed blocks. */
static void fill_filter(const batch_writer *w, uint64_t *blocks, uint64_t nb)
{
	uint64_t nh = w->khash.len / 8;

	memset(blocks, 0, FILTER_BLOCK * nb);
	for (uint64_t i = 0; i < nh; i++) {
		uint64_t h;
		memcpy(&h, w->khash.p + 8 * i, 8);
		filter_add(blocks, nb, h);
	}
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
	uint64_t nh = w->khash.len / 8, nb = filter_blocks(nh), cid;
	uint64_t *blocks;
	void *body;
	size_t cap;
	int rc;

	*inl = NULL;
	if (w->no_filter) {
		if ((rc = rehash_chunks(w)))
			return rc;
		nh = w->khash.len / 8;
		nb = filter_blocks(nh);
	}
	if (nh != w->keys)
		return 0;
	if (nb > (UINT32_MAX - BFILT_CHUNK_HDR) / FILTER_BLOCK)
		return AH_ELIMIT;
	b->filter_blocks = nb;
	b->filter_keys = nh;
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
	uint64_t after = chunk_size(w->nk + newkey, w->kb.len + (newkey ? klen : 0),
	                            w->nv + newval,
	                            w->vb.len + (newval ? vlen : 0), w->nu + 1);
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
	uint64_t after = chunk_size(w->nk + newkey, w->kb.len + (newkey ? klen : 0),
	                            w->nv + 1, w->vb.len + vlen, w->nu + n);
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
	if (w->tm.len + 8 * n > w->tm.cap && (rc = grow(w->pool, &w->tm, 8 * n)))
		return rc;
	if (w->df.len + 8 * n > w->df.cap && (rc = grow(w->pool, &w->df, 8 * n)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		put_u64(w->tm.p + w->tm.len + 8 * i, td[i].time);
		put_u64(w->df.p + w->df.len + 8 * i, (uint64_t)td[i].diff);
	}
	w->tm.len += 8 * n;
	w->df.len += 8 * n;
	w->nu += (uint32_t)n;
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
	b.rec_flags = flags;
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
	               &w->tm, &w->df, &w->ids, &w->fences, &w->fence_offs,
	               &w->khash};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		buf_free(p, bufs[i]);
	images_free(w);
	pool_free(p, w, sizeof *w);
}
