/*
 * tools/engine/engine.h - an engine's operators over arrheap arrangements:
 * arrange_by, reduce and join, maintained incrementally as derived
 * arrangements in the same write transaction as the updates they derive
 * from.  It uses only the public header (arrheap.h): it is the proof that
 * the library carries an engine's operators, and the layer ah-pgsync's
 * views are built on (tools/pg/views.c).
 *
 * A graph is a list of nodes in the order they were added; each node reads
 * one or two input arrangements (base arrangements the caller fills, or the
 * outputs of earlier nodes) and owns one output arrangement.  eg_step(txn,
 * lower, upper) advances every node's output from upper `lower` to `upper`:
 * it reads each input's updates with times in [lower, upper) (the delta),
 * computes the output's updates at those times and appends them as one
 * batch [lower, upper).  The caller appends the base inputs first, in the
 * same transaction, so a commit holds inputs and outputs at one frontier.
 *
 * Operators (sources: differential dataflow src/operators/join.rs,
 * reduce.rs, arrange/; times are u64 and totally ordered):
 *   arrange_by  out(k', v') += diff for every fn(k, v) -> (k', v'): re-keys
 *               (and projects, and filters: fn may emit nothing) a
 *               collection into its own arrangement.
 *   reduce      for every key touched by the delta and every distinct time
 *               t of its delta, in order: the input's accumulated
 *               (val, count) list at t is given to fn, which says the
 *               output's (val, count) list; the difference from the
 *               output's accumulation at t (stored, plus what this step
 *               emitted at earlier times) is emitted at t.  An empty input
 *               list gives an empty output (SQL: no group, no row).
 *   join        equi-join on the key: for every pair of updates (k, va, ta,
 *               da) of A and (k, vb, tb, db) of B that is new in [lower,
 *               upper), fn(k, va, vb) -> (k', v') at time max(ta, tb) with
 *               diff da * db.  New pairs = dA x B(< upper) + A(< lower) x dB.
 *
 * Frontier rules (checked by eg_step; AH_EUPPER / AH_ECOMPACTED with the
 * message in eg_errmsg): every input's upper >= upper; every output's upper
 * == lower; every input's since < lower when lower > 0 (so the delta's
 * times are exact: a since at or past lower would merge older times into
 * the delta's).  Inputs may be ahead of upper (a second reader that lags
 * the writer): every read is filtered by time.
 *
 * Memory: one step holds its inputs' deltas and its outputs' updates in
 * malloc'd arrays (the first step, from lower 0, holds whole inputs); the
 * appends go through ah_builder in pieces.  Errors: 0, or a negative AH_E*
 * code of the library or of a callback; the graph's message (eg_errmsg)
 * names the node and what failed.  On an error the caller aborts the
 * transaction (the library has poisoned it, or the outputs are half
 * appended).  Never prints, never commits, never opens the heap.
 */
#ifndef TOOLS_ENGINE_ENGINE_H
#define TOOLS_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "arrheap.h"

typedef struct eg_graph eg_graph;
/* Where a node's function emits; valid only during the call. */
typedef struct eg_out eg_out;

/* Emits (key, val) (arrange_by, join: with the diff the engine is applying;
 * copied).  0 or AH_ENOMEM; AH_ELIMIT for a key or val over 4 GiB - 1. */
int eg_emit(eg_out *o, const void *key, size_t key_len, const void *val, size_t val_len);
/* Emits an output val of the key being reduced with its count (reduce;
 * copied).  Vals may come in any order and repeat: counts are summed. */
int eg_emit_val(eg_out *o, const void *val, size_t val_len, int64_t count);
/* Sets the graph's message to "node NAME: MSG" and returns AH_EINVAL: what
 * a callback returns for input it cannot handle. */
int eg_fail(eg_out *o, const char *msg);

/* The callbacks: return 0, or a negative AH_E* code (eg_fail) to stop the
 * step.  key/val point into the map or into the engine's memory, valid
 * during the call only. */
typedef int (*eg_map_fn)(void *user, const void *key, size_t key_len, const void *val,
                         size_t val_len, eg_out *o);
typedef struct eg_valcount {
	const void *val;
	size_t len;
	int64_t count;  /* accumulated, never 0 */
} eg_valcount;
/* in[0..n): the key's accumulated vals in bytewise order, n >= 1. */
typedef int (*eg_reduce_fn)(void *user, const void *key, size_t key_len, const eg_valcount *in,
                            size_t n, eg_out *o);
