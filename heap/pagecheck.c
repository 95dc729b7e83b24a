/*
 * heap/pagecheck.c - a read-only structural walker of LMDB's on-disk pages,
 * run before LMDB is let near a tree it has not written itself: by
 * heap_open on the main and "meta" trees (heap_pagecheck_open), and by
 * ah_verify / ah_verify_pages on every tree of a snapshot (heap_pagecheck).
 *
 * Why: LMDB 0.9 trusts its pages.  A damaged branch or leaf page makes it
 * read outside the file (SIGBUS), dereference NULL (a leaf node flagged
 * F_DUPDATA in a plain DB), abort on its own assertions (IS_LEAF,
 * NUMKEYS > 1, root > 1), or silently return keys out of order (so that
 * iteration never ends).  None of that can be caught around the call, so
 * the pages are checked first, from the file's own bytes (a private
 * read-only map of the snapshot's pages; pread for the few pages open
 * reads), and a tree found damaged is quarantined: the heap's
 * table, chunk and inspection calls refuse it with AH_ECORRUPT instead of
 * handing it to LMDB (heap_trees_usable).
 *
 * What is checked, starting from the snapshot's meta page (page txnid & 1,
 * the one LMDB's read txn uses; its txnid must be the snapshot's: a later
 * commit's is AH_EBUSY, any other a problem, and the walk goes on):
 *  - the meta: P_META, magic, version, page size, mm_address 0, header
 *    fields zero, last page inside the file; the FREE and MAIN records;
 *  - every page reachable from the FREE DB, the MAIN DB and every named DB
 *    (their MDB_db records are the F_SUBDATA nodes of the main DB): page
 *    number equals its position; flags exactly P_BRANCH above md_depth and
 *    P_LEAF at it (so every path has depth md_depth; no LEAF2, no sub-pages);
 *    lower/upper and every node offset and size inside the page, and the
 *    nodes tiling [upper, page size) exactly, as mdb_node_add/mdb_node_del
 *    keep them; branch pages with >= 2 keys (LMDB asserts it), leaves with
 *    >= 1; key sizes (8 for MDB_INTEGERKEY trees, 1..511 otherwise); keys
 *    strictly increasing in a page and inside the separator range [lo, hi)
 *    the parent gives; leaf flags 0 or F_BIGDATA (F_SUBDATA in the main DB);
 *    child and overflow page numbers in [2, mm_last_pg]; every overflow run
 *    (its first page P_OVERFLOW with mp_pages >= what the value needs)
 *    inside the snapshot; no page reachable twice;
 *  - per tree: depth, branch, leaf and overflow pages and entries equal to
 *    its MDB_db record;
 *  - the free list: each record an IDL (count, then page numbers) whose
 *    count fits the value, txnid <= the snapshot's, pages in [2, last_pg],
 *    none listed twice, none reachable from a tree; and
 *    reachable + free + 2 metas == last_pg + 1.  That is LMDB's own
 *    mdb_audit rule (mdb.c, MDB_DEBUG > 2): mdb_txn_commit runs it after
 *    mdb_freelist_save has written every free page (this txn's, the
 *    reclaimed me_pghead and loose pages) into the FREE DB and before the
 *    meta that makes the commit current is written, so it holds for every
 *    committed snapshot; the clean heaps of tests/unit/heap/test_pagecheck.c
 *    and tests/fault/test_corrupt_pages.c check it.
 * What is not checked (ARCHITECTURE.md §4): key and value bytes that keep
 * the order, and a value length one byte off that keeps the node's even
 * size (record bytes are arrheap's to check), mp_pad and mm_mapsize
 * (LMDB ignores them; mp_pad is stale on pages reused under MDB_WRITEMAP),
 * the bytes between lower and upper, and the older meta's roots.
 *
 * Never writes to the file, never calls LMDB, never trusts a byte: every
 * read is bounds-checked against the snapshot's pages before it is made.
 * Layouts: pagecheck_int.h; the walk of a tree: pagecheck_walk.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heap/codec.h"
#include "heap/pagecheck_int.h"

_Static_assert((int)HEAP_TREE_META == (int)HEAP_DBI_META &&
               (int)HEAP_TREE_CHUNKS == (int)HEAP_DBI_CHUNKS,
               "named trees are indexed like the heap's DBIs");

const char *heap_tree_name(enum heap_tree t)
{
	return (unsigned)t < HEAP_TREE__COUNT ? tree_names[t] : "file";
}

/* Every free page against the trees, then LMDB's page accounting. */
static void account(walker *w)
{
	uint64_t reached = 0;

	for (uint64_t pg = 2; pg < w->npages && !w->stop; pg++)
		if ((w->freebits[pg / 8] & (1u << (pg % 8))) && w->owner[pg]) {
			enum heap_tree o = (enum heap_tree)(w->owner[pg] - 1);

			w->st->tree[o].damaged = true;
			problem(w, HEAP_TREE_FREE, pg, "page %llu is on the free "
			        "list and in the %s tree", (unsigned long long)pg,
			        tree_names[o]);
		}
	for (int t = 0; t < HEAP_TREE__COUNT; t++)
		reached += w->st->tree[t].branch_pages + w->st->tree[t].leaf_pages +
		           w->st->tree[t].overflow_pages;
	/* Only whole walks add up: a damaged tree was not walked to its end. */
	if (!w->stop && w->st->problems == 0 &&
	    reached + w->st->free_pages + 2 != w->npages)
		problem(w, HEAP_TREE__COUNT, UINT64_MAX, "%llu pages in trees + "
		        "%llu free + 2 metas, but the snapshot has %llu",
		        (unsigned long long)reached,
		        (unsigned long long)w->st->free_pages,
		        (unsigned long long)w->npages);
}

