/*
 * arrangement/arrangement.c - the arrangement layer's face (arrangement.h):
 * an arrangement is its spine record plus its name; every operation of
 * txn/ on an arrangement goes through here, so the "load the spine, check
 * it, change it, store it" skeleton and the "for each batch of the spine:
 * load, use, free" walk exist once.
 *
 * It must never check the public API's frontier rules (compare-and-append,
 * since never backwards: txn/ does, with its messages) nor poison a
 * transaction (txn/ does); it never keeps a pointer into the map beyond
 * the call that produced it, except inside the cursors it hands out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrangement/arrangement.h"
#include "arrangement/batch_int.h"
#include "arrangement/spine.h"

struct arrangement {
	spine sp;
	char name[AH_NAME_MAX + 1];
};

/* --------------------------------------------------------- the record */

int arr_create(heap_txn *t, const char *name)
{
	spine sp;
	int rc = spine_load(t, name, &sp);

	if (rc == 0) {
		spine_clear(&sp);
		return AH_EEXIST;
	}
	if (rc != AH_ENOTFOUND)
		return rc;
	memset(&sp, 0, sizeof sp);
	return spine_store(t, name, &sp);
}

int arr_load(heap_txn *t, const char *name, arrangement **out)
{
	size_t n = strlen(name);
	arrangement *a;
	int rc;

	*out = NULL;
	if (n > AH_NAME_MAX)
		return AH_EINVAL;
	if ((a = heap_zalloc(1, sizeof *a)) == NULL)
		return AH_ENOMEM;
	if ((rc = spine_load(t, name, &a->sp)) != 0) {
		free(a);
		return rc;
	}
	memcpy(a->name, name, n + 1);
	*out = a;
	return 0;
}

int arr_store(heap_txn *t, const arrangement *a, char *msg, size_t msglen)
{
	int rc;

	if (msg && msglen)
		msg[0] = 0;
	if (heap_debug && (rc = spine_check(t, &a->sp, msg, msglen)) != 0)
		return rc;
	return spine_store(t, a->name, &a->sp);
}

void arr_free(arrangement *a)
{
	if (a == NULL)
		return;
	spine_clear(&a->sp);
	free(a);
}

const char *arr_name(const arrangement *a)
{
	return a->name;
}

frontier arr_upper(const arrangement *a)
{
	return a->sp.upper;
}

frontier arr_since(const arrangement *a)
{
	return a->sp.since;
}

int arr_next_lower(heap_txn *t, const arrangement *a, frontier *lower)
{
	const spine *sp = &a->sp;
	batch *b;
	int rc;

	if (sp->nbatches == 0) {
		*lower = sp->upper;
		return 0;
	}
	if ((rc = batch_load_listed(t, sp->batches[sp->nbatches - 1].id, &b)))
		return rc;
	*lower = b->desc.upper;
	batch_free(b);
	return 0;
}

/* ------------------------------------------------- batches_through */

static void fill(const batch *b, bool partial, arr_batch *ab)
{
	ab->id = b->id;
	ab->desc = b->desc;
	ab->updates = b->updates;
	ab->keys = b->keys;
	ab->vals = b->vals;
	ab->bytes = b->bytes;
	ab->chunk_bytes = b->chunk_bytes;
	ab->nchunks = b->nchunks;
	ab->chunk_ids = b->chunk_ids;
	ab->chunk_sums = b->chunk_sums;
	ab->partial = partial;
	ab->format = (b->rec_flags & BREC_COLS) ? BCHUNK_VERSION_COLS : BCHUNK_VERSION;
	ab->filter_keys = b->filter_keys;
	ab->filter_blocks = b->filter_blocks;
}

