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
 * Layouts (LMDB 0.9.24 mdb.c, LP64, native byte order):
 *
 *   page header  0 mp_pgno u64 | 8 mp_pad u16 | 10 mp_flags u16 |
 *                12 mp_lower u16 | 14 mp_upper u16 (overflow: 12 mp_pages
 *                u32) | 16 mp_ptrs u16[] (node offsets from the page start)
 *   node         0 mn_lo u16 | 2 mn_hi u16 | 4 mn_flags u16 | 6 mn_ksize u16
 *                | 8 key | data (leaf: mn_lo | mn_hi << 16 bytes, or with
 *                F_BIGDATA the u64 first page of the overflow run); a branch
 *                node's child is mn_lo | mn_hi << 16 | mn_flags << 32
 *   MDB_db (48)  0 md_pad u32 | 4 md_flags u16 | 6 md_depth u16 |
 *                8 branch | 16 leaf | 24 overflow | 32 entries | 40 root
 *   meta         16 magic | 20 version | 24 address | 32 mapsize |
 *                40 FREE db | 88 MAIN db | 136 last_pg | 144 txnid
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heap/codec.h"
#include "heap/heap_int.h"

_Static_assert((int)HEAP_TREE_META == (int)HEAP_DBI_META &&
               (int)HEAP_TREE_CHUNKS == (int)HEAP_DBI_CHUNKS,
               "named trees are indexed like the heap's DBIs");

#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define INTEGERKEY 0x08u
#define PERSISTENT 0x7eu    /* REVERSEKEY..REVERSEDUP: what picks a compare */
#define PAGEHDR 16u
#define NODEHDR 8u
#define DB_BYTES 48u
#define META_BYTES 152u
#define MAGIC 0xBEEFC0DEu
#define DATA_VERSION 1u
#define INVALID UINT64_MAX  /* P_INVALID: an empty tree's root */
#define MAX_DEPTH 32u       /* LMDB's CURSOR_STACK */
#define MAX_KEY 511u
#define EVEN(n) (((n) + 1u) & ~1u)

static const char *const tree_names[HEAP_TREE__COUNT] = {
	[HEAP_TREE_ARR] = "arr",       [HEAP_TREE_BATCH] = "batch",
	[HEAP_TREE_SOURCE] = "source", [HEAP_TREE_META] = "meta",
	[HEAP_TREE_CHUNKS] = "chunks", [HEAP_TREE_MAIN] = "main",
	[HEAP_TREE_FREE] = "free",
};
/* Keep in step with env.c's dbi_flags. */
static const uint16_t tree_flags[HEAP_TREE__COUNT] = {
	[HEAP_TREE_BATCH] = INTEGERKEY, [HEAP_TREE_CHUNKS] = INTEGERKEY,
	[HEAP_TREE_FREE] = INTEGERKEY,
};

const char *heap_tree_name(enum heap_tree t)
{
	return (unsigned)t < HEAP_TREE__COUNT ? tree_names[t] : "file";
}

typedef struct span {
	uint16_t off, len;
} span;

typedef struct bound {
	const uint8_t *p; /* NULL: unbounded */
	size_t len;
} bound;

typedef struct dbrec {
	uint32_t pad;
	uint16_t flags, depth;
	uint64_t branch, leaf, overflow, entries, root;
} dbrec;

/* Pages open mode reads (with pread: no map, open stays cheap): far more
 * than the main and "meta" trees of any arrheap heap hold. */
#define OPEN_PAGES 32

typedef struct walker {
	const uint8_t *map;      /* pages [0, npages), read only (full mode) */
	int fd;                  /* open mode reads pages from it */
	uint64_t file_bytes;
	const uint8_t *metas[2]; /* open mode: format.c's META_BYTES of each */
	uint8_t meta[META_BYTES]; /* the snapshot's meta, copied once: its page
	                           * is rewritten by the second commit after */
	uint64_t cached_pg[OPEN_PAGES];
	uint8_t *cached[OPEN_PAGES];
	int ncached;
	uint64_t npages;         /* the snapshot's last_pg + 1 */
	uint32_t psize;
	uint64_t txnid;
	bool open_mode;          /* heap_pagecheck_open: main and meta only */
	uint8_t *meta_rec;       /* open mode: the meta record is copied here */
	bool meta_rec_seen;      /* ... when the meta tree holds one of its size */
	bool writer;             /* a write txn's check: no meta can change */
	uint8_t *owner;          /* per page: 0, or the reaching tree + 1 */
	uint8_t *freebits;       /* pages on the free list (full mode) */
	int (*fn)(const heap_page_problem *p, void *user);
	void *user;
	int stop;                /* fn's non-zero value */
	int rc;                  /* AH_ENOMEM */
	heap_pagecheck_stat *st;
	dbrec rec[HEAP_TREE__COUNT];
	bool have[HEAP_TREE__COUNT];
	bool meta_bad;           /* nothing could be walked */
	/* the tree being walked */
	enum heap_tree tree;
	unsigned depth;
	span *spans;             /* (psize - PAGEHDR) / 2: a page's nodes */
} walker;

