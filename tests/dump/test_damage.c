/*
 * tests/dump/test_damage.c - ah-dump verify against damage: single bytes
 * flipped at random offsets inside chunks (found with `chunks --json`),
 * LMDB's meta pages and a branch page of the chunks B-tree; and the bad
 * inputs of the issue (truncated heap, LMDB fault inputs, a damaged name,
 * a signal).  Verify must name the damage and exit 1, or refuse in one
 * line; never crash or hang.  (tests/fault/test_corrupt_pages.c sweeps
 * every kind of LMDB page.)
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <unistd.h>

#include "dump_util.h"
#include "tl_file.h"

/* Three arrangements with chunks of several size classes. */
static void damage_heap(const char *path)
{
	static char val[3000];
	ah_heap *h = tl_open_path(path, 0, 0);
	ah_txn *t;
	char key[32];

	memset(val, 'v', sizeof val);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	for (int a = 0; a < 3; a++) {
		char name[8];
		ah_update u[40];

		snprintf(name, sizeof name, "a%d", a);
		du_ok(ah_arrangement_create(t, name), "create");
		for (int i = 0; i < 40; i++) {
			snprintf(key, sizeof key, "key%04d", i);
			u[i] = (ah_update){ strdup(key), strlen(key), val,
			                    (size_t)(a * 900 + 10 + i), 0, 1 + i };
		}
		du_ok(ah_append(t, name, 0, 1, u, 40), "append");
		for (int i = 0; i < 40; i++)
			free((void *)u[i].key);
	}
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
}

typedef struct span {
	uint64_t id, off, len;
} span;

static int spans_of(const char *heap, span *s, int max)
{
	char *out = du_json(heap, "chunks a0", 0, "'\\n'.join('%d %d %d' % "
	                    "(c['id'], c['file_offset'], c['stored_bytes']) for "
	                    "c in d['chunks'])"), *p = out;
	int n = 0;

	for (const char *arr = "a1\0a2\0"; *arr; arr += 3) {
		char args[32], *more;

		snprintf(args, sizeof args, "chunks %s", arr);
		more = du_json(heap, args, 0, "'\\n'.join('%d %d %d' % (c['id'], "
		               "c['file_offset'], c['stored_bytes']) for c in d['chunks'])");
		out = realloc(out, strlen(out) + strlen(more) + 2);
		strcat(strcat(out, "\n"), more);
		free(more);
	}
	for (p = strtok(out, "\n"); p && n < max; p = strtok(NULL, "\n"), n++)
		cr_assert_eq(sscanf(p, "%" SCNu64 " %" SCNu64 " %" SCNu64, &s[n].id,
		                    &s[n].off, &s[n].len), 3, "%s", p);
	free(out);
	return n;
}

Test(damage, chunk_flips, .init = du_setup, .fini = du_teardown, .timeout = 60)
{
	const unsigned seed = 20240611;
	char heap[256], want[64], *out;
	span s[64];
	int n, classes = 0;
	uint32_t r = seed;

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	damage_heap(heap);
	n = spans_of(heap, s, 64);
	cr_assert_geq(n, 3, "chunks: %d", n);
	for (int i = 0; i < n; i++)
		classes |= s[i].len > 4096 ? 2 : 1;
	cr_assert_eq(classes, 3, "want chunks of one page and of more");
	cr_log_info("chunk_flips seed %u", seed);
	for (int k = 0; k < 24; k++) {
		r = r * 1103515245u + 12345u;
		const span *c = &s[(r >> 8) % (uint32_t)n];
		r = r * 1103515245u + 12345u;
		/* the first and last bytes too, then anywhere */
		uint64_t at = k == 0 ? 0 : k == 1 ? c->len - 1 : (r >> 4) % c->len;
		uint8_t mask = (uint8_t)(1u << (k % 8));

		tl_flip(heap, c->off + at, mask);
		cr_assert_eq(du_dump(heap, "verify", true, &out), 1,
		             "seed %u flip %d: chunk %" PRIu64 " +%" PRIu64 ": %s", seed,
		             k, c->id, at, out);
		snprintf(want, sizeof want, "chunk %" PRIu64 ": ", c->id);
		cr_assert(strstr(out, want), "seed %u flip %d at +%" PRIu64 ": %s",
		          seed, k, at, out);
		free(out);
		tl_flip(heap, c->off + at, mask);
	}
	cr_assert_eq(du_dump(heap, "verify", true, &out), 0, "%s", out);
	free(out);
}