int arr_batches(heap_txn *t, const arrangement *a, bool partials,
                arr_batch_fn fn, void *user, uint64_t *bad)
{
	const spine *sp = &a->sp;
	uint32_t n = sp->nbatches + (partials ? sp->nmerges : 0);
	int rc = 0;

	for (uint32_t i = 0; i < n && rc == 0; i++) {
		bool partial = i >= sp->nbatches;
		uint64_t id = partial ? sp->merges[i - sp->nbatches].partial_id
		                      : sp->batches[i].id;
		arr_batch ab;
		batch *b;

		if (id == 0)
			continue;
		if ((rc = batch_load_listed(t, id, &b)) != 0) {
			if (bad)
				*bad = id;
			break;
		}
		fill(b, partial, &ab);
		rc = fn(&ab, user);
		batch_free(b);
	}
	return rc;
}

int arr_filters_check(heap_txn *t, const arrangement *a, uint64_t *bad)
{
	const spine *sp = &a->sp;

	for (uint32_t i = 0; i < sp->nbatches; i++) {
		const uint8_t *blocks;
		batch *b;
		int rc = batch_load_listed(t, sp->batches[i].id, &b);

		if (rc == 0) {
			rc = batch_filter_blocks(t, b, &blocks);
			batch_free(b);
		}
		if (rc) {
			*bad = sp->batches[i].id;
			return rc;
		}
	}
	return 0;
}

static int add_info(const arr_batch *b, void *user)
{
	ah_arrangement_info *in = user;

	if (!b->partial) {
		in->updates += b->updates;
		in->keys += b->keys;
	}
	in->chunks += b->nchunks;
	in->bytes += b->bytes;
	in->chunk_bytes += b->chunk_bytes;
	return 0;
}

int arr_info(heap_txn *t, const arrangement *a, ah_arrangement_info *info)
{
	memset(info, 0, sizeof *info);
	info->upper = frontier_time(a->sp.upper);
	info->since = frontier_time(a->sp.since);
	info->batches = a->sp.nbatches;
	info->merging = a->sp.nmerges;
	return arr_batches(t, a, true, add_info, info, NULL);
}

/* ---------------------------------------------------------- changes */

uint32_t arr_merging(const arrangement *a)
{
	return a->sp.nmerges;
}

int arr_append(heap_txn *t, pool *p, arrangement *a, uint64_t id,
               frontier new_upper, uint64_t quantum, bool bg, uint64_t avoid)
{
	int rc;

	if (id) {
		batch *b;

		if ((rc = batch_load_listed(t, id, &b)) != 0)
			return rc;
		rc = spine_push(t, p, &a->sp, id, b->updates, quantum, bg, avoid);
		batch_free(b);
		if (rc)
			return rc;
	}
	a->sp.upper = new_upper;
	return 0;
}

void arr_set_since(arrangement *a, frontier since)
{
	a->sp.since = since;
}

int arr_maintain(heap_txn *t, pool *p, arrangement *a, uint64_t fuel,
                 uint64_t quantum, bool bg, uint64_t avoid, bool *idle)
{
	return spine_maintain(t, p, &a->sp, fuel, quantum, bg, avoid, idle);
}

int arr_drop(heap_txn *t, arrangement *a)
{
	int rc = spine_drop_all(t, &a->sp);

	return rc ? rc : heap_del(t, HEAP_T_ARR, a->name, strlen(a->name));
}

/* --------------------------------------------------------- cursors */

int arr_cursor(heap_txn *t, const arrangement *a, bool at, const void *key,
               size_t len, trace_cursor **out)
{
	const spine *sp = &a->sp;
	batch **bs = heap_zalloc(sp->nbatches ? sp->nbatches : 1, sizeof *bs);
	uint32_t n = 0;
	int rc = 0;

	*out = NULL;
	if (bs == NULL)
		return AH_ENOMEM;
	for (; n < sp->nbatches && rc == 0; n++)
		if ((rc = batch_load_cached(t, sp->batches[n].id, &bs[n])) != 0)
			break;
	if (rc == 0)
		rc = at ? tcur_open_at(t, bs, n, sp->since, key, len, out)
		        : tcur_open(t, bs, n, sp->since, out);
	if (rc == 0)
		rc = tcur_adopt(*out, bs, n); /* freed with the cursor */
	if (rc != 0) {
		tcur_close(*out);
		*out = NULL;
		for (uint32_t i = 0; i < n; i++)
			batch_free(bs[i]);
		free(bs);
	}
	return rc;
}

