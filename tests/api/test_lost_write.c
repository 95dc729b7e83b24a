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
#include <sys/wait.h>
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

/* The heap at path: arrangement ARR holding every key (a- and b-keys)
 * once at time 0, committed; the handle stays open in *h. */
static void build_base(const char *path, ah_heap **h)
{
	static ah_update u[2 * NKEYS];
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64u << 20, 0);
	ah_txn *t;

	cr_assert_eq(ah_open(path, &o, h), 0);
	cr_assert_eq(ah_txn_begin(*h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, ARR), 0);
	for (unsigned i = 0; i < 2 * NKEYS; i++) {
		key_of(i, kb[i]);
		u[i] = (ah_update){ kb[i], 7, "v", 1, 0, 1 };
	}
	cr_assert_eq(ah_append(t, ARR, 0, 10, u, 2 * NKEYS), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
}

/* The committed append: the b-keys at time 10, diff 1 + i % 3. */
static void append_b_keys(ah_heap *h)
{
	static ah_update u[NKEYS];
	ah_txn *t;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (unsigned i = 0; i < NKEYS; i++)
		u[i] = (ah_update){ kb[NKEYS + i], 7, "v", 1, 10, 1 + i % 3 };
	cr_assert_eq(ah_append(t, ARR, 10, 20, u, NKEYS), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
}

/* Builds the heap at path and loses the second write of every chunk of
 * the kinds in `what` (with LOST_PAGE_HEADER, from the start of its
 * first page: LMDB's page header of the aborted write too, P_DIRTY set);
 * returns how many chunks were lost. */
#define LOST_PAGE_HEADER 4
static unsigned build_and_lose(const char *path, int what)
{
	static ah_update u[NKEYS];
	ah_heap *h;
	ah_txn *t;

	build_base(path, &h);
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
	append_b_keys(h);
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
		if (what & LOST_PAGE_HEADER)
			cr_assert_neq(aborted[p * PSIZE + 10] & 0x10, 0,
			              "the aborted write's page header is P_DIRTY");
		uint64_t from = what & LOST_PAGE_HEADER ? 0 : 16;
		cr_assert_eq(pwrite(fd, aborted + p * PSIZE + from, la + 16 - from,
		                    (off_t)(p * PSIZE + from)),
		             (ssize_t)(la + 16 - from));
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

/* The lost write takes LMDB's page header of the aborted write with it:
 * its P_DIRTY flag, which LMDB sets on a write txn's pages and clears at
 * commit.  liblmdb's mdb_ovpage_free asserts (mdb.c: 'x > 1') when it
 * frees a P_DIRTY page it did not dirty, so every write that frees the
 * chunk (a merge, a drop) aborted the process (found by an outside test).
 * Reads are exact or AH_ECORRUPT; a full merge and a drop are
 * AH_ECORRUPT, and they change nothing: the reads answer as before. */
static void stale_header_case(const char *tag, int what)
{
	tl_dir d = tl_tmpdir(tag);
	char path[PATH_MAX];
	unsigned e0, e1;
	int idle;

	snprintf(path, sizeof path, "%s/heap", d.dir);
	cr_assert(build_and_lose(path, what | LOST_PAGE_HEADER) >= 1);
	point_reads(path, 0, &e0);
	cr_assert(e0 >= 1);
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_heap *h;
	ah_txn *t;
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_maintain(t, ARR, 0, &idle), AH_ECORRUPT);
	ah_txn_abort(t);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_drop(t, ARR), AH_ECORRUPT);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	point_reads(path, 0, &e1);
	cr_assert_eq(e1, e0, "the failed writes changed what reads answer");
	tl_rmdir(&d);
}

Test(api_lost_write, stale_dirty_page_header_of_a_data_chunk_is_corrupt,
     .timeout = 120)
{
	stale_header_case("lost-hdr-data", LOST_DATA);
}

Test(api_lost_write, stale_dirty_page_header_of_a_filter_chunk_is_corrupt,
     .timeout = 120)
{
	stale_header_case("lost-hdr-filter", LOST_FILTER);
}

/* Every key of the misplace heap, in a child: 0 when each answer is exact
 * or AH_ECORRUPT, 1 on a wrong answer, 2 on another error.  No
 * Criterion calls (the child only exits). */
static int reads_in_child(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	ah_heap *h;
	ah_txn *t;

	if (ah_open(path, &o, &h) != 0 || ah_txn_begin(h, AH_TXN_RDONLY, &t) != 0)
		return 2;
	for (unsigned i = 0; i < 2 * NKEYS; i++) {
		const char *k = kb[i];
		const void *p = NULL;
		size_t l = 0;
		int64_t s = 0;
		ah_cursor *c = NULL;
		int rc = ah_cursor_open_at(t, ARR, k, 7, &c);
		if (rc == 0 && (rc = ah_cursor_key_valid(c)) == 1 &&
		    (rc = ah_cursor_key(c, &p, &l)) == 0)
			rc = ah_cursor_accumulate(c, 19, &s);
		else if (rc == 0)
			rc = 1000; /* no key: a wrong answer */
		ah_cursor_close(c);
		if (rc == AH_ECORRUPT)
			continue;
		if (rc != 0 && rc != 1000)
			return 2;
		int64_t want = i < NKEYS ? 1 : 2 + (int64_t)((i - NKEYS) % 3);
		if (rc == 1000 || l != 7 || memcmp(p, k, 7) != 0 || s != want)
			return 1;
	}
	ah_txn_abort(t);
	ah_close(h);
	return 0;
}

