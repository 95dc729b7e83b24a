/*
 * txn/cursor.c - the public cursor: the trace cursor of arrangement/ over
 * the batches of one spine, plus the read frontier rules.
 *
 * Reads are defined only for as_of in [since, upper): before since the
 * history has been compacted (AH_ECOMPACTED), at or after upper it is not
 * yet complete (AH_ENOTREADY).  Never an empty success.
 *
 * Opening positions the cursor (ah_cursor_open at the first key,
 * ah_cursor_open_at at the first key >= a given one, where every batch
 * reads only the chunk its fences name: a point query touches one chunk per
 * batch), so an open fails when the first chunk it needs is damaged.
 *
 * Errors are sticky: the first error a cursor returns (but for the
 * argument errors of one call: see failed()) is kept in c->err, every
 * later call returns it, the valid() tests say 0, and ah_cursor_close
 * returns it.  So the natural loop, driven by the values
 * the movements return (1 = positioned, 0 = the end, < 0 = error), ends
 * on the error, and an inner loop that stopped on one cannot be resumed
 * by the outer loop's next step.
 *
 * A cursor belongs to its transaction: the txn keeps a list of its open
 * cursors and detaches them when it ends, so a use after the end is caught
 * (AH_ESTATE) instead of reading unmapped or reused pages.
 *
 * It must never read through a cursor whose txn ended (detached cursors
 * are AH_ESTATE) and never return a sum for an as_of outside [since,
 * upper).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "arrangement/cursor_int.h"
#include "txn/txn.h"

/* as_of must lie in [since, upper): beyond since, before upper. */
static int readable(ah_txn *t, const char *name, frontier since,
                    frontier upper, atime as_of)
{
	if (!time_beyond(as_of, since))
		return txn_fail(t, AH_ECOMPACTED,
		                "arrangement '%s': as_of %" PRIu64 " is before since %" PRIu64
		                ": compacted away", name, as_of, frontier_time(since));
	if (!time_before(as_of, upper))
		return txn_fail(t, AH_ENOTREADY,
		                "arrangement '%s': as_of %" PRIu64 " is not before upper %" PRIu64
		                ": not yet complete", name, as_of, frontier_time(upper));
	return 0;
}

int ah_check_as_of(ah_txn *t, const char *name, uint64_t as_of)
{
	arrangement *a;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	if (!txn_name_ok(name))
		return AH_EINVAL;
	if ((rc = arr_load(t->ht, name, &a)))
		return txn_fail(t, rc, "no arrangement named '%s'", name);
	rc = readable(t, name, arr_since(a), arr_upper(a), as_of);
	arr_free(a);
	return rc;
}

static void cursor_free(ah_cursor *c)
{
	tcur_close(c->tc);
	free(c);
}

/* How cursor_new positions the trace cursor: at the first key, at the
 * first key >= a key, or over one batch (its stored times). */
enum how { FIRST_KEY, AT_KEY, ONE_BATCH };

/* Loads name and opens its trace cursor as `how` says (key, len: AT_KEY;
 * id: ONE_BATCH). */
static int cursor_new(ah_txn *t, const char *name, enum how how,
                      const void *key, size_t len, uint64_t id,
                      ah_cursor **out)
{
	arrangement *a;
	ah_cursor *c;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	if (!out || !txn_name_ok(name))
		return AH_EINVAL;
	*out = NULL;
	if ((rc = arr_load(t->ht, name, &a)))
		return txn_fail(t, rc, "no arrangement named '%s'", name);
	if ((c = heap_zalloc(1, sizeof *c)) == NULL) {
		arr_free(a);
		return AH_ENOMEM;
	}
	strcpy(c->name, name);
	c->upper = arr_upper(a);
	c->since = arr_since(a);
	rc = how == ONE_BATCH ? arr_batch_cursor(t->ht, a, id, &c->tc)
	                      : arr_cursor(t->ht, a, how == AT_KEY, key, len, &c->tc);
	arr_free(a);
	*out = c;
	return rc;
}

/* Links a positioned cursor into its txn, or frees it on error. */
static int cursor_done(ah_txn *t, ah_cursor *c, int rc, ah_cursor **out)
{
	if (rc) {
		if (!t->msg[0])
			txn_fail(t, rc, "arrangement '%s': %s", c->name,
			         ah_strerror(rc));
		cursor_free(c);
		return rc;
	}
	c->txn = t;
	c->next = t->cursors;
	if (t->cursors)
		t->cursors->prev = c;
	t->cursors = c;
	*out = c;
	return 0;
}

int ah_cursor_open(ah_txn *t, const char *name, ah_cursor **out)
{
	ah_cursor *c = NULL;
	int rc;

	if (!out)
		return AH_EINVAL;
	*out = NULL;
	rc = cursor_new(t, name, FIRST_KEY, NULL, 0, 0, &c);
	return c ? cursor_done(t, c, rc, out) : rc;
}

int ah_cursor_open_at(ah_txn *t, const char *name, const void *key, size_t len,
                      ah_cursor **out)
{
	ah_cursor *c = NULL;
	int rc;

	if (!out)
		return AH_EINVAL;
	*out = NULL;
	if (len && !key)
		return AH_EINVAL;
	rc = cursor_new(t, name, AT_KEY, key, len, 0, &c);
	return c ? cursor_done(t, c, rc, out) : rc;
}

