/*
 * txn/ops.c - arrangement mutations of the public API: create, compare-and-
 * append (persist's compare_and_append), advance, since, maintenance, drop.
 *
 * Every mutation loads the arrangement's spine, checks the frontiers
 * before touching anything, does its work and stores the spine back in the
 * same LMDB transaction.  Any failure after the checks poisons the
 * transaction, so the arrangement is never left half changed: abort
 * restores it exactly.
 *
 * Frontier rules (differential dataflow's Description):
 *   F1 appends are contiguous: expected_upper must equal the upper;
 *   F2 every appended time t satisfies upper <= t < new_upper;
 *   F3 since only advances and never passes upper;
 *   F4 the upper only advances.
 *
 * It must never change an arrangement before its frontier checks passed,
 * nor leave a failed mutation unpoisoned.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txn.h"

/* The writer's pool: txn_enter(write) made sure it exists. */
static pool *txn_pool(ah_txn *t)
{
	return heap_pool(t->heap->h);
}

/* Loads NAME for a mutation: every failure poisons. */
static int load(ah_txn *t, const char *name, arrangement **a)
{
	int rc;

	*a = NULL;
	if (!txn_name_ok(name))
		return txn_poison(t, AH_EINVAL, "invalid arrangement name");
	rc = arr_load(t->ht, name, a);
	if (rc == AH_ENOTFOUND)
		return txn_poison(t, rc, "no arrangement named '%s'", name);
	if (rc)
		return txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
	return 0;
}

/* F1 and F4: compare-and-append. */
static int check_upper(ah_txn *t, const arrangement *a, uint64_t expected,
                       uint64_t new_upper)
{
	frontier upper = arr_upper(a);

	if (!frontier_eq(upper, frontier_of(expected)))
		return txn_poison(t, AH_EUPPER,
		                  "arrangement '%s': expected upper %" PRIu64
		                  " but its upper is %" PRIu64, arr_name(a), expected,
		                  frontier_time(upper));
	if (!frontier_le(upper, frontier_of(new_upper)))
		return txn_poison(t, AH_EFRONTIER,
		                  "arrangement '%s': new upper %" PRIu64
		                  " is before the upper %" PRIu64, arr_name(a), new_upper,
		                  expected);
	return 0;
}

/* Stores a (checked under AH_DEBUG); a failure poisons. */
static int store(ah_txn *t, const arrangement *a)
{
	char msg[256];
	int rc = arr_store(t->ht, a, msg, sizeof msg);

	if (rc && msg[0])
		return txn_poison(t, rc, "arrangement '%s': spine check: %s",
		                  arr_name(a), msg);
	return rc ? txn_poison(t, rc, "arrangement '%s': %s", arr_name(a),
	                       ah_strerror(rc)) : 0;
}

/* Appends the built batch id (0: none) with upper new_upper and stores. */
static int seal(ah_txn *t, arrangement *a, uint64_t id, uint64_t new_upper)
{
	bool bg = bgm_active(t->heap);
	int rc = arr_append(t->ht, txn_pool(t), a, id, frontier_of(new_upper),
	                    t->heap->merge_quantum, bg,
	                    bg ? bgm_current(t->heap, arr_name(a)) : 0);

	if (rc == 0 && bg && arr_merging(a) > 0)
		rc = txn_note_merging(t, arr_name(a));
	if (rc)
		return txn_poison(t, rc, "arrangement '%s': %s", arr_name(a),
		                  ah_strerror(rc));
	return store(t, a);
}

int ah_arrangement_create(ah_txn *t, const char *name)
{
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	if (!txn_name_ok(name))
		return txn_poison(t, AH_EINVAL, "invalid arrangement name");
	rc = arr_create(t->ht, name);
	if (rc == AH_EEXIST)
		return txn_poison(t, rc, "arrangement '%s' exists", name);
	return rc ? txn_poison(t, rc, NULL) : 0;
}

int ah_arrangement_info_get(ah_txn *t, const char *name, ah_arrangement_info *info)
{
	arrangement *a;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	if (!info || !txn_name_ok(name))
		return AH_EINVAL;
	if ((rc = arr_load(t->ht, name, &a)))
		return txn_fail(t, rc, "no arrangement named '%s'", name);
	rc = arr_info(t->ht, a, info);
	arr_free(a);
	return rc;
}

static int name_next(ah_txn *t, enum heap_table tb, const char *after, char *buf)
{
	int rc = txn_enter(t, false);
	if (rc)
		return rc;
	if (!buf)
		return AH_EINVAL;
	const void *k, *v;
	size_t klen, vlen;
	rc = heap_next(t->ht, tb, after, after ? strlen(after) : 0, &k, &klen, &v, &vlen);
	if (rc)
		return rc;
	if (klen > AH_NAME_MAX || memchr(k, 0, klen))
		return CORRUPT("a stored name that is no name");
	memcpy(buf, k, klen);
	buf[klen] = 0;
	/* A damaged key that is no name would come back as `after` cut short
	 * (a NUL) and be answered again: a listing that never ends. */
	return txn_name_ok(buf) ? 0 : CORRUPT("a stored name that is no name");
}

