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
#include <sys/wait.h>

#include "heap_test.h"
#include "heap/heap_int.h"
#include "tests/fault/lmdb_pages.h"

#define SEED 20240612u

/* A heap of n one-page chunks over `commits` commits, the later ones
 * freeing every third chunk of the one before (a free list). */
static void chunk_heap(const char *path, int n, int commits)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
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
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	heap *h;

	cr_assert_eq(heap_open(path, &o, &h), 0);
	return h;
}

Test(pagecheck, chunk_next_never_goes_back)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	heap_chunk_info ci;
	uint64_t after = 0, n = 0;
	int rc;

	d = tl_tmpdir("heap");
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
	tl_rmdir(&d);
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
	tl_dir d;
	heap *h;
	heap_txn *t;
	struct scan_seen s = { 0 };
	int rc;

	d = tl_tmpdir("heap");
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
	tl_rmdir(&d);
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
	tl_dir d;
	heap *h;
	heap_txn *t;
	heap_free_info fi;
	ah_heap_stat st;
	int rc;

	d = tl_tmpdir("heap");
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
	tl_rmdir(&d);
}

/* ------------------------------------------------------ heap_pagecheck */

struct seen_problems {
	int n;
	enum heap_tree tree;  /* the first problem's */
	uint64_t pgno;
	char first[240];
};

static int on_problem(const heap_page_problem *p, void *user)
{
	struct seen_problems *s = user;

	if (s->n++ == 0) {
		s->tree = p->tree;
		s->pgno = p->pgno;
		snprintf(s->first, sizeof s->first, "%s", p->message);
	}
	return 0;
}

static void check(heap *h, struct seen_problems *s, heap_pagecheck_stat *st)
{
	heap_txn *t;

	memset(s, 0, sizeof *s);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_pagecheck(t, on_problem, s, st), 0);
	heap_txn_abort(t);
	cr_assert_eq((uint64_t)s->n, st->problems);
}

/* The walk's counts are LMDB's (mdb_stat, the free list's IDLs), and
 * LMDB's accounting holds, on heaps of several shapes and histories. */
Test(pagecheck, clean_heaps_are_sound_with_lmdb_counts)
{
	static const int shapes[][2] = { { 1, 1 }, { 400, 1 }, { 30, 6 },
	                                 { 2000, 2 } };
	struct seen_problems s;
	heap_pagecheck_stat st;
	tl_dir d;

	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		heap *h;
		heap_txn *t;
		MDB_stat ms;
		uint64_t used = 0;

		d = tl_tmpdir("heap");
		chunk_heap(d.path, shapes[i][0], shapes[i][1]);
		h = open_ro(d.path);
		check(h, &s, &st);
		cr_assert_eq(s.n, 0, "shape %zu: %s (page %llu)", i, s.first,
		             (unsigned long long)s.pgno);
		cr_assert_eq(st.quarantined, 0);
		cr_assert_eq(heap_txn_begin(h, true, &t), 0);
		for (int tr = 0; tr < HEAP_TREE__COUNT; tr++) {
			MDB_dbi dbi = tr == HEAP_TREE_FREE ? 0 : tr == HEAP_TREE_MAIN
			                      ? 1 : h->dbi[tr];
			const heap_tree_stat *ts = &st.tree[tr];

			cr_assert_eq(mdb_stat(t->txn, dbi, &ms), 0);
			cr_assert(ts->depth == ms.ms_depth &&
			          ts->branch_pages == ms.ms_branch_pages &&
			          ts->leaf_pages == ms.ms_leaf_pages &&
			          ts->overflow_pages == ms.ms_overflow_pages &&
			          ts->entries == ms.ms_entries && !ts->damaged,
			          "shape %zu tree %s", i, heap_tree_name(tr));
			used += ts->branch_pages + ts->leaf_pages + ts->overflow_pages;
		}
		cr_assert_eq(st.tree[HEAP_TREE_CHUNKS].entries,
		             (uint64_t)(shapes[i][0] * shapes[i][1] -
		                        (shapes[i][1] - 1) *
		                                ((shapes[i][0] + 2) / 3)));
		cr_assert_eq(used + st.free_pages + 2, st.last_pg + 1);
		if (shapes[i][1] > 1)
			cr_assert_gt(st.free_pages, 0, "shape %zu has a free list", i);
		heap_txn_abort(t);
		cr_assert_eq(heap_close(h), 0);
		tl_rmdir(&d);
	}
}

