/*
 * tests/unit/arrangement/test_cold_reads.c - point reads from a cold page
 * cache (ARCHITECTURE.md section 7, "Point reads": the two rounds of
 * read-ahead and the search from an interpolated guess).  What they try to
 * break: the exact answers of seeks on an evicted heap and on a warm one;
 * the decision (a fresh handle on an evicted file prefetches, a handle
 * whose reads are resident turns warm and asks for nothing); a flipped
 * byte in a page the plan asked for is still AH_ECORRUPT when read; the
 * search from a guess that the key distribution makes wrong still lands
 * exactly.  Residency comes from mincore on the file (the heap lives under
 * /tmp, a disk filesystem: POSIX_FADV_DONTNEED drops its pages); no timing.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "arr_test.h"
#include "arrangement/cursor.h"

#define NA 150000u /* keys of batch A (two vals each): about nine chunks */
#define NB 60000u  /* keys of batch B (one val) */
#define NQ 48u     /* seeks per pass */

static void be64(uint8_t k[8], uint64_t x)
{
	for (int b = 0; b < 8; b++)
		k[b] = (uint8_t)(x >> (56 - 8 * b));
}

/* A: keys 3m, vals 0 and 1 of 16 bytes, diffs 1 and 2 (a key sums to 3).
 * B: keys 3j + 1, one val, diff 5. */
static void gen_a(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[8], v[16];
	(void)arg;
	be64(k, 3 * (i / 2));
	memset(v, (int)(i / 2 % 251), sizeof v);
	v[0] = (uint8_t)(i % 2);
	*it = (at_item){ k, v, 8, sizeof v, 1, (int64_t)(1 + i % 2) };
}

static void gen_b(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[8], v[16];
	(void)arg;
	be64(k, 3 * i + 1);
	memset(v, 7, sizeof v);
	*it = (at_item){ k, v, 8, sizeof v, 1, 5 };
}

/* The q-th key of a pass: held by A, by B, or by neither (then the seek
 * lands on the next key, 3m + 3, held by A). */
static uint64_t query(unsigned q, uint64_t *want_key, int64_t *want_sum)
{
	uint64_t m = (q * 7919u + 13u) % (NB - 1);

	switch (q % 3) {
	case 0: *want_key = 3 * m; *want_sum = 3; return 3 * m;
	case 1: *want_key = 3 * m + 1; *want_sum = 5; return 3 * m + 1;
	default: *want_key = 3 * m + 3; *want_sum = 3; return 3 * m + 2;
	}
}

/* One pass of NQ seeks through both batches, each answer exact. */
static void seek_pass(heap_txn *t, batch **bs)
{
	for (unsigned q = 0; q < NQ; q++) {
		uint64_t wk, x = 0;
		int64_t ws;
		uint8_t key[8];
		trace_cursor *c;
		const void *k;
		size_t kl;
		diff_sum sum = 0, s;

		be64(key, query(q, &wk, &ws));
		cr_assert_eq(tcur_open_at(t, bs, 2, frontier_of(0), key, 8, &c), 0,
		             "seek %u", q);
		cr_assert(tcur_key_valid(c), "seek %u", q);
		tcur_key(c, &k, &kl);
		cr_assert_eq(kl, 8);
		for (int b = 0; b < 8; b++)
			x = x << 8 | ((const uint8_t *)k)[b];
		cr_assert_eq(x, wk, "seek %u landed on %llu, not %llu", q,
		             (unsigned long long)x, (unsigned long long)wk);
		while (tcur_val_valid(c)) {
			cr_assert_eq(tcur_accumulate(c, 1, &s), 0);
			sum += s;
			cr_assert_geq(tcur_step_val(c), 0);
		}
		cr_assert_eq((int64_t)sum, ws, "seek %u", q);
		tcur_close(c);
	}
}

/* Writes A and B, closes the heap, drops its file from the page cache and
 * opens it again, with a read txn; *path: the heap file. */
static void cold_heap(at_env *e, uint64_t ids[2], char *path, size_t plen)
{
	ah_open_opts o = { .size = sizeof o };
	batch_desc d = { { 0 }, { 2 }, { 0 } };

	at_open(e);
	ids[0] = at_write(e, gen_a, NULL, 2 * NA, &d);
	ids[1] = at_write(e, gen_b, NULL, NB, &d);
	cr_assert_eq(heap_txn_commit(e->t), 0);
	e->t = NULL;
	cr_assert_eq(heap_close(e->h), 0);
	snprintf(path, plen, "%s", e->dir.path);
	tl_evict(path);
	cr_assert_eq(heap_open(path, &o, &e->h), 0);
	cr_assert_eq(heap_txn_begin(e->h, true, &e->t), 0);
}