int ah_arrangement_next(ah_txn *t, const char *after, char *buf)
{
	return name_next(t, HEAP_T_ARR, after, buf);
}

int ah_source_next(ah_txn *t, const char *after, char *buf)
{
	return name_next(t, HEAP_T_SOURCE, after, buf);
}

int ah_builder_begin(ah_txn *t, const char *name, uint64_t expected_upper,
                     uint64_t new_upper, ah_builder **out)
{
	arrangement *a = NULL;
	ah_builder *b = NULL;
	frontier lower;
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	if (!out)
		return txn_poison(t, AH_EINVAL, "NULL builder");
	*out = NULL;
	TRY(load(t, name, &a));
	TRY(check_upper(t, a, expected_upper, new_upper));
	if ((rc = arr_next_lower(t->ht, a, &lower))) {
		txn_poison(t, rc, NULL);
		goto out;
	}
	if ((b = calloc(1, sizeof *b)) == NULL) {
		rc = txn_poison(t, AH_ENOMEM, NULL);
		goto out;
	}
	if ((rc = builder_new(t->ht, txn_pool(t), 0, &b->b))) {
		txn_poison(t, rc, NULL);
		goto out;
	}
	b->txn = t;
	strcpy(b->name, name);
	b->lower = frontier_of(expected_upper);
	b->upper = frontier_of(new_upper);
	b->batch_lower = lower;
	t->builder = b;
	*out = b;
	b = NULL;
out:
	free(b);
	arr_free(a);
	return rc;
}

int ah_builder_push(ah_builder *b, const ah_update *ups, size_t n)
{
	if (!b)
		return AH_EINVAL;
	if (!b->txn)
		return AH_ESTATE; /* its transaction ended */
	ah_txn *t = b->txn;
	int rc = txn_owner_check(t);
	if (rc)
		return rc; /* another thread's txn: touch nothing */
	if (txn_foreign_abort_check(t) || t->poisoned)
		return AH_EBADTXN;
	if (n && !ups)
		return txn_poison(t, AH_EINVAL, "NULL updates");
	for (size_t i = 0; i < n; i++) {
		const ah_update *u = &ups[i];
		/* F2: lower <= t < upper */
		if (!time_beyond(u->time, b->lower) || !time_before(u->time, b->upper))
			return txn_poison(t, AH_EFRONTIER,
			                  "arrangement '%s': update time %" PRIu64
			                  " outside [upper %" PRIu64 ", new upper %" PRIu64 ")",
			                  b->name, u->time, frontier_time(b->lower),
			                  frontier_time(b->upper));
		if ((u->key_len && !u->key) || (u->val_len && !u->val))
			return txn_poison(t, AH_EINVAL, "update with NULL key or val");
	}
	rc = builder_push(b->b, ups, n);
	return rc ? txn_poison(t, rc, NULL) : 0;
}

int ah_builder_finish(ah_builder *b)
{
	arrangement *a = NULL;
	builder *bb;
	ah_txn *t;
	char name[AH_NAME_MAX + 1];
	batch_desc d;
	uint64_t id = 0;
	int rc;

	if (!b)
		return AH_EINVAL;
	if (!b->txn) {
		free(b); /* detached when its txn ended: finishing frees it */
		return AH_ESTATE;
	}
	t = b->txn;
	if ((rc = txn_owner_check(t)))
		return rc; /* another thread's txn: the builder stays open */
	txn_foreign_abort_check(t);
	t->builder = NULL;
	bb = b->b;
	strcpy(name, b->name);
	d = (batch_desc){ b->batch_lower, b->upper, frontier_of(0) };
	uint64_t new_upper = frontier_time(b->upper);
	free(b);
	if (t->poisoned) {
		builder_free(bb);
		return AH_EBADTXN;
	}
	if ((rc = arr_load(t->ht, name, &a))) {
		builder_free(bb);
		return txn_poison(t, rc, NULL);
	}
	d.since = arr_since(a);
	rc = builder_finish(bb, &d, &id);
	if (rc == AH_ELIMIT) {
		txn_poison(t, rc, "arrangement '%s': the diffs of one (key, val, "
		           "time) in this batch sum outside int64: nothing "
		           "appended", name);
		goto out;
	}
	if (rc) {
		txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
		goto out;
	}
	rc = seal(t, a, id, new_upper);
out:
	arr_free(a);
	return rc;
}

