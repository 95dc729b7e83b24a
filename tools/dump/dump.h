/*
 * tools/dump/dump.h - what the files of ah-dump share: the run's state, the
 * helpers of tools/dump/dump.c (opening the heap, errors, the byte forms
 * of keys and vals, JSON lists, options) and the command handlers
 * (tools/ah-dump.c dispatches, the other files of tools/dump/ hold the
 * commands).  Only the public API (arrheap.h) and tools/common are used.
 *
 * Reading commands run in one read snapshot of a heap opened read-only and
 * never write.  The write commands (tools/dump/write.c: since, advance,
 * maintain, drop) open the heap for writing and change it in exactly one
 * write transaction each; salvage (tools/dump/salvage.c) writes only a new
 * heap, never the one it reads.
 *
 * A handler returns 0 (success), 1 (a failure it reported with dump_fail,
 * or a heap problem verify or salvage found) or 2 (usage error: main
 * prints the usage).  Every failure goes through dump_fail: one line on
 * stderr, or with --json the "error" member of the one JSON document on
 * stdout (main writes it, also after a document cut short).
 *
 * Nothing here may use a header of the library but arrheap.h, and no
 * handler may change the heap it opened but through dump_write (the write
 * commands), nor create any file but a new one (backup, salvage).
 */
#ifndef TOOLS_DUMP_DUMP_H
#define TOOLS_DUMP_DUMP_H

#include <stdbool.h>
#include <stddef.h>

#include "arrheap.h"
#include "tools/common/json.h"

/* The code of a usage error in dump_fail ("usage" in JSON, exit 2); every
 * other code is an AH_E* code. */
#define DUMP_USAGE 1

typedef struct dump {
	const char *path;      /* HEAP as given: for opening it, and JSON */
	const char *heap_path; /* HEAP escaped (tool_escape): for messages */
	ah_heap *heap;
	ah_txn *txn;       /* the run's read snapshot */
	bool json;         /* --json */
	bool hex;          /* --hex: keys and vals in hex, out and in */
	tool_json j;
	char *buf;         /* dump_escape / dump_bytes output, NUL-terminated */
	size_t buf_cap;
	ah_page_stats pages; /* the page check of d->txn's snapshot */
	bool checked;      /* pages holds it */
	/* The run's first failure (dump_fail): code, exit status, message
	 * (without the "ah-dump: " prefix). */
	int err_code;
	int err_exit;
	char err[2048];
} dump;

/* Opens d->heap_path (read-only, or for writing with write) and begins the
 * run's read snapshot (d->txn), with the fault-signal guard installed
 * first; with check, also refuses a heap whose LMDB pages ah_verify_pages
 * finds damaged (and keeps its figures in d->pages).  Returns 0, or 1
 * after dump_fail (a missing file, a directory, no heap, damage).
 * Whatever it returns, dump_close ends the run. */
int dump_open(dump *d, bool check, bool write);
/* Ends the snapshot, closes the heap and frees d's buffer; returns status,
 * or 1 (reported) when the close fails and status was 0. */
int dump_close(dump *d, int status);

/* Reports a failure: "ah-dump: MESSAGE" on stderr, or with --json keeps
 * the first one for main's "error" member.  MESSAGE is kept to one line
 * of printable ASCII: any other byte left in it (of a name or argument
 * given on the command line) becomes \xHH; paths are given escaped
 * (d->heap_path, dump_escape).  code is an AH_E* code or
 * DUMP_USAGE.  Returns 1 (2 for DUMP_USAGE). */
