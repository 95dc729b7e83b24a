/*
 * arrangement/merge_int.h - private to merge.c and merge_run.c: the
 * merger's state, shared by the group-at-a-time merge (merge.c) and its
 * run loop over fixed-width columns (merge_run.c).
 *
 * It must never be included outside those two files.
 */
#ifndef ARRANGEMENT_MERGE_INT_H
#define ARRANGEMENT_MERGE_INT_H

#include "arrangement/batch_int.h"
#include "arrangement/merge.h"

typedef time_diff tpair;

/* A heap entry: an input's current (key, val) with cached prefixes, so
 * that most comparisons settle on two integers. */
typedef struct hent {
	kv_ref r;
	size_t idx;
} hent;

struct merger {
	heap_txn *t;
	pool *p;
	batch *const *inputs;
	size_t n;
	frontier since;
	batch_cursor **cur;    /* n, malloc'd */
	size_t *hits;          /* n: inputs holding the current group */
	hent *hp;              /* n: min-heap of the inputs not exhausted */
	size_t hn;
	bool held;             /* the group's one input is still hp[0] */
	hent two[2];           /* n == 2: the inputs' current (key, val), no heap */
	bool live[2];
	batch_writer *w;       /* NULL once suspended or finished */
	tpair *pairs;          /* pool: the current group's (time, diff) */
	size_t pairs_cap;
	const void *wkey;      /* key of the last run written (map pointer) */
	size_t wklen;
	/* Last group consumed: map pointers, copied into bkey/bval on suspend. */
	bool has_boundary;
	const void *lkey, *lval;
	size_t lklen, lvlen;
	uint8_t *bcopy;        /* pool: key then val of the reported boundary */
	size_t bcopy_cap;
	bool done;
	/* merge_run.c: whether the run loop is tried (merger_set_runs), and
	 * the inputs' layout_sig when it last could not apply */
	bool runs, run_stuck;
	uint64_t run_sig;
	uint64_t run_groups;   /* groups the run loop took */
	uint64_t bytes, peak;  /* pool bytes held by the merger itself */
	/* merge_par.c's ranges (merger_open_range): keys >= stop are not
	 * merged (stop NULL: none); stop_kp is its bytes_prefix8, so that a
	 * key whose prefix is below it needs no byte compare; own_w false:
	 * the writer is the caller's (merger_release_writer) */
	const uint8_t *stop;
	size_t stoplen;
	uint64_t stop_kp;
	bool own_w;
};

/* Whether key k is at or past the merger's stop key (never without one). */
static inline bool past_stop(const merger *m, const void *k, size_t kl,
                             uint64_t kp)
{
	return m->stop != NULL && kp >= m->stop_kp &&
	       bytes_cmp(k, kl, m->stop, m->stoplen) >= 0;
}

/* merge.c: every input not exhausted back on the heap (or in two[])
 * from its cursor's position, after merge_run moved the cursors. */
void merger_requeue(merger *m);

/* merge_run.c: consumes (key, val) groups while every input that holds
 * the next one is on fixed-width keys and vals of one width, in a chunk
 * checked whole, with one update per val, and the group is not a
 * chunk's last val; stops at anything else, before consuming it, for
 * merge_group (merge.c) to take.  fuel: units to spend at most (0: no
 * limit); *units = pairs read.  Leaves the merger exactly as merge_group
 * would after the same groups (cursors, heap, boundary, the writer's
 * staging: the same bytes).  0, or an error of the writer's. */
int merger_run(merger *m, uint64_t fuel, uint64_t *units);

#endif /* ARRANGEMENT_MERGE_INT_H */
