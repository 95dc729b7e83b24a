/*
 * tests/unit/arrangement/arr_test.c - the arrangement layer's unit-test
 * fixture (a heap, its pool and one transaction in a private directory)
 * and the batch-stream helpers of the batch_*, cursor_* and merge suites
 * (see arr_test.h).  Every helper asserts; none is a test itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arr_test.h"
#include "arrangement/filter.h"

void at_open(at_env *e)
{
	ah_open_opts o = {.size = sizeof o,
	                  .flags = AH_OPEN_CREATE | AH_OPEN_NOSYNC};
	memset(e, 0, sizeof *e);
	e->dir = tl_tmpdir("arr");
	cr_assert_eq(heap_open(e->dir.path, &o, &e->h), 0);
	e->p = heap_pool(e->h);
	cr_assert_not_null(e->p);
	cr_assert_eq(heap_txn_begin(e->h, false, &e->t), 0);
}

void at_commit(at_env *e, bool next_rdonly)
{
	cr_assert_eq(heap_txn_commit(e->t), 0);
	e->t = NULL;
	cr_assert_eq(heap_txn_begin(e->h, next_rdonly, &e->t), 0);
}

void at_close(at_env *e)
{
	if (e->t)
		cr_assert_eq(heap_txn_commit(e->t), 0);
	e->t = NULL;
	cr_assert_eq(heap_close(e->h), 0);
	tl_rmdir(&e->dir);
}

uint64_t at_count_chunks(at_env *e)
{
	return ht_count_chunks(e->t);
}

uint64_t at_write(at_env *e, at_gen_fn g, void *arg, uint64_t n,
                  const batch_desc *d)
{
	batch_writer *w;
	at_item it;
	uint64_t id;
	cr_assert_eq(batch_writer_new(e->t, e->p, &w), 0);
	for (uint64_t i = 0; i < n; i++) {
		g(i, &it, arg);
		int rc = batch_writer_push(w, it.key, it.klen, it.val, it.vlen,
		                           it.time, it.diff);
		cr_assert_eq(rc, 0, "push %llu: %d", (unsigned long long)i, rc);
	}
	cr_assert_eq(batch_writer_finish(w, d, &id), 0);
	return id;
}

batch *at_load(at_env *e, uint64_t id)
{
	batch *b = NULL;
	cr_assert_eq(batch_load(e->t, id, &b), 0);
	return b;
}

void at_reseal(at_env *e, uint64_t id, uint64_t cid, uint8_t *body,
               size_t used)
{
	cr_assert_eq(heap_chunk_seal(e->t, cid, body, used), 0);
	batch *b = at_load(e, id);
	if (b->chunk_sums) {
		for (uint32_t i = 0; i < b->nchunks; i++)
			cr_assert_eq(heap_chunk_sum(e->t, b->chunk_ids[i],
			                            &b->chunk_sums[i]), 0);
		if (b->filter_hash == BFILT_HASH_SUMS) {
			const void *fb;
			size_t fused;
			uint64_t bind = bfilt_bind_sums(b->filter_chunk,
			                                b->chunk_sums, b->nchunks);
			cr_assert_eq(heap_chunk_get(e->t, b->filter_chunk, &fb,
			                            &fused), 0);
			/* test-only writes through the map */
			uint64_t *blocks = (uint64_t *)((uint8_t *)fb + BFILT_CHUNK_HDR);
			for (uint64_t i = 0; i < b->filter_blocks; i++)
				filter_block_seal(blocks + FILTER_WORDS * i, i, bind);
			b->filter_sum = filter_sum(blocks, b->filter_blocks);
			cr_assert_eq(heap_chunk_seal(e->t, b->filter_chunk,
			                             (void *)fb, fused), 0);
		}
		cr_assert_eq(batch_record_put(e->t, b), 0);
	}
	batch_free(b);
}

void at_check_ok(at_env *e, uint64_t id)
{
	char msg[256];
	batch *b = at_load(e, id);
	int rc = batch_check(e->t, b, true, msg, sizeof msg);
	cr_assert_eq(rc, 0, "batch_check: %s", msg);
	batch_free(b);
}

static void step_ok(int rc)
{
	cr_assert_eq(rc, 0, "cursor step: %d", rc);
}

