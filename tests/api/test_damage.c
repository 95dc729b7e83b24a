/*
 * tests/api/test_damage.c - a flipped byte in a chunk or in any record is
 * an error or the right answer, never a wrong answer, with the default
 * open flags; and a merge never launders damage into a fresh, validly
 * checksummed batch.
 *
 * Before: chunks were checksummed only by verify (or with
 * AH_OPEN_VERIFY_READS), so 8 of 22 flips in keys, vals, times and diffs
 * read back as wrong answers with return code 0, and a merge copied a
 * damaged chunk into a new batch with a valid checksum; batch records,
 * arrangement records and source positions carried no checksum at all.
 *
 * Each damaged copy is read in a forked child (a crash or a hang fails
 * the test): every arrangement scanned at every readable time (chunks
 * checked whole), every key looked up with ah_cursor_open_at (chunks
 * checked page by page), every source read.  The text must equal the
 * undamaged heap's, or the child must report an error.  Public header
 * only.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"

#define NKEYS 30000
#define NNEW 16000
#define POS "position-12345-of-the-source"

/* Two arrangements, "a" in two multi-chunk batches and "b" small, and a
 * source. */
static void build(const char *path)
{
	static char keys[NKEYS][16];
	static ah_update ups[NKEYS];
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE,
	                   .max_bytes = 16u << 20 };
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_arrangement_create(t, "b"), 0);
	for (int i = 0; i < NKEYS; i++) {
		snprintf(keys[i], sizeof keys[i], "key%07d", i * 2);
		ups[i] = (ah_update){ keys[i], 10, "value-value", 11, 0,
		                      1 + i % 3 };
	}
	cr_assert_eq(ah_append(t, "a", 0, 1, ups, NKEYS), 0);
	for (int i = 0; i < NKEYS / 4; i++) {
		snprintf(keys[i], sizeof keys[i], "key%07d", i * 8 + 1);
		ups[i] = (ah_update){ keys[i], 10, "w", 1, 1, -1 };
	}
	cr_assert_eq(ah_append(t, "a", 1, 2, ups, NKEYS / 4), 0);
	for (int i = 0; i < 50; i++) {
		snprintf(keys[i], sizeof keys[i], "b%02d", i);
		ups[i] = (ah_update){ keys[i], 3, "x", 1, (uint64_t)i % 2, 7 };
	}
	cr_assert_eq(ah_append(t, "b", 0, 2, ups, 50), 0);
	cr_assert_eq(ah_source_put(t, "src", POS, strlen(POS)), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
}

/* Everything readable, as text; 0 or the first error. */
static int read_all(ah_heap *h, tl_buf *b)
{
	ah_txn *t;
	char name[AH_NAME_MAX + 1], prev[AH_NAME_MAX + 1];
	const char *after = NULL;
	int rc = ah_txn_begin(h, AH_TXN_RDONLY, &t);

	if (rc)
		return rc;
	while (rc == 0 && (rc = ah_arrangement_next(t, after, name)) == 0) {
		ah_arrangement_info in;
		ah_cursor *c;

		if ((rc = ah_arrangement_info_get(t, name, &in)))
			break;
		tl_put(b, "%s %" PRIu64 " %" PRIu64 "\n", name, in.upper, in.since);
		for (uint64_t a = in.since; a < in.upper && rc == 0; a++)
			rc = tl_try_dump_as_of(t, name, a, b);
		if (rc)
			break;
		/* Every key again, by point query (page-by-page checks). */
		if ((rc = ah_cursor_open(t, name, &c)))
			break;
		int nth = 0;
		for (int k = ah_cursor_key_valid(c); k == 1 && rc == 0;
		     k = ah_cursor_step_key(c)) {
			const void *kp;
			size_t kl;
			ah_cursor *p;
			int64_t s;

			if (nth++ % 97 != 0)
				continue; /* about 400 point queries */
			if ((rc = ah_cursor_key(c, &kp, &kl)) ||
			    (rc = ah_cursor_open_at(t, name, kp, kl, &p)))
				break;
			if ((rc = ah_cursor_accumulate(p, in.upper - 1, &s)) == 0)
				tl_put(b, "%" PRId64 ",", s);
			int crc = ah_cursor_close(p);
			if (rc == 0)
				rc = crc;
			if (k < 0)
				rc = k;
		}
		int crc = ah_cursor_close(c);
		if (rc == 0)
			rc = crc;
		tl_put(b, "\n");
		strcpy(prev, name);
		after = prev;
	}
	if (rc == AH_ENOTFOUND)
		rc = 0;
	after = NULL;
	while (rc == 0 && (rc = ah_source_next(t, after, name)) == 0) {
		const void *pos;
		size_t len;

		if ((rc = ah_source_get(t, name, &pos, &len)))
			break;
		tl_put(b, "source %s ", name);
		tl_put_bytes(b, pos, len);
		tl_put(b, "\n");
		strcpy(prev, name);
		after = prev;
	}
	if (rc == AH_ENOTFOUND)
		rc = 0;
	ah_txn_abort(t);
	return rc;
}

