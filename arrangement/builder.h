/*
 * arrangement/builder.h - the batch builder: unsorted updates in, one
 * sorted consolidated batch out.  In differential dataflow's terms this is
 * the Batcher (it sorts and consolidates arbitrary updates); the Builder,
 * which takes updates already in order, is batch_writer (batch.h).
 *
 * Updates are copied into pool memory up to a run budget; a full run is
 * sorted, consolidated and written to the heap as a temporary batch; at
 * finish the runs are merged (arrangement/merge.h) into the output and
 * dropped.  Memory therefore stays bounded by the run budget plus one chunk
 * of staging per run, whatever the input size.
 *
 * It never checks frontiers (txn/ does) and never exceeds its run budget
 * of pool memory, whatever the input.
 */
#ifndef ARRANGEMENT_BUILDER_H
#define ARRANGEMENT_BUILDER_H

#include "arrangement/batch.h"

typedef struct builder builder;

/* run_budget: bytes of pool memory for one run (0 = 64 MiB).
 * Errors: AH_ENOMEM. */
int builder_new(heap_txn *t, pool *p, size_t run_budget, builder **out);
/* Copies the updates.  No frontier checks here (txn/ checks).
 * Errors: AH_ENOMEM, AH_ELIMIT (diff sum overflow), AH_EFULL, AH_EIO. */
int builder_push(builder *b, const ah_update *ups, size_t n);
/* Writes the batch with Description d; *id = 0 when it consolidated to
 * nothing.  Frees the builder whatever the result. */
int builder_finish(builder *b, const batch_desc *d, uint64_t *id);
void builder_free(builder *b);
/* Peak pool bytes this builder held (for the bounded-memory test). */
uint64_t builder_peak_bytes(const builder *b);
/* For tests: the writer's run mode in write_run (and the merge's run loop
 * at finish) on (the default) or off; pushes, when not NULL, is added the
 * updates the mode staged, until the builder is freed. */
void builder_set_runs(builder *b, bool on, uint64_t *pushes);

#endif
