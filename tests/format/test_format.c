/*
 * tests/format/test_format.c - the on-disk format across versions (issue
 * 7).  tests/fixtures/heap-v1 is a small heap written by format version 1
 * (arrheap 0.1.0, 4 KiB pages, little endian, 1 MiB map), frozen;
 * tests/fixtures/heap-v2 the same heap written by format version 2; both
 * hold the contents in tests/fixtures/heap-v1.expect.  Every future
 * version must open both fixtures, verify them, read exactly that text,
 * and write to them; a read-only open of the v1 fixture leaves it a
 * version-1 file, a writable one upgrades it to version 2.  `make fixture`
 * (AH_FIXTURE_REGEN=1) rewrites heap-v2 from the deterministic generator
 * below (never heap-v1 or the text); without it the generator is run in a
 * temporary directory and must reproduce the expected text.
 * A heap from a different page size or byte order (LMDB meta fields patched
 * in a copy) is refused with AH_EFORMAT and left unchanged.
 * tests/fixtures/heap-v5 is a format-5 heap written by the library of
 * commit 2929086 (the last before format 6), frozen; what it holds is
 * described at v5_fixture_reads_as_written.  tests/fixtures/heap-v6 holds
 * the same, written by commit 091a03c (the last before format 7).
 */
#include <criterion/criterion.h>
#include <stdarg.h>

#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_rand.h"

#define FIXTURE "tests/fixtures/heap-v1"      /* frozen: arrheap 0.1.0 */
#define FIXTURE_V2 "tests/fixtures/heap-v2"   /* `make fixture` */
#define FIXTURE_V5 "tests/fixtures/heap-v5"   /* frozen: 2929086, format 5 */
#define FIXTURE_V6 "tests/fixtures/heap-v6"   /* frozen: 091a03c, format 6 */
#define FIXTURE_MAP TL_MiB

static const char *src_dir(void)
{
	const char *s = getenv("AH_SRC");

	return s != NULL && *s != '\0' ? s : ".";
}

/* ------------------------------------------------------------ generator */

static void gen(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, FIXTURE_MAP, 16);
	const char *names[3] = { "orders", "lines", "bin/raw" };
	uint64_t s = 1234567;
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	for (uint64_t c = 0; c < 12; c++) {
		int idle;

		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		for (int a = 0; a < 3; a++) {
			ah_update ups[40];
			uint8_t keys[40][9], vals[40][3];
			size_t n = 5 + (size_t)(tl_rand(&s) % 30);

			if (c == 0)
				cr_assert_eq(ah_arrangement_create(t, names[a]),
				             0);
			if (c == 7 && a == 1) {
				cr_assert_eq(ah_advance(t, names[a], 2 * c,
				                        2 * c + 2), 0);
				continue;
			}
			for (size_t i = 0; i < n; i++) {
				uint64_t x = tl_rand(&s);

				memcpy(keys[i], &x, 8); /* binary keys */
				keys[i][0] = (uint8_t)(x % 13);
				vals[i][0] = (uint8_t)(x >> 8) % 3;
				vals[i][1] = 0;
				vals[i][2] = 0xff;
				ups[i] = (ah_update){ keys[i], 1 + (x >> 16) % 8,
				                      vals[i], (x >> 24) % 4,
				                      2 * c + (x >> 32) % 2,
				                      (int64_t)((x >> 40) % 5) - 2 };
			}
			cr_assert_eq(ah_append(t, names[a], 2 * c, 2 * c + 2,
			                       ups, n), 0);
			if (c % 4 == 3)
				cr_assert_eq(ah_set_since(t, names[a], 2 * c - 3),
				             0);
			if (c == 10)
				cr_assert_eq(ah_maintain(t, names[a], 50, &idle),
				             0);
		}
		cr_assert_eq(ah_source_put(t, "kafka:topic/0", &c, sizeof c),
		             0);
		cr_assert_eq(ah_txn_commit(t), 0);
	}
	cr_assert_eq(ah_close(h), 0);
}

/* ------------------------------------------------------------ text form */

