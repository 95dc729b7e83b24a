/*
 * tests/api/test_ops.c - the operators' API, from outside (arrheap.h
 * only): ah_arrangement_drop (space comes back, verify clean, the name can
 * be created again, an older snapshot still reads the dropped data, every
 * error), ah_cursor_open_batch (one batch's stored times, not advanced;
 * every error) and ah_backup_v2 (a copy with its own UUID, or the same).
 * Self-contained: its helpers are below, not shared.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrheap.h"

static char dir[] = "/tmp/ah-ops-XXXXXX";

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		cr_log_warn("could not remove %s", dir);
}

#define OK(expr)                                                               \
	do {                                                                   \
		int ok_rc_ = (expr);                                           \
		cr_assert_eq(ok_rc_, 0, "%s: %s", #expr, ah_err_name(ok_rc_)); \
	} while (0)

static ah_heap *open_heap(const char *file, uint64_t quantum)
{
	char path[256];
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE,
	                   .merge_quantum = quantum };
	ah_heap *h = NULL;

	snprintf(path, sizeof path, "%s/%s", dir, file);
	OK(ah_open(path, &o, &h));
	return h;
}

/* Appends n updates (key "kNNNN" % keys, val "v", time lower, diff 1) as
 * the batch [lower, lower + 1). */
static void append_n(ah_txn *t, const char *name, uint64_t lower, int n,
                     int keys)
{
	ah_update *u = calloc((size_t)n, sizeof *u);
	char (*k)[16] = calloc((size_t)n, 16);

	for (int i = 0; i < n; i++) {
		snprintf(k[i], 16, "k%05d", (i * 7919) % keys);
		u[i] = (ah_update){ k[i], strlen(k[i]), "v", 1, lower, 1 };
	}
	OK(ah_append(t, name, lower, lower + 1, u, (size_t)n));
	free(u);
	free(k);
}

/* NAME as of as_of: "key val diff" lines (caller frees). */
static char *contents(ah_txn *t, const char *name, uint64_t as_of)
{
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	ah_cursor *c;
	int rc;

	out[0] = 0;
	OK(ah_cursor_open(t, name, &c));
	for (rc = ah_cursor_key_valid(c); rc == 1; rc = ah_cursor_step_key(c))
		for (rc = ah_cursor_val_valid(c); rc == 1; rc = ah_cursor_step_val(c)) {
			const void *k, *v;
			size_t kl, vl;
			int64_t sum;

			OK(ah_cursor_key(c, &k, &kl));
			OK(ah_cursor_val(c, &v, &vl));
			OK(ah_cursor_accumulate(c, as_of, &sum));
			if (len + kl + vl + 32 > cap)
				out = realloc(out, cap *= 2);
			len += (size_t)sprintf(out + len, "%.*s %.*s %" PRId64 "\n",
			                       (int)kl, (const char *)k, (int)vl,
			                       (const char *)v, sum);
		}
	cr_assert_eq(rc, 0);
	OK(ah_cursor_close(c));
	return out;
}

static uint64_t problems(ah_heap *h)
{
	ah_verify_stats st;
	ah_txn *t;

	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_verify(t, NULL, NULL, &st));
	ah_txn_abort(t);
	return st.problems;
}

static ah_space_info space(ah_heap *h)
{
	ah_space_info si;
	ah_txn *t;

	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_space_get(t, &si));
	ah_txn_abort(t);
	return si;
}

static void empty_commit(ah_heap *h)
{
	ah_txn *t;

	OK(ah_txn_begin(h, 0, &t));
	OK(ah_source_put(t, "tick", "x", 1));
	OK(ah_txn_commit(t));
}

/* Arrangement "a" with batches of 4000, 1000, 250 and 60 updates (no
 * merge: each newer batch is under half the older) and "b" alongside. */
static void fill(ah_heap *h)
{
	const int sizes[] = { 16000, 4000, 1000, 240 }; /* chunks of 64, 16, 4, 1 pages */
	ah_txn *t;

	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_create(t, "a"));
	OK(ah_arrangement_create(t, "b"));
	for (int i = 0; i < 4; i++)
		append_n(t, "a", (uint64_t)i, sizes[i], 100000);
	append_n(t, "b", 0, 10, 10);
	OK(ah_txn_commit(t));
}