/* Reads the 152 meta bytes of page mp (pread: the map is not made yet). */
static int read_meta(int fd, uint32_t psize, uint64_t mp, uint8_t m[META_BYTES])
{
	ssize_t n;

	do
		n = pread(fd, m, META_BYTES, (off_t)(mp * psize));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return AH_EIO;
	return n == META_BYTES ? 0 : CORRUPT("LMDB meta page cut short");
}

/* Maps the snapshot of meta page mp (whose txnid must be txnid) and walks
 * it.  Returns 0, AH_EBUSY (a later commit rewrote the meta), AH_ECORRUPT
 * (nothing could be walked: only in open mode), AH_ENOMEM, AH_EIO. */
static int run(walker *w, int fd, uint64_t mp)
{
	uint8_t *m = w->meta, again[META_BYTES];
	size_t len;
	void *map = NULL;
	int rc, tries = 0;

	w->fd = fd;
	if (w->open_mode)
		memcpy(m, w->metas[mp], META_BYTES);
	else
		/* A writer rewrites a meta page in place (WRITEMAP: field by
		 * field, the txnid last): two reads that agree are not torn.
		 * The copy is what the walk uses; this snapshot's pages stay
		 * put (the caller's txn pins them), its meta page does not. */
		do {
			if ((rc = read_meta(fd, w->psize, mp, m)) ||
			    (rc = read_meta(fd, w->psize, mp, again)))
				return rc;
			if (++tries == 8)
				return AH_EBUSY;
		} while (memcmp(m, again, META_BYTES) != 0);
	if (get_u64(m + 144) != w->txnid) {
		uint64_t got = get_u64(m + 144);

		/* A live writer's later commit rewrote the meta page: it holds
		 * a larger txnid of the same parity (commits alternate pages
		 * and never go back).  Anything else, read twice alike, is
		 * damage done after the open (heap_open refuses a txnid on the
		 * wrong page, heap/format.c): the reads use page txnid & 1
		 * whatever it holds.  Report it and walk the tree LMDB reads:
		 * a retry would meet the same bytes forever.  Open only walks. */
		if (!w->open_mode && !w->writer && got > w->txnid &&
		    !((got ^ w->txnid) & 1))
			return AH_EBUSY;
		if (!w->open_mode)
			problem(w, HEAP_TREE__COUNT, mp, "txnid %llu, not the "
			        "snapshot's %llu (a damaged txnid on this or the other "
			        "meta page): the snapshot reads the tree this page "
			        "names", (unsigned long long)got,
			        (unsigned long long)w->txnid);
	}
	w->npages = get_u64(m + 136) + 1;
	if (w->npages < 2 || w->npages > w->file_bytes / w->psize ||
	    w->npages > SIZE_MAX / w->psize) {
		problem(w, HEAP_TREE__COUNT, mp, "last page %llu beyond the end of "
		        "the file", (unsigned long long)w->npages - 1);
		w->meta_bad = true;
		return 0;
	}
	len = (size_t)w->npages * w->psize;
	w->st->txn_id = w->txnid;
	w->st->last_pg = w->npages - 1;
	if (!w->open_mode) {
		map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED)
			return errno == ENOMEM ? AH_ENOMEM : AH_EIO;
		(void)madvise(map, len, MADV_RANDOM);
		w->map = map;
		w->owner = calloc(w->npages, 1);
		w->freebits = calloc(w->npages / 8 + 1, 1);
		if (w->owner == NULL || w->freebits == NULL) {
			rc = AH_ENOMEM;
			goto out;
		}
	}
	if (!pc_check_meta(w, mp, w->file_bytes)) {
		w->meta_bad = !w->rc;
		rc = w->rc;
		goto out;
	}
	for (int t = HEAP_TREE_MAIN; t < HEAP_TREE__COUNT && !w->rc; t++) {
		if (w->open_mode && t == HEAP_TREE_FREE)
			break;
		pc_walk_tree(w, (enum heap_tree)t, mp);
	}
	for (int t = 0; t < HEAP_TREE_MAIN && !w->rc && !w->stop; t++) {
		if (w->st->tree[HEAP_TREE_MAIN].damaged)
			break; /* its records cannot be trusted */
		if (!w->have[t]) {
			if (!w->open_mode)
				problem(w, HEAP_TREE_MAIN, w->rec[HEAP_TREE_MAIN].root,
				        "named DB %s missing", tree_names[t]);
			continue;
		}
		/* Open walks only what heap_open reads; a "meta" DB of other
		 * flags is a foreign file, AH_EFORMAT from heap_open itself. */
		if (!w->open_mode || (t == HEAP_TREE_META &&
		                      w->rec[t].flags == tree_flags[t]))
			pc_walk_tree(w, (enum heap_tree)t, w->rec[HEAP_TREE_MAIN].root);
	}
	if (!w->open_mode && !w->rc && !w->stop &&
	    !w->st->tree[HEAP_TREE_MAIN].damaged)
		account(w);
	rc = w->rc;
