/*
 * tools/dump/dump.h - what the files of ah-dump share: the run's state, the
 * helpers of tools/dump/dump.c (opening the heap, errors, escapes, JSON
 * lists) and the command handlers (tools/ah-dump.c dispatches, the other
 * files of tools/dump/ hold the commands).  Only the public API
 * (arrheap.h) and tools/common are used; nothing here ever writes the heap.
 *
 * A handler returns 0 (success), 1 (a failure it has reported on stderr in
 * one line, or a heap problem verify found) or 2 (usage error: main prints
 * the usage).  With --json every handler prints exactly one JSON document
 * on stdout when it succeeds; failures still go to stderr.
 */
#ifndef TOOLS_DUMP_DUMP_H
#define TOOLS_DUMP_DUMP_H

#include <stdbool.h>
#include <stddef.h>

#include "arrheap.h"
#include "tools/common/json.h"

typedef struct dump {
	const char *heap_path;
	ah_heap *heap;
	ah_txn *txn;       /* the one read snapshot of this run */
	bool json;
	tool_json j;
	char *buf;         /* escape output, NUL-terminated */
	size_t buf_cap;
} dump;

/* Opens d->heap_path read-only and begins the run's one read snapshot
 * (d->txn), with the fault-signal guard installed first; with check, also
 * refuses a heap whose LMDB pages ah_verify_pages finds damaged.  Returns
 * 0, or 1 after one line on stderr (a missing file, a directory, no heap,
 * damage).  Whatever it returns, dump_close ends the run. */
int dump_open(dump *d, bool check);
/* Ends the snapshot, closes the heap and frees d's buffer; returns status,
 * or 1 (reported) when the close fails and status was 0. */
int dump_close(dump *d, int status);

/* One line on stderr for a library error (the txn's detail when it has
 * one); returns 1. */
int dump_lib_error(dump *d, int rc, const char *what);
/* With --json, opens the command's document as {["arrangement": NAME,]
 * "KEY": [ ... (the caller adds the elements and closes both). */
void dump_json_list(dump *d, const char *arrangement, const char *key);
/* The canonical escape (tools/common/escape.h) of p[0..len) as a C string
 * owned by d, valid until the next call; NULL (reported) on no memory. */
const char *dump_escape(dump *d, const void *p, size_t len);
/* A fresh snapshot for d->txn (0 or an AH_E* code): the page check answers
 * AH_EBUSY when two commits overwrote its snapshot's meta page since it
 * began, and then runs again in a new one. */
int dump_renew(dump *d);
/* Parses a decimal uint64 option value; reports and returns -1 if bad. */
int dump_parse_u64(const char *opt, const char *s, uint64_t *out);

int cmd_summary(dump *d, int argc, char **argv);
int cmd_arrangements(dump *d, int argc, char **argv);
int cmd_batches(dump *d, int argc, char **argv);
int cmd_chunks(dump *d, int argc, char **argv);
int cmd_read(dump *d, int argc, char **argv);
int cmd_keys(dump *d, int argc, char **argv);
int cmd_get(dump *d, int argc, char **argv);
int cmd_verify(dump *d, int argc, char **argv);
int cmd_space(dump *d, int argc, char **argv);
int cmd_backup(dump *d, int argc, char **argv);

#endif /* TOOLS_DUMP_DUMP_H */
