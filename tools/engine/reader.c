/*
 * tools/engine/reader.c - views maintained behind the writer by another
 * process (eg_reader_step), with durable read holds on the inputs, and
 * logical compaction bounded by those holds (eg_compact).  See engine.h.
 *
 * The argument: the reader's views are at position p (their upper); every
 * base input holds hold NAME at p - 1, so no since can pass p - 1 while the
 * hold is live, and the next step's delta [p, U) has exact times (eg_step's
 * rule since < lower).  The hold moves to U - 1 in the same transaction as
 * the step and the new position, so a kill at any moment leaves the hold,
 * the position and the views consistent.  A reader that stays away past its
 * lease loses the guarantee; eg_step's since check then refuses rather
 * than answer from merged times.
 *
 * It must never store a position its views have not reached, nor move a
 * hold past the position it protects.
 */
#include "tools/engine/engine.h"
#include "tools/engine/engine_int.h"

#include <stdio.h>
#include <string.h>

int eg_compact(ah_txn *txn, const char *name, uint64_t frontier, uint64_t *since)
{
	ah_arrangement_info ai;
	uint64_t meet;
	int rc;

	if ((rc = ah_arrangement_info_get(txn, name, &ai)) != 0 ||
	    (rc = ah_hold_meet(txn, name, &meet)) != 0)
		return rc;
	uint64_t to = frontier < meet ? frontier : meet;
	if (to > ai.upper)
		to = ai.upper;
	if (to > ai.since) {
		if ((rc = ah_set_since(txn, name, to)) != 0)
			return rc;
		ai.since = to;
	}
	if (since)
		*since = ai.since;
	return 0;
}

static int fail_txn(ah_txn *t, int rc)
{
	ah_txn_abort(t);
	return rc;
}

/* Aborts t and sets the message (from the txn when there is one). */
static int fail_lib(eg_graph *g, ah_txn *t, int rc, const char *what, const char *name)
{
	const char *m = ah_txn_errmsg(t);

	eg__fail(g, rc, "reader: %s %s: %s", what, name, m && m[0] ? m : ah_strerror(rc));
	return fail_txn(t, rc);
}

int eg_reader_step(eg_graph *g, ah_heap *heap, const char *name, uint64_t lease_ms,
                   uint64_t *pos, int *moved)
{
	ah_txn *t = NULL;
	ah_arrangement_info ai;
	uint64_t p = 0, u = UINT64_MAX;
	size_t nb = eg_base_count(g);
	int rc;

	if (!g || !heap || !name || eg_node_count(g) == 0 || nb == 0)
		return AH_EINVAL;
	if (moved)
		*moved = 0;
	if ((rc = ah_txn_begin(heap, 0, &t)) != 0)
		return eg__fail(g, rc, "reader %s: cannot begin a write transaction: %s", name,
		                ah_strerror(rc));
	for (size_t i = 0; i < eg_node_count(g); i++) {
		const char *o = eg_node_output(g, i);
		if ((rc = ah_arrangement_info_get(t, o, &ai)) != 0)
			return fail_lib(g, t, rc, "view", o);
		if (i == 0)
			p = ai.upper;
		else if (ai.upper != p) {
			eg__fail(g, AH_ECORRUPT,
			         "reader %s: view %s is at upper %llu, view %s at %llu: views of one "
			         "reader move together",
			         name, o, (unsigned long long)ai.upper, eg_node_output(g, 0),
			         (unsigned long long)p);
			return fail_txn(t, AH_ECORRUPT);
		}
	}
	for (size_t i = 0; i < nb; i++) {
		const char *in = eg_base_input(g, i);
		if ((rc = ah_arrangement_info_get(t, in, &ai)) != 0)
			return fail_lib(g, t, rc, "input", in);
		if (ai.upper < u)
			u = ai.upper;
		if (p > 0 && ai.since >= p) {
			eg__fail(g, AH_ECOMPACTED,
			         "reader %s: input %s is compacted to since %llu, past the reader's "
			         "position %llu (its hold was released: the lease ran out while the "
			         "reader was away): its views must be computed anew",
			         name, in, (unsigned long long)ai.since, (unsigned long long)p);
			return fail_txn(t, AH_ECOMPACTED);
		}
	}
	if (u < p) {
		eg__fail(g, AH_EUPPER, "reader %s: its views are at %llu, past the inputs' %llu",
		         name, (unsigned long long)p, (unsigned long long)u);
		return fail_txn(t, AH_EUPPER);
	}
	/* the holds first: they only move forward, to the new position - 1 */
	uint64_t hold = u > p ? u - 1 : (p ? p - 1 : 0);
	for (size_t i = 0; i < nb; i++)
		if ((rc = ah_hold_set(t, eg_base_input(g, i), name, hold, lease_ms)) != 0)
			return fail_lib(g, t, rc, "hold on", eg_base_input(g, i));
	if (u > p) {
		uint8_t le[8];
		for (int b = 0; b < 8; b++)
			le[b] = (uint8_t)(u >> (8 * b));
		if ((rc = eg_step(g, t, p, u)) != 0)
			return fail_txn(t, rc);
		if ((rc = ah_source_put(t, name, le, sizeof le)) != 0)
			return fail_lib(g, t, rc, "position", name);
		if (moved)
			*moved = 1;
		p = u;
	}
	if ((rc = ah_txn_commit(t)) != 0)
		return eg__fail(g, rc, "reader %s: commit: %s", name, ah_strerror(rc));
	if (pos)
		*pos = p;
	return 0;
}