/* Meta page fields (page 0 and 1; format.c draws the layout). */
static uint64_t get64(const char *path, uint64_t off)
{
	int fd = open(path, O_RDONLY);
	uint64_t v = 0;

	cr_assert_eq(pread(fd, &v, 8, (off_t)off), 8);
	close(fd);
	return v;
}

/* Verify on a damaged heap: exit 1 and either a refusal on one line or
 * problems listed; never a signal. */
static void expect_caught(const char *heap, const char *what)
{
	char *out;
	int rc = du_dump(heap, "verify", true, &out);

	cr_assert_eq(rc, 1, "%s: exit %d: %s", what, rc, out);
	cr_assert(strncmp(out, "ah-dump: ", 9) == 0 ?
	          strchr(out, '\n') == out + strlen(out) - 1 :
	          strstr(out, "problem") != NULL, "%s: %s", what, out);
	free(out);
}

Test(damage, meta_flips, .init = du_setup, .fini = du_teardown)
{
	char heap[256], cmd[600];
	/* offsets in the current meta: magic, version, page size (FREE db
	 * md_pad), main db root (high byte), last page (high byte) */
	const uint64_t fields[] = { 16, 20, 40, 128 + 5, 136 + 5 };
	const uint8_t masks[] = { 0x01, 0x02, 0x10, 0x40, 0x40 };

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	damage_heap(heap);
	snprintf(cmd, sizeof cmd, "cp '%s' '%s.orig'", heap, heap);
	cr_assert_eq(system(cmd), 0);
	for (int page = 0; page < 2; page++) {
		/* the meta with the larger txnid is the current one */
		uint64_t cur = get64(heap, 4096 + 144) > get64(heap, 144) ? 4096 : 0;
		uint64_t base = page == 0 ? cur : 4096 - cur;

		for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
			tl_flip(heap, base + fields[i], masks[i]);
			if (page == 0 || i < 3) /* the older meta's roots are unused */
				expect_caught(heap, "meta flip");
			tl_flip(heap, base + fields[i], masks[i]);
		}
	}
	cr_assert_eq(du_dump(heap, "verify", false, NULL), 0, "restored");
}

/* Page header (LMDB MDB_page): mp_pgno u64, pad u16, mp_flags u16 at 10,
 * mp_lower u16 at 12; node offsets u16[] from 16.  A node: lo u16, hi u16,
 * flags u16, ksize u16, key, then (leaf) data; a branch node's child page
 * is lo | hi << 16 | flags << 32. */
static uint16_t get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

/* Finds the root page of named DB "chunks" through the current meta and
 * the main DB's root leaf; returns its page number, depth in *depth. */
static uint64_t chunks_root(const char *heap, uint16_t *depth)
{
	uint8_t page[4096];
	uint64_t cur = get64(heap, 4096 + 144) > get64(heap, 144) ? 4096 : 0;
	uint64_t main_root = get64(heap, cur + 128);
	int fd = open(heap, O_RDONLY);

	cr_assert_eq(pread(fd, page, sizeof page, (off_t)(main_root * 4096)), 4096);
	close(fd);
	cr_assert_eq(get16(page + 10) & 0x02, 0x02, "main root is a leaf");
	for (int i = 0; i < (get16(page + 12) - 16) / 2; i++) {
		const uint8_t *node = page + get16(page + 16 + 2 * i);
		uint64_t root;

		if (get16(node + 6) != 6 || memcmp(node + 8, "chunks", 6) != 0)
			continue;
		memcpy(depth, node + 8 + 6 + 6, 2);    /* MDB_db.md_depth */
		memcpy(&root, node + 8 + 6 + 40, 8);  /* MDB_db.md_root */
		return root;
	}
	cr_assert_fail("no chunks DB in the main DB");
	return 0;
}

