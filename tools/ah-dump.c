/*
 * tools/ah-dump.c - looks inside a heap, read only: the way mdb_stat,
 * pg_waldump or sqlite3_analyzer do for theirs (`ah-dump --help` and
 * tools/ah-dump.1 document every command and field).
 *
 * Every command runs in one read transaction of a heap opened with
 * AH_OPEN_RDONLY, so it sees one commit and never blocks or disturbs a
 * writer, also one in another process.  Commands live in a table (name,
 * usage, handler; the handlers in tools/dump/): adding one is adding a row.
 *
 * A thin program over include/arrheap.h.  Bad input (a missing file, a
 * directory, a file that is no heap, a damaged heap) is a one-line error
 * and exit 1; a usage error exits 2.  Never crashes on what it reads.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/common/escape.h"
#include "tools/common/parse.h"
#include "tools/dump/dump.h"

typedef struct command {
	const char *name;
	const char *usage;
	int (*run)(dump *d, int argc, char **argv);
} command;

static const command commands[] = {
	{ "", "", cmd_summary },
	{ "arrangements", "arrangements", cmd_arrangements },
	{ "batches", "batches NAME", cmd_batches },
	{ "chunks", "chunks NAME", cmd_chunks },
	{ "read", "read NAME [--as-of T]", cmd_read },
	{ "keys", "keys NAME [--prefix P] [--limit N]", cmd_keys },
	{ "get", "get NAME KEY [--as-of T]", cmd_get },
	{ "verify", "verify", cmd_verify },
	{ "space", "space", cmd_space },
	{ "backup", "backup OUT", cmd_backup },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char help_text[] =
"usage: ah-dump HEAP [COMMAND [ARGS]] [--json]\n"
"Looks inside an arrheap heap, read only, in one snapshot; never blocks a\n"
"writer.  Exit 0 on success, 1 on an error (one line on stderr) or when\n"
"verify finds a problem, 2 on a usage error.  Sizes: B/KiB/MiB/GiB.\n"
"Every command but verify first checks LMDB's pages (every B-tree page and\n"
"the first page of each chunk) and refuses a damaged heap in one line.\n"
"KEY, P and printed keys/vals use the changelog escape: \\\\ \\t \\n \\xHH.\n"
"--json prints one JSON document; its field names are listed below.\n"
"\n"
"ah-dump HEAP\n"
"    summary.  Lines \"arrangement NAME: upper, since, batches, updates, keys\n"
"    (summed over batches), bytes\" and \"source NAME: position P\" (as text\n"
"    when printable, else hex:...), then the heap: format version, uuid,\n"
"    apparent/allocated file size, map size, pages used/free, last commit,\n"
"    reader slots in use.\n"
"    json: heap format_version uuid page_size file_bytes file_alloc_bytes\n"
"      map_bytes pages_used pages_free last_txn_id readers_used readers_max\n"
"      arrangements[]{name upper since batches merging updates keys chunks\n"
"      bytes chunk_bytes} sources[]{name position(null if not text)\n"
"      position_hex}\n"
"ah-dump HEAP arrangements\n"
"    arrangement names, one per line.   json: arrangements[] (names)\n"
"ah-dump HEAP batches NAME\n"
"    each batch, oldest first, then merges in progress (marked *): id,\n"
"    Description lower/upper/since, updates, keys, vals, chunks, bytes used.\n"
"    json: arrangement batches[]{id lower upper since updates keys vals\n"
"      chunks bytes chunk_bytes partial}\n"
"ah-dump HEAP chunks NAME\n"
"    every chunk of NAME: id, batch, size class (pages), body bytes used,\n"
"    file offset of its first byte, stored xxh3 (hex).\n"
"    json: arrangement chunks[]{id batch class_pages bytes stored_bytes\n"
"      file_offset xxh3}   (stored_bytes: the checksummed span in the file)\n"
"ah-dump HEAP read NAME [--as-of T]\n"
"    KEY<TAB>VAL<TAB>DIFF per (key, val) with a non-zero sum as of T\n"
"    (default: upper - 1), sorted by key then val.\n"
"    json: arrangement as_of rows[]{key val diff}\n"
"ah-dump HEAP keys NAME [--prefix P] [--limit N]\n"
"    keys stored in some batch (their sum may be zero), sorted, one per\n"
"    line; only those starting with P; at most N.\n"
"    json: arrangement keys[] truncated (true: --limit cut the list)\n"
"ah-dump HEAP get NAME KEY [--as-of T]\n"
"    VAL<TAB>DIFF per val of KEY with a non-zero sum as of T.\n"
"    json: arrangement key as_of vals[]{val diff}\n"
"ah-dump HEAP verify\n"
"    checks LMDB's pages (trees, free list, page accounting), then\n"
"    recomputes every chunk checksum and checks every invariant (sorted,\n"
"    consolidated, no zero diff, offsets in bounds, contiguous batches,\n"
"    upper/since, each chunk and batch referenced once, none leaked).\n"
"    Prints each problem naming arrangement, batch and chunk; exit 1 if any.\n"
"    json: problems[]{arrangement batch chunk message} (0/\"\": none) ok\n"
"      arrangements batches chunks chunk_bytes seconds\n"
"ah-dump HEAP space\n"
"    where the pages go: chunks, B-trees, free list (runs, largest run),\n"
"    pages pinned by the oldest other reader; per arrangement; readers.\n"
"    json: page_size file_bytes pages_used chunk_pages chunks tree_pages\n"
"      pages_free pages_pinned free_runs free_largest_run last_txn_id\n"
"      oldest_reader{pid txn_id age}|null arrangements[]{name batches\n"
"      chunks bytes chunk_bytes} readers[]{pid thread txn_id age self}\n"
"      (age: commits since the reader's snapshot; txn_id 0: idle slot)\n"
"ah-dump HEAP backup OUT\n"
"    writes a compacted hot copy of the latest commit to the new file OUT;\n"
"    the copy is a heap (restore: open it).   json: backup bytes\n";

static void usage(FILE *f)
{
	fputs(help_text, f);
}

void dump_json_list(dump *d, const char *arrangement, const char *key)
{
	if (!d->json)
		return;
	tj_obj(&d->j);
	if (arrangement)
		tj_kstr(&d->j, "arrangement", arrangement);
	tj_key(&d->j, key);
	tj_arr(&d->j);
}

int dump_lib_error(dump *d, int rc, const char *what)
{
	const char *detail = d->txn ? ah_txn_errmsg(d->txn) : "";

	fprintf(stderr, "ah-dump: %s: %s: %s\n", d->heap_path, what,
	        *detail ? detail : ah_strerror(rc));
	return 1;
}

const char *dump_escape(dump *d, const void *p, size_t len)
{
	size_t need = TOOL_ESCAPE_MAX(len) + 1;

	if (need > d->buf_cap) {
		char *b = realloc(d->buf, need);

		if (!b) {
			fprintf(stderr, "ah-dump: out of memory\n");
			return NULL;
		}
		d->buf = b;
		d->buf_cap = need;
	}
	d->buf[tool_escape(p, len, d->buf)] = '\0';
	return d->buf;
}

int dump_renew(dump *d)
{
	ah_txn_abort(d->txn);
	d->txn = NULL;
	return ah_txn_begin(d->heap, AH_TXN_RDONLY, &d->txn);
}

int dump_parse_u64(const char *opt, const char *s, uint64_t *out)
{
	if (tool_parse_u64(s, strlen(s), out) == 0)
		return 0;
	fprintf(stderr, "ah-dump: bad %s \"%s\": a decimal uint64\n", opt, s);
	return -1;
}

/* A clear message for the common mistakes before LMDB sees the path. */
static int check_path(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "ah-dump: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "ah-dump: %s: %s\n", path, S_ISDIR(st.st_mode) ?
		        "is a directory, not a heap file" : "not a regular file");
		return -1;
	}
	return 0;
}