Test(api_ops, drop_gives_space_back_and_name_again, .init = setup,
     .fini = teardown)
{
	ah_heap *h = open_heap("h", 0);
	ah_space_info before, after, again;
	ah_arrangement_info in;
	ah_txn *t, *old;
	char *b_before, *a_old, *a_new;

	fill(h);
	before = space(h);
	cr_assert_gt(before.chunks, 1);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &old));
	a_old = contents(old, "a", 3);
	b_before = contents(old, "b", 0);
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_drop(t, "a"));
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), AH_ENOTFOUND);
	OK(ah_txn_commit(t));

	/* The snapshot from before the drop still reads all of a. */
	{
		char *again_old = contents(old, "a", 3);

		cr_assert_str_eq(again_old, a_old);
		free(again_old);
	}
	ah_txn_abort(old);
	cr_assert_eq(problems(h), 0);
	after = space(h);
	cr_assert_eq(after.chunks, 1, "only b's chunk is left");
	cr_assert_eq(after.chunk_pages, 1);
	cr_assert_geq(after.pages_free, before.chunk_pages - 1);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	{
		char name[AH_NAME_MAX + 1], *b_after = contents(t, "b", 0);

		OK(ah_arrangement_next(t, NULL, name));
		cr_assert_str_eq(name, "b");
		cr_assert_eq(ah_arrangement_next(t, name, name), AH_ENOTFOUND);
		cr_assert_str_eq(b_after, b_before);
		free(b_after);
	}
	ah_txn_abort(t);

	/* The name again: a new, empty arrangement; the same data fits in
	 * the pages given back (no reader holds them after one more commit). */
	empty_commit(h);
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_create(t, "a"));
	OK(ah_arrangement_info_get(t, "a", &in));
	cr_assert_eq(in.upper, 0);
	cr_assert_eq(in.since, 0);
	cr_assert_eq(in.batches, 0);
	cr_assert_eq(in.updates, 0);
	{
		const int sizes[] = { 16000, 4000, 1000, 240 }; /* chunks of 64, 16, 4, 1 pages */

		for (int i = 0; i < 4; i++)
			append_n(t, "a", (uint64_t)i, sizes[i], 100000);
	}
	OK(ah_txn_commit(t));
	again = space(h);
	/* Most of it in pages given back (LMDB's free list keeps some runs
	 * too short for a 64-page chunk: the file may grow a little). */
	cr_assert_eq(again.chunk_pages, before.chunk_pages);
	cr_assert_lt(again.pages_used - before.pages_used, again.chunk_pages / 8,
	             "%" PRIu64 " pages after, %" PRIu64 " before, free %" PRIu64
	             " -> %" PRIu64, again.pages_used, before.pages_used,
	             after.pages_free, again.pages_free);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	a_new = contents(t, "a", 3);
	cr_assert_str_eq(a_new, a_old);
	ah_txn_abort(t);
	cr_assert_eq(problems(h), 0);
	free(a_old);
	free(a_new);
	free(b_before);
	OK(ah_close(h));
}

/* A drop while merges are in progress frees their outputs too. */
Test(api_ops, drop_with_merges_in_progress, .init = setup, .fini = teardown)
{
	ah_heap *h = open_heap("h", 64);
	ah_arrangement_info in;
	ah_txn *t;

	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_create(t, "a"));
	append_n(t, "a", 0, 3000, 3000);
	append_n(t, "a", 1, 3000, 3000);
	append_n(t, "a", 2, 3000, 3000); /* SPINE_FANIN: a merge of three */
	append_n(t, "a", 3, 100, 100); /* fuel: the merge writes a partial */
	OK(ah_arrangement_info_get(t, "a", &in));
	cr_assert_eq(in.merging, 1, "a merge is suspended");
	cr_assert_eq(in.batches, 4);
	cr_assert_gt(in.chunks, 3, "its output so far has chunks");
	OK(ah_txn_commit(t));
	cr_assert_eq(problems(h), 0);
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_drop(t, "a"));
	OK(ah_txn_commit(t));
	cr_assert_eq(problems(h), 0);
	cr_assert_eq(space(h).chunks, 0);
	OK(ah_close(h));
}

/* ah_space_get needs a read txn: in a write txn it refuses with AH_EINVAL
 * and a message, and the txn stays usable (its write commits). */
