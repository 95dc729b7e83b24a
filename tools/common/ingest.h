/*
 * tools/common/ingest.h - the staging and group-commit engine of the tools
 * that write a heap from a source: ah-load (a changelog file) and ah-pgsync
 * (a PostgreSQL replication stream).  It holds, per arrangement, the
 * (key, val, time, diff) updates received but not yet in the heap, and
 * writes a group of them in one write transaction together with the source
 * positions they came from, so that after any crash the stored positions and
 * the stored data describe the same prefix of the source (ARCHITECTURE.md
 * section 8, the source contract).
 *
 * The life of an update:
 *
 *   ingest_stage --> staged --ingest_append--> also in the --ingest_commit--> in the heap,
 *                      |                       group's txn                    unstaged
 *                      |                           |
 *     ingest_src_rollback: gone, if staged    ingest_abort: gone from the txn, still
 *     since ingest_src_begin                  staged (the group can be built again)
 *
 *  - A group is one write transaction (ingest_begin .. ingest_commit or
 *    ingest_abort).  ingest_append is a compare-and-append at the upper the
 *    caller says is stored (AH_EUPPER fences off a second writer), so every
 *    arrangement's upper moves only with a commit that also rewrites the
 *    source positions (ingest_commit puts them last, in the same txn).
 *  - A source transaction (ingest_src_begin .. ingest_src_commit or
 *    ingest_src_rollback) is the source's own unit, e.g. a PostgreSQL
 *    transaction: rolling one back drops exactly the updates staged since it
 *    began, never one a committed source transaction staged, so a lost
 *    connection loses nothing that a position may already count.
 *  - Staged updates leave the staging only by ingest_commit (success) or
 *    ingest_clear: an aborted group keeps them, so the caller may build it
 *    again.  A caller that never retries a group (ah-load) clears each
 *    arrangement right after appending it, bounding its memory to the
 *    updates not yet appended.
 *
 * Errors: functions that call the library return 0 or its negative AH_E*
 * code and leave the message to the caller, who formats it with
 * ingest_error (which names the arrangement and reads the group's
 * transaction detail, so call it before ingest_abort).  Staging returns -1
 * when out of memory.  Sizes are bytes, counts are updates.
 *
 * It knows only the public API (arrheap.h).  It never opens, closes or
 * reads the heap beyond the group's writes, never interprets a source
 * position (the tools own their formats: byte offsets, LSNs), never prints,
 * and never commits anything but through ingest_commit.
 *
 * It must never commit a group while a source transaction is open
 * (ingest_commit refuses with AH_ESTATE: its updates have no time yet), nor
 * store a position in any transaction but the group's, after the group's
 * data.
 */
#ifndef TOOLS_COMMON_INGEST_H
#define TOOLS_COMMON_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "arrheap.h"

/* An arrangement's updates at least this many go through the streaming
 * builder (ah_builder_*, INGEST_PIECE at a time: bounded memory in the
 * tool); fewer through one ah_append.  Both give the same batch. */
#define INGEST_BUILDER_MIN 65536
#define INGEST_PIECE 4096

typedef struct ingest_update {
	size_t off;        /* key at bytes + off, val right after it */
	uint32_t key_len;
	uint32_t val_len;
	uint64_t time;
	int64_t diff;
} ingest_update;

/* One arrangement's state.  Allocated by ingest_add and never moved, so a
 * pointer stays valid until ingest_free.  The caller may read every field
 * and set upper, since and gen; the rest is the engine's. */
typedef struct ingest_arr {
	char name[AH_NAME_MAX + 1];
	/* The frontiers as the caller last read them from the heap (gen = the
	 * g->gen of the group it read them in); ingest_append advances upper.
	 * After ingest_abort they may be stale: gen tells. */
	uint64_t upper;
	uint64_t since;
	unsigned gen;
	/* staged updates: ups[0..n), their bytes in bytes[0..blen) */
	ingest_update *ups;
	size_t n, cap;
	unsigned char *bytes;
	size_t blen, bcap;
	uint64_t max_time;  /* the largest staged time (meaningful when n > 0) */
	/* n, blen and max_time when the open source transaction began */
	size_t mark, bytes_mark;
	uint64_t max_mark;
} ingest_arr;

/* The engine.  Zero it and set heap (opened by the caller, who closes it
 * after ingest_free). */