static void put(char **b, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void put(char **b, size_t *len, size_t *cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(*b + *len, *cap - *len, fmt, ap);
		va_end(ap);
		if (n >= 0 && *len + (size_t)n < *cap) {
			*len += (size_t)n;
			return;
		}
		*cap = *cap * 2 + (size_t)n + 256;
		*b = realloc(*b, *cap);
		cr_assert_not_null(*b);
	}
}

static void put_hex(char **b, size_t *len, size_t *cap, const void *p,
                    size_t n)
{
	put(b, len, cap, "%s", n ? "" : "-");
	for (size_t i = 0; i < n; i++)
		put(b, len, cap, "%02x", ((const uint8_t *)p)[i]);
}

static void step_ok(int rc)
{
	cr_assert_geq(rc, 0, "cursor step: %s", ah_err_name(rc));
}

/* Every arrangement (frontiers, each key/val's consolidated times) and
 * source, as text; the caller frees. */
/* The fixture's text; with seek, each key's vals are read through a
 * cursor opened at the key (a point query: the chunks are read block by
 * block, not whole). */
static char *text_by(ah_heap *h, bool seek)
{
	char *b = NULL, name[AH_NAME_MAX + 1], prev[AH_NAME_MAX + 1];
	size_t len = 0, cap = 0;
	const char *after = NULL;
	ah_txn *t;
	ah_arrangement_info in;

	put(&b, &len, &cap, "arrheap fixture\n");
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	while (ah_arrangement_next(t, after, name) == 0) {
		ah_cursor *c;
		const void *p;
		size_t n;

		cr_assert_eq(ah_arrangement_info_get(t, name, &in), 0);
		put(&b, &len, &cap, "arrangement %s upper %" PRIu64
		    " since %" PRIu64 "\n", name, in.upper, in.since);
		cr_assert_eq(ah_cursor_open(t, name, &c), 0);
		for (; ah_cursor_key_valid(c); step_ok(ah_cursor_step_key(c))) {
			ah_cursor *v = c;

			cr_assert_eq(ah_cursor_key(c, &p, &n), 0);
			if (seek) {
				const void *q;
				size_t qn;

				cr_assert_eq(ah_cursor_open_at(t, name, p, n, &v), 0);
				cr_assert_eq(ah_cursor_key(v, &q, &qn), 0);
				cr_assert(qn == n && memcmp(p, q, n) == 0);
				p = q;
			}
			for (; ah_cursor_val_valid(v);
			     step_ok(ah_cursor_step_val(v))) {
				tl_td td[256];
				size_t m = 0, k = 0;
				uint64_t tm;
				int64_t d;
				int rc;

				put(&b, &len, &cap, " ");
				put_hex(&b, &len, &cap, p, n);
				cr_assert_eq(ah_cursor_val(v, &p, &n), 0);
				put(&b, &len, &cap, " ");
				put_hex(&b, &len, &cap, p, n);
				cr_assert_eq(ah_cursor_key(v, &p, &n), 0);
				while ((rc = ah_cursor_time_next(v, &tm, &d)) == 1 &&
				       m < 256)
					td[m++] = (tl_td){ tm, d };
				cr_assert_eq(rc, 0);
				qsort(td, m, sizeof *td, tl_td_cmp);
				for (size_t i = 0; i < m; i++) {
					if (k && td[k - 1].t == td[i].t)
						td[k - 1].d += td[i].d;
					else
						td[k++] = td[i];
				}
				for (size_t i = 0; i < k; i++)
					if (td[i].d)
						put(&b, &len, &cap, " %" PRIu64
						    ":%" PRId64, td[i].t, td[i].d);
				put(&b, &len, &cap, "\n");
			}
			if (v != c) {
				cr_assert_eq(ah_cursor_close(v), 0);
				cr_assert_eq(ah_cursor_key(c, &p, &n), 0);
			}
		}
		ah_cursor_close(c);
		strcpy(prev, name);
		after = prev;
	}
	after = NULL;
	while (ah_source_next(t, after, name) == 0) {
		const void *pos;
		size_t n;

		cr_assert_eq(ah_source_get(t, name, &pos, &n), 0);
		put(&b, &len, &cap, "source %s ", name);
		put_hex(&b, &len, &cap, pos, n);
		put(&b, &len, &cap, "\n");
		strcpy(prev, name);
		after = prev;
	}
	ah_txn_abort(t);
	return b;
}