Test(cold_reads, evicted_then_warm_answers_exactly_and_decides)
{
	at_env e;
	char path[128];
	uint64_t ids[2];
	batch *bs[2];
	heap_prefetch_stat st, st2;

	cold_heap(&e, ids, path, sizeof path);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(batch_load_cached(e.t, ids[i], &bs[i]), 0);
	cr_assert_geq(bs[0]->nchunks, 6);
	cr_assert_neq(bs[0]->filter_chunk, 0, "A's filter is probed in place");

	/* cold: the first seek finds its page out of the cache and asks */
	seek_pass(e.t, bs);
	heap_prefetch_stat_get(e.h, &st);
	cr_assert_eq(st.seeks, NQ);
	cr_assert_geq(st.cold_samples, 1);
	cr_assert_geq(st.issues, 2, "both rounds asked for pages");
	cr_assert_geq(st.pages, 2);

	/* the same seeks again: every page they read is resident now, so
	 * eight samples in a row turn the handle warm */
	seek_pass(e.t, bs);
	heap_prefetch_stat_get(e.h, &st);
	cr_assert_eq(st.seeks, 2 * NQ);
	cr_assert(!st.cold, "resident reads make the handle warm");

	/* warm: no request at all, a sample every 16th seek */
	seek_pass(e.t, bs);
	heap_prefetch_stat_get(e.h, &st2);
	cr_assert_eq(st2.issues, st.issues, "a warm handle asks for nothing");
	cr_assert_eq(st2.pages, st.pages);
	/* seeks 96, 112 and 128 of the handle: the last is of an absent key,
	 * sampled only if a filter lets a batch through */
	cr_assert(st2.samples - st.samples >= 2 &&
	          st2.samples - st.samples <= NQ / HEAP_PREFETCH_EVERY,
	          "samples %llu", (unsigned long long)(st2.samples - st.samples));
	cr_assert(!st2.cold);
	for (int i = 0; i < 2; i++)
		batch_free(bs[i]);
	at_close(&e);
}

Test(cold_reads, whole_filters_are_asked_for_after_the_first_query)
{
	at_env e;
	char path[128];
	uint64_t ids[2], wk;
	int64_t ws;
	batch *bs[2];
	heap_chunk_info fi;
	uint8_t key[8];
	trace_cursor *c;

	cold_heap(&e, ids, path, sizeof path);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(batch_load_cached(e.t, ids[i], &bs[i]), 0);
	cr_assert_eq(heap_chunk_next(e.t, bs[0]->filter_chunk - 1, false, &fi), 0);
	cr_assert_eq(fi.id, bs[0]->filter_chunk);
	uint64_t off = fi.file_offset - 16, len = (uint64_t)fi.class_pages * 4096;
	cr_assert_geq(fi.class_pages, 16, "a filter of several pages");
	/* the handle's first query (a restart's first answer) reads its
	 * filter blocks only */
	be64(key, query(0, &wk, &ws));
	cr_assert_eq(tcur_open_at(e.t, bs, 2, frontier_of(0), key, 8, &c), 0);
	tcur_close(c);
	cr_assert(!bs[0]->filter_asked && !bs[1]->filter_asked);
	cr_assert_lt(tl_resident(path, off, len), 8);
	/* the next cold query asks for A's whole filter (one a query) */
	be64(key, query(1, &wk, &ws));
	cr_assert_eq(tcur_open_at(e.t, bs, 2, frontier_of(0), key, 8, &c), 0);
	tcur_close(c);
	cr_assert(bs[0]->filter_asked);
	cr_assert(!bs[1]->filter_asked);
	/* the pages holding the blocks: the value from its 16th byte, the
	 * header, the chunk header (BFILT_CHUNK_HDR) and the blocks */
	heap_chunk_view fv; /* SELF: its header page only, read already */
	cr_assert_eq(heap_chunk_open(e.t, fi.id, HEAP_CHUNK_SELF, &fv), 0);
	size_t used = (size_t)((16 + (uint64_t)(fv.body - fv.value) +
	                        BFILT_CHUNK_HDR + 64 * bs[0]->filter_blocks +
	                        4095) / 4096);
	cr_assert_geq(used, 16);
	cr_assert_geq(tl_wait_resident(path, off, len, used), used);
	/* and the one after, B's */
	be64(key, query(2, &wk, &ws));
	cr_assert_eq(tcur_open_at(e.t, bs, 2, frontier_of(0), key, 8, &c), 0);
	tcur_close(c);
	cr_assert(bs[1]->filter_asked);
	seek_pass(e.t, bs); /* the answers stay exact */
	for (int i = 0; i < 2; i++)
		batch_free(bs[i]);
	at_close(&e);
}

