/*
 * arrangement/cursor_int.h - the trace cursor's state and the hot halves
 * of its movements, inline: private to arrangement/cursor.c and to the
 * public cursor (txn/cursor.c), whose per-val calls (ah_cursor_step_val,
 * ah_cursor_accumulate) would otherwise pay a call layer each (the
 * register saves of the out-of-line functions were a sixth of a scan's
 * instructions).  Everything else is in cursor.c.
 */
#ifndef ARRANGEMENT_CURSOR_INT_H
#define ARRANGEMENT_CURSOR_INT_H

#include "arrangement/batch_int.h"
#include "arrangement/cursor.h"

struct trace_cursor {
	size_t n;
	batch_cursor **bc;
	uint32_t *kat;       /* the cursors on the current key: nk indexes,
	                      * ascending */
	uint32_t *vat;       /* the nq of those on a val, by (val, index):
	                      * the first nv are on the current val (so in
	                      * batch order).  vat points into vbase[0..n]:
	                      * a step moves it past the vals it takes and
	                      * back by one for each cursor it puts back */
	uint32_t *vbase;
	size_t nk, nv, nq;
	bool kvalid, vvalid;
	int err;
	const uint8_t *key, *val;
	size_t klen, vlen;
	uint64_t kp, vp;     /* bytes_prefix8 of key and val */
	size_t tidx;         /* the time walk is on the cursor vat[tidx] */
	batch **owned;       /* tcur_adopt: freed at close */
	size_t nowned;
	/* tcur_open_at's key filters: bc[i] of a deferred batch is NULL (its
	 * filter says it cannot hold `at`) until bring_in opens it at `at`,
	 * which happens before the cursor leaves the key `at` (filter.c). */
	heap_txn *t;
	batch *const *batches;
	frontier since;
	bool *deferred;
	size_t ndeferred;
	uint8_t *at;
	size_t atlen;
};

/* Records the first error (rc < 0): the cursor is then invalid for good.
 * Returns rc. */
int tcur_fail(trace_cursor *c, int rc);

/* tcur_next_val on a key that one batch holds (nk == 1): its vals are the
 * key's vals. */
static inline int tcur_next_val_one(trace_cursor *c)
{
	batch_cursor *b = c->bc[c->kat[0]];
	int rc = bcur_next_val(b);

	if (rc)
		return tcur_fail(c, rc);
	c->tidx = 0;
	c->nq = c->nv = c->vvalid = b->vvalid;
	c->val = b->val;
	c->vlen = b->vlen;
	c->vp = b->vp;
	return c->vvalid; /* b's time walk starts afresh on its new val */
}

/* tcur_next_val, with the step of a key one batch holds inline. */
static inline int tcur_next_val_in(trace_cursor *c)
{
	if (!c->err && c->kvalid && c->vvalid && c->nk == 1)
		return tcur_next_val_one(c);
	return tcur_next_val(c);
}

/* tcur_accumulate, with a val one batch holds inline. */
static inline int tcur_accumulate_in(trace_cursor *c, atime as_of,
                                     diff_sum *sum)
{
	if (c->err || !c->kvalid || !c->vvalid || c->nv != 1)
		return tcur_accumulate(c, as_of, sum);
	diff_sum s = 0;
	int rc = bcur_accumulate(c->bc[c->vat[0]], as_of, &s);

	*sum = 0;
	if (rc)
		return tcur_fail(c, rc);
	c->tidx = 1; /* as after walking every pair: time_next says 0 */
	*sum = s;
	return 0;
}

#endif /* ARRANGEMENT_CURSOR_INT_H */
