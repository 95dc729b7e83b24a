/*
 * tests/unit/arrangement/test_batch_cols_adv.c - adversarial tests of batch
 * chunk body version 2 (arrangement/batch_int.h, ARCHITECTURE.md §2):
 *  - the writer's size accounting (shape_size, grow_bound, shape_after)
 *    under seeded streams whose columns change form anywhere in a chunk,
 *    also right at its limit: a key of another length, a key's second
 *    val, a val's second update, the 257th distinct time or diff, runs of
 *    more than RUN_PROBE pairs, empty and jumbo keys and vals; written
 *    by push, by push_run (its promise: equal to n pushes, so byte-equal
 *    chunks), suspended and resumed at a seeded cut (the same chunks as
 *    one go) and by a merge of the batch alone; no regular chunk may
 *    exceed the largest class;
 *  - the readers on resealed version-2 chunks (widths 0 and huge, a
 *    dictionary whose indexes end past `used`) and on chunks read page by
 *    page with a flipped dictionary entry or index byte (every byte handed
 *    out must be touched: a silent wrong time is the failure);
 *  - the heap format mark: a detached writer's attach, and a snapshot
 *    restore of a format-4 heap.
 * Randomized tests print their seeds (tl_seed) and name them on failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrheap.h"
#include "arrangement/cursor.h"
#include "arrangement/merge.h"
#include "heap/codec.h"
#include "tests/lib/tl_rand.h"
#include "arr_test.h"

/* --------------------------------------------------------- streams */

/* One update: key kid of klen bytes (BE64(kid) then 'k's; 0 bytes only
 * for kid 0), val vid of vlen bytes (BE32(vid) then 'v's; 0 bytes only
 * for vid 0). */
typedef struct item {
	uint64_t kid, time;
	int64_t diff;
	uint32_t klen, vid, vlen;
} item;

typedef struct stream {
	item *it;
	size_t n, cap;
	uint8_t *kb, *vb; /* generator buffers */
	size_t kmax, vmax;
} stream;

static void st_add(stream *s, const item *x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 1024;
		s->it = realloc(s->it, s->cap * sizeof *s->it);
		cr_assert_not_null(s->it);
	}
	s->it[s->n++] = *x;
	if (x->klen > s->kmax)
		s->kmax = x->klen;
	if (x->vlen > s->vmax)
		s->vmax = x->vlen;
}

static void st_ready(stream *s)
{
	s->kb = malloc(s->kmax + 8);
	s->vb = malloc(s->vmax + 8);
	cr_assert(s->kb && s->vb);
}

static void st_free(stream *s)
{
	free(s->it);
	free(s->kb);
	free(s->vb);
	memset(s, 0, sizeof *s);
}

static void fill_bytes(uint8_t *p, uint64_t id, int idw, uint32_t len, int pad)
{
	for (int b = 0; b < idw && (uint32_t)b < len; b++)
		p[b] = (uint8_t)(id >> (8 * (idw - 1 - b)));
	if (len > (uint32_t)idw)
		memset(p + idw, pad, len - idw);
}

static void st_gen(uint64_t i, at_item *it, void *arg)
{
	stream *s = arg;
	const item *x = &s->it[i];

	fill_bytes(s->kb, x->kid, 8, x->klen, 'k');
	fill_bytes(s->vb, x->vid, 4, x->vlen, 'v');
	*it = (at_item){ s->kb, s->vb, x->klen, x->vlen, x->time, x->diff };
}

/* Parameters of a seeded stream. */
typedef struct params {
	uint32_t vlen;            /* the usual val length (>= 4) */
	unsigned pk, pv, pvl, pu; /* per mille: other key length, several
	                           * vals, other val length, several updates */
	uint32_t umax;            /* updates of a val: 2 .. umax + 1 */
	uint64_t times;           /* a val's first time in [0, times) */
	uint64_t diffs;           /* diffs in +-[1, diffs] (1: all 1) */
	bool empty_key, empty_vals;
	uint64_t n;               /* about this many updates */
} params;

