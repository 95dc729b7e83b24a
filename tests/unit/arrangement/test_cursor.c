/*
 * tests/unit/arrangement/test_cursor.c - the cursor_* suites: the trace
 * cursor (arrangement/cursor.c) over four batches with overlapping keys,
 * checked against an in-test model: full scans, seek_key / seek_val to
 * present, absent, before-first and after-last targets, no-op steps past the
 * end, rewinds, and times advanced to since.  Fixed seed, logged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/cursor.h"
#include "arr_test.h"

#define NB 4
#define NKEYS 200
#define NVALS 10
#define SEED 20240611ull
#define SINCE 15

/* Key k is "k%03d" (k in 1..NKEYS, odd only: even ones stay absent); val v
 * is "v" followed by v 'x' bytes, so vals are prefixes of one another. */
typedef struct ent {
	int k, v, b;
	uint64_t t;
	int64_t d;
} ent;

typedef struct model {
	ent *e;
	size_t n;
	size_t start[NB + 1]; /* batch b's entries: [start[b], start[b+1]) */
} model;

static void key_of(int k, char out[8], size_t *len)
{
	*len = (size_t)snprintf(out, 8, "k%03d", k);
}

static void val_of(int v, char out[16], size_t *len)
{
	out[0] = 'v';
	memset(out + 1, 'x', (size_t)v);
	*len = 1 + (size_t)v;
}

static int ent_cmp(const void *pa, const void *pb)
{
	const ent *a = pa, *b = pb;
	if (a->k != b->k)
		return a->k < b->k ? -1 : 1;
	if (a->v != b->v)
		return a->v < b->v ? -1 : 1;
	if (a->b != b->b)
		return a->b < b->b ? -1 : 1;
	return a->t < b->t ? -1 : a->t > b->t;
}

/* Batch b covers times [10b, 10b + 10); it holds each odd key with
 * probability 1/2, each val with 1/3, and 1 to 3 distinct times. */
static void make_model(model *m)
{
	uint64_t s = SEED;
	m->e = malloc(sizeof *m->e * NB * NKEYS * NVALS * 3);
	m->n = 0;
	for (int b = 0; b < NB; b++) {
		m->start[b] = m->n;
		for (int k = 1; k < NKEYS; k += 2) {
			if (tl_rand(&s) % 2)
				continue;
			for (int v = 0; v < NVALS; v++) {
				if (tl_rand(&s) % 3)
					continue;
				int nt = 1 + (int)(tl_rand(&s) % 3);
				for (int i = 0; i < nt; i++)
					m->e[m->n++] = (ent){k, v, b,
					        10u * (unsigned)b + 3u * (unsigned)i +
					                tl_rand(&s) % 3,
					        (int64_t)(tl_rand(&s) % 5) + 1};
			}
		}
	}
	m->start[NB] = m->n;
}

static void gen_ent(uint64_t i, at_item *it, void *arg)
{
	static char k[8], v[16];
	const ent *e = (const ent *)arg + i;
	key_of(e->k, k, &it->klen);
	val_of(e->v, v, &it->vlen);
	it->key = k;
	it->val = v;
	it->time = e->t;
	it->diff = e->d;
}

typedef struct fixture {
	at_env env;
	model m;
	batch *b[NB];
	trace_cursor *c;
} fixture;

static void setup(fixture *f)
{
	uint64_t ids[NB];
	make_model(&f->m);
	at_open(&f->env);
	for (int b = 0; b < NB; b++) {
		batch_desc d = { { 10u * (unsigned)b }, { 10u * (unsigned)b + 10 }, { 0 } };
		ids[b] = at_write(&f->env, gen_ent, f->m.e + f->m.start[b],
		                  f->m.start[b + 1] - f->m.start[b], &d);
		cr_assert_neq(ids[b], 0);
	}
	at_commit(&f->env, true);
	for (int b = 0; b < NB; b++) {
		f->b[b] = at_load(&f->env, ids[b]);
		at_check_ok(&f->env, ids[b]);
	}
	qsort(f->m.e, f->m.n, sizeof *f->m.e, ent_cmp);
	cr_assert_eq(tcur_open(f->env.t, f->b, NB, frontier_of(SINCE), &f->c), 0);
	cr_log_info("seed %llu, %zu updates", (unsigned long long)SEED, f->m.n);
}