static char *text_of(ah_heap *h)
{
	return text_by(h, false);
}

static void need_native_fixture(void)
{
	uint32_t one = 1;

	if (sysconf(_SC_PAGESIZE) != 4096 || *(uint8_t *)&one != 1)
		cr_skip_test("the v1 fixture has 4 KiB pages, little endian");
}

static void fixture_copy(tl_dir *d)
{
	char src[512];

	*d = tl_tmpdir("format");
	snprintf(src, sizeof src, "%s/%s", src_dir(), FIXTURE);
	cr_assert_eq(tl_copy(src, d->path), 0, "copy %s", src);
}

/* ---------------------------------------------------------------- tests */

Test(format, fixture_generator)
{
	const char *regen = getenv("AH_FIXTURE_REGEN");
	char path[512], expect[512], *text;
	tl_dir d;
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_heap *h;

	need_native_fixture();
	snprintf(expect, sizeof expect, "%s/%s.expect", src_dir(), FIXTURE);
	d = tl_tmpdir("format");
	gen(d.path);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	text = text_of(h);
	cr_assert_eq(ah_close(h), 0);
	char *want = tl_slurp(expect);
	cr_assert_str_eq(text, want, "the generator no longer writes "
	                 "what the fixtures hold");
	free(want);
	if (regen != NULL && strcmp(regen, "1") == 0) {
		snprintf(path, sizeof path, "%s/%s", src_dir(), FIXTURE_V2);
		unlink(path);
		gen(path);
		cr_assert_eq(unlink(strcat(path, "-lock")), 0);
		printf("rewrote %s\n", FIXTURE_V2);
	}
	free(text);
	tl_rmdir(&d);
}

static void fixture_copy_of(tl_dir *d, const char *which)
{
	char src[512];

	*d = tl_tmpdir("format");
	snprintf(src, sizeof src, "%s/%s", src_dir(), which);
	cr_assert_eq(tl_copy(src, d->path), 0, "copy %s", src);
}

static uint32_t format_of(const char *path, unsigned flags)
{
	ah_open_opts o = tl_opts(flags, 0, 0);
	ah_heap_stat st;
	ah_heap *h;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(ah_close(h), 0);
	return st.format_version;
}

/* Opens a copy of the fixture: verify, text, a write, verify again. */
static void fixture_opens_as(const char *which, uint32_t format_after)
{
	tl_dir d;
	char expect[512], *text, *want;
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_heap_stat st;
	ah_heap *h;
	ah_txn *t;
	ah_update u = { "new", 3, "v", 1, 24, 1 };
	uint64_t chunks;

	need_native_fixture();
	fixture_copy_of(&d, which);
	snprintf(expect, sizeof expect, "%s/%s.expect", src_dir(), FIXTURE);
	want = tl_slurp(expect);
	cr_assert_eq(ah_open(d.path, &o, &h), 0, "this version must open %s",
	             which);
	cr_assert_eq(tl_verify(h, &chunks), 0);
	cr_assert_gt(chunks, 0);
	text = text_of(h);
	cr_assert_str_eq(text, want);
	free(text);
	text = text_by(h, true);
	cr_assert_str_eq(text, want, "point queries read what scans read");
	free(text);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.page_size, 4096);
	cr_assert_eq(st.format_version, format_after);
	/* And write to it. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "orders", 24, 25, &u, 1), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	free(want);
	tl_rmdir(&d);
}

Test(format, fixture_opens)
{
	fixture_opens_as(FIXTURE, 2);
}

Test(format, fixture_v2_opens)
{
	fixture_opens_as(FIXTURE_V2, 2);
}

/* A read-only open of a version-1 heap changes no byte and reports
 * version 1; the first writable open upgrades it to 2 (same contents), and
 * from then on its records are checked: a flipped byte in the arrangement
 * record of "orders" is AH_ECORRUPT, where in version 1 it went unseen. */
