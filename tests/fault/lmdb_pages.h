/*
 * tests/fault/lmdb_pages.h - page surgery for the LMDB damage tests: loads
 * a heap file, finds its current meta, the named DBs' records and roots,
 * and classifies every page of the file (which meta, which tree, branch,
 * leaf, overflow head or body, free, past the last page), so a test can
 * damage exactly the page and the field it means.
 *
 * It trusts the file it parses: use it on undamaged heaps only, then damage
 * a copy.  Its own small parser of the LMDB 0.9 layout (heap/pagecheck_int.h
 * draws it) is deliberately independent of the walker under test.  No
 * Criterion calls (forked children may use it); test-only.
 */
#ifndef TESTS_FAULT_LMDB_PAGES_H
#define TESTS_FAULT_LMDB_PAGES_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LP_PSIZE 4096u
#define LP_BRANCH 0x01u
#define LP_LEAF 0x02u
#define LP_OVERFLOW 0x04u
#define LP_BIGDATA 0x01u
#define LP_NONE UINT64_MAX

/* Trees as heap/heap.h numbers them. */
enum lp_tree { LP_ARR, LP_BATCH, LP_SOURCE, LP_META, LP_CHUNKS, LP_MAIN,
               LP_FREE, LP_NTREES };
static const char *const lp_tree_names[LP_NTREES] = {
	"arr", "batch", "source", "meta", "chunks", "main", "free" };

enum lp_kind { LP_K_UNSEEN, LP_K_META_CUR, LP_K_META_OLD, LP_K_BRANCH,
               LP_K_LEAF, LP_K_OV_HEAD, LP_K_OV_BODY, LP_K_FREE };

typedef struct lp_page {
	uint8_t kind;        /* enum lp_kind */
	uint8_t tree;        /* enum lp_tree, for tree kinds */
	uint8_t level;       /* branch/leaf: 1 = root */
	uint64_t parent;     /* branch/leaf: parent page (LP_NONE: root);
	                      * overflow: the leaf holding the node */
	uint32_t node;       /* index in the parent (or the leaf's node) */
	uint32_t run;        /* overflow head: pages of the run */
} lp_page;

typedef struct lp_file {
	uint8_t *b;          /* the used pages of the file */
	uint64_t len;        /* npages * LP_PSIZE */
	uint64_t npages;     /* current meta's last_pg + 1 */
	uint64_t cur;        /* current meta page (0 or 1) */
	uint64_t root[LP_NTREES], depth[LP_NTREES];
	lp_page *pg;         /* npages entries */
} lp_file;

static inline uint16_t lp_get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

static inline uint64_t lp_get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint8_t *lp_page_at(const lp_file *f, uint64_t pgno)
{
	return f->b + pgno * LP_PSIZE;
}

static inline unsigned lp_nkeys(const lp_file *f, uint64_t pgno)
{
	return (lp_get16(lp_page_at(f, pgno) + 12) - 16u) / 2;
}

/* Offset (in the page) of node i. */
static inline unsigned lp_node_off(const lp_file *f, uint64_t pgno, unsigned i)
{
	return lp_get16(lp_page_at(f, pgno) + 16 + 2 * i);
}

static inline uint64_t lp_child(const lp_file *f, uint64_t pgno, unsigned i)
{
	const uint8_t *n = lp_page_at(f, pgno) + lp_node_off(f, pgno, i);

	return lp_get16(n) | (uint64_t)lp_get16(n + 2) << 16 |
	       (uint64_t)lp_get16(n + 4) << 32;
}

static inline void lp_set_child(lp_file *f, uint64_t pgno, unsigned i,
                                uint64_t child)
{
	uint8_t *n = lp_page_at(f, pgno) + lp_node_off(f, pgno, i);
	uint16_t lo = (uint16_t)child, hi = (uint16_t)(child >> 16),
		top = (uint16_t)(child >> 32);

	memcpy(n, &lo, 2);
	memcpy(n + 2, &hi, 2);
	memcpy(n + 4, &top, 2);
}

static void lp_walk(lp_file *f, enum lp_tree t, uint64_t pgno, unsigned level,
                    uint64_t parent, unsigned node);

static inline void lp_free_idl(lp_file *f, const uint8_t *v)
{
	uint64_t cnt = lp_get64(v);

	for (uint64_t i = 1; i <= cnt; i++) {
		uint64_t pg = lp_get64(v + 8 * i);

		if (pg < f->npages)
			f->pg[pg].kind = LP_K_FREE;
	}
}

