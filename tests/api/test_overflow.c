/*
 * tests/api/test_overflow.c - diffs near int64's limits never wedge an
 * arrangement.  The rule (ARCHITECTURE.md §10): one batch's updates of one
 * (key, val, time) must sum inside int64, else the append is AH_ELIMIT
 * and changes nothing; updates of different times are always accepted,
 * and when advancing them to since makes their sum leave int64, the merge
 * keeps them apart (several updates at distinct times <= since) instead
 * of failing.  A read whose answer does not fit int64 is AH_ELIMIT for
 * that (key, val) alone.  Before, two appends of INT64_MAX at times 0 and
 * 1 and since 2 made every later append and ah_maintain fail with a bare
 * AH_ELIMIT forever, while verify said ok.
 */
#include "tl_dir.h"
#include "tl_heap.h"

static int problems(const ah_problem *p, void *user)
{
	(void)p;
	++*(int *)user;
	return 0;
}

static void verify_clean(ah_heap *h)
{
	ah_txn *t;
	int n = 0;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_verify(t, problems, &n, NULL), 0);
	ah_txn_abort(t);
	cr_assert_eq(n, 0);
}

/* The accumulation of key at as_of: 0 and *sum, or the error. */
static int acc(ah_heap *h, const char *key, uint64_t as_of, int64_t *sum)
{
	ah_txn *t;
	ah_cursor *c;
	int rc;

	*sum = 0;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	if ((rc = ah_cursor_open_at(t, "a", key, strlen(key), &c)) == 0) {
		const void *k;
		size_t kl;

		if (ah_cursor_key_valid(c) && ah_cursor_key(c, &k, &kl) == 0 &&
		    kl == strlen(key) && memcmp(k, key, kl) == 0)
			rc = ah_cursor_accumulate(c, as_of, sum);
		ah_cursor_close(c);
	}
	ah_txn_abort(t);
	return rc;
}

static void append1(ah_heap *h, uint64_t upper, const char *key, int64_t diff,
                    int want)
{
	ah_txn *t;
	ah_update u = { key, strlen(key), "v", 1, upper, diff };

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", upper, upper + 1, &u, 1), want, "%s",
	             ah_txn_errmsg(t));
	if (want == 0)
		cr_assert_eq(ah_txn_commit(t), 0);
	else
		ah_txn_abort(t);
}

static void since_and_maintain(ah_heap *h, uint64_t since)
{
	ah_txn *t;
	int idle;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_set_since(t, "a", since), 0);
	cr_assert_eq(ah_maintain(t, "a", 0, &idle), 0, "%s", ah_txn_errmsg(t));
	cr_assert_eq(idle, 1);
	cr_assert_eq(ah_txn_commit(t), 0);
}

Test(api_overflow, compaction_past_int64_keeps_updates_apart)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	ah_txn *t;
	int64_t s;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	append1(h, 0, "big", INT64_MAX, 0);
	append1(h, 1, "big", INT64_MAX, 0);
	append1(h, 2, "big", INT64_MAX, 0);
	cr_assert_eq(acc(h, "big", 0, &s), 0);
	cr_assert_eq(s, INT64_MAX);
	cr_assert_eq(acc(h, "big", 2, &s), AH_ELIMIT);
	/* since at the last: the merge of all three must succeed. */
	since_and_maintain(h, 2);
	verify_clean(h);
	cr_assert_eq(acc(h, "big", 2, &s), AH_ELIMIT, "the answer, 3 * INT64_MAX, "
	             "does not fit");
	/* The arrangement still moves: unrelated keys, more since, maintain. */
	append1(h, 3, "other", 1, 0);
	append1(h, 4, "big", -INT64_MAX, 0);
	append1(h, 5, "big", -INT64_MAX, 0);
	cr_assert_eq(acc(h, "big", 5, &s), 0);
	cr_assert_eq(s, INT64_MAX);
	cr_assert_eq(acc(h, "other", 5, &s), 0);
	cr_assert_eq(s, 1);
	since_and_maintain(h, 5);
	verify_clean(h);
	cr_assert_eq(acc(h, "big", 5, &s), 0);
	cr_assert_eq(s, INT64_MAX);
	append1(h, 6, "big", -INT64_MAX, 0);
	since_and_maintain(h, 6);
	cr_assert_eq(acc(h, "big", 6, &s), 0);
	cr_assert_eq(s, 0);
	/* Negative too. */
	append1(h, 7, "neg", INT64_MIN, 0);
	append1(h, 8, "neg", INT64_MIN, 0);
	since_and_maintain(h, 8);
	append1(h, 9, "neg", 1, 0);
	verify_clean(h);
	cr_assert_eq(acc(h, "neg", 9, &s), AH_ELIMIT);
	cr_assert_eq(acc(h, "neg", 7, &s), AH_ECOMPACTED);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(api_overflow, one_batch_overflow_is_refused_with_a_message)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	ah_txn *t;
	ah_update u[2] = { { "k", 1, "v", 1, 0, INT64_MAX },
	                   { "k", 1, "v", 1, 0, 1 } };
	ah_arrangement_info in;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", 0, 1, u, 2), AH_ELIMIT);
	cr_assert(strstr(ah_txn_errmsg(t), "arrangement 'a': the diffs of one "
	                 "(key, val, time) in this batch sum outside int64"),
	          "%s", ah_txn_errmsg(t));
	ah_txn_abort(t);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	ah_txn_abort(t);
	cr_assert_eq(in.upper, 0, "nothing appended");
	u[1].time = 0;
	u[1].diff = -1;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", 0, 1, u, 2), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
