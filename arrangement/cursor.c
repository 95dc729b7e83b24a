/*
 * arrangement/cursor.c - the trace cursor: a merge of n batch cursors by
 * key, then val (differential dataflow's CursorList).
 *
 * The current key is the least key among the valid batch cursors, the
 * current val the least val among the cursors on that key; the time walk
 * visits every cursor on the current (key, val), batch by batch.  The
 * cursors on the current key (kat) are kept in batch order, so a key step
 * moves exactly those and a key held by one batch steps its vals with no
 * comparison at all.  The least key is found by a linear scan that
 * compares the batch cursors' cached 8-byte prefixes first (order.h): a
 * spine holds O(log n) batches (5 at the end of the 10M bench load, 21
 * at 100M), and at 8 a scan of 8 prefixes cost less than a loser tree's
 * bookkeeping (measured: see the commit).  The cursors
 * on the key that are on a val (vat) are kept sorted by (val, batch
 * index), built by insertion when the key changes: the ones on the
 * current val lead, in batch order, and a val step of one cursor puts it
 * back in its place instead of comparing every cursor on the key again
 * (a key's vals lie in ~3 batches at 10M updates, one or two in each).
 * Movement only moves the batch cursors that sit on the current key (val),
 * as CursorList does, through the walk's inline steps (batch_int.h); the
 * public cursor inlines the steps of a key or val one batch holds
 * (cursor_int.h).  After an error the cursor reports itself invalid; it
 * never touches data other than through the batch cursors.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/cursor_int.h"
#include "arrangement/filter.h"


/* Records the first error: the cursor is then invalid for good. */
int tcur_fail(trace_cursor *c, int rc)
{
	if (rc < 0 && !c->err) {
		c->err = rc;
		c->kvalid = c->vvalid = false;
	}
	return rc;
}

/* bytes_cmp of two fields by their cached prefixes, then the rest. */
static inline int field_cmp(uint64_t ap, const uint8_t *a, size_t al,
                            uint64_t bp, const uint8_t *b, size_t bl)
{
	if (ap != bp)
		return ap < bp ? -1 : 1;
	return bytes_cmp_rest(a, al, b, bl);
}

/* The order of vat: batch cursors i and j, both on vals, by val, then by
 * index. */
static inline int val_order(const trace_cursor *c, uint32_t i, uint32_t j)
{
	const batch_cursor *a = c->bc[i], *b = c->bc[j];

	if (a->vp != b->vp)
		return a->vp < b->vp ? -1 : 1;
	int cmp = bytes_cmp_rest(a->val, a->vlen, b->val, b->vlen);
	return cmp ? cmp : (i < j ? -1 : 1);
}

/* The current val is vat[0]'s, and nv counts the cursors on it (they lead
 * vat).  Their time walks start afresh. */
static inline __attribute__((always_inline)) void take_val(trace_cursor *c)
{
	c->tidx = 0;
	c->nv = 0;
	c->vvalid = c->nq > 0;
	if (!c->nq)
		return;
	const batch_cursor *f = c->bc[c->vat[0]];
	c->val = f->val;
	c->vlen = f->vlen;
	c->vp = f->vp;
	for (;;) {
		bcur_times_reset(c->bc[c->vat[c->nv]]);
		if (++c->nv == c->nq)
			return;
		const batch_cursor *b = c->bc[c->vat[c->nv]];
		if (field_cmp(b->vp, b->val, b->vlen, c->vp, c->val, c->vlen))
			return;
	}
}

/* Orders the cursors on the current key that are on a val (a spine's few
 * batches: an insertion sort), and takes the least val. */
static void find_val(trace_cursor *c)
{
	c->vat = c->vbase;
	c->nq = 0;
	for (size_t k = 0; k < c->nk; k++) {
		uint32_t i = c->kat[k];
		size_t p = c->nq;

		if (!bcur_val_valid(c->bc[i]))
			continue;
		for (; p > 0 && val_order(c, c->vat[p - 1], i) > 0; p--)
			c->vat[p] = c->vat[p - 1];
		c->vat[p] = i;
		c->nq++;
	}
	take_val(c);
}