/* In a child: opens path read-only and reads it all.  Returns 0 when the
 * text equals want, 1 when a call returned an error, 2 for a wrong
 * answer; a signal or a hang (10 s) fails the test. */
static int judge(const char *path, const char *want, const char *what)
{
	int fds[2], status;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
		ah_heap *h;
		tl_buf b = { 0 };
		int rc;

		alarm(10);
		close(fds[0]);
		if ((rc = ah_open(path, &o, &h)) == 0) {
			rc = read_all(h, &b);
			ah_close(h);
		}
		_exit(rc != 0 ? 1 : strcmp(b.p ? b.p : "", want) == 0 ? 0 : 2);
	}
	close(fds[1]);
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "%s: the reader died (signal %d)", what,
	          WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	cr_assert_neq(WEXITSTATUS(status), 2, "%s: a wrong answer, rc 0", what);
	return WEXITSTATUS(status);
}

static void flip_at(const char *src, const char *dst, uint64_t off)
{
	cr_assert_eq(tl_copy(src, dst), 0, "copy %s", src);
	tl_flip(dst, off, 0x08);
}

typedef struct chunks {
	uint64_t off[256], bytes[256];
	int n;
} chunks;

static int on_chunk(const ah_chunk_info *ci, void *user)
{
	chunks *cs = user;

	if (cs->n < 256) {
		cs->off[cs->n] = ci->file_offset;
		cs->bytes[cs->n++] = ci->stored_bytes;
	}
	return 0;
}

static char *undamaged(const char *path)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	ah_heap *h;
	tl_buf b = { 0 };

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(read_all(h, &b), 0);
	cr_assert_eq(ah_close(h), 0);
	return b.p;
}

Test(api_damage, chunk_flips_are_errors_or_right, .timeout = 300)
{
	tl_dir d = tl_tmpdir("api");
	char path[512], copy[512], what[128];
	chunks cs = { 0 };
	ah_heap *h;
	ah_txn *t;
	int errors = 0, cases = 0;

	snprintf(path, sizeof path, "%s", d.path);
	tl_dir_file(&d, "copy", copy, sizeof copy);
	build(path);
	char *want = undamaged(path);
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_chunk_foreach(t, "a", on_chunk, &cs), 0);
	cr_assert_eq(ah_chunk_foreach(t, "b", on_chunk, &cs), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_geq(cs.n, 3); /* a's two batches, b's one */
	/* 23 places in every chunk, header to tail: every column is hit. */
	for (int c = 0; c < cs.n; c++)
		for (int k = 0; k < 23; k++) {
			uint64_t at = k == 0 ? 4 : k == 1 ? 30 : k == 2 ? 100 :
			              cs.bytes[c] / 23 * (uint64_t)k + 11;

			snprintf(what, sizeof what, "chunk %d byte %" PRIu64, c, at);
			flip_at(path, copy, cs.off[c] + at);
			errors += judge(copy, want, what);
			cases++;
		}
	printf("api_damage/chunk: %d flips, %d found (the rest read right: "
	       "unused bytes)\n", cases, errors);
	cr_assert_gt(errors, cases / 2, "most flips must be found");
	free(want);
	tl_rmdir(&d);
}