Test(api_ops, space_in_a_write_txn_is_refused, .init = setup,
     .fini = teardown)
{
	ah_heap *h = open_heap("h", 64);
	ah_space_info si;
	ah_txn *t;

	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_create(t, "a"));
	cr_assert_eq(ah_space_get(t, &si), AH_EINVAL);
	cr_assert_str_eq(ah_txn_errmsg(t), "space: needs a read transaction");
	append_n(t, "a", 0, 100, 100);
	OK(ah_txn_commit(t));
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_space_get(t, &si));
	cr_assert_gt(si.chunks, 0);
	ah_txn_abort(t);
	OK(ah_close(h));
}

Test(api_ops, drop_errors_poison, .init = setup, .fini = teardown)
{
	ah_heap *h = open_heap("h", 0);
	ah_arrangement_info in;
	ah_builder *b;
	ah_txn *t;

	fill(h);
	cr_assert_eq(ah_arrangement_drop(NULL, "a"), AH_EINVAL);

	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	cr_assert_eq(ah_arrangement_drop(t, "a"), AH_EREADONLY);
	ah_txn_abort(t);

	const char *bad[] = { "", "a b", NULL };
	for (int i = 0; i < 3; i++) {
		OK(ah_txn_begin(h, 0, &t));
		cr_assert_eq(ah_arrangement_drop(t, bad[i]), AH_EINVAL, "%d", i);
		cr_assert_eq(ah_arrangement_info_get(t, "a", &in), AH_EBADTXN);
		cr_assert_eq(ah_txn_commit(t), AH_EBADTXN);
	}

	OK(ah_txn_begin(h, 0, &t));
	cr_assert_eq(ah_arrangement_drop(t, "nope"), AH_ENOTFOUND);
	cr_assert_str_eq(ah_txn_errmsg(t), "no arrangement named 'nope'");
	cr_assert_eq(ah_txn_commit(t), AH_EBADTXN);

	OK(ah_txn_begin(h, 0, &t));
	OK(ah_builder_begin(t, "b", 1, 2, &b));
	cr_assert_eq(ah_arrangement_drop(t, "a"), AH_ESTATE);
	ah_builder_abandon(b);
	ah_txn_abort(t);

	/* Dropped twice in one txn: the second finds nothing. */
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_drop(t, "a"));
	cr_assert_eq(ah_arrangement_drop(t, "a"), AH_ENOTFOUND);
	ah_txn_abort(t);

	/* An aborted drop changed nothing. */
	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_drop(t, "a"));
	ah_txn_abort(t);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_arrangement_info_get(t, "a", &in));
	cr_assert_eq(in.batches, 4);
	cr_assert_eq(in.updates, 16000 + 4000 + 1000 + 240);
	ah_txn_abort(t);
	cr_assert_eq(problems(h), 0);
	OK(ah_close(h));
}

/* ------------------------------------------------- one batch's cursor */

/* Every (key, val, time, diff) of c, one "key val time diff" line each. */
static char *raw(ah_cursor *c)
{
	size_t cap = 4096, len = 0;
	char *out = malloc(cap);
	int rc;

	out[0] = 0;
	for (rc = ah_cursor_key_valid(c); rc == 1; rc = ah_cursor_step_key(c))
		for (rc = ah_cursor_val_valid(c); rc == 1; rc = ah_cursor_step_val(c)) {
			const void *k, *v;
			size_t kl, vl;
			uint64_t tm;
			int64_t d;

			OK(ah_cursor_key(c, &k, &kl));
			OK(ah_cursor_val(c, &v, &vl));
			while ((rc = ah_cursor_time_next(c, &tm, &d)) == 1) {
				if (len + kl + vl + 64 > cap)
					out = realloc(out, cap *= 2);
				len += (size_t)sprintf(out + len, "%.*s %.*s %" PRIu64
				                       " %" PRId64 "\n", (int)kl,
				                       (const char *)k, (int)vl,
				                       (const char *)v, tm, d);
			}
			cr_assert_eq(rc, 0);
		}
	cr_assert_eq(rc, 0);
	return out;
}

static int collect_ids(const ah_batch_info *b, void *user)
{
	uint64_t *ids = user;

	ids[++ids[0]] = b->id;
	return 0;
}

