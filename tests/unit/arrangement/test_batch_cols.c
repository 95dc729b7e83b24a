/*
 * tests/unit/arrangement/test_batch_cols.c - batch chunks of version 2
 * (arrangement/batch_int.h): the writer drops or narrows exactly the
 * columns that carry nothing, and every reader (the batch cursor's walk
 * and seeks, the trace cursor's in-place sums, a merge's direct pair reads,
 * batch_check) gives back exactly what was written, for every combination
 * of fixed and variable keys and vals, one and several vals per key and
 * updates per val, and constant, few and many times and diffs.  The streams
 * are pure functions of the index (no seed).
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/cursor.h"
#include "arrangement/merge.h"
#include "heap/codec.h"
#include "arr_test.h"

enum mode { CONST, FEW, MANY };

typedef struct shape {
	bool kfix, vfix;
	uint32_t vpk, upv; /* vals per key, updates per val */
	enum mode tm, df;
	uint64_t n;
} shape;

typedef struct gen_state {
	const shape *s;
	uint8_t k[16], v[16];
} gen_state;

/* Item i: key i / (vpk * upv), its val (i / upv) % vpk, update i % upv. */
static void gen(uint64_t i, at_item *it, void *arg)
{
	gen_state *g = arg;
	const shape *s = g->s;
	uint64_t ki = i / (s->vpk * s->upv), vi = (i / s->upv) % s->vpk;
	uint64_t ui = i % s->upv;
	size_t kl = 8, vl = 4;

	for (int b = 0; b < 8; b++)
		g->k[b] = (uint8_t)(ki >> (56 - 8 * b));
	if (!s->kfix)
		for (uint64_t x = 0; x < ki % 3; x++)
			g->k[kl++] = 'x';
	for (int b = 0; b < 4; b++)
		g->v[b] = (uint8_t)(vi >> (24 - 8 * b));
	if (!s->vfix && (ki + vi) % 2)
		g->v[vl++] = 'y';
	it->key = g->k;
	it->klen = kl;
	it->val = g->v;
	it->vlen = vl;
	it->time = s->tm == CONST ? 5 : s->tm == FEW ? (ki % 4) * s->upv + ui
	                                             : ki * s->upv + ui;
	it->diff = s->df == CONST ? 1 : s->df == FEW ? 1 + (int64_t)((ki + ui) % 3)
	                                            : (int64_t)(ki * s->upv + ui) + 1;
}

/* Column k of a chunk is what mode m makes of it. */
static void col_is(const bcol *k, enum mode m, uint32_t upv, const char *what)
{
	switch (m) {
	case CONST:
		cr_assert(k->full == NULL && k->nd == 1 && k->idx == NULL, "%s", what);
		break;
	case FEW:
		cr_assert(k->full == NULL && k->nd >= 2 && k->nd <= 4 * upv &&
		          k->idx != NULL, "%s: %u entries", what, k->nd);
		break;
	case MANY:
		cr_assert(k->full != NULL && k->nd == 0, "%s", what);
		break;
	}
}

/* Sums every (key, val)'s diffs through a trace cursor's in-place sum. */
static diff_sum sum_all(at_env *e, uint64_t id, uint64_t *vals)
{
	batch *b = at_load(e, id);
	trace_cursor *c;
	diff_sum all = 0, s;

	*vals = 0;
	cr_assert_eq(tcur_open(e->t, &b, 1, frontier_of(0), &c), 0);
	while (tcur_key_valid(c)) {
		while (tcur_val_valid(c)) {
			cr_assert_eq(tcur_accumulate(c, UINT64_MAX - 1, &s), 0);
			all += s;
			(*vals)++;
			cr_assert_eq(tcur_step_val(c), 0);
		}
		cr_assert_eq(tcur_step_key(c), 0);
	}
	tcur_close(c);
	batch_free(b);
	return all;
}

