/*
 * tests/unit/arrangement/test_builder_util.h - helpers shared by the
 * builder_* and merge_* Criterion suites (test_builder*.c, test_merge*.c).
 * Test code only: it asserts through Criterion and never runs in the
 * library.
 */
#ifndef TEST_BUILDER_UTIL_H
#define TEST_BUILDER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "arrangement/batch_int.h"

typedef struct tb_env {
	char dir[64];
	heap *h;
	heap_txn *t;
	pool *p;
} tb_env;

/* One update with inline key/val bytes (the reference model's element). */
typedef struct tb_up {
	uint8_t key[16], val[24];
	uint8_t klen, vlen;
	uint64_t time;
	int64_t diff;
} tb_up;

/* Shape of generated updates: lengths 0..kmax / 0..vmax over `alpha`
 * letters, times in [0, times), diffs in [-dmax, dmax]. */
typedef struct tb_shape {
	unsigned kmax, vmax, alpha;
	uint64_t times;
	int64_t dmax;
} tb_shape;

uint64_t tb_rng(uint64_t *s);
void tb_open(tb_env *e);
void tb_commit_reopen(tb_env *e);
void tb_close(tb_env *e);
void tb_gen(tb_up *u, size_t n, uint64_t seed, const tb_shape *s);
int tb_cmp(const tb_up *a, const tb_up *b);
/* Advances times to since, sorts, sums equal triples, drops zeros. */
size_t tb_consolidate(tb_up *u, size_t n, uint64_t since);
void tb_to_ah(const tb_up *u, ah_update *a);
int tb_build_rc(tb_env *e, const tb_up *u, size_t n, size_t budget,
                const batch_desc *d, uint64_t *id, uint64_t *peak);
uint64_t tb_build(tb_env *e, const tb_up *u, size_t n, size_t budget,
                  const batch_desc *d);
/* Reads batch id through a batch cursor (times advanced to since). */
size_t tb_scan(tb_env *e, uint64_t id, uint64_t since, tb_up *out,
               size_t cap);
void tb_assert_equal(const tb_up *got, size_t ng, const tb_up *want,
                     size_t nw, uint64_t seed);
/* Same counts and byte-identical chunk bodies. */
void tb_assert_same_chunks(tb_env *e, uint64_t a, uint64_t b);
uint64_t tb_count_chunks(tb_env *e);

#endif