/* Puts cursor i, which a step took off the front of vat, back in its
 * place (the slot before vat is free). */
static inline void requeue(trace_cursor *c, uint32_t i)
{
	uint32_t *q = c->vat - 1;
	size_t p = 0;

	for (; p < c->nq && val_order(c, c->vat[p], i) < 0; p++)
		q[p] = c->vat[p];
	q[p] = i;
	c->vat = q;
	c->nq++;
}

/* Finds the least key among the valid cursors, then its least val. */
static int find_key(trace_cursor *c)
{
	if (c->err)
		return c->err;
	c->nk = 0;
	for (size_t i = 0; i < c->n; i++) {
		const batch_cursor *b = c->bc[i];
		if (!bcur_key_valid(b))
			continue;
		int cmp = c->nk ? field_cmp(b->kp, b->key, b->klen, c->kp,
		                            c->key, c->klen) : -1;
		if (cmp < 0) {
			c->nk = 0;
			c->key = b->key;
			c->klen = b->klen;
			c->kp = b->kp;
		}
		if (cmp <= 0)
			c->kat[c->nk++] = (uint32_t)i;
	}
	c->kvalid = c->nk > 0;
	find_val(c);
	return 0;
}

/* Opens the deferred batches at `at`.  They cannot hold `at`, so each
 * lands past the current key (when that is `at`) and joins the merge at
 * the next find_key; the callers are the movements off the key. */
static int bring_in(trace_cursor *c)
{
	for (size_t i = 0; i < c->n && c->ndeferred; i++) {
		if (!c->deferred[i])
			continue;
		int rc = bcur_open_at(c->t, c->batches[i], c->since, c->at,
		                      c->atlen, &c->bc[i]);
		if (rc)
			return tcur_fail(c, rc);
		c->deferred[i] = false;
		c->ndeferred--;
	}
	return 0;
}

/* Marks the batches whose filters exclude `at` as deferred, keeping a copy
 * of `at` (the caller's key need not outlive the open) when any is. */
static int defer_excluded(trace_cursor *c, batch *const *batches, size_t n,
                          const void *at, size_t atlen)
{
	uint64_t h = filter_hash(at, atlen);

	for (size_t i = 0; i < n; i++) {
		bool may;
		int rc = batch_probe(c->t, batches[i], h, &may);

		if (rc)
			return rc;
		if (!may) {
			c->deferred[i] = true;
			c->ndeferred++;
		}
	}
	if (!c->ndeferred)
		return 0;
	if (!(c->at = malloc(atlen ? atlen : 1)))
		return AH_ENOMEM;
	if (atlen)
		memcpy(c->at, at, atlen);
	c->atlen = atlen;
	return 0;
}

/* Opens the cursor; with at, every batch cursor starts at the first key >=
 * at (one chunk read per batch, none for a batch whose filter excludes
 * at while at is present elsewhere), else at the first key. */
