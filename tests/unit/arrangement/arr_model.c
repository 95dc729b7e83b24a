/*
 * tests/unit/arrangement/arr_model.c - the reference model of the
 * builder_* and merge_* suites (see arr_test.h): a deterministic update
 * generator, an in-test reference (sort + consolidate, optional time
 * advance), building a batch with the builder, batch scanning and chunk
 * comparison.  Every helper asserts; none is a test itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/batch_int.h"
#include "arrangement/builder.h"
#include "arrangement/filter.h"
#include "arr_test.h"

void at_gen(at_up *u, size_t n, uint64_t seed, const at_shape *s)
{
	uint64_t st = seed;
	for (size_t i = 0; i < n; i++) {
		uint64_t r = tl_rand(&st);
		memset(&u[i], 0, sizeof u[i]);
		u[i].klen = (uint8_t)(s->kmax ? r % (s->kmax + 1) : 0);
		for (unsigned j = 0; j < u[i].klen; j++)
			u[i].key[j] = (uint8_t)('a' + tl_rand(&st) % s->alpha);
		u[i].vlen = (uint8_t)(s->vmax ? tl_rand(&st) % (s->vmax + 1) : 0);
		for (unsigned j = 0; j < u[i].vlen; j++)
			u[i].val[j] = (uint8_t)('a' + tl_rand(&st) % s->alpha);
		u[i].time = tl_rand(&st) % s->times;
		u[i].diff = (int64_t)(tl_rand(&st) % (2 * s->dmax + 1)) - s->dmax;
	}
}

int at_cmp(const at_up *a, const at_up *b)
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
	return at_cmp(a, b);
}

size_t at_consolidate(at_up *u, size_t n, uint64_t since)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		if (u[i].time < since)
			u[i].time = since;
	qsort(u, n, sizeof *u, cmp_qsort);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		int64_t sum = 0;
		for (; j < n && at_cmp(&u[i], &u[j]) == 0; j++)
			sum += u[j].diff;
		if (sum) {
			u[o] = u[i];
			u[o++].diff = sum;
		}
		i = j;
	}
	return o;
}

void at_to_ah(const at_up *u, ah_update *a)
{
	a->key = u->key;
	a->key_len = u->klen;
	a->val = u->val;
	a->val_len = u->vlen;
	a->time = u->time;
	a->diff = u->diff;
}

int at_build_rc(at_env *e, const at_up *u, size_t n, size_t budget,
                const batch_desc *d, uint64_t *id, uint64_t *peak)
{
	builder *b = NULL;
	ah_update buf[256];
	int rc = builder_new(e->t, e->p, budget, &b);
	cr_assert_eq(rc, 0);
	for (size_t i = 0; i < n && rc == 0; i += 256) {
		size_t m = n - i < 256 ? n - i : 256;
		for (size_t j = 0; j < m; j++)
			at_to_ah(&u[i + j], &buf[j]);
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

uint64_t at_build(at_env *e, const at_up *u, size_t n, size_t budget,
                  const batch_desc *d)
{
	uint64_t id = 0;
	int rc = at_build_rc(e, u, n, budget, d, &id, NULL);
	cr_assert_eq(rc, 0, "builder: %s", ah_strerror(rc));
	return id;
}

size_t at_scan(at_env *e, uint64_t id, uint64_t since, at_up *out, size_t cap)
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

void at_assert_equal(const at_up *got, size_t ng, const at_up *want,
                     size_t nw, uint64_t seed)
{
	cr_assert_eq(ng, nw, "seed %llu: %zu updates, want %zu",
	             (unsigned long long)seed, ng, nw);
	for (size_t i = 0; i < nw; i++) {
		cr_assert_eq(at_cmp(&got[i], &want[i]), 0,
		             "seed %llu: update %zu differs",
		             (unsigned long long)seed, i);
		cr_assert_eq(got[i].diff, want[i].diff,
		             "seed %llu: diff %zu: %lld want %lld",
		             (unsigned long long)seed, i,
		             (long long)got[i].diff, (long long)want[i].diff);
	}
}

void at_assert_same_filter(at_env *e, uint64_t a, uint64_t b)
{
	batch *x = NULL, *y = NULL;
	const uint8_t *px, *py;
	cr_assert_eq(batch_load(e->t, a, &x), 0);
	cr_assert_eq(batch_load(e->t, b, &y), 0);
	cr_assert_eq(x->filter_keys, y->filter_keys);
	cr_assert_eq(x->filter_blocks, y->filter_blocks);
	cr_assert_eq(batch_filter_blocks(e->t, x, &px), 0);
	cr_assert_eq(batch_filter_blocks(e->t, y, &py), 0);
	cr_assert_eq(px == NULL, py == NULL, "key filters differ");
	size_t fb = FILTER_BLOCK * x->filter_blocks;
	uint64_t *cx = malloc(fb + 1), *cy = malloc(fb + 1);
	cr_assert(cx && cy);
	if (px) {
		memcpy(cx, px, fb);
		memcpy(cy, py, fb);
		cr_assert_eq(batch_filter_first_bad(x, cx), x->filter_blocks);
		cr_assert_eq(batch_filter_first_bad(y, cy), y->filter_blocks);
	}
	for (uint64_t i = 0; px && i < x->filter_blocks; i++) {
		uint64_t wx[FILTER_WORDS], wy[FILTER_WORDS];
		memcpy(wx, cx + FILTER_WORDS * i, sizeof wx);
		memcpy(wy, cy + FILTER_WORDS * i, sizeof wy);
		if (bfilt_checked(x->filter_hash))
			wx[FILTER_WORDS - 1] &= 0xffffffffull;
		if (bfilt_checked(y->filter_hash))
			wy[FILTER_WORDS - 1] &= 0xffffffffull;
		cr_assert_eq(memcmp(wx, wy, sizeof wx), 0,
		             "key filters differ in block %llu",
		             (unsigned long long)i);
	}
	free(cx);
	free(cy);
	batch_free(x);
	batch_free(y);
}

void at_assert_same_chunks(at_env *e, uint64_t a, uint64_t b)
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
