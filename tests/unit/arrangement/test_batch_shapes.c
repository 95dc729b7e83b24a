/*
 * tests/unit/arrangement/test_batch_shapes.c - the batch_shapes suite:
 * extreme shapes round-trip through the writer and the batch cursor (empty
 * keys and vals, keys and vals larger than a chunk class, a hot key spanning
 * many chunks, a (key, val) whose times span chunks, a million keys, binary
 * keys).  Each batch is written, committed, read back in a read txn and
 * passed through batch_check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arr_test.h"

static void be64(uint8_t *p, uint64_t x)
{
	for (int j = 0; j < 8; j++)
		p[j] = (uint8_t)(x >> (56 - 8 * j));
}

static uint64_t rd_be64(const void *p)
{
	const uint8_t *b = p;
	uint64_t x = 0;
	for (int j = 0; j < 8; j++)
		x = x << 8 | b[j];
	return x;
}

/* Counts chunks whose body carries flag f. */
static uint32_t count_flag(at_env *e, const batch *b, uint32_t f)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < b->nchunks; i++) {
		bchunk c;
		cr_assert_eq(bchunk_get(e->t, b->chunk_ids[i], HEAP_CHUNK_WHOLE, &c), 0);
		n += (c.flags & f) != 0;
	}
	return n;
}

/* ("", ""), ("", "a"), ("a", ""), ("a", "a") */
static void gen_empty(uint64_t i, at_item *it, void *arg)
{
	(void)arg;
	it->key = "a";
	it->klen = i >= 2;
	it->val = "a";
	it->vlen = i % 2;
	it->time = 5;
	it->diff = -1;
}

Test(batch_shapes, empty_key_and_val)
{
	at_env e;
	batch_desc d = { { 0 }, { 10 }, { 0 } };
	at_open(&e);
	uint64_t id = at_write(&e, gen_empty, NULL, 4, &d);
	at_commit(&e, true);
	at_scan_equal(&e, id, gen_empty, NULL, 4);
	at_check_ok(&e, id);
	batch *b = at_load(&e, id);
	cr_assert_eq(b->keys, 2);
	cr_assert_eq(b->vals, 4);
	cr_assert_eq(b->fence_len[0], 0);
	batch_free(b);
	at_close(&e);
}

/* Three keys "a", big (klen bytes of 'k'), "z"; two vals each. */
struct big {
	uint8_t *buf;
	size_t len;
	bool big_val; /* the big buffer is the middle val, not key */
};

static void gen_big(uint64_t i, at_item *it, void *arg)
{
	struct big *g = arg;
	static const char *small[] = {"a", "z"};
	uint64_t k = i / 2;
	if (g->big_val) {
		it->key = "key";
		it->klen = 3;
		it->val = i == 1 ? g->buf : (const void *)(i == 0 ? "a" : "z");
		it->vlen = i == 1 ? g->len : 1;
	} else {
		it->key = k == 1 ? g->buf : (const void *)small[k / 2];
		it->klen = k == 1 ? g->len : 1;
		it->val = i % 2 ? "v2" : "v1";
		it->vlen = 2;
	}
	it->time = i;
	it->diff = 3;
}

static void big_case(size_t len, bool big_val, uint64_t n)
{
	at_env e;
	batch_desc d = { { 0 }, { 100 }, { 0 } };
	struct big g = {malloc(len), len, big_val};
	cr_assert_not_null(g.buf);
	for (size_t i = 0; i < len; i++)
		g.buf[i] = (uint8_t)('k' + (i % 7 == 0));
	at_open(&e);
	uint64_t id = at_write(&e, gen_big, &g, n, &d);
	at_commit(&e, true);
	at_scan_equal(&e, id, gen_big, &g, n);
	at_check_ok(&e, id);
	batch *b = at_load(&e, id);
	cr_log_info("len %zu: %u chunks, %llu bytes, %llu chunk bytes", len,
	            b->nchunks, (unsigned long long)b->bytes,
	            (unsigned long long)b->chunk_bytes);
	cr_assert_geq(b->bytes, len);
	/* seek to the big key finds it */
	batch_cursor *c;
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	if (!big_val) {
		cr_assert_eq(bcur_seek_key(c, g.buf, len), 0);
		const void *k;
		size_t kl;
		bcur_key(c, &k, &kl);
		cr_assert_eq(kl, len);
		cr_assert_eq(memcmp(k, g.buf, len), 0);
	} else {
		cr_assert_eq(bcur_seek_val(c, "b", 1), 0);
		const void *v;
		size_t vl;
		bcur_val(c, &v, &vl);
		cr_assert_eq(vl, len);
		cr_assert_eq(memcmp(v, g.buf, len), 0);
	}
	bcur_close(c);
	batch_free(b);
	free(g.buf);
	at_close(&e);
}