static int open_cursor(heap_txn *t, batch *const *batches, size_t n,
                       frontier since, const void *at, size_t atlen,
                       bool seek, trace_cursor **out)
{
	int rc = 0;
	if (!t || (n && !batches) || !out || n > UINT32_MAX)
		return AH_EINVAL;
	trace_cursor *c = heap_zalloc(1, sizeof *c);
	if (!c)
		return AH_ENOMEM;
	c->bc = heap_zalloc(n + 1, sizeof *c->bc);
	c->kat = heap_zalloc(n + 1, sizeof *c->kat);
	c->vat = c->vbase = heap_zalloc(n + 1, sizeof *c->vbase);
	c->deferred = heap_zalloc(n + 1, sizeof *c->deferred);
	if (!c->bc || !c->kat || !c->vbase || !c->deferred) {
		rc = AH_ENOMEM;
		goto out;
	}
	c->t = t;
	c->batches = batches;
	c->since = since;
	if (seek) {
		/* a cold seek asks for its pages in two rounds: the filter
		 * blocks and chunk headers, then what the search and the key's
		 * columns will read (batch_prefetch.c) */
		bool sample = false, first = false, cold = heap_txn_rdonly(t) &&
		                heap_prefetch_due(heap_txn_heap(t), &sample, &first);

		bool cached = cold && batches_prefetch_heads(t, batches, n, at,
		                                             atlen);
		if ((rc = defer_excluded(c, batches, n, at, atlen)))
			goto out;
		if (cold || sample)
			batches_prefetch_keys(t, batches, n, c->deferred, cold,
			                      sample, first && cached, at, atlen);
		/* after this query's own reads, and not in a handle's first
		 * query (its answer is the restart's first) */
		if (cold && !first)
			batches_prefetch_filters(t, batches, n);
	}
	for (size_t i = 0; i < n; i++, c->n++)
		if (!c->deferred[i] &&
		    (rc = seek ? bcur_open_at(t, batches[i], since, at, atlen, &c->bc[i])
		               : bcur_open(t, batches[i], since, &c->bc[i])))
			goto out;
	rc = find_key(c);
	/* at absent from the opened batches: the deferred ones decide where
	 * the cursor is */
	if (!rc && c->ndeferred &&
	    !(c->kvalid && bytes_cmp(c->key, c->klen, at, atlen) == 0) &&
	    !(rc = bring_in(c)))
		rc = find_key(c);
out:
	if (rc) {
		tcur_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

int tcur_open(heap_txn *t, batch *const *batches, size_t n, frontier since,
              trace_cursor **out)
{
	return open_cursor(t, batches, n, since, NULL, 0, false, out);
}

int tcur_open_at(heap_txn *t, batch *const *batches, size_t n, frontier since,
                 const void *key, size_t len, trace_cursor **out)
{
	if (len && !key)
		return AH_EINVAL;
	return open_cursor(t, batches, n, since, key, len, true, out);
}

int tcur_adopt(trace_cursor *c, batch **batches, size_t n)
{
	if (!c || c->owned)
		return AH_EINVAL;
	c->owned = batches;
	c->nowned = n;
	return 0;
}

void tcur_close(trace_cursor *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		bcur_close(c->bc[i]);
	for (size_t i = 0; i < c->nowned; i++)
		batch_free(c->owned[i]);
	free(c->owned);
	free(c->deferred);
	free(c->at);
	free(c->bc);
	free(c->kat);
	free(c->vbase);
	free(c);
}

bool tcur_key_valid(const trace_cursor *c)
{
	return c && c->kvalid;
}

bool tcur_val_valid(const trace_cursor *c)
{
	return c && c->kvalid && c->vvalid;
}

void tcur_key(const trace_cursor *c, const void **key, size_t *len)
{
	bool ok = tcur_key_valid(c);
	*key = ok ? c->key : NULL;
	*len = ok ? c->klen : 0;
}

void tcur_val(const trace_cursor *c, const void **val, size_t *len)
{
	bool ok = tcur_val_valid(c);
	*val = ok ? c->val : NULL;
	*len = ok ? c->vlen : 0;
}

int tcur_step_key(trace_cursor *c)
{
	if (c->err)
		return c->err;
	if (!c->kvalid)
		return 0;
	if (c->ndeferred && bring_in(c))
		return c->err;
	for (size_t k = 0; k < c->nk; k++) {
		int rc = bcur_next_key(c->bc[c->kat[k]]);
		if (rc)
			return tcur_fail(c, rc);
	}
	return tcur_fail(c, find_key(c));
}

int tcur_seek_key(trace_cursor *c, const void *key, size_t len)
{
	if (c->err)
		return c->err;
	if (len && !key)
		return AH_EINVAL;
	if (c->ndeferred && bring_in(c))
		return c->err;
	for (size_t i = 0; i < c->n; i++) {
		int rc = bcur_seek_key(c->bc[i], key, len);
		if (rc)
			return tcur_fail(c, rc);
	}
	return tcur_fail(c, find_key(c));
}

int tcur_step_val(trace_cursor *c)
{
	int rc = tcur_next_val(c);
	return rc < 0 ? rc : 0;
}

int tcur_next_val(trace_cursor *c)
{
	if (c->err)
		return c->err;
	if (!c->kvalid || !c->vvalid)
		return 0;
	if (c->nk == 1)
		return tcur_next_val_one(c);
	if (c->nv == 1) {
		/* the common step: one cursor on the val; the others keep
		 * their order */
		uint32_t i = c->vat[0];
		int rc = bcur_next_val(c->bc[i]);
		if (rc)
			return tcur_fail(c, rc);
		c->vat++;
		c->nq--;
		if (bcur_val_valid(c->bc[i]))
			requeue(c, i);
		take_val(c);
		return c->vvalid;
	}
	for (size_t k = 0; k < c->nv; k++) {
		int rc = bcur_next_val(c->bc[c->vat[k]]);
		if (rc)
			return tcur_fail(c, rc);
	}
	find_val(c);
	return c->vvalid;
}

int tcur_seek_val(trace_cursor *c, const void *val, size_t len)
{
	if (c->err)
		return c->err;
	if (len && !val)
		return AH_EINVAL;
	if (!c->kvalid)
		return 0;
	for (size_t k = 0; k < c->nk; k++) {
		int rc = bcur_seek_val(c->bc[c->kat[k]], val, len);
		if (rc)
			return tcur_fail(c, rc);
	}
	find_val(c);
	return 0;
}

int tcur_rewind_keys(trace_cursor *c)
{
	if (c->err)
		return c->err;
	if (c->ndeferred && bring_in(c))
		return c->err;
	for (size_t i = 0; i < c->n; i++) {
		int rc = bcur_rewind_keys(c->bc[i]);
		if (rc)
			return tcur_fail(c, rc);
	}
	return tcur_fail(c, find_key(c));
}

int tcur_rewind_vals(trace_cursor *c)
{
	if (c->err)
		return c->err;
	if (!c->kvalid)
		return 0;
	for (size_t k = 0; k < c->nk; k++) {
		int rc = bcur_rewind_vals(c->bc[c->kat[k]]);
		if (rc)
			return tcur_fail(c, rc);
	}
	find_val(c);
	return 0;
}

int tcur_time_next(trace_cursor *c, uint64_t *time, int64_t *diff)
{
	if (c->err)
		return c->err;
	if (!time || !diff)
		return AH_EINVAL;
	if (!tcur_val_valid(c))
		return 0;
	for (; c->tidx < c->nv; c->tidx++) {
		int rc = bcur_time_next(c->bc[c->vat[c->tidx]], time, diff);
		if (rc != 0)
			return rc < 0 ? tcur_fail(c, rc) : 1;
	}
	return 0;
}

int tcur_times_rewind(trace_cursor *c)
{
	if (c->err)
		return c->err;
	c->tidx = 0;
	for (size_t k = 0; k < c->nv; k++)
		bcur_times_reset(c->bc[c->vat[k]]);
	return 0;
}

int tcur_accumulate(trace_cursor *c, atime as_of, diff_sum *sum)
{
	diff_sum s = 0;

	*sum = 0;
	if (c->err)
		return c->err;
	if (!c->kvalid || !c->vvalid)
		return AH_ESTATE;
	for (size_t k = 0; k < c->nv; k++) {
		int rc = bcur_accumulate(c->bc[c->vat[k]], as_of, &s);
		if (rc)
			return tcur_fail(c, rc);
	}
	c->tidx = c->nv; /* as after walking every pair: time_next says 0 */
	*sum = s;
	return 0;
}