/* Offsets of every occurrence of pat in the file. */
static int find_all(const char *path, const void *pat, size_t plen,
                    uint64_t *out, int max)
{
	FILE *f = fopen(path, "rb");
	static uint8_t buf[1 << 20];
	uint64_t base = 0;
	size_t n, keep = 0;
	int found = 0;

	cr_assert_not_null(f);
	while ((n = fread(buf + keep, 1, sizeof buf - keep, f)) > 0) {
		n += keep;
		for (size_t i = 0; i + plen <= n && found < max; i++)
			if (memcmp(buf + i, pat, plen) == 0)
				out[found++] = base + i;
		keep = plen - 1 < n ? plen - 1 : n;
		memmove(buf, buf + n - keep, keep);
		base += n - keep;
	}
	fclose(f);
	return found;
}

/* Flips bytes [from, to) of every occurrence of pat (the record's start);
 * returns how many reads found the damage. */
static int flip_records(const char *path, const char *copy, const char *want,
                        const char *pat, size_t plen, int from, int to,
                        const char *kind, int *cases)
{
	uint64_t at[64];
	int n = find_all(path, pat, plen, at, 64), errors = 0;
	char what[128];

	cr_assert_gt(n, 0, "no %s in the file", kind);
	for (int i = 0; i < n; i++)
		for (int k = from; k < to; k++) {
			snprintf(what, sizeof what, "%s #%d byte %d", kind, i, k);
			flip_at(path, copy, at[i] + (uint64_t)k);
			errors += judge(copy, want, what);
			++*cases;
		}
	return errors;
}

Test(api_damage, record_flips_are_errors_or_right, .timeout = 300)
{
	tl_dir d = tl_tmpdir("api");
	char path[512], copy[512];
	int cases = 0;

	snprintf(path, sizeof path, "%s", d.path);
	tl_dir_file(&d, "copy", copy, sizeof copy);
	build(path);
	char *want = undamaged(path);
	/* Batch records ("AHBR": Description, counts, chunk ids, fences),
	 * arrangement records ("AHAR": upper, since, batches), the source
	 * position, the meta record ("ARRHEAP"), and the frame's check in
	 * front of each (bytes -8..-1). */
	int eb = flip_records(path, copy, want, "AHBR", 4, -8, 96, "batch record",
	                      &cases);
	int ea = flip_records(path, copy, want, "AHAR", 4, -8, 48,
	                      "arrangement record", &cases);
	int es = flip_records(path, copy, want, POS, strlen(POS), -8,
	                      (int)strlen(POS), "source position", &cases);
	int em = flip_records(path, copy, want, "ARRHEAP", 8, 0, 64, "meta record",
	                      &cases);
	printf("api_damage/records: %d flips; found: batch %d, arrangement %d, "
	       "source %d, meta %d\n", cases, eb, ea, es, em);
	/* Live copies exist of each (stale ones in free pages read right). */
	cr_assert_geq(eb, 104);
	cr_assert_geq(ea, 56);
	cr_assert_geq(es, (int)strlen(POS) + 8);
	cr_assert_geq(em, 64);
	free(want);
	tl_rmdir(&d);
}

/* A merge reads its inputs whole and checks them: a damaged chunk makes
 * the merge fail (the transaction is poisoned, nothing commits) instead of
 * being copied into a new batch with a valid checksum.  Fueled merges
 * inside ah_append too. */
