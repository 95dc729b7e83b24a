/*
 * arrangement/cursor.h - the trace cursor: a k-way merge over the batch
 * cursors of several batches, by key then val (differential dataflow's
 * CursorList).  Seeking costs one binary search per batch.
 *
 * The cursor only reads: it never writes to the map or to a batch, and
 * after an error it reports itself invalid instead of guessing.
 */
#ifndef ARRANGEMENT_CURSOR_H
#define ARRANGEMENT_CURSOR_H

#include "arrangement/batch.h"

typedef struct trace_cursor trace_cursor;

/* batches[0..n) must outlive the cursor; times advanced to since.
 * Errors: AH_ENOMEM, AH_ECORRUPT. */
int tcur_open(heap_txn *t, batch *const *batches, size_t n, frontier since,
              trace_cursor **out);
/* As tcur_open, positioned at the first key >= key: each batch reads only
 * the chunk its fences name (a point query's cold page reads), and a batch
 * whose checked key filter excludes key is not read at all while the
 * cursor stands on key (it is opened at key when key is absent elsewhere,
 * and before any key movement).  key is copied: it need not outlive the
 * call. */
int tcur_open_at(heap_txn *t, batch *const *batches, size_t n, frontier since,
                 const void *key, size_t len, trace_cursor **out);
/* The cursor takes batches[0..n) (and the array, malloc'd) and frees them
 * at tcur_close. */
int tcur_adopt(trace_cursor *c, batch **batches, size_t n);
void tcur_close(trace_cursor *c);
bool tcur_key_valid(const trace_cursor *c);
bool tcur_val_valid(const trace_cursor *c);
void tcur_key(const trace_cursor *c, const void **key, size_t *len);
void tcur_val(const trace_cursor *c, const void **val, size_t *len);
int tcur_step_key(trace_cursor *c);
int tcur_seek_key(trace_cursor *c, const void *key, size_t len);
int tcur_step_val(trace_cursor *c);
/* tcur_step_val, returning 1 when the cursor is then on a val, 0 when not. */
int tcur_next_val(trace_cursor *c);
int tcur_seek_val(trace_cursor *c, const void *val, size_t len);
int tcur_rewind_keys(trace_cursor *c);
int tcur_rewind_vals(trace_cursor *c);
/* (time, diff) pairs of the current (key, val) over every batch that holds
 * it, batch by batch.  1 = pair, 0 = end, <0 = error. */
int tcur_time_next(trace_cursor *c, uint64_t *time, int64_t *diff);
int tcur_times_rewind(trace_cursor *c);
/* The sum of the diffs of the current (key, val) whose time is <= as_of,
 * exactly what summing tcur_time_next's pairs gives (128 bits: the caller
 * decides whether it fits), in place in the chunks; afterwards time_next
 * returns 0 until tcur_times_rewind.  Errors: AH_ESTATE (not on a val;
 * *sum = 0, the cursor unchanged), AH_ECORRUPT (sticky, as every
 * movement's). */
int tcur_accumulate(trace_cursor *c, atime as_of, diff_sum *sum);

#endif