enum damage { D_DUPDATA, D_CHILD_ROOT, D_OVERFLOW_FLAGS, D_FREE_REACHABLE,
              D_RECORD_ENTRIES, D_MAIN_FLAGS, D_LAST_PG };

/* Damages the file at path; returns the page it damaged. */
static uint64_t damage(const char *path, enum damage k)
{
	lp_file f;
	uint64_t pg = 0, v;
	uint8_t *p;

	cr_assert_eq(lp_load(path, &f), 0);
	switch (k) {
	case D_DUPDATA: /* a leaf node of the chunks tree flagged F_DUPDATA */
		pg = lp_child(&f, f.root[LP_CHUNKS], 1);
		p = lp_page_at(&f, pg) + lp_node_off(&f, pg, 3);
		p[4] |= 0x04;
		break;
	case D_CHILD_ROOT:
		pg = f.root[LP_CHUNKS];
		lp_set_child(&f, pg, 1, pg);
		break;
	case D_OVERFLOW_FLAGS: /* the first page of a chunk */
		for (pg = 2; f.pg[pg].kind != LP_K_OV_HEAD; pg++)
			;
		lp_page_at(&f, pg)[10] ^= 0x01;
		break;
	case D_FREE_REACHABLE: /* the free list names a leaf of the chunks */
		pg = f.root[LP_FREE];
		p = lp_page_at(&f, pg) + lp_node_off(&f, pg, 0);
		v = lp_child(&f, f.root[LP_CHUNKS], 0);
		memcpy(p + 8 + 8 + 8, &v, 8); /* node, key, count, page 1 */
		break;
	case D_RECORD_ENTRIES: /* the chunks DB's record in the main tree */
		pg = f.root[LP_MAIN];
		for (unsigned i = 0; i < lp_nkeys(&f, pg); i++) {
			p = lp_page_at(&f, pg) + lp_node_off(&f, pg, i);
			if (lp_get16(p + 6) == 6 && !memcmp(p + 8, "chunks", 6))
				p[8 + 6 + 32] ^= 0x01; /* md_entries */
		}
		break;
	case D_MAIN_FLAGS:
		pg = f.root[LP_MAIN];
		lp_page_at(&f, pg)[10] ^= 0x01;
		break;
	case D_LAST_PG: /* the current meta says the file ends earlier */
		pg = f.cur;
		v = f.npages - 5;
		memcpy(lp_page_at(&f, pg) + 136, &v, 8);
		break;
	}
	cr_assert_eq(lp_store(&f, path, 0, f.len), 0);
	lp_unload(&f);
	return pg;
}

/* Each damage is found (tree, page, what), quarantined, and refused by the
 * calls that would hand the tree to LMDB, which would fault or abort on
 * it (F_DUPDATA: a NULL dereference in mdb_cursor_set; a child pointing
 * at its branch: IS_LEAF asserted in mdb_cursor_next). */
