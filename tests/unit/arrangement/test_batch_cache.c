/*
 * tests/unit/arrangement/test_batch_cache.c - the per-heap cache of decoded
 * batch records (batch_cache.c) and the key filter (filter.c): a cached
 * record is never served for another record stored under its id (an id
 * handed out again after an abort, a rewritten Description, a reader of an
 * older snapshot), a shared batch outlives the cache's reference, a
 * flipped byte in a filter chunk is AH_ECORRUPT (never a hidden key), so
 * is another filter's bytes in its place (hash 3 probes read no header),
 * a stale remembered place is looked up again, and batch_check finds a
 * filter that does not cover every key (B6).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "arrangement/cursor.h"
#include "arrangement/filter.h"
#include "arr_test.h"
#include "tl_file.h"

/* Keys "<p>NNNNNN" for i * stride, val "v", time 0, diff 1. */
typedef struct keys {
	char prefix;
	uint64_t stride;
	char kb[16];
} keys;

static void gen_keys(uint64_t i, at_item *it, void *arg)
{
	keys *k = arg;

	snprintf(k->kb, sizeof k->kb, "%c%06llu", k->prefix,
	         (unsigned long long)(i * k->stride));
	*it = (at_item){ k->kb, "v", 7, 1, 0, 1 };
}

static uint64_t write_keys(at_env *e, char prefix, uint64_t stride, uint64_t n)
{
	static const batch_desc d = { { 0 }, { 2 }, { 0 } };
	keys k = { prefix, stride, { 0 } };

	return at_write(e, gen_keys, &k, n, &d);
}

/* 1 when key lies in the (cached) batch id of e's read txn. */
static int holds(at_env *e, uint64_t id, const char *key)
{
	batch *b;
	trace_cursor *c;
	const void *k;
	size_t kl;

	cr_assert_eq(batch_load_cached(e->t, id, &b), 0);
	cr_assert_eq(tcur_open_at(e->t, &b, 1, frontier_of(0), key, strlen(key), &c), 0);
	tcur_key(c, &k, &kl);
	int r = tcur_key_valid(c) && kl == strlen(key) && !memcmp(k, key, kl);
	tcur_close(c);
	batch_free(b);
	return r;
}

Test(batch_cache, filter_excludes_absent_keys_only)
{
	at_env e;
	char kb[16];
	at_open(&e);
	uint64_t id = write_keys(&e, 'k', 2, 3000); /* a filter chunk */
	at_commit(&e, true);
	batch *b;
	cr_assert_eq(batch_load_cached(e.t, id, &b), 0);
	cr_assert_null(b->filter, "a filter in a chunk is not loaded whole");
	cr_assert_neq(b->filter_chunk, 0);
	cr_assert_eq(b->filter_keys, 3000);
	cr_assert_eq(b->filter_blocks, filter_blocks_checked(3000));
	cr_assert_eq(b->filter_hash, BFILT_HASH_SUMS);
	unsigned maybe = 0;
	for (unsigned i = 0; i < 6000; i++) {
		snprintf(kb, sizeof kb, "k%06u", i);
		bool may = false;
		cr_assert_eq(batch_probe(e.t, b, filter_hash(kb, 7), &may), 0);
		if (i % 2 == 0)
			cr_assert(may, "present key %s excluded", kb);
		else
			maybe += may;
	}
	/* 10 bits per key: about 1% false positives (seedless: exact) */
	cr_assert_lt(maybe, 3000 / 25, "%u false positives of 3000", maybe);
	batch_free(b);
	at_close(&e);
}