static void problem(walker *w, enum heap_tree t, uint64_t pgno,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Records a problem of tree t (HEAP_TREE__COUNT: the file) at page pgno. */
static void problem(walker *w, enum heap_tree t, uint64_t pgno,
                    const char *fmt, ...)
{
	char msg[240];
	heap_page_problem p;
	va_list ap;

	w->st->problems++;
	if (t < HEAP_TREE__COUNT)
		w->st->tree[t].damaged = true;
	if (w->stop || w->fn == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	p.tree = t;
	p.pgno = pgno;
	p.message = msg;
	w->stop = w->fn(&p, w->user);
}

/* Page pgno (< npages); NULL (w->rc set) when open mode cannot read it. */
static const uint8_t *page(walker *w, uint64_t pgno)
{
	uint8_t *b;
	ssize_t n;

	if (w->map)
		return w->map + pgno * w->psize;
	if (pgno < 2)
		return w->metas[pgno]; /* only META_BYTES: all check_meta reads */
	for (int i = 0; i < w->ncached; i++)
		if (w->cached_pg[i] == pgno)
			return w->cached[i];
	if (w->ncached == OPEN_PAGES) {
		w->rc = AH_EFORMAT; /* no arrheap heap has such a catalog */
		return NULL;
	}
	if ((b = malloc(w->psize)) == NULL) {
		w->rc = AH_ENOMEM;
		return NULL;
	}
	do
		n = pread(w->fd, b, w->psize, (off_t)(pgno * w->psize));
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)w->psize) {
		free(b);
		w->rc = AH_EIO; /* the file was checked to hold npages */
		return NULL;
	}
	w->cached_pg[w->ncached] = pgno;
	w->cached[w->ncached++] = b;
	return b;
}

/* Open mode: was pgno reached before?  (It is in the cache only then.) */
static bool cached(const walker *w, uint64_t pgno)
{
	for (int i = 0; i < w->ncached; i++)
		if (w->cached_pg[i] == pgno)
			return true;
	return false;
}

/* Marks [pgno, pgno + n) as reached by the current tree; false (reported)
 * when one of them is outside the snapshot or was reached before. */
static bool claim(walker *w, uint64_t from, uint64_t pgno, uint64_t n)
{
	if (pgno < 2 || pgno >= w->npages || n > w->npages - pgno) {
		problem(w, w->tree, from, "page %llu (%llu pages) outside the "
		        "snapshot's pages 2..%llu", (unsigned long long)pgno,
		        (unsigned long long)n, (unsigned long long)w->npages - 1);
		return false;
	}
	if (w->owner == NULL) { /* open mode: tree pages only, one at a time */
		if (n == 1 && cached(w, pgno)) {
			problem(w, w->tree, from, "page %llu reached twice",
			        (unsigned long long)pgno);
			return false;
		}
		return true;
	}
	for (uint64_t i = pgno; i < pgno + n; i++)
		if (w->owner[i] != 0) {
			enum heap_tree o = (enum heap_tree)(w->owner[i] - 1);

			if (o != w->tree)
				w->st->tree[o].damaged = true;
			problem(w, w->tree, from, "page %llu reached twice (also "
			        "from the %s tree)", (unsigned long long)i,
			        tree_names[o]);
			return false;
		}
	memset(w->owner + pgno, w->tree + 1, n);
	return true;
}

static bool intkey(const walker *w)
{
	return w->tree == HEAP_TREE_FREE || tree_flags[w->tree] == INTEGERKEY;
}

/* LMDB's compare for the tree: mdb_cmp_long on native u64 (INTEGERKEY)
 * or mdb_cmp_memn. */
