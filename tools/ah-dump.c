/*
 * tools/ah-dump.c - looks inside a heap the way mdb_stat, pg_waldump or
 * sqlite3_analyzer do for theirs, and does the few things an operator
 * must be able to do to one without writing a program (`ah-dump --help`
 * and tools/ah-dump.1 document every command and field).
 *
 * Reading commands run in one read transaction of a heap opened with
 * AH_OPEN_RDONLY, so they see one commit and never block or disturb a
 * writer, also one in another process.  The write commands (since,
 * advance, maintain, drop) open it for writing and run in one write
 * transaction, which waits for LMDB's writer lock like any writer;
 * salvage writes only a new heap.  This file is only the program:
 * arguments, the command table (name, usage, what it opens, handler) and
 * main; the handlers and what they share are in tools/dump/.  Adding a
 * command is adding a row.
 *
 * A thin program over include/arrheap.h.  Bad input (a missing file, a
 * directory, a file that is no heap, a damaged heap) is a one-line error
 * and exit 1, a usage error exits 2; with --json either is the document's
 * "error" member on stdout.  Never crashes on what it reads.
 *
 * It must never open the heap for writing for a command the table does not
 * mark WRITE, and never run any command but verify or salvage before the
 * page check found LMDB's trees sound.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/escape.h"
#include "tools/dump/dump.h"

enum { CHECK = 1, WRITE = 2 };

typedef struct command {
	const char *name;
	const char *usage;
	unsigned flags;   /* CHECK: the page check first; WRITE: open to write */
	int (*run)(dump *d, int argc, char **argv);
} command;