Test(format, v1_upgrade_at_writable_open)
{
	tl_dir d;
	char expect[512], *want, *text;
	uint64_t size0, size1, h0;
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info in;

	need_native_fixture();
	fixture_copy_of(&d, FIXTURE);
	h0 = tl_file_hash(d.path, &size0);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), 1);
	cr_assert_eq(tl_file_hash(d.path, &size1), h0, "a read-only open "
	             "changed the file");
	cr_assert_eq(format_of(d.path, 0), 2);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), 2);
	snprintf(expect, sizeof expect, "%s/%s.expect", src_dir(), FIXTURE);
	want = tl_slurp(expect);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	text = text_of(h);
	cr_assert_str_eq(text, want);
	cr_assert_eq(ah_close(h), 0);
	free(text);
	free(want);
	/* Every live "AHAR" record's upper byte flipped in turn. */
	ah_heap_stat st;
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(ah_close(h), 0);
	uint64_t size = st.pages_used * st.page_size;
	char *buf = malloc(size);
	int fd = open(d.path, O_RDWR);
	cr_assert_eq(pread(fd, buf, size, 0), (ssize_t)size);
	int found = 0;
	for (uint64_t i = 0; i + 16 <= size; i++) {
		if (memcmp(buf + i, "AHAR", 4) != 0)
			continue;
		char b = buf[i + 8] ^ 0x01;
		cr_assert_eq(pwrite(fd, &b, 1, (off_t)i + 8), 1);
		cr_assert_eq(ah_open(d.path, &o, &h), 0);
		cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
		int r1 = ah_arrangement_info_get(t, "orders", &in);
		int r2 = ah_arrangement_info_get(t, "lines", &in);
		int r3 = ah_arrangement_info_get(t, "bin/raw", &in);
		ah_txn_abort(t);
		cr_assert_eq(ah_close(h), 0);
		found += r1 == AH_ECORRUPT || r2 == AH_ECORRUPT || r3 == AH_ECORRUPT;
		cr_assert(r1 == 0 || r1 == AH_ECORRUPT);
		cr_assert(r2 == 0 || r2 == AH_ECORRUPT);
		cr_assert(r3 == 0 || r3 == AH_ECORRUPT);
		cr_assert_eq(pwrite(fd, &buf[i + 8], 1, (off_t)i + 8), 1);
	}
	close(fd);
	free(buf);
	cr_assert_eq(found, 3, "each of the 3 live arrangement records");
	tl_rmdir(&d);
}

static void patch32(const char *path, off_t off, uint32_t v)
{
	int fd = open(path, O_WRONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, &v, 4, off), 4);
	close(fd);
}

static uint32_t read32(const char *path, off_t off)
{
	int fd = open(path, O_RDONLY);
	uint32_t v = 0;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &v, 4, off), 4);
	close(fd);
	return v;
}

/* Both open modes refuse the file with AH_EFORMAT and leave it as it was. */
static void expect_refused(const char *path, const char *what)
{
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_heap *h = NULL;
	uint64_t size0, size1, h0 = tl_file_hash(path, &size0);

	cr_assert_eq(ah_open(path, &o, &h), AH_EFORMAT, "%s", what);
	o.flags = AH_OPEN_RDONLY;
	cr_assert_eq(ah_open(path, &o, &h), AH_EFORMAT, "%s (read-only)", what);
	o.flags = AH_OPEN_CREATE;
	cr_assert_eq(ah_open(path, &o, &h), AH_EFORMAT, "%s (create)", what);
	cr_assert_null(h);
	cr_assert_eq(tl_file_hash(path, &size1), h0, "%s: file changed", what);
	cr_assert_eq(size1, size0);
}

