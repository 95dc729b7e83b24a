/*
 * tests/unit/arrangement/test_batch_util.h - helpers shared by the batch_*
 * and cursor_* Criterion suites (test_batch*.c, test_cursor*.c): a heap in a
 * private temp directory, writing a batch from a callback, reading one back.
 * Test code only; names carry the bt_ prefix (one binary links all tests).
 */
#ifndef TEST_BATCH_UTIL_H
#define TEST_BATCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "arrangement/batch_int.h"

typedef struct bt_env {
	char dir[64];
	heap *h;
	heap_txn *t;
	pool *p;
} bt_env;

/* Update i of a generated stream: key/val point at buffers of the
 * generator (at least 64 bytes each unless the generator says otherwise). */
typedef struct bt_item {
	const void *key, *val;
	size_t klen, vlen;
	uint64_t time;
	int64_t diff;
} bt_item;
typedef void (*bt_gen)(uint64_t i, bt_item *it, void *arg);

void bt_open(bt_env *e);
/* Commits the write txn and opens a read txn (or a write txn). */
void bt_commit(bt_env *e, bool next_rdonly);
void bt_close(bt_env *e);
/* Writes items [0, n) with a fresh writer; returns the batch id. */
uint64_t bt_write(bt_env *e, bt_gen g, void *arg, uint64_t n,
                  const batch_desc *d);
/* Full scan through a batch cursor, comparing with items [0, n). */
void bt_scan_equal(bt_env *e, uint64_t id, bt_gen g, void *arg, uint64_t n);
/* batch_check must pass (with checksums). */
void bt_check_ok(bt_env *e, uint64_t id);
batch *bt_load(bt_env *e, uint64_t id);

#endif
