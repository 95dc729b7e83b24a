/*
 * tests/api/test_errors.c - every frontier and misuse error of the public
 * API, each followed by a check that the heap is exactly unchanged.
 */
#include "tl_dir.h"
#include "tl_heap.h"

static tl_dir dir;
static ah_heap *h;
static char *before;

#define U(k, v, t, d) { k, sizeof(k) - 1, v, sizeof(v) - 1, t, d }

/* A heap with arrangement "a": upper 10, since 2, some data; source "s". */
static void setup(void)
{
	dir = tl_tmpdir("api");
	h = tl_open_path(dir.path, 0, 0);
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	ah_update ups[] = { U("k1", "v1", 0, 1), U("k2", "v2", 3, 2), U("k1", "v1", 5, -1) };
	cr_assert_eq(ah_append(t, "a", 0, 10, ups, 3), 0, "%s", ah_txn_errmsg(t));
	cr_assert_eq(ah_set_since(t, "a", 2), 0);
	cr_assert_eq(ah_source_put(t, "s", "42", 2), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	before = tl_state_text(h);
}

static void teardown(void)
{
	char *after = tl_state_text(h);
	cr_expect_str_eq(after, before, "heap changed by a failed operation");
	free(after);
	free(before);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&dir);
}

TestSuite(api_errors, .init = setup, .fini = teardown);

/* Runs op in a fresh write txn, expects err, checks the txn is poisoned
 * (further calls AH_EBADTXN, commit AH_EBADTXN), and the message has frag. */
#define EXPECT_POISON(op, err, frag)                                               \
	do {                                                                       \
		ah_txn *t_;                                                        \
		cr_assert_eq(ah_txn_begin(h, 0, &t_), 0);                          \
		ah_txn *t = t_;                                                    \
		int rc_ = (op);                                                    \
		cr_assert_eq(rc_, err, "got %s (%s)", ah_err_name(rc_), ah_txn_errmsg(t)); \
		cr_assert(strstr(ah_txn_errmsg(t), frag), "message '%s' lacks '%s'", \
		          ah_txn_errmsg(t), frag);                                 \
		cr_assert_eq(ah_advance(t, "a", 10, 11), AH_EBADTXN);              \
		cr_assert_eq(ah_source_put(t, "s", "x", 1), AH_EBADTXN);           \
		cr_assert_eq(ah_txn_commit(t), AH_EBADTXN);                        \
	} while (0)

Test(api_errors, append_wrong_expected_upper)
{
	ah_update u[] = { U("k", "v", 12, 1) };
	EXPECT_POISON(ah_append(t, "a", 11, 13, u, 1), AH_EUPPER, "expected upper 11 but its upper is 10");
}

Test(api_errors, append_time_before_upper)
{
	ah_update u[] = { U("k", "v", 12, 1), U("k", "v", 9, 1) };
	EXPECT_POISON(ah_append(t, "a", 10, 13, u, 2), AH_EFRONTIER, "update time 9 outside [upper 10, new upper 13)");
}

Test(api_errors, append_time_at_new_upper)
{
	ah_update u[] = { U("k", "v", 13, 1) };
	EXPECT_POISON(ah_append(t, "a", 10, 13, u, 1), AH_EFRONTIER, "update time 13 outside");
}

Test(api_errors, append_new_upper_backwards)
{
	EXPECT_POISON(ah_append(t, "a", 10, 9, NULL, 0), AH_EFRONTIER, "new upper 9 is before the upper 10");
}

Test(api_errors, advance_wrong_expected)
{
	EXPECT_POISON(ah_advance(t, "a", 9, 20), AH_EUPPER, "expected upper 9 but its upper is 10");
}

Test(api_errors, advance_backwards)
{
	EXPECT_POISON(ah_advance(t, "a", 10, 5), AH_EFRONTIER, "new upper 5");
}

Test(api_errors, since_backwards)
{
	EXPECT_POISON(ah_set_since(t, "a", 1), AH_EFRONTIER, "since 1 is before the since 2");
}

Test(api_errors, since_beyond_upper)
{
	EXPECT_POISON(ah_set_since(t, "a", 11), AH_EFRONTIER, "since 11 beyond the upper 10");
}

Test(api_errors, unknown_arrangement)
{
	EXPECT_POISON(ah_advance(t, "nope", 0, 1), AH_ENOTFOUND, "no arrangement named 'nope'");
}

Test(api_errors, create_existing)
{
	EXPECT_POISON(ah_arrangement_create(t, "a"), AH_EEXIST, "exists");
}

Test(api_errors, bad_names)
{
	EXPECT_POISON(ah_arrangement_create(t, "has space"), AH_EINVAL, "invalid");
	EXPECT_POISON(ah_arrangement_create(t, ""), AH_EINVAL, "invalid");
	char longname[66];
	memset(longname, 'x', 65);
	longname[65] = 0;
	EXPECT_POISON(ah_arrangement_create(t, longname), AH_EINVAL, "invalid");
	EXPECT_POISON(ah_source_put(t, "bad\tname", "1", 1), AH_EINVAL, "invalid source");
}

Test(api_errors, read_only_txn_refuses_writes)
{
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_advance(t, "a", 10, 11), AH_EREADONLY);
	cr_assert_eq(ah_advance(t, "a", 10, 11), AH_EBADTXN);
	ah_txn_abort(t);
}