static void round_trip(const shape *s, uint32_t min_chunks)
{
	batch_desc d = { { 0 }, { 1ull << 40 }, { 0 } };
	gen_state g = { s, { 0 }, { 0 } };
	at_env e;
	at_item it;
	uint32_t want = (s->kfix ? BCHUNK_KEY_FIXED : 0) |
	                (s->vfix ? BCHUNK_VAL_FIXED : 0) |
	                (s->vpk == 1 ? BCHUNK_KV_ONE : 0) |
	                (s->upv == 1 ? BCHUNK_VU_ONE : 0);
	diff_sum model = 0;

	at_open(&e);
	uint64_t id = at_write(&e, gen, &g, s->n, &d);
	batch *b = at_load(&e, id);
	cr_assert_geq(b->nchunks, min_chunks);
	cr_assert(b->rec_flags & BREC_COLS);
	for (uint32_t i = 0; i < b->nchunks; i++) {
		bchunk c;
		cr_assert_eq(bchunk_get(e.t, b->chunk_ids[i], HEAP_CHUNK_WHOLE, &c), 0);
		cr_assert_eq(c.version, BCHUNK_VERSION_COLS);
		cr_assert_eq(c.flags & ~BCHUNK_CONT, want, "chunk %u flags 0x%x", i,
		             c.flags);
		col_is(&c.tm, s->tm, s->upv, "times");
		col_is(&c.df, s->df, s->upv, "diffs");
	}
	at_scan_equal(&e, id, gen, &g, s->n);
	at_check_ok(&e, id);
	for (uint64_t i = 0; i < s->n; i++) {
		gen(i, &it, &g);
		model += it.diff;
	}
	uint64_t vals;
	cr_assert(sum_all(&e, id, &vals) == model);
	cr_assert_eq(vals, s->n / s->upv);

	/* Seeks: every 97th key, through the page-by-page path. */
	batch_cursor *c;
	for (uint64_t i = 0; i < s->n; i += 97 * s->vpk * s->upv) {
		gen(i, &it, &g);
		cr_assert_eq(bcur_open_at(e.t, b, frontier_of(0), it.key, it.klen,
		                          &c), 0);
		const void *k;
		size_t kl;
		bcur_key(c, &k, &kl);
		cr_assert(kl == it.klen && memcmp(k, it.key, kl) == 0);
		uint64_t t;
		int64_t df;
		cr_assert_eq(bcur_time_next(c, &t, &df), 1);
		cr_assert_eq(t, it.time);
		cr_assert_eq(df, it.diff);
		bcur_close(c);
	}

	/* A merge of the batch alone reads its pairs directly (or, past the
	 * cursor's scratch, walks them) and writes the same stream. */
	merger *m = NULL;
	bool done = false;
	uint64_t out = 0;
	cr_assert_eq(merger_open(e.t, e.p, &b, 1, frontier_of(0), NULL, &m), 0);
	cr_assert_eq(merger_step(m, 0, &done, NULL), 0);
	cr_assert(done);
	cr_assert_eq(merger_finish(m, &d, &out), 0);
	merger_free(m);
	at_scan_equal(&e, out, gen, &g, s->n);
	at_check_ok(&e, out);
	batch_free(b);
	at_close(&e);
}

Test(batch_cols, fixed_keys_and_vals_one_update_constant)
{
	static const shape s = { true, true, 1, 1, CONST, CONST, 5000 };
	round_trip(&s, 1);
}

Test(batch_cols, variable_several_vals_and_updates_few)
{
	static const shape s = { false, false, 3, 2, FEW, FEW, 6000 };
	round_trip(&s, 1);
}

Test(batch_cols, fixed_keys_variable_vals_many)
{
	static const shape s = { true, false, 1, 1, MANY, MANY, 6000 };
	round_trip(&s, 1);
}

/* 20 updates a val: more than the batch cursor decodes (BCUR_TSCRATCH),
 * so a merge walks them. */
Test(batch_cols, long_lists_of_dictionary_times)
{
	static const shape s = { false, true, 2, 20, FEW, CONST, 8000 };
	cr_assert_gt(20, BCUR_TSCRATCH);
	round_trip(&s, 1);
}

/* Several chunks: keys and (key, val)s continued across boundaries. */
Test(batch_cols, several_chunks_continued, .timeout = 120)
{
	static const shape s = { false, false, 3, 2, MANY, FEW, 300000 };
	round_trip(&s, 4);
}

/* Keys of 1,008 bytes: 1,000 'p' then a big-endian index (head), or the
 * index then 1,000 'q' (tail); vals of 1 KiB, so chunks hold ~500 keys. */