/* A chunk's first page whose LMDB page header names another page (a
 * misdirected write of the page, or a flipped number): the file offset of
 * a chunk comes from that number, and a handle learned the map's base
 * from the first chunk it looked up, so every place it then remembered
 * for other chunks was out of the map: point reads crashed (SIGSEGV,
 * found by an outside test on a jumbo chunk).  Now a base is taken only
 * when it puts LMDB's two metas at the start of the map, and once known,
 * every chunk's page number is checked against its place.  For each
 * chunk of the heap in turn, its number is set to the map's last page in
 * a copy, and a child reads every key: each answer exact or
 * AH_ECORRUPT, no signal.  A full merge of such a copy, which would have
 * LMDB free the pages that number names, is AH_ECORRUPT.  Either check
 * alone keeps the reads whole here (a bad base is never taken, or a bad
 * number is refused before its place is remembered); with both removed,
 * as before, a child dies of SIGSEGV. */
Test(api_lost_write, misplaced_page_number_is_corrupt_never_a_crash,
     .timeout = 300)
{
	tl_dir d = tl_tmpdir("lost-pgno");
	char path[256], copy[256], cmd[1024];
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_heap *h;
	ah_txn *t;
	int idle;

	snprintf(path, sizeof path, "%s/heap", d.dir);
	snprintf(copy, sizeof copy, "%s/copy", d.dir);
	build_base(path, &h);
	append_b_keys(h);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(reads_in_child(path), 0, "the undamaged heap reads exact");

	uint8_t *img = calloc(1, SPAN);
	int fd = open(path, O_RDONLY);
	cr_assert(img && fd >= 0 && pread(fd, img, SPAN, 0) > 0);
	close(fd);
	uint64_t last = (64u << 20) / PSIZE - 1;
	unsigned chunks = 0, merged = 0;
	for (uint64_t p = 2; p < SPAN / PSIZE; p++) {
		int kind;
		uint64_t len;
		if (chunk_at(img, p, &kind, &len) == 0)
			continue;
		chunks++;
		snprintf(cmd, sizeof cmd, "cp --sparse=always '%s' '%s' && rm -f '%s-lock'",
		         path, copy, copy);
		cr_assert_eq(system(cmd), 0);
		fd = open(copy, O_RDWR);
		cr_assert(fd >= 0);
		cr_assert_eq(pwrite(fd, &last, 8, (off_t)(p * PSIZE)), 8);
		close(fd);
		fflush(NULL);
		pid_t pid = fork();
		cr_assert(pid >= 0);
		if (pid == 0)
			_exit(reads_in_child(copy));
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		          "chunk at page %llu: the child %s %d",
		          (unsigned long long)p,
		          WIFEXITED(st) ? "exited" : "was killed by signal",
		          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		o.flags = 0;
		cr_assert_eq(ah_open(copy, &o, &h), 0);
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		int rc = ah_maintain(t, ARR, 0, &idle);
		cr_assert_eq(rc, AH_ECORRUPT, "chunk at page %llu: full merge %d",
		             (unsigned long long)p, rc);
		merged++;
		ah_txn_abort(t);
		cr_assert_eq(ah_close(h), 0);
	}
	cr_log_info("lost_write/pgno: %u chunks, each misplaced in turn; %u "
	            "merges refused", chunks, merged);
	cr_assert(chunks >= 3, "%u chunks", chunks);
	free(img);
	tl_rmdir(&d);
}

/* A push checks each data chunk against its record (ah_chunk_foreach)
 * and each key filter against its record (the XXH3 of its blocks): a
 * stale data chunk, a stale filter chunk or both are AH_ECORRUPT, with a
 * message naming what, and nothing is published (the manifests directory
 * stays empty).  Before, a stale filter chunk, which passes its own
 * checksums, was published, and only the restore, which verifies, refused
 * it: a backup that could not be restored. */
Test(api_lost_write, push_refuses_a_stale_data_or_filter_chunk,
     .timeout = 120)
{
	for (int what = LOST_DATA; what <= (LOST_DATA | LOST_FILTER); what++) {
		tl_dir d = tl_tmpdir("lost-push");
		char path[256], snaps[256], out[256], cmd[600];
		ah_open_opts o = tl_opts(0, 0, 0);
		ah_snapshot_info si;
		ah_heap *h;

		snprintf(path, sizeof path, "%s/heap", d.dir);
		snprintf(snaps, sizeof snaps, "%s/snaps", d.dir);
		snprintf(out, sizeof out, "%s/restored", d.dir);
		cr_assert(build_and_lose(path, what) >= 1);
		cr_assert_eq(ah_open(path, &o, &h), 0);
		memset(&si, 0, sizeof si);
		int rc = ah_snapshot_push(h, snaps, &si);
		cr_assert_eq(ah_close(h), 0);
		snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s/manifests' 2>/dev/null)\"",
		         snaps);
		cr_assert_eq(rc, AH_ECORRUPT, "push (lost %d): %d %s", what, rc,
		             si.message);
		cr_assert(strstr(si.message, what & LOST_DATA ? "not the"
		                                              : "key filter"),
		          "lost %d: %s", what, si.message);
		cr_assert_eq(system(cmd), 0, "a manifest was published");
		cr_assert_eq(ah_snapshot_restore(snaps, NULL, out, 0, &si),
		             AH_ENOTFOUND, "restored from a refused push: %s",
		             si.message);
		cr_assert_neq(access(out, F_OK), 0, "the restore left %s", out);
		tl_rmdir(&d);
	}
}
