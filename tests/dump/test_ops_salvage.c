/*
 * tests/dump/test_ops_salvage.c - `ah-dump HEAP salvage OUT`, exact
 * output: a sound heap is copied whole (frontiers, contents at every
 * readable time, source positions; a UUID of its own); a heap with a
 * damaged chunk (a byte flipped at a seeded random offset inside a's
 * chunk) leaves a behind, names the problem, copies no source position
 * and exits 1, while every other arrangement reads the same in OUT; the
 * errors (OUT exists, no such directory, usage) leave nothing behind.
 */
#include <inttypes.h>

#include "tests/dump/ops_util.h"

static char heap[300], out[300];

static void setup(void)
{
	du_setup();
	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	snprintf(out, sizeof out, "%s/out", du_tmp.dir);
	ops_heap(heap);
}

/* What a reader can know of arrangement NAME: frontiers, and its contents
 * at every readable time.  Caller frees. */
static char *state(const char *path, const char *name)
{
	char args[200], expr[300], *acc;
	unsigned long long upper, since;

	snprintf(expr, sizeof expr, "[' '.join(map(str, (a['upper'], "
	         "a['since']))) for a in d['arrangements'] if a['name'] == "
	         "'%s'][0]", name);
	acc = du_json(path, "", 0, expr);
	cr_assert_eq(sscanf(acc, "%llu %llu", &upper, &since), 2, "%s", acc);
	for (unsigned long long t = since; t < upper && t < since + 12; t++) {
		char *rows;
		size_t len;

		snprintf(args, sizeof args, "read %s --as-of %llu", name, t);
		cr_assert_eq(du_dump(path, args, true, &rows), 0, "%s", rows);
		len = strlen(acc) + strlen(rows) + 32;
		acc = realloc(acc, len);
		snprintf(acc + strlen(acc), len - strlen(acc), "\n@%llu\n%s", t, rows);
		free(rows);
	}
	return acc;
}

static void same(const char *name)
{
	char *a = state(heap, name), *b = state(out, name);

	cr_assert_str_eq(b, a, "%s", name);
	free(a);
	free(b);
}

static char *ls(void)
{
	char cmd[400], *o;

	/* (the tests' own files: out.json, check.py, stderr.txt) */
	snprintf(cmd, sizeof cmd, "cd '%s' && ls | grep -v -e '[.]json$' -e "
	         "'[.]py$' -e '[.]txt$' | tr '\\n' ' '", du_tmp.dir);
	cr_assert_eq(tl_sh(cmd, false, &o), 0);
	return o;
}

static void expect(const char *args, int rc_want, const char *want_out,
                   const char *want_err)
{
	char cmd[1200], *o, *e;
	int rc;

	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s", tl_build(), heap, args);
	rc = ops_run(cmd, &o, &e);
	cr_assert_eq(rc, rc_want, "%s: %d\n%s\n%s", args, rc, o, e);
	cr_assert_str_eq(o, want_out, "%s: stdout:\n%s", args, o);
	cr_assert_str_eq(e, want_err, "%s: stderr:\n%s", args, e);
	free(o);
	free(e);
}

Test(ops_salvage, sound_heap_copied_whole, .init = setup, .fini = du_teardown)
{
	char args[400], want[2048], *a, *b;

	snprintf(args, sizeof args, "salvage '%s'", out);
	snprintf(want, sizeof want,
	         "salvaged a: upper 4, since 3, 8 updates stored\n"
	         "salvaged bin: upper 10, since 0, 1 update stored\n"
	         "salvaged c: upper 5, since 5, 1 update stored\n"
	         "salvaged e: upper 0, since 0, 0 updates stored\n"
	         "source big: position copied\n"
	         "source bin: position copied\n"
	         "source lines: position copied\n"
	         "source s: position copied\n"
	         "salvage %s: complete: 4 arrangements and 4 source positions "
	         "copied; verified\n", out);
	expect(args, 0, want, "");
	for (const char *n = "a\0bin\0c\0e\0"; *n; n += strlen(n) + 1)
		same(n);
	/* c has no readable time; once both uppers advance it reads the same:
	 * its update, advanced to since 5. */
	expect("advance c 6", 0, "c: upper 5 -> 6 (no data: an empty batch; "
	       "since 5)\n", "");
	ops_expect(out, "advance c 6", 0, "c: upper 5 -> 6 (no data: an empty "
	           "batch; since 5)\n", "");
	same("c");
	ops_expect(out, "read c", 0, "k\tv\t1\n", "");
	a = du_json(heap, "", 0, "d['sources'], d['uuid']");
	b = du_json(out, "", 0, "d['sources'], d['uuid']");
	cr_assert_str_neq(a, b, "a UUID of its own");
	*strrchr(a, ' ') = 0;
	*strrchr(b, ' ') = 0;
	cr_assert_str_eq(a, b, "the same positions");
	free(a);
	free(b);
	du_json_eq(out, "verify", "d['ok']", "True");
	a = ls();
	cr_assert_str_eq(a, "h h-lock out out-lock ");
	free(a);
	/* OUT exists now. */
	snprintf(want, sizeof want, "ah-dump: salvage %s: file exists\n", out);
	expect(args, 1, "", want);
}