Test(pagecheck, damage_is_named_and_quarantined)
{
	static const struct {
		enum damage k;
		enum heap_tree tree;  /* of the first problem (__COUNT: any) */
		bool at_damage;       /* the first problem is at the damaged page */
		const char *what;
		unsigned quarantined;
	} cases[] = {
		{ D_DUPDATA, HEAP_TREE_CHUNKS, true, "node 3: flags 0x5",
		  1u << HEAP_TREE_CHUNKS },
		{ D_CHILD_ROOT, HEAP_TREE_CHUNKS, true, "reached twice",
		  1u << HEAP_TREE_CHUNKS },
		{ D_OVERFLOW_FLAGS, HEAP_TREE_CHUNKS, true,
		  "header (page", 1u << HEAP_TREE_CHUNKS },
		{ D_FREE_REACHABLE, HEAP_TREE_FREE, false,
		  "is on the free list and in the chunks tree",
		  1u << HEAP_TREE_CHUNKS | 1u << HEAP_TREE_FREE },
		{ D_RECORD_ENTRIES, HEAP_TREE_CHUNKS, false, "record counts",
		  1u << HEAP_TREE_CHUNKS },
		{ D_MAIN_FLAGS, HEAP_TREE_MAIN, true, "flags 0x3 where a leaf",
		  HEAP_TREES_ALL },
		{ D_LAST_PG, HEAP_TREE__COUNT /* the first tree walked */, false,
		  "outside the snapshot", 0 /* as found */ },
	};
	struct seen_problems s;
	heap_pagecheck_stat st;

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
		const void *body;
		size_t used;
		tl_dir d;
		heap *h;
		heap_txn *t;
		uint64_t pg;

		d = tl_tmpdir("heap");
		chunk_heap(d.path, 400, 3);
		pg = damage(d.path, cases[i].k);
		if (cases[i].k == D_MAIN_FLAGS) {
			/* open itself walks the main tree */
			cr_assert_eq(heap_open(d.path, &o, &h), AH_ECORRUPT);
			tl_rmdir(&d);
			continue;
		}
		h = open_ro(d.path);
		check(h, &s, &st);
		cr_assert_geq(s.n, 1, "case %zu: no problem found", i);
		cr_assert(cases[i].tree == HEAP_TREE__COUNT ||
		          s.tree == cases[i].tree, "case %zu: %s: %s", i,
		          heap_tree_name(s.tree), s.first);
		cr_assert(!cases[i].at_damage || s.pgno == pg, "case %zu: page "
		          "%llu, damaged %llu", i, (unsigned long long)s.pgno,
		          (unsigned long long)pg);
		cr_assert(strstr(s.first, cases[i].what), "case %zu: %s", i,
		          s.first);
		if (cases[i].quarantined)
			cr_assert_eq(st.quarantined, cases[i].quarantined,
			             "case %zu: 0x%x", i, st.quarantined);
		cr_assert_eq(heap_txn_begin(h, true, &t), 0);
		cr_assert_eq(heap_chunk_get(t, 4, &body, &used), AH_ECORRUPT,
		             "case %zu", i);
		heap_txn_abort(t);
		cr_assert_eq(heap_close(h), 0);
		tl_rmdir(&d);
	}
}

/* In a write txn the check walks the commit the txn started from, even
 * after the txn changed pages (its own are not committed yet). */
Test(pagecheck, write_txn_checks_its_starting_commit)
{
	ah_open_opts o = tl_opts(0, 64 * MiB, 0);
	struct seen_problems s;
	heap_pagecheck_stat st;
	tl_dir d;
	heap *h;
	heap_txn *t;

	d = tl_tmpdir("heap");
	chunk_heap(d.path, 400, 2);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 50; i++)
		ht_put_chunk(t, 5000, SEED);
	memset(&s, 0, sizeof s);
	cr_assert_eq(heap_pagecheck(t, on_problem, &s, &st), 0);
	cr_assert_eq(s.n, 0, "%s", s.first);
	cr_assert_eq(st.txn_id, heap_txn_id(t) - 1);
	cr_assert_eq(st.tree[HEAP_TREE_CHUNKS].entries, 400 + 400 - 134);
	cr_assert_eq(heap_txn_commit(t), 0);
	check(h, &s, &st);
	cr_assert_eq(s.n, 0, "%s", s.first);
	cr_assert_eq(st.tree[HEAP_TREE_CHUNKS].entries, 400 + 400 - 134 + 50);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* A snapshot whose meta page two later commits overwrote cannot be walked
 * from it: AH_EBUSY, and the quarantine stays as it was. */
Test(pagecheck, overwritten_snapshot_meta_is_busy)
{
	ah_open_opts o = tl_opts(0, 64 * MiB, 0);
	struct seen_problems s;
	heap_pagecheck_stat st;
	tl_dir d;
	heap *h;
	heap_txn *t;
	pid_t pid;
	int status;

	d = tl_tmpdir("heap");
	chunk_heap(d.path, 10, 1);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) { /* another process commits twice */
		heap *h2;
		heap_txn *w;
		int bad = heap_open(d.path, &o, &h2);

		for (int c = 0; c < 2 && !bad; c++) {
			void *body;
			uint64_t id;

			bad = heap_txn_begin(h2, false, &w) ||
			      heap_chunk_reserve(w, 10, &id, &body, NULL) ||
			      heap_chunk_seal(w, id, body, 0) || heap_txn_commit(w);
		}
		_exit(bad || heap_close(h2));
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	memset(&s, 0, sizeof s);
	cr_assert_eq(heap_pagecheck(t, on_problem, &s, &st), AH_EBUSY);
	cr_assert_eq(s.n, 0);
	heap_txn_abort(t);
	check(h, &s, &st); /* a fresh snapshot walks */
	cr_assert_eq(s.n, 0, "%s", s.first);
	cr_assert_eq(st.tree[HEAP_TREE_CHUNKS].entries, 12);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
