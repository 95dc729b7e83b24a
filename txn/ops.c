/*
 * txn/ops.c - arrangement mutations of the public API: create, compare-and-
 * append (persist's compare_and_append), advance, since, maintenance.
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

static int load(ah_txn *t, const char *name, spine *sp)
{
	if (!txn_name_ok(name))
		return txn_poison(t, AH_EINVAL, "invalid arrangement name");
	int rc = spine_load(t->ht, name, sp);
	if (rc == AH_ENOTFOUND)
		return txn_poison(t, rc, "no arrangement named '%s'", name);
	if (rc)
		return txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
	return 0;
}

static int check_upper(ah_txn *t, const char *name, const spine *sp,
                       uint64_t expected, uint64_t new_upper)
{
	if (sp->upper != expected)
		return txn_poison(t, AH_EUPPER,
		                  "arrangement '%s': expected upper %" PRIu64
		                  " but its upper is %" PRIu64, name, expected, sp->upper);
	if (new_upper < expected)
		return txn_poison(t, AH_EFRONTIER,
		                  "arrangement '%s': new upper %" PRIu64
		                  " is before the upper %" PRIu64, name, new_upper, expected);
	return 0;
}

/* The chain's lower for the next batch: the last batch's upper, or the
 * arrangement's upper when the chain is empty (the empty span before it
 * holds nothing). */
static uint64_t chain_lower(ah_txn *t, const spine *sp, int *rc)
{
	*rc = 0;
	if (sp->nbatches == 0)
		return sp->upper;
	batch *b;
	if ((*rc = batch_load_listed(t->ht, sp->batches[sp->nbatches - 1].id, &b)))
		return 0;
	uint64_t u = b->desc.upper;
	batch_free(b);
	return u;
}

int ah_arrangement_create(ah_txn *t, const char *name)
{
	int rc = txn_enter(t, true);
	if (rc)
		return rc;
	if (!txn_name_ok(name))
		return txn_poison(t, AH_EINVAL, "invalid arrangement name");
	spine sp;
	rc = spine_load(t->ht, name, &sp);
	if (rc == 0) {
		spine_clear(&sp);
		return txn_poison(t, AH_EEXIST, "arrangement '%s' exists", name);
	}
	if (rc != AH_ENOTFOUND)
		return txn_poison(t, rc, NULL);
	memset(&sp, 0, sizeof sp);
	if ((rc = spine_store(t->ht, name, &sp)))
		return txn_poison(t, rc, NULL);
	return 0;
}

int ah_arrangement_info_get(ah_txn *t, const char *name, ah_arrangement_info *info)
{
	int rc = txn_enter(t, false);
	if (rc)
		return rc;
	if (!info || !txn_name_ok(name))
		return AH_EINVAL;
	spine sp;
	if ((rc = spine_load(t->ht, name, &sp)))
		return txn_fail(t, rc, "no arrangement named '%s'", name);
	memset(info, 0, sizeof *info);
	info->upper = sp.upper;
	info->since = sp.since;
	info->batches = sp.nbatches;
	info->merging = sp.nmerges;
	for (uint32_t i = 0; i < sp.nbatches && !rc; i++) {
		batch *b;
		if ((rc = batch_load_listed(t->ht, sp.batches[i].id, &b)))
			break;
		info->updates += b->updates;
		info->keys += b->keys;
		info->chunks += b->nchunks;
		info->bytes += b->bytes;
		info->chunk_bytes += b->chunk_bytes;
		batch_free(b);
	}
	for (uint32_t i = 0; i < sp.nmerges && !rc; i++) {
		batch *b;
		if (!sp.merges[i].partial_id)
			continue;
		if ((rc = batch_load_listed(t->ht, sp.merges[i].partial_id, &b)))
			break;
		info->chunks += b->nchunks;
		info->bytes += b->bytes;
		info->chunk_bytes += b->chunk_bytes;
		batch_free(b);
	}
	spine_clear(&sp);
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

/* Stores sp as NAME's spine; in debug mode (AH_DEBUG) checks S1-S4 first. */
static int store(ah_txn *t, const char *name, const spine *sp)
{
	if (ah_config_debug) {
		char msg[256];
		int rc = spine_check(t->ht, sp, msg, sizeof msg);
		if (rc)
			return txn_poison(t, rc, "arrangement '%s': spine check: %s", name, msg);
	}
	int rc = spine_store(t->ht, name, sp);
	return rc ? txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc)) : 0;
}

/* Adds the built batch id (n updates) to NAME's spine with upper new_upper. */
static int seal(ah_txn *t, const char *name, spine *sp, uint64_t id,
                uint64_t n, uint64_t new_upper)
{
	int rc = 0;
	if (id)
		rc = spine_push(t->ht, txn_pool(t), sp, id, n,
		                t->heap->merge_quantum);
	if (rc)
		return txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
	sp->upper = new_upper;
	return store(t, name, sp);
}