int ah_cursor_open_batch(ah_txn *t, const char *name, uint64_t batch_id,
                         ah_cursor **out)
{
	ah_cursor *c = NULL;
	int rc;

	if (!out)
		return AH_EINVAL;
	*out = NULL;
	rc = cursor_new(t, name, ONE_BATCH, NULL, 0, batch_id, &c);
	if (rc == AH_ENOTFOUND && c)
		txn_fail(t, rc, "arrangement '%s' has no batch %" PRIu64, name,
		         batch_id);
	return c ? cursor_done(t, c, rc, out) : rc;
}

int ah_cursor_close(ah_cursor *c)
{
	if (!c)
		return 0;
	if (c->txn) {
		if (c->prev)
			c->prev->next = c->next;
		else
			c->txn->cursors = c->next;
		if (c->next)
			c->next->prev = c->prev;
	}
	int rc = c->err;
	cursor_free(c);
	return rc;
}

/* Keeps the first error (sticky) and returns it.  Errors about the
 * arguments of one call, which leave the cursor where it was and say
 * nothing about the heap, are only returned: a bad argument, an as_of
 * outside [since, upper), a sum that does not fit int64. */
static int failed(ah_cursor *c, int rc)
{
	if (rc == AH_EINVAL || rc == AH_ECOMPACTED || rc == AH_ENOTREADY ||
	    rc == AH_ELIMIT)
		return rc;
	if (rc < 0 && !c->err)
		c->err = rc;
	return c->err ? c->err : rc;
}

/* A cursor is usable while its txn lives and is not poisoned, and until
 * its first error. */
static int live(ah_cursor *c)
{
	if (!c)
		return AH_EINVAL;
	if (c->err)
		return c->err;
	if (!c->txn)
		return failed(c, AH_ESTATE);
	if (c->txn->poisoned)
		return failed(c, AH_EBADTXN);
	return 0;
}

static bool usable(const ah_cursor *c)
{
	return c && !c->err && c->txn && !c->txn->poisoned;
}

int ah_cursor_key_valid(const ah_cursor *c)
{
	return usable(c) && tcur_key_valid(c->tc);
}

int ah_cursor_val_valid(const ah_cursor *c)
{
	return usable(c) && tcur_val_valid(c->tc);
}

int ah_cursor_key(ah_cursor *c, const void **ptr, size_t *len)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!ptr || !len)
		return failed(c, AH_EINVAL);
	if (!tcur_key_valid(c->tc))
		return failed(c, AH_ESTATE);
	tcur_key(c->tc, ptr, len);
	return 0;
}

int ah_cursor_val(ah_cursor *c, const void **ptr, size_t *len)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!ptr || !len)
		return failed(c, AH_EINVAL);
	if (!tcur_val_valid(c->tc))
		return failed(c, AH_ESTATE);
	tcur_val(c->tc, ptr, len);
	return 0;
}

/* A key movement: 1 when on a key afterwards, 0 past the last. */
static int key_moved(ah_cursor *c, int rc)
{
	return rc < 0 ? failed(c, rc) : tcur_key_valid(c->tc);
}

/* A val movement: 1 when on a val of the current key, 0 past its last. */
static int val_moved(ah_cursor *c, int rc)
{
	return rc < 0 ? failed(c, rc) : tcur_val_valid(c->tc);
}

int ah_cursor_step_key(ah_cursor *c)
{
	int rc = live(c);
	return rc ? rc : key_moved(c, tcur_step_key(c->tc));
}

int ah_cursor_seek_key(ah_cursor *c, const void *key, size_t len)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (len && !key)
		return failed(c, AH_EINVAL);
	return key_moved(c, tcur_seek_key(c->tc, key, len));
}

int ah_cursor_rewind_keys(ah_cursor *c)
{
	int rc = live(c);
	return rc ? rc : key_moved(c, tcur_rewind_keys(c->tc));
}

int ah_cursor_step_val(ah_cursor *c)
{
	int rc = live(c);
	if (rc)
		return rc;
	rc = tcur_next_val_in(c->tc);
	return rc < 0 ? failed(c, rc) : rc;
}

int ah_cursor_seek_val(ah_cursor *c, const void *val, size_t len)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (len && !val)
		return failed(c, AH_EINVAL);
	return val_moved(c, tcur_seek_val(c->tc, val, len));
}

int ah_cursor_rewind_vals(ah_cursor *c)
{
	int rc = live(c);
	return rc ? rc : val_moved(c, tcur_rewind_vals(c->tc));
}

int ah_cursor_times_rewind(ah_cursor *c)
{
	int rc = live(c);
	return rc ? rc : failed(c, tcur_times_rewind(c->tc));
}

int ah_cursor_time_next(ah_cursor *c, uint64_t *time, int64_t *diff)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!time || !diff)
		return failed(c, AH_EINVAL);
	return failed(c, tcur_time_next(c->tc, time, diff));
}

int ah_cursor_accumulate(ah_cursor *c, uint64_t as_of, int64_t *sum)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!sum)
		return failed(c, AH_EINVAL);
	if ((rc = readable(c->txn, c->name, c->since, c->upper, as_of)))
		return failed(c, rc);
	/* 128 bits: the order of the pairs never matters, only whether the
	 * sum fits (an update split by a merge, see merge.c, may hold parts
	 * that do not add up in int64 on their own). */
	diff_sum s;
	if ((rc = tcur_accumulate_in(c->tc, as_of, &s))) /* AH_ESTATE: no val */
		return failed(c, rc);
	if (!diff_fits(s))
		return failed(c, AH_ELIMIT);
	*sum = (int64_t)s;
	return 0;
}
