/*
 * arrangement/batch_cursor.c - a cursor over one batch, in place in the map.
 *
 * The position is (chunk c, key ki, val vi) inside checked chunk views
 * (bchunk, batch_chunk.c): keys and vals are pointers straight into the map, no
 * decode, no copy.  A key continued over several chunks (KEY_CONT) appears
 * once: stepping vals walks into the continuation chunks, skipping the
 * repeated first val of a VAL_CONT chunk; stepping keys skips them.  The
 * (time, diff) walk runs on a second view so that it can follow a (key, val)
 * across VAL_CONT chunks without moving the position.  seek_key finds its
 * chunk by binary search over the record's fence keys, then searches inside
 * the chunk.  Every chunk entered is header-checked and every offset used is
 * bounds-checked: bad data is AH_ECORRUPT, never a read out of bounds.
 * The cursor never writes to the map.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_int.h"

/* struct batch_cursor: batch.h (its accessors inline there). */

/* Loads chunk idx.  seq: the cursor walks the batch in order (a scan, a
 * merge input), so the kernel is asked to read this chunk and the next one
 * whole now, each once (the map has no read-around: a seek reads only its
 * pages). */
static int load_at(batch_cursor *c, uint32_t idx, bool seq, bchunk *out)
{
	if (idx >= c->b->nchunks)
		return CORRUPT("a chunk index past the batch");
	for (uint32_t i = idx; seq && i <= idx + 1 && i < c->b->nchunks; i++) {
		if (i < c->ahead && c->ahead <= idx + 2)
			continue; /* asked for when the cursor entered i - 1 */
		int prc = heap_chunk_prefetch(c->t, c->b->chunk_ids[i]);
		if (prc && prc != AH_ENOTFOUND)
			return prc;
	}
	if (seq)
		c->ahead = idx + 2;
	/* A walk reads the whole chunk: check it whole, once.  A seek
	 * checks each page when it first reads from it. */
	int rc = bchunk_get_at(c->t, c->b->chunk_ids[idx],
	                       c->b->chunk_loc ? &c->b->chunk_loc[idx] : NULL,
	                       seq ? HEAP_CHUNK_WHOLE : HEAP_CHUNK_PAGES, out);
	if (!rc && !batch_chunk_sum_ok(c->b, idx, &out->hv))
		rc = CORRUPT("a chunk is not the one its batch record names");
	if (!rc && idx == 0 && (out->flags & BCHUNK_CONT))
		rc = AH_ECORRUPT; /* nothing to continue */
	return rc;
}

static int load(batch_cursor *c, uint32_t idx, bchunk *out)
{
	return load_at(c, idx, true, out);
}

/* Positions on val vi of the loaded chunk.  A chunk checked whole takes
 * the walk's inline step (batch_int.h: the same offset checks, no touch). */
static int set_val(batch_cursor *c)
{
	if (c->cv.hv.all && c->vi < c->cv.nvals)
		return bcur_walk_val(c);
	int rc = bchunk_val(&c->cv, c->vi, &c->val, &c->vlen);
	if (rc)
		return rc;
	c->vp = bytes_prefix8(c->val, c->vlen);
	c->vvalid = true;
	c->tpending = true;
	c->tdone = false;
	return 0;
}

/* Positions on key ki of the loaded chunk (a fresh key) and its first val. */
static int set_key(batch_cursor *c, uint32_t ki)
{
	int rc;
	if (ki < c->cv.nkeys && c->cv.hv.all)
		return bcur_walk_key(c, ki);
	c->ki = c->kk = ki;
	c->kc = c->c;
	if ((rc = bchunk_key(&c->cv, ki, &c->key, &c->klen)) ||
	    (rc = bchunk_key_vals(&c->cv, ki, &c->vi, &c->vend)))
		return rc;
	c->kp = bytes_prefix8(c->key, c->klen);
	c->kvalid = true;
	return set_val(c);
}

static void invalidate(batch_cursor *c)
{
	c->kvalid = c->vvalid = false;
}

int bcur_rewind_keys(batch_cursor *c)
{
	int rc;
	invalidate(c);
	c->c = 0;
	if (c->b->nchunks == 0)
		return 0;
	if ((rc = load(c, 0, &c->cv)))
		return rc;
	return set_key(c, 0);
}

/* A point query makes one a batch it visits: small enough for glibc's
 * per-thread cache (requests up to 1,032 bytes), which serves it without
 * a trip into the allocator (heap_zalloc, BENCHMARKS.md). */
