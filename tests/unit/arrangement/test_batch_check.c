/*
 * tests/unit/arrangement/test_batch_check.c - the batch_check suite:
 * batch_check and the readers catch damaged chunks.  Damage is done through
 * the map pointer of a freshly written chunk inside its write txn: either
 * resealed (a wrong but checksummed chunk, as a buggy writer would leave) or
 * not (a flipped byte only the checksum sees).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "arrangement/cursor.h"
#include "arrangement/merge.h"
#include "heap/codec.h"
#include "arr_test.h"

/* keys "a", "bb", "c", "dd" .. "jj" (lengths alternate), each with vals
 * "v0" (time 1) and "v11" (times 0 and 1), diff 3: 30 updates, 20 vals,
 * so that a version-2 chunk keeps every offset and range column (none of
 * them is fixed-width or one-to-one) */
static void gen10(uint64_t i, at_item *it, void *arg)
{
	static char k[2], v[3];
	(void)arg;
	k[0] = k[1] = (char)('a' + i / 3);
	v[0] = 'v';
	v[1] = v[2] = (char)('0' + (i % 3 != 0));
	it->key = k;
	it->klen = 1 + (i / 3) % 2;
	it->val = v;
	it->vlen = i % 3 ? 3 : 2;
	it->time = i % 3 == 1 ? 0 : 1;
	it->diff = 3;
}

/* Writes the 30-update batch; returns its id and its one chunk's body. */
static uint64_t write10(at_env *e, uint8_t **body, size_t *used,
                        uint64_t *cid)
{
	batch_desc d = { { 0 }, { 2 }, { 0 } };
	const void *bp;
	uint64_t id = at_write(e, gen10, NULL, 30, &d);
	batch *b = at_load(e, id);
	cr_assert_eq(b->nchunks, 1);
	*cid = b->chunk_ids[0];
	cr_assert_eq(heap_chunk_get(e->t, *cid, &bp, used), 0);
	*body = (uint8_t *)bp; /* test-only write through the map */
	batch_free(b);
	return id;
}

static int check(at_env *e, uint64_t id, bool sums, char *msg, size_t len)
{
	batch *b = at_load(e, id);
	int rc = batch_check(e->t, b, sums, msg, len);
	batch_free(b);
	return rc;
}

/* Scans everything through a trace cursor, each val's pairs walked or
 * (sums) summed in place (gen10's sums: "v0" one update of 3, "v11" two);
 * returns the first error. */
static int scan_as(at_env *e, uint64_t id, bool sums)
{
	batch *b = at_load(e, id);
	trace_cursor *c;
	uint64_t t;
	int64_t d;
	diff_sum s = 0;
	int rc = tcur_open(e->t, &b, 1, frontier_of(0), &c);
	if (rc == 0) {
		while (rc == 0 && tcur_key_valid(c)) {
			while (rc == 0 && tcur_val_valid(c)) {
				if (sums && (rc = tcur_accumulate(c, 1, &s)) == 0) {
					const void *v;
					size_t vl;
					tcur_val(c, &v, &vl);
					cr_assert_eq(s, vl == 2 ? 3 : 6);
				}
				while (!sums && (rc = tcur_time_next(c, &t, &d)) == 1)
					;
				if (rc == 0)
					rc = tcur_step_val(c);
			}
			if (rc == 0)
				rc = tcur_step_key(c);
		}
		tcur_close(c);
	}
	batch_free(b);
	return rc;
}

static int scan(at_env *e, uint64_t id)
{
	return scan_as(e, id, false);
}

Test(batch_check, clean_batch_passes)
{
	at_env e;
	uint8_t *body;
	size_t used;
	uint64_t cid;
	char msg[200];
	at_open(&e);
	uint64_t id = write10(&e, &body, &used, &cid);
	at_commit(&e, true);
	cr_assert_eq(check(&e, id, true, msg, sizeof msg), 0, "%s", msg);
	cr_assert_str_eq(msg, "");
	cr_assert_eq(scan(&e, id), 0);
	at_close(&e);
}