Test(api_ops, batch_cursor_reports_stored_times, .init = setup,
     .fini = teardown)
{
	ah_heap *h = open_heap("h", 0);
	ah_update one[] = {
		{ "k1", 2, "x", 1, 0, 3 }, { "k1", 2, "x", 1, 1, -1 },
		{ "k1", 2, "y", 1, 1, 2 }, { "k2", 2, "x", 1, 0, 1 },
		{ "k3", 2, "z", 1, 1, 1 },
	};
	ah_update two = { "k1", 2, "x", 1, 2, 5 };
	uint64_t ids[8] = { 0 };
	ah_cursor *c;
	ah_txn *t;
	int64_t sum;
	char *got;

	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_create(t, "a"));
	OK(ah_append(t, "a", 0, 2, one, 5));
	OK(ah_append(t, "a", 2, 4, &two, 1));
	OK(ah_set_since(t, "a", 3));
	OK(ah_txn_commit(t));

	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_batch_foreach(t, "a", collect_ids, ids));
	cr_assert_eq(ids[0], 2, "two batches, not merged");
	OK(ah_cursor_open_batch(t, "a", ids[1], &c));
	got = raw(c);
	cr_assert_str_eq(got, "k1 x 0 3\nk1 x 1 -1\nk1 y 1 2\nk2 x 0 1\n"
	                 "k3 z 1 1\n");
	free(got);
	/* Its share of the answer at as_of 3, and the frontier rule. */
	cr_assert_eq(ah_cursor_rewind_keys(c), 1);
	OK(ah_cursor_accumulate(c, 3, &sum));
	cr_assert_eq(sum, 2);
	cr_assert_eq(ah_cursor_accumulate(c, 2, &sum), AH_ECOMPACTED);
	cr_assert_eq(ah_cursor_accumulate(c, 4, &sum), AH_ENOTREADY);
	cr_assert_eq(ah_cursor_seek_key(c, "k3", 2), 1);
	OK(ah_cursor_close(c));
	OK(ah_cursor_open_batch(t, "a", ids[2], &c));
	got = raw(c);
	cr_assert_str_eq(got, "k1 x 2 5\n");
	free(got);
	OK(ah_cursor_close(c));
	/* The trace cursor advances the same times to since 3. */
	OK(ah_cursor_open(t, "a", &c));
	got = raw(c);
	cr_assert_str_eq(got, "k1 x 3 3\nk1 x 3 -1\nk1 x 3 5\nk1 y 3 2\n"
	                 "k2 x 3 1\nk3 z 3 1\n");
	free(got);
	OK(ah_cursor_close(c));

	/* Errors. */
	c = (ah_cursor *)1;
	cr_assert_eq(ah_cursor_open_batch(t, "a", 99, &c), AH_ENOTFOUND);
	cr_assert_null(c);
	cr_assert_str_eq(ah_txn_errmsg(t), "arrangement 'a' has no batch 99");
	cr_assert_eq(ah_cursor_open_batch(t, "a", 0, &c), AH_ENOTFOUND);
	cr_assert_eq(ah_cursor_open_batch(t, "nope", ids[1], &c), AH_ENOTFOUND);
	cr_assert_str_eq(ah_txn_errmsg(t), "no arrangement named 'nope'");
	cr_assert_eq(ah_cursor_open_batch(t, "a b", ids[1], &c), AH_EINVAL);
	cr_assert_eq(ah_cursor_open_batch(t, "a", ids[1], NULL), AH_EINVAL);
	cr_assert_eq(ah_cursor_open_batch(NULL, "a", ids[1], &c), AH_EINVAL);
	/* Detached when its txn ends. */
	OK(ah_cursor_open_batch(t, "a", ids[1], &c));
	ah_txn_abort(t);
	cr_assert_eq(ah_cursor_step_key(c), AH_ESTATE);
	cr_assert_eq(ah_cursor_close(c), AH_ESTATE);
	OK(ah_close(h));
}

/* Another arrangement's batch is not this one's; a merge's partial
 * output is. */
