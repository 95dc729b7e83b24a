/*
 * tests/api/test_seek.c - a cursor opened at a key (ah_cursor_open_at: one
 * chunk per batch) lands exactly where a cursor that was positioned at the
 * first key and then seeks lands, for present, absent, first,
 * before-first and after-last keys, across several multi-chunk batches.
 */
#include "tl_dir.h"
#include "tl_heap.h"

static void key_of(uint32_t i, char out[12])
{
	snprintf(out, 12, "k%09u", i);
}

/* Where a cursor lands: "key|val|sum" or "end". */
static void landing(ah_txn *t, const char *key, size_t len, bool seek_first, tl_buf *b)
{
	ah_cursor *c;
	int rc;

	if (seek_first) {
		cr_assert_eq(ah_cursor_open_at(t, "a", key, len, &c), 0);
		rc = ah_cursor_key_valid(c);
	} else {
		cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
		cr_assert_eq(ah_cursor_key_valid(c), 1); /* positions at the first key */
		rc = ah_cursor_seek_key(c, key, len);
		cr_assert_eq(rc, ah_cursor_key_valid(c), "seek returns 1 on a key, 0 at the end");
	}
	if (rc == 0) {
		tl_put(b, "end\n");
	} else {
		const void *k, *v;
		size_t kl, vl;
		int64_t s;
		cr_assert_eq(ah_cursor_key(c, &k, &kl), 0);
		cr_assert_eq(ah_cursor_val(c, &v, &vl), 0);
		cr_assert_eq(ah_cursor_accumulate(c, 3, &s), 0);
		tl_put_bytes(b, k, kl);
		tl_put(b, "|");
		tl_put_bytes(b, v, vl);
		tl_put(b, "|%" PRId64 "\n", s);
	}
	cr_assert_eq(ah_cursor_close(c), 0);
}

Test(api_seek, first_call_seek_equals_positioned_seek, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	/* four batches of falling size (no merges), keys spread so each batch
	 * spans several chunks and their key sets interleave */
	static const uint32_t n[4] = { 200000, 60000, 20000, 5000 };
	for (uint64_t bi = 0; bi < 4; bi++) {
		ah_update *u = calloc(n[bi], sizeof *u);
		char (*kb)[12] = calloc(n[bi], 12);
		for (uint32_t i = 0; i < n[bi]; i++) {
			key_of(i * (uint32_t)(bi + 2) * 2, kb[i]); /* even keys only */
			/* vals of 3 to 5 bytes: a val offset column */
			u[i] = (ah_update){ kb[i], 10, "value", 3 + i % 3, bi,
			                    (int64_t)bi + 1 };
		}
		cr_assert_eq(ah_append(t, "a", bi, bi + 1, u, n[bi]), 0, "%s", ah_txn_errmsg(t));
		free(u);
		free(kb);
	}
	ah_arrangement_info in;
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	cr_assert_eq(in.batches, 4);
	cr_assert_gt(in.chunks, 5); /* the first two batches span several */
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	tl_buf lazy = { 0 }, eager = { 0 };
	char kb[12];
	uint32_t probes[] = { 0, 1, 2, 3, 4, 6, 999, 1000, 12345, 40000, 40001, 399998, 399999,
	                      799998, 800000, 999999999 };
	for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
		key_of(probes[i], kb);
		landing(t, kb, 10, true, &lazy);
		landing(t, kb, 10, false, &eager);
	}
	landing(t, "", 0, true, &lazy); /* before the first key */
	landing(t, "", 0, false, &eager);
	landing(t, "z", 1, true, &lazy); /* after the last key */
	landing(t, "z", 1, false, &eager);
	cr_assert_str_eq(lazy.p, eager.p);
	/* exact landing: k000000000 is in all four batches, diffs 1+2+3+4 */
	cr_assert(strstr(lazy.p, "6b303030303030303030|76616c|10\n") == lazy.p,
	          "first landing: %.60s", lazy.p);
	cr_assert(strstr(lazy.p, "end\n"), "after-last lands at the end");
	free(lazy.p);
	free(eager.p);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