Test(batch_cache, record_under_a_reissued_id_is_decoded_afresh)
{
	at_env e;
	at_open(&e);
	uint64_t a = write_keys(&e, 'a', 1, 100);
	at_commit(&e, true);
	cr_assert(holds(&e, a, "a000050"));
	at_commit(&e, false);
	/* A txn writes batch a+1 and aborts: the next txn is given a+1 again
	 * for another batch. */
	uint64_t x = write_keys(&e, 'x', 1, 50);
	heap_txn_abort(e.t);
	cr_assert_eq(heap_txn_begin(e.h, false, &e.t), 0);
	uint64_t y = write_keys(&e, 'y', 1, 70);
	cr_assert_eq(x, y);
	at_commit(&e, true);
	cr_assert(holds(&e, y, "y000060"));
	cr_assert(!holds(&e, y, "x000010"));
	/* Now store batch y's record under a's id (what another writer, a
	 * restore or damage repaired by hand could leave): a's cached entry
	 * must not be served. */
	at_commit(&e, false);
	batch *yb;
	cr_assert_eq(batch_load(e.t, y, &yb), 0);
	yb->id = a;
	cr_assert_eq(batch_record_put(e.t, yb), 0);
	batch_free(yb);
	cr_assert_eq(heap_del(e.t, HEAP_T_BATCH, &y, sizeof y), 0);
	at_commit(&e, true);
	batch *b;
	cr_assert_eq(batch_load_cached(e.t, a, &b), 0);
	cr_assert_eq(b->keys, 70);
	cr_assert_eq(b->filter_keys, 70);
	batch_free(b);
	cr_assert(holds(&e, a, "y000060"));
	cr_assert(!holds(&e, a, "a000050"));
	at_close(&e);
}

Test(batch_cache, rewritten_description_and_older_snapshot)
{
	at_env e;
	heap_txn *old;
	batch *b;
	at_open(&e);
	uint64_t a = write_keys(&e, 'a', 1, 100);
	at_commit(&e, true);
	cr_assert_eq(batch_load_cached(e.t, a, &b), 0);
	cr_assert_eq(frontier_time(b->desc.upper), 2);
	batch_free(b);
	/* a reader of the snapshot before the rewrite stays open */
	old = e.t;
	cr_assert_eq(heap_txn_begin(e.h, false, &e.t), 0);
	batch_desc d = { { 0 }, { 5 }, { 1 } };
	cr_assert_eq(batch_set_desc(e.t, a, &d), 0);
	at_commit(&e, true);
	for (int round = 0; round < 3; round++) {
		cr_assert_eq(batch_load_cached(e.t, a, &b), 0);
		cr_assert_eq(frontier_time(b->desc.upper), 5);
		cr_assert_eq(frontier_time(b->desc.since), 1);
		cr_assert_not_null(b->filter, "the filter survives set_desc");
		batch_free(b);
		cr_assert_eq(batch_load_cached(old, a, &b), 0);
		cr_assert_eq(frontier_time(b->desc.upper), 2);
		cr_assert_eq(frontier_time(b->desc.since), 0);
		batch_free(b);
	}
	heap_txn_abort(old);
	at_close(&e);
}

Test(batch_cache, shared_batch_outlives_the_handle_s_reference)
{
	at_env e;
	batch *b1, *b2;
	at_open(&e);
	uint64_t a = write_keys(&e, 'a', 1, 10);
	at_commit(&e, true);
	cr_assert_eq(batch_load_cached(e.t, a, &b1), 0);
	cr_assert_eq(batch_load_cached(e.t, a, &b2), 0);
	cr_assert_eq(b1, b2, "one decoded record, shared");
	cr_assert_eq(b1->refs, 3);
	batch_free(b1);
	cr_assert_eq(b2->keys, 10);
	batch_free(b2);
	/* a write txn bypasses the cache: its own copy */
	at_commit(&e, false);
	cr_assert_eq(batch_load_cached(e.t, a, &b1), 0);
	cr_assert_eq(b1->refs, 0);
	cr_assert_null(b1->filter);
	batch_free(b1);
	at_close(&e); /* heap_close frees the cache (ASan: no leak) */
}