int dump_fail(dump *d, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* dump_fail for a library error: "HEAP: WHAT: DETAIL", DETAIL being the
 * txn's message when it has one, else ah_strerror(rc).  Returns 1. */
int dump_lib_error(dump *d, int rc, const char *what);
/* With --json, writes the error member of a failed run and ends the
 * document (whatever was open), or prints {"error": ...} when none was
 * begun.  exit is the run's exit status. */
void dump_json_error(dump *d, int exit_status);

/* The human form's width: dump_line wraps to it, tables keep within it. */
#define DUMP_COLUMNS 100

/* printf for a human line (or lines) on stdout that wraps each line longer
 * than DUMP_COLUMNS at a space, continuing it indented by four spaces. */
void dump_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* With --json, opens the command's document as {["arrangement": NAME,]
 * "KEY": [ ... (the caller adds the elements and closes both). */
void dump_json_list(dump *d, const char *arrangement, const char *key);
/* The canonical escape (tools/common/escape.h) of p[0..len) as a C string
 * owned by d, valid until the next call of dump_escape or dump_bytes;
 * NULL (reported) on no memory.  For names and messages. */
const char *dump_escape(dump *d, const void *p, size_t len);
/* A key or val as printed: the escape, or with --hex lowercase hex.
 * Owned by d as dump_escape's. */
const char *dump_bytes(dump *d, const void *p, size_t len);
/* Decodes a key or val argument (escaped, or hex with --hex) into *out
 * (malloc'd, the caller frees; NULL for ""): 0, or 2 after dump_fail
 * (what names the option), 1 on no memory. */
int dump_arg_bytes(dump *d, const char *what, const char *s, void **out,
                   size_t *len);
/* A fresh snapshot for d->txn (0 or an AH_E* code): the page check answers
 * AH_EBUSY when two commits overwrote its snapshot's meta page since it
 * began, and then runs again in a new one. */
int dump_renew(dump *d);
/* Parses a decimal uint64 option value; reports (a usage error) and
 * returns -1 if bad. */
int dump_parse_u64(dump *d, const char *opt, const char *s, uint64_t *out);
/* Looks NAME up (info may be NULL); an unknown arrangement is one line
 * (AH_ENOTFOUND) and 1. */
int dump_arrangement(dump *d, const char *name, ah_arrangement_info *info);

/* The options of the commands over keys (tools/dump/data.c, raw.c):
 * positional NAME [KEY], then --as-of T, --from K, --to K, --prefix P,
 * --limit N, --count, --val V, --batch ID, as `which` allows. */
enum {
	DA_KEY = 1,      /* NAME KEY */
	DA_AS_OF = 2,    /* --as-of T */
	DA_RANGE = 4,    /* --from K --to K --prefix P --limit N --count */
	DA_VAL = 8,      /* --val V */
	DA_BATCH = 16,   /* --batch ID (required) */
};

typedef struct dump_args {
	const char *name, *key_s, *val_s;   /* as given */
	void *key, *from, *to, *prefix, *val; /* decoded, malloc'd */
	size_t key_len, from_len, to_len, prefix_len, val_len;
	bool have_from, have_to, have_val, have_as_of, have_limit, count;
	uint64_t as_of, limit, batch;
} dump_args;

/* Parses argv into *a (zeroed first): 0, 2 (a usage error, reported or
 * left to main's usage line) or 1 (no memory).  dump_args_free frees it
 * whatever the result. */
int dump_args_parse(dump *d, int argc, char **argv, unsigned which,
                    dump_args *a);
void dump_args_free(dump_args *a);
/* Where a key range starts (the larger of --from and --prefix; NULL, 0:
 * the first key), and whether key k lies past its end (at or after --to,
 * or after the keys that start with --prefix). */
void dump_range_start(const dump_args *a, const void **k, size_t *len);
bool dump_range_past(const dump_args *a, const void *k, size_t len);
/* Bytes order of keys and vals: unsigned bytes, a prefix first. */
int dump_bytes_cmp(const void *a, size_t alen, const void *b, size_t blen);
/* After --limit cut a listing before key k: a note on stderr naming where
 * to go on (--from), or with --json the document's "next_key". */
int dump_limit_note(dump *d, const void *k, size_t len);

/* Runs fn in the heap's one write transaction, begun and committed in a
 * thread of its own (LMDB's writer lock belongs to the thread that takes
 * it); while another process holds the lock, after 1 s, says so on stderr
 * once (naming the processes that have the heap open) and goes on
 * waiting.  fn reports its own failures and returns 0 or 1; on 0 the
 * transaction is committed (a failed commit is reported), else aborted.
 * Ends d->txn first.  Returns 0 or 1. */
int dump_write(dump *d, int (*fn)(dump *d, ah_txn *t, void *arg), void *arg);

int cmd_summary(dump *d, int argc, char **argv);
int cmd_arrangements(dump *d, int argc, char **argv);
int cmd_batches(dump *d, int argc, char **argv);
int cmd_chunks(dump *d, int argc, char **argv);
int cmd_read(dump *d, int argc, char **argv);
int cmd_keys(dump *d, int argc, char **argv);
int cmd_get(dump *d, int argc, char **argv);
int cmd_history(dump *d, int argc, char **argv);
int cmd_updates(dump *d, int argc, char **argv);
int cmd_source(dump *d, int argc, char **argv);
int cmd_holds(dump *d, int argc, char **argv);
/* The summary's hold lines (JSON: its holds[] member). */
int dump_summary_holds(dump *d);
int cmd_verify(dump *d, int argc, char **argv);
int cmd_space(dump *d, int argc, char **argv);
int cmd_backup(dump *d, int argc, char **argv);
int cmd_salvage(dump *d, int argc, char **argv);
int cmd_since(dump *d, int argc, char **argv);
int cmd_advance(dump *d, int argc, char **argv);
int cmd_maintain(dump *d, int argc, char **argv);
int cmd_drop(dump *d, int argc, char **argv);

#endif /* TOOLS_DUMP_DUMP_H */
