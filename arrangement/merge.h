/*
 * arrangement/merge.h - merging batches, resumably, with fuel
 * (differential dataflow's spine_fueled merges; logical compaction).
 *
 * A merger reads n contiguous input batches through batch cursors, advances
 * every time to max(t, since), consolidates equal (key, val, time) (sums,
 * drops zeros) and writes one output batch through a batch writer.  Work is
 * counted in fuel: one unit per input (time, diff) entry read.  A merger can
 * be suspended between two (key, val) groups: the output so far becomes a
 * partial batch record, and the boundary (the last (key, val) written or
 * skipped) lets a later transaction resume exactly there.  Inputs are never
 * modified: a merge in progress leaves the pre-merge spine intact.
 *
 * A merger never modifies or frees its inputs.
 */
#ifndef ARRANGEMENT_MERGE_H
#define ARRANGEMENT_MERGE_H

#include "arrangement/batch.h"

typedef struct merger merger;

/* Where a suspended merge stopped: every input (key, val) <= (key, val) has
 * been merged into partial_id.  has_boundary false = nothing merged yet. */
typedef struct merge_resume {
	bool has_boundary;
	const void *key;
	size_t klen;
	const void *val;
	size_t vlen;
	uint64_t partial_id; /* batch record of the output so far, 0 if none */
} merge_resume;

/* inputs[0..n) must outlive the merger.  resume may be NULL (fresh).
 * Errors: AH_ENOMEM, AH_ECORRUPT. */
int merger_open(heap_txn *t, pool *p, batch *const *inputs, size_t n,
                frontier since, const merge_resume *resume, merger **out);
/* The background merge's merger (ARCHITECTURE §6): t may be a read txn,
 * and the output goes to a detached writer (batch_writer_new_detached):
 * chunk images in memory, nothing written to the heap, until
 * merger_attach installs them into a write txn; only then may it be
 * suspended or finished (in that txn; t must still be open, the boundary
 * points into its map): before, both are AH_ESTATE and change nothing.
 * Errors: as merger_open. */
int merger_open_detached(heap_txn *t, pool *p, batch *const *inputs,
                         size_t n, frontier since, const merge_resume *resume,
                         merger **out);
/* A key range of a fresh merge (merge_par.c): only the (key, val) groups
 * with lo <= key < hi are merged (lo NULL: from the first; hi NULL: to
 * the last), and done means the range's end.  Into w when w is given (a
 * writer of t's, not the merger's: merger_release_writer hands it back,
 * and merger_free never frees it), else into a new detached writer (t may
 * be a read txn).  lo and hi must outlive the merger.  It cannot be
 * suspended (AH_ESTATE from merger_suspend when w is given: the caller
 * owns the writer); finish it only when it covers the whole merge.
 * Errors: as merger_open, AH_EINVAL. */
int merger_open_range(heap_txn *t, pool *p, batch *const *inputs, size_t n,
                      frontier since, const void *lo, size_t lolen,
                      const void *hi, size_t hilen, batch_writer *w,
                      merger **out);
/* The writer of a merger (NULL once suspended or finished); the merger
 * keeps none afterwards. */
batch_writer *merger_release_writer(merger *m);
/* merge_par.c: a fresh unfueled merge of inputs[0..n) in write txn t on
 * two threads when it is large enough (*ran; else nothing is done and the
 * caller merges alone): *out is the writer holding the whole output, to
 * be finished by the caller (batch_writer_finish), *units the units read.
 * Errors: as merger_step, batch_writer_absorb's (t is then poisoned). */
int merge_parallel(heap_txn *t, pool *p, batch *const *inputs, size_t n,
                   frontier since, batch_writer **out, uint64_t *units,
                   bool *ran);
/* The input bytes (sum of the inputs' chunk_bytes) from which
 * merge_parallel runs a merge on two threads. */
uint64_t merge_par_min(void);
/* Tests: the input bytes (sum of the inputs' chunk_bytes) from which a
 * merge runs on two threads, and per key range (0: the defaults, 64 MiB
 * and 24 MiB).  Process-wide. */
void merge_par_tune(uint64_t min_bytes, uint64_t range_bytes);
/* Tests: merges run by merge_parallel since the process started, and
 * ranges the helper computed that were absorbed. */
void merge_par_counts(uint64_t *merges, uint64_t *helped);
/* Installs the images in wt (batch_writer_attach).  Errors: AH_ESTATE,
 * batch_writer_attach's. */
int merger_attach(merger *m, heap_txn *wt);
/* Bytes of chunk images a detached merger holds. */
uint64_t merger_image_bytes(const merger *m);
/* Does at least min(fuel, remaining) units of work (fuel 0 = all of it),
 * stopping only between (key, val) groups.  *done = true when the inputs
 * are exhausted.  *spent = units used.  Errors: AH_ELIMIT (a diff sum
 * overflows), AH_EFULL, AH_EIO, AH_ENOMEM, AH_ECORRUPT. */
int merger_step(merger *m, uint64_t fuel, bool *done, uint64_t *spent);
/* Whether merger_step may take groups through the run loop over
 * fixed-width columns (merge_run.c; on by default).  The output is the
 * same bytes either way: off is for the test that says so. */
void merger_set_runs(merger *m, bool on);
/* The (key, val) groups the run loop took so far (tests, profiles). */
uint64_t merger_run_groups(const merger *m);
/* Writes the output so far as a partial batch record and reports the
 * boundary; the boundary's pointers stay valid until merger_free.  */
int merger_suspend(merger *m, merge_resume *out);
/* After done: writes the output batch with Description d (*id = 0 when the
 * output is empty, e.g. all retracted).  Does not touch the inputs. */
int merger_finish(merger *m, const batch_desc *d, uint64_t *id);
void merger_free(merger *m);
/* Peak pool bytes the merger itself held (the pairs of its largest (key,
 * val) group and the boundary copy; the writer's staging not included). */
uint64_t merger_peak_bytes(const merger *m);

#endif
