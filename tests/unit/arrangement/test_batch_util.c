/*
 * tests/unit/arrangement/test_batch_util.c - helpers of the batch_* and
 * cursor_* suites (see test_batch_util.h).  Every helper asserts; none is a
 * test itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "test_batch_util.h"

void bt_open(bt_env *e)
{
	ah_open_opts o = {.size = sizeof o,
	                  .flags = AH_OPEN_CREATE | AH_OPEN_NOSYNC};
	char path[128];
	memset(e, 0, sizeof *e);
	strcpy(e->dir, "/tmp/ah-bt-XXXXXX");
	cr_assert_not_null(mkdtemp(e->dir));
	snprintf(path, sizeof path, "%s/heap", e->dir);
	cr_assert_eq(heap_open(path, &o, &e->h), 0);
	e->p = heap_pool(e->h);
	cr_assert_not_null(e->p);
	cr_assert_eq(heap_txn_begin(e->h, false, &e->t), 0);
}

void bt_commit(bt_env *e, bool next_rdonly)
{
	cr_assert_eq(heap_txn_commit(e->t), 0);
	e->t = NULL;
	cr_assert_eq(heap_txn_begin(e->h, next_rdonly, &e->t), 0);
}

void bt_close(bt_env *e)
{
	char cmd[160];
	if (e->t)
		cr_assert_eq(heap_txn_commit(e->t), 0);
	e->t = NULL;
	cr_assert_eq(heap_close(e->h), 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
	cr_assert_eq(system(cmd), 0);
}

uint64_t bt_write(bt_env *e, bt_gen g, void *arg, uint64_t n,
                  const batch_desc *d)
{
	batch_writer *w;
	bt_item it;
	uint64_t id;
	cr_assert_eq(batch_writer_new(e->t, e->p, &w), 0);
	for (uint64_t i = 0; i < n; i++) {
		g(i, &it, arg);
		int rc = batch_writer_push(w, it.key, it.klen, it.val, it.vlen,
		                           it.time, it.diff);
		cr_assert_eq(rc, 0, "push %llu: %d", (unsigned long long)i, rc);
	}
	cr_assert_eq(batch_writer_finish(w, d, &id), 0);
	return id;
}

batch *bt_load(bt_env *e, uint64_t id)
{
	batch *b = NULL;
	cr_assert_eq(batch_load(e->t, id, &b), 0);
	return b;
}

void bt_check_ok(bt_env *e, uint64_t id)
{
	char msg[256];
	batch *b = bt_load(e, id);
	int rc = batch_check(e->t, b, true, msg, sizeof msg);
	cr_assert_eq(rc, 0, "batch_check: %s", msg);
	batch_free(b);
}

static void step_ok(int rc)
{
	cr_assert_eq(rc, 0, "cursor step: %d", rc);
}

/* Walks the cursor in (key, val, time) order against the generator. */
void bt_scan_equal(bt_env *e, uint64_t id, bt_gen g, void *arg, uint64_t n)
{
	batch *b = bt_load(e, id);
	batch_cursor *c;
	bt_item it;
	uint64_t i = 0, keys = 0, vals = 0;
	cr_assert_eq(bcur_open(e->t, b, frontier_of(0), &c), 0);
	for (; bcur_key_valid(c); step_ok(bcur_step_key(c))) {
		const void *k, *v;
		size_t kl, vl;
		bcur_key(c, &k, &kl);
		keys++;
		for (; bcur_val_valid(c); step_ok(bcur_step_val(c))) {
			uint64_t t;
			int64_t df;
			int rc;
			bcur_val(c, &v, &vl);
			vals++;
			while ((rc = bcur_time_next(c, &t, &df)) == 1) {
				cr_assert_lt(i, n);
				g(i, &it, arg);
				cr_assert_eq(kl, it.klen, "key len at %llu",
				             (unsigned long long)i);
				cr_assert(kl == 0 || memcmp(k, it.key, kl) == 0);
				cr_assert_eq(vl, it.vlen, "val len at %llu",
				             (unsigned long long)i);
				cr_assert(vl == 0 || memcmp(v, it.val, vl) == 0);
				cr_assert_eq(t, it.time, "time at %llu",
				             (unsigned long long)i);
				cr_assert_eq(df, it.diff);
				i++;
			}
			cr_assert_eq(rc, 0);
		}
	}
	cr_assert_eq(i, n);
	cr_assert_eq(b->updates, n);
	cr_assert_eq(b->keys, keys);
	cr_assert_eq(b->vals, vals);
	bcur_close(c);
	batch_free(b);
}