static void gen_long(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[1008], v[1024];
	bool head = *(bool *)arg;
	uint8_t *ix = head ? k + 1000 : k;

	memset(head ? k : k + 8, head ? 'p' : 'q', 1000);
	for (int b = 0; b < 8; b++)
		ix[b] = (uint8_t)(i >> (56 - 8 * b));
	memset(v, (int)(i % 251), sizeof v);
	*it = (at_item){ k, v, sizeof k, sizeof v, 1, 1 };
}

/* Fences are the shortest separators (ARCHITECTURE §2, B7): fence 0 is
 * empty, fence i the shortest prefix of chunk i's first key greater than
 * chunk i-1's last; a seek for the fence itself, for anything between the
 * two keys, or for the first key lands on the first key; a record whose
 * fence is cut one byte short fails batch_check, one left whole passes. */
Test(batch_cols, fences_are_shortest_separators, .timeout = 60)
{
	for (int head = 0; head < 2; head++) {
		batch_desc d = { { 0 }, { 2 }, { 0 } };
		bool h = head;
		at_env e;
		char msg[256];

		at_open(&e);
		uint64_t id = at_write(&e, gen_long, &h, 3000, &d);
		batch *b = at_load(&e, id);
		cr_assert_geq(b->nchunks, 4);
		cr_assert_eq(b->fence_len[0], 0);
		for (uint32_t i = 1; i < b->nchunks; i++) {
			bchunk p, c;
			const uint8_t *pk, *ck;
			size_t pl, cl, j = 0;
			cr_assert_eq(bchunk_get(e.t, b->chunk_ids[i - 1], HEAP_CHUNK_WHOLE, &p), 0);
			cr_assert_eq(bchunk_get(e.t, b->chunk_ids[i], HEAP_CHUNK_WHOLE, &c), 0);
			cr_assert_eq(c.flags & BCHUNK_KEY_CONT, 0);
			cr_assert_eq(bchunk_key(&p, p.nkeys - 1, &pk, &pl), 0);
			cr_assert_eq(bchunk_key(&c, 0, &ck, &cl), 0);
			while (pk[j] == ck[j])
				j++;
			cr_assert_eq(b->fence_len[i], j + 1, "chunk %u", i);
			cr_assert_eq(memcmp(b->fence[i], ck, j + 1), 0);
			cr_assert_leq(j + 1, head ? 1008 : 8);
			/* seeks: the fence (not a key), the previous last key
			 * with a 0 byte after it, the first key itself */
			uint8_t after[1009];
			memcpy(after, pk, pl);
			after[pl] = 0;
			const void *want[3] = { b->fence[i], after, ck };
			size_t wl[3] = { b->fence_len[i], pl + 1, cl };
			for (int s = 0; s < 3; s++) {
				batch_cursor *bc;
				const void *k;
				size_t kl;
				cr_assert_eq(bcur_open_at(e.t, b, frontier_of(0), want[s],
				                          wl[s], &bc), 0);
				bcur_key(bc, &k, &kl);
				cr_assert(kl == cl && memcmp(k, ck, cl) == 0,
				          "head %d chunk %u seek %d", head, i, s);
				bcur_close(bc);
				/* and forward from the batch's first key */
				cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &bc), 0);
				cr_assert_eq(bcur_seek_key(bc, want[s], wl[s]), 0);
				bcur_key(bc, &k, &kl);
				cr_assert(kl == cl && memcmp(k, ck, cl) == 0);
				bcur_close(bc);
			}
		}
		at_check_ok(&e, id);
		/* one byte short: a prefix of the previous last key (B7) */
		b->fence_len[2]--;
		cr_assert_eq(batch_record_put(e.t, b), 0);
		batch_free(b);
		b = at_load(&e, id);
		cr_assert_eq(batch_check(e.t, b, true, msg, sizeof msg), AH_ECORRUPT);
		cr_assert(strstr(msg, "(B7)"), "%s", msg);
		/* whole: a longer separator is still one */
		bchunk c2;
		const uint8_t *k2;
		size_t l2;
		cr_assert_eq(bchunk_get(e.t, b->chunk_ids[2], HEAP_CHUNK_WHOLE, &c2), 0);
		cr_assert_eq(bchunk_key(&c2, 0, &k2, &l2), 0);
		b->fence[2] = k2;
		b->fence_len[2] = l2;
		cr_assert_eq(batch_record_put(e.t, b), 0);
		batch_free(b);
		at_check_ok(&e, id);
		at_close(&e);
	}
}
