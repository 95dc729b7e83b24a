/*
 * txn/hold.c - durable named read holds: what a hold means for since.
 *
 * Differential dataflow's TraceAgent keeps a MutableAntichain of the
 * frontiers its readers asked for (set_logical_compaction) and compacts to
 * their meet; Materialize's ReadHold / since handles persist that, with a
 * lease so that a reader that died stops holding compaction back.  Here a
 * hold is a record (heap/hold.c) naming (arrangement, hold) with a
 * frontier, a lease and the time it was last renewed, and:
 *
 *   R1 a hold is *live* unless it is released, or its lease ran out
 *      (lease_ms != 0 and renewed_ms + lease_ms <= now, CLOCK_REALTIME ms);
 *   R2 since <= frontier of every live hold: ah_set_since past one is
 *      AH_EFRONTIER naming it (the lowest one), and changes nothing;
 *   R3 a since that passes an expired hold marks it released (frontier
 *      kept): it holds nothing any more, until ah_hold_set re-establishes
 *      it at a frontier >= since;
 *   R4 ah_hold_set never sets a frontier below since (AH_ECOMPACTED: how a
 *      reader learns its hold was released), nor moves an unreleased hold
 *      backwards (AH_EFRONTIER);
 *   R5 dropping a hold never changes since; dropping an arrangement drops
 *      its holds.
 *
 * Clock: leases compare CLOCK_REALTIME of the process deciding (the one
 * advancing since) with renewed_ms stored by the one renewing.  A clock set
 * back by J makes a hold expire J later, not never (a renewed time in the
 * future just counts as "not yet expired"); a clock set forward by J makes
 * it expire up to J early, never earlier.  Nothing else uses the clock.
 *
 * Every decision about since reads every hold record of the heap (all of
 * them are checked: a damaged key cannot hide a hold from the walk), so a
 * damaged record is AH_ECORRUPT, never a since that passes it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "txn/txn.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || ts.tv_sec < 0)
		return 0; /* no clock: nothing expires */
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool expired(const heap_hold *h, uint64_t now)
{
	if (h->lease_ms == 0 || h->renewed_ms > UINT64_MAX - h->lease_ms)
		return false;
	return h->renewed_ms + h->lease_ms <= now;
}

static bool live(const heap_hold *h, uint64_t now)
{
	return !(h->flags & HEAP_HOLD_RELEASED) && !expired(h, now);
}