/* LMDB meta page fields (heap/format.c): magic at 16, page size at 40. */
Test(format, foreign_page_size)
{
	tl_dir d;
	uint32_t sizes[] = { 512, 8192, 16384, 65536 };

	need_native_fixture();
	fixture_copy(&d);
	cr_assert_eq(read32(d.path, 40), 4096);
	cr_assert_eq(read32(d.path, 4096 + 40), 4096);
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		patch32(d.path, 40, sizes[i]);
		patch32(d.path, 4096 + 40, sizes[i]);
		expect_refused(d.path, "other page size");
	}
	tl_rmdir(&d);
}

Test(format, foreign_byte_order)
{
	tl_dir d;
	uint32_t magic;

	need_native_fixture();
	fixture_copy(&d);
	magic = read32(d.path, 16);
	cr_assert_eq(magic, 0xBEEFC0DEu);
	patch32(d.path, 16, __builtin_bswap32(magic));
	patch32(d.path, 4096 + 16, __builtin_bswap32(magic));
	expect_refused(d.path, "other byte order (LMDB magic)");
	/* The page size field read the other way round, too. */
	patch32(d.path, 40, __builtin_bswap32(4096));
	patch32(d.path, 4096 + 40, __builtin_bswap32(4096));
	expect_refused(d.path, "other byte order (magic and page size)");
	tl_rmdir(&d);
}

/* The arrheap meta record's byte-order marker (heap/format.c, offset 16 of
 * the record that starts with "ARRHEAP\0"). */
Test(format, foreign_byte_order_marker)
{
	tl_dir d;
	uint64_t size;
	char *buf;
	int fd;
	off_t at = -1;

	need_native_fixture();
	fixture_copy(&d);
	tl_file_hash(d.path, &size);
	buf = malloc(size);
	fd = open(d.path, O_RDONLY);
	cr_assert_eq(pread(fd, buf, size, 0), (ssize_t)size);
	close(fd);
	for (uint64_t i = 0; i + 64 <= size; i++)
		if (memcmp(buf + i, "ARRHEAP\0", 8) == 0 &&
		    memcmp(buf + i + 8, "\1\0\0\0", 4) == 0) {
			cr_assert_eq(at, -1, "two meta records");
			at = (off_t)i;
		}
	free(buf);
	cr_assert_geq(at, 0, "meta record not found");
	cr_assert_eq(read32(d.path, at + 16), 0x01020304u);
	patch32(d.path, at + 16, 0x04030201u);
	expect_refused(d.path, "other byte order (arrheap meta record)");
	tl_rmdir(&d);
}

/* The heap is of format `before` until t commits, then of `after`. */
static void commit_makes_format(ah_heap *h, ah_txn *t, uint32_t before,
                                uint32_t after)
{
	ah_heap_stat st;

	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, before, "not before the commit");
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, after);
}

/* Format 3 (heap/heap.h): a heap of format 1 or 2 keeps its format through
 * every write until its first read hold, which makes it 3 in the same
 * commit (binaries that know only 1 and 2 refuse it, so none can compact
 * past the hold); it then holds, verifies, reads the fixture's text, and
 * stays 3 after the hold is dropped. */
static void fixture_takes_a_hold(const char *which)
{
	tl_dir d;
	char expect[512], *want, *text;
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_arrangement_info in;
	ah_heap_stat st;
	ah_heap *h;
	ah_txn *t;

	need_native_fixture();
	fixture_copy_of(&d, which);
	snprintf(expect, sizeof expect, "%s/%s.expect", src_dir(), FIXTURE);
	want = tl_slurp(expect);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 2);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "orders", &in), 0);
	cr_assert_eq(ah_hold_set(t, "orders", "reader", in.since, 0), 0,
	             "%s", ah_txn_errmsg(t));
	commit_makes_format(h, t, 2, 3);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_set_since(t, "orders", in.since + 1), AH_EFRONTIER);
	ah_txn_abort(t);
	cr_assert_eq(tl_verify(h, NULL), 0);
	text = text_of(h);
	cr_assert_str_eq(text, want);
	free(text);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_hold_drop(t, "orders", "reader"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), 3);
	free(want);
	tl_rmdir(&d);
}

Test(format, v1_fixture_takes_a_hold_as_format_3)
{
	fixture_takes_a_hold(FIXTURE);
}

