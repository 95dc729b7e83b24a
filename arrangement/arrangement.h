/*
 * arrangement/arrangement.h - the arrangement layer's face to txn/: an
 * arrangement (its frontiers, its trace of batches and the merges in
 * progress, stored as one record) loaded, changed and stored back in the
 * caller's heap transaction; batches built from unsorted updates; trace
 * cursors over its batches; and its checks.
 *
 * txn/ includes this header (and heap/heap.h) and nothing else of
 * arrangement/: the spine, the batch format, the merger and the writer
 * are behind it.  Every function takes the heap transaction the caller
 * owns; a change is durable only when that transaction commits, and a
 * failed change leaves the transaction for the caller to poison.  Times
 * and frontiers are arrangement/time.h's.
 *
 * Terms are differential dataflow's: Description {lower, upper, since},
 * logical compaction (since), physical compaction (merging), fuel
 * (spine_fueled), batches_through (iterating a trace's batches).
 *
 * Nothing here checks the public API's frontier rules or poisons a
 * transaction (txn/ does both), and nothing here is ever reached from
 * tools/ or bench/ (they see include/arrheap.h only).
 */
#ifndef ARRANGEMENT_ARRANGEMENT_H
#define ARRANGEMENT_ARRANGEMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "arrangement/builder.h"
#include "arrangement/cursor.h"
#include "arrangement/time.h"
#include "heap/heap.h"

typedef struct arrangement arrangement;

/* --------------------------------------------------------- the record */

/* Creates NAME with upper = since = the minimum time and no batch.
 * Errors: AH_EEXIST, AH_ECORRUPT, heap_put's. */
int arr_create(heap_txn *t, const char *name);
/* Loads NAME's record; *out is the caller's until arr_free.  Errors:
 * AH_ENOTFOUND, AH_ECORRUPT, AH_ENOMEM. */
int arr_load(heap_txn *t, const char *name, arrangement **out);
/* Stores a's record (under AH_DEBUG, checked against S1-S4 first: a
 * violation is AH_ECORRUPT with msg set).  Errors: as heap_put. */
int arr_store(heap_txn *t, const arrangement *a, char *msg, size_t msglen);
void arr_free(arrangement *a);

const char *arr_name(const arrangement *a);
frontier arr_upper(const arrangement *a);
frontier arr_since(const arrangement *a);
/* The lower of the next batch: the last batch's upper, or the upper when
 * the trace holds no batch (empty advances cost no batch).  Errors:
 * AH_ECORRUPT, AH_ENOMEM. */
int arr_next_lower(heap_txn *t, const arrangement *a, frontier *lower);
/* Counts over the trace's batches (merge outputs in progress included in
 * chunks and bytes).  Errors: AH_ECORRUPT, AH_ENOMEM. */
int arr_info(heap_txn *t, const arrangement *a, ah_arrangement_info *info);

/* ---------------------------------------------------------- changes */

/* Adds the sealed batch id (0: none, an empty advance) at the end of the
 * trace, spends its fuel on merges (spine_fueled), and sets the upper to
 * new_upper.  bg: a merge thread works (spine_push); avoid (0: none) is
 * the first input batch of the merge it is computing, which backpressure
 * leaves to it up to twice the slack.  Errors: AH_ECORRUPT, AH_EFULL,
 * AH_EIO, AH_ENOMEM. */
int arr_append(heap_txn *t, pool *p, arrangement *a, uint64_t id,
               frontier new_upper, uint64_t quantum, bool bg, uint64_t avoid);
/* Merges in progress in a's spine (work for the merge thread). */
uint32_t arr_merging(const arrangement *a);
/* Logical compaction: the caller has checked since <= since' <= upper. */
void arr_set_since(arrangement *a, frontier since);
/* Spends up to fuel units (0: no limit) on merges in progress, then on the
 * merges an idle arrangement still deserves; *idle when nothing is left.
 * Errors: as arr_append. */
int arr_maintain(heap_txn *t, pool *p, arrangement *a, uint64_t fuel,
                 uint64_t quantum, bool bg, uint64_t avoid, bool *idle);
/* Frees every batch of a's trace, every merge's output so far and all
 * their chunks (spine_drop_all), and deletes a's record, in t; a is only
 * to be freed afterwards.  Snapshots older than t still see all of it.
 * Errors: AH_ECORRUPT (a listed batch or chunk is missing), heap_del's. */
int arr_drop(heap_txn *t, arrangement *a);

/* ------------------------------------------------- background merge */

/* A slice of one merge in progress, computed outside any write txn
 * (arrangement/slice.c; ARCHITECTURE §6 "The merge thread"). */
typedef struct arr_slice arr_slice;

/* How much a slice computes: images of at least min_bytes (or the merge's
 * end); past that, on while busy(user) says the install would wait
 * anyway; never past max_bytes (plus one chunk).  picked (may be NULL)
 * is told the merge chosen, by the id of its first input batch (unique:
 * batch ids are never reused), before the compute starts. */
typedef struct arr_slice_bound {
	uint64_t min_bytes, max_bytes;
	bool (*busy)(void *user);
	void (*picked)(void *user, uint64_t first_id);
	/* whole (may be NULL): when it says so, at the compute or at the
	 * install, a merge not yet started whose inputs hold merge_par_min()
	 * to whole_max bytes is not sliced: its install runs it to its end
	 * in the write txn on two threads (merge_parallel); when
	 * merge_parallel does not take it, nothing is written and
	 * arr_slice_refused says so */
	bool (*whole)(void *user);
	uint64_t whole_max;
	void *user;
} arr_slice_bound;