static bool pm(uint64_t *r, unsigned per_mille)
{
	return tl_below(r, 1000) < per_mille;
}

static void st_make(stream *s, const params *p, uint64_t seed)
{
	uint64_t r = seed;

	memset(s, 0, sizeof *s);
	for (uint64_t kid = 0; s->n < p->n; kid++) {
		uint32_t klen = kid == 0 && p->empty_key ? 0
		              : pm(&r, p->pk) ? 9 + (uint32_t)tl_below(&r, 4) : 8;
		uint32_t nv = pm(&r, p->pv) ? 2 + (uint32_t)tl_below(&r, 3) : 1;

		for (uint32_t vid = 0; vid < nv; vid++) {
			uint32_t vlen = vid == 0 && p->empty_vals ? 0
			              : pm(&r, p->pvl) ? p->vlen + 1 +
			                                 (uint32_t)tl_below(&r, 7)
			                               : p->vlen;
			uint32_t nu = pm(&r, p->pu) ? 2 + (uint32_t)tl_below(&r, p->umax)
			                            : 1;
			uint64_t t0 = tl_below(&r, p->times);

			for (uint32_t u = 0; u < nu; u++) {
				int64_t d = p->diffs == 1 ? 1
				          : 1 + (int64_t)tl_below(&r, p->diffs);
				item x = { kid, t0 + u, tl_below(&r, 2) ? d : -d, klen,
				           vid, vlen };
				st_add(s, &x);
			}
		}
	}
	st_ready(s);
}

/* ---------------------------------------------------------- writers */

static const batch_desc desc_all = { { 0 }, { 1ull << 40 }, { 0 } };

/* Items [from, to) by push. */
static void push_range(batch_writer *w, stream *s, size_t from, size_t to,
                       uint64_t seed)
{
	at_item it;

	for (size_t i = from; i < to; i++) {
		st_gen(i, &it, s);
		int rc = batch_writer_push(w, it.key, it.klen, it.val, it.vlen,
		                           it.time, it.diff);
		cr_assert_eq(rc, 0, "seed %llu: push %zu: %d",
		             (unsigned long long)seed, i, rc);
	}
}

/* The end of the (key, val) group starting at item i. */
static size_t group_end(const stream *s, size_t i)
{
	size_t j = i + 1;

	while (j < s->n && s->it[j].kid == s->it[i].kid &&
	       s->it[j].vid == s->it[i].vid)
		j++;
	return j;
}

/* Groups starting in [from, to) by push_run (to: a group start); same_key
 * told only when r says so (false is "not known"). */
static void run_range(batch_writer *w, stream *s, size_t from, size_t to,
                      uint64_t *r, uint64_t seed)
{
	time_diff *td = malloc(64 * sizeof *td);
	at_item it;

	cr_assert_not_null(td);
	for (size_t i = from; i < to;) {
		size_t j = group_end(s, i);
		bool same = i > 0 && s->it[i - 1].kid == s->it[i].kid &&
		            tl_below(r, 4) != 0;

		cr_assert_leq(j - i, 64);
		for (size_t u = i; u < j; u++)
			td[u - i] = (time_diff){ s->it[u].time, s->it[u].diff };
		st_gen(i, &it, s);
		int rc = batch_writer_push_run(w, it.key, it.klen, it.val, it.vlen,
		                               same, td, j - i);
		cr_assert_eq(rc, 0, "seed %llu: run at %zu: %d",
		             (unsigned long long)seed, i, rc);
		i = j;
	}
	free(td);
}

/* The first group start at or after item i. */
static size_t group_start(const stream *s, size_t i)
{
	while (i > 0 && i < s->n && s->it[i].kid == s->it[i - 1].kid &&
	       s->it[i].vid == s->it[i - 1].vid)
		i++;
	return i;
}

/* Writes the stream: runs (or single pushes), suspended after cut items
 * (a group start for runs; s->n: never) and resumed in the next write
 * txn. */
