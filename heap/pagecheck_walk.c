/*
 * heap/pagecheck_walk.c - the page checker's walk of one tree (the checks
 * are listed at the top of heap/pagecheck.c; layouts: pagecheck_int.h):
 * every branch and leaf page's header, node bounds and tiling, key sizes
 * and order inside the parent's separators, the leaves' overflow runs and
 * records (named DBs in the main tree, the arrheap meta record, the free
 * list's IDLs), the tree's counts against its record; and the meta page
 * the snapshot uses.
 *
 * Never writes to the file, never calls LMDB, never trusts a byte: every
 * read is bounds-checked against the snapshot's pages before it is made.
 * The walk's per-page and per-node functions stay static in this file
 * (the compiler inlines them into walk): keep them so, for its speed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap/codec.h"
#include "heap/pagecheck_int.h"

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
void pc_walk_tree(walker *w, enum heap_tree t, uint64_t at)
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


/* The meta page the snapshot uses; false (reported) when it cannot be
 * walked from. */
bool pc_check_meta(walker *w, uint64_t mp, uint64_t file_bytes)
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