typedef int (*eg_join_fn)(void *user, const void *key, size_t key_len, const void *va,
                          size_t la, const void *vb, size_t lb, eg_out *o);

/* A new empty graph (*out owned by the caller until eg_graph_free).  0 or
 * AH_ENOMEM. */
int eg_graph_new(eg_graph **out);
void eg_graph_free(eg_graph *g);

/* Adds a node (names are copied; user is kept).  Inputs must be base
 * arrangements or outputs of nodes added before; an output name is used by
 * one node only.  0, AH_EINVAL (a name empty or over AH_NAME_MAX bytes, a
 * reused output name, a node reading its own output or an output an
 * earlier node reads) or AH_ENOMEM.  The library's other name rules are
 * checked when the arrangement is made (eg_create: AH_EINVAL there). */
int eg_arrange_by(eg_graph *g, const char *out, const char *in, eg_map_fn fn, void *user);
int eg_reduce(eg_graph *g, const char *out, const char *in, eg_reduce_fn fn, void *user);
int eg_join(eg_graph *g, const char *out, const char *a, const char *b, eg_join_fn fn,
            void *user);

/* The graph's shape: its nodes' outputs in order, and its base inputs
 * (inputs that are no node's output), each once, in the order first read.
 * Names are owned by the graph; NULL past the end. */
size_t eg_node_count(const eg_graph *g);
const char *eg_node_output(const eg_graph *g, size_t i);
size_t eg_base_count(const eg_graph *g);
const char *eg_base_input(const eg_graph *g, size_t i);

/* Creates, in txn, every node's output arrangement that does not exist yet
 * (upper 0).  0 or the library's errors. */
int eg_create(eg_graph *g, ah_txn *txn);

/* Advances every node, in order, from lower to upper (lower < upper; see
 * the frontier rules above).  0 or an error (see the top). */
int eg_step(eg_graph *g, ah_txn *txn, uint64_t lower, uint64_t upper);

/* Counters since eg_graph_new, per graph: updates read from inputs (deltas
 * and the state they are joined or reduced with) and updates emitted
 * (before consolidation) and appended (after). */
typedef struct eg_stats {
	uint64_t steps;
	uint64_t delta_updates;  /* input updates in [lower, upper) read */
	uint64_t state_updates;  /* other input/output updates read */
	uint64_t emitted;
	uint64_t appended;
} eg_stats;
void eg_stats_get(const eg_graph *g, eg_stats *st);

/* ------------------------------------------------ readers and compaction */

/* A second reader (differential dataflow's TraceAgent, with its read hold
 * stored in the heap): one step of the reader NAME, whose views are g's
 * nodes.  In one write transaction of heap it
 *   - reads its position: the outputs' upper (all of g's outputs are at one
 *     upper; AH_ECORRUPT with the message otherwise);
 *   - takes U, the least upper of g's base inputs (inputs that are no
 *     node's output); if U is past the position:
 *   - sets (renews) hold NAME on every base input at U - 1 with lease_ms
 *     (0: no lease), so that their since stays below its next lower;
 *   - steps g from the position to U and stores U as source NAME (8 bytes,
 *     little endian);
 *   - commits.
 * *pos (may be NULL) gets the position after, *moved (may be NULL) 1 if
 * it stepped.  Without new input it still renews the holds (at the
 * position - 1) and commits, so a live reader's lease never runs out.
 * Errors: AH_ECOMPACTED when a base input's since passed the reader's
 * position: its hold was released (the lease ran out while the reader was
 * away) and the data it needed is compacted; the message says so and names
 * the fix (its views must be computed anew: drop them and step from 0); the errors of
 * eg_step, ah_hold_set and ah_txn_commit.  Nothing is written on error. */
int eg_reader_step(eg_graph *g, ah_heap *heap, const char *name, uint64_t lease_ms,
                   uint64_t *pos, int *moved);

/* Logical compaction that respects readers: advances NAME's since to
 * min(frontier, the meet of its live holds) when that is past its since
 * (a no-op otherwise).  *since (may be NULL) gets the since after.  Errors:
 * those of ah_hold_meet and ah_set_since (the txn is then poisoned). */
int eg_compact(ah_txn *txn, const char *name, uint64_t frontier, uint64_t *since);

/* The last error's one-line message ("" if none); owned by the graph,
 * valid until its next call. */
const char *eg_errmsg(const eg_graph *g);

#endif /* TOOLS_ENGINE_ENGINE_H */