Test(api_damage, merge_does_not_launder, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	char path[512];
	chunks cs = { 0 };
	ah_open_opts o = { .size = sizeof o, .max_bytes = 16u << 20 };
	ah_heap *h;
	ah_txn *t;
	int idle;

	snprintf(path, sizeof path, "%s", d.path);
	build(path);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_chunk_foreach(t, "a", on_chunk, &cs), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	/* A diff in the middle of the first chunk: well formed, wrong. */
	tl_flip(path, cs.off[0] + cs.bytes[0] - 4096 * 3, 0x01);

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_maintain(t, "a", 0, &idle), AH_ECORRUPT, "%s",
	             ah_txn_errmsg(t));
	cr_assert_eq(ah_txn_commit(t), AH_EBADTXN);
	/* An append whose fueled merges reach the damaged batch fails the
	 * same way: 16000 updates merge with the 7500 of batch 2 (at least
	 * half of them), and the result with the 30000 of batch 1. */
	static char keys[NNEW][16];
	static ah_update ups[NNEW];
	for (int i = 0; i < NNEW; i++) {
		snprintf(keys[i], sizeof keys[i], "new%07d", i);
		ups[i] = (ah_update){ keys[i], 10, "v", 1, 2, 1 };
	}
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", 2, 3, ups, NNEW), AH_ECORRUPT, "%s",
	             ah_txn_errmsg(t));
	ah_txn_abort(t);
	/* The damage is still there for verify to name: not laundered. */
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	ah_verify_stats st;
	cr_assert_eq(ah_verify(t, NULL, NULL, &st), 0);
	cr_assert_geq(st.problems, 1);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ---- a flipped txnid on an LMDB meta page (ARCHITECTURE.md section 4) ----
 * Page 0 holds the newest commit T (even), page 1 the one before (T - 1).
 * Bit 0 of page 0's txnid raises it to T + 1, a txnid of page 1's parity.
 * Flipped while a handle is open, its read txns still use page T & 1 = 0
 * (the snapshot txnid is the lock file's): ah_verify reports one problem
 * naming the page and both txnids, the same in every txn, and the walk
 * goes on (the tree is sound: nothing is quarantined).  Before, ah_verify
 * said AH_EBUSY in every fresh read txn forever.  The next ah_open refuses
 * the heap: LMDB would read commit T - 1 and build on it. */

static int keep_message(const ah_problem *p, void *user)
{
	tl_buf *b = user;

	tl_put(b, "[%s] %s\n", p->arrangement, p->message);
	return 0;
}

/* Creates arrangement "a" in a new heap at path and appends one update a
 * commit (at least 4) until the last commit's txnid has the given parity
 * (its meta page); closes the heap.  Returns that txnid; *upper = the
 * arrangement's upper (= its updates). */
static uint64_t commits_to_parity(const char *path, const ah_open_opts *o,
                                  uint64_t parity, uint64_t *upper)
{
	ah_heap *h;
	ah_txn *t;
	ah_heap_stat hs;

	*upper = 0;
	cr_assert_eq(ah_open(path, o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	do {
		ah_update u = { "k", 1, "v", 1, *upper, 1 };

		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		cr_assert_eq(ah_append(t, "a", *upper, *upper + 1, &u, 1), 0);
		cr_assert_eq(ah_txn_commit(t), 0);
		++*upper;
		cr_assert_eq(ah_heap_stat_get(h, &hs), 0);
	} while (*upper < 4 || hs.last_txn_id % 2 != parity);
	cr_assert_eq(hs.page_size, 4096);
	cr_assert_eq(ah_close(h), 0);
	return hs.last_txn_id;
}

Test(api_damage, meta_txnid_flip_is_a_problem, .timeout = 60)
{
	tl_dir d = tl_tmpdir("damage");
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE,
	                   .max_bytes = 16u << 20 };
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info in;
	uint64_t T, upper;
	char want[400];

	/* The last commit on meta page 0 (an even txnid). */
	T = commits_to_parity(d.path, &o, 0, &upper);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	tl_flip(d.path, 144, 0x01); /* page 0's mm_txnid: T -> T + 1 */
	snprintf(want, sizeof want, "[] LMDB meta page 0: txnid %" PRIu64 ", not "
	         "the snapshot's %" PRIu64 " (a damaged txnid on this or the "
	         "other meta page): the snapshot reads the tree this page "
	         "names\n", T + 1, T);
	for (int i = 0; i < 3; i++) { /* the same in every fresh read txn */
		tl_buf msgs = { 0 };
		ah_verify_stats vs;
		ah_page_stats ps;

		cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
		cr_assert_eq(ah_verify(t, keep_message, &msgs, &vs), 0,
		             "a damaged meta is a problem, not AH_EBUSY");
		cr_assert_eq(vs.problems, 1);
		cr_assert_str_eq(msgs.p, want);
		cr_assert_eq(ah_verify_pages(t, NULL, NULL, &ps), 0);
		cr_assert_eq(ps.problems, 1);
		cr_assert_eq(ps.txn_id, T);
		for (int j = 0; j < AH_PAGE_TREES; j++)
			cr_assert_eq(ps.trees[j].damaged, 0, "%s", ps.trees[j].name);
		/* What the reads serve: page 0's tree, commit T. */
		cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
		cr_assert_eq(in.upper, upper);
		ah_txn_abort(t);
		free(msgs.p);
	}
	cr_assert_eq(ah_close(h), 0);
	o.flags = 0;
	cr_assert_eq(ah_open(d.path, &o, &h), AH_ECORRUPT);
	o.flags = AH_OPEN_RDONLY;
	cr_assert_eq(ah_open(d.path, &o, &h), AH_ECORRUPT);
	tl_rmdir(&d);
}

static void put_txnid(const char *path, int page, uint64_t txnid)
{
	int fd = open(path, O_RDWR);

	cr_assert_geq(fd, 0, "open %s", path);
	cr_assert_eq(pwrite(fd, &txnid, 8, (off_t)page * 4096 + 144), 8);
	cr_assert_eq(close(fd), 0);
}

/* Txnids LMDB never writes, each refused by every open (plain, read-only,
 * create) and harmless once restored: the older raised to the newer (LMDB
 * would serve reads from page T & 1 but start the next write from page
 * 0's older tree, and that commit would silently undo commit T); both
 * zeroed on a used heap (reads would serve the older page's commit and
 * the next writer build on it),
 * and the newest raised to 2^48 or near 2^64 keeping its parity (LMDB's
 * counter would wrap to 0 a few commits later and the heap stop
 * opening). */
Test(api_damage, meta_txnids_implausible_refuse_open, .timeout = 60)
{
	tl_dir d = tl_tmpdir("damage");
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE,
	                   .max_bytes = 16u << 20 };
	static const unsigned flags[] = { 0, AH_OPEN_RDONLY, AH_OPEN_CREATE };
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info in;
	uint64_t upper, T = commits_to_parity(d.path, &o, 1, &upper);
	const struct { uint64_t t0, t1; } bad[] = {
		{ T, T },
		{ 0, 0 },
		{ T - 1, (1ull << 48) + 1 },
		{ T - 1, UINT64_MAX },
		{ UINT64_MAX - 1, T },
	};

	for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
		put_txnid(d.path, 0, bad[b].t0);
		put_txnid(d.path, 1, bad[b].t1);
		for (size_t f = 0; f < 3; f++) {
			o.flags = flags[f];
			cr_assert_eq(ah_open(d.path, &o, &h), AH_ECORRUPT,
			             "case %zu, flags %u", b, flags[f]);
		}
	}
	put_txnid(d.path, 0, T - 1);
	put_txnid(d.path, 1, T);
	o.flags = 0;
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	cr_assert_eq(in.upper, upper);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
