/*
 * tests/unit/arrangement/test_builder_util.c - shared helpers of the
 * builder_* and merge_* suites: a heap in a private temp directory, a
 * deterministic update generator, an in-test reference (sort +
 * consolidate, optional time advance) and batch scanning / chunk
 * comparison.  Every helper asserts; none is a test itself.  Names carry
 * the tb_ prefix because all test files link into one binary.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch_int.h"
#include "arrangement/builder.h"
#include "test_builder_util.h"

uint64_t tb_rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void tb_open(tb_env *e)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE | AH_OPEN_NOSYNC };
	char path[128];
	memset(e, 0, sizeof *e);
	strcpy(e->dir, "/tmp/ah-tb-XXXXXX");
	cr_assert_not_null(mkdtemp(e->dir));
	snprintf(path, sizeof path, "%s/heap", e->dir);
	cr_assert_eq(heap_open(path, &o, &e->h), 0);
	e->p = heap_pool(e->h);
	cr_assert_not_null(e->p);
	cr_assert_eq(heap_txn_begin(e->h, false, &e->t), 0);
}

void tb_commit_reopen(tb_env *e)
{
	cr_assert_eq(heap_txn_commit(e->t), 0);
	e->t = NULL;
	cr_assert_eq(heap_txn_begin(e->h, false, &e->t), 0);
}

void tb_close(tb_env *e)
{
	char cmd[160];
	if (e->t)
		cr_assert_eq(heap_txn_commit(e->t), 0);
	e->t = NULL;
	cr_assert_eq(heap_close(e->h), 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
	cr_assert_eq(system(cmd), 0);
}

void tb_gen(tb_up *u, size_t n, uint64_t seed, const tb_shape *s)
{
	uint64_t st = seed;
	for (size_t i = 0; i < n; i++) {
		uint64_t r = tb_rng(&st);
		memset(&u[i], 0, sizeof u[i]);
		u[i].klen = (uint8_t)(s->kmax ? r % (s->kmax + 1) : 0);
		for (unsigned j = 0; j < u[i].klen; j++)
			u[i].key[j] = (uint8_t)('a' + tb_rng(&st) % s->alpha);
		u[i].vlen = (uint8_t)(s->vmax ? tb_rng(&st) % (s->vmax + 1) : 0);
		for (unsigned j = 0; j < u[i].vlen; j++)
			u[i].val[j] = (uint8_t)('a' + tb_rng(&st) % s->alpha);
		u[i].time = tb_rng(&st) % s->times;
		u[i].diff = (int64_t)(tb_rng(&st) % (2 * s->dmax + 1)) - s->dmax;
	}
}

int tb_cmp(const tb_up *a, const tb_up *b)
{
	int c = bytes_cmp(a->key, a->klen, b->key, b->klen);
	if (c)
		return c;
	c = bytes_cmp(a->val, a->vlen, b->val, b->vlen);
	if (c)
		return c;
	return (a->time > b->time) - (a->time < b->time);
}

static int cmp_qsort(const void *a, const void *b)
{
	return tb_cmp(a, b);
}

size_t tb_consolidate(tb_up *u, size_t n, uint64_t since)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		if (u[i].time < since)
			u[i].time = since;
	qsort(u, n, sizeof *u, cmp_qsort);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		int64_t sum = 0;
		for (; j < n && tb_cmp(&u[i], &u[j]) == 0; j++)
			sum += u[j].diff;
		if (sum) {
			u[o] = u[i];
			u[o++].diff = sum;
		}
		i = j;
	}
	return o;
}

void tb_to_ah(const tb_up *u, ah_update *a)
{
	a->key = u->key;
	a->key_len = u->klen;
	a->val = u->val;
	a->val_len = u->vlen;
	a->time = u->time;
	a->diff = u->diff;
}

int tb_build_rc(tb_env *e, const tb_up *u, size_t n, size_t budget,
                const batch_desc *d, uint64_t *id, uint64_t *peak)
{
	builder *b = NULL;
	ah_update buf[256];
	int rc = builder_new(e->t, e->p, budget, &b);
	cr_assert_eq(rc, 0);
	for (size_t i = 0; i < n && rc == 0; i += 256) {
		size_t m = n - i < 256 ? n - i : 256;
		for (size_t j = 0; j < m; j++)
			tb_to_ah(&u[i + j], &buf[j]);
		rc = builder_push(b, buf, m);
	}
	if (rc) {
		builder_free(b);
		return rc;
	}
	if (peak)
		*peak = builder_peak_bytes(b);
	rc = builder_finish(b, d, id);
	return rc;
}

uint64_t tb_build(tb_env *e, const tb_up *u, size_t n, size_t budget,
                  const batch_desc *d)
{
	uint64_t id = 0;
	int rc = tb_build_rc(e, u, n, budget, d, &id, NULL);
	cr_assert_eq(rc, 0, "builder: %s", ah_strerror(rc));
	return id;
}

size_t tb_scan(tb_env *e, uint64_t id, uint64_t since, tb_up *out, size_t cap)
{
	batch *b = NULL;
	batch_cursor *c = NULL;
	size_t n = 0;
	cr_assert_eq(batch_load(e->t, id, &b), 0);
	cr_assert_eq(bcur_open(e->t, b, frontier_of(since), &c), 0);
	while (bcur_key_valid(c)) {
		const void *k;
		size_t kl;
		bcur_key(c, &k, &kl);
		cr_assert_leq(kl, sizeof out->key);
		while (bcur_val_valid(c)) {
			const void *v;
			size_t vl;
			uint64_t t;
			int64_t d;
			int r;
			bcur_val(c, &v, &vl);
			cr_assert_leq(vl, sizeof out->val);
			while ((r = bcur_time_next(c, &t, &d)) == 1) {
				cr_assert_lt(n, cap);
				memset(&out[n], 0, sizeof out[n]);
				memcpy(out[n].key, k, kl);
				out[n].klen = (uint8_t)kl;
				if (vl)
					memcpy(out[n].val, v, vl);
				out[n].vlen = (uint8_t)vl;
				out[n].time = t;
				out[n++].diff = d;
			}
			cr_assert_eq(r, 0);
			cr_assert_eq(bcur_step_val(c), 0);
		}
		cr_assert_eq(bcur_step_key(c), 0);
	}
	bcur_close(c);
	cr_assert_eq(b->updates, n);
	batch_free(b);
	return n;
}

void tb_assert_equal(const tb_up *got, size_t ng, const tb_up *want,
                     size_t nw, uint64_t seed)
{
	cr_assert_eq(ng, nw, "seed %llu: %zu updates, want %zu",
	             (unsigned long long)seed, ng, nw);
	for (size_t i = 0; i < nw; i++) {
		cr_assert_eq(tb_cmp(&got[i], &want[i]), 0,
		             "seed %llu: update %zu differs",
		             (unsigned long long)seed, i);
		cr_assert_eq(got[i].diff, want[i].diff,
		             "seed %llu: diff %zu: %lld want %lld",
		             (unsigned long long)seed, i,
		             (long long)got[i].diff, (long long)want[i].diff);
	}
}

void tb_assert_same_chunks(tb_env *e, uint64_t a, uint64_t b)
{
	batch *x = NULL, *y = NULL;
	cr_assert_eq(batch_load(e->t, a, &x), 0);
	cr_assert_eq(batch_load(e->t, b, &y), 0);
	cr_assert_eq(x->updates, y->updates);
	cr_assert_eq(x->keys, y->keys);
	cr_assert_eq(x->vals, y->vals);
	cr_assert_eq(x->bytes, y->bytes);
	cr_assert_eq(x->nchunks, y->nchunks);
	for (uint32_t i = 0; i < x->nchunks; i++) {
		const void *bx, *by;
		size_t ux, uy;
		cr_assert_eq(heap_chunk_get(e->t, x->chunk_ids[i], &bx, &ux), 0);
		cr_assert_eq(heap_chunk_get(e->t, y->chunk_ids[i], &by, &uy), 0);
		cr_assert_eq(ux, uy, "chunk %u: %zu vs %zu bytes", i, ux, uy);
		cr_assert_eq(memcmp(bx, by, ux), 0, "chunk %u bodies differ", i);
	}
	batch_free(x);
	batch_free(y);
}

uint64_t tb_count_chunks(tb_env *e)
{
	heap_chunk_info ci;
	uint64_t n = 0, after = 0;
	bool first = true;
	int rc;
	while ((rc = heap_chunk_next(e->t, after, first, &ci)) == 0) {
		n++;
		after = ci.id;
		first = false;
	}
	cr_assert_eq(rc, AH_ENOTFOUND);
	return n;
}