Test(batch_cache, flipped_filter_chunk_byte_is_corrupt)
{
	at_env e;
	heap_chunk_info hi;
	heap_chunk_view v;
	char path[4200], msg[300];
	batch *b;
	at_open(&e);
	uint64_t a = write_keys(&e, 'k', 1, 5000);
	at_commit(&e, true);
	cr_assert_eq(batch_load(e.t, a, &b), 0);
	uint64_t fc = b->filter_chunk;
	batch_free(b);
	cr_assert_neq(fc, 0);
	cr_assert_eq(heap_chunk_next(e.t, fc - 1, false, &hi), 0);
	cr_assert_eq(hi.id, fc);
	cr_assert_eq(heap_chunk_open(e.t, fc, HEAP_CHUNK_WHOLE, &v), 0);
	uint64_t off = hi.file_offset + (uint64_t)(v.body - (const uint8_t *)v.value) +
	               BFILT_CHUNK_HDR + 777;
	heap_txn_abort(e.t);
	e.t = NULL;
	cr_assert_eq(heap_close(e.h), 0);
	snprintf(path, sizeof path, "%s", e.dir.path);
	tl_flip(path, off, 0x10);
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_NOSYNC };
	cr_assert_eq(heap_open(e.dir.path, &o, &e.h), 0);
	cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
	/* The record is intact and loads; a probe reads one filter block in
	 * place, checked alone: exactly the probes of the flipped block
	 * (byte 777: block 12) are AH_ECORRUPT, none hides a present key. */
	cr_assert_eq(batch_load_cached(e.t, a, &b), 0);
	unsigned corrupt = 0, in12 = 0;
	for (unsigned i = 0; i < 5000; i++) {
		char kb[16];
		bool may = false;
		snprintf(kb, sizeof kb, "k%06u", i);
		uint64_t h = filter_hash(kb, 7);
		int rc = batch_probe(e.t, b, h, &may);
		bool hit = filter_block_of(b->filter_blocks, h) == 777 / 64;
		cr_assert(hit ? rc == AH_ECORRUPT : rc == 0 && may, "%s: %d", kb, rc);
		corrupt += rc == AH_ECORRUPT;
		in12 += hit;
	}
	cr_assert_gt(corrupt, 0, "no probe read the flipped block");
	cr_assert_eq(corrupt, in12);
	batch_free(b);
	cr_assert_eq(batch_load(e.t, a, &b), 0, "the record itself is intact");
	cr_assert_eq(batch_check(e.t, b, true, msg, sizeof msg), AH_ECORRUPT);
	cr_assert(strstr(msg, "(B6)"), "%s", msg);
	batch_free(b);
	/* With AH_OPEN_VERIFY_READS the self-checked open checks the chunk
	 * whole: a probe of any block (k000000's is not block 12) fails. */
	heap_txn_abort(e.t);
	e.t = NULL;
	cr_assert_eq(heap_close(e.h), 0);
	o.flags |= AH_OPEN_VERIFY_READS;
	cr_assert_eq(heap_open(e.dir.path, &o, &e.h), 0);
	cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
	cr_assert_eq(batch_load_cached(e.t, a, &b), 0);
	bool may = false;
	uint64_t h0 = filter_hash("k000000", 7);
	cr_assert_neq(filter_block_of(b->filter_blocks, h0), 777 / 64);
	cr_assert_eq(batch_probe(e.t, b, h0, &may), AH_ECORRUPT);
	batch_free(b);
	at_close(&e);
}

