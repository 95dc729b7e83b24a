/*
 * heap/pagecheck_int.h - private to the page checker (heap/pagecheck.c:
 * the entry points, the meta pages' snapshot and the page accounting;
 * heap/pagecheck_walk.c: the walk of one tree's branch and leaf pages):
 * LMDB's on-disk layout as the checker reads it, and the walker.
 *
 * It must never be included outside those two files: nothing here is
 * LMDB's API, only its bytes.  Layouts (LMDB 0.9.24 mdb.c, LP64, native
 * byte order):
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
#ifndef HEAP_PAGECHECK_INT_H
#define HEAP_PAGECHECK_INT_H

#include <stdarg.h>
#include <stdio.h>

#include "heap/heap_int.h"

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
/* Keep in step with env_catalog.c's dbi_flags. */
static const uint16_t tree_flags[HEAP_TREE__COUNT] = {
	[HEAP_TREE_BATCH] = INTEGERKEY, [HEAP_TREE_CHUNKS] = INTEGERKEY,
	[HEAP_TREE_FREE] = INTEGERKEY,
};

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
	uint8_t *cached[OPEN_PAGES]; /* one malloc'd page each */
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

/* Records a problem of tree t (HEAP_TREE__COUNT: the file) at page pgno.
 * Static inline only so that each file has its own copy, as when it was
 * one file's (it is variadic: never inlined). */
static inline void problem(walker *w, enum heap_tree t, uint64_t pgno,
                           const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline void problem(walker *w, enum heap_tree t, uint64_t pgno,
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

/* pagecheck_walk.c: walks tree t from its record (found at page at: a
 * meta or main leaf); checks the meta page mp the snapshot uses, false
 * (reported) when it cannot be walked from. */
void pc_walk_tree(walker *w, enum heap_tree t, uint64_t at);
bool pc_check_meta(walker *w, uint64_t mp, uint64_t file_bytes);

#endif