_Static_assert(sizeof(batch_cursor) <= 1032,
               "batch_cursor past glibc's thread-cache size");

/* A fresh cursor on b with no position yet (NULL when out of memory). */
static batch_cursor *cursor_new(heap_txn *t, const batch *b, frontier since)
{
	batch_cursor *c = heap_zalloc(1, sizeof *c);
	if (c) {
		c->t = t;
		c->b = b;
		c->since = since;
	}
	return c;
}

int bcur_open(heap_txn *t, const batch *b, frontier since, batch_cursor **out)
{
	if (!t || !b || !out)
		return AH_EINVAL;
	batch_cursor *c = cursor_new(t, b, since);
	if (!c)
		return AH_ENOMEM;
	int rc = bcur_rewind_keys(c);
	if (rc) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void bcur_close(batch_cursor *c)
{
	free(c);
}

int bcur_step_key(batch_cursor *c)
{
	int rc;
	if (!c->kvalid)
		return 0;
	for (;;) {
		if (c->ki + 1 < c->cv.nkeys)
			return set_key(c, c->ki + 1);
		if (c->c + 1 >= c->b->nchunks) {
			invalidate(c);
			return 0;
		}
		if ((rc = load(c, c->c + 1, &c->cv)))
			return rc;
		c->c++;
		c->ki = 0;
		if (!(c->cv.flags & BCHUNK_KEY_CONT))
			return set_key(c, 0);
	}
}

/* Moves into chunk c + 1 when it continues the current key; *moved = false
 * when the key ends in chunk c. */
static int enter_cont(batch_cursor *c, bool *moved)
{
	bchunk next;
	int rc;
	*moved = false;
	if (c->ki + 1 < c->cv.nkeys || c->c + 1 >= c->b->nchunks)
		return 0;
	if ((rc = load(c, c->c + 1, &next)))
		return rc;
	if (!(next.flags & BCHUNK_KEY_CONT))
		return 0;
	c->cv = next;
	c->c++;
	c->ki = 0;
	*moved = true;
	return bchunk_key_vals(&c->cv, 0, &c->vi, &c->vend);
}

int bcur_step_val(batch_cursor *c)
{
	bool moved;
	int rc;
	if (!bcur_val_valid(c))
		return 0;
	c->vi++;
	while (c->vi >= c->vend) {
		if ((rc = enter_cont(c, &moved)))
			return rc;
		if (!moved) {
			c->vvalid = false;
			return 0;
		}
		if (c->cv.flags & BCHUNK_VAL_CONT)
			c->vi++; /* the val we stepped past, continued */
	}
	return set_val(c);
}

/* First index in [lo, hi) whose key (val) is >= target, or hi. */
static int search(bchunk *cv, bool keys, uint32_t lo, uint32_t hi,
                  const void *target, size_t tlen, uint32_t *at)
{
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const uint8_t *p;
		size_t len;
		int rc = keys ? bchunk_key(cv, mid, &p, &len)
		              : bchunk_val(cv, mid, &p, &len);
		if (rc)
			return rc;
		if (bytes_cmp(p, len, target, tlen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*at = lo;
	return 0;
}

/* key i of the chunk < target?  (bchunk_key's checks and touch.) */
static int key_below(bchunk *cv, uint32_t i, const void *target, size_t tlen,
                     bool *below)
{
	const uint8_t *p;
	size_t len;
	int rc = bchunk_key(cv, i, &p, &len);

	if (rc)
		return rc;
	*below = bytes_cmp(p, len, target, tlen) < 0;
	return 0;
}

/* search() over the keys of [lo, hi) from a guess g in it (bchunk_guess):
 * out from g by steps of w, 2w, 4w, ... to the first key on the far side
 * of target, then a binary search between.  A good guess reads the keys
 * near it only: a cold seek's key pages are the one or two around g
 * (batch_prefetch.c asks for them first), not the log2(nkeys) pages a
 * bisection visits; a bad one costs at most twice the bisection's
 * comparisons. */
static int search_from(bchunk *cv, uint32_t lo, uint32_t hi, uint32_t g,
                       uint32_t w, const void *target, size_t tlen,
                       uint32_t *at)
{
	bool below;
	int rc;

	if ((rc = key_below(cv, g, target, tlen, &below)))
		return rc;
	for (uint64_t s = w; ; s *= 2) {
		if (below) {
			lo = g + 1;
			if (s >= hi - g)
				break;
			uint32_t j = g + (uint32_t)s;
			if ((rc = key_below(cv, j, target, tlen, &below)))
				return rc;
			if (!below) {
				hi = j;
				break;
			}
			g = j;
		} else {
			hi = g;
			if (s > g - lo)
				break;
			uint32_t j = g - (uint32_t)s;
			if ((rc = key_below(cv, j, target, tlen, &below)))
				return rc;
			if (below) {
				lo = j + 1;
				break;
			}
			g = j;
		}
	}
	return search(cv, true, lo, hi, target, tlen, at);
}

/* The first chunk in [lo, nchunks) whose fence is >= key. */
static uint32_t fence_search(const batch *b, uint32_t lo, const void *key,
                             size_t len)
{
	uint32_t hi = b->nchunks;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (bytes_cmp(b->fence[mid], b->fence_len[mid], key, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint32_t batch_chunk_for(const batch *b, const void *key, size_t len)
{
	uint32_t lo = fence_search(b, 0, key, len);

	return lo ? lo - 1 : 0;
}

/* Lands on the first key >= key at or after key index start of the loaded
 * chunk c->c, moving to the next chunk if this one has none.  In a chunk
 * just entered (start 0) the search starts from the fences' guess. */
static int land(batch_cursor *c, uint32_t start, const void *key, size_t len)
{
	const batch *b = c->b;
	uint32_t at, n = c->cv.nkeys;
	uint32_t g = start ? UINT32_MAX : bchunk_guess(b, c->c, n, key, len);
	int rc;

	if ((rc = g < n ? search_from(&c->cv, 0, n, g, bchunk_guess_span(n),
	                              key, len, &at)
	                : search(&c->cv, true, start, n, key, len, &at)))
		return rc;
	if (at < c->cv.nkeys) {
		if (at == 0 && (c->cv.flags & BCHUNK_KEY_CONT))
			return AH_ECORRUPT; /* fences disagree with chunks */
		return set_key(c, at);
	}
	/* every key here is < key: the next chunk starts a fresh key */
	if (c->c + 1 >= b->nchunks) {
		c->ki = c->cv.nkeys - 1;
		invalidate(c);
		return 0;
	}
	if ((rc = load_at(c, c->c + 1, c->walk, &c->cv)))
		return rc;
	c->c++;
	if (c->cv.flags & BCHUNK_KEY_CONT)
		return CORRUPT("fences disagree with the chunks");
	return set_key(c, 0);
}

int bcur_seek_key(batch_cursor *c, const void *key, size_t len)
{
	uint32_t lo, start;
	int rc;

	if (!c->kvalid || bytes_cmp(c->key, c->klen, key, len) >= 0)
		return 0;
	/* the last chunk at or after c whose fence is < key */
	lo = fence_search(c->b, c->c + 1, key, len);
	start = c->ki + 1;
	if (lo - 1 > c->c) {
		if ((rc = load_at(c, lo - 1, c->walk, &c->cv)))
			return rc;
		c->c = lo - 1;
		start = 0;
	}
	return land(c, start, key, len);
}

void bcur_set_walk(batch_cursor *c)
{
	c->walk = true;
}

int bcur_open_at(heap_txn *t, const batch *b, frontier since, const void *key,
                 size_t len, batch_cursor **out)
{
	if (!t || !b || !out || (len && !key))
		return AH_EINVAL;
	batch_cursor *c = cursor_new(t, b, since);
	if (!c)
		return AH_ENOMEM;
	invalidate(c);
	int rc = 0;
	if (b->nchunks > 0) {
		/* Only the chunk that can hold key is read: a point query
		 * touches one chunk per batch, not also each batch's first. */
		c->c = batch_chunk_for(b, key, len);
		rc = load_at(c, c->c, false, &c->cv);
		if (!rc)
			rc = land(c, 0, key, len);
	}
	if (rc) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int bcur_seek_val(batch_cursor *c, const void *val, size_t len)
{
	const uint8_t *p;
	size_t plen;
	uint32_t at;
	bool moved;
	int rc;

	if (!bcur_val_valid(c) || bytes_cmp(c->val, c->vlen, val, len) >= 0)
		return 0;
	for (;;) {
		/* whole chunk's share of the key below val: try the next */
		if ((rc = bchunk_val(&c->cv, c->vend - 1, &p, &plen)))
			return rc;
		if (bytes_cmp(p, plen, val, len) >= 0)
			break;
		if ((rc = enter_cont(c, &moved)))
			return rc;
		if (!moved) {
			c->vi = c->vend;
			c->vvalid = false;
			return 0;
		}
	}
	if ((rc = search(&c->cv, false, c->vi, c->vend, val, len, &at)))
		return rc;
	c->vi = at;
	return set_val(c);
}

int bcur_rewind_vals(batch_cursor *c)
{
	int rc;
	if (!c->kvalid)
		return 0;
	if (c->c != c->kc) {
		if ((rc = load_at(c, c->kc, false, &c->cv)))
			return rc;
		c->c = c->kc;
	}
	c->ki = c->kk;
	if ((rc = bchunk_key_vals(&c->cv, c->ki, &c->vi, &c->vend)))
		return rc;
	return set_val(c);
}

int bcur_times_rewind(batch_cursor *c)
{
	c->tpending = true;
	c->tdone = false;
	return 0;
}

/* Moves the time walk into chunk tc + 1 if it continues the (key, val). */
static int times_cont(batch_cursor *c)
{
	bchunk next;
	int rc;
	if (c->tvi + 1 != c->tw->nvals || c->tc + 1 >= c->b->nchunks) {
		c->tdone = true;
		return 0;
	}
	if ((rc = load_at(c, c->tc + 1, false, &next)))
		return rc;
	if (!(next.flags & BCHUNK_VAL_CONT)) {
		c->tdone = true;
		return 0;
	}
	c->tv = next;
	c->tw = &c->tv;
	c->tc++;
	c->tvi = 0;
	if ((rc = bchunk_val_upds(&c->tv, 0, &c->tu, &c->tend)))
		return rc;
	return c->tv.hv.all ? 0 : bchunk_touch_upds(&c->tv, c->tu, c->tend);
}

int bcur_time_next(batch_cursor *c, uint64_t *time, int64_t *diff)
{
	int rc;
	if (!bcur_val_valid(c))
		return 0;
	if (c->tpending) {
		/* Checked on the position's view, so that what a page check
		 * learns outlives this walk (tv is a copy). */
		if ((rc = bchunk_val_upds(&c->cv, c->vi, &c->tu, &c->tend)) ||
		    (!c->cv.hv.all &&
		     (rc = bchunk_touch_upds(&c->cv, c->tu, c->tend))))
			return rc;
		c->tw = &c->cv;
		c->tc = c->c;
		c->tvi = c->vi;
		c->tpending = false;
	}
	while (c->tu >= c->tend) {
		if (c->tdone)
			return 0;
		if ((rc = times_cont(c)))
			return rc;
	}
	atime t;
	if (!bchunk_upd(c->tw, c->tu, &t, diff))
		return CORRUPT("batch chunk dictionary index");
	*time = time_advance_by(t, c->since);
	c->tu++;
	return 1;
}

int bcur_accumulate_walk(batch_cursor *c, atime as_of, diff_sum *s)
{
	uint64_t tm;
	int64_t d;
	int rc;

	if ((rc = bcur_times_rewind(c)))
		return rc;
	while ((rc = bcur_time_next(c, &tm, &d)) == 1)
		if (time_le(tm, as_of))
			*s += d;
	return rc;
}

int bcur_times(batch_cursor *c, const atime **times, const int64_t **diffs,
               uint32_t *n)
{
	uint32_t lo, hi;
	int rc;

	*n = 0;
	if (!bcur_val_valid(c))
		return 0;
	if ((rc = bchunk_val_upds(&c->cv, c->vi, &lo, &hi)) ||
	    (!c->cv.hv.all && (rc = bchunk_touch_upds(&c->cv, lo, hi))))
		return rc;
	/* The chunk's last val may go on in the next chunk (VAL_CONT). */
	int more = c->vi + 1 == c->cv.nvals && c->c + 1 < c->b->nchunks;
	if (c->cv.tm.full && c->cv.df.full) {
		*times = c->cv.tm.full + lo;
		*diffs = (const int64_t *)c->cv.df.full + lo;
		*n = hi - lo;
		return more;
	}
	if (hi - lo > BCUR_TSCRATCH)
		return 1; /* a long list of a dictionary chunk: walk it */
	for (uint32_t u = lo; u < hi; u++)
		if (!bchunk_upd(&c->cv, u, &c->tsc[u - lo], &c->dsc[u - lo]))
			return CORRUPT("batch chunk dictionary index");
	*times = c->tsc;
	*diffs = c->dsc;
	*n = hi - lo;
	return more;
}