Test(batch_cache, filter_missing_a_key_fails_b6)
{
	at_env e;
	char msg[300];
	batch *b;
	at_open(&e);
	uint64_t a = write_keys(&e, 'k', 1, 100); /* inline filter */
	at_commit(&e, false);
	cr_assert_eq(batch_load(e.t, a, &b), 0);
	cr_assert_eq(b->filter_chunk, 0);
	cr_assert_eq(b->filter_blocks, 3, "ceil(100 * 10 / 480)");
	/* what a writer that forgot keys would store: an empty filter with
	 * right block checks and a right checksum */
	static uint64_t zero[3 * FILTER_WORDS];
	for (uint64_t i = 0; i < 3; i++)
		filter_block_seal(zero + FILTER_WORDS * i, i, 0);
	b->filter = zero;
	b->filter_sum = filter_sum(zero, 3);
	cr_assert_eq(batch_record_put(e.t, b), 0);
	b->filter = NULL;
	batch_free(b);
	at_commit(&e, true);
	cr_assert_eq(batch_load(e.t, a, &b), 0);
	cr_assert_eq(batch_check(e.t, b, true, msg, sizeof msg), AH_ECORRUPT);
	cr_assert(strstr(msg, "(B6)") && strstr(msg, "chunk"), "%s", msg);
	batch_free(b);
	at_close(&e);
}

/* Pushes gen_keys' items [from, to) to w. */
static void push_keys(batch_writer *w, keys *k, uint64_t from, uint64_t to)
{
	at_item it;

	for (uint64_t i = from; i < to; i++) {
		gen_keys(i, &it, k);
		cr_assert_eq(batch_writer_push(w, it.key, it.klen, it.val, it.vlen,
		                               it.time, it.diff), 0);
	}
}

Test(batch_cache, resumed_writer_builds_the_whole_filter)
{
	at_env e;
	keys k = { 'r', 1, { 0 } };
	batch_writer *w;
	uint64_t pid, id;
	const batch_desc d = { { 0 }, { 2 }, { 0 } };
	char kb[16];
	at_open(&e);
	/* 400000 keys before the suspension (several chunks: all but the
	 * last are adopted as they are, the last is restaged), 120000 after */
	cr_assert_eq(batch_writer_new(e.t, e.p, &w), 0);
	push_keys(w, &k, 0, 400000);
	cr_assert_eq(batch_writer_suspend(w, &d, &pid), 0);
	at_commit(&e, false);
	cr_assert_eq(batch_writer_resume(e.t, e.p, pid, &w), 0);
	push_keys(w, &k, 400000, 520000);
	cr_assert_eq(batch_writer_finish(w, &d, &id), 0);
	at_commit(&e, true);
	at_check_ok(&e, id); /* B6: every key passes */
	batch *b;
	cr_assert_eq(batch_load_cached(e.t, id, &b), 0);
	cr_assert_gt(b->nchunks, 2);
	cr_assert_eq(b->filter_keys, 520000);
	cr_assert_neq(b->filter_chunk, 0);
	for (unsigned i = 0; i < 520000; i += 7) {
		bool may = false;
		snprintf(kb, sizeof kb, "r%06u", i);
		cr_assert_eq(batch_probe(e.t, b, filter_hash(kb, 7), &may), 0);
		cr_assert(may, "%s", kb);
	}
	batch_free(b);
	at_close(&e);
}

/* The filter of a batch of 800,000 keys (16,667 checked blocks, 1.07 MB)
 * is a jumbo chunk, checked only whole; its blocks carry their own checks,
 * so it is probed in place like a small one: every present key may be
 * there, most absent ones cannot, and a flipped byte fails exactly the
 * probes of its block. */
