/*
 * tests/unit/arrangement/test_batch_resume.c - the batch_resume suite: a
 * batch written half, suspended, committed, resumed in a new txn and
 * finished is identical to one written in one go: same update stream, same
 * counts, byte-identical chunk bodies (so continuation flags are right even
 * when the boundary cuts a key or a (key, val)).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arr_test.h"

/* 3 keys x 30,000 vals x 3 times: about 3 chunks per key. */
#define NV 30000u
#define NT 3u
#define N (3u * NV * NT)

static void gen(uint64_t i, at_item *it, void *arg)
{
	static char k[8], v[12];
	(void)arg;
	uint64_t key = i / (NV * NT), val = i / NT % NV;
	it->klen = (size_t)snprintf(k, sizeof k, "key%llu", (unsigned long long)key);
	it->vlen = (size_t)snprintf(v, sizeof v, "v%07llu", (unsigned long long)val);
	it->key = k;
	it->val = v;
	it->time = 100 + i % NT;
	it->diff = (int64_t)(i % 5) - 2 ? (int64_t)(i % 5) - 2 : 9;
}

static void push_range(batch_writer *w, uint64_t from, uint64_t to)
{
	at_item it;
	for (uint64_t i = from; i < to; i++) {
		gen(i, &it, NULL);
		cr_assert_eq(batch_writer_push(w, it.key, it.klen, it.val, it.vlen,
		                               it.time, it.diff), 0);
	}
}

static void assert_identical(at_env *e, uint64_t a, uint64_t b)
{
	batch *x = at_load(e, a), *y = at_load(e, b);
	cr_assert_eq(x->updates, y->updates);
	cr_assert_eq(x->keys, y->keys);
	cr_assert_eq(x->vals, y->vals);
	cr_assert_eq(x->bytes, y->bytes);
	cr_assert_eq(x->chunk_bytes, y->chunk_bytes);
	cr_assert_eq(x->nchunks, y->nchunks);
	cr_assert_eq(x->rec_flags, BREC_COLS | BREC_SUMS);
	cr_assert_eq(y->rec_flags, BREC_COLS | BREC_SUMS);
	for (uint32_t i = 0; i < x->nchunks; i++) {
		const void *bx, *by;
		size_t ux, uy;
		cr_assert_eq(heap_chunk_get(e->t, x->chunk_ids[i], &bx, &ux), 0);
		cr_assert_eq(heap_chunk_get(e->t, y->chunk_ids[i], &by, &uy), 0);
		cr_assert_eq(ux, uy, "chunk %u", i);
		cr_assert_eq(memcmp(bx, by, ux), 0, "chunk %u differs", i);
		cr_assert_eq(x->fence_len[i], y->fence_len[i]);
		cr_assert_eq(memcmp(x->fence[i], y->fence[i], x->fence_len[i]), 0);
	}
	batch_free(x);
	batch_free(y);
}

/* Suspends after `half` updates (twice when twice is set), resumes, and
 * compares with the one-go batch. */
static void resume_case(uint64_t half, bool twice)
{
	at_env e;
	batch_desc d = { { 100 }, { 103 }, { 0 } };
	batch_writer *w;
	uint64_t part, id, whole;
	const void *k, *v;
	size_t kl, vl;
	at_item it;

	at_open(&e);
	whole = at_write(&e, gen, NULL, N, &d);
	at_commit(&e, false);

	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	cr_assert(!batch_writer_last(w, &k, &kl, &v, &vl));
	push_range(w, 0, half);
	cr_assert(batch_writer_last(w, &k, &kl, &v, &vl));
	gen(half - 1, &it, NULL);
	cr_assert(kl == it.klen && memcmp(k, it.key, kl) == 0);
	cr_assert(vl == it.vlen && memcmp(v, it.val, vl) == 0);
	cr_assert_eq(batch_writer_suspend(w, &d, &part), 0);
	batch *p = at_load(&e, part);
	cr_assert_eq(p->rec_flags, BREC_PARTIAL | BREC_COLS | BREC_SUMS);
	cr_assert_eq(p->updates, half);
	batch_free(p);
	at_commit(&e, false);

	uint64_t mid = twice ? half + (N - half) / 2 : N;
	cr_assert_eq(batch_writer_resume(e.t, e.p, part, &w), 0);
	cr_assert(batch_writer_last(w, &k, &kl, &v, &vl));
	cr_assert(vl == it.vlen && memcmp(v, it.val, vl) == 0);
	/* order is still enforced across the boundary */
	cr_assert_eq(batch_writer_push(w, it.key, it.klen, it.val, it.vlen,
	                               it.time, 1), AH_EINVAL);
	push_range(w, half, mid);
	if (twice) {
		uint64_t part2;
		cr_assert_eq(batch_writer_suspend(w, &d, &part2), 0);
		at_commit(&e, false);
		cr_assert_eq(batch_writer_resume(e.t, e.p, part2, &w), 0);
		push_range(w, mid, N);
		part = part2;
	}
	cr_assert_eq(batch_writer_finish(w, &d, &id), 0);
	batch *gone;
	cr_assert_eq(batch_load(e.t, part, &gone), AH_ENOTFOUND);
	at_commit(&e, true);

	assert_identical(&e, whole, id);
	at_scan_equal(&e, id, gen, NULL, N);
	at_check_ok(&e, id);
	batch *r = at_load(&e, id);
	cr_log_info("half %llu: %u chunks", (unsigned long long)half, r->nchunks);
	batch_free(r);
	at_close(&e);
}