Test(batch_check, out_of_order_keys_resealed)
{
	at_env e;
	uint8_t *body;
	size_t used;
	uint64_t cid;
	char msg[200], want[64];
	uint32_t off;
	at_open(&e);
	uint64_t id = write10(&e, &body, &used, &cid);
	/* key 4 ("e") becomes "A": before "d" */
	memcpy(&off, body + 24, 4);
	uint32_t k4;
	memcpy(&k4, body + off + 4 * 4, 4);
	cr_assert_eq(body[k4], 'e');
	body[k4] = 'A';
	at_reseal(&e, id, cid, body, used);
	at_commit(&e, true);
	cr_assert_eq(check(&e, id, true, msg, sizeof msg), AH_ECORRUPT);
	snprintf(want, sizeof want, "batch %llu chunk %llu (#0): keys out of order",
	         (unsigned long long)id, (unsigned long long)cid);
	cr_assert_str_eq(msg, want);
	at_close(&e);
}

Test(batch_check, offset_out_of_bounds_resealed)
{
	at_env e;
	uint8_t *body;
	size_t used;
	uint64_t cid;
	char msg[200];
	uint32_t off, bad = 0x7ffffff0;
	at_open(&e);
	uint64_t id = write10(&e, &body, &used, &cid);
	memcpy(&off, body + 24, 4);
	memcpy(body + off + 4 * 2, &bad, 4); /* key 2's start offset */
	at_reseal(&e, id, cid, body, used);
	at_commit(&e, true);
	cr_assert_eq(check(&e, id, true, msg, sizeof msg), AH_ECORRUPT);
	cr_assert(strstr(msg, "not monotone (B4)"), "%s", msg);
	cr_assert_eq(scan(&e, id), AH_ECORRUPT);
	/* a seek binary-searches over the bad offset: an error, no crash */
	batch *b = at_load(&e, id);
	batch_cursor *c;
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), 0);
	cr_assert_eq(bcur_seek_key(c, "c", 1), AH_ECORRUPT);
	bcur_close(c);
	batch_free(b);
	at_close(&e);
}

Test(batch_check, bad_header_resealed)
{
	at_env e;
	uint8_t *body;
	size_t used;
	uint64_t cid;
	char msg[200];
	uint32_t huge = 1u << 30;
	at_open(&e);
	uint64_t id = write10(&e, &body, &used, &cid);
	memcpy(body + 16, &huge, 4); /* nupds */
	at_reseal(&e, id, cid, body, used);
	at_commit(&e, true);
	cr_assert_eq(check(&e, id, false, msg, sizeof msg), AH_ECORRUPT);
	cr_assert(strstr(msg, "bad batch chunk header"), "%s", msg);
	batch *b = at_load(&e, id);
	batch_cursor *c;
	cr_assert_eq(bcur_open(e.t, b, frontier_of(0), &c), AH_ECORRUPT);
	batch_free(b);
	at_close(&e);
}

Test(batch_check, flipped_byte_caught_by_checksum)
{
	at_env e;
	uint8_t *body;
	size_t used;
	uint64_t cid;
	char msg[200], want[64];
	uint32_t off;
	at_open(&e);
	uint64_t id = write10(&e, &body, &used, &cid);
	memcpy(&off, body + 52, 4); /* diffs column */
	body[off] ^= 0x04;          /* diff 3 -> 7: still well formed */
	at_commit(&e, true);
	/* Every read of a chunk checks it: also a check without checksums. */
	cr_assert_eq(check(&e, id, false, msg, sizeof msg), AH_ECORRUPT);
	cr_assert_eq(check(&e, id, true, msg, sizeof msg), AH_ECORRUPT);
	snprintf(want, sizeof want, "batch %llu chunk %llu (#0): checksum mismatch",
	         (unsigned long long)id, (unsigned long long)cid);
	cr_assert_str_eq(msg, want);
	at_close(&e);
}