Test(api_errors, reads_outside_since_upper)
{
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_check_as_of(t, "a", 1), AH_ECOMPACTED);
	cr_assert(strstr(ah_txn_errmsg(t), "before since 2"), "%s", ah_txn_errmsg(t));
	cr_assert_eq(ah_check_as_of(t, "a", 10), AH_ENOTREADY);
	cr_assert(strstr(ah_txn_errmsg(t), "not before upper 10"), "%s", ah_txn_errmsg(t));
	cr_assert_eq(ah_check_as_of(t, "a", 2), 0);
	cr_assert_eq(ah_check_as_of(t, "a", 9), 0);
	ah_cursor *c;
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	int64_t s = 99;
	cr_assert_eq(ah_cursor_accumulate(c, 1, &s), AH_ECOMPACTED);
	cr_assert_eq(ah_cursor_accumulate(c, 10, &s), AH_ENOTREADY);
	cr_assert_eq(s, 99);
	/* k1/v1: +1 at 0, -1 at 5 */
	cr_assert_eq(ah_cursor_accumulate(c, 4, &s), 0);
	cr_assert_eq(s, 1);
	cr_assert_eq(ah_cursor_accumulate(c, 5, &s), 0);
	cr_assert_eq(s, 0);
	ah_cursor_close(c);
	ah_txn_abort(t);
}

Test(api_errors, fresh_arrangement_reads_not_ready)
{
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "b"), 0);
	cr_assert_eq(ah_check_as_of(t, "b", 0), AH_ENOTREADY);
	ah_txn_abort(t);
}

Test(api_errors, cursor_after_txn_end)
{
	ah_txn *t;
	ah_cursor *c;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_cursor_step_key(c), AH_ESTATE);
	cr_assert_eq(ah_cursor_key_valid(c), 0);
	ah_cursor_close(c);
}

Test(api_errors, cursor_detached_by_mutation)
{
	ah_txn *t;
	ah_cursor *c;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	cr_assert_eq(ah_cursor_key_valid(c), 1);
	cr_assert_eq(ah_advance(t, "a", 10, 11), 0);
	cr_assert_eq(ah_cursor_step_key(c), AH_ESTATE);
	ah_cursor_close(c);
	ah_txn_abort(t);
}

Test(api_errors, second_write_txn_same_thread)
{
	ah_txn *t, *t2;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t2), AH_ESTATE);
	cr_assert_eq(ah_close(h), AH_ESTATE);
	ah_txn_abort(t);
}

Test(api_errors, diff_overflow)
{
	ah_update u[] = { U("k", "v", 10, INT64_MAX), U("k", "v", 10, 1) };
	EXPECT_POISON(ah_append(t, "a", 10, 11, u, 2), AH_ELIMIT, "");
}

Test(api_errors, strerror_and_names)
{
	cr_assert_str_eq(ah_err_name(AH_EFULL), "AH_EFULL");
	cr_assert_str_eq(ah_err_name(0), "AH_OK");
	cr_assert_null(ah_err_name(-5));
	cr_assert_str_eq(ah_strerror(12345), "unknown error");
	cr_assert(AH_EINVAL < -30999 || AH_EINVAL > -30780);
}

Test(api_errors, builder_detached_when_txn_ends)
{
	ah_txn *t;
	ah_builder *b;
	ah_update u[] = { U("k", "v", 11, 1) };
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_builder_begin(t, "a", 10, 12, &b), 0);
	cr_assert_eq(ah_builder_push(b, u, 1), 0);
	cr_assert_eq(ah_advance(t, "a", 10, 11), AH_ESTATE, "other mutations wait for the builder");
	cr_assert_eq(ah_txn_commit(t), AH_ESTATE);
	cr_assert_eq(ah_builder_push(b, u, 1), AH_ESTATE);
	ah_builder_abandon(b); /* frees the detached handle only */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_builder_begin(t, "a", 10, 12, &b), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_builder_finish(b), AH_ESTATE);
}

Test(api_errors, create_in_missing_directory)
{
	char path[600];
	snprintf(path, sizeof path, "%s/no/such/dir/heap", dir.dir);
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE };
	ah_heap *h2 = NULL;
	cr_assert_eq(ah_open(path, &o, &h2), AH_ENOTFOUND);
	cr_assert_null(h2);
}

Test(api_errors, source_put_null_position)
{
	EXPECT_POISON(ah_source_put(t, "s", NULL, 1), AH_EINVAL, "source position is NULL");
}

/* ah_set_max_bytes below the pages in use is AH_EINVAL and changes nothing
 * (before: 4096 on a heap of 11 pages returned 0 and set a 1 MiB map,
 * the map's minimum, because only the rounded-up map was compared). */
Test(api_errors, set_max_bytes_below_data)
{
	ah_heap_stat st, now;
	ah_txn *t;

	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	uint64_t held = st.pages_used * st.page_size;
	cr_assert_gt(st.pages_used, 2);
	cr_assert_lt(held, (uint64_t)1 << 20, "the data fits the minimum map");
	uint64_t below[] = { 1, 4096, held - st.page_size, held - 1 };
	for (size_t i = 0; i < sizeof below / sizeof below[0]; i++) {
		cr_assert_eq(ah_set_max_bytes(h, below[i]), AH_EINVAL, "%" PRIu64,
		             below[i]);
		cr_assert_eq(ah_heap_stat_get(h, &now), 0);
		cr_assert_eq(now.map_bytes, st.map_bytes, "nothing changes");
	}
	/* At the data held it is accepted, as the minimum map of 1 MiB. */
	cr_assert_eq(ah_set_max_bytes(h, held), 0);
	cr_assert_eq(ah_heap_stat_get(h, &now), 0);
	cr_assert_eq(now.map_bytes, (uint64_t)1 << 20);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_set_max_bytes(h, 0), 0); /* back to the disk's size */
	cr_assert_eq(ah_heap_stat_get(h, &now), 0);
	cr_assert_eq(now.map_bytes, st.map_bytes);
}
