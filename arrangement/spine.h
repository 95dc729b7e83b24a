/*
 * arrangement/spine.h - an arrangement's spine: its frontiers, its chain of
 * batches, and the merges in progress (differential dataflow's
 * spine_fueled, made persistent and resumable).
 *
 * The spine is stored as one arrangement record (table HEAP_T_ARR, key: the
 * arrangement's name).  txn/ loads it, calls the operations below, and
 * stores it back in the same LMDB transaction, so a spine change is atomic
 * with everything else in the commit.
 *
 * Invariants (checked by spine_check):
 *  S1 since <= upper.
 *  S2 batches are contiguous: b[i].upper == b[i+1].lower, and the last
 *     batch's upper <= upper (empty advances only move upper).
 *  S3 merges cover disjoint runs of adjacent batches; a batch belongs to at
 *     most one merge.  A merge's partial output is not part of the chain:
 *     readers never see it, and a crash mid-merge leaves the inputs intact.
 *  S4 every batch holds at least one update (empty results are dropped).
 *
 * Nothing above arrangement/ includes it: txn/ sees arrangement.h.
 */
#ifndef ARRANGEMENT_SPINE_H
#define ARRANGEMENT_SPINE_H

#include <stdbool.h>
#include <stdint.h>

#include "arrangement/batch.h"
#include "arrangement/merge.h"

typedef struct spine_batch {
	uint64_t id;
	uint64_t updates; /* size, for the merge policy */
} spine_batch;

typedef struct spine_merge {
	uint32_t first, count;   /* the run of batches being merged */
	frontier since;          /* times advanced by this (fixed at start) */
	uint64_t credit;         /* fuel granted and not yet spent */
	uint64_t done;           /* input updates merged so far */
	uint64_t partial_id;     /* output so far (0: none) */
	bool has_boundary;
	uint8_t *key, *val;      /* boundary, malloc'd */
	size_t klen, vlen;
} spine_merge;

typedef struct spine {
	frontier upper, since;
	uint32_t nbatches, nmerges;
	spine_batch *batches;    /* oldest first */
	spine_merge *merges;
} spine;

/* Loads NAME's record into *sp (malloc'd arrays; spine_clear frees them).
 * Errors: AH_ENOTFOUND, AH_ECORRUPT, AH_ENOMEM. */
int spine_load(heap_txn *t, const char *name, spine *sp);
/* Copies a suspended merger's boundary and partial id into m. Errors:
 * AH_ENOMEM (m unchanged). */
int spine_set_boundary(spine_merge *m, const merge_resume *r2);
/* Stores *sp as NAME's record.  Errors: as heap_put. */
int spine_store(heap_txn *t, const char *name, const spine *sp);
void spine_clear(spine *sp);

/* Adds batch id (of n updates, lower = the previous batch's upper) at the
 * end, then starts merges the size policy asks for (batches within a factor
 * of two merge) and spends fuel proportional to n on merges in progress.
 * bg (a merge thread works for this heap, ARCHITECTURE §6): fuel is still
 * granted, but a merge runs here only once its credit exceeds what the
 * inline schedule would run it at by SPINE_BG_SLACK quanta (backpressure;
 * twice that for the merge whose first input batch is avoid, the one the
 * thread computes: 0 for none), and new merges are left to the merge
 * thread even when small. */
int spine_push(heap_txn *t, pool *p, spine *sp, uint64_t id, uint64_t n,
               uint64_t quantum, bool bg, uint64_t avoid);
/* Starts the merges the size policy asks for (bg: runs none of them). */
int spine_tidy(heap_txn *t, pool *p, spine *sp, uint64_t quantum, bool bg);
/* Replaces the run of merge mi by its output out (0: the output was empty),
 * dropping the inputs in[0..count) (their batch records as loaded in t). */
int spine_complete(heap_txn *t, spine *sp, uint32_t mi, batch *const *in,
                   uint64_t out);
/* Input updates merge m still has to read (size - done). */
uint64_t spine_merge_left(const spine *sp, const spine_merge *m);
/* Spends up to fuel units (0 = unbounded) on merges, starting the merges an
 * idle arrangement still deserves.  *idle = true when nothing is left.
 * bg (fuel > 0 only): a merge thread works; the merges are started and the
 * fuel granted to each as credit, run here only past the thread's slack
 * (as spine_push; avoid likewise). */
int spine_maintain(heap_txn *t, pool *p, spine *sp, uint64_t fuel,
                   uint64_t quantum, bool bg, uint64_t avoid, bool *idle);
/* Checks S1-S4 against the batch records.  Errors: AH_ECORRUPT (msg). */
int spine_check(heap_txn *t, const spine *sp, char *msg, size_t msglen);
/* Frees every batch, partial merge output and chunk of the spine. */
int spine_drop_all(heap_txn *t, spine *sp);

/* Merge fuel per appended update.  The quantum (a parameter, default
 * SPINE_MERGE_QUANTUM) is the smallest unit of merge work done in one go: a
 * merge is resumed only once it has this much credit, so that tiny appends
 * do not cut merges into tiny chunks, and merges up to it run at once. */
#define SPINE_FUEL_PER_UPDATE 2
/* Batches per merge the size policy starts (spine.c; 3 measured against
 * 2 and 4: BENCHMARKS.md, issue 13 seventh round). */
#define SPINE_FANIN 3
#define SPINE_MERGE_QUANTUM 65536
/* Backpressure of the merge thread, in quanta of credit: a merge the
 * thread has not kept up with runs inline once its credit passes its
 * inline trigger by this much (8 x 65536 units = 262,144 appended
 * updates' worth of fuel). */
#define SPINE_BG_SLACK 8

#endif