Test(batch_check, record_counts_differ)
{
	at_env e;
	uint8_t *body;
	size_t used;
	uint64_t cid;
	char msg[300];
	at_open(&e);
	uint64_t id = write10(&e, &body, &used, &cid);
	batch *b = at_load(&e, id);
	b->keys = 11;
	cr_assert_eq(batch_record_put(e.t, b), 0);
	batch_free(b);
	at_commit(&e, true);
	cr_assert_eq(check(&e, id, true, msg, sizeof msg), AH_ECORRUPT);
	cr_assert(strstr(msg, "(B5)") && strstr(msg, "keys 11/10"), "%s", msg);
	at_close(&e);
}

Test(batch_check, record_ids_and_drop)
{
	at_env e;
	uint8_t *body;
	size_t used;
	uint64_t cid, a, b2;
	batch_desc d = { { 0 }, { 2 }, { 0 } }, d2 = { { 0 }, { 2 }, { 1 } };
	at_open(&e);
	a = write10(&e, &body, &used, &cid);
	b2 = at_write(&e, gen10, NULL, 30, &d);
	cr_assert_eq(b2, a + 1);
	cr_assert_eq(batch_set_desc(e.t, a, &d2), 0);
	batch *b = at_load(&e, a);
	cr_assert_eq(frontier_time(b->desc.since), 1);
	cr_assert_eq(b->updates, 30);
	batch_free(b);
	cr_assert_eq(batch_drop(e.t, b2), 0);
	cr_assert_eq(batch_load(e.t, b2, &b), AH_ENOTFOUND);
	cr_assert_eq(heap_chunk_get(e.t, cid, (const void **)&body, &used), 0);
	/* ids are not reused after a drop */
	uint64_t next;
	cr_assert_eq(batch_new_id(e.t, &next), 0);
	cr_assert_eq(next, b2 + 1);
	cr_assert_eq(batch_writer_finish(NULL, &d, &next), AH_EINVAL);
	(void)d;
	at_close(&e);
}

/* Scans with tcur_accumulate (the in-place sum) instead of the time walk;
 * returns the first error. */
static int scan_sums(at_env *e, uint64_t id)
{
	return scan_as(e, id, true);
}

/* A walk's inline steps (chunks checked whole: batch_int.h) still check
 * every offset they use: an out-of-bounds key offset, key_vals entry, val
 * offset or val_upds entry in a checksummed chunk is AH_ECORRUPT for a scan
 * that steps and sums in place, never a read out of bounds. */
/* A merge of batch id with a clean copy of it: 0, or the first error. */
static int merge_sums(at_env *e, uint64_t id)
{
	batch_desc d = { { 0 }, { 2 }, { 0 } };
	uint64_t other = at_write(e, gen10, NULL, 30, &d), out = 0;
	batch *in[2] = { at_load(e, id), at_load(e, other) };
	merger *m = NULL;
	bool done = false;
	int rc = merger_open(e->t, e->p, in, 2, frontier_of(0), NULL, &m);

	if (rc == 0)
		rc = merger_step(m, 0, &done, NULL);
	if (rc == 0)
		rc = merger_finish(m, &d, &out);
	merger_free(m);
	batch_free(in[0]);
	batch_free(in[1]);
	return rc;
}

Test(batch_check, walk_offsets_resealed_are_corrupt)
{
	/* header word of the column, entry */
	static const struct { uint32_t col, entry; } cases[] = {
		{ 24, 2 }, /* key_offs: key 2's start */
		{ 32, 2 }, /* key_vals: key 1's end, key 2's start */
		{ 36, 4 }, /* val_offs: val 4's start */
		{ 44, 4 }, /* val_upds: val 3's end, val 4's start */
		{ 44, 2 }, /* val_upds: val 1's end, val 2's start */
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		at_env e;
		uint8_t *body;
		size_t used;
		uint64_t cid;
		uint32_t off, bad = 0x7ffffff0;
		at_open(&e);
		uint64_t id = write10(&e, &body, &used, &cid);
		cr_assert_eq(scan_sums(&e, id), 0, "case %zu: clean", i);
		cr_assert_eq(merge_sums(&e, id), 0, "case %zu: clean merge", i);
		memcpy(&off, body + cases[i].col, 4);
		memcpy(body + off + 4 * cases[i].entry, &bad, 4);
		at_reseal(&e, id, cid, body, used);
		at_commit(&e, false);
		cr_assert_eq(scan_sums(&e, id), AH_ECORRUPT, "case %zu", i);
		cr_assert_eq(scan(&e, id), AH_ECORRUPT, "case %zu", i);
		/* the merge's inline steps and inline read of a val's pairs */
		cr_assert_eq(merge_sums(&e, id), AH_ECORRUPT, "case %zu: merge", i);
		at_close(&e);
	}
}