static void teardown(fixture *f)
{
	tcur_close(f->c);
	for (int b = 0; b < NB; b++)
		batch_free(f->b[b]);
	free(f->m.e);
	at_close(&f->env);
}

static void ok(int rc)
{
	cr_assert_eq(rc, 0, "cursor step: %d", rc);
}

static int cur_key(const trace_cursor *c)
{
	const void *k;
	size_t len;
	char buf[8] = {0};
	if (!tcur_key_valid(c))
		return -1;
	tcur_key(c, &k, &len);
	cr_assert_eq(len, 4);
	memcpy(buf, k, 4);
	return atoi(buf + 1);
}

static int cur_val(const trace_cursor *c)
{
	const void *v;
	size_t len;
	if (!tcur_val_valid(c))
		return -1;
	tcur_val(c, &v, &len);
	cr_assert_geq(len, 1);
	return (int)len - 1;
}

/* Index of the model's first entry with key >= k (m->n if none). */
static size_t first_key_ge(const model *m, int k)
{
	size_t i = 0;
	while (i < m->n && m->e[i].k < k)
		i++;
	return i;
}

/* Checks the cursor's times at the current (key, val) against the model
 * from entry i; returns the index after the group. */
static size_t check_times(trace_cursor *c, const model *m, size_t i)
{
	uint64_t t;
	int64_t d;
	int k = m->e[i].k, v = m->e[i].v;
	while (i < m->n && m->e[i].k == k && m->e[i].v == v) {
		cr_assert_eq(tcur_time_next(c, &t, &d), 1);
		uint64_t want = m->e[i].t < SINCE ? SINCE : m->e[i].t;
		cr_assert_eq(t, want, "k %d v %d", k, v);
		cr_assert_eq(d, m->e[i].d);
		i++;
	}
	cr_assert_eq(tcur_time_next(c, &t, &d), 0);
	return i;
}

Test(cursor_trace, full_scan_matches_model)
{
	fixture f;
	size_t i = 0, keys = 0;
	setup(&f);
	while (tcur_key_valid(f.c)) {
		cr_assert_lt(i, f.m.n);
		cr_assert_eq(cur_key(f.c), f.m.e[i].k);
		keys++;
		while (tcur_val_valid(f.c)) {
			cr_assert_eq(cur_val(f.c), f.m.e[i].v);
			i = check_times(f.c, &f.m, i);
			cr_assert_eq(tcur_step_val(f.c), 0);
		}
		cr_assert_eq(tcur_step_key(f.c), 0);
	}
	cr_assert_eq(i, f.m.n);
	cr_assert_gt(keys, 50);
	/* past the end: no-ops */
	cr_assert_eq(tcur_step_key(f.c), 0);
	cr_assert_eq(tcur_step_val(f.c), 0);
	cr_assert(!tcur_key_valid(f.c));
	cr_assert(!tcur_val_valid(f.c));
	/* rewind_keys restarts */
	cr_assert_eq(tcur_rewind_keys(f.c), 0);
	cr_assert_eq(cur_key(f.c), f.m.e[0].k);
	cr_assert_eq(cur_val(f.c), f.m.e[0].v);
	teardown(&f);
}

