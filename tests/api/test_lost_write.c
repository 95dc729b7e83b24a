/*
 * tests/api/test_lost_write.c - a write the storage lost is an error, never
 * a wrong answer, when the bytes left in its place are a chunk of the same
 * id.
 *
 * How that happens: an aborted append writes its chunks (pwrite at seal)
 * into pages that stay free, and the ids it took are handed out again by
 * the next append, whose chunks LMDB puts in the same pages.  If the
 * storage then loses that second write (a controller that acknowledged it,
 * a misdirected write), the file holds, at the place the committed batch
 * record names, a chunk with the right id, the right size and every
 * checksum right: the aborted one.  Found by an outside test (sixteenth
 * round): point reads returned that chunk's sums, also with
 * AH_OPEN_VERIFY_READS, and a stale key filter chunk said "cannot hold"
 * for keys the batch holds; only ah_verify noticed.  Since heap format 7 a
 * batch record lists each chunk's XXH3 and its key filter's checks are
 * bound to them (ARCHITECTURE.md, "Batch record").
 *
 * Each case builds the heap, keeps the file's bytes after the aborted
 * append, commits the second append, and then puts the aborted bytes back
 * over every chunk of one kind (data, filter, or both) that both appends
 * wrote at one place with one id: the lost write.  It asserts that there
 * was such a chunk (else the case tests nothing), then reads every key of
 * the committed append with ah_cursor_open_at, with and without
 * AH_OPEN_VERIFY_READS, and the whole arrangement with a scan: each answer
 * is exact or AH_ECORRUPT, no answer is wrong, and some are errors; and
 * ah_verify reports a problem.  Public header, plus the chunk header
 * layout of ARCHITECTURE.md to find the chunks in the file.
 */
#include <fcntl.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_heap.h"

#define ARR "a"
#define NKEYS 5000 /* a key filter of a chunk of its own: > ~1,600 keys */
#define SPAN (4u << 20)
#define PSIZE 4096u

enum lost { LOST_DATA = 1, LOST_FILTER = 2 };

static char kb[2 * NKEYS][8];

static void key_of(unsigned i, char k[8])
{
	snprintf(k, 8, "%c%06u", i < NKEYS ? 'a' : 'b', i % NKEYS);
}

/* What the chunk at page p of img is: 0 none, else its id, with *kind
 * LOST_DATA ("AHBC" body) or LOST_FILTER ("AHBF" body) and *len its
 * value bytes (ARCHITECTURE.md, "Chunk": format 2). */
static uint64_t chunk_at(const uint8_t *img, uint64_t p, int *kind,
                         uint64_t *len)
{
	const uint8_t *v = img + p * PSIZE + 16;
	uint32_t pages, nblocks;
	uint64_t id;

	if (memcmp(v + 12, "AHC2", 4) != 0)
		return 0;
	memcpy(&pages, v + 16, 4);
	memcpy(&nblocks, v + 20, 4);
	memcpy(&id, v + 24, 8);
	if (pages == 0 || nblocks == 0 || (p + pages) * PSIZE > SPAN)
		return 0;
	uint64_t body = (40 + 4 * ((uint64_t)nblocks - 1) + 15) / 16 * 16;
	*len = (uint64_t)pages * PSIZE - 16;
	*kind = !memcmp(v + body, "AHBC", 4) ? LOST_DATA
	        : !memcmp(v + body, "AHBF", 4) ? LOST_FILTER : 0;
	return id;
}

/* Builds the heap at path and loses the second write of every chunk of
 * the kinds in `what`; returns how many chunks were lost. */