/* Walks the cursor in (key, val, time) order against the generator. */
void at_scan_equal(at_env *e, uint64_t id, at_gen_fn g, void *arg, uint64_t n)
{
	batch *b = at_load(e, id);
	batch_cursor *c;
	at_item it;
	uint64_t i = 0, keys = 0, vals = 0;
	cr_assert_eq(bcur_open(e->t, b, frontier_of(0), &c), 0);
	for (; bcur_key_valid(c); step_ok(bcur_step_key(c))) {
		const void *k, *v;
		size_t kl, vl;
		bcur_key(c, &k, &kl);
		keys++;
		for (; bcur_val_valid(c); step_ok(bcur_step_val(c))) {
			uint64_t t;
			int64_t df;
			int rc;
			bcur_val(c, &v, &vl);
			vals++;
			while ((rc = bcur_time_next(c, &t, &df)) == 1) {
				cr_assert_lt(i, n);
				g(i, &it, arg);
				cr_assert_eq(kl, it.klen, "key len at %llu",
				             (unsigned long long)i);
				cr_assert(kl == 0 || memcmp(k, it.key, kl) == 0);
				cr_assert_eq(vl, it.vlen, "val len at %llu",
				             (unsigned long long)i);
				cr_assert(vl == 0 || memcmp(v, it.val, vl) == 0);
				cr_assert_eq(t, it.time, "time at %llu",
				             (unsigned long long)i);
				cr_assert_eq(df, it.diff);
				i++;
			}
			cr_assert_eq(rc, 0);
		}
	}
	cr_assert_eq(i, n);
	cr_assert_eq(b->updates, n);
	cr_assert_eq(b->keys, keys);
	cr_assert_eq(b->vals, vals);
	bcur_close(c);
	batch_free(b);
}

void at_gen_dict(uint64_t i, at_item *it, void *arg)
{
	static char k[1], v[2];
	(void)arg;
	k[0] = (char)('a' + i / 3);
	v[0] = 'v';
	v[1] = (char)('0' + i % 3);
	*it = (at_item){ k, v, 1, 2, i % 2, 1 + (int64_t)(i % 3) };
}

uint64_t at_write_dict_chunk(at_env *e, uint64_t *cid, uint8_t **body,
                             size_t *used)
{
	static const batch_desc d = { { 0 }, { 2 }, { 0 } };
	const void *bp;
	uint64_t id = at_write(e, at_gen_dict, NULL, 30, &d);
	batch *b = at_load(e, id);

	cr_assert_eq(b->nchunks, 1);
	*cid = b->chunk_ids[0];
	batch_free(b);
	cr_assert_eq(heap_chunk_get(e->t, *cid, &bp, used), 0);
	*body = (uint8_t *)bp; /* test-only write through the map */
	return id;
}

void at_open_dict_chunk(at_chunk *c)
{
	at_open(&c->e);
	c->id = at_write_dict_chunk(&c->e, &c->cid, &c->body, &c->used);
}

/* The order check's cases (arr_test.h). */
const at_order_case at_order_cases[] = {
	{ "keyprefx0001", "valprefx0001", false, 0 },
	{ "keyprefx0001", "valprefx0001", true, AH_EINVAL },  /* equal */
	{ "keyprefx0001", "valprefx0000", true, AH_EINVAL },  /* tie, less */
	{ "keyprefx0001", "valprefx", true, AH_EINVAL },      /* prefix of it */
	{ "keyprefx0001", "valprefx0002", true, 0 },          /* tie, more */
	{ "keyprefx0001", "valprefw9999", false, AH_EINVAL }, /* prefix less */
	{ "keyprefx0000", "zzz", false, AH_EINVAL },          /* key tie, less */
	{ "keyprefx", "zzz", false, AH_EINVAL },              /* key prefix */
	{ "keyprefw", "zzz", false, AH_EINVAL },              /* key less */
	{ "keyprefx0001", "valprefy", false, 0 },             /* same key, told not */
	{ "keyprefx0002", "a", false, 0 },                    /* key tie, more */
	{ "keyprefy", "a", false, 0 },                        /* key prefix more */
	{ "keyprefy", "a", true, AH_EINVAL },                 /* equal val */
	{ "kz", "", false, 0 },                               /* short, empty val */
	{ "kz", "", true, AH_EINVAL },
	{ "kz", "\x01", true, 0 },
};
const size_t at_order_ncases = sizeof at_order_cases / sizeof at_order_cases[0];