static uint64_t write_stream(at_env *e, stream *s, bool runs, size_t cut,
                             uint64_t seed)
{
	batch_writer *w;
	uint64_t r = seed ^ 0x5bd1e995, id, part;

	cr_assert_eq(batch_writer_new(e->t, e->p, &w), 0);
	if (runs)
		run_range(w, s, 0, cut, &r, seed);
	else
		push_range(w, s, 0, cut, seed);
	if (cut < s->n) {
		cr_assert_eq(batch_writer_suspend(w, &desc_all, &part), 0);
		at_commit(e, false);
		cr_assert_eq(batch_writer_resume(e->t, e->p, part, &w), 0,
		             "seed %llu: resume", (unsigned long long)seed);
		if (runs)
			run_range(w, s, cut, s->n, &r, seed);
		else
			push_range(w, s, cut, s->n, seed);
	}
	cr_assert_eq(batch_writer_finish(w, &desc_all, &id), 0);
	return id;
}

/* Every chunk is version 2, inside the largest class unless it holds one
 * (key, val) too big for it, and its flags say what its items are. */
static void chunks_sane(at_env *e, uint64_t id, uint64_t seed)
{
	size_t max = heap_chunk_max_body(e->h);
	batch *b = at_load(e, id);

	cr_assert(b->rec_flags & BREC_COLS);
	for (uint32_t i = 0; i < b->nchunks; i++) {
		bchunk c;
		const uint8_t *k;
		size_t kl, big = 0;

		cr_assert_eq(bchunk_get(e->t, b->chunk_ids[i], HEAP_CHUNK_WHOLE, &c), 0);
		cr_assert_eq(c.version, BCHUNK_VERSION_COLS);
		for (uint32_t j = 0; j < c.nkeys; j++) {
			cr_assert_eq(bchunk_key(&c, j, &k, &kl), 0);
			big = kl > big ? kl : big;
		}
		for (uint32_t j = 0; j < c.nvals; j++) {
			cr_assert_eq(bchunk_val(&c, j, &k, &kl), 0);
			big = kl > big ? kl : big;
		}
		cr_assert(c.used <= max || big + 200 > max,
		          "seed %llu: chunk %u of %u: %u body bytes > the largest "
		          "class's %zu", (unsigned long long)seed, i, b->nchunks,
		          c.used, max);
		cr_assert_eq(!!(c.flags & BCHUNK_KV_ONE), c.nvals == c.nkeys);
		cr_assert_eq(!!(c.flags & BCHUNK_VU_ONE), c.nupds == c.nvals);
	}
	batch_free(b);
}

/* A merge of the batch alone: the same stream through push_run. */
static uint64_t merge_alone(at_env *e, uint64_t id)
{
	batch *b = at_load(e, id);
	merger *m = NULL;
	bool done = false;
	uint64_t out = 0;

	cr_assert_eq(merger_open(e->t, e->p, &b, 1, frontier_of(0), NULL, &m), 0);
	cr_assert_eq(merger_step(m, 0, &done, NULL), 0);
	cr_assert(done);
	cr_assert_eq(merger_finish(m, &desc_all, &out), 0);
	merger_free(m);
	batch_free(b);
	return out;
}

/* Writes s four ways and a merge; all byte-equal, checked and read back. */
static void stream_all_ways(stream *s, uint64_t seed)
{
	at_env e;
	uint64_t r = seed;
	size_t cut = (size_t)tl_below(&r, s->n), gcut = group_start(s, cut);

	at_open(&e);
	uint64_t a = write_stream(&e, s, false, s->n, seed);
	chunks_sane(&e, a, seed);
	at_check_ok(&e, a);
	at_scan_equal(&e, a, st_gen, s, s->n);
	uint64_t b = write_stream(&e, s, true, s->n, seed);
	at_assert_same_chunks(&e, a, b);
	uint64_t c = write_stream(&e, s, false, cut, seed);
	at_assert_same_chunks(&e, a, c);
	uint64_t d = write_stream(&e, s, true, gcut, seed);
	at_assert_same_chunks(&e, a, d);
	uint64_t m = merge_alone(&e, a);
	at_assert_same_chunks(&e, a, m);
	at_check_ok(&e, m);
	at_close(&e);
}