Test(format, v2_fixture_takes_a_hold_as_format_3)
{
	fixture_takes_a_hold(FIXTURE_V2);
}

/* An aborted first hold leaves the file format 2. */
Test(format, aborted_first_hold_keeps_format_2)
{
	tl_dir d;
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_heap *h;
	ah_txn *t;

	need_native_fixture();
	fixture_copy_of(&d, FIXTURE_V2);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_hold_set(t, "orders", "reader", UINT64_MAX, 0), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(format_of(d.path, 0), 2);
	tl_rmdir(&d);
}

static int formats_of(const ah_batch_info *b, void *user)
{
	unsigned *n = user;

	cr_assert(b->format == 1 || b->format == 2, "format %u", b->format);
	n[b->format - 1]++;
	return 0;
}

/* Block sizes of the chunks of "orders": n[0] of 1 KiB, n[1] of a page. */
static int blocks_of(const ah_chunk_info *c, void *user)
{
	unsigned *n = user;

	cr_assert(c->block_bytes == 1024 || c->block_bytes == 4096,
	          "chunk %" PRIu64 ": blocks of %u bytes", c->id, c->block_bytes);
	n[c->block_bytes == 4096]++;
	return 0;
}

static void count_blocks(ah_heap *h, unsigned n[2])
{
	ah_txn *t;

	n[0] = n[1] = 0;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_chunk_foreach(t, "orders", blocks_of, n), 0);
	ah_txn_abort(t);
}

/* Formats 4, 5 and 7 (heap/heap.h): the transaction that writes a heap's
 * first chunk (a version-2 batch body with 1 KiB checksum blocks, in a
 * batch whose record lists its chunks' XXH3) makes it 7 (5 before format
 * 7, whence the name), and an aborted one leaves it as it was; the
 * fixture's batches say
 * format 1 (they may hold version-1 chunks) and its chunks have a block
 * per page until the merge that takes them writes version 2 in 1 KiB
 * blocks. */
Test(format, first_written_chunk_makes_format_5)
{
	tl_dir d;
	ah_open_opts o = tl_opts(0, 0, 0);
	ah_arrangement_info in;
	ah_heap_stat st;
	ah_heap *h;
	ah_txn *t;
	unsigned n[2] = { 0, 0 };
	int idle;
	ah_update u = { "k-format-4", 10, "v", 1, 0, 1 };

	need_native_fixture();
	fixture_copy_of(&d, FIXTURE_V2);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 2);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_batch_foreach(t, "orders", formats_of, n), 0);
	ah_txn_abort(t);
	cr_assert(n[0] > 0 && n[1] == 0, "%u of format 1, %u of 2", n[0], n[1]);
	count_blocks(h, n);
	cr_assert(n[0] == 0 && n[1] > 0, "%u of 1 KiB blocks, %u of 4", n[0],
	          n[1]);

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "orders", &in), 0);
	u.time = in.upper;
	cr_assert_eq(ah_append(t, "orders", in.upper, in.upper + 1, &u, 1), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 2, "an aborted append leaves format 2");
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), 2);

	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "orders", in.upper, in.upper + 1, &u, 1), 0);
	commit_makes_format(h, t, 2, 7);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_maintain(t, "orders", 0, &idle), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	n[0] = n[1] = 0;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_batch_foreach(t, "orders", formats_of, n), 0);
	ah_txn_abort(t);
	cr_assert(n[0] == 0 && n[1] == 1, "%u of format 1, %u of 2", n[0], n[1]);
	count_blocks(h, n);
	cr_assert(n[0] > 0 && n[1] == 0, "%u of 1 KiB blocks, %u of 4", n[0],
	          n[1]);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), 7);
	tl_rmdir(&d);
}

/* Appends keys "f-%06u" for [from, to) at time `at` in one txn of h
 * (committed or not). */