/* 300 one-chunk arrangements in one commit: the chunks B-tree gets a branch
 * root, and no stale copy of it exists in the file. */
Test(damage, branch_flips, .init = du_setup, .fini = du_teardown)
{
	char heap[256];
	ah_heap *h;
	ah_txn *t;
	uint16_t depth = 0;
	uint64_t root, off;
	uint8_t page[4096];
	int fd;

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	h = tl_open_path(heap, 0, 0);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	for (int a = 0; a < 300; a++) {
		char name[8];
		ah_update u = { name, 4, "v", 1, 0, 1 };

		snprintf(name, sizeof name, "a%03d", a);
		du_ok(ah_arrangement_create(t, name), "create");
		du_ok(ah_append(t, name, 0, 1, &u, 1), "append");
	}
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	cr_assert_eq(du_dump(heap, "verify", false, NULL), 0);
	root = chunks_root(heap, &depth);
	cr_assert_geq(depth, 2, "depth %u", depth);
	fd = open(heap, O_RDONLY);
	cr_assert_eq(pread(fd, page, sizeof page, (off_t)(root * 4096)), 4096);
	close(fd);
	cr_assert_eq(get16(page + 10), 0x01, "root is a branch page");
	cr_assert_eq(get64(heap, root * 4096), root, "page number");
	/* the flags (neither branch nor leaf: MDB_CORRUPTED) */
	tl_flip(heap, root * 4096 + 10, 0x01);
	expect_caught(heap, "branch flags");
	tl_flip(heap, root * 4096 + 10, 0x01);
	/* each child pointer, high bits (beyond the file: MDB_PAGE_NOTFOUND) */
	for (int i = 0; i < (get16(page + 12) - 16) / 2; i++) {
		off = root * 4096 + get16(page + 16 + 2 * i) + 3; /* hi's top byte */
		tl_flip(heap, off, 0x40);
		expect_caught(heap, "branch child");
		tl_flip(heap, off, 0x40);
	}
	cr_assert_eq(du_dump(heap, "verify", false, NULL), 0, "restored");
}

/* A heap cut short, and inputs that made LMDB itself fault (tests/fuzz/lmdb
 * holds such files found by the raw fuzzer; heap_open's page check now
 * refuses them): one line, exit 1. */
Test(damage, truncated_and_lmdb_faults, .init = du_setup, .fini = du_teardown)
{
	char heap[256], cmd[1024], *out;
	const char *cmds[] = { "", "verify", "space", "read a0", "chunks a0" };

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	damage_heap(heap);
	cr_assert_eq(truncate(heap, 8192 + 4096), 0);
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		cr_assert_eq(du_dump(heap, cmds[i], true, &out), 1, "%s: %s", cmds[i], out);
		cr_assert(strncmp(out, "ah-dump: ", 9) == 0 &&
		          strchr(out, '\n') == out + strlen(out) - 1, "%s", out);
		free(out);
	}
	snprintf(cmd, sizeof cmd, "for f in '%s'/tests/fuzz/lmdb/*; do cp \"$f\" "
	         "'%s/x' && rm -f '%s/x-lock' && '%s/ah-dump' '%s/x' verify; "
	         "[ $? = 1 ] || exit 9; done", tl_src(), du_tmp.dir, du_tmp.dir, tl_build(),
	         du_tmp.dir);
	cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s", out);
	free(out);
}

/* Item 14: a damaged arrangement name (a byte no name may hold, in the
 * table's last key, so the order is kept and the pages pass) is reported
 * by verify, and printed in the escape of keys, in text and in JSON. */