typedef struct ingest {
	ah_heap *heap;
	/* The open group's write transaction, or NULL.  The caller may use it
	 * for what the engine does not do (read positions and frontiers,
	 * create arrangements, set since) but never commits or aborts it. */
	ah_txn *txn;
	unsigned gen;       /* groups begun so far */
	int in_src;         /* a source transaction is open */
	/* the arrangements, by name: open addressing, FNV-1a */
	ingest_arr **slots;
	size_t cap;         /* power of two, or 0 */
	size_t count;
	/* scratch ah_update array for ingest_append, grown while staging */
	ah_update *ubuf;
	size_t ubuf_cap;
} ingest;

/* ---- arrangements ---- */

/* The entry named name (the first added, should two share it), or NULL. */
ingest_arr *ingest_find(const ingest *g, const char *name);
/* Adds a zeroed entry for name (a valid arrangement name, copied); NULL
 * when out of memory.  Allowed while a source transaction is open: the new
 * entry has nothing to roll back. */
ingest_arr *ingest_add(ingest *g, const char *name);
/* The first entry with staged updates in the index's order, or NULL.  The
 * order depends only on the names added and their order (ah-load names it
 * in an error message: keep the hash and the probing as they are). */
ingest_arr *ingest_first_staged(const ingest *g);

/* ---- staging ---- */

/* Copies one update into a's staging.  0, or -1 when out of memory or a
 * key or val is over 4 GiB - 1.  Also grows g's scratch, so that
 * ingest_append never allocates in the tool. */
int ingest_stage(ingest *g, ingest_arr *a, const void *key, size_t key_len, const void *val,
                 size_t val_len, uint64_t time, int64_t diff);
/* Fills out[0..n) with a's staged updates [from, from + n), pointing into
 * a's bytes: valid until the next ingest_stage or ingest_clear of a. */
void ingest_updates(const ingest_arr *a, size_t from, size_t n, ah_update *out);
/* Forgets a's staged updates, also those of an open source transaction
 * (keeps the memory). */
void ingest_clear(ingest_arr *a);

/* ---- source transactions ---- */

/* Opens a source transaction: what is staged from now on can be rolled
 * back.  One at a time (an open one is rolled back first). */
void ingest_src_begin(ingest *g);
/* Closes it, keeping its updates, and stamps each with time (a source that
 * learns its time at the commit, like a PostgreSQL commit LSN; its updates
 * were staged with any time).  Returns how many updates it staged. */
uint64_t ingest_src_commit(ingest *g, uint64_t time);
/* Drops the updates staged since ingest_src_begin, in every arrangement;
 * a no-op when none is open: a committed source transaction's updates are
 * never dropped. */
void ingest_src_rollback(ingest *g);

/* ---- the group: one write transaction ---- */

/* Opens the group's write transaction (g->txn) and counts it in g->gen.
 * 0, AH_ESTATE (one is open), or ah_txn_begin's errors. */
int ingest_begin(ingest *g);
/* Appends a's staged updates as one batch [lower, upper) to the open
 * group: compare-and-append, lower being the upper the caller knows is
 * stored; no updates only advances the upper (ah_advance).  The updates
 * stay staged (see the top), so append a again in the same group only
 * after ingest_clear (ah-load: several advances of one arrangement in one
 * group).  On success a->upper = upper.  0, AH_ESTATE
 * (no group), or the errors of ah_append / ah_builder_* / ah_advance (the
 * transaction is then poisoned: report, then ingest_abort). */
int ingest_append(ingest *g, ingest_arr *a, uint64_t lower, uint64_t upper);

/* A source position to store: name, and its bytes (the tool's format). */
typedef struct ingest_pos {
	const char *source;
	const void *pos;
	size_t len;
} ingest_pos;

/* Puts pos[0..npos) (ah_source_put, in that order) and commits the group:
 * the appended data, the advanced uppers and the positions become durable
 * together or not at all.  On success every staged update is dropped and 0
 * returned.  On failure the code is returned, the staging kept, and
 * *failed (if not NULL) says where: i < npos, the put of pos[i] (the group
 * is still open: report, then ingest_abort), or npos, the commit (the
 * transaction is gone; its detail too).  AH_ESTATE: no group, or a source
 * transaction is open (its updates have no time yet). */
int ingest_commit(ingest *g, const ingest_pos *pos, size_t npos, size_t *failed);
/* Aborts the open group, if any: nothing of it reaches the heap; the
 * staged updates are kept. */
void ingest_abort(ingest *g);

/* Formats the one-line message of a failed call into buf: "WHAT[ NAME]:
 * DETAIL", DETAIL being the group's transaction message when it has one,
 * else ah_strerror(rc).  Returns -1. */
int ingest_error(const ingest *g, int rc, const char *what, const char *name, char *buf,
                 size_t len);

/* Aborts an open group and frees every entry and buffer (not the heap). */
void ingest_free(ingest *g);

#endif /* TOOLS_COMMON_INGEST_H */