/* Streams whose columns change form at seeded places, several chunks
 * each: the chunks of push, push_run, both suspended and resumed, and a
 * merge are byte-equal; none is over the largest class; batch_check
 * passes and a scan reads the stream back. */
Test(batch_cols_adv, seeded_streams_every_way_equal, .timeout = 600)
{
	static const params ps[] = {
		/* fixed 8-byte keys, 700-byte vals; a rare longer key / val,
		 * second val, second update: the flips land anywhere */
		{ 700, 3, 3, 3, 3, 3, 1000, 1, false, false, 6000 },
		/* small vals: ~40k updates a chunk; 250 times (a dictionary
		 * that reaches 256 with the updates' offsets), diffs 1 */
		{ 16, 1, 20, 1, 20, 12, 250, 1, false, false, 150000 },
		/* exactly 256 distinct first times, runs past RUN_PROBE */
		{ 12, 0, 0, 0, 300, 20, 256, 2, true, false, 120000 },
		/* 257 first times: the dictionary goes over in each chunk */
		{ 8, 0, 100, 0, 100, 9, 257, 3, false, true, 120000 },
		/* diffs from 300 values, times few */
		{ 4, 2, 2, 2, 2, 2, 3, 300, true, true, 150000 },
		/* big vals: a handful of items a chunk, every change near
		 * the limit */
		{ 90000, 200, 200, 200, 200, 8, 400, 200, false, false, 150 },
		/* every key of another length, every val several updates */
		{ 40, 500, 500, 500, 1000, 30, 100000, 100000, true, true, 80000 },
	};
	for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
		char name[64];
		stream s;

		snprintf(name, sizeof name, "batch_cols_adv::seeded_streams/%zu", k);
		uint64_t seed = tl_seed(name, 1000 + k);
		st_make(&s, &ps[k], seed);
		stream_all_ways(&s, seed);
		st_free(&s);
	}
}

/* ------------------------------------------- one change near the limit */

enum flip { KEY_LEN, SECOND_VAL, SECOND_UPD, VAL_LEN, NEW_TIME, TIME_257,
            NEW_DIFF, DIFF_257, NFLIPS };
static const char *const flip_name[NFLIPS] = {
	"a key of another length", "a key's second val", "a val's second update",
	"a val of another length", "a second distinct time", "the 257th time",
	"a second distinct diff", "the 257th diff"
};

/* m one-update keys of 8 bytes with vals of vlen bytes, times and diffs
 * constant (or 256 distinct, for the 257th cases), and at item p the
 * change f (p > 0). */
static void flip_make(stream *s, enum flip f, uint32_t vlen, size_t m,
                      size_t p)
{
	bool cyc_t = f == TIME_257, cyc_d = f == DIFF_257;

	memset(s, 0, sizeof *s);
	for (uint64_t kid = 0; s->n < m; kid++) {
		bool here = s->n == p;
		item x = { kid, cyc_t ? kid % 256 : 5,
		           cyc_d ? 1 + (int64_t)(kid % 256) : 1, 8, 1, vlen };
		if (here) {
			switch (f) {
			case KEY_LEN: x.klen = 9; break;
			case SECOND_VAL: x.kid--; x.vid = 2; break;
			case SECOND_UPD: x = s->it[s->n - 1]; x.time++; break;
			case VAL_LEN: x.vlen = vlen + 1; break;
			case NEW_TIME: x.time = 6; break;
			case TIME_257: x.time = 1000; break;
			case NEW_DIFF: x.diff = 2; break;
			case DIFF_257: x.diff = 1000; break;
			default: break;
			}
			if (f == SECOND_VAL || f == SECOND_UPD)
				kid--;
		}
		st_add(s, &x);
	}
	st_ready(s);
}