static unsigned build_and_lose(const char *path, int what)
{
	static ah_update u[2 * NKEYS];
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64u << 20, 0);
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, ARR), 0);
	for (unsigned i = 0; i < 2 * NKEYS; i++) {
		key_of(i, kb[i]);
		u[i] = (ah_update){ kb[i], 7, "v", 1, 0, 1 };
	}
	cr_assert_eq(ah_append(t, ARR, 0, 10, u, 2 * NKEYS), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	/* aborted: the a-keys again at time 10 */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (unsigned i = 0; i < NKEYS; i++)
		u[i] = (ah_update){ kb[i], 7, "v", 1, 10, 5 };
	cr_assert_eq(ah_append(t, ARR, 10, 20, u, NKEYS), 0);
	ah_txn_abort(t);
	int fd = open(path, O_RDWR);
	cr_assert(fd >= 0);
	uint8_t *aborted = calloc(1, SPAN), *now = calloc(1, SPAN);
	cr_assert(aborted && now);
	cr_assert(pread(fd, aborted, SPAN, 0) > 0);
	/* committed: the b-keys at time 10, diff 1 + i % 3 */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (unsigned i = 0; i < NKEYS; i++)
		u[i] = (ah_update){ kb[NKEYS + i], 7, "v", 1, 10, 1 + i % 3 };
	cr_assert_eq(ah_append(t, ARR, 10, 20, u, NKEYS), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert(pread(fd, now, SPAN, 0) > 0);

	unsigned lost = 0;
	for (uint64_t p = 2; p < SPAN / PSIZE; p++) {
		int ka = 0, kn = 0;
		uint64_t la = 0, ln = 0;
		uint64_t ia = chunk_at(aborted, p, &ka, &la);
		uint64_t in = chunk_at(now, p, &kn, &ln);
		if (ia == 0 || ia != in || ka != kn || la != ln || !(ka & what) ||
		    memcmp(aborted + p * PSIZE + 16, now + p * PSIZE + 16, la) == 0)
			continue;
		cr_assert_eq(pwrite(fd, aborted + p * PSIZE + 16, la,
		                    (off_t)(p * PSIZE + 16)), (ssize_t)la);
		lost++;
	}
	close(fd);
	free(aborted);
	free(now);
	return lost;
}

/* Every b-key read by a point query: exact or AH_ECORRUPT; *errors. */
static void point_reads(const char *path, unsigned flags, unsigned *errors)
{
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY | flags, 0, 0);
	ah_heap *h;
	ah_txn *t;

	*errors = 0;
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	for (unsigned i = 0; i < NKEYS; i++) {
		const char *k = kb[NKEYS + i];
		const void *p = NULL;
		size_t l = 0;
		int64_t s = 0;
		ah_cursor *c = NULL;
		int rc = ah_cursor_open_at(t, ARR, k, 7, &c);
		int valid = rc ? rc : ah_cursor_key_valid(c);
		if (valid == 1 && (rc = ah_cursor_key(c, &p, &l)) == 0)
			rc = ah_cursor_accumulate(c, 19, &s);
		else if (valid != 1)
			rc = valid;
		int crc = ah_cursor_close(c);
		if (rc == AH_ECORRUPT || (rc == 0 && crc == AH_ECORRUPT)) {
			(*errors)++;
			continue;
		}
		cr_assert_eq(rc, 0, "%s: %s", k, ah_strerror(rc));
		cr_assert(l == 7 && memcmp(p, k, 7) == 0,
		          "query %s found another key: a wrong answer", k);
		cr_assert_eq(s, 2 + (int64_t)(i % 3),
		             "query %s: sum %lld, expected %lld: a wrong answer",
		             k, (long long)s, (long long)(2 + i % 3));
	}
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
}

/* A scan of the whole arrangement: AH_ECORRUPT before its end. */
static int scan(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	ah_heap *h;
	ah_txn *t;
	ah_cursor *c = NULL;
	int rc;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	rc = ah_cursor_open(t, ARR, &c);
	while (rc == 0 && (rc = ah_cursor_key_valid(c)) == 1) {
		int64_t s;
		for (rc = ah_cursor_val_valid(c); rc == 1; rc = ah_cursor_step_val(c))
			if ((rc = ah_cursor_accumulate(c, 19, &s)) != 0)
				break;
		if (rc == 0)
			rc = ah_cursor_step_key(c) < 0 ? AH_ECORRUPT : 0;
	}
	ah_cursor_close(c);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	return rc;
}

static void lost_write_case(const char *tag, int what)
{
	tl_dir d = tl_tmpdir(tag);
	char path[PATH_MAX];
	unsigned errors;

	snprintf(path, sizeof path, "%s/heap", d.dir);
	unsigned lost = build_and_lose(path, what);
	cr_assert(lost >= 1, "no chunk was written twice at one place with one "
	          "id: the case tests nothing");
	point_reads(path, 0, &errors);
	cr_assert(errors >= 1, "%u lost writes and every read answered", lost);
	point_reads(path, AH_OPEN_VERIFY_READS, &errors);
	cr_assert(errors >= 1, "%u lost writes and every read answered", lost);
	if (what & LOST_DATA)
		cr_assert_eq(scan(path), AH_ECORRUPT);
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	ah_heap *h;
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(tl_verify(h, NULL), AH_ECORRUPT);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(api_lost_write, stale_data_chunk_of_the_same_id_is_corrupt, .timeout = 120)
{
	lost_write_case("lost-data", LOST_DATA);
}

Test(api_lost_write, stale_filter_chunk_of_the_same_id_is_corrupt, .timeout = 120)
{
	lost_write_case("lost-filter", LOST_FILTER);
}

Test(api_lost_write, stale_data_and_filter_chunks_are_corrupt, .timeout = 120)
{
	lost_write_case("lost-both", LOST_DATA | LOST_FILTER);
}