out:
	free(w->owner);
	free(w->freebits);
	if (w->map)
		munmap(map, len);
	return rc;
}

/* One block: the walker, its spans and the pages open mode reads.  Made
 * of separate 4-10 KiB blocks it cost a fresh process's jemalloc 21 new
 * slabs (each filling a thread cache of regions) at every ah_open; one
 * large block is one extent, its pages touched only where used. */
static walker *walker_new(uint32_t psize, uint64_t txnid,
                          heap_pagecheck_stat *st)
{
	/* The walker and its spans in one block; open mode's pages one
	 * malloc each, as read (page()): a few, not OPEN_PAGES.  A block
	 * with all OPEN_PAGES (140 KiB) was past glibc's mmap threshold, so
	 * every open mapped and unmapped it (a TLB shootdown) and faulted
	 * fresh pages: 25 us of a 10M heap's open (BENCHMARKS.md). */
	size_t spans = (psize - PAGEHDR) / 2 * sizeof(span);
	uint8_t *blk = malloc(sizeof(walker) + spans);
	walker *w = (walker *)blk;

	if (w == NULL)
		return NULL;
	memset(w, 0, sizeof *w);
	w->spans = (span *)(blk + sizeof *w);
	memset(st, 0, sizeof *st);
	w->psize = psize;
	w->txnid = txnid;
	w->st = st;
	return w;
}

static void walker_free(walker *w)
{
	for (int i = 0; i < w->ncached; i++)
		free(w->cached[i]);
	free(w);
}

int heap_pagecheck(heap_txn *t,
                   int (*fn)(const heap_page_problem *p, void *user),
                   void *user, heap_pagecheck_stat *st)
{
	heap_pagecheck_stat local;
	struct stat fs;
	walker *w;
	unsigned damaged = 0;
	bool whole;
	int rc, stop;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (st == NULL)
		st = &local;
	/* A write txn's own pages are not committed yet: it checks the commit
	 * it started from, whose pages it never modifies (copy on write). */
	w = walker_new(t->h->psize, heap_txn_id(t) - !t->rdonly, st);
	if (w == NULL)
		return AH_ENOMEM;
	w->fn = fn;
	w->user = user;
	w->writer = !t->rdonly;
	rc = fstat(t->h->fd, &fs) != 0 ? AH_EIO : 0;
	w->file_bytes = rc ? 0 : (uint64_t)fs.st_size;
	if (rc == 0)
		rc = run(w, t->h->fd, w->txnid & 1);
	stop = w->stop;
	whole = w->meta_bad || stop || st->tree[HEAP_TREE_MAIN].damaged;
	walker_free(w);
	if (rc != 0)
		return rc; /* nothing learnt: the quarantine stays as it was */
	for (int i = 0; i < HEAP_TREE__COUNT; i++)
		if (st->tree[i].damaged)
			damaged |= HEAP_TREE_BIT(i);
	/* A damaged meta or main tree leaves no tree trusted; so does a walk
	 * the caller stopped before its end. */
	if (whole && st->problems)
		damaged = HEAP_TREES_ALL;
	st->quarantined = damaged;
	__atomic_store_n(&t->h->damaged, damaged, __ATOMIC_RELEASE);
	return stop;
}