Test(batch_shapes, key_70k)
{
	big_case(70 * 1024, false, 6);
}

Test(batch_shapes, val_300k)
{
	big_case(300 * 1024, true, 3);
}

Test(batch_shapes, val_3mib_jumbo)
{
	big_case(3u << 20, true, 3);
}

Test(batch_shapes, key_3mib_jumbo)
{
	big_case(3u << 20, false, 6);
}

/* One hot key with 1,000,000 vals (8-byte big-endian 2 * i). */
static void gen_hot(uint64_t i, at_item *it, void *arg)
{
	static uint8_t v[8];
	(void)arg;
	be64(v, 2 * i);
	it->key = "hot";
	it->klen = 3;
	it->val = v;
	it->vlen = 8;
	it->time = i % 3;
	it->diff = 1;
}

Test(batch_shapes, hot_key_million_vals, .timeout = 60)
{
	at_env e;
	batch_desc d = { { 0 }, { 3 }, { 0 } };
	const uint64_t n = 1000000;
	uint8_t t8[8];
	const void *v;
	size_t vl;
	at_open(&e);
	uint64_t id = at_write(&e, gen_hot, NULL, n, &d);
	at_commit(&e, true);
	at_scan_equal(&e, id, gen_hot, NULL, n);
	at_check_ok(&e, id);
	batch *b = at_load(&e, id);
	cr_assert_eq(b->keys, 1);
	cr_assert_eq(b->vals, n);
	cr_assert_gt(b->nchunks, 5); /* 9 bytes an update (version-2 columns) */
	cr_assert_eq(count_flag(&e, b, BCHUNK_KEY_CONT), b->nchunks - 1);
	cr_assert_eq(count_flag(&e, b, BCHUNK_VAL_CONT), 0);

	batch_cursor *c;
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	be64(t8, 2 * 500001 - 1); /* absent: lands on 500001 */
	cr_assert_eq(bcur_seek_val(c, t8, 8), 0);
	bcur_val(c, &v, &vl);
	cr_assert_eq(vl, 8);
	cr_assert_eq(rd_be64(v), 2 * 500001);
	uint64_t tm;
	int64_t df;
	cr_assert_eq(bcur_time_next(c, &tm, &df), 1);
	cr_assert_eq(tm, 500001 % 3);
	cr_assert_eq(bcur_time_next(c, &tm, &df), 0);
	be64(t8, 2 * 10); /* backwards: no-op */
	cr_assert_eq(bcur_seek_val(c, t8, 8), 0);
	bcur_val(c, &v, &vl);
	cr_assert_eq(rd_be64(v), 2 * 500001);
	cr_assert_eq(bcur_step_val(c), 0);
	bcur_val(c, &v, &vl);
	cr_assert_eq(rd_be64(v), 2 * 500002);
	be64(t8, 2 * (n - 1)); /* the last val */
	cr_assert_eq(bcur_seek_val(c, t8, 8), 0);
	bcur_val(c, &v, &vl);
	cr_assert_eq(rd_be64(v), 2 * (n - 1));
	cr_assert_eq(bcur_step_val(c), 0);
	cr_assert(!bcur_val_valid(c));
	cr_assert_eq(bcur_step_val(c), 0); /* past the end: no-op */
	cr_assert(bcur_key_valid(c));
	cr_assert_eq(bcur_rewind_vals(c), 0);
	bcur_val(c, &v, &vl);
	cr_assert_eq(rd_be64(v), 0);
	cr_assert_eq(bcur_step_key(c), 0);
	cr_assert(!bcur_key_valid(c));
	bcur_close(c);
	batch_free(b);
	at_close(&e);
}