Test(ops_salvage, damaged_arrangement_left_behind, .init = setup,
     .fini = du_teardown)
{
	unsigned seed = getenv("AH_SEED") ? (unsigned)atoi(getenv("AH_SEED"))
	                                  : 16061u;
	unsigned long long off, len;
	char args[400], want[4096], *j, *msg;
	unsigned char byte;
	int fd;

	cr_log_info("seed %u (replay: AH_SEED=%u)", seed, seed);
	srand(seed);
	j = du_json(heap, "chunks a", 0, "' '.join(str(c[k]) for c in d['chunks'] "
	            "for k in ('file_offset', 'bytes'))");
	cr_assert_eq(sscanf(j, "%llu %llu", &off, &len), 2, "%s", j);
	free(j);
	off += (unsigned long long)rand() % len; /* a byte of the body in use */
	fd = open(heap, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &byte, 1, (off_t)off), 1);
	byte ^= 0x10;
	cr_assert_eq(pwrite(fd, &byte, 1, (off_t)off), 1);
	close(fd);
	msg = du_json(heap, "verify", 1, "'batch %d, chunk %d: %s' % "
	              "(d['problems'][0]['batch'], d['problems'][0]['chunk'], "
	              "d['problems'][0]['message']) if d['problems'][0]['chunk'] "
	              "else 'batch %d: %s' % (d['problems'][0]['batch'], "
	              "d['problems'][0]['message'])");
	snprintf(args, sizeof args, "salvage '%s'", out);
	snprintf(want, sizeof want,
	         "left behind a: verify: %s\n"
	         "salvaged bin: upper 10, since 0, 1 update stored\n"
	         "salvaged c: upper 5, since 5, 1 update stored\n"
	         "salvaged e: upper 0, since 0, 0 updates stored\n"
	         "source big: position not copied: it would claim data of what was "
	         "left behind\n"
	         "source bin: position not copied: it would claim data of what was "
	         "left behind\n"
	         "source lines: position not copied: it would claim data of what "
	         "was left behind\n"
	         "source s: position not copied: it would claim data of what was "
	         "left behind\n"
	         "salvage %s: partial: 3 of 4 arrangements, 0 of 4 source "
	         "positions; left behind: arrangement a, source big, source bin, "
	         "source lines, source s\n"
	         "salvage %s: no source positions: do not resume an engine on it "
	         "(it would start its sources over into arrangements that already "
	         "hold their data); read what survived, rebuild the rest from the "
	         "sources\n", msg, out, out);
	expect(args, 1, want, "");
	cr_log_info("seed %u: flipped byte %llu", seed, off);
	free(msg);
	for (const char *n = "bin\0c\0e\0"; *n; n += strlen(n) + 1)
		same(n);
	ops_expect(out, "arrangements", 0, "bin\nc\ne\n", "");
	du_json_eq(out, "", "d['sources']", "[]");
	du_json_eq(out, "verify", "d['ok']", "True");
	/* The same in JSON, into another OUT. */
	snprintf(args, sizeof args, "salvage '%s/out2'", du_tmp.dir);
	{
		char *got = du_json(heap, args, 1, "[(a['name'], a['salvaged']) for a "
		                    "in d['arrangements']], [(s['name'], s['copied']) "
		                    "for s in d['sources']], d['positions_copied'], "
		                    "d['complete'], d['heap_problems'], "
		                    "d['arrangements'][0]['reason'][:8]");

		cr_assert_str_eq(got, "[('a', False), ('bin', True), ('c', True), "
		                 "('e', True)] [('big', False), ('bin', False), "
		                 "('lines', False), ('s', False)] False False 0 verify: ");
		free(got);
	}
}

Test(ops_salvage, errors_leave_nothing, .init = setup, .fini = du_teardown)
{
	char args[400], want[600], *l;

	snprintf(args, sizeof args, "salvage '%s/no/such'", du_tmp.dir);
	snprintf(want, sizeof want, "ah-dump: salvage %s/no/such: no such "
	         "directory\n", du_tmp.dir);
	expect(args, 1, "", want);
	expect("salvage", 2, "", "usage: ah-dump HEAP salvage OUT [--json] "
	       "[--hex]\n");
	expect("salvage a b", 2, "", "usage: ah-dump HEAP salvage OUT [--json] "
	       "[--hex]\n");
	snprintf(args, sizeof args, "salvage '%s'", heap);
	snprintf(want, sizeof want, "ah-dump: salvage %s: file exists\n", heap);
	expect(args, 1, "", want);
	l = ls();
	cr_assert_str_eq(l, "h h-lock ");
	free(l);
}