/* LMDB trusts its tree pages: a damaged one can make it read past the end
 * of the file (SIGBUS) or of the map (SIGSEGV), or fail one of its own
 * assertions (SIGABRT).  Every command first checks the pages
 * (check_pages), so this is the last line of defence, for damage the check
 * cannot see or that appears after it: for a read-only tool the right
 * answer is still one line and exit 1, so such a signal ends the run with a
 * prepared message. */
static const int fault_sigs[] = { SIGBUS, SIGSEGV, SIGABRT };
static const char *const fault_names[] = { "SIGBUS", "SIGSEGV", "SIGABRT" };
#define NFAULTS (sizeof fault_sigs / sizeof *fault_sigs)
static char fault_msg[NFAULTS][600];
static size_t fault_len[NFAULTS];

static void on_fault(int sig)
{
	for (size_t i = 0; i < NFAULTS; i++)
		if (sig == fault_sigs[i] &&
		    write(STDERR_FILENO, fault_msg[i], fault_len[i]) < 0)
			_exit(1);
	_exit(1);
}

static void guard_faults(const char *path)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_fault;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < NFAULTS; i++) {
		int n = snprintf(fault_msg[i], sizeof fault_msg[i], "ah-dump: %s: "
		                 "%s (LMDB stopped on a damaged page: %s)\n", path,
		                 ah_strerror(AH_ECORRUPT), fault_names[i]);

		fault_len[i] = n > 0 && (size_t)n < sizeof fault_msg[i] ? (size_t)n
		                                                         : 0;
		sigaction(fault_sigs[i], &sa, NULL);
	}
}