Test(api_ops, batch_cursor_other_and_partial, .init = setup, .fini = teardown)
{
	ah_heap *h = open_heap("h", 64);
	uint64_t ids[8] = { 0 }, bids[8] = { 0 };
	ah_cursor *c;
	ah_txn *t;
	int n = 0;

	OK(ah_txn_begin(h, 0, &t));
	OK(ah_arrangement_create(t, "a"));
	OK(ah_arrangement_create(t, "b"));
	append_n(t, "a", 0, 3000, 3000);
	append_n(t, "a", 1, 3000, 3000);
	append_n(t, "a", 2, 3000, 3000); /* SPINE_FANIN: a merge of three */
	append_n(t, "a", 3, 100, 100);
	append_n(t, "b", 0, 5, 5);
	OK(ah_txn_commit(t));
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	OK(ah_batch_foreach(t, "b", collect_ids, bids));
	cr_assert_eq(ah_cursor_open_batch(t, "a", bids[1], &c), AH_ENOTFOUND);
	OK(ah_batch_foreach(t, "a", collect_ids, ids));
	cr_assert_eq(ids[0], 5, "four batches and the partial output");
	OK(ah_cursor_open_batch(t, "a", ids[5], &c));
	for (int rc = ah_cursor_key_valid(c); rc == 1; rc = ah_cursor_step_key(c))
		n++;
	cr_assert_gt(n, 0);
	cr_assert_lt(n, 3000);
	OK(ah_cursor_close(c));
	ah_txn_abort(t);
	OK(ah_close(h));
}

/* ------------------------------------------------------------- backup */

static void uuid_of(const char *file, uint8_t out[16])
{
	ah_heap *h = open_heap(file, 0);
	ah_heap_stat st;

	OK(ah_heap_stat_get(h, &st));
	memcpy(out, st.uuid, 16);
	OK(ah_close(h));
}

Test(api_ops, backup_new_uuid, .init = setup, .fini = teardown)
{
	ah_backup_opts fresh = { .size = sizeof fresh, .flags = AH_BACKUP_NEW_UUID };
	ah_backup_opts same = { .size = sizeof same };
	ah_backup_opts bad = { .size = sizeof bad, .flags = 2 };
	ah_backup_opts small = { .size = 1, .flags = AH_BACKUP_NEW_UUID };
	uint8_t u0[16], u1[16], u2[16], u3[16];
	char p1[256], p2[256], p3[256], cmd[512], *a, *b;
	ah_heap *h = open_heap("h", 0);
	ah_heap_stat st;
	ah_txn *t;

	fill(h);
	OK(ah_heap_stat_get(h, &st));
	memcpy(u0, st.uuid, 16);
	snprintf(p1, sizeof p1, "%s/fresh", dir);
	snprintf(p2, sizeof p2, "%s/same", dir);
	snprintf(p3, sizeof p3, "%s/null", dir);
	OK(ah_backup_v2(h, p1, &fresh));
	OK(ah_backup_v2(h, p2, &same));
	OK(ah_backup_v2(h, p3, NULL));
	cr_assert_eq(ah_backup_v2(h, p1, &fresh), AH_EEXIST);
	cr_assert_eq(ah_backup_v2(h, p1, &bad), AH_EINVAL);
	cr_assert_eq(ah_backup_v2(h, p1, &small), AH_EINVAL);
	cr_assert_eq(ah_backup_v2(NULL, p1, &fresh), AH_EINVAL);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	a = contents(t, "a", 3);
	ah_txn_abort(t);
	OK(ah_close(h));

	uuid_of("fresh", u1);
	uuid_of("same", u2);
	uuid_of("null", u3);
	cr_assert_neq(memcmp(u0, u1, 16), 0, "a new UUID");
	cr_assert_eq(u1[6] >> 4, 4, "version 4");
	cr_assert_eq(u1[8] >> 6, 2, "RFC 4122 variant");
	cr_assert_eq(memcmp(u0, u2, 16), 0, "the same UUID");
	cr_assert_eq(memcmp(u0, u3, 16), 0, "NULL opts: the same UUID");
	h = open_heap("fresh", 0);
	cr_assert_eq(problems(h), 0);
	OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	b = contents(t, "a", 3);
	cr_assert_str_eq(a, b);
	ah_txn_abort(t);
	OK(ah_close(h));
	free(a);
	free(b);
	/* Nothing but the heaps and their lock files is left. */
	snprintf(cmd, sizeof cmd, "cd '%s' && ls | tr '\\n' ' '", dir);
	{
		FILE *p = popen(cmd, "r");
		char out[512] = "";

		cr_assert_not_null(p);
		cr_assert_not_null(fgets(out, sizeof out, p));
		pclose(p);
		cr_assert_str_eq(out, "fresh fresh-lock h h-lock null null-lock "
		                 "same same-lock ");
	}
}
