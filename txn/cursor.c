/*
 * txn/cursor.c - the public cursor: the trace cursor of arrangement/ over
 * the batches of one spine, plus the read frontier rules.
 *
 * Reads are defined only for as_of in [since, upper): before since the
 * history has been compacted (AH_ECOMPACTED), at or after upper it is not
 * yet complete (AH_ENOTREADY).  Never an empty success.
 *
 * The trace cursor is opened lazily, at the first call that needs a
 * position: when that call is seek_key, every batch reads only the chunk
 * its fences name, so a point query touches one chunk per batch (cold: one
 * dependent page read fewer per batch than rewinding first).
 *
 * A cursor belongs to its transaction: the txn keeps a list of its open
 * cursors and detaches them when it ends, so a use after the end is caught
 * (AH_ESTATE) instead of reading unmapped or reused pages.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txn.h"

static int frontier(ah_txn *t, const char *name, uint64_t since, uint64_t upper,
                    uint64_t as_of)
{
	if (as_of < since)
		return txn_fail(t, AH_ECOMPACTED,
		                "arrangement '%s': as_of %" PRIu64 " is before since %" PRIu64
		                ": compacted away", name, as_of, since);
	if (as_of >= upper)
		return txn_fail(t, AH_ENOTREADY,
		                "arrangement '%s': as_of %" PRIu64 " is not before upper %" PRIu64
		                ": not yet complete", name, as_of, upper);
	return 0;
}

int ah_check_as_of(ah_txn *t, const char *name, uint64_t as_of)
{
	int rc = txn_enter(t, false);
	if (rc)
		return rc;
	if (!txn_name_ok(name))
		return AH_EINVAL;
	spine sp;
	if ((rc = spine_load(t->ht, name, &sp)))
		return txn_fail(t, rc, "no arrangement named '%s'", name);
	rc = frontier(t, name, sp.since, sp.upper, as_of);
	spine_clear(&sp);
	return rc;
}

static void cursor_free(ah_cursor *c)
{
	tcur_close(c->tc);
	for (uint32_t i = 0; i < c->nbatches; i++)
		batch_free(c->batches[i]);
	free(c->batches);
	free(c);
}

int ah_cursor_open(ah_txn *t, const char *name, ah_cursor **out)
{
	int rc = txn_enter(t, false);
	if (rc)
		return rc;
	if (!out || !txn_name_ok(name))
		return AH_EINVAL;
	*out = NULL;
	spine sp;
	if ((rc = spine_load(t->ht, name, &sp)))
		return txn_fail(t, rc, "no arrangement named '%s'", name);
	ah_cursor *c = calloc(1, sizeof *c);
	if (!c || !(c->batches = calloc(sp.nbatches ? sp.nbatches : 1, sizeof *c->batches))) {
		free(c);
		spine_clear(&sp);
		return AH_ENOMEM;
	}
	for (uint32_t i = 0; i < sp.nbatches && !rc; i++) {
		rc = batch_load(t->ht, sp.batches[i].id, &c->batches[i]);
		if (!rc)
			c->nbatches++;
	}
	c->upper = sp.upper;
	c->since = sp.since;
	spine_clear(&sp);
	if (rc) {
		cursor_free(c);
		return txn_fail(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
	}
	strcpy(c->name, name);
	c->txn = t;
	c->next = t->cursors;
	if (t->cursors)
		t->cursors->prev = c;
	t->cursors = c;
	*out = c;
	return 0;
}

void ah_cursor_close(ah_cursor *c)
{
	if (!c)
		return;
	if (c->txn) {
		if (c->prev)
			c->prev->next = c->next;
		else
			c->txn->cursors = c->next;
		if (c->next)
			c->next->prev = c->prev;
	}
	cursor_free(c);
}

/* A cursor is usable while its txn lives and is not poisoned; the first
 * use positions it at the first key. */
static int live(const ah_cursor *cc)
{
	if (!cc)
		return AH_EINVAL;
	if (!cc->txn)
		return AH_ESTATE;
	if (cc->txn->poisoned)
		return AH_EBADTXN;
	ah_cursor *c = (ah_cursor *)cc; /* lazy open: logically const */
	if (!c->tc && !c->err)
		c->err = tcur_open(c->txn->ht, c->batches, c->nbatches, c->since, &c->tc);
	return c->err;
}

int ah_cursor_key_valid(const ah_cursor *c)
{
	return live(c) == 0 && tcur_key_valid(c->tc);
}

int ah_cursor_val_valid(const ah_cursor *c)
{
	return live(c) == 0 && tcur_val_valid(c->tc);
}

int ah_cursor_key(const ah_cursor *c, const void **ptr, size_t *len)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!ptr || !len)
		return AH_EINVAL;
	if (!tcur_key_valid(c->tc))
		return AH_ESTATE;
	tcur_key(c->tc, ptr, len);
	return 0;
}

int ah_cursor_val(const ah_cursor *c, const void **ptr, size_t *len)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!ptr || !len)
		return AH_EINVAL;
	if (!tcur_val_valid(c->tc))
		return AH_ESTATE;
	tcur_val(c->tc, ptr, len);
	return 0;
}

#define MOVE(fn, call)                         \
	int fn                                 \
	{                                      \
		int rc = live(c);              \
		return rc ? rc : (call);       \
	}

MOVE(ah_cursor_step_key(ah_cursor *c), tcur_step_key(c->tc))
MOVE(ah_cursor_step_val(ah_cursor *c), tcur_step_val(c->tc))
MOVE(ah_cursor_rewind_keys(ah_cursor *c), tcur_rewind_keys(c->tc))
MOVE(ah_cursor_rewind_vals(ah_cursor *c), tcur_rewind_vals(c->tc))
MOVE(ah_cursor_times_rewind(ah_cursor *c), tcur_times_rewind(c->tc))
int ah_cursor_seek_key(ah_cursor *c, const void *key, size_t len)
{
	if (!c || (len && !key))
		return AH_EINVAL;
	if (c->txn && !c->txn->poisoned && !c->tc && !c->err) {
		c->err = tcur_open_at(c->txn->ht, c->batches, c->nbatches, c->since,
		                      key, len, &c->tc);
		return c->err;
	}
	int rc = live(c);
	return rc ? rc : tcur_seek_key(c->tc, key, len);
}
MOVE(ah_cursor_seek_val(ah_cursor *c, const void *val, size_t len),
     (len && !val) ? AH_EINVAL : tcur_seek_val(c->tc, val, len))
MOVE(ah_cursor_time_next(ah_cursor *c, uint64_t *time, int64_t *diff),
     (!time || !diff) ? AH_EINVAL : tcur_time_next(c->tc, time, diff))

int ah_cursor_accumulate(ah_cursor *c, uint64_t as_of, int64_t *sum)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!sum)
		return AH_EINVAL;
	if ((rc = frontier(c->txn, c->name, c->since, c->upper, as_of)))
		return rc;
	if (!tcur_val_valid(c->tc))
		return AH_ESTATE;
	if ((rc = tcur_times_rewind(c->tc)))
		return rc;
	int64_t s = 0;
	uint64_t tm;
	int64_t d;
	while ((rc = tcur_time_next(c->tc, &tm, &d)) == 1)
		if (tm <= as_of && __builtin_add_overflow(s, d, &s))
			return AH_ELIMIT;
	if (rc < 0)
		return rc;
	*sum = s;
	return 0;
}
