/*
 * tests/unit/arrangement/test_spine.c - the spine's size policy
 * (arrangement/spine.c, ARCHITECTURE.md §6 "Spine policy"), pushed with
 * batch sizes chosen to break it: runs of equal sizes, single updates
 * between large batches, sudden large batches after small ones.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>
#include "arrangement/spine.h"
#include "arr_test.h"
#include "tl_heap.h"
#include "tl_rand.h"

/* Public tests set their appends by it; they cannot see SPINE_FANIN. */
_Static_assert(TL_FANIN == SPINE_FANIN, "tests/lib/tl_heap.h: TL_FANIN");

/* Key i as 8 big-endian bytes, val "v", the batch's time, diff 1. */
struct sp_gen {
	uint64_t time;
	uint8_t key[8];
};

static void sp_item(uint64_t i, at_item *it, void *arg)
{
	struct sp_gen *g = arg;

	for (int b = 0; b < 8; b++)
		g->key[b] = (uint8_t)(i >> (56 - 8 * b));
	*it = (at_item){ g->key, "v", 8, 1, g->time, 1 };
}

static bool idle(const spine *sp, uint32_t i)
{
	for (uint32_t m = 0; m < sp->nmerges; m++)
		if (i >= sp->merges[m].first &&
		    i < sp->merges[m].first + sp->merges[m].count)
			return false;
	return true;
}

/* After every push: no SPINE_FANIN adjacent idle batches whose newest
 * holds more than half the oldest's updates (the policy would have
 * started their merge), every update pushed still counted once, and
 * spine_check passes. */
Test(spine, no_merge_left_unstarted)
{
	static const uint64_t span[] = { 3, 40, 400, 3000 };
	uint64_t s = tl_seed("spine/no_merge_left_unstarted", 20261202);
	uint64_t pushed = 0;
	spine sp = { 0 };
	at_env e;
	char msg[256];

	at_open(&e);
	for (uint64_t b = 0; b < 240; b++) {
		/* a run of one size now and then, else any of four spans */
		uint64_t n = b % 40 < 8 ? 100 : 1 + tl_below(&s, span[tl_below(&s, 4)]);
		struct sp_gen g = { b, { 0 } };
		batch_desc d = { frontier_of(b), frontier_of(b + 1), frontier_of(0) };
		uint64_t id = at_write(&e, sp_item, &g, n, &d);

		cr_assert_eq(spine_push(e.t, e.p, &sp, id, n, 256, false, 0), 0);
		sp.upper = frontier_of(b + 1);
		pushed += n;
		uint64_t held = 0;
		for (uint32_t i = 0; i < sp.nbatches; i++)
			held += sp.batches[i].updates;
		cr_assert_eq(held, pushed, "push %" PRIu64, b);
		for (uint32_t i = SPINE_FANIN - 1; i < sp.nbatches; i++) {
			uint32_t first = i + 1 - SPINE_FANIN, j;

			for (j = first; j <= i && idle(&sp, j); j++)
				;
			if (j <= i)
				continue;
			cr_assert_leq(sp.batches[i].updates * 2,
			              sp.batches[first].updates,
			              "push %" PRIu64 ": batches %u..%u (%" PRIu64
			              " .. %" PRIu64 " updates) left unmerged", b,
			              first, i, sp.batches[first].updates,
			              sp.batches[i].updates);
		}
		cr_assert_eq(spine_check(e.t, &sp, msg, sizeof msg), 0, "%s", msg);
		if (b % 60 == 59)
			at_commit(&e, false);
	}
	spine_clear(&sp);
	at_close(&e);
}