/* One (key, val) with 300,000 times. */
static void gen_times(uint64_t i, at_item *it, void *arg)
{
	(void)arg;
	it->key = i < 300000 ? "k" : "l";
	it->klen = 1;
	it->val = "v";
	it->vlen = 1;
	it->time = i < 300000 ? 10 + 3 * i : i;
	it->diff = (int64_t)i - 150000 >= 0 ? (int64_t)i - 149999
	                                    : (int64_t)i - 150000;
}

Test(batch_shapes, val_times_span_chunks)
{
	at_env e;
	batch_desc d = { { 0 }, { 1000000 }, { 0 } };
	const uint64_t n = 300002;
	at_open(&e);
	uint64_t id = at_write(&e, gen_times, NULL, n, &d);
	at_commit(&e, true);
	at_scan_equal(&e, id, gen_times, NULL, n);
	at_check_ok(&e, id);
	batch *b = at_load(&e, id);
	cr_assert_eq(b->keys, 2);
	cr_assert_eq(b->vals, 2);
	cr_assert_gt(b->nchunks, 2);
	cr_assert_eq(count_flag(&e, b, BCHUNK_VAL_CONT), b->nchunks - 1);
	batch_cursor *c;
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	uint64_t tm, cnt = 0;
	int64_t df;
	while (bcur_time_next(c, &tm, &df) == 1)
		cnt++;
	cr_assert_eq(cnt, 300000);
	cr_assert_eq(bcur_times_rewind(c), 0);
	cr_assert_eq(bcur_time_next(c, &tm, &df), 1);
	cr_assert_eq(tm, 10);
	cr_assert_eq(bcur_step_val(c), 0);
	cr_assert(!bcur_val_valid(c));
	cr_assert_eq(bcur_step_key(c), 0);
	const void *k;
	size_t kl;
	bcur_key(c, &k, &kl);
	cr_assert_eq(kl, 1);
	cr_assert_eq(*(const char *)k, 'l');
	bcur_close(c);
	batch_free(b);
	at_close(&e);
}

/* 1,000,000 distinct keys 8-byte big-endian 2 * i, 16-byte vals. */
static void gen_keys(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[8], v[16];
	(void)arg;
	be64(k, 2 * i);
	memset(v, (int)(i & 0xff), 16);
	it->key = k;
	it->klen = 8;
	it->val = v;
	it->vlen = 16;
	it->time = i % 5;
	it->diff = 1;
}

Test(batch_shapes, million_keys, .timeout = 60)
{
	at_env e;
	batch_desc d = { { 0 }, { 5 }, { 0 } };
	const uint64_t n = 1000000;
	uint8_t t8[8];
	at_open(&e);
	uint64_t id = at_write(&e, gen_keys, NULL, n, &d);
	at_commit(&e, true);
	at_scan_equal(&e, id, gen_keys, NULL, n);
	at_check_ok(&e, id);
	batch *b = at_load(&e, id);
	cr_assert_eq(b->keys, n);
	cr_assert_eq(b->vals, n);
	cr_assert_eq(b->updates, n);
	cr_assert_eq(count_flag(&e, b, BCHUNK_KEY_CONT), 0);
	cr_log_info("1M x (8 B key, 16 B val): %u chunks, %.2f body bytes / "
	            "update, %.2f reserved bytes / update", b->nchunks,
	            (double)b->bytes / n, (double)b->chunk_bytes / n);
	batch_cursor *c;
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	/* a sample of seeks, ascending: present and absent keys */
	for (uint64_t s = 1; s < 2 * n; s += 2 * 7919 + 1) {
		const void *k;
		size_t kl;
		be64(t8, s);
		cr_assert_eq(bcur_seek_key(c, t8, 8), 0);
		cr_assert(bcur_key_valid(c));
		bcur_key(c, &k, &kl);
		uint64_t want = (s + 1) / 2 * 2;
		cr_assert_eq(rd_be64(k), want, "seek %llu", (unsigned long long)s);
	}
	be64(t8, 2 * n); /* after the last */
	cr_assert_eq(bcur_seek_key(c, t8, 8), 0);
	cr_assert(!bcur_key_valid(c));
	cr_assert_eq(bcur_step_key(c), 0);
	cr_assert_eq(bcur_rewind_keys(c), 0);
	cr_assert(bcur_key_valid(c));
	bcur_close(c);
	batch_free(b);
	at_close(&e);
}