static ah_txn *append_keys(ah_heap *h, unsigned from, unsigned to, uint64_t at)
{
	ah_update *u = calloc(to - from, sizeof *u);
	char (*kb)[12] = calloc(to - from, sizeof *kb);
	ah_txn *t;

	cr_assert(u && kb);
	for (unsigned i = from; i < to; i++) {
		snprintf(kb[i - from], sizeof kb[i - from], "f-%06u", i);
		u[i - from] = (ah_update){ kb[i - from], 8, "v", 1, at, 1 };
	}
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", at, at + 1, u, to - from), 0);
	free(u);
	free(kb);
	return t;
}

/* Format 7 (heap/heap.h): every batch record this library writes lists
 * its chunks' XXH3, so the first batch makes a heap 7 when its
 * transaction commits, a small one (an inline filter) as a large one (a
 * filter chunk of hash 4); an arrangement alone and an aborted append
 * leave it 2.  The file says 7 after a reopen, and verifies.  (Formats 5
 * and 6, which binaries before format 7 marked, are still written for the
 * tests by batch_filter_write_hash: batch_cache::another_filters_bytes_in_its_place_are_corrupt.) */
Test(format, first_batch_makes_format_7)
{
	tl_dir d = tl_tmpdir("format7");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 0, 0);
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	commit_makes_format(h, t, 2, 2);
	ah_txn_abort(append_keys(h, 0, 1000, 0));
	ah_heap_stat st;
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 2, "an aborted append leaves format 2");
	commit_makes_format(h, append_keys(h, 0, 1000, 0), 2, 7);
	commit_makes_format(h, append_keys(h, 1000, 6000, 1), 7, 7);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), 7);
	o.flags = 0;
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	for (unsigned i = 0; i < 6000; i += 13) {
		char kb[12];
		ah_cursor *c;
		snprintf(kb, sizeof kb, "f-%06u", i);
		cr_assert_eq(ah_cursor_open_at(t, "a", kb, 8, &c), 0);
		cr_assert_eq(ah_cursor_key_valid(c), 1, "%s", kb);
		const void *k;
		size_t kl;
		cr_assert_eq(ah_cursor_key(c, &k, &kl), 0);
		cr_assert(kl == 8 && memcmp(k, kb, 8) == 0, "%s", kb);
		ah_cursor_close(c);
	}
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* Key k's sum in arrangement arr at time at (the vals' accumulations),
 * or -1000 when k is not there. */
static int64_t sum_at(ah_txn *t, const char *arr, const char *k, uint64_t at)
{
	ah_cursor *c;
	const void *kp;
	size_t kl, n = strlen(k);
	int64_t s = 0, x;

	cr_assert_eq(ah_cursor_open_at(t, arr, k, n, &c), 0);
	if (ah_cursor_key_valid(c) != 1 || ah_cursor_key(c, &kp, &kl) != 0 ||
	    kl != n || memcmp(kp, k, n) != 0) {
		ah_cursor_close(c);
		return -1000;
	}
	for (int v = ah_cursor_val_valid(c); v == 1; v = ah_cursor_step_val(c)) {
		cr_assert_eq(ah_cursor_accumulate(c, at, &x), 0);
		s += x;
	}
	ah_cursor_close(c);
	return s;
}

/* Every key of the v5 fixture: "k%05u" for i < 2000, val "v", time 0,
 * diff 1 + i % 3 (batch 1: its key filter of hash 2 in a chunk of its
 * own), plus 2 at time 1 for every 7th (batch 2: an inline filter). */
static void v5_keys_read(ah_txn *t)
{
	char k[12];

	for (unsigned i = 0; i < 2000; i++) {
		snprintf(k, sizeof k, "k%05u", i);
		cr_assert_eq(sum_at(t, "big", k, 0), 1 + (int64_t)(i % 3), "%s", k);
		cr_assert_eq(sum_at(t, "big", k, 1),
		             1 + (int64_t)(i % 3) + (i % 7 == 0 ? 2 : 0), "%s", k);
	}
	for (unsigned i = 0; i < 200; i++) {
		snprintf(k, sizeof k, "j%05u", i);
		cr_assert_eq(sum_at(t, "big", k, 1), -1000, "%s", k);
		snprintf(k, sizeof k, "k%05u", 2000 + i);
		cr_assert_eq(sum_at(t, "big", k, 1), -1000, "%s", k);
	}
}