/* In read txn rt: picks a merge in progress of NAME and computes its next
 * slice (output chunks as images in malloc'd memory, as *b bounds them,
 * steps of quantum units) with pool p
 * (the caller's own: not the heap's writer pool).  *out = NULL when NAME
 * does not exist or has no merge in progress.  *stop turning true (read
 * atomically) ends the work early with AH_ESTATE.  rt must stay open until
 * the slice is installed or freed.  Errors: AH_ECORRUPT, AH_ENOMEM,
 * AH_ELIMIT, AH_ESTATE (stopped). */
int arr_slice_compute(heap_txn *rt, pool *p, const char *name,
                      const arr_slice_bound *b, uint64_t quantum,
                      const bool *stop, arr_slice **out);
/* In write txn wt (rt still open): when NAME's spine still holds exactly
 * the merge s was computed from, installs the images as chunks and
 * suspends the merge at the slice's end or completes it (a whole slice,
 * see arr_slice_bound: runs the merge to its end instead; then starts the
 * merges the size policy asks for, running none), stores the spine, and
 * sets *installed.  Otherwise changes nothing (*installed false: discard s).
 * Errors: AH_EFULL, AH_EIO, AH_ECORRUPT, AH_ENOMEM (wt must be aborted). */
int arr_slice_install(heap_txn *wt, pool *p, arr_slice *s, uint64_t quantum,
                      bool *installed);
/* True when s stopped before the end of its merge. */
bool arr_slice_more(const arr_slice *s);
/* True when s's install was to run its merge whole and merge_parallel
 * did not take it (nothing written): the caller's whole must say no from
 * then on, or the same merge would come back whole forever. */
bool arr_slice_refused(const arr_slice *s);
void arr_slice_free(arr_slice *s);

/* --------------------------------------------------------- batches */

/* One batch of the trace, as batches_through hands it out; the pointers
 * live only during the call. */
typedef struct arr_batch {
	uint64_t id;
	batch_desc desc;
	uint64_t updates, keys, vals, bytes, chunk_bytes;
	uint32_t nchunks;
	const uint64_t *chunk_ids;
	const uint64_t *chunk_sums; /* each chunk's XXH3 as the record lists
	                             * it (heap format 7), or NULL */
	bool partial;        /* a merge's output so far, not in the trace */
	unsigned format;     /* chunk body version: 2 (every chunk), or 1 */
	uint64_t filter_keys, filter_blocks; /* the key filter's (0: none) */
} arr_batch;

typedef int (*arr_batch_fn)(const arr_batch *b, void *user);

/* Calls fn for every batch of the trace, oldest first, then (partials) for
 * the output so far of every merge in progress; fn's non-zero value stops
 * the walk and is returned.  Errors: AH_ECORRUPT, AH_ENOMEM: a batch record
 * that cannot be loaded, whose id goes to *bad (may be NULL). */
int arr_batches(heap_txn *t, const arrangement *a, bool partials,
                arr_batch_fn fn, void *user, uint64_t *bad);

/* Reads each batch's key filter whole and checks it against its record
 * (batch_filter_blocks: the chunk's own checksums, its header, and the
 * record's XXH3 of the blocks, which a filter chunk of another write of
 * its id fails).  Errors: AH_ECORRUPT, AH_ENOMEM, AH_EIO, with the batch
 * in *bad. */
int arr_filters_check(heap_txn *t, const arrangement *a, uint64_t *bad);

/* A trace cursor over a's batches, times advanced by its since, positioned
 * at the first key (at = false) or the first key >= key (at = true: one
 * chunk read per batch).  The cursor owns what it loaded: tcur_close frees
 * it.  Errors: AH_ECORRUPT, AH_ENOMEM. */
int arr_cursor(heap_txn *t, const arrangement *a, bool at, const void *key,
               size_t len, trace_cursor **out);
/* A trace cursor over the one batch id of a (in its trace, or a merge's
 * output so far), positioned at its first key, reporting the times as
 * stored in that batch: not advanced by a's since.  Errors: AH_ENOTFOUND
 * (id is none of a's batches), AH_ECORRUPT, AH_ENOMEM. */
int arr_batch_cursor(heap_txn *t, const arrangement *a, uint64_t id,
                     trace_cursor **out);

/* ----------------------------------------------------------- checks */

/* What arr_verify reports: problems, and the references it saw (so the
 * caller can check that every batch and chunk belongs to exactly one
 * arrangement). */
typedef struct arr_verify_cb {
	void (*problem)(void *user, uint64_t batch, uint64_t chunk,
	                const char *msg);
	int (*batch_ref)(void *user, uint64_t batch);   /* AH_ENOMEM stops */
	int (*chunk_ref)(void *user, uint64_t batch, uint64_t chunk);
	void *user;
	bool batches;        /* the batch table may be read */
	bool chunks;         /* the chunks table may be read */
} arr_verify_cb;

/* Checks a's spine (S1-S4) and every batch of it (B1-B6, partial flags,
 * since) and reports each problem and reference through cb.  Returns 0
 * when the check ran (whatever it found), AH_ENOMEM, or a callback's
 * error. */
int arr_verify(heap_txn *t, const arrangement *a, const arr_verify_cb *cb);
/* True for the one key of the batch table that is not a batch (the id
 * counter). */
bool arr_batch_key_is_counter(uint64_t key);

#endif /* ARRANGEMENT_ARRANGEMENT_H */
