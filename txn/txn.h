/*
 * txn/txn.h - private shapes of the public handles (ah_heap, ah_txn,
 * ah_cursor, ah_builder), shared by the files of txn/.
 *
 * txn/ is the top layer: it owns the public API's semantics (frontier
 * checks, compare-and-append, poisoning, error messages) and calls
 * arrangement/ through its face, arrangement/arrangement.h (arrangements,
 * builders, cursors, checks), and heap/ (transactions, tables).  It never
 * touches LMDB, a batch or a spine directly, and never hands out a
 * pointer that outlives its transaction without saying so.
 */
#ifndef TXN_TXN_H
#define TXN_TXN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "arrangement/arrangement.h"
#include "heap/heap.h"

struct ah_heap {
	heap *h;
	pthread_mutex_t mu;      /* guards open_txns */
	unsigned open_txns;
	uint64_t merge_quantum;  /* ah_open_opts.merge_quantum */
	struct bgm *bg;          /* AH_OPEN_BGMERGE: the merge thread (bgmerge.c) */
};

struct ah_txn {
	ah_heap *heap;
	heap_txn *ht;
	bool rdonly;
	bool poisoned;
	/* A write txn belongs to the thread that began it (LMDB's writer
	 * mutex is that thread's): calls from another thread are AH_ESTATE
	 * (txn_owner_check), and ah_txn_abort from another thread only sets
	 * foreign_abort, which the owner's next call turns into poisoning. */
	pthread_t owner;
	atomic_bool foreign_abort;
	ah_builder *builder;     /* the open builder, if any */
	ah_cursor *cursors;      /* open cursors, to detach at txn end */
	/* Arrangements left with merges in progress: for the merge thread at
	 * commit (bgmerge.c). */
	char (*bg_names)[AH_NAME_MAX + 1];
	unsigned bg_n, bg_cap;
	char msg[320];
};

struct ah_cursor {
	ah_txn *txn;             /* NULL once the txn ended: use is AH_ESTATE */
	ah_cursor *next, *prev;
	trace_cursor *tc;        /* positioned at open; owns its batches */
	int err;                 /* the first error returned: sticky */
	frontier upper, since;
	char name[AH_NAME_MAX + 1];
};

struct ah_builder {
	ah_txn *txn;
	builder *b;
	char name[AH_NAME_MAX + 1];
	frontier lower, upper;   /* the times the appended updates may have */
	frontier batch_lower;    /* the batch's lower: the trace's last upper */
	/* Set by ah_builder_abandon from a thread that does not own the txn:
	 * the shell is freed when the txn ends (txn_detach), not by abandon. */
	atomic_bool abandoned;
};

/* Sets the txn's message (printf-style) and returns err. */
int txn_fail(ah_txn *t, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Poisons t with err (and message) and returns err. */
int txn_poison(ah_txn *t, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Common entry checks: fork, owner thread (write txns), poisoned, and
 * (write) read-only. */
int txn_enter(ah_txn *t, bool write);
/* 0 when the calling thread may use t: a read txn, or a write txn of this
 * thread.  Otherwise AH_ESTATE, and nothing of t is touched. */
int txn_owner_check(const ah_txn *t);
/* The owner's view of an abort from another thread: poisons t (message
 * and all) and returns AH_EBADTXN when one happened, else 0. */
int txn_foreign_abort_check(ah_txn *t);
/* 1 when name is a valid arrangement/source name. */
bool txn_name_ok(const char *name);

/* bgmerge.c: the merge thread of a heap opened with AH_OPEN_BGMERGE. */
int bgm_create(ah_heap *ah);
/* Stops and joins the thread, frees everything (ah_close). */
void bgm_destroy(ah_heap *ah);
/* The appends of this heap leave their merges to the thread. */
bool bgm_active(const ah_heap *ah);
/* After a commit: names with merges in progress (starts the thread). */
void bgm_notify(ah_heap *ah, const char (*names)[AH_NAME_MAX + 1],
                unsigned n);
/* The first input batch of the merge of NAME the thread computes now (0:
 * none). */
uint64_t bgm_current(ah_heap *ah, const char *name);
/* Before a write txn begins: waits while the thread installs (never when
 * this thread holds the write txn). */
void bgm_turnstile(ah_heap *ah);
/* on: waits until no slice is in flight and holds the thread; off: lets
 * it go on.  Nested. */
void bgm_pause(ah_heap *ah, bool on);
/* Tests: while on, the merge thread takes no slice (it stays busy, so
 * ah_merge_wait waits); the callers in ah_merge_wait of ah; the input
 * bytes up to which a merge runs whole while a caller waits (0: the
 * default, 512 MiB).  Process-wide but the waiters. */
void bgm_test_hold(bool on);
unsigned bgm_test_waiters(ah_heap *ah);
void bgm_test_whole_max(uint64_t bytes);
/* Notes NAME for the thread at t's commit.  Errors: AH_ENOMEM. */
int txn_note_merging(ah_txn *t, const char *name);

/* hold.c.  Before since of ARR becomes SINCE: AH_EFRONTIER naming the
 * lowest live hold it would pass (R2), else marks the expired holds it
 * passes released (R3).  Poisons t on any error. */
int txn_holds_before_since(ah_txn *t, const char *arr, uint64_t since);
/* Deletes every hold of ARR (ah_arrangement_drop); poisons on error. */
int txn_holds_drop_all(ah_txn *t, const char *arr);
/* ms since the epoch as "2026-12-01T12:00:00.123Z" (UTC). */
void txn_fmt_ms(uint64_t ms, char buf[32]);

/* ah_verify without recomputing chunk checksums (headers are still
 * checked): for a caller that checked every chunk whole itself, in this
 * process, from the bytes it wrote (ah_snapshot_restore). */
int txn_verify_checked_chunks(ah_txn *t, ah_problem_fn fn, void *user,
                              ah_verify_stats *st);

#endif