/* A heap of format 5 or 6, written by the library before the next format
 * (its large batch's key filter is of hash 2 or 3, in a chunk of its own,
 * and its batch records list no chunk sums): read as it is (every key
 * exact, absent keys absent, verify clean, still its format after a
 * read-only open), then written to: a batch of 3,000 keys (chunk sums and
 * a filter of hash 4) makes it 7, and both kinds of filter answer in one
 * query. */
static void old_fixture_reads_as_written(const char *fixture, uint32_t format)
{
	tl_dir d;
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	ah_heap *h;
	ah_txn *t;

	need_native_fixture();
	fixture_copy_of(&d, fixture);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), format);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	v5_keys_read(t);
	ah_txn_abort(t);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), format);

	o.flags = 0;
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	ah_update *u = calloc(3000, sizeof *u);
	char (*kb)[12] = calloc(3000, sizeof *kb);
	cr_assert(u && kb);
	for (unsigned i = 0; i < 3000; i++) {
		snprintf(kb[i], sizeof kb[i], "m%05u", i);
		u[i] = (ah_update){ kb[i], 6, "w", 1, 2, 5 };
	}
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "big", 2, 3, u, 3000), 0);
	commit_makes_format(h, t, format, 7);
	free(u);
	free(kb);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	v5_keys_read(t);
	for (unsigned i = 0; i < 3000; i += 11) {
		char k[12];
		snprintf(k, sizeof k, "m%05u", i);
		cr_assert_eq(sum_at(t, "big", k, 2), 5, "%s", k);
	}
	ah_txn_abort(t);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(format_of(d.path, AH_OPEN_RDONLY), 7);
	tl_rmdir(&d);
}

Test(format, v5_fixture_reads_as_written)
{
	old_fixture_reads_as_written(FIXTURE_V5, 5);
}

/* tests/fixtures/heap-v6: the v5 fixture's contents, written by the
 * library of commit 091a03c (the last before format 7): its large
 * batch's filter is of hash 3. */
Test(format, v6_fixture_reads_as_written)
{
	old_fixture_reads_as_written(FIXTURE_V6, 6);
}

static int count_batch(const ah_batch_info *b, void *user)
{
	(void)b;
	(*(unsigned *)user)++;
	return 0;
}

/* Occurrences of pat in s. */
static unsigned occurrences(const char *s, const char *pat)
{
	unsigned n = 0;

	for (const char *p = s; (p = strstr(p, pat)) != NULL; p += strlen(pat))
		n++;
	return n;
}

/* ah-dump shows each batch's format: every batch of the format-2 fixture
 * is marked v1 in the table (and counted under it), and is format 1 in
 * the JSON. */
Test(format, ah_dump_marks_version1_batches)
{
	tl_dir d;
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	ah_heap *h;
	ah_txn *t;
	unsigned n = 0;
	char cmd[1024], want[128];
	const char *b = getenv("AH_BUILD");

	need_native_fixture();
	fixture_copy_of(&d, FIXTURE_V2);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_batch_foreach(t, "orders", count_batch, &n), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_gt(n, 1);
	for (int json = 0; json < 2; json++) {
		snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' batches orders%s",
		         b ? b : "build", d.path, json ? " --json" : "");
		FILE *p = popen(cmd, "r");
		char *out = calloc(1, 1 << 16);
		cr_assert_not_null(p);
		size_t len = fread(out, 1, (1 << 16) - 1, p);
		cr_assert_eq(pclose(p), 0, "%s", cmd);
		out[len] = '\0';
		if (json) {
			cr_assert_eq(occurrences(out, "\"format\": 1,"), n, "%s", out);
			cr_assert_eq(occurrences(out, "\"format\": 2,"), 0);
		} else {
			cr_assert_eq(occurrences(out, " v1\n"), n, "%s", out);
			snprintf(want, sizeof want, "v1: %u batches of version-1 chunks", n);
			cr_assert(strstr(out, want), "%s", out);
		}
		free(out);
	}
	tl_rmdir(&d);
}