static int first_problem(const ah_problem *p, void *user)
{
	char *msg = user;

	if (!*msg)
		snprintf(msg, 400, "%s", p->message);
	return 0;
}

/* Every command but verify (which reports each problem) reads LMDB's trees
 * only after ah_verify_pages found them sound: a damaged heap is one line
 * and exit 1, never a wrong answer, a hang or a fault. */
static int check_pages(dump *d)
{
	char msg[400] = "";
	ah_page_stats ps;
	int rc = ah_verify_pages(d->txn, first_problem, msg, &ps);

	for (int tries = 0; rc == AH_EBUSY && tries < 3; tries++)
		if ((rc = dump_renew(d)) == 0)
			rc = ah_verify_pages(d->txn, first_problem, msg, &ps);
	if (rc < 0)
		return dump_lib_error(d, rc, "check LMDB pages");
	if (ps.problems == 0)
		return 0;
	fprintf(stderr, "ah-dump: %s: %s: %s (ah-dump %s verify lists every "
	        "problem)\n", d->heap_path, ah_strerror(AH_ECORRUPT), msg,
	        d->heap_path);
	return 1;
}

/* Removes --json from argv (anywhere after HEAP); returns the new argc. */
static int take_json(int argc, char **argv, bool *json)
{
	int n = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") && i > 1)
			*json = true;
		else
			argv[n++] = argv[i];
	}
	return n;
}

int main(int argc, char **argv)
{
	ah_open_opts opts = { .size = sizeof(opts), .flags = AH_OPEN_RDONLY };
	dump d = { 0 };
	const command *cmd = NULL;
	const char *cname;
	int status = 1, rc;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
	argc = take_json(argc, argv, &d.json);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	d.heap_path = argv[1];
	cname = argc > 2 ? argv[2] : "";
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, cname))
			cmd = &commands[i];
	if (!cmd) {
		fprintf(stderr, "ah-dump: unknown command \"%s\" (see ah-dump "
		        "--help)\n", cname);
		return 2;
	}
	if (check_path(d.heap_path) < 0)
		return 1;
	guard_faults(d.heap_path);
	rc = ah_open(d.heap_path, &opts, &d.heap);
	if (rc < 0) {
		fprintf(stderr, "ah-dump: %s: %s\n", d.heap_path, ah_strerror(rc));
		return 1;
	}
	tj_init(&d.j, stdout);
	rc = ah_txn_begin(d.heap, AH_TXN_RDONLY, &d.txn);
	if (rc < 0) {
		dump_lib_error(&d, rc, "begin read transaction");
		goto out;
	}
	if (cmd->run != cmd_verify && (status = check_pages(&d)) != 0)
		goto out;
	status = cmd->run(&d, argc > 2 ? argc - 3 : 0, argv + 3);
	if (status == 2) {
		fprintf(stderr, "usage: ah-dump HEAP %s [--json]\n", cmd->usage);
		goto out;
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "ah-dump: write error: %s\n", strerror(errno));
		status = 1;
	}
out:
	ah_txn_abort(d.txn);
	if (ah_close(d.heap) < 0 && status == 0) {
		fprintf(stderr, "ah-dump: %s: close failed\n", d.heap_path);
		status = 1;
	}
	free(d.buf);
	return status;
}