static bool has_batch(const spine *sp, uint64_t id)
{
	for (uint32_t i = 0; i < sp->nbatches; i++)
		if (sp->batches[i].id == id)
			return true;
	for (uint32_t i = 0; i < sp->nmerges; i++)
		if (sp->merges[i].partial_id == id)
			return true;
	return false;
}

int arr_batch_cursor(heap_txn *t, const arrangement *a, uint64_t id,
                     trace_cursor **out)
{
	batch **bs;
	int rc;

	*out = NULL;
	if (id == 0 || !has_batch(&a->sp, id))
		return AH_ENOTFOUND;
	if ((bs = heap_zalloc(1, sizeof *bs)) == NULL)
		return AH_ENOMEM;
	/* Since the minimum time: the stored times, not advanced. */
	if ((rc = batch_load_listed(t, id, &bs[0])) == 0 &&
	    (rc = tcur_open(t, bs, 1, frontier_of(0), out)) == 0)
		rc = tcur_adopt(*out, bs, 1);
	if (rc != 0) {
		tcur_close(*out);
		*out = NULL;
		batch_free(bs[0]);
		free(bs);
	}
	return rc;
}

/* ----------------------------------------------------------- checks */

/* batch_check's message says "batch B chunk C (#i): ..." */
static uint64_t chunk_of(const char *msg)
{
	const char *p = strstr(msg, " chunk ");
	unsigned long long c = 0;

	return p && sscanf(p, " chunk %llu", &c) == 1 ? c : 0;
}

static int verify_batch(heap_txn *t, const spine *sp, uint64_t id,
                        bool partial, const arr_verify_cb *cb)
{
	char msg[320];
	batch *b;
	int rc;

	if ((rc = cb->batch_ref(cb->user, id)) != 0 || !cb->batches)
		return rc;
	if ((rc = batch_load(t, id, &b)) != 0) {
		if (rc == AH_ENOMEM)
			return rc;
		snprintf(msg, sizeof msg, "cannot load batch record: %s",
		         ah_err_name(rc));
		cb->problem(cb->user, id, 0, msg);
		return 0;
	}
	if (partial != ((b->rec_flags & BREC_PARTIAL) != 0))
		cb->problem(cb->user, id, 0, partial ? "merge output not flagged "
		            "partial" : "partial batch in the chain");
	if (!partial && !frontier_le(b->desc.since, sp->since)) {
		snprintf(msg, sizeof msg, "batch since %llu beyond the "
		         "arrangement's since %llu",
		         (unsigned long long)frontier_time(b->desc.since),
		         (unsigned long long)frontier_time(sp->since));
		cb->problem(cb->user, id, 0, msg);
	}
	for (uint32_t i = 0; i < b->nchunks && rc == 0; i++)
		rc = cb->chunk_ref(cb->user, id, b->chunk_ids[i]);
	if (rc == 0 && b->filter_chunk)
		rc = cb->chunk_ref(cb->user, id, b->filter_chunk);
	if (rc == 0 && cb->chunks && batch_check(t, b, false, msg, sizeof msg))
		cb->problem(cb->user, id, chunk_of(msg), msg);
	batch_free(b);
	return rc;
}

int arr_verify(heap_txn *t, const arrangement *a, const arr_verify_cb *cb)
{
	const spine *sp = &a->sp;
	char msg[320], line[340];
	int rc = 0;

	if (spine_check(t, sp, msg, sizeof msg)) {
		snprintf(line, sizeof line, "spine: %s", msg);
		cb->problem(cb->user, 0, 0, line);
	}
	for (uint32_t i = 0; i < sp->nbatches && rc == 0; i++)
		rc = verify_batch(t, sp, sp->batches[i].id, false, cb);
	for (uint32_t i = 0; i < sp->nmerges && rc == 0; i++)
		if (sp->merges[i].partial_id)
			rc = verify_batch(t, sp, sp->merges[i].partial_id, true, cb);
	return rc;
}

bool arr_batch_key_is_counter(uint64_t key)
{
	return key == BATCH_ID_COUNTER;
}
