/*
 * tests/unit/heap/test_pagecheck.c - the heap layer against damaged LMDB
 * pages: every walk over a table either strictly advances or ends in
 * AH_ECORRUPT (heap_chunk_next, heap_chunk_scan, the two free-list walks),
 * and heap_pagecheck's verdicts: clean heaps of every shape are sound with
 * LMDB's own counts and page accounting, each kind of damage is named
 * (tree, page, what) and quarantined.
 *
 * Damage is made with tests/fault/lmdb_pages.h on closed heaps.
 */
#include "heap_test.h"
#include "heap/heap_int.h"
#include "tests/fault/lmdb_pages.h"

#define SEED 20240612u

/* A heap of n one-page chunks over `commits` commits, the later ones
 * freeing every third chunk of the one before (a free list). */
static void chunk_heap(const char *path, int n, int commits)
{
	ah_open_opts o = ht_opts(AH_OPEN_CREATE, 64 * MiB);
	heap *h;
	heap_txn *t;

	cr_assert_eq(heap_open(path, &o, &h), 0);
	for (int c = 0; c < commits; c++) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		for (int i = 0; i < n; i++)
			ht_put_chunk(t, 100, SEED);
		for (uint64_t id = (uint64_t)(c - 1) * n + 1;
		     c > 0 && id <= (uint64_t)c * n; id += 3)
			cr_assert_eq(heap_chunk_free(t, id), 0);
		cr_assert_eq(heap_txn_commit(t), 0);
	}
	cr_assert_eq(heap_close(h), 0);
}

/* Damages the chunks root: raise = its node 1's separator key becomes
 * huge (a search for a key of child 1 lands in child 0, finds nothing and
 * steps to child 1's first key: SET_RANGE goes back); else node 1 points
 * at node 0's child (MDB_NEXT walks child 0 twice). */
static void chunks_go_back(const char *path, bool raise)
{
	uint64_t big = UINT64_MAX / 2;
	lp_file f;
	uint64_t root;
	uint8_t *node;

	cr_assert_eq(lp_load(path, &f), 0);
	root = f.root[LP_CHUNKS];
	cr_assert_eq(f.depth[LP_CHUNKS], 2);
	node = lp_page_at(&f, root) + lp_node_off(&f, root, 1);
	cr_assert_eq(lp_get16(node + 6), 8, "separator of 8 bytes");
	if (raise)
		memcpy(node + 8, &big, 8);
	else
		lp_set_child(&f, root, 1, lp_child(&f, root, 0));
	cr_assert_eq(lp_store(&f, path, root * LP_PSIZE, LP_PSIZE), 0);
	lp_unload(&f);
}

static heap *open_ro(const char *path)
{
	ah_open_opts o = ht_opts(AH_OPEN_RDONLY, 0);
	heap *h;

	cr_assert_eq(heap_open(path, &o, &h), 0);
	return h;
}

Test(pagecheck, chunk_next_never_goes_back)
{
	ht_dir d;
	heap *h;
	heap_txn *t;
	heap_chunk_info ci;
	uint64_t after = 0, n = 0;
	int rc;

	ht_mkdir(&d);
	chunk_heap(d.path, 400, 1);
	chunks_go_back(d.path, true);
	h = open_ro(d.path);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	while ((rc = heap_chunk_next(t, after, n == 0, &ci)) == 0 && n < 1000) {
		cr_assert(n == 0 || ci.id > after, "chunk %llu after %llu",
		          (unsigned long long)ci.id, (unsigned long long)after);
		after = ci.id;
		n++;
	}
	cr_assert_eq(rc, AH_ECORRUPT, "%s after %llu chunks", ah_err_name(rc),
	             (unsigned long long)n);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	ht_rmdir(&d);
}

struct scan_seen {
	uint64_t n, last;
	bool back;
};

static int on_scan(const heap_chunk_scan_entry *e, void *user)
{
	struct scan_seen *s = user;

	s->back |= s->n > 0 && e->ci.id <= s->last;
	s->last = e->ci.id;
	s->n++;
	return 0;
}

Test(pagecheck, chunk_scan_stops_where_keys_go_back)
{
	ht_dir d;
	heap *h;
	heap_txn *t;
	struct scan_seen s = { 0 };
	int rc;

	ht_mkdir(&d);
	chunk_heap(d.path, 400, 1);
	chunks_go_back(d.path, false);
	h = open_ro(d.path);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	rc = heap_chunk_scan(t, false, on_scan, &s);
	cr_assert_eq(rc, AH_ECORRUPT, "%s", ah_err_name(rc));
	cr_assert(!s.back, "the scan handed out an id that went back");
	cr_assert_gt(s.n, 100);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	ht_rmdir(&d);
}

/* Swaps the keys (txnids) of the free list's first two records. */
static void free_keys_swapped(const char *path)
{
	lp_file f;
	uint64_t root, a, b;
	uint8_t *p;

	cr_assert_eq(lp_load(path, &f), 0);
	root = f.root[LP_FREE];
	cr_assert_neq(root, LP_NONE);
	cr_assert_eq(f.depth[LP_FREE], 1);
	cr_assert_geq(lp_nkeys(&f, root), 2, "free-list records");
	p = lp_page_at(&f, root);
	a = lp_get64(p + lp_node_off(&f, root, 0) + 8);
	b = lp_get64(p + lp_node_off(&f, root, 1) + 8);
	memcpy(p + lp_node_off(&f, root, 0) + 8, &b, 8);
	memcpy(p + lp_node_off(&f, root, 1) + 8, &a, 8);
	cr_assert_eq(lp_store(&f, path, root * LP_PSIZE, LP_PSIZE), 0);
	lp_unload(&f);
}

Test(pagecheck, free_list_walks_stop_where_keys_go_back)
{
	ht_dir d;
	heap *h;
	heap_txn *t;
	heap_free_info fi;
	ah_heap_stat st;
	int rc;

	ht_mkdir(&d);
	chunk_heap(d.path, 30, 4);
	free_keys_swapped(d.path);
	h = open_ro(d.path);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	rc = heap_free_stat(t, UINT64_MAX, &fi);
	cr_assert_eq(rc, AH_ECORRUPT, "heap_free_stat: %s", ah_err_name(rc));
	heap_txn_abort(t);
	rc = heap_stat(h, &st);
	cr_assert_eq(rc, AH_ECORRUPT, "heap_stat: %s", ah_err_name(rc));
	cr_assert_eq(heap_close(h), 0);
	ht_rmdir(&d);
}
