/*
 * tools/ah-dump.c - looks inside a heap, read only: the way mdb_stat,
 * pg_waldump or sqlite3_analyzer do for theirs (`ah-dump --help` and
 * tools/ah-dump.1 document every command and field).
 *
 * Every command runs in one read transaction of a heap opened with
 * AH_OPEN_RDONLY, so it sees one commit and never blocks or disturbs a
 * writer, also one in another process.  This file is only the program:
 * arguments, the command table (name, usage, handler) and main; the
 * handlers and what they share (opening the heap behind the page check and
 * the signal guard, errors, escapes) are in tools/dump/.  Adding a command
 * is adding a row.
 *
 * A thin program over include/arrheap.h.  Bad input (a missing file, a
 * directory, a file that is no heap, a damaged heap) is a one-line error
 * and exit 1; a usage error exits 2.  Never crashes on what it reads.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

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
	dump d = { 0 };
	const command *cmd = NULL;
	const char *cname;
	int status;

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
	if ((status = dump_open(&d, cmd->run != cmd_verify)) != 0)
		return dump_close(&d, status);
	status = cmd->run(&d, argc > 2 ? argc - 3 : 0, argv + 3);
	if (status == 2) {
		fprintf(stderr, "usage: ah-dump HEAP %s [--json]\n", cmd->usage);
	} else if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "ah-dump: write error: %s\n", strerror(errno));
		status = 1;
	}
	return dump_close(&d, status);
}