Test(batch_cache, jumbo_filter_is_probed_block_by_block, .timeout = 120)
{
	at_env e;
	heap_chunk_info hi;
	heap_chunk_view v;
	batch *b;
	char kb[16];
	const unsigned n = 800000, blk = 5000;
	at_open(&e);
	uint64_t a = write_keys(&e, 'k', 1, n);
	at_commit(&e, true);
	cr_assert_eq(batch_load_cached(e.t, a, &b), 0);
	uint64_t fc = b->filter_chunk;
	cr_assert_eq(b->filter_blocks, filter_blocks_checked(n));
	cr_assert_null(b->filter);
	cr_assert_eq(heap_chunk_next(e.t, fc - 1, false, &hi), 0);
	cr_assert_gt(hi.class_pages, 256, "a jumbo chunk");
	cr_assert_eq(hi.block_bytes, 0, "checked only whole");
	unsigned fp = 0;
	for (unsigned i = 0; i < 20000; i++) {
		bool may = false;
		snprintf(kb, sizeof kb, "k%06u", i * 37 % n);
		cr_assert_eq(batch_probe(e.t, b, filter_hash(kb, 7), &may), 0);
		cr_assert(may, "%s is in the batch", kb);
		snprintf(kb, sizeof kb, "j%06u", i);
		cr_assert_eq(batch_probe(e.t, b, filter_hash(kb, 7), &may), 0);
		fp += may;
	}
	printf("jumbo filter: %u of 20000 absent keys may be there\n", fp);
	cr_assert_lt(fp, 400, "about 1%% false positives, not %u", fp);
	batch_free(b);
	cr_assert_eq(heap_chunk_open(e.t, fc, HEAP_CHUNK_WHOLE, &v), 0);
	uint64_t off = hi.file_offset + (uint64_t)(v.body - (const uint8_t *)v.value) +
	               BFILT_CHUNK_HDR + 64 * blk + 9;
	heap_txn_abort(e.t);
	e.t = NULL;
	cr_assert_eq(heap_close(e.h), 0);
	tl_flip(e.dir.path, off, 0x04);
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_NOSYNC };
	cr_assert_eq(heap_open(e.dir.path, &o, &e.h), 0);
	cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
	cr_assert_eq(batch_load_cached(e.t, a, &b), 0);
	unsigned corrupt = 0, hits = 0;
	for (unsigned i = 0; i < n; i += 7) {
		bool may = false;
		snprintf(kb, sizeof kb, "k%06u", i);
		uint64_t h = filter_hash(kb, 7);
		bool hit = filter_block_of(b->filter_blocks, h) == blk;
		int rc = batch_probe(e.t, b, h, &may);
		cr_assert(hit ? rc == AH_ECORRUPT : rc == 0 && may, "%s: %d", kb, rc);
		corrupt += rc == AH_ECORRUPT;
		hits += hit;
	}
	cr_assert_gt(hits, 0, "some probe reads block %u", blk);
	cr_assert_eq(corrupt, hits);
	batch_free(b);
	at_close(&e);
}

/* ------------------------------------------ filters bound to their chunk */

/* The bytes of chunk `from`'s value written over chunk `to`'s (same size),
 * in the closed heap file at path. */
static void copy_chunk_over(at_env *e, uint64_t from, uint64_t to)
{
	heap_chunk_info f, t;

	cr_assert_eq(heap_chunk_next(e->t, from - 1, false, &f), 0);
	cr_assert_eq(heap_chunk_next(e->t, to - 1, false, &t), 0);
	cr_assert_eq(f.id, from);
	cr_assert_eq(t.id, to);
	cr_assert_eq(f.class_pages, t.class_pages, "same size");
	size_t n = (size_t)f.class_pages * heap_page_size(e->h) - 16;
	heap_txn_abort(e->t);
	e->t = NULL;
	cr_assert_eq(heap_close(e->h), 0);
	char *buf = malloc(n);
	int fd = open(e->dir.path, O_RDWR);
	cr_assert(buf && fd >= 0);
	cr_assert_eq(pread(fd, buf, n, (off_t)f.file_offset), (ssize_t)n);
	cr_assert_eq(pwrite(fd, buf, n, (off_t)t.file_offset), (ssize_t)n);
	close(fd);
	free(buf);
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_NOSYNC };
	cr_assert_eq(heap_open(e->dir.path, &o, &e->h), 0);
	cr_assert_eq(heap_txn_begin(e->h, true, &e->t), 0);
}

static uint32_t format_now(at_env *e)
{
	ah_heap_stat st;

	cr_assert_eq(heap_stat(e->h, &st), 0);
	return st.format_version;
}