int ah_builder_begin(ah_txn *t, const char *name, uint64_t expected_upper,
                     uint64_t new_upper, ah_builder **out)
{
	int rc = txn_enter(t, true);
	if (rc)
		return rc;
	if (!out)
		return txn_poison(t, AH_EINVAL, "NULL builder");
	*out = NULL;
	spine sp;
	if ((rc = load(t, name, &sp)))
		return rc;
	rc = check_upper(t, name, &sp, expected_upper, new_upper);
	uint64_t lower = rc ? 0 : chain_lower(t, &sp, &rc);
	spine_clear(&sp);
	if (rc)
		return t->poisoned ? rc : txn_poison(t, rc, NULL);
	ah_builder *b = calloc(1, sizeof *b);
	if (!b)
		return txn_poison(t, AH_ENOMEM, NULL);
	if ((rc = builder_new(t->ht, txn_pool(t), 0, &b->b))) {
		free(b);
		return txn_poison(t, rc, NULL);
	}
	b->txn = t;
	strcpy(b->name, name);
	b->lower = expected_upper;
	b->upper = new_upper;
	b->batch_lower = lower;
	t->builder = b;
	*out = b;
	return 0;
}

int ah_builder_push(ah_builder *b, const ah_update *ups, size_t n)
{
	if (!b)
		return AH_EINVAL;
	if (!b->txn)
		return AH_ESTATE; /* its transaction ended */
	ah_txn *t = b->txn;
	if (t->poisoned)
		return AH_EBADTXN;
	if (n && !ups)
		return txn_poison(t, AH_EINVAL, "NULL updates");
	for (size_t i = 0; i < n; i++) {
		const ah_update *u = &ups[i];
		if (u->time < b->lower || u->time >= b->upper)
			return txn_poison(t, AH_EFRONTIER,
			                  "arrangement '%s': update time %" PRIu64
			                  " outside [upper %" PRIu64 ", new upper %" PRIu64 ")",
			                  b->name, u->time, b->lower, b->upper);
		if ((u->key_len && !u->key) || (u->val_len && !u->val))
			return txn_poison(t, AH_EINVAL, "update with NULL key or val");
	}
	int rc = builder_push(b->b, ups, n);
	return rc ? txn_poison(t, rc, NULL) : 0;
}

int ah_builder_finish(ah_builder *b)
{
	if (!b)
		return AH_EINVAL;
	if (!b->txn) {
		free(b); /* detached when its txn ended: finishing frees it */
		return AH_ESTATE;
	}
	ah_txn *t = b->txn;
	t->builder = NULL;
	builder *bb = b->b;
	char name[AH_NAME_MAX + 1];
	strcpy(name, b->name);
	batch_desc d = { b->batch_lower, b->upper, 0 };
	uint64_t new_upper = b->upper;
	free(b);
	if (t->poisoned) {
		builder_free(bb);
		return AH_EBADTXN;
	}
	spine sp;
	int rc = spine_load(t->ht, name, &sp);
	if (rc) {
		builder_free(bb);
		return txn_poison(t, rc, NULL);
	}
	d.since = sp.since;
	uint64_t id = 0, n = 0;
	rc = builder_finish(bb, &d, &id);
	if (!rc && id) {
		batch *bt;
		if (!(rc = batch_load_listed(t->ht, id, &bt))) {
			n = bt->updates;
			batch_free(bt);
		}
	}
	if (rc == AH_ELIMIT) {
		spine_clear(&sp);
		return txn_poison(t, rc, "arrangement '%s': the diffs of one (key, val, "
		                  "time) in this batch sum outside int64: nothing "
		                  "appended", name);
	}
	if (rc) {
		spine_clear(&sp);
		return txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
	}
	rc = seal(t, name, &sp, id, n, new_upper);
	spine_clear(&sp);
	return rc;
}

void ah_builder_abandon(ah_builder *b)
{
	if (!b)
		return;
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
	int rc = txn_enter(t, true);
	if (rc)
		return rc;
	spine sp;
	if ((rc = load(t, name, &sp)))
		return rc;
	rc = check_upper(t, name, &sp, expected_upper, new_upper);
	if (!rc)
		rc = seal(t, name, &sp, 0, 0, new_upper);
	spine_clear(&sp);
	return rc;
}

int ah_set_since(ah_txn *t, const char *name, uint64_t since)
{
	int rc = txn_enter(t, true);
	if (rc)
		return rc;
	spine sp;
	if ((rc = load(t, name, &sp)))
		return rc;
	if (since < sp.since)
		rc = txn_poison(t, AH_EFRONTIER,
		                "arrangement '%s': since %" PRIu64 " is before the since %" PRIu64
		                " (since never goes backwards)", name, since, sp.since);
	else if (since > sp.upper)
		rc = txn_poison(t, AH_EFRONTIER,
		                "arrangement '%s': since %" PRIu64 " beyond the upper %" PRIu64,
		                name, since, sp.upper);
	else {
		sp.since = since;
		rc = store(t, name, &sp);
	}
	spine_clear(&sp);
	return rc;
}

int ah_maintain(ah_txn *t, const char *name, uint64_t fuel, int *idle)
{
	int rc = txn_enter(t, true);
	if (rc)
		return rc;
	spine sp;
	if ((rc = load(t, name, &sp)))
		return rc;
	bool is_idle = false;
	rc = spine_maintain(t->ht, txn_pool(t), &sp, fuel,
	                    t->heap->merge_quantum, &is_idle);
	if (rc)
		txn_poison(t, rc, "arrangement '%s': %s", name, ah_strerror(rc));
	else
		rc = store(t, name, &sp);
	spine_clear(&sp);
	if (rc)
		return rc;
	if (idle)
		*idle = is_idle;
	return 0;
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