/* The updates in the first chunk of the stream without a change. */
static uint32_t first_chunk_upds(enum flip f, uint32_t vlen, size_t m)
{
	stream s;
	at_env e;

	flip_make(&s, f, vlen, m, m); /* p = m: no change */
	at_open(&e);
	uint64_t id = write_stream(&e, &s, false, s.n, 0);
	batch *b = at_load(&e, id);
	bchunk c;
	cr_assert_gt(b->nchunks, 1);
	cr_assert_eq(bchunk_get(e.t, b->chunk_ids[0], HEAP_CHUNK_WHOLE, &c), 0);
	uint32_t n = c.nupds;
	batch_free(b);
	at_close(&e);
	st_free(&s);
	return n;
}

/* Each column change placed at every item from 12 before the end of the
 * first chunk to 2 after it (every `step`th until 4 before: the long
 * streams of small vals keep CI's time), then every item: no chunk
 * exceeds the largest class (the change is sized exactly), and push,
 * push_run, suspend/resume and a merge write the same chunks. */
static void flips_near_limit(uint32_t vlen, size_t m, size_t step)
{
	for (int f = 0; f < NFLIPS; f++) {
		uint32_t n0 = first_chunk_upds((enum flip)f, vlen, m);

		for (size_t p = n0 - 12; p <= n0 + 2;
		     p += p + 4 < n0 ? step : 1) {
			stream s;

			cr_log_info("%s at item %zu (first chunk %u, vals %u bytes)",
			            flip_name[f], p, n0, vlen);
			flip_make(&s, (enum flip)f, vlen, m, p);
			stream_all_ways(&s, p);
			st_free(&s);
		}
	}
}

Test(batch_cols_adv, column_changes_at_the_chunk_limit_big_vals,
     .timeout = 600)
{
	flips_near_limit(700, 2000, 1);
}

Test(batch_cols_adv, column_changes_at_the_chunk_limit_small_vals,
     .timeout = 600)
{
	flips_near_limit(4, 100000, 4);
}

/* ------------------------------------------------- empty and jumbo */

/* An empty key with an empty val, keys whose only val is empty (fixed
 * width 0), a key of 1.5 MiB and a val of 2.5 MiB (jumbo chunks) among
 * small items: every way equal, checked, read back, and seeks land. */
Test(batch_cols_adv, empty_and_jumbo_keys_and_vals, .timeout = 300)
{
	stream s;
	item x;

	memset(&s, 0, sizeof s);
	x = (item){ 0, 1, 1, 0, 0, 0 };       /* "" -> "" */
	st_add(&s, &x);
	x.time = 2;
	st_add(&s, &x);
	x = (item){ 0, 1, 2, 0, 1, 4 };       /* "" -> second val */
	st_add(&s, &x);
	for (uint64_t k = 1; k < 300; k++) {  /* vals of width 0 */
		x = (item){ k, 3, 1, 8, 0, 0 };
		st_add(&s, &x);
	}
	x = (item){ 300, 4, 1, 3u << 19, 0, 0 }; /* a 1.5 MiB key */
	st_add(&s, &x);
	x = (item){ 300, 4, -1, 3u << 19, 1, 5u << 19 }; /* 2.5 MiB val */
	st_add(&s, &x);
	x.time = 5;
	st_add(&s, &x);
	x = (item){ 300, 4, 2, 3u << 19, 2, 4 };
	st_add(&s, &x);
	for (uint64_t k = 301; k < 2000; k++) {
		x = (item){ k, k % 7, 1, 8, 1, 600 };
		st_add(&s, &x);
	}
	st_ready(&s);
	stream_all_ways(&s, 0);

	at_env e;
	at_open(&e);
	uint64_t id = write_stream(&e, &s, false, s.n, 0);
	batch *b = at_load(&e, id);
	bchunk c;
	cr_assert_eq(bchunk_get(e.t, b->chunk_ids[0], HEAP_CHUNK_WHOLE, &c), 0);
	cr_assert(c.flags & BCHUNK_KEY_FIXED || c.kw == 0);
	for (size_t i = 0; i < s.n; i += 97) {
		at_item it;
		batch_cursor *bc;
		const void *k;
		size_t kl;
		uint64_t t;
		int64_t d;

		st_gen(i, &it, &s);
		if (i > 0 && s.it[i - 1].kid == s.it[i].kid)
			continue;
		cr_assert_eq(bcur_open_at(e.t, b, frontier_of(0), it.key, it.klen,
		                          &bc), 0, "item %zu", i);
		bcur_key(bc, &k, &kl);
		cr_assert(kl == it.klen && (kl == 0 || !memcmp(k, it.key, kl)));
		cr_assert_eq(bcur_time_next(bc, &t, &d), 1);
		cr_assert_eq(t, it.time);
		cr_assert_eq(d, it.diff);
		bcur_close(bc);
	}
	batch_free(b);
	at_close(&e);
	st_free(&s);
}