Test(cold_reads, warm_first_query_asks_for_nothing)
{
	at_env e;
	char path[128];
	uint64_t ids[2], wk;
	int64_t ws;
	batch *bs[2];
	uint8_t key[8];
	trace_cursor *c;
	heap_prefetch_stat st;
	ah_open_opts o = { .size = sizeof o };

	cold_heap(&e, ids, path, sizeof path);
	heap_txn_abort(e.t);
	e.t = NULL;
	cr_assert_eq(heap_close(e.h), 0);
	tl_file_warm(path); /* every written page read: cached */
	cr_assert_eq(heap_open(path, &o, &e.h), 0);
	cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(batch_load_cached(e.t, ids[i], &bs[i]), 0);
	/* a restart's first answer on a warm file: samples, no request */
	be64(key, query(0, &wk, &ws));
	cr_assert_eq(tcur_open_at(e.t, bs, 2, frontier_of(0), key, 8, &c), 0);
	tcur_close(c);
	heap_prefetch_stat_get(e.h, &st);
	cr_assert_geq(st.samples, 2);
	cr_assert_eq(st.cold_samples, 0);
	cr_assert_eq(st.issues, 0);
	cr_assert(!bs[0]->filter_asked && !bs[1]->filter_asked);
	for (int i = 0; i < 2; i++)
		batch_free(bs[i]);
	at_close(&e);
}

Test(cold_reads, write_txn_and_verify_reads_plan_nothing)
{
	at_env e;
	char path[128];
	uint64_t ids[2];
	batch *bs[2];
	heap_prefetch_stat st;
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_VERIFY_READS };

	cold_heap(&e, ids, path, sizeof path);
	heap_txn_abort(e.t);
	/* a write txn: the seeks answer, nothing is sampled or asked for */
	cr_assert_eq(heap_txn_begin(e.h, false, &e.t), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(batch_load_cached(e.t, ids[i], &bs[i]), 0);
	seek_pass(e.t, bs);
	heap_prefetch_stat_get(e.h, &st);
	cr_assert_eq(st.seeks, 0);
	cr_assert_eq(st.issues, 0);
	for (int i = 0; i < 2; i++)
		batch_free(bs[i]);
	heap_txn_abort(e.t);
	e.t = NULL;
	cr_assert_eq(heap_close(e.h), 0);

	/* AH_OPEN_VERIFY_READS reads every chunk whole: no plan either */
	tl_evict(path);
	cr_assert_eq(heap_open(path, &o, &e.h), 0);
	cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(batch_load_cached(e.t, ids[i], &bs[i]), 0);
	seek_pass(e.t, bs);
	heap_prefetch_stat_get(e.h, &st);
	cr_assert_eq(st.issues, 0);
	cr_assert_eq(st.samples, 0);
	for (int i = 0; i < 2; i++)
		batch_free(bs[i]);
	at_close(&e);
}