/* "2026-12-01T12:00:00.123Z" */
void txn_fmt_ms(uint64_t ms, char buf[32])
{
	time_t s = (time_t)(ms / 1000u);
	struct tm tm;

	if (gmtime_r(&s, &tm) == NULL ||
	    strftime(buf, 32, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(buf, 32, "%" PRIu64 " ms", ms);
	else
		snprintf(buf + strlen(buf), 32 - strlen(buf), ".%03uZ",
		         (unsigned)(ms % 1000u));
}

/* Every hold of the heap in key order; fn(hold, user) for those of arr
 * (NULL: all).  A damaged record stops the walk: AH_ECORRUPT. */
static int walk(ah_txn *t, const char *arr,
                int (*fn)(const heap_hold *h, void *user), void *user)
{
	heap_hold_pos pos = { 0 };
	heap_hold h;
	int rc;

	while ((rc = heap_hold_next(t->ht, &pos, &h)) == 0) {
		if (!txn_name_ok(h.arr) || !txn_name_ok(h.name))
			return CORRUPT("hold record under a key that is no name");
		if (arr && strcmp(arr, h.arr) != 0)
			continue;
		if ((rc = fn(&h, user)) != 0)
			return rc;
	}
	return rc == AH_ENOTFOUND ? 0 : rc;
}

/* The arrangement's since, for the calls of this file.  A missing
 * arrangement is AH_ENOTFOUND with a message; nothing is poisoned. */
static int since_of(ah_txn *t, const char *arr, uint64_t *since)
{
	arrangement *a;
	int rc = arr_load(t->ht, arr, &a);

	if (rc == AH_ENOTFOUND)
		return txn_fail(t, rc, "no arrangement named '%s'", arr);
	if (rc)
		return txn_fail(t, rc, "arrangement '%s': %s", arr, ah_strerror(rc));
	*since = frontier_time(arr_since(a));
	arr_free(a);
	return 0;
}

/* Poisons t keeping the message since_of wrote. */
static int poison_kept(ah_txn *t, int rc)
{
	t->poisoned = true;
	return rc;
}

static void lease_text(const heap_hold *h, char *buf, size_t len)
{
	char when[32];

	txn_fmt_ms(h->renewed_ms, when);
	if (h->lease_ms == 0)
		snprintf(buf, len, "no lease, set %s", when);
	else
		snprintf(buf, len, "lease %" PRIu64 " ms, renewed %s", h->lease_ms,
		         when);
}

int ah_hold_set(ah_txn *t, const char *arr, const char *hold,
                uint64_t at, uint64_t lease_ms)
{
	heap_hold h;
	uint64_t since;
	bool had;
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	if (!txn_name_ok(arr))
		return txn_poison(t, AH_EINVAL, "invalid arrangement name");
	if (!txn_name_ok(hold))
		return txn_poison(t, AH_EINVAL, "invalid hold name");
	if ((rc = since_of(t, arr, &since)))
		return poison_kept(t, rc);
	rc = heap_hold_get(t->ht, arr, hold, &h);
	if (rc && rc != AH_ENOTFOUND)
		return txn_poison(t, rc, "hold '%s' of '%s': %s", hold, arr,
		                  ah_strerror(rc));
	had = rc == 0;
	if (at < since)
		return txn_poison(t, AH_ECOMPACTED,
		                  "hold '%s' of '%s' at %" PRIu64 ": the since is %"
		                  PRIu64 " (%s)", hold, arr, at, since,
		                  had && (h.flags & HEAP_HOLD_RELEASED)
		                      ? "the hold was released: its lease ran out"
		                        " and since passed it"
		                      : "compacted past it");
	if (had && !(h.flags & HEAP_HOLD_RELEASED) && at < h.frontier)
		return txn_poison(t, AH_EFRONTIER,
		                  "hold '%s' of '%s' at %" PRIu64 " cannot move back"
		                  " to %" PRIu64, hold, arr, h.frontier, at);
	memset(&h, 0, sizeof h);
	strcpy(h.arr, arr);
	strcpy(h.name, hold);
	h.frontier = at;
	h.lease_ms = lease_ms;
	h.renewed_ms = now_ms();
	if ((rc = heap_hold_put(t->ht, &h)))
		return txn_poison(t, rc, "hold '%s' of '%s': %s", hold, arr,
		                  ah_strerror(rc));
	return 0;
}

int ah_hold_drop(ah_txn *t, const char *arr, const char *hold)
{
	uint64_t since;
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	if (!txn_name_ok(arr))
		return txn_poison(t, AH_EINVAL, "invalid arrangement name");
	if (!txn_name_ok(hold))
		return txn_poison(t, AH_EINVAL, "invalid hold name");
	if ((rc = since_of(t, arr, &since)))
		return poison_kept(t, rc);
	rc = heap_hold_del(t->ht, arr, hold);
	if (rc == AH_ENOTFOUND)
		return txn_poison(t, rc, "no hold '%s' of '%s'", hold, arr);
	return rc ? txn_poison(t, rc, "hold '%s' of '%s': %s", hold, arr,
	                       ah_strerror(rc)) : 0;
}

struct foreach_ctx {
	ah_hold_fn fn;
	void *user;
	uint64_t now;
};

static int foreach_one(const heap_hold *h, void *user)
{
	struct foreach_ctx *c = user;
	ah_hold_info hi = {
		.arrangement = h->arr,
		.name = h->name,
		.frontier = h->frontier,
		.lease_ms = h->lease_ms,
		.renewed_ms = h->renewed_ms,
		.expired = expired(h, c->now),
		.released = (h->flags & HEAP_HOLD_RELEASED) != 0,
	};

	return c->fn(&hi, c->user);
}

int ah_hold_foreach(ah_txn *t, const char *arr, ah_hold_fn fn, void *user)
{
	struct foreach_ctx c = { fn, user, now_ms() };
	uint64_t since;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	if (!fn || (arr && !txn_name_ok(arr)))
		return AH_EINVAL;
	if (arr && (rc = since_of(t, arr, &since)))
		return rc;
	return walk(t, arr, foreach_one, &c);
}

struct meet_ctx {
	uint64_t now, meet;
	heap_hold low;   /* the live hold at the meet (valid when found) */
	bool found;
	/* ah_set_since: holds of the arrangement to mark released */
	uint64_t since;
	heap_hold *rel;
	size_t nrel, caprel;
};


/* Appends *h to the growable array *a (n used, cap allocated): 0 or
 * AH_ENOMEM. */
static int hold_push(heap_hold **a, size_t *n, size_t *cap, const heap_hold *h)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 8;
		heap_hold *q = realloc(*a, c * sizeof *q);

		if (!q)
			return AH_ENOMEM;
		*a = q;
		*cap = c;
	}
	(*a)[(*n)++] = *h;
	return 0;
}

