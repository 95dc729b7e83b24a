/*
 * heap/chunk_int.h - private to the chunk files (heap/chunk.c: the size
 * classes, the header's parse and checks, verify and next;
 * heap/chunk_write.c: reserve, seal, images, put_raw and free;
 * heap/chunk_read.c: open, touch, get, prefetch and the verified cache):
 * the format-2 header's struct (layout at the top of chunk.c), the decoded
 * header of either format, and the helpers the three share.
 *
 * The small helpers, the hash and the block sums are static inline here
 * so that every caller keeps them in its own translation unit: nothing
 * hashed per block or per page is a call across files.  The chunk_
 * functions are the ones that cross files; none of them runs per block.
 * It must never be included outside the chunk files (the layers above
 * see heap.h only).
 */
#ifndef HEAP_CHUNK_INT_H
#define HEAP_CHUNK_INT_H

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/heap_int.h"

#define LARGEST 256u
#define VALUE_PAD 16u
#define HDR2 40u  /* format 2 header, before the block checksums */
static const char magic2[4] = { 'A', 'H', 'C', '2' };
/* Trees a call hands to LMDB: never one a page check found damaged. */
#define CHUNKS HEAP_TREE_BIT(HEAP_TREE_CHUNKS)
#define FREE HEAP_TREE_BIT(HEAP_TREE_FREE)

struct hdr2 {
	uint64_t xxh3;
	uint32_t sum0;
	char magic[4];
	uint32_t class_pages;
	uint32_t nblocks;
	uint64_t id;
	uint64_t body_used;
};
_Static_assert(sizeof(struct hdr2) == HDR2, "chunk header size");

/* A decoded header of either format. */
typedef struct chdr {
	int format;            /* 1 or 2 */
	uint64_t xxh3, id, body_used;
	uint32_t sum0, class_pages, nblocks;
	uint32_t bshift;       /* log2 of the block size (format 2) */
	uint64_t body_off;
} chdr;

/* Blocks per page of the chunks this library writes (heap.h). */
static inline uint32_t split_of(const heap *h)
{
	uint32_t k = h->psize / 1024;

	return k >= HEAP_CHUNK_SPLIT ? HEAP_CHUNK_SPLIT : k ? k : 1;
}

/* Blocks of a new chunk of `pages` pages: 0 for jumbo chunks. */
static inline uint32_t nblocks_of(const heap *h, uint64_t pages)
{
	return pages <= LARGEST ? (uint32_t)pages * split_of(h) : 0;
}

/* Where the body starts behind a header with n block sums. */
static inline uint64_t body_off(uint32_t n)
{
	uint64_t end = HDR2 + 4 * (uint64_t)(n > 1 ? n - 1 : 0);

	return (end + 15) / 16 * 16;
}

static inline bool valid_class(uint64_t pages)
{
	for (int i = 0; i < HEAP_NCLASSES; i++)
		if (pages == heap_class_pages[i])
			return true;
	return pages > LARGEST && pages % LARGEST == 0;
}

static inline uint64_t block_start(uint32_t bsize, uint64_t i)
{
	return i ? i * bsize - VALUE_PAD : 0;
}

/* XXH3-64 of a page or a chunk: in AVX2 code where the CPU has it
 * (hash.c; about twice the speed of the SSE2 code of this file's inline
 * build, the same hash), short inputs inline. */
static inline uint64_t xxh3(const void *p, size_t len)
{
	static int avx2 = -1; /* every thread finds the same answer */

	if (len < 1024)
		return XXH3_64bits(p, len);
	int a = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
	if (a < 0) {
		a = __builtin_cpu_supports("avx2") ? 1 : 0;
		__atomic_store_n(&avx2, a, __ATOMIC_RELAXED);
	}
	return a ? heap_xxh3_avx2(p, len) : XXH3_64bits(p, len);
}

static inline uint32_t sum32(const void *p, size_t len)
{
	return (uint32_t)xxh3(p, len);
}

/* The checksum of block i of a value of vsize bytes (block 0 from byte
 * 12, after the two whole-chunk checksums). */
static inline uint32_t block_sum(uint32_t bsize, const uint8_t *val,
                                 uint64_t vsize, uint64_t i)
{
	uint64_t lo = i ? block_start(bsize, i) : 12, hi = block_start(bsize, i + 1);

	return sum32(val + lo, (size_t)((hi < vsize ? hi : vsize) - lo));
}

/* The xxh3 field's value: over the header and page sums where there are
 * page sums (format 2, regular classes), else over everything. */
static inline uint64_t checksum(const MDB_val *v, const chdr *c)
{
	size_t end = c->format == 2 && c->nblocks ? (size_t)c->body_off : v->mv_size;

	return xxh3((const char *)v->mv_data + 8, end - 8);
}

/* chunk.c: pages for a body of want bytes (0: over LMDB's largest
 * value); the header of value v under key id decoded and checked against
 * it (the problem as static text, or NULL); every checksum of a parsed
 * chunk; the LMDB get of chunk id and its parse; the file offset of a
 * chunk's value, from its first page's header. */
uint64_t chunk_pages_for(const heap *h, uint64_t want);
const char *chunk_parse(const heap *h, uint64_t id, const MDB_val *v,
                        chdr *c);
const char *chunk_check_all(const MDB_val *v, const chdr *c);
int chunk_lookup(heap_txn *t, uint64_t id, MDB_val *v, chdr *c);
int chunk_file_offset(const heap *h, const MDB_val *v, uint64_t *off);
/* The LMDB page header of chunk id's first page (value v), which LMDB
 * itself trusts when it frees the chunk (mdb_ovpage_free takes the page
 * number and count from it, and asserts on a P_DIRTY page it did not
 * dirty): flags P_OVERFLOW (and P_DIRTY only on a chunk this write txn
 * stored), the page count the value needs, and, when the map's base is
 * known, the page number of its place; strict (frees, the chunk listing)
 * also learns the base from the page number when it is not known, only
 * if page 0 and 1 there are LMDB's metas of the commit t sees
 * (chunk_map_base_ok); in a write txn a number that does not prove it is
 * the problem.  The problem, or NULL. */
const char *chunk_page_check(heap_txn *t, uint64_t id, const MDB_val *v,
                             bool strict);
/* Whether b is the start of the map: mapped, page-aligned, its pages 0
 * and 1 LMDB meta pages (numbers 0 and 1, P_META, LMDB's magic), and the
 * one LMDB wrote the commit t sees to holds that commit's txnid; b is
 * read only once mincore says it is mapped. */
bool chunk_map_base_ok(heap_txn *t, const uint8_t *b);

/* chunk_write.c: a sealed value's zero tail, block sums, sum0 and xxh3
 * (body_used already in its header c describes); size bytes of a value
 * written at file offset off (pwrite, then writeback started unless
 * AH_OPEN_NOSYNC): AH_EIO, AH_EFULL. */
void chunk_finish(uint8_t *val, size_t size, const chdr *c);
int chunk_write_at(heap *h, const uint8_t *val, size_t size, uint64_t off);

/* chunk_writeback.c (see there; the waits are in heap_int.h): the buffer
 * to assemble the next regular chunk in (NULL: none, fill the map); the
 * sealed chunk id in it handed to the thread (small ones written at once).
 * Errors: AH_EIO, AH_EFULL (this write's, or the last one's: t poisoned). */
uint8_t *heap_wb_buffer(heap *h);
int heap_wb_post(heap_txn *t, uint64_t id, uint8_t *val, size_t size,
                 uint64_t off, const chdr *c);

#endif /* HEAP_CHUNK_INT_H */