/* --------------------------------------------- page by page, flipped */

/* 8-byte keys, 8-byte vals, one update each, times from 200 values,
 * diffs from 3: one chunk whose dictionaries and index columns span
 * pages of their own.  Writes it, flips (not resealed: only the page's
 * sum sees it) one byte at body offset `at`, and returns the batch. */
static uint64_t write_dict_chunk(at_env *e, stream *s, int what,
                                 uint64_t *upd)
{
	const void *bp;
	size_t used;

	memset(s, 0, sizeof *s);
	for (uint64_t k = 0; k < 30000; k++) {
		item x = { k, (k * 7) % 200, 1 + (int64_t)(k % 3), 8, 0, 8 };
		st_add(s, &x);
	}
	st_ready(s);
	uint64_t id = write_stream(e, s, false, s->n, 0);
	batch *b = at_load(e, id);
	cr_assert_eq(b->nchunks, 1);
	cr_assert_eq(heap_chunk_get(e->t, b->chunk_ids[0], &bp, &used), 0);
	uint8_t *body = (uint8_t *)bp; /* test-only write through the map */
	uint32_t ot = get_u32(body + 48), od = get_u32(body + 52);
	cr_assert_eq(get_u16(body + 64), 200);
	cr_assert_eq(get_u16(body + 66), 3);
	/* update u = 20000: its time index at ot + 1600 + u, its time entry
	 * (u * 7) % 200 = 0 at ot (another page than the index: 4 pages
	 * apart); its diff entry 20000 % 3 = 2 at od + 16 */
	*upd = 20000;
	uint8_t *p = what == 0 ? body + ot + 8 * 0 + 1
	           : what == 1 ? body + ot + 8 * 200 + *upd
	           : what == 2 ? body + od + 8 * 2 + 1
	                       : body + od + 24 + *upd;
	cr_assert_neq((p - body) / 4096, (ot + 1600 + *upd) / 4096 * (what != 1));
	*p ^= what == 1 || what == 3 ? 0x01 : 0x10;
	batch_free(b);
	return id;
}

/* A seek opens the chunk page by page: the flipped dictionary entry or
 * index byte of the update it reads is AH_ECORRUPT through the time walk,
 * bcur_times (the scratch decode) and the trace cursor's sum, never the
 * flipped value. */