static int meet_one(const heap_hold *h, void *user)
{
	struct meet_ctx *c = user;

	if (live(h, c->now)) {
		if (!c->found || h->frontier < c->meet) {
			c->meet = h->frontier;
			c->low = *h;
		}
		c->found = true;
	} else if (!(h->flags & HEAP_HOLD_RELEASED) && h->frontier < c->since) {
		return hold_push(&c->rel, &c->nrel, &c->caprel, h);
	}
	return 0;
}

int ah_hold_meet(ah_txn *t, const char *arr, uint64_t *meet)
{
	struct meet_ctx c = { .now = now_ms(), .meet = UINT64_MAX };
	uint64_t since;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	if (!meet || !txn_name_ok(arr))
		return AH_EINVAL;
	if ((rc = since_of(t, arr, &since)))
		return rc;
	c.since = 0; /* nothing to release: a read */
	if ((rc = walk(t, arr, meet_one, &c)) == 0)
		*meet = c.meet;
	free(c.rel);
	return rc;
}

int txn_holds_before_since(ah_txn *t, const char *arr, uint64_t since)
{
	struct meet_ctx c = { .now = now_ms(), .meet = UINT64_MAX,
	                      .since = since };
	int rc = walk(t, arr, meet_one, &c);

	if (rc) {
		txn_poison(t, rc, "arrangement '%s': its holds: %s", arr,
		           ah_strerror(rc));
		goto out;
	}
	if (c.found && since > c.meet) {
		char lease[96];

		lease_text(&c.low, lease, sizeof lease);
		rc = txn_poison(t, AH_EFRONTIER,
		                "since %" PRIu64 " of '%s' would pass hold '%s' at %"
		                PRIu64 " (%s)", since, arr, c.low.name,
		                c.low.frontier, lease);
		goto out;
	}
	for (size_t i = 0; i < c.nrel; i++) {
		c.rel[i].flags |= HEAP_HOLD_RELEASED;
		if ((rc = heap_hold_put(t->ht, &c.rel[i]))) {
			txn_poison(t, rc, "hold '%s' of '%s': %s", c.rel[i].name,
			           arr, ah_strerror(rc));
			goto out;
		}
	}
out:
	free(c.rel);
	return rc;
}

struct drop_ctx {
	heap_hold *h;
	size_t n, cap;
};

static int drop_one(const heap_hold *h, void *user)
{
	struct drop_ctx *c = user;

	return hold_push(&c->h, &c->n, &c->cap, h);
}

int txn_holds_drop_all(ah_txn *t, const char *arr)
{
	struct drop_ctx c = { 0 };
	int rc = walk(t, arr, drop_one, &c);

	for (size_t i = 0; rc == 0 && i < c.n; i++)
		rc = heap_hold_del(t->ht, arr, c.h[i].name);
	free(c.h);
	if (rc)
		txn_poison(t, rc, "arrangement '%s': dropping its holds: %s", arr,
		           ah_strerror(rc));
	return rc;
}