static const command commands[] = {
	{ "", "", CHECK, cmd_summary },
	{ "arrangements", "arrangements", CHECK, cmd_arrangements },
	{ "batches", "batches NAME", CHECK, cmd_batches },
	{ "chunks", "chunks NAME", CHECK, cmd_chunks },
	{ "read", "read NAME [--as-of T] [RANGE] [--limit N | --count]", CHECK,
	  cmd_read },
	{ "keys", "keys NAME [RANGE] [--limit N | --count]", CHECK, cmd_keys },
	{ "get", "get NAME KEY [--as-of T]", CHECK, cmd_get },
	{ "history", "history NAME KEY [--val V]", CHECK, cmd_history },
	{ "updates", "updates NAME --batch ID [RANGE] [--limit N | --count]",
	  CHECK, cmd_updates },
	{ "source", "source NAME", CHECK, cmd_source },
	{ "holds", "holds [NAME]", CHECK, cmd_holds },
	{ "verify", "verify", 0, cmd_verify },
	{ "space", "space [--scan]", CHECK, cmd_space },
	{ "backup", "backup OUT [--same-uuid]", CHECK, cmd_backup },
	{ "salvage", "salvage OUT", 0, cmd_salvage },
	{ "since", "since NAME SINCE", CHECK | WRITE, cmd_since },
	{ "advance", "advance NAME UPPER", CHECK | WRITE, cmd_advance },
	{ "maintain", "maintain NAME [--fuel N]", CHECK | WRITE, cmd_maintain },
	{ "drop", "drop NAME", CHECK | WRITE, cmd_drop },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char help_text[] =
"usage: ah-dump HEAP [COMMAND [ARGS]] [--json] [--hex]\n"
"       ah-dump --help | --version\n"
"Looks inside an arrheap heap, read only, in one snapshot (never blocks a\n"
"writer); since, advance, maintain and drop change it, in one write\n"
"transaction.  Exit 0 on success, 1 on an error (one line on stderr), when\n"
"verify finds a problem, or when salvage leaves something behind; 2 on a\n"
"usage error.  Sizes: B/KiB/MiB/GiB.  Every command but verify and salvage\n"
"first checks LMDB's pages and refuses a damaged heap in one line.\n"
"KEY, K, P, V and printed keys/vals use the changelog escape: \\\\ \\t \\n \\xHH;\n"
"with --hex, plain lowercase hex (in and out).  RANGE: --from K (keys >= K)\n"
"--to K (keys < K) --prefix P.  --limit N: stops at the first key boundary\n"
"after N rows (0: none); a key's rows are never split, so a page can hold\n"
"more than N, and stderr names the next key as --from 'K' (quoted for sh;\n"
"also its --hex form when a byte is not printable), which resumes exactly\n"
"there; --count: the number only.\n"
"--json prints one JSON document on stdout, its fields listed below; a\n"
"failure is its member error{code message exit} (code: an AH_E* name or\n"
"\"usage\"), alone or after what was printed, and stderr stays empty.\n"
"\n"
"ah-dump HEAP\n"
"    summary.  Lines \"arrangement NAME: upper, since, batches, updates, keys\n"
"    (summed over batches), bytes\" and \"source NAME: position P\" (text; a\n"
"    text of several lines follows, indented; else hex:...; long ones cut),\n"
"    \"hold ARR/NAME: frontier F, lease L, renewed T, STATE\" (as holds),\n"
"    then the heap: format version, uuid, apparent/allocated file size, map\n"
"    size, pages used/free, last commit, reader slots in use.\n"
"    json: heap format_version uuid page_size file_bytes file_alloc_bytes\n"
"      map_bytes pages_used pages_free last_txn_id readers_used readers_max\n"
"      arrangements[]{name upper since batches merging updates keys chunks\n"
"      bytes chunk_bytes} sources[]{name position(null if not text)\n"
"      position_hex} holds[] (as holds)\n"
"ah-dump HEAP arrangements\n"
"    arrangement names, one per line.   json: arrangements[] (names)\n"
"ah-dump HEAP batches NAME\n"
"    each batch, oldest first, then merges in progress (marked *): id,\n"
"    Description lower/upper/since, updates, keys, vals, chunks, bytes used.\n"
"    A merge has a * row once it wrote output; \"merges in progress: N, M\n"
"    with output so far\" counts all N (the summary's merging) and those M.\n"
"    Each batch's format: a batch that may hold version-1 chunks (written\n"
"    before heap format 4) is marked v1; the others are all version 2.\n"
"    json: arrangement batches[]{id lower upper since updates keys vals\n"
"      chunks bytes chunk_bytes partial format filter_keys filter_bytes}\n"
"      (format: 2 or 1; the key filter: keys hashed, bytes; 0 0 without one)\n"
"ah-dump HEAP chunks NAME\n"
"    every chunk of NAME: id, batch, size class (pages), body bytes used,\n"
"    file offset of its first byte, stored xxh3 (hex).\n"
"    json: arrangement chunks[]{id batch class_pages bytes stored_bytes\n"
"      file_offset xxh3 block_bytes}   (stored_bytes: the checksummed span\n"
"      in the file; block_bytes: what a seek checks at a time, 1024, or\n"
"      the page size before heap format 5, 0 when checked only whole)\n"
"ah-dump HEAP read NAME [--as-of T] [RANGE] [--limit N | --count]\n"
"    KEY<TAB>VAL<TAB>DIFF per (key, val) with a non-zero sum as of T\n"
"    (default: upper - 1), sorted by key then val; --limit counts rows.\n"
"    json: arrangement as_of rows[]{key val diff} [truncated next_key]|count\n"
"ah-dump HEAP keys NAME [RANGE] [--limit N | --count]\n"
"    keys stored in some batch (their sum may be zero), sorted, one per line.\n"
"    json: arrangement keys[] truncated [next_key] | arrangement count\n"
"ah-dump HEAP get NAME KEY [--as-of T]\n"
"    VAL<TAB>DIFF per val of KEY with a non-zero sum as of T; no such key\n"
"    (or every sum zero) is an error (AH_ENOTFOUND).\n"
"    json: arrangement key as_of vals[]{val diff}\n"
"ah-dump HEAP history NAME KEY [--val V]\n"
"    every stored update of KEY (of val V), batch by batch, oldest first:\n"
"    BATCH<TAB>VAL<TAB>TIME<TAB>DIFF, times as stored (a read advances those\n"
"    before since to since); none is an error (AH_ENOTFOUND).\n"
"    json: arrangement key [val] upper since batches[]{batch lower upper since\n"
"      updates[]{val time diff}}\n"
"ah-dump HEAP updates NAME --batch ID [RANGE] [--limit N | --count]\n"
"    every update of one batch (an id of `batches`): KEY<TAB>VAL<TAB>TIME<TAB>\n"
"    DIFF, times as stored; --limit counts updates.\n"
"    json: arrangement batch lower upper since partial updates[]{key val time\n"
"      diff} [truncated next_key] | count\n"
"ah-dump HEAP source NAME\n"
"    the position of source NAME, its bytes exactly (--hex: hex and a\n"
"    newline).   json: source bytes position(null if not text) position_hex\n"
"ah-dump HEAP holds [NAME]\n"
"    every read hold (of arrangement NAME), by arrangement then hold:\n"
"    ARRANGEMENT<TAB>HOLD<TAB>FRONTIER<TAB>LEASE<TAB>RENEWED<TAB>STATE, LEASE\n"
"    in ms or \"none\", RENEWED in UTC (ms), STATE live, expired (its lease\n"
"    ran out: since may pass it) or released (expired and since passed it).\n"
"    json: [arrangement] holds[]{arrangement name frontier lease_ms\n"
"      renewed_ms renewed state}\n"
"ah-dump HEAP verify\n"
"    checks LMDB's pages (trees, free list, page accounting), then\n"
"    recomputes every chunk checksum and checks every invariant (sorted,\n"
"    consolidated, no zero diff, offsets in bounds, contiguous batches,\n"
"    upper/since, each chunk and batch referenced once, none leaked).\n"
"    Prints each problem naming arrangement, batch and chunk; exit 1 if any.\n"
"    json: problems[]{arrangement batch chunk message} (0/\"\": none) ok\n"
"      arrangements batches chunks chunk_bytes seconds\n"
"ah-dump HEAP space [--scan]\n"
"    where every page goes, in lines that add up to the pages used: chunks,\n"
"    the B-tree pages of each table, free pages (runs, largest run), the two\n"
"    metas; pages pinned by the oldest other reader; each table's depth,\n"
"    branch/leaf/overflow pages and entries; per arrangement its pages,\n"
"    payload and slack (--scan: also keys, vals, their average and largest\n"
"    size, reading every key and val); readers.\n"
"    json: page_size file_bytes snapshot_txn_id pages_used chunk_pages chunks\n"
"      tree_pages pages_free meta_pages pages_pinned free_runs\n"
"      free_largest_run last_txn_id oldest_reader{pid txn_id age}|null\n"
"      tables[]{name depth branch_pages leaf_pages overflow_pages entries\n"
"      pages} arrangements[]{name batches chunks chunk_pages bytes\n"
"      chunk_bytes slack_bytes [keys vals key_bytes key_max val_bytes\n"
"      val_max]} readers[]{pid thread txn_id age self}\n"
"      (sum of tables[].pages + pages_free + meta_pages = pages_used)\n"
"ah-dump HEAP backup OUT [--same-uuid]\n"
"    writes a compacted hot copy of the latest commit to the new file OUT,\n"
"    with a UUID of its own (--same-uuid: the heap's, for a restore that\n"
"    replaces it); the copy is a heap.   json: backup bytes new_uuid\n"
"ah-dump HEAP salvage OUT\n"
"    copies every arrangement that verifies and reads into the new heap OUT\n"
"    (at its readable times, same upper and since) and names each one left\n"
"    behind and why; source positions only if nothing was left behind (a\n"
"    partial salvage is for reading, not for resuming an engine).  Exit 1\n"
"    if anything was left behind.\n"
"    json: heap arrangements[]{name salvaged upper since updates|reason}\n"
"      sources[]{name copied [reason]} heap_problems positions_copied\n"
"      complete salvage\n"
"ah-dump HEAP since NAME SINCE\n"
"ah-dump HEAP advance NAME UPPER\n"
"    logical compaction (since only advances, never past the upper nor a\n"
"    live read hold: see holds), and\n"
"    an empty advance of the upper; the library's rules and messages.\n"
"    json: arrangement since_before since upper | upper_before upper since\n"
"ah-dump HEAP maintain NAME [--fuel N]\n"
"    merge work.  No --fuel or --fuel 0: one merge of the whole trace into\n"
"    one batch (merges in progress are given up, so each update is read\n"
"    once).  --fuel N: merges in progress first, then due ones, until N units\n"
"    (input updates read) are spent, stopping at the next (key, val); a\n"
"    merge of at most 65,536 updates (the merge quantum) runs whole and is\n"
"    not counted.   json: arrangement fuel idle before{batches merging\n"
"      updates chunks bytes} after{...}\n"
"ah-dump HEAP drop NAME\n"
"    removes NAME and frees its batches and chunks (source positions stay).\n"
"    json: dropped batches updates chunks chunk_pages\n"
"A write command waits for the heap's writer lock while another process\n"
"writes (after 1 s it says so on stderr, naming who has the heap open).\n";

static void usage(FILE *f)
{
	fputs(help_text, f);
}

/* Removes --json and --hex from argv (anywhere after HEAP); returns the
 * new argc. */
static int take_flags(int argc, char **argv, dump *d)
{
	int n = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") && i > 1)
			d->json = true;
		else if (!strcmp(argv[i], "--hex") && i > 1)
			d->hex = true;
		else
			argv[n++] = argv[i];
	}
	return n;
}