Test(batch_cols_adv, page_by_page_flipped_dictionary_is_corrupt, .timeout = 120)
{
	static const char *what[4] = { "time entry", "time index",
	                               "diff entry", "diff index" };
	for (int w = 0; w < 4; w++) {
		for (int how = 0; how < 3; how++) {
			at_env e;
			stream s;
			uint64_t u, t;
			int64_t d;
			at_item it;
			batch_cursor *bc;

			at_open(&e);
			uint64_t id = write_dict_chunk(&e, &s, w, &u);
			at_commit(&e, true);
			batch *b = at_load(&e, id);
			st_gen(u, &it, &s);
			cr_assert_eq(bcur_open_at(e.t, b, frontier_of(0), it.key,
			                          it.klen, &bc), 0);
			cr_assert_eq(bc->cv.hv.all, false, "a seek reads pages");
			int rc;
			if (how == 0) {
				rc = bcur_time_next(bc, &t, &d);
			} else if (how == 1) {
				const atime *ts;
				const int64_t *ds;
				uint32_t n;
				rc = bcur_times(bc, &ts, &ds, &n);
			} else {
				diff_sum sum = 0;
				rc = bcur_accumulate(bc, UINT64_MAX - 1, &sum);
			}
			cr_assert_eq(rc, AH_ECORRUPT, "%s, read %d: %d", what[w], how, rc);
			bcur_close(bc);
			batch_free(b);
			at_close(&e);
			st_free(&s);
		}
	}
}

/* ------------------------------------------------------ format mark */

static uint32_t format_of(at_env *e)
{
	ah_heap_stat st;

	cr_assert_eq(heap_stat(e->h, &st), 0);
	return st.format_version;
}

/* A detached writer (the background merge's) writes images under a read
 * txn: the heap stays format 2 until attach installs them in a write txn
 * that commits; with no image before attach, the finish's flush marks.
 * The mark is format 7: every batch record written now lists its chunks'
 * XXH3 (BREC_SUMS; version-2 chunk bodies alone would need 4, 1 KiB
 * blocks 5, a filter of hash 3 6). */
Test(batch_cols_adv, detached_writer_marks_its_format_at_attach)
{
	for (int images = 0; images < 2; images++) {
		at_env e;
		stream s;
		batch_writer *w;
		uint64_t id;

		flip_make(&s, KEY_LEN, 700, images ? 3000 : 10, 1u << 30);
		at_open(&e);
		at_commit(&e, true);
		cr_assert_eq(format_of(&e), 2);
		cr_assert_eq(batch_writer_new_detached(e.t, e.p, 0, &w), 0);
		push_range(w, &s, 0, s.n, 0);
		cr_assert_eq(batch_writer_image_bytes(w) > 0, images == 1);
		at_commit(&e, false);
		cr_assert_eq(batch_writer_attach(w, e.t), 0);
		cr_assert_eq(batch_writer_finish(w, &desc_all, &id), 0);
		cr_assert_eq(format_of(&e), 2, "not before the commit");
		at_commit(&e, true);
		batch *b = at_load(&e, id);
		cr_assert(b->chunk_sums != NULL);
		cr_assert_eq(b->filter_chunk != 0, images == 1);
		batch_free(b);
		cr_assert_eq(format_of(&e), HEAP_FORMAT_CHUNK_SUMS, "images %d", images);
		at_check_ok(&e, id);
		at_scan_equal(&e, id, st_gen, &s, s.n);
		at_close(&e);
		st_free(&s);
	}
}

/* A snapshot of a heap of format 7 (written by this library: version-2
 * chunks with 1 KiB blocks, records with chunk sums; format 5 before
 * format 7, whence the name) restores as 7: a restored heap of an older
 * format would open in binaries that cannot read its chunks and records
 * (heap/heap.h: formats 4, 5 and 7). */
