/*
 * tests/unit/arrangement/arr_test.h - the arrangement layer's unit-test
 * fixture, shared by every suite of tests/unit/arrangement (one binary
 * links them all, so every name carries the at_ prefix):
 *  - at_env: a heap in a private temp directory with its pool and one open
 *    heap transaction (at_open, at_commit, at_close); arr_test.c.
 *  - batch streams: writing a batch from a generator callback, reading one
 *    back and comparing it with the generator, batch_check; arr_test.c.
 *  - the reference model: updates with inline bytes (at_up), a seeded
 *    generator of them, sort + consolidate (optionally advanced to since),
 *    building a batch with the builder, scanning one back, comparing runs
 *    and chunk bodies; arr_model.c.
 * Every helper asserts through Criterion (the test's own process only);
 * none is a test itself.  Built on the heap fixture (tests/unit/heap) and
 * tests/lib.  Test-only; never linked into the library.
 */
#ifndef TESTS_UNIT_ARRANGEMENT_ARR_TEST_H
#define TESTS_UNIT_ARRANGEMENT_ARR_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "arrangement/batch_int.h"
#include "../heap/heap_test.h"

/* ------------------------------------------------------------ fixture */

typedef struct at_env {
	tl_dir dir;
	heap *h;
	heap_txn *t;
	pool *p;
} at_env;

/* Creates the heap (AH_OPEN_NOSYNC) and begins a write transaction. */
void at_open(at_env *e);
/* Commits the transaction and begins the next (read-only or write). */
void at_commit(at_env *e, bool next_rdonly);
/* Commits the open transaction, closes the heap, removes the directory. */
void at_close(at_env *e);
/* The chunks e's transaction sees. */
uint64_t at_count_chunks(at_env *e);

/* ------------------------------------------------------ batch streams */

/* Update i of a generated stream: key/val point at buffers of the
 * generator (at least 64 bytes each unless the generator says otherwise). */
typedef struct at_item {
	const void *key, *val;
	size_t klen, vlen;
	uint64_t time;
	int64_t diff;
} at_item;
typedef void (*at_gen_fn)(uint64_t i, at_item *it, void *arg);

/* Writes items [0, n) with a fresh writer; returns the batch id. */
uint64_t at_write(at_env *e, at_gen_fn g, void *arg, uint64_t n,
                  const batch_desc *d);
/* Full scan through a batch cursor, comparing with items [0, n). */
void at_scan_equal(at_env *e, uint64_t id, at_gen_fn g, void *arg, uint64_t n);
/* keys "a".."j" (1 byte), vals "v0".."v2" (2 bytes), time i % 2, diff
 * 1 + i % 3: with n = 30, a version-2 chunk of fixed-width keys and vals,
 * one update per val, and dictionaries of 2 times and 3 diffs. */
void at_gen_dict(uint64_t i, at_item *it, void *arg);
/* Writes the 30 updates of at_gen_dict (Description [0, 2)) as a batch of
 * one chunk, in e's write txn: its id, the chunk's id and its body in the
 * map (to damage and reseal; valid until the txn ends). */
uint64_t at_write_dict_chunk(at_env *e, uint64_t *cid, uint8_t **body,
                             size_t *used);
/* at_open and at_write_dict_chunk: a batch of one chunk to damage. */
typedef struct at_chunk {
	at_env e;
	uint64_t id, cid;
	uint8_t *body;
	size_t used;
} at_chunk;
void at_open_dict_chunk(at_chunk *c);
/* heap_chunk_seal of chunk cid of batch id after the test changed its
 * body (a buggy writer), and the batch record's chunk sums (BREC_SUMS)
 * and a hash-4 key filter's bound checks made to agree again. */
void at_reseal(at_env *e, uint64_t id, uint64_t cid, uint8_t *body,
               size_t used);
/* batch_check must pass (with checksums). */
void at_check_ok(at_env *e, uint64_t id);
batch *at_load(at_env *e, uint64_t id);

/* ------------------------------------------------ the writer's order */

/* One (key, val) pushed after the ones before it, with the caller's
 * same_key word, and what the writer must say (0 accepted, else the
 * error): B1's order check against the last staged (key, val), settled
 * on the cached prefixes when they differ and on the bytes when they tie
 * (fields longer than 8 bytes that differ later, a field that is a
 * prefix of the other).  at_order_cases[0 .. at_order_ncases); 7 are
 * accepted, over 4 keys. */
typedef struct at_order_case {
	const char *k, *v;
	bool same_key;
	int want;
} at_order_case;
extern const at_order_case at_order_cases[];
extern const size_t at_order_ncases;

/* ---------------------------------------------------- reference model */

/* One update with inline key/val bytes (the reference model's element). */
typedef struct at_up {
	uint8_t key[16], val[24];
	uint8_t klen, vlen;
	uint64_t time;
	int64_t diff;
} at_up;

/* Shape of generated updates: lengths 0..kmax / 0..vmax over `alpha`
 * letters, times in [0, times), diffs in [-dmax, dmax]. */
typedef struct at_shape {
	unsigned kmax, vmax, alpha;
	uint64_t times;
	int64_t dmax;
} at_shape;

/* n updates from seed (tl_rand). */
void at_gen(at_up *u, size_t n, uint64_t seed, const at_shape *s);
int at_cmp(const at_up *a, const at_up *b);
/* Advances times to since, sorts, sums equal triples, drops zeros. */
size_t at_consolidate(at_up *u, size_t n, uint64_t since);
void at_to_ah(const at_up *u, ah_update *a);
int at_build_rc(at_env *e, const at_up *u, size_t n, size_t budget,
                const batch_desc *d, uint64_t *id, uint64_t *peak);
uint64_t at_build(at_env *e, const at_up *u, size_t n, size_t budget,
                  const batch_desc *d);
/* Reads batch id through a batch cursor (times advanced to since). */
size_t at_scan(at_env *e, uint64_t id, uint64_t since, at_up *out,
               size_t cap);
void at_assert_equal(const at_up *got, size_t ng, const at_up *want,
                     size_t nw, uint64_t seed);
/* Same counts and byte-identical chunk bodies. */
void at_assert_same_chunks(at_env *e, uint64_t a, uint64_t b);
/* The same key filter: key count, blocks, and every filter bit (block
 * checks aside: a filter in a chunk binds them to its chunk id), each
 * block's check passing in its own batch. */
void at_assert_same_filter(at_env *e, uint64_t a, uint64_t b);

#endif /* TESTS_UNIT_ARRANGEMENT_ARR_TEST_H */