/* The version-2 header (batch_int.h) checked against the counts and the
 * columns' room, and a dictionary index checked where it is read: each
 * damage below, resealed (a checksummed, wrong chunk), is AH_ECORRUPT for
 * batch_check, a scan and a merge, never a read out of bounds. */
Test(batch_check, version2_headers_and_dictionaries_resealed_are_corrupt)
{
	enum { KV_ONE_BAD, KW_TOO_WIDE, KW_NOT_FIXED, TIMES_DICT_BIG, RESERVED,
	       DIFFS_FULL_NO_ROOM, VU_ONE_BAD, TIME_INDEX, DIFF_INDEX, NCASES };
	static const char *name[NCASES] = {
		"KV_ONE with 30 vals of 10 keys", "key width past its column",
		"key width without KEY_FIXED", "time dictionary of 300",
		"reserved word set", "diffs full without room",
		"VU_ONE cleared without val_upds", "time index past the dictionary",
		"diff index past the dictionary"
	};
	for (int k = 0; k < NCASES; k++) {
		at_chunk ck;
		char msg[200];
		at_open_dict_chunk(&ck);
		uint16_t ver;
		memcpy(&ver, ck.body + 4, 2);
		cr_assert_eq(ver, BCHUNK_VERSION_COLS);
		cr_assert_eq(ck.body[6], BCHUNK_KEY_FIXED | BCHUNK_VAL_FIXED | BCHUNK_VU_ONE);
		cr_assert_eq(get_u32(ck.body + 56), 1);
		cr_assert_eq(get_u32(ck.body + 60), 2);
		cr_assert_eq(get_u16(ck.body + 64), 2);
		cr_assert_eq(get_u16(ck.body + 66), 3);
		uint32_t off_t = get_u32(ck.body + 48), off_d = get_u32(ck.body + 52);
		switch (k) {
		case KV_ONE_BAD: ck.body[6] |= BCHUNK_KV_ONE; break;
		case KW_TOO_WIDE: put_u32(ck.body + 56, 3); break;
		case KW_NOT_FIXED: ck.body[6] &= (uint8_t)~BCHUNK_KEY_FIXED; break;
		case TIMES_DICT_BIG: put_u16(ck.body + 64, 300); break;
		case RESERVED: put_u32(ck.body + 68, 1); break;
		case DIFFS_FULL_NO_ROOM: put_u16(ck.body + 66, 0); break;
		case VU_ONE_BAD: ck.body[6] &= (uint8_t)~BCHUNK_VU_ONE; break;
		case TIME_INDEX: ck.body[off_t + 8 * 2 + 7] = 2; break;
		case DIFF_INDEX: ck.body[off_d + 8 * 3 + 20] = 0xff; break;
		}
		at_reseal(&ck.e, ck.id, ck.cid, ck.body, ck.used);
		at_commit(&ck.e, false);
		cr_assert_eq(check(&ck.e, ck.id, true, msg, sizeof msg), AH_ECORRUPT,
		             "%s", name[k]);
		cr_assert(strstr(msg, k >= TIME_INDEX ? "dictionary index"
		                                      : "header"), "%s: %s", name[k], msg);
		cr_assert_eq(scan(&ck.e, ck.id), AH_ECORRUPT, "%s: scan", name[k]);
		cr_assert_eq(merge_sums(&ck.e, ck.id), AH_ECORRUPT, "%s: merge", name[k]);
		at_close(&ck.e);
	}
}