/* Binary keys: every single byte, and 2-3 byte keys over {0x00, 0x01,
 * 0x7f, 0x80, 0xfe, 0xff}, sorted by bytes_cmp. */
struct bin {
	uint8_t k[600][3];
	uint8_t len[600];
	size_t n;
};

static struct bin *bin_keys(void)
{
	static const uint8_t a[] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff};
	struct bin *g = calloc(1, sizeof *g);
	for (int i = 0; i < 256; i++) {
		g->k[g->n][0] = (uint8_t)i;
		g->len[g->n++] = 1;
	}
	for (int x = 0; x < 6; x++)
		for (int y = 0; y < 6; y++) {
			g->k[g->n][0] = a[x];
			g->k[g->n][1] = a[y];
			g->len[g->n++] = 2;
			g->k[g->n][0] = a[x];
			g->k[g->n][1] = a[y];
			g->k[g->n][2] = a[(x + y) % 6];
			g->len[g->n++] = 3;
		}
	/* insertion sort by bytes_cmp: the order under test */
	for (size_t i = 1; i < g->n; i++)
		for (size_t j = i; j > 0 && bytes_cmp(g->k[j - 1], g->len[j - 1],
		                                      g->k[j], g->len[j]) > 0;
		     j--) {
			uint8_t tk[3], tl = g->len[j];
			memcpy(tk, g->k[j], 3);
			memcpy(g->k[j], g->k[j - 1], 3);
			g->len[j] = g->len[j - 1];
			memcpy(g->k[j - 1], tk, 3);
			g->len[j - 1] = tl;
		}
	return g;
}

static void gen_bin(uint64_t i, at_item *it, void *arg)
{
	struct bin *g = arg;
	it->key = g->k[i];
	it->klen = g->len[i];
	it->val = "\xff";
	it->vlen = 1;
	it->time = 0;
	it->diff = 1;
}

Test(batch_shapes, binary_keys)
{
	at_env e;
	batch_desc d = { { 0 }, { 1 }, { 0 } };
	struct bin *g = bin_keys();
	cr_assert_eq(g->n, 256 + 72);
	/* spot checks of the order itself */
	cr_assert_lt(bytes_cmp("\x00", 1, "\x00\x00", 2), 0);
	cr_assert_lt(bytes_cmp("\x7f\xff", 2, "\x80", 1), 0);
	cr_assert_lt(bytes_cmp("", 0, "\x00", 1), 0);
	cr_assert_gt(bytes_cmp("\xff", 1, "\xfe\xff\xff", 3), 0);
	at_open(&e);
	uint64_t id = at_write(&e, gen_bin, g, g->n, &d);
	at_commit(&e, true);
	at_scan_equal(&e, id, gen_bin, g, g->n);
	at_check_ok(&e, id);
	batch *b = at_load(&e, id);
	batch_cursor *c;
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	for (size_t i = 0; i < g->n; i += 5) {
		const void *k;
		size_t kl;
		cr_assert_eq(bcur_seek_key(c, g->k[i], g->len[i]), 0);
		bcur_key(c, &k, &kl);
		cr_assert_eq(kl, g->len[i]);
		cr_assert_eq(memcmp(k, g->k[i], kl), 0);
	}
	bcur_close(c);
	batch_free(b);
	free(g);
	at_close(&e);
}