/* The end of a run: with --json a failure becomes the document's error
 * member; a usage error gets the command's usage line. */
static int finish(dump *d, const command *cmd, int status)
{
	if (status == 2 && cmd) {
		if (!d->err_code) {
			d->err_code = DUMP_USAGE;
			snprintf(d->err, sizeof d->err, "usage: ah-dump HEAP %s [--json] "
			         "[--hex]", cmd->usage);
		}
		if (!d->json)
			fprintf(stderr, "usage: ah-dump HEAP %s [--json] [--hex]\n",
			        cmd->usage);
	}
	if (d->json && status != 0 && d->err_code)
		dump_json_error(d, status);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		if (!d->json)
			fprintf(stderr, "ah-dump: write error: %s\n", strerror(errno));
		status = status ? status : 1;
	}
	return status;
}

int main(int argc, char **argv)
{
	dump d = { 0 };
	const command *cmd = NULL;
	const char *cname;
	char *heap_esc;
	int status;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("ah-dump (arrheap) %s, library %s\n", AH_VERSION_STRING,
			       ah_version(NULL, NULL, NULL));
			return 0;
		}
	}
	tj_init(&d.j, stdout);
	argc = take_flags(argc, argv, &d);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	d.path = argv[1];
	/* Messages name HEAP escaped: a newline or a stray byte in it would
	 * break their one line. */
	if (!(heap_esc = malloc(TOOL_ESCAPE_MAX(strlen(argv[1])) + 1))) {
		fprintf(stderr, "ah-dump: out of memory\n");
		return 1;
	}
	heap_esc[tool_escape(argv[1], strlen(argv[1]), heap_esc)] = 0;
	d.heap_path = heap_esc;
	cname = argc > 2 ? argv[2] : "";
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, cname))
			cmd = &commands[i];
	if (!cmd) {
		dump_fail(&d, DUMP_USAGE, "unknown command \"%s\" (see ah-dump "
		          "--help)", cname);
		status = finish(&d, NULL, 2);
		free(heap_esc);
		return status;
	}
	if ((status = dump_open(&d, cmd->flags & CHECK, cmd->flags & WRITE)) == 0)
		status = cmd->run(&d, argc > 2 ? argc - 3 : 0, argv + 3);
	status = dump_close(&d, status);
	status = finish(&d, cmd, status);
	free(heap_esc);
	return status;
}