void ah_builder_abandon(ah_builder *b)
{
	if (!b)
		return;
	if (b->txn && txn_owner_check(b->txn)) {
		/* Another thread's txn: touch neither it nor the pool.  As
		 * ah_txn_abort from there: the txn is marked (the owner's calls
		 * fail with AH_EBADTXN) and frees the shell when it ends. */
		atomic_store(&b->abandoned, true);
		atomic_store(&b->txn->foreign_abort, true);
		return;
	}
	if (b->txn) {
		b->txn->builder = NULL;
		if (!b->txn->poisoned)
			txn_poison(b->txn, AH_EBADTXN, "builder abandoned");
	}
	builder_free(b->b);
	free(b);
}

int ah_append(ah_txn *t, const char *name, uint64_t expected_upper,
              uint64_t new_upper, const ah_update *ups, size_t n)
{
	ah_builder *b;
	int rc = ah_builder_begin(t, name, expected_upper, new_upper, &b);
	if (rc)
		return rc;
	if ((rc = ah_builder_push(b, ups, n))) {
		ah_builder_abandon(b);
		return rc;
	}
	return ah_builder_finish(b);
}

int ah_advance(ah_txn *t, const char *name, uint64_t expected_upper,
               uint64_t new_upper)
{
	arrangement *a = NULL;
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	TRY(load(t, name, &a));
	TRY(check_upper(t, a, expected_upper, new_upper));
	rc = seal(t, a, 0, new_upper);
out:
	arr_free(a);
	return rc;
}

int ah_set_since(ah_txn *t, const char *name, uint64_t since)
{
	arrangement *a = NULL;
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	TRY(load(t, name, &a));
	/* F3: since only advances and never passes upper. */
	if (!frontier_le(arr_since(a), frontier_of(since)))
		rc = txn_poison(t, AH_EFRONTIER,
		                "arrangement '%s': since %" PRIu64 " is before the since %" PRIu64
		                " (since never goes backwards)", name, since,
		                frontier_time(arr_since(a)));
	else if (!frontier_le(frontier_of(since), arr_upper(a)))
		rc = txn_poison(t, AH_EFRONTIER,
		                "arrangement '%s': since %" PRIu64 " beyond the upper %" PRIu64,
		                name, since, frontier_time(arr_upper(a)));
	if (rc)
		goto out;
	/* R2, R3 (txn/hold.c): never past a live hold. */
	if (since > frontier_time(arr_since(a)))
		TRY(txn_holds_before_since(t, name, since));
	arr_set_since(a, frontier_of(since));
	rc = store(t, a);
out:
	arr_free(a);
	return rc;
}

int ah_maintain(ah_txn *t, const char *name, uint64_t fuel, int *idle)
{
	arrangement *a = NULL;
	bool is_idle = false;
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	TRY(load(t, name, &a));
	bool bg = fuel > 0 && bgm_active(t->heap);
	if ((rc = arr_maintain(t->ht, txn_pool(t), a, fuel, t->heap->merge_quantum,
	                       bg, bg ? bgm_current(t->heap, name) : 0,
	                       &is_idle))) {
		txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
		goto out;
	}
	TRY(store(t, a));
	if (bgm_active(t->heap) && arr_merging(a) > 0 &&
	    (rc = txn_note_merging(t, name))) {
		txn_poison(t, rc, NULL);
		goto out;
	}
	if (idle)
		*idle = is_idle;
out:
	arr_free(a);
	return rc;
}

int ah_arrangement_drop(ah_txn *t, const char *name)
{
	arrangement *a = NULL;
	int rc = txn_enter(t, true);

	if (rc)
		return rc;
	TRY(load(t, name, &a));
	if ((rc = arr_drop(t->ht, a)))
		txn_poison(t, rc, "arrangement '%s': drop: %s", name, ah_strerror(rc));
	else
		rc = txn_holds_drop_all(t, name);
out:
	arr_free(a);
	return rc;
}

/* ------------------------------------------------------------ sources */

#define SOURCE_POS_MAX 65536

int ah_source_put(ah_txn *t, const char *source, const void *pos, size_t len)
{
	int rc = txn_enter(t, true);
	if (rc)
		return rc;
	if (!txn_name_ok(source))
		return txn_poison(t, AH_EINVAL, "invalid source name");
	if (len && !pos)
		return txn_poison(t, AH_EINVAL, "source position is NULL with length %zu", len);
	if (len > SOURCE_POS_MAX)
		return txn_poison(t, AH_EINVAL, "source position of %zu bytes (at most %d)",
		                  len, SOURCE_POS_MAX);
	if ((rc = heap_put(t->ht, HEAP_T_SOURCE, source, strlen(source), pos, len)))
		return txn_poison(t, rc, NULL);
	return 0;
}

int ah_source_get(ah_txn *t, const char *source, const void **pos, size_t *len)
{
	int rc = txn_enter(t, false);
	if (rc)
		return rc;
	if (!txn_name_ok(source) || !pos || !len)
		return AH_EINVAL;
	rc = heap_get(t->ht, HEAP_T_SOURCE, source, strlen(source), pos, len);
	if (rc == AH_ENOTFOUND)
		return txn_fail(t, rc, "no position for source '%s'", source);
	return rc;
}