/* A filter chunk whose place holds another filter's bytes (a damaged
 * chunks tree pointing at the wrong value, or a value overwritten): a
 * probe that reads no header (hash 3 and 4) still knows the blocks are
 * not its own, since their checks are bound to the other chunk's id; with
 * hash 2 the header's id says so.  The loop ends at hash 4, the
 * writer's default.  Every probe of the batch's keys is
 * AH_ECORRUPT, none says "cannot hold"; the other batch probes as before. */
Test(batch_cache, another_filters_bytes_in_its_place_are_corrupt)
{
	for (int hash = BFILT_HASH_CHECKED; hash <= BFILT_HASH_SUMS; hash++) {
		at_env e;
		batch *a, *b;
		char kb[16];
		batch_filter_write_hash((uint8_t)hash);
		at_open(&e);
		uint64_t ia = write_keys(&e, 'k', 1, 3000);
		uint64_t ib = write_keys(&e, 'm', 1, 3000);
		at_commit(&e, true);
		cr_assert_eq(format_now(&e), hash == BFILT_HASH_SUMS ? 7
		                             : hash == BFILT_HASH_BOUND ? 6 : 5);
		a = at_load(&e, ia);
		b = at_load(&e, ib);
		cr_assert_eq(a->filter_hash, hash);
		uint64_t fa = a->filter_chunk, fb = b->filter_chunk;
		batch_free(a);
		batch_free(b);
		copy_chunk_over(&e, fb, fa);
		cr_assert_eq(batch_load_cached(e.t, ia, &a), 0);
		cr_assert_eq(batch_load_cached(e.t, ib, &b), 0);
		for (unsigned i = 0; i < 3000; i++) {
			bool may = false;
			snprintf(kb, sizeof kb, "k%06u", i);
			cr_assert_eq(batch_probe(e.t, a, filter_hash(kb, 7), &may),
			             AH_ECORRUPT, "hash %d: %s", hash, kb);
			snprintf(kb, sizeof kb, "m%06u", i);
			cr_assert_eq(batch_probe(e.t, b, filter_hash(kb, 7), &may), 0);
			cr_assert(may, "hash %d: %s", hash, kb);
		}
		batch_free(a);
		batch_free(b);
		at_close(&e);
	}
}

/* A remembered place is a hint: one that now names another filter's
 * value (here set so by hand) fails the block's bound check, and the
 * probe looks the chunk up in LMDB again, answers right, and remembers
 * the right place. */
Test(batch_cache, a_stale_remembered_filter_place_is_looked_up_again)
{
	at_env e;
	batch *a, *b;
	char kb[16];
	bool may = false;
	at_open(&e);
	uint64_t ia = write_keys(&e, 'k', 1, 3000);
	uint64_t ib = write_keys(&e, 'm', 1, 3000);
	at_commit(&e, true);
	cr_assert_eq(holds(&e, ib, "m000001"), 1); /* learns the map's base */
	cr_assert_eq(batch_load_cached(e.t, ia, &a), 0);
	cr_assert_eq(batch_load_cached(e.t, ib, &b), 0);
	cr_assert_eq(b->filter_hash, BFILT_HASH_SUMS);
	cr_assert_eq(batch_probe(e.t, b, filter_hash("m000001", 7), &may), 0);
	cr_assert(may);
	uint64_t lb = b->chunk_loc[b->nchunks];
	cr_assert_neq(lb, 0, "the probe remembered LMDB's place");
	a->chunk_loc[a->nchunks] = lb;
	for (unsigned i = 0; i < 3000; i++) {
		snprintf(kb, sizeof kb, "k%06u", i);
		may = false;
		cr_assert_eq(batch_probe(e.t, a, filter_hash(kb, 7), &may), 0, "%s", kb);
		cr_assert(may, "%s", kb);
	}
	cr_assert_neq(a->chunk_loc[a->nchunks], lb);
	cr_assert_neq(a->chunk_loc[a->nchunks], 0);
	batch_free(a);
	batch_free(b);
	at_close(&e);
}