Test(cold_reads, flipped_byte_in_a_prefetched_page_is_corrupt)
{
	at_env e;
	char path[128];
	uint64_t ids[2], off, wk;
	int64_t ws;
	batch *b, *bs[2];
	bchunk cv;
	heap_chunk_info ci;
	uint8_t key[8];
	const uint8_t *p;
	size_t len;
	trace_cursor *c;
	heap_prefetch_stat st;
	ah_open_opts o = { .size = sizeof o };

	cold_heap(&e, ids, path, sizeof path);
	/* the val bytes of seek 0's key (A's key 3m, in the plan's range
	 * around the guess): its file offset */
	be64(key, query(0, &wk, &ws));
	b = at_load(&e, ids[0]);
	uint32_t k = batch_chunk_for(b, key, 8);
	cr_assert_eq(bchunk_get(e.t, b->chunk_ids[k], HEAP_CHUNK_WHOLE, &cv), 0);
	cr_assert_eq(heap_chunk_next(e.t, b->chunk_ids[k] - 1, false, &ci), 0);
	uint32_t at = 0;
	for (; at < cv.nkeys; at++) {
		cr_assert_eq(bchunk_key(&cv, at, &p, &len), 0);
		if (len == 8 && memcmp(p, key, 8) == 0)
			break;
	}
	cr_assert_lt(at, cv.nkeys);
	uint32_t vlo, vhi;
	cr_assert_eq(bchunk_key_vals(&cv, at, &vlo, &vhi), 0);
	cr_assert_eq(bchunk_val(&cv, vlo, &p, &len), 0);
	off = ci.file_offset + (uint64_t)(p - cv.hv.value);
	batch_free(b);
	heap_txn_abort(e.t);
	e.t = NULL;
	cr_assert_eq(heap_close(e.h), 0);

	tl_flip(path, off + 3, 0x10);
	tl_evict(path);
	cr_assert_eq(heap_open(path, &o, &e.h), 0);
	cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(batch_load_cached(e.t, ids[i], &bs[i]), 0);
	cr_assert_eq(tcur_open_at(e.t, bs, 2, frontier_of(0), key, 8, &c),
	             AH_ECORRUPT);
	heap_prefetch_stat_get(e.h, &st);
	cr_assert_geq(st.issues, 2, "the page was read after a prefetch");
	/* the damage stays where it is: another key still answers */
	be64(key, query(1, &wk, &ws));
	cr_assert_eq(tcur_open_at(e.t, bs, 2, frontier_of(0), key, 8, &c), 0);
	cr_assert(tcur_key_valid(c));
	tcur_close(c);
	for (int i = 0; i < 2; i++)
		batch_free(bs[i]);
	at_close(&e);
}

/* Keys that interpolation places badly: the first half consecutive, the
 * second half spread over the top of the key space, so a chunk's fences
 * say little about where in it a key sits. */
static uint64_t skew(uint64_t i)
{
	return i < NA / 2 ? i : (i - NA / 2) * (i - NA / 2) * 1000003u + NA;
}

static void gen_skew(uint64_t i, at_item *it, void *arg)
{
	static uint8_t k[8], v[8];
	(void)arg;
	be64(k, skew(i));
	be64(v, i);
	*it = (at_item){ k, v, 8, sizeof v, 1, 1 };
}

Test(cold_reads, search_from_a_bad_guess_lands_exactly)
{
	at_env e;
	batch_desc d = { { 0 }, { 2 }, { 0 } };
	uint64_t id, s = 20261202u;
	uint8_t key[8];
	const void *k;
	size_t kl;

	at_open(&e);
	id = at_write(&e, gen_skew, NULL, NA, &d);
	at_commit(&e, true);
	batch *b = at_load(&e, id);
	cr_assert_geq(b->nchunks, 3);
	printf("search_from_a_bad_guess_lands_exactly: seed %llu\n",
	       (unsigned long long)s);
	for (unsigned q = 0; q < 4000; q++) {
		uint64_t i = tl_rand(&s) % NA, x = 0;
		bool absent = q % 2; /* one below key i: lands on key i */
		batch_cursor *c;

		be64(key, skew(i) - (absent && skew(i) > skew(i ? i - 1 : 0) + 1));
		cr_assert_eq(bcur_open_at(e.t, b, frontier_of(0), key, 8, &c), 0);
		cr_assert(bcur_key_valid(c));
		bcur_key(c, &k, &kl);
		for (int j = 0; j < 8; j++)
			x = x << 8 | ((const uint8_t *)k)[j];
		cr_assert_eq(x, skew(i), "seek %u (item %llu)", q,
		             (unsigned long long)i);
		bcur_close(c);
	}
	/* past the last key: no key */
	be64(key, UINT64_MAX);
	batch_cursor *c;
	cr_assert_eq(bcur_open_at(e.t, b, frontier_of(0), key, 8, &c), 0);
	cr_assert(!bcur_key_valid(c));
	bcur_close(c);
	batch_free(b);
	at_close(&e);
}