Test(batch_cols_adv, snapshot_restore_keeps_format_5)
{
	tl_dir d = tl_tmpdir("colsnap");
	char hp[256], snaps[256], rp[256];
	ah_open_opts o = { sizeof o, AH_OPEN_CREATE | AH_OPEN_NOSYNC, 0, 0, 0 };
	ah_update u = { "k", 1, "v", 1, 0, 1 };
	ah_snapshot_info si;
	ah_heap_stat st;
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(tl_dir_file(&d, "h", hp, sizeof hp), &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_append(t, "a", 0, 1, &u, 1), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 7);
	cr_assert_eq(ah_snapshot_push(h, tl_dir_file(&d, "s", snaps, sizeof snaps),
	                              &si), 0, "%s", si.message);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(ah_snapshot_restore(snaps, NULL, tl_dir_file(&d, "r", rp,
	                                 sizeof rp), 0, &si), 0, "%s", si.message);
	o.flags = AH_OPEN_RDONLY;
	cr_assert_eq(ah_open(rp, &o, &h), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 7, "restored as format %u",
	             st.format_version);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ------------------------------------------------ resealed widths */


/* Walks everything through a trace cursor with sums; the first error. */
static int walk_all(at_env *e, uint64_t id)
{
	batch *b = at_load(e, id);
	trace_cursor *c = NULL;
	diff_sum s = 0;
	uint64_t t;
	int64_t d;
	int rc = tcur_open(e->t, &b, 1, frontier_of(0), &c);
	bool opened = rc == 0;

	while (rc == 0 && tcur_key_valid(c)) {
		while (rc == 0 && tcur_val_valid(c)) {
			if ((rc = tcur_accumulate(c, 1, &s)) == 0)
				while ((rc = tcur_time_next(c, &t, &d)) == 1)
					;
			if (rc == 0)
				rc = tcur_step_val(c);
		}
		if (rc == 0)
			rc = tcur_step_key(c);
	}
	if (opened)
		tcur_close(c);
	batch_free(b);
	return rc;
}

/* Widths whose product with the count wraps in 32 bits, width 0 for ten
 * distinct keys, a time dictionary whose indexes would end past `used`:
 * batch_check says AH_ECORRUPT; walks, seeks (page by page) and
 * batch_check never read out of bounds (ASan). */
Test(batch_cols_adv, resealed_widths_and_dictionary_room)
{
	enum { KW_ZERO, KW_HUGE, VW_WRAPS, KW_WRAPS, TIDX_PAST_USED,
	       DIDX_PAST_USED, NCASES };
	static const char *name[NCASES] = {
		"key width 0 (ten equal keys)", "key width 2^32-1",
		"val width * 30 wraps to 20", "key width * 10 wraps to 6",
		"time indexes past the column", "diff indexes past used"
	};
	for (int k = 0; k < NCASES; k++) {
		at_chunk ck;
		char msg[200];
		at_open_dict_chunk(&ck);
		cr_assert_eq(ck.body[6], BCHUNK_KEY_FIXED | BCHUNK_VAL_FIXED |
		                      BCHUNK_VU_ONE);
		uint32_t ot = get_u32(ck.body + 48), od = get_u32(ck.body + 52);
		switch (k) {
		case KW_ZERO: put_u32(ck.body + 56, 0); break;
		case KW_HUGE: put_u32(ck.body + 56, UINT32_MAX); break;
		case VW_WRAPS: put_u32(ck.body + 60, 0x1999999Au); break; /* *30 */
		case KW_WRAPS: put_u32(ck.body + 56, 0x1999999Au); break; /* *10 */
		case TIDX_PAST_USED: put_u16(ck.body + 64, (uint16_t)((od - ot) / 8)); break;
		case DIDX_PAST_USED:
			put_u16(ck.body + 66, (uint16_t)((ck.used - od) / 8));
			break;
		}
		at_reseal(&ck.e, ck.id, ck.cid, ck.body, ck.used);
		at_commit(&ck.e, true);
		batch *b = at_load(&ck.e, ck.id);
		int rc = batch_check(ck.e.t, b, true, msg, sizeof msg);
		cr_assert_eq(rc, AH_ECORRUPT, "%s: %d", name[k], rc);
		rc = walk_all(&ck.e, ck.id);
		cr_assert(k == KW_ZERO ? rc == 0 : rc == AH_ECORRUPT, "%s: walk %d",
		          name[k], rc);
		batch_cursor *bc = NULL;
		rc = bcur_open_at(ck.e.t, b, frontier_of(0), "e", 1, &bc);
		cr_assert(k == KW_ZERO ? rc == 0 : rc == AH_ECORRUPT, "%s: seek %d",
		          name[k], rc);
		if (bc)
			bcur_close(bc);
		batch_free(b);
		at_close(&ck.e);
	}
}