Test(damage, verify_escapes_damaged_names, .init = du_setup,
     .fini = du_teardown)
{
	char heap[256], *out;
	ah_heap *h;
	ah_txn *t;
	uint8_t *buf, *at = NULL;
	size_t len;
	int hits = 0;

	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE,
	                   .max_bytes = 4 << 20 }; /* the file's size */

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	du_ok(ah_open(heap, &o, &h), "open");
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "a1"), "create");
	du_ok(ah_arrangement_create(t, "zz-escape"), "create");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	buf = (uint8_t *)tl_read(heap, &len);
	for (uint8_t *p = buf; (p = memmem(p, (size_t)(buf + len - p), "zz-escape",
	                                   9)); p++, hits++)
		at = p;
	cr_assert_eq(hits, 1, "the name is stored %d times", hits);
	tl_flip(heap, (uint64_t)(at - buf) + 8, 'e' ^ 0xfa); /* "zz-escap\xfa" */
	free(buf);
	cr_assert_eq(du_dump(heap, "verify", true, &out), 1, "%s", out);
	/* Its record's check names it (the name is part of the check), and
	 * so does the name rule; the names digest no longer matches the table
	 * (a problem of no one arrangement). */
	cr_assert(strstr(out, "problem: arrangement zz-escap\\xfa: arrangement "
	                      "record checksum mismatch (its name or bytes are "
	                      "damaged)\n"), "%s", out);
	cr_assert(strstr(out, "problem: arrangement zz-escap\\xfa: arrangement "
	                      "table: a stored name of 9 bytes that is no valid "
	                      "name\n"), "%s", out);
	free(out);
	out = du_json(heap, "verify", 1, "[p['arrangement'] for p in d['problems']]");
	cr_assert_str_eq(out, "['zz-escap\\\\xfa', 'zz-escap\\\\xfa', '']");
	free(out);
}

/* Item 9: SIGABRT (liblmdb's assertions) ends ah-dump like SIGBUS: one
 * line naming the damage, exit 1.  The signal is sent while `read` blocks
 * on a full pipe, so the handler is certainly installed. */
Test(damage, abort_is_reported, .init = du_setup, .fini = du_teardown)
{
	static ah_update u[8000];
	static char keys[8000][16];
	char heap[256], tool[512], errf[300], line[600];
	int out[2], st;
	ah_heap *h;
	ah_txn *t;
	pid_t pid;
	FILE *f;

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	snprintf(errf, sizeof errf, "%s/err", du_tmp.dir);
	h = tl_open_path(heap, 0, 0);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "big"), "create");
	for (int i = 0; i < 8000; i++) { /* 200 KB of rows: the pipe fills */
		snprintf(keys[i], sizeof keys[i], "key%06d", i);
		u[i] = (ah_update){ keys[i], 9, "some value", 10, 0, 1 };
	}
	du_ok(ah_append(t, "big", 0, 1, u, 8000), "append");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	snprintf(tool, sizeof tool, "%s/ah-dump", tl_build());
	cr_assert_eq(pipe(out), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int e = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(out[1], 1);
		dup2(e, 2);
		close(out[0]);
		execl(tool, tool, heap, "read", "big", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	cr_assert_eq(read(out[0], line, 1), 1); /* it writes: it is guarded */
	cr_assert_eq(kill(pid, SIGABRT), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	close(out[0]);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status 0x%x", st);
	f = fopen(errf, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(line, sizeof line, f));
	cr_assert(strstr(line, "heap corrupt") && strstr(line, "SIGABRT"), "%s",
	          line);
	cr_assert_null(fgets(line, sizeof line, f), "one line only");
	fclose(f);
}

/* A chunk whose header fails its checks when a cursor first reads it:
 * read and keys must fail, not print the arrangement as empty. */
Test(damage, read_fails_on_a_damaged_chunk, .init = du_setup,
     .fini = du_teardown)
{
	char heap[256], *out;
	span s[64];
	const char *cmds[] = { "read a0", "keys a0", "read a0 --json",
	                       "keys a0 --limit 100" };

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	damage_heap(heap);
	cr_assert_geq(spans_of(heap, s, 64), 1);
	tl_flip(heap, s[0].off + 8, 0x01); /* chunk magic of a0's first chunk */
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		cr_assert_eq(du_dump(heap, cmds[i], true, &out), 1, "%s: %s",
		             cmds[i], out);
		cr_assert(strstr(out, "heap corrupt"), "%s: %s", cmds[i], out);
		free(out);
	}
}