/* Every val of key (klen bytes) through a seek (tcur_open_at: the chunk
 * opened page by page), its pairs summed as of time 1 into *sum; returns
 * the first error. */
static int seek_sum(at_env *e, uint64_t id, const char *key, size_t klen,
                    diff_sum *sum)
{
	batch *b = at_load(e, id);
	trace_cursor *c;
	diff_sum s;
	int rc = tcur_open_at(e->t, &b, 1, frontier_of(0), key, klen, &c);

	*sum = 0;
	if (rc == 0) {
		cr_assert(tcur_key_valid(c));
		while (rc == 0 && tcur_val_valid(c)) {
			if ((rc = tcur_accumulate(c, 1, &s)) == 0) {
				*sum += s;
				rc = tcur_step_val(c);
			}
		}
		tcur_close(c);
	}
	batch_free(b);
	return rc;
}

/* The first and last entries of key_vals and val_upds (key 0's range must
 * start at val 0, the last key's end at nvals; so for vals and updates)
 * are checked by whole opens at open, and by a seek's page-by-page open
 * only where it reads them (bchunk_key_vals, bchunk_val_upds): each end
 * resealed wrong is AH_ECORRUPT for batch_check, a scan and a seek to the
 * key that owns it, while a seek to a key in the middle reads none of it
 * and answers. */
Test(batch_check, column_ends_resealed_are_corrupt_where_read)
{
	static const struct {
		uint32_t col, entry, bad;
		const char *key; /* the key whose range reads the end */
	} cases[] = {
		{ 32, 0, 1, "a" },    /* key_vals[0]: key 0 starts at val 1 */
		{ 32, 10, 19, "jj" }, /* key_vals[nkeys]: the last key ends early */
		{ 44, 0, 1, "a" },    /* val_upds[0]: val 0 starts at update 1 */
		{ 44, 20, 29, "jj" }, /* val_upds[nvals] */
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		at_env e;
		uint8_t *body;
		size_t used;
		uint64_t cid;
		uint32_t off;
		diff_sum s;
		char msg[200];
		at_open(&e);
		uint64_t id = write10(&e, &body, &used, &cid);
		cr_assert_eq(seek_sum(&e, id, cases[i].key, strlen(cases[i].key), &s), 0);
		cr_assert_eq(s, 9, "case %zu: clean", i);
		memcpy(&off, body + cases[i].col, 4);
		memcpy(body + off + 4 * cases[i].entry, &cases[i].bad, 4);
		at_reseal(&e, id, cid, body, used);
		at_commit(&e, true);
		cr_assert_eq(check(&e, id, true, msg, sizeof msg), AH_ECORRUPT,
		             "case %zu", i);
		cr_assert_eq(scan(&e, id), AH_ECORRUPT, "case %zu", i);
		cr_assert_eq(seek_sum(&e, id, cases[i].key, strlen(cases[i].key), &s),
		             AH_ECORRUPT, "case %zu: seek", i);
		cr_assert_eq(seek_sum(&e, id, "dd", 2, &s), 0, "case %zu: middle", i);
		cr_assert_eq(s, 9, "case %zu: middle", i);
		/* With AH_OPEN_VERIFY_READS a seek checks the chunk whole and
		 * then steps inline, reading the ends unchecked: its open
		 * checks them. */
		ah_open_opts o = { .size = sizeof o,
		                   .flags = AH_OPEN_NOSYNC | AH_OPEN_VERIFY_READS };
		heap_txn_abort(e.t);
		e.t = NULL;
		cr_assert_eq(heap_close(e.h), 0);
		cr_assert_eq(heap_open(e.dir.path, &o, &e.h), 0);
		cr_assert_eq(heap_txn_begin(e.h, true, &e.t), 0);
		cr_assert_eq(seek_sum(&e, id, "dd", 2, &s), AH_ECORRUPT,
		             "case %zu: middle, verified reads", i);
		at_close(&e);
	}
}