static int cmp(const walker *w, const uint8_t *a, size_t alen,
               const uint8_t *b, size_t blen)
{
	if (intkey(w)) {
		uint64_t x = get_u64(a), y = get_u64(b);

		return x < y ? -1 : x > y;
	}
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c ? c : alen < blen ? -1 : alen > blen;
}

static int span_cmp(const void *a, const void *b)
{
	const span *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* Header, node bounds and tiling of page pgno at level (1 = root).
 * Returns the number of nodes, or -1 (reported). */
static int check_layout(walker *w, uint64_t pgno, unsigned level)
{
	const uint8_t *p = page(w, pgno);
	unsigned want = level < w->depth ? P_BRANCH : P_LEAF;
	unsigned flags, lower, upper, n, at;

	if (p == NULL)
		return -1;
	flags = get_u16(p + 10);
	lower = get_u16(p + 12);
	upper = get_u16(p + 14);
	if (get_u64(p) != pgno) {
		problem(w, w->tree, pgno, "page header names page %llu",
		        (unsigned long long)get_u64(p));
		return -1;
	}
	if (flags != want) {
		problem(w, w->tree, pgno, "flags 0x%x where a %s page is due "
		        "(level %u of depth %u)", flags,
		        want == P_BRANCH ? "branch" : "leaf", level, w->depth);
		return -1;
	}
	if (lower < PAGEHDR || (lower & 1) || lower > upper ||
	    upper > w->psize) {
		problem(w, w->tree, pgno, "lower %u / upper %u out of bounds",
		        lower, upper);
		return -1;
	}
	n = (lower - PAGEHDR) / 2;
	if (n < (want == P_LEAF || w->tree == HEAP_TREE_FREE ? 1u : 2u)) {
		problem(w, w->tree, pgno, "%s page with %u keys",
		        want == P_BRANCH ? "branch" : "leaf", n);
		return -1;
	}
	for (unsigned i = 0; i < n; i++) {
		unsigned off = get_u16(p + PAGEHDR + 2 * i), len;
		const uint8_t *node = p + off;

		if (off < upper || (off & 1) || off > w->psize - NODEHDR) {
			problem(w, w->tree, pgno, "node %u at offset %u outside "
			        "[upper %u, page end)", i, off, upper);
			return -1;
		}
		len = NODEHDR + get_u16(node + 6);
		if (want == P_LEAF)
			len += get_u16(node + 4) & F_BIGDATA
			               ? 8u
			               : get_u16(node) | (unsigned)get_u16(node + 2) << 16;
		if (len > w->psize - off) {
			problem(w, w->tree, pgno, "node %u (%u bytes at offset %u) "
			        "beyond the page", i, len, off);
			return -1;
		}
		w->spans[i] = (span){ (uint16_t)off, (uint16_t)EVEN(len) };
	}
	qsort(w->spans, n, sizeof *w->spans, span_cmp);
	at = upper;
	for (unsigned i = 0; i < n; i++) {
		if (w->spans[i].off != at) {
			problem(w, w->tree, pgno, "nodes overlap or leave a gap at "
			        "offset %u", at);
			return -1;
		}
		at += w->spans[i].len;
	}
	if (at != w->psize) {
		problem(w, w->tree, pgno, "nodes end at offset %u, not at the "
		        "page end", at);
		return -1;
	}
	return (int)n;
}

/* Key sizes and order of the n nodes of page p, inside [lo, hi). */
static bool check_keys(walker *w, uint64_t pgno, const uint8_t *p, int n,
                       bool leaf, bound lo, bound hi)
{
	const uint8_t *prev = NULL;
	size_t plen = 0;

	for (int i = leaf ? 0 : 1; i < n; i++) {
		const uint8_t *node = p + get_u16(p + PAGEHDR + 2 * i), *k = node + 8;
		size_t klen = get_u16(node + 6);

		if (intkey(w) ? klen != 8 : klen < 1 || klen > MAX_KEY) {
			problem(w, w->tree, pgno, "node %d: key of %zu bytes", i,
			        klen);
			return false;
		}
		if ((prev && cmp(w, prev, plen, k, klen) >= 0) ||
		    (lo.p && cmp(w, lo.p, lo.len, k, klen) > 0) ||
		    (hi.p && cmp(w, k, klen, hi.p, hi.len) >= 0)) {
			problem(w, w->tree, pgno, "node %d: key out of order", i);
			return false;
		}
		prev = k;
		plen = klen;
	}
	return true;
}

static void walk(walker *w, uint64_t from, uint64_t pgno, unsigned level,
                 bound lo, bound hi);

static void branch(walker *w, uint64_t pgno, const uint8_t *p, int n,
                   unsigned level, bound lo, bound hi)
{
	for (int i = 0; i < n && !w->stop && !w->rc; i++) {
		const uint8_t *node = p + get_u16(p + PAGEHDR + 2 * i);
		uint64_t child = get_u16(node) | (uint64_t)get_u16(node + 2) << 16 |
		                 (uint64_t)get_u16(node + 4) << 32;
		bound clo = lo, chi = hi;

		if (i > 0)
			clo = (bound){ node + 8, get_u16(node + 6) };
		if (i + 1 < n) {
			const uint8_t *next = p + get_u16(p + PAGEHDR + 2 * (i + 1));

			chi = (bound){ next + 8, get_u16(next + 6) };
		}
		walk(w, pgno, child, level + 1, clo, chi);
	}
}

/* The free list: one IDL per record, count first.  Pages are marked in
 * freebits; overlaps with trees are found after every tree is walked. */
static void free_record(walker *w, uint64_t pgno, const uint8_t *k,
                        const uint8_t *v, uint64_t vlen)
{
	uint64_t cnt = vlen >= 8 ? get_u64(v) : 0;

	if (get_u64(k) > w->txnid)
		problem(w, HEAP_TREE_FREE, pgno, "free-list record of txn %llu, "
		        "after the snapshot's %llu", (unsigned long long)get_u64(k),
		        (unsigned long long)w->txnid);
	if (vlen < 8 || vlen % 8 != 0 || cnt > vlen / 8 - 1) {
		problem(w, HEAP_TREE_FREE, pgno, "free-list record of %llu "
		        "bytes cannot hold its count %llu",
		        (unsigned long long)vlen, (unsigned long long)cnt);
		return;
	}
	for (uint64_t i = 1; i <= cnt; i++) {
		uint64_t pg = get_u64(v + 8 * i);

		if (pg < 2 || pg >= w->npages) {
			problem(w, HEAP_TREE_FREE, pgno, "free page %llu outside "
			        "the snapshot", (unsigned long long)pg);
			return;
		}
		if (w->freebits[pg / 8] & (1u << (pg % 8))) {
			problem(w, HEAP_TREE_FREE, pgno, "page %llu listed free "
			        "twice", (unsigned long long)pg);
			return;
		}
		w->freebits[pg / 8] |= (uint8_t)(1u << (pg % 8));
		w->st->free_pages++;
	}
}

static int tree_by_name(const uint8_t *k, size_t klen)
{
	for (int t = 0; t < HEAP_TREE_MAIN; t++)
		if (strlen(tree_names[t]) == klen && !memcmp(tree_names[t], k, klen))
			return t;
	return -1;
}

static void dbrec_read(dbrec *r, const uint8_t *p)
{
	r->pad = get_u32(p);
	r->flags = get_u16(p + 4);
	r->depth = get_u16(p + 6);
	r->branch = get_u64(p + 8);
	r->leaf = get_u64(p + 16);
	r->overflow = get_u64(p + 24);
	r->entries = get_u64(p + 32);
	r->root = get_u64(p + 40);
}

/* A main-DB node: a named DB's record. */
static void main_record(walker *w, uint64_t pgno, int i, const uint8_t *k,
                        size_t klen, unsigned nflags, const uint8_t *v,
                        uint64_t vlen)
{
	int t = tree_by_name(k, klen);

	if (nflags != F_SUBDATA || vlen != DB_BYTES) {
		if (!w->open_mode || (nflags & ~F_BIGDATA))
			problem(w, HEAP_TREE_MAIN, pgno, "node %d: not a named DB "
			        "(flags 0x%x, %llu bytes)", i, nflags,
			        (unsigned long long)vlen);
		return; /* open mode: a foreign file's data, refused later */
	}
	if (t < 0) {
		if (!w->open_mode)
			problem(w, HEAP_TREE_MAIN, pgno, "node %d: named DB "
			        "unknown to arrheap", i);
		return;
	}
	dbrec_read(&w->rec[t], v);
	w->have[t] = true;
}

/* Open mode: the arrheap meta record (a "meta" node under HEAP_META_KEY),
 * for heap_open's catalog verdict (format.c).  The value is inside the
 * page read (check_layout, or the first overflow page: 64 bytes fit). */
static void meta_record(walker *w, const uint8_t *k, size_t klen,
                        const uint8_t *v, uint64_t vlen)
{
	if (klen == sizeof HEAP_META_KEY - 1 &&
	    memcmp(k, HEAP_META_KEY, klen) == 0 && vlen == HEAP_META_BYTES) {
		memcpy(w->meta_rec, v, HEAP_META_BYTES);
		w->meta_rec_seen = true;
	}
}

static void leaf(walker *w, uint64_t pgno, const uint8_t *p, int n)
{
	for (int i = 0; i < n && !w->stop; i++) {
		const uint8_t *node = p + get_u16(p + PAGEHDR + 2 * i), *v;
		unsigned nflags = get_u16(node + 4);
		size_t klen = get_u16(node + 6);
		uint64_t vlen = get_u16(node) | (uint64_t)get_u16(node + 2) << 16;

		v = node + NODEHDR + klen;
		if (w->tree != HEAP_TREE_MAIN && nflags != 0 && nflags != F_BIGDATA) {
			problem(w, w->tree, pgno, "node %d: flags 0x%x", i, nflags);
			return;
		}
		if (nflags & F_BIGDATA) {
			uint64_t ov = get_u64(v), need = (PAGEHDR - 1 + vlen) / w->psize + 1;
			const uint8_t *op;
			uint32_t pages;

			if (ov < 2 || ov >= w->npages || need > w->npages - ov) {
				problem(w, w->tree, pgno, "node %d: overflow page %llu "
				        "(%llu pages) outside the snapshot", i,
				        (unsigned long long)ov, (unsigned long long)need);
				return;
			}
			if ((op = page(w, ov)) == NULL)
				return;
			pages = get_u32(op + 12);
			if (get_u64(op) != ov || get_u16(op + 10) != P_OVERFLOW ||
			    pages < need) {
				problem(w, w->tree, ov, "overflow page of node %d of page "
				        "%llu: header (page %llu, flags 0x%x, %u pages for "
				        "%llu bytes)", i, (unsigned long long)pgno,
				        (unsigned long long)get_u64(op), get_u16(op + 10),
				        pages, (unsigned long long)vlen);
				return;
			}
			if (!claim(w, pgno, ov, pages))
				return;
			w->st->tree[w->tree].overflow_pages += pages;
			v = op + PAGEHDR;
		}
		w->st->tree[w->tree].entries++;
		if (w->tree == HEAP_TREE_MAIN)
			main_record(w, pgno, i, node + NODEHDR, klen, nflags, v, vlen);
		else if (w->tree == HEAP_TREE_FREE)
			free_record(w, pgno, node + NODEHDR, v, vlen);
		else if (w->tree == HEAP_TREE_META && w->meta_rec != NULL)
			meta_record(w, node + NODEHDR, klen, v, vlen);
	}
}

static void walk(walker *w, uint64_t from, uint64_t pgno, unsigned level,
                 bound lo, bound hi)
{
	heap_tree_stat *ts = &w->st->tree[w->tree];
	const uint8_t *p;
	int n;

	if (!claim(w, from, pgno, 1))
		return;
	if ((n = check_layout(w, pgno, level)) < 0)
		return;
	p = page(w, pgno);
	if (!check_keys(w, pgno, p, n, level == w->depth, lo, hi))
		return;
	if (level == w->depth) {
		ts->leaf_pages++;
		leaf(w, pgno, p, n);
	} else {
		ts->branch_pages++;
		branch(w, pgno, p, n, level, lo, hi);
	}
}

/* Walks tree t from its record (found at page at: a meta or main leaf). */
static void walk_tree(walker *w, enum heap_tree t, uint64_t at)
{
	const dbrec *r = &w->rec[t];
	heap_tree_stat *ts = &w->st->tree[t];
	uint32_t pad = t == HEAP_TREE_FREE ? w->psize : 0;
	uint16_t flags = t >= HEAP_TREE_MAIN ? r->flags & PERSISTENT : r->flags;
	bound none = { NULL, 0 };

	w->tree = t;
	w->depth = r->depth;
	ts->depth = r->depth;
	if (r->pad != pad || flags != tree_flags[t]) {
		problem(w, t, at, "record: pad %u, flags 0x%x (want %u, 0x%x)",
		        r->pad, r->flags, pad, tree_flags[t]);
		return;
	}
	if (r->root == INVALID) {
		if (r->depth || r->branch || r->leaf || r->overflow || r->entries)
			problem(w, t, at, "record of an empty tree counts pages");
		return;
	}
	if (r->depth < 1 || r->depth > MAX_DEPTH) {
		problem(w, t, at, "record: depth %u", r->depth);
		return;
	}
	walk(w, at, r->root, 1, none, none);
	if (w->rc || w->stop || ts->damaged)
		return;
	if (ts->branch_pages != r->branch || ts->leaf_pages != r->leaf ||
	    ts->overflow_pages != r->overflow || ts->entries != r->entries)
		problem(w, t, at, "record counts %llu branch, %llu leaf, %llu "
		        "overflow pages, %llu entries; the tree has %llu, %llu, "
		        "%llu, %llu", (unsigned long long)r->branch,
		        (unsigned long long)r->leaf, (unsigned long long)r->overflow,
		        (unsigned long long)r->entries,
		        (unsigned long long)ts->branch_pages,
		        (unsigned long long)ts->leaf_pages,
		        (unsigned long long)ts->overflow_pages,
		        (unsigned long long)ts->entries);
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

/* The meta page the snapshot uses; false (reported) when it cannot be
 * walked from. */
static bool check_meta(walker *w, uint64_t mp, uint64_t file_bytes)
{
	const uint8_t *p = w->meta, *o = page(w, mp ^ 1);

	if (o == NULL)
		return false;
	if (get_u64(p) != mp || get_u16(p + 10) != P_META || get_u16(p + 8) ||
	    get_u32(p + 12) || get_u32(p + 16) != MAGIC ||
	    get_u32(p + 20) != DATA_VERSION || get_u64(p + 24) != 0) {
		problem(w, HEAP_TREE__COUNT, mp, "meta page header, magic, version "
		        "or address");
		return false;
	}
	/* The older meta is LMDB's fallback, not read by this snapshot: open
	 * leaves it to format.c's checks (what LMDB itself checks). */
	if (!w->open_mode &&
	    (get_u64(o) != (mp ^ 1) || get_u16(o + 10) != P_META ||
	     get_u32(o + 16) != MAGIC || get_u32(o + 20) != DATA_VERSION))
		problem(w, HEAP_TREE__COUNT, mp ^ 1, "the other meta page: header, "
		        "magic or version");
	if (w->npages * w->psize > file_bytes) {
		problem(w, HEAP_TREE__COUNT, mp, "last page %llu beyond the end "
		        "of the file", (unsigned long long)w->npages - 1);
		return false;
	}
	dbrec_read(&w->rec[HEAP_TREE_FREE], p + 40);
	dbrec_read(&w->rec[HEAP_TREE_MAIN], p + 88);
	w->have[HEAP_TREE_FREE] = w->have[HEAP_TREE_MAIN] = true;
	return true;
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
		 * damage: a txnid flipped on a meta page makes LMDB pick the
		 * wrong page for the snapshot (the larger txnid wins, the read
		 * uses page txnid & 1), so reads silently serve the tree of an
		 * older commit.  Report it and walk the tree LMDB reads: a
		 * retry would meet the same bytes forever.  Open only walks
		 * (heap_open refuses no heap for it: ah_verify reports it). */
		if (!w->open_mode && !w->writer && got > w->txnid &&
		    !((got ^ w->txnid) & 1))
			return AH_EBUSY;
		if (!w->open_mode)
			problem(w, HEAP_TREE__COUNT, mp, "txnid %llu, not the "
			        "snapshot's %llu (a damaged txnid on this or the other "
			        "meta page): the snapshot reads this page's tree, of an "
			        "older commit", (unsigned long long)got,
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
	if (!check_meta(w, mp, w->file_bytes)) {
		w->meta_bad = !w->rc;
		rc = w->rc;
		goto out;
	}
	for (int t = HEAP_TREE_MAIN; t < HEAP_TREE__COUNT && !w->rc; t++) {
		if (w->open_mode && t == HEAP_TREE_FREE)
			break;
		walk_tree(w, (enum heap_tree)t, mp);
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
			walk_tree(w, (enum heap_tree)t, w->rec[HEAP_TREE_MAIN].root);
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

static walker *walker_new(uint32_t psize, uint64_t txnid,
                          heap_pagecheck_stat *st)
{
	walker *w = calloc(1, sizeof *w);

	if (w == NULL || (w->spans = malloc((psize - PAGEHDR) / 2 *
	                                    sizeof *w->spans)) == NULL) {
		free(w);
		return NULL;
	}
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
	free(w->spans);
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