/* Open mode keeps its first problem: told (heap_debug) only once the walk
 * is known to have read one snapshot. */
typedef struct first_seen {
	bool seen;
	heap_page_problem p;
	char msg[240];
} first_seen;

static int first_problem(const heap_page_problem *p, void *user)
{
	first_seen *f = user;

	if (!f->seen) {
		f->seen = true;
		f->p = *p;
		snprintf(f->msg, sizeof f->msg, "%s", p->message);
		f->p.message = f->msg;
	}
	return 0;
}

/* Open mode's catalog verdict for heap_open (heap_int.h): every named DB
 * of the walked snapshot present with exactly its flags, and the meta
 * record seen. */
static bool catalog_whole(const walker *w)
{
	for (int t = 0; t < HEAP_TREE_MAIN; t++)
		if (!w->have[t] || w->rec[t].flags != tree_flags[t])
			return false;
	return w->meta_rec_seen;
}

/* Open holds no reader slot: a writer in another process may commit twice
 * and reuse the pages of the newest snapshot while they are walked.  Each
 * commit writes a meta page, so metas that read the same after the walk as
 * before it mean the walk read one snapshot, untouched (a writer's
 * unfinished transaction writes only pages that snapshot does not use).
 * Metas that keep changing leave the check undone, not failed: ah_verify
 * checks with the pages pinned (and *catalog false: heap_open asks LMDB). */
#define OPEN_TRIES 4

int heap_pagecheck_open(int fd, uint32_t psize, uint64_t file_bytes,
                        const uint8_t *meta0, const uint8_t *meta1,
                        uint8_t rec[HEAP_META_BYTES], bool *catalog)
{
	uint8_t m[2][META_BYTES], now[2][META_BYTES];
	heap_pagecheck_stat st;
	first_seen first;
	walker *w;
	bool whole;
	int rc;

	*catalog = false;
	memcpy(m[0], meta0, META_BYTES);
	memcpy(m[1], meta1, META_BYTES);
	for (int tries = 0; tries < OPEN_TRIES; tries++) {
		if ((w = walker_new(psize, 0, &st)) == NULL)
			return AH_ENOMEM;
		memset(&first, 0, sizeof first);
		w->open_mode = true;
		w->fn = first_problem;
		w->user = &first;
		w->file_bytes = file_bytes;
		w->metas[0] = m[0];
		w->metas[1] = m[1];
		w->meta_rec = rec;
		/* LMDB's choice: the larger txnid (mdb_env_read_header, ties to
		 * page 0) goes to the lock file; read txns use page txnid & 1. */
		w->txnid = get_u64(m[1] + 144) > get_u64(m[0] + 144)
		                   ? get_u64(m[1] + 144) : get_u64(m[0] + 144);
		int wrc = run(w, fd, w->txnid & 1);

		whole = wrc == 0 && !w->meta_bad && catalog_whole(w);
		walker_free(w);
		if (wrc == AH_ENOMEM || wrc == AH_EIO)
			return wrc;
		if ((rc = read_meta(fd, psize, 0, now[0])) ||
		    (rc = read_meta(fd, psize, 1, now[1])))
			return rc;
		if (memcmp(now, m, sizeof m) != 0) {
			/* A commit: walk the new one, against the file's size
			 * now (taken after the metas were read: a writer
			 * extends the file before a meta names new pages). */
			struct stat sb;

			memcpy(m, now, sizeof m);
			if (fstat(fd, &sb) != 0)
				return AH_EIO;
			file_bytes = (uint64_t)sb.st_size;
			continue;
		}
		if (wrc != 0 || st.problems == 0) {
			*catalog = wrc == 0 && whole;
			return wrc; /* 0, or AH_EFORMAT: a catalog no heap has */
		}
		if (heap_debug && first.seen)
			fprintf(stderr, "arrheap: LMDB page %llu (%s tree): %s\n",
			        (unsigned long long)first.p.pgno,
			        heap_tree_name(first.p.tree), first.p.message);
		return CORRUPT("damaged LMDB page in the main or meta tree");
	}
	return 0;
}

int heap_trees_usable(const heap *h, unsigned trees)
{
	unsigned d = __atomic_load_n(&h->damaged, __ATOMIC_ACQUIRE);

	return d & trees ? CORRUPT("a page check found this tree damaged")
	                 : 0;
}