Test(batch_resume, boundary_between_keys)
{
	resume_case(NV * NT, false);
}

Test(batch_resume, boundary_inside_key)
{
	resume_case(NV * NT + 5 * NT, false);
}

Test(batch_resume, boundary_inside_val)
{
	resume_case(NV * NT + 5 * NT + 1, false);
}

Test(batch_resume, twice_inside_vals)
{
	resume_case(NT * 12345 + 2, true);
}

Test(batch_resume, nothing_pushed)
{
	at_env e;
	batch_desc d = { { 0 }, { 1 }, { 0 } };
	batch_writer *w;
	uint64_t id = 7;
	at_open(&e);
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	cr_assert_eq(batch_writer_finish(w, &d, &id), 0);
	cr_assert_eq(id, 0);
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	cr_assert_eq(batch_writer_push(w, "a", 1, "b", 1, 0, 0), AH_EINVAL);
	cr_assert_eq(batch_writer_push(w, "b", 1, "b", 1, 0, 1), 0);
	cr_assert_eq(batch_writer_push(w, "a", 1, "b", 1, 0, 1), AH_EINVAL);
	cr_assert_eq(batch_writer_push(w, "b", 1, "a", 1, 5, 1), AH_EINVAL);
	cr_assert_eq(batch_writer_push(w, "b", 1, "b", 1, 0, 1), AH_EINVAL);
	batch_writer_free(w);
	at_close(&e);
}

/* A partial batch's record lists its chunks' sums (BREC_SUMS), and the
 * resumed writer takes each chunk only when its header states the listed
 * sum: the finished record's sums come from the headers, so a stale chunk
 * (a write the storage lost) would otherwise be vouched for afresh.  The
 * record is rewritten with one listed sum off by one bit, for an adopted
 * chunk (the first) and for the last (read whole and staged again): both
 * resumes are AH_ECORRUPT; the record as written resumes. */
Test(batch_resume, a_chunk_other_than_the_listed_one_is_corrupt)
{
	batch_desc d = { { 100 }, { 103 }, { 0 } };
	for (int which = 0; which < 3; which++) {
		at_env e;
		batch_writer *w;
		uint64_t part;

		at_open(&e);
		cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
		push_range(w, 0, N);
		cr_assert_eq(batch_writer_suspend(w, &d, &part), 0);
		at_commit(&e, false);
		batch *p = at_load(&e, part);
		cr_assert(p->chunk_sums != NULL && p->nchunks >= 2, "%u chunks",
		          p->nchunks);
		if (which < 2) {
			p->chunk_sums[which == 0 ? 0 : p->nchunks - 1] ^= 1;
			cr_assert_eq(batch_record_put(e.t, p), 0);
		}
		batch_free(p);
		int rc = batch_writer_resume(e.t, e.p, part, &w);
		cr_assert_eq(rc, which < 2 ? AH_ECORRUPT : 0, "case %d: %d", which, rc);
		if (rc == 0)
			batch_writer_free(w);
		at_close(&e);
	}
}