static inline void lp_leaf(lp_file *f, enum lp_tree t, uint64_t pgno)
{
	uint8_t *p = lp_page_at(f, pgno);

	for (unsigned i = 0; i < lp_nkeys(f, pgno); i++) {
		uint8_t *n = p + lp_node_off(f, pgno, i);
		unsigned ks = lp_get16(n + 6);
		uint64_t ds = lp_get16(n) | (uint64_t)lp_get16(n + 2) << 16;
		const uint8_t *v = n + 8 + ks;

		if (lp_get16(n + 4) & LP_BIGDATA) {
			uint64_t ov = lp_get64(v);
			uint32_t run;

			memcpy(&run, lp_page_at(f, ov) + 12, 4);
			f->pg[ov] = (lp_page){ LP_K_OV_HEAD, (uint8_t)t, 0, pgno, i, run };
			for (uint32_t k = 1; k < run; k++)
				f->pg[ov + k] = (lp_page){ LP_K_OV_BODY, (uint8_t)t, 0,
				                           pgno, i, 0 };
			v = lp_page_at(f, ov) + 16;
		}
		if (t == LP_FREE)
			lp_free_idl(f, v);
		if (t == LP_MAIN && ds == 48)
			for (int k = 0; k < LP_MAIN; k++)
				if (strlen(lp_tree_names[k]) == ks &&
				    !memcmp(n + 8, lp_tree_names[k], ks)) {
					f->depth[k] = lp_get16(v + 6);
					f->root[k] = lp_get64(v + 40);
				}
	}
}

static void lp_walk(lp_file *f, enum lp_tree t, uint64_t pgno, unsigned level,
                    uint64_t parent, unsigned node)
{
	unsigned flags = lp_get16(lp_page_at(f, pgno) + 10);

	f->pg[pgno] = (lp_page){ flags == LP_BRANCH ? LP_K_BRANCH : LP_K_LEAF,
	                         (uint8_t)t, (uint8_t)level, parent, node, 0 };
	if (flags == LP_LEAF) {
		lp_leaf(f, t, pgno);
		return;
	}
	for (unsigned i = 0; i < lp_nkeys(f, pgno); i++)
		lp_walk(f, t, lp_child(f, pgno, i), level + 1, pgno, i);
}

/* Loads and classifies the file at path; 0 or -1. */
static inline int lp_load(const char *path, lp_file *f)
{
	int fd = open(path, O_RDONLY);
	struct stat st;

	uint8_t m[2][152];

	memset(f, 0, sizeof *f);
	if (fd < 0 || fstat(fd, &st) != 0 || pread(fd, m[0], 152, 0) != 152 ||
	    pread(fd, m[1], 152, LP_PSIZE) != 152) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* The file is sparse up to the map size: read the used pages only. */
	f->cur = lp_get64(m[1] + 144) > lp_get64(m[0] + 144) ? 1 : 0;
	f->npages = lp_get64(m[f->cur] + 136) + 1;
	f->len = f->npages * LP_PSIZE;
	f->b = malloc(f->len);
	if (f->b == NULL || f->len > (uint64_t)st.st_size ||
	    pread(fd, f->b, f->len, 0) != (ssize_t)f->len) {
		close(fd);
		return -1;
	}
	close(fd);
	f->pg = calloc(f->npages, sizeof *f->pg);
	if (f->pg == NULL)
		return -1;
	f->pg[f->cur].kind = LP_K_META_CUR;
	f->pg[f->cur ^ 1].kind = LP_K_META_OLD;
	for (int t = 0; t < LP_NTREES; t++)
		f->root[t] = LP_NONE;
	f->root[LP_FREE] = lp_get64(lp_page_at(f, f->cur) + 40 + 40);
	f->depth[LP_FREE] = lp_get16(lp_page_at(f, f->cur) + 40 + 6);
	f->root[LP_MAIN] = lp_get64(lp_page_at(f, f->cur) + 88 + 40);
	f->depth[LP_MAIN] = lp_get16(lp_page_at(f, f->cur) + 88 + 6);
	for (int t = LP_FREE; t >= 0; t--) /* free and main first: the roots */
		if (f->root[t] != LP_NONE)
			lp_walk(f, (enum lp_tree)t, f->root[t], 1, LP_NONE, 0);
	return 0;
}

static inline void lp_unload(lp_file *f)
{
	free(f->b);
	free(f->pg);
	memset(f, 0, sizeof *f);
}

/* Writes f->b[off, off + n) back to the file at path; 0 or -1. */
static inline int lp_store(const lp_file *f, const char *path, uint64_t off,
                           size_t n)
{
	int fd = open(path, O_WRONLY);
	int rc = fd >= 0 && pwrite(fd, f->b + off, n, (off_t)off) == (ssize_t)n
	                 ? 0 : -1;

	if (fd >= 0)
		close(fd);
	return rc;
}

/* XORs mask into the byte at off of the file at path (and of f->b). */
static inline int lp_flip(lp_file *f, const char *path, uint64_t off,
                          uint8_t mask)
{
	f->b[off] ^= mask;
	return lp_store(f, path, off, 1);
}

#endif /* TESTS_FAULT_LMDB_PAGES_H */
