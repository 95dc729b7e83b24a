/*
 * tests/unit/heap/test_heap_loc.c - heap_chunk_open_at's remembered
 * places: a read txn remembers where a chunk is and the next one reads it
 * there without LMDB's get; a place that does not hold the chunk (another
 * chunk's, outside the map, a garbage word) is looked up afresh and
 * corrected, a write txn never uses one, and a remap keeps the places
 * right.  (A place is remembered only for a chunk whose id is never handed
 * out again while the place is used, heap.h: a batch's chunks.)
 */
#include <sys/mman.h>

#include "heap_test.h"
#include "heap/chunk_int.h"

#define SEED 20261202u

static void same_chunk(heap_txn *t, uint64_t id, uint64_t *loc)
{
	heap_chunk_view v;

	cr_assert_eq(heap_chunk_open_at(t, id, loc, HEAP_CHUNK_WHOLE, &v), 0,
	             "chunk %" PRIu64, id);
	cr_assert_eq(v.id, id);
	cr_assert(ht_same(v.body, v.body_used, SEED, id), "chunk %" PRIu64, id);
}

Test(heap_loc, places_are_remembered_and_checked)
{
	tl_dir d = tl_tmpdir("loc");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	heap_txn *t;
	heap *h;
	uint64_t a, b, la = 0, lb = 0;

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	a = ht_put_chunk(t, 20000, SEED);
	b = ht_put_chunk(t, 300000, SEED);
	/* a write txn neither uses nor fills a place */
	same_chunk(t, a, &la);
	cr_assert_eq(la, 0);
	cr_assert_eq(heap_txn_commit(t), 0);

	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	same_chunk(t, a, &la);
	same_chunk(t, b, &lb);
	cr_assert_neq(la, 0, "a read txn remembers the place");
	cr_assert_neq(la, lb);
	uint64_t ra = la, rb = lb;
	same_chunk(t, a, &la); /* from the place */
	cr_assert_eq(la, ra);
	/* another chunk's place, a place past the map, garbage: each is
	 * looked up (the header there is not chunk a's) and corrected */
	const uint64_t wrong[] = { rb, (UINT64_MAX >> 24) << 24 | 4, 1, ~0ull };
	for (unsigned i = 0; i < 4; i++) {
		la = wrong[i];
		same_chunk(t, a, &la);
		cr_assert_eq(la, ra, "case %u", i);
	}
	heap_txn_abort(t);

	/* A new handle finds the same places; after a remap
	 * (heap_set_max_bytes maps the file anew, perhaps elsewhere) the
	 * remembered places still name the chunks. */
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	la = lb = 0;
	same_chunk(t, a, &la);
	same_chunk(t, b, &lb);
	heap_txn_abort(t);
	cr_assert_eq(la, ra, "a chunk keeps its place across handles");
	cr_assert_eq(heap_set_max_bytes(h, 256 * MiB), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	same_chunk(t, a, &la);
	same_chunk(t, b, &lb);
	cr_assert_eq(la, ra);
	cr_assert_eq(lb, rb);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* The map's base is taken from a chunk's LMDB page number only where
 * chunk_map_base_ok finds LMDB's metas of the commit the txn sees: two
 * pages that only look like metas (numbers 0 and 1, P_META, the magic:
 * a stored value may hold such pages, found by an outside test) are not
 * the base unless the meta page of that commit holds its txnid; an
 * unmapped address is refused without a read (mincore); the map's own
 * start (learned by a lookup) is accepted. */
Test(heap_loc, a_base_needs_the_metas_of_the_commit_seen)
{
	tl_dir d = tl_tmpdir("locbase");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	heap_txn *t;
	heap *h;
	uint64_t a, la = 0;

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	a = ht_put_chunk(t, 20000, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	same_chunk(t, a, &la); /* learns the base */
	const uint8_t *base = __atomic_load_n(&h->map_base, __ATOMIC_ACQUIRE);
	cr_assert_not_null(base);
	cr_assert(chunk_map_base_ok(t, base), "the map's own start");
	uint64_t seen = (uint64_t)mdb_txn_id(t->txn);

	size_t ps = h->psize;
	uint8_t *fake = mmap(NULL, 3 * ps, PROT_READ | PROT_WRITE,
	                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(fake != MAP_FAILED);
	memcpy(fake, base, 2 * ps); /* LMDB's metas, copied */
	cr_assert(chunk_map_base_ok(t, fake), "an exact copy of the metas");
	for (unsigned i = 0; i < 2; i++) { /* the commit seen: another */
		uint64_t other = seen + 2 + i;
		memcpy(fake + i * ps + 144, &other, 8);
	}
	cr_assert(!chunk_map_base_ok(t, fake), "metas of another commit");
	memcpy(fake + (seen & 1) * ps + 144, &seen, 8);
	cr_assert(chunk_map_base_ok(t, fake), "the commit seen, in its page");
	fake[10] = 0; /* page 0 not P_META */
	cr_assert(!chunk_map_base_ok(t, fake), "page 0 not a meta");
	cr_assert_eq(munmap(fake, 3 * ps), 0);
	cr_assert(!chunk_map_base_ok(t, fake), "unmapped: refused, not read");
	cr_assert(!chunk_map_base_ok(t, base + ps), "not page-0 aligned data");
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