Test(cursor_trace, seek_key_targets)
{
	fixture f;
	char k[8];
	size_t kl;
	setup(&f);
	/* before the first key: no-op */
	cr_assert_eq(tcur_seek_key(f.c, "a", 1), 0);
	cr_assert_eq(cur_key(f.c), f.m.e[0].k);
	/* ascending present and absent targets */
	for (int t = 0; t <= NKEYS; t += 7) {
		key_of(t, k, &kl);
		cr_assert_eq(tcur_seek_key(f.c, k, kl), 0);
		size_t i = first_key_ge(&f.m, t);
		if (i == f.m.n) {
			cr_assert(!tcur_key_valid(f.c));
			break;
		}
		cr_assert_eq(cur_key(f.c), f.m.e[i].k, "target %d", t);
		cr_assert_eq(cur_val(f.c), f.m.e[i].v);
		check_times(f.c, &f.m, i);
	}
	/* backwards: no-op */
	int here = cur_key(f.c);
	cr_assert_eq(tcur_seek_key(f.c, "k001", 4), 0);
	cr_assert_eq(cur_key(f.c), here);
	/* after the last */
	cr_assert_eq(tcur_seek_key(f.c, "l", 1), 0);
	cr_assert(!tcur_key_valid(f.c));
	cr_assert_eq(tcur_seek_key(f.c, "z", 1), 0);
	cr_assert_eq(tcur_step_key(f.c), 0);
	cr_assert(!tcur_key_valid(f.c));
	teardown(&f);
}

Test(cursor_trace, seek_val_targets)
{
	fixture f;
	char v[16];
	size_t vl;
	setup(&f);
	int checked = 0;
	for (; tcur_key_valid(f.c); ok(tcur_step_key(f.c))) {
		size_t i = first_key_ge(&f.m, cur_key(f.c));
		int k = f.m.e[i].k;
		for (int t = 1; t <= NVALS; t += 3) {
			val_of(t, v, &vl);
			cr_assert_eq(tcur_seek_val(f.c, v, vl), 0);
			while (i < f.m.n && f.m.e[i].k == k && f.m.e[i].v < t)
				i++;
			if (i == f.m.n || f.m.e[i].k != k) {
				cr_assert(!tcur_val_valid(f.c));
				cr_assert_eq(tcur_step_val(f.c), 0); /* no-op */
				cr_assert(!tcur_val_valid(f.c));
				cr_assert(tcur_key_valid(f.c));
				break;
			}
			cr_assert_eq(cur_val(f.c), f.m.e[i].v, "k %d t %d", k, t);
			check_times(f.c, &f.m, i);
			checked++;
		}
		/* backwards is a no-op; rewind_vals returns to the first val */
		int here = cur_val(f.c);
		cr_assert_eq(tcur_seek_val(f.c, "v", 1), 0);
		cr_assert_eq(cur_val(f.c), here);
		cr_assert_eq(tcur_rewind_vals(f.c), 0);
		cr_assert_eq(cur_val(f.c), f.m.e[first_key_ge(&f.m, k)].v);
		cr_assert_eq(tcur_times_rewind(f.c), 0);
	}
	cr_assert_gt(checked, 50);
	teardown(&f);
}

Test(cursor_trace, times_advanced_to_since)
{
	fixture f;
	uint64_t t;
	int64_t d;
	setup(&f);
	size_t n = 0, advanced = 0;
	for (; tcur_key_valid(f.c); ok(tcur_step_key(f.c)))
		for (; tcur_val_valid(f.c); ok(tcur_step_val(f.c)))
			while (tcur_time_next(f.c, &t, &d) == 1) {
				cr_assert_geq(t, SINCE);
				advanced += t == SINCE;
				n++;
			}
	cr_assert_eq(n, f.m.n);
	size_t want = 0;
	for (size_t i = 0; i < f.m.n; i++)
		want += f.m.e[i].t <= SINCE;
	cr_assert_eq(advanced, want);
	cr_assert_gt(advanced, 0);
	teardown(&f);
}

Test(cursor_trace, empty_and_single)
{
	at_env e;
	trace_cursor *c;
	at_open(&e);
	at_commit(&e, true);
	cr_assert_eq(tcur_open(e.t, NULL, 0, frontier_of(0), &c), 0);
	cr_assert(!tcur_key_valid(c));
	cr_assert_eq(tcur_step_key(c), 0);
	cr_assert_eq(tcur_seek_key(c, "a", 1), 0);
	cr_assert_eq(tcur_rewind_keys(c), 0);
	cr_assert(!tcur_key_valid(c));
	tcur_close(c);
	at_close(&e);
}
