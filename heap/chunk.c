/*
 * heap/chunk.c - chunks: checksummed byte blocks of fixed size classes,
 * stored as LMDB values in the "chunks" DB (MDB_INTEGERKEY, key u64 id) and
 * filled in place in the map (MDB_RESERVE + MDB_WRITEMAP).
 *
 * Size classes are 1, 4, 16, 64 and 256 pages; a value of pages * psize - 16
 * bytes takes exactly `pages` overflow pages and starts 16 bytes into its
 * first page, so it is 16-byte aligned.  Bigger bodies get a jumbo chunk of
 * a whole multiple of 256 pages.  Uniform sizes keep LMDB's free list in
 * runs it can reuse without a long search for contiguous pages.
 *
 * Blocks of a chunk: nblocks equal parts of its pages, each of bsize =
 * class_pages * psize / nblocks bytes, aligned in the map: block i is value
 * bytes [i * bsize - 16, (i + 1) * bsize - 16) (block 0 starts at 0).  A
 * reader that seeks touches a few of them; each carries its own checksum
 * so that it can be checked alone.  Heaps before format 5 have a block per
 * page (bsize = psize); this library writes HEAP_CHUNK_SPLIT blocks per
 * page (1 KiB with 4 KiB pages), so that a seek that reads 8 bytes of a
 * fresh block hashes 1 KiB, not 4: the hash of those bytes was 41% of a
 * warm point query's cycles (BENCHMARKS.md).  The sums of a 256-page
 * chunk then take 4 KiB, so the header spans blocks 0 to 4: the sums of
 * blocks 1 to 4 lie in block 0, so a sum is trusted once the block holding
 * it was checked (heap_chunk_touch_slow checks that block first).
 *
 * Format 2 chunk (magic "AHC2"), native byte order:
 *
 *   off  size  field
 *     0     8  xxh3        XXH3-64 of bytes [8, B): the rest of the
 *                          header and the page checksums, which cover every
 *                          page, so it stands for the whole chunk (a hash
 *                          of hashes); jumbo chunks: of bytes [8, size)
 *     8     4  sum0        low 32 bits of XXH3-64 of block 0 from byte 12:
 *                          the rest of the header, the page checksums and
 *                          the start of the body
 *    12     4  magic       "AHC2"
 *    16     4  class_pages pages of the value; must match its LMDB size
 *    20     4  nblocks     pages with a checksum: class_pages for the
 *                          regular classes, 0 for jumbo chunks (checked
 *                          whole only)
 *    24     8  id          the chunk's own key
 *    32     8  body_used   body bytes in use, <= capacity
 *    40  4(n-1) sums       low 32 bits of XXH3-64 of block i, i = 1..n-1
 *     B        body, B = 40 + 4 (n - 1) rounded up to 16 (48 for jumbo
 *              and 1-page chunks, 1072 for 256 pages: always inside
 *              block 0), then zeroes to the end of the value
 *
 * Format 1 chunk (magic "AHCK", arrheap 0.1.0; read, never written):
 *     0 xxh3 of [8, size), 8 magic, 12 class_pages, 16 id, 24 body_used,
 *     32 body.  No page checksums: always checked whole.
 *
 * Checked whole: xxh3, sum0 and every page's sum (each byte hashed once).
 * Checked page by page: sum0 at open, each other page when first touched.
 * Pages checked page by page are remembered per heap handle (the verified
 * cache below), keyed by (id, xxh3), so a process pays for each page of a
 * seek's path once, not once per query; whole checks (walks, merges) are
 * never skipped.
 *
 * Everything read back is untrusted: a header that disagrees with the
 * LMDB value holding it, or a checksum that does not match, is
 * AH_ECORRUPT.  Never trust a byte of a page before its checksum passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

const uint32_t heap_class_pages[HEAP_NCLASSES] = { 1, 4, 16, 64, 256 };

#define LARGEST 256u
#define VALUE_PAD 16u
#define PREFETCH_MAX (8u << 20) /* bytes one heap_chunk_prefetch asks for */
#define MAX_VALUE 0xFFFFFFFFull
#define PIECE ((size_t)1 << 20)
#define HDR1 32u  /* format 1 header */
#define HDR2 40u  /* format 2 header, before the block checksums */
static const char magic1[4] = { 'A', 'H', 'C', 'K' };
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
static uint32_t split_of(const heap *h)
{
	uint32_t k = h->psize / 1024;

	return k >= HEAP_CHUNK_SPLIT ? HEAP_CHUNK_SPLIT : k ? k : 1;
}

/* Blocks of a new chunk of `pages` pages: 0 for jumbo chunks. */
static uint32_t nblocks_of(const heap *h, uint64_t pages)
{
	return pages <= LARGEST ? (uint32_t)pages * split_of(h) : 0;
}

/* Where the body starts behind a header with n block sums. */
static uint64_t body_off(uint32_t n)
{
	uint64_t end = HDR2 + 4 * (uint64_t)(n > 1 ? n - 1 : 0);

	return (end + 15) / 16 * 16;
}

uint64_t heap_chunk_body_at(const heap *h, uint64_t value_bytes)
{
	return body_off(nblocks_of(h, (value_bytes + VALUE_PAD) / h->psize));
}

static uint64_t cap_of(const heap *h, uint64_t pages)
{
	return pages * h->psize - VALUE_PAD - body_off(nblocks_of(h, pages));
}

/* Pages for a body of want bytes; 0 when over LMDB's largest value. */
static uint64_t pages_for(const heap *h, uint64_t want)
{
	uint64_t unit = (uint64_t)LARGEST * h->psize, pages;

	for (int i = 0; i < HEAP_NCLASSES; i++)
		if (cap_of(h, heap_class_pages[i]) >= want)
			return heap_class_pages[i];
	if (want > MAX_VALUE)
		return 0;
	pages = (want + VALUE_PAD + body_off(0) + unit - 1) / unit *
	        LARGEST;
	if (pages <= LARGEST) /* the jumbo header is smaller than 256 pages' */
		pages = 2 * LARGEST;
	return pages * h->psize - VALUE_PAD > MAX_VALUE ? 0 : pages;
}

size_t heap_chunk_max_body(const heap *h)
{
	return (size_t)cap_of(h, LARGEST);
}

size_t heap_chunk_fit(const heap *h, size_t want)
{
	uint64_t pages = pages_for(h, want);

	return pages ? (size_t)cap_of(h, pages) : 0;
}

size_t heap_chunk_stored(const heap *h, size_t want)
{
	uint64_t pages = pages_for(h, want);

	return pages ? (size_t)(pages * h->psize - VALUE_PAD) : 0;
}

static bool valid_class(uint64_t pages)
{
	for (int i = 0; i < HEAP_NCLASSES; i++)
		if (pages == heap_class_pages[i])
			return true;
	return pages > LARGEST && pages % LARGEST == 0;
}

static uint64_t block_start(uint32_t bsize, uint64_t i)
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

static uint32_t sum32(const void *p, size_t len)
{
	return (uint32_t)xxh3(p, len);
}

/* The checksum of block i of a value of vsize bytes (block 0 from byte
 * 12, after the two whole-chunk checksums). */
static uint32_t block_sum(uint32_t bsize, const uint8_t *val, uint64_t vsize,
                          uint64_t i)
{
	uint64_t lo = i ? block_start(bsize, i) : 12, hi = block_start(bsize, i + 1);

	return sum32(val + lo, (size_t)((hi < vsize ? hi : vsize) - lo));
}

/* Decodes and checks a chunk header against its key and LMDB value; the
 * problem as static text, or NULL.  Only header fields are trusted after
 * this, and only as far as their checksum has been checked (see
 * heap_chunk_open). */
static const char *parse(const heap *h, uint64_t id, const MDB_val *v,
                         chdr *c)
{
	const uint8_t *p = v->mv_data;
	uint64_t pages;

	memset(c, 0, sizeof *c);
	if ((v->mv_size + VALUE_PAD) % h->psize != 0 ||
	    v->mv_size < (size_t)h->psize - VALUE_PAD)
		return "chunk value size is not a whole class";
	if ((uintptr_t)v->mv_data % 16 != 0)
		return "chunk not 16-byte aligned";
	pages = (v->mv_size + VALUE_PAD) / h->psize;
	if (memcmp(p + 12, magic2, 4) == 0) {
		struct hdr2 hd;

		memcpy(&hd, p, sizeof hd);
		c->format = 2;
		c->xxh3 = hd.xxh3;
		c->sum0 = hd.sum0;
		c->class_pages = hd.class_pages;
		c->nblocks = hd.nblocks;
		c->id = hd.id;
		c->body_used = hd.body_used;
		c->body_off = body_off(hd.nblocks);
		c->bshift = (uint32_t)__builtin_ctz(h->psize);
		/* a block per page (before format 5) or split_of per page */
		if (pages > LARGEST ? hd.nblocks != 0
		    : hd.nblocks != pages && hd.nblocks != nblocks_of(h, pages))
			return "chunk page count does not match its class";
		if (hd.nblocks > pages)
			c->bshift -= (uint32_t)__builtin_ctz(hd.nblocks / (uint32_t)pages);
	} else if (memcmp(p + 8, magic1, 4) == 0) {
		c->format = 1;
		memcpy(&c->xxh3, p, 8);
		memcpy(&c->class_pages, p + 12, 4);
		memcpy(&c->id, p + 16, 8);
		memcpy(&c->body_used, p + 24, 8);
		c->body_off = HDR1;
	} else {
		return "chunk magic";
	}
	if (!valid_class(pages) || c->class_pages != pages)
		return "chunk class does not match its size";
	if (c->id != id)
		return "chunk id does not match its key";
	if (c->body_used > v->mv_size - c->body_off)
		return "chunk body_used beyond capacity";
	return NULL;
}

/* heap_chunk_info's block_bytes. */
static uint32_t block_bytes(const chdr *c)
{
	return c->format == 2 && c->nblocks ? 1u << c->bshift : 0;
}

/* The xxh3 field's value: over the header and page sums where there are
 * page sums (format 2, regular classes), else over everything. */
static uint64_t checksum(const MDB_val *v, const chdr *c)
{
	size_t end = c->format == 2 && c->nblocks ? (size_t)c->body_off : v->mv_size;

	return xxh3((const char *)v->mv_data + 8, end - 8);
}

/* Every checksum of the chunk: the xxh3 and, in format 2, sum0 and each
 * block's.  The problem, or NULL. */
static const char *check_all(const MDB_val *v, const chdr *c)
{
	const uint8_t *p = v->mv_data;

	if (c->xxh3 != checksum(v, c))
		return "chunk checksum mismatch";
	if (c->format == 2 && c->nblocks) {
		uint32_t bsize = 1u << c->bshift;

		if (c->sum0 != block_sum(bsize, p, v->mv_size, 0))
			return "chunk page 0 checksum mismatch";
		for (uint32_t i = 1; i < c->nblocks; i++) {
			uint32_t s;

			memcpy(&s, p + HDR2 + 4 * (i - 1), 4);
			if (s != block_sum(bsize, p, v->mv_size, i))
				return "chunk page checksum mismatch";
		}
	}
	return NULL;
}

const char *heap_chunk_problem(const heap *h, uint64_t id, const MDB_val *v,
                               bool checksums, heap_chunk_info *ci)
{
	chdr c;
	const char *problem = parse(h, id, v, &c);

	if (ci != NULL) {
		ci->id = id;
		ci->class_pages = c.class_pages;
		ci->body_used = c.body_used;
		ci->xxh3 = c.xxh3;
		ci->format = (uint32_t)c.format;
		ci->block_bytes = block_bytes(&c);
	}
	if (problem == NULL && checksums)
		problem = check_all(v, &c);
	return problem;
}

static int lookup(heap_txn *t, uint64_t id, MDB_val *v, chdr *c)
{
	MDB_val k = { sizeof id, &id };
	int rc = heap_trees_usable(t->h, CHUNKS);
	const char *problem;

	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, v)));

	if (rc != 0)
		return rc;
	if ((problem = parse(t->h, id, v, c)) != NULL)
		return CORRUPT(problem);
	return 0;
}

/* mdb_env_info's me_mapaddr is only the MDB_FIXEDMAP address, so the file
 * offset comes from the page itself: a chunk is an overflow value starting
 * right after its first page's 16-byte header, whose first field is the
 * page number (LMDB's MDB_page.mp_pgno). */
static int file_offset(const heap *h, const MDB_val *v, uint64_t *off)
{
	const char *page = (const char *)v->mv_data - VALUE_PAD;
	uint64_t pgno;

	memcpy(&pgno, page, sizeof pgno);
	if ((uintptr_t)page % h->psize != 0 ||
	    pgno >= h->map_bytes / h->psize)
		return CORRUPT("chunk page header");
	*off = pgno * h->psize + VALUE_PAD;
	return 0;
}

/* Is the map the file's pages (MDB_WRITEMAP: every writable heap)? */
static bool writemap(const heap *h)
{
	unsigned fl;

	return mdb_env_get_flags(h->env, &fl) == 0 && (fl & MDB_WRITEMAP);
}

/* lookup() for heap_chunk_seal: the header of a chunk assembled in
 * h->wbuf is read there (its place in the map is not written yet). */
static int lookup_reserved(heap_txn *t, uint64_t id, MDB_val *v, chdr *c)
{
	MDB_val k = { sizeof id, &id }, w;
	const char *problem;
	int rc;

	if (t->wb_id == 0 || t->wb_id != id)
		return lookup(t, id, v, c);
	rc = heap_trees_usable(t->h, CHUNKS);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
		                               &k, v)));
	if (rc != 0)
		return rc;
	if (v->mv_size != t->wb_size)
		return CORRUPT("reserved chunk changed size");
	w.mv_size = v->mv_size;
	w.mv_data = t->h->wbuf + VALUE_PAD;
	if ((problem = parse(t->h, id, &w, c)) != NULL)
		return CORRUPT(problem);
	return 0;
}

/* The sums of blocks 1.. of a value whose header c describes: they live
 * in block 0 and the header blocks after it (the first sums, of the
 * header blocks, in block 0), so block 0's sum, then the xxh3, come after
 * (the callers). */
static void seal_blocks(uint8_t *val, uint64_t vsize, const chdr *c)
{
	uint32_t bsize = 1u << c->bshift;

	/* from the last: a header block's sum covers the sums after it */
	for (uint32_t i = c->nblocks; i-- > 1;) {
		uint32_t s = block_sum(bsize, val, vsize, i);

		memcpy(val + HDR2 + 4 * (i - 1), &s, 4);
	}
}

/* A regular chunk with several blocks per page makes the heap format 5
 * (heap.h): the transaction that writes the first one marks it. */
static int mark_blocks(heap_txn *t, uint64_t pages)
{
	if (nblocks_of(t->h, pages) <= pages || t->format_mark >= HEAP_FORMAT_BLOCKS)
		return 0;
	return heap_format_mark(t, HEAP_FORMAT_BLOCKS);
}

static int next_id(heap_txn *t)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t last = 0;
	int rc;

	TRY(heap_trees_usable(t->h, CHUNKS));
	TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
	                                  &cur))));
	rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_LAST));
	if (rc == 0 && k.mv_size != sizeof last)
		rc = CORRUPT("chunk key is not a u64");
	else if (rc == 0)
		memcpy(&last, k.mv_data, sizeof last);
	else if (rc == MDB_NOTFOUND)
		rc = 0;
	TRY(heap_err(rc));
	if (last == UINT64_MAX) {
		rc = AH_ELIMIT;
		goto out;
	}
	t->next_id = last + 1;
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}

int heap_chunk_reserve(heap_txn *t, size_t body_bytes, uint64_t *id,
                       void **body, size_t *body_cap)
{
	struct hdr2 hd = { 0 };
	MDB_val k, v;
	uint64_t pages, nid, off = 0;
	uint8_t *val;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (id == NULL || body == NULL)
		return AH_EINVAL;
	if ((pages = pages_for(t->h, body_bytes)) == 0)
		return AH_ELIMIT;
	TRY(heap_trees_usable(t->h, CHUNKS | FREE));
	if (t->next_id == 0)
		TRY(next_id(t));
	TRY(heap_space_need(t, pages));
	TRY(mark_blocks(t, pages));
	nid = t->next_id;
	k.mv_size = sizeof nid;
	k.mv_data = &nid;
	v.mv_size = pages * t->h->psize - VALUE_PAD;
	v.mv_data = NULL;
	TRY(heap_err(HEAP_MDB(mdb_put(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v,
	                          MDB_RESERVE | MDB_APPEND))));
	heap_fault_order();
	if ((uintptr_t)v.mv_data % 16 != 0) {
		rc = CORRUPT("reserved chunk not 16-byte aligned");
		goto out;
	}
	/* A regular chunk is assembled in memory and written with one pwrite
	 * at seal: filling fresh map pages costs a page fault each, several
	 * times a pwrite of the same page (the map and pwrite share the page
	 * cache, so readers of the map see it).  Jumbo chunks, and a second
	 * chunk reserved before the first is sealed, are filled in the map. */
	val = v.mv_data;
	if (pages <= LARGEST && t->wb_id == 0 && writemap(t->h) &&
	    file_offset(t->h, &v, &off) == 0) {
		if (t->h->wbuf == NULL &&
		    posix_memalign((void **)&t->h->wbuf, 4096,
		                   (size_t)LARGEST * t->h->psize) != 0)
			t->h->wbuf = NULL;
		if (t->h->wbuf != NULL) {
			val = t->h->wbuf + VALUE_PAD;
			t->wb_id = nid;
			t->wb_size = v.mv_size;
			t->wb_off = off;
		}
	}
	memcpy(hd.magic, magic2, 4);
	hd.class_pages = (uint32_t)pages;
	hd.nblocks = nblocks_of(t->h, pages);
	hd.id = nid;
	memcpy(val, &hd, sizeof hd);
	/* the block sums and the padding before the body: no stale bytes of
	 * the write buffer's last chunk (the same body, the same value) */
	memset(val + HDR2, 0, body_off(hd.nblocks) - HDR2);
	t->next_id++;
	*id = nid;
	*body = (char *)val + body_off(hd.nblocks);
	if (body_cap != NULL)
		*body_cap = v.mv_size - body_off(hd.nblocks);
out:
	return heap_txn_fail(t, rc);
}

/* Writes size bytes of a value to file offset off. */
static int write_at(heap *h, const uint8_t *val, size_t size, uint64_t off)
{
	size_t done = 0;
	ssize_t n;

	while (done < size) {
		n = pwrite(h->fd, val + done, size - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 && errno == ENOSPC ? AH_EFULL : AH_EIO;
		done += (size_t)n;
	}
	/* Start writeback now, so that the commit's sync waits for less. */
	if (!(h->flags & AH_OPEN_NOSYNC))
		(void)sync_file_range(h->fd, (off_t)off, (off_t)size,
		                      SYNC_FILE_RANGE_WRITE);
	return 0;
}

/* Writes the assembled value to its place in the file. */
static int write_value(heap_txn *t, const uint8_t *val)
{
	return write_at(t->h, val, t->wb_size, t->wb_off);
}

int heap_chunk_seal(heap_txn *t, uint64_t id, void *body, size_t body_used)
{
	MDB_val v;
	chdr c;
	uint8_t *val;
	char *p, *end;
	uint64_t sum;
	uint32_t s;
	bool buffered;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	TRY(lookup_reserved(t, id, &v, &c));
	val = v.mv_data;
	buffered = t->wb_id != 0 && t->wb_id == id;
	if (buffered)
		val = t->h->wbuf + VALUE_PAD;
	if (c.format != 2 || body != val + c.body_off ||
	    body_used > v.mv_size - c.body_off)
		return AH_EINVAL;
	memcpy(val + offsetof(struct hdr2, body_used), &body_used,
	       sizeof(uint64_t));
	/* Fresh map pages fill fastest in pieces (see background notes). */
	end = (char *)val + v.mv_size;
	for (p = (char *)body + body_used; p < end; p += PIECE)
		memset(p, 0, (size_t)(end - p) < PIECE ? (size_t)(end - p)
		                                       : PIECE);
	seal_blocks(val, v.mv_size, &c);
	s = block_sum(1u << c.bshift, val, v.mv_size, 0);
	memcpy(val + offsetof(struct hdr2, sum0), &s, 4);
	if (c.nblocks == 0) { /* jumbo: no page sums, xxh3 covers it all */
		sum = xxh3(val + 8, v.mv_size - 8);
	} else {
		MDB_val w = { v.mv_size, val };

		c.body_used = body_used;
		sum = checksum(&w, &c);
	}
	memcpy(val, &sum, sizeof sum);
	if (buffered) {
		rc = write_value(t, val);
		t->wb_id = 0;
	}
out:
	return heap_txn_fail(t, rc);
}

/* ------------------------------------------------------- chunk images */

int heap_chunk_image_new(const heap *h, size_t body_bytes, void **img,
                         size_t *img_bytes, void **body, size_t *body_cap)
{
	struct hdr2 hd = { 0 };
	uint64_t pages = pages_for(h, body_bytes);
	size_t vsize;

	if (pages == 0)
		return AH_ELIMIT;
	vsize = (size_t)(pages * h->psize - VALUE_PAD);
	if (posix_memalign(img, 16, vsize) != 0)
		return AH_ENOMEM;
	memcpy(hd.magic, magic2, 4);
	hd.class_pages = (uint32_t)pages;
	hd.nblocks = nblocks_of(h, pages);
	memcpy(*img, &hd, sizeof hd);
	memset((char *)*img + HDR2, 0, body_off(hd.nblocks) - HDR2);
	*img_bytes = vsize;
	*body = (char *)*img + body_off(hd.nblocks);
	if (body_cap != NULL)
		*body_cap = vsize - body_off(hd.nblocks);
	return 0;
}

int heap_chunk_image_seal(const heap *h, void *img, size_t img_bytes,
                          size_t body_used)
{
	uint8_t *val = img;
	uint64_t pages = (img_bytes + VALUE_PAD) / h->psize;
	MDB_val w = { img_bytes, img };
	chdr c;

	if ((img_bytes + VALUE_PAD) % h->psize != 0 || !valid_class(pages) ||
	    (uintptr_t)img % 16 != 0)
		return AH_EINVAL;
	/* the image's own header (heap_chunk_image_new): its id is set at
	 * put, so parse with the id it holds */
	uint64_t own;
	memcpy(&own, val + offsetof(struct hdr2, id), sizeof own);
	if (parse(h, own, &w, &c) != NULL || c.format != 2 ||
	    body_used > img_bytes - c.body_off)
		return AH_EINVAL;
	memcpy(val + offsetof(struct hdr2, body_used), &body_used,
	       sizeof(uint64_t));
	memset(val + c.body_off + body_used, 0, img_bytes - c.body_off - body_used);
	/* Blocks 1..: their sums do not depend on the id; sum0 and xxh3 do
	 * (heap_chunk_image_put). */
	seal_blocks(val, img_bytes, &c);
	return 0;
}

int heap_chunk_image_put(heap_txn *t, void *img, size_t img_bytes,
                         uint64_t *id)
{
	uint8_t *val = img;
	uint64_t pages, nid, off = 0, sum;
	MDB_val k, v;
	chdr c;
	uint32_t s0;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (img == NULL || id == NULL || (uintptr_t)img % 16 != 0 ||
	    (img_bytes + VALUE_PAD) % t->h->psize != 0)
		return AH_EINVAL;
	pages = (img_bytes + VALUE_PAD) / t->h->psize;
	TRY(heap_trees_usable(t->h, CHUNKS | FREE));
	if (t->next_id == 0)
		TRY(next_id(t));
	TRY(heap_space_need(t, pages));
	TRY(mark_blocks(t, pages));
	nid = t->next_id;
	k.mv_size = sizeof nid;
	k.mv_data = &nid;
	v.mv_size = img_bytes;
	v.mv_data = NULL;
	TRY(heap_err(HEAP_MDB(mdb_put(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v,
	                          MDB_RESERVE | MDB_APPEND))));
	heap_fault_order();
	t->next_id++;
	memcpy(val + offsetof(struct hdr2, id), &nid, sizeof nid);
	{
		MDB_val w = { img_bytes, val };
		const char *problem = parse(t->h, nid, &w, &c);

		if (problem != NULL) { /* not an image of heap_chunk_image_new */
			rc = CORRUPT(problem);
			goto out;
		}
		s0 = block_sum(1u << c.bshift, val, img_bytes, 0);
		memcpy(val + offsetof(struct hdr2, sum0), &s0, 4);
		sum = c.nblocks ? checksum(&w, &c)
		                : xxh3(val + 8, img_bytes - 8);
	}
	memcpy(val, &sum, sizeof sum);
	if (writemap(t->h) && file_offset(t->h, &v, &off) == 0)
		rc = write_at(t->h, val, img_bytes, off);
	else
		memcpy(v.mv_data, val, img_bytes);
	if (rc == 0)
		*id = nid;
out:
	return heap_txn_fail(t, rc);
}

/* ---------------------------------------------------- the verified cache */

/* Pages of regular chunks that a PAGES-mode reader of this heap handle
 * checked, per (chunk id, xxh3): an open-addressing table of at most
 * VC_MAX entries (then it starts over), behind its own mutex (readers of
 * any thread).  An entry for an id with another xxh3 is a chunk whose id
 * was reused: it is replaced. */
#define VC_MAX (1u << 20)
/* The first table: 64 entries (9 KiB), so a fresh handle's first queries
 * touch two or three fresh pages, not a 144 KiB calloc's (each a read
 * fault, then a write fault, on this VM ~3 us apiece); it doubles at 70%. */
#define VC_FIRST 64u

typedef struct vc_entry {
	uint64_t id, xxh3; /* id 0: empty (chunk ids start at 1) */
	uint64_t bits[HEAP_CHUNK_MAX_BLOCKS / 64];
} vc_entry;

struct heap_vcache {
	pthread_mutex_t mu;
	vc_entry *e;
	uint32_t cap, n;
};

static uint32_t vc_slot(const struct heap_vcache *vc, uint64_t id)
{
	return (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (vc->cap - 1);
}

/* The entry for id (found or made), or NULL when memory is short. */
static vc_entry *vc_find(struct heap_vcache *vc, uint64_t id, uint64_t xxh3,
                         bool make)
{
	if (vc->cap == 0) {
		if (!make || !(vc->e = calloc(VC_FIRST, sizeof *vc->e)))
			return NULL;
		vc->cap = VC_FIRST;
	}
	for (uint32_t i = vc_slot(vc, id);; i = (i + 1) & (vc->cap - 1)) {
		vc_entry *x = &vc->e[i];

		if (x->id == id) {
			if (x->xxh3 != xxh3) {
				if (!make)
					return NULL;
				memset(x->bits, 0, sizeof x->bits);
				x->xxh3 = xxh3;
			}
			return x;
		}
		if (x->id != 0)
			continue;
		if (!make)
			return NULL;
		if ((vc->n + 1) * 10 > vc->cap * 7) {
			uint32_t ncap = vc->cap < VC_MAX ? vc->cap * 2 : vc->cap;
			vc_entry *old = vc->e, *ne = calloc(ncap, sizeof *ne);
			uint32_t ocap = vc->cap;

			if (ne == NULL)
				return NULL;
			vc->e = ne;
			vc->cap = ncap;
			vc->n = 0;
			for (uint32_t j = 0; ocap != ncap && j < ocap; j++)
				if (old[j].id != 0) {
					uint32_t k = vc_slot(vc, old[j].id);

					while (ne[k].id != 0)
						k = (k + 1) & (ncap - 1);
					ne[k] = old[j];
					vc->n++;
				}
			free(old); /* at VC_MAX: started over, empty */
			return vc_find(vc, id, xxh3, true);
		}
		x->id = id;
		x->xxh3 = xxh3;
		vc->n++;
		return x;
	}
}

static struct heap_vcache *vc_of(heap *h)
{
	struct heap_vcache *vc = __atomic_load_n(&h->vcache, __ATOMIC_ACQUIRE);

	if (vc != NULL)
		return vc;
	pthread_mutex_lock(&h->mu);
	if ((vc = h->vcache) == NULL && (vc = calloc(1, sizeof *vc)) != NULL) {
		pthread_mutex_init(&vc->mu, NULL);
		__atomic_store_n(&h->vcache, vc, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&h->mu);
	return vc;
}

void heap_vcache_free(heap *h)
{
	if (h->vcache == NULL)
		return;
	pthread_mutex_destroy(&h->vcache->mu);
	free(h->vcache->e);
	free(h->vcache);
	h->vcache = NULL;
}

/* The view's checked pages into the cache (best effort). */
static void vc_remember(heap_chunk_view *cv)
{
	struct heap_vcache *vc = vc_of(cv->h);
	vc_entry *x;

	if (vc == NULL)
		return;
	pthread_mutex_lock(&vc->mu);
	if ((x = vc_find(vc, cv->id, cv->xxh3, true)) != NULL)
		for (unsigned i = 0; i < HEAP_CHUNK_MAX_BLOCKS / 64; i++)
			x->bits[i] |= cv->seen[i];
	pthread_mutex_unlock(&vc->mu);
}

#define LOC_BITS HEAP_LOC_BITS /* the location word: heap_int.h */

/* lookup() through *loc: where a read txn found the chunk before, read
 * without LMDB's get; else the get, remembered in *loc (and the map's
 * base in the handle).  Why a remembered place is right: heap.h. */
static int lookup_at(heap_txn *t, uint64_t id, uint64_t *loc, MDB_val *v,
                     chdr *c)
{
	heap *h = t->h;
	int rc;

	if (loc == NULL || !t->rdonly)
		return lookup(t, id, v, c);
	uint64_t l = __atomic_load_n(loc, __ATOMIC_RELAXED);
	const uint8_t *base = __atomic_load_n(&h->map_base, __ATOMIC_ACQUIRE);
	uint64_t pg = l >> LOC_BITS, pages = l & ((1u << LOC_BITS) - 1);
	if (l != 0 && base != NULL && pages != 0 &&
	    pg < h->map_bytes / h->psize &&
	    pages <= h->map_bytes / h->psize - pg &&
	    heap_trees_usable(h, CHUNKS) == 0) {
		v->mv_data = (void *)(base + pg * h->psize + VALUE_PAD);
		v->mv_size = pages * h->psize - VALUE_PAD;
		if (parse(h, id, v, c) == NULL)
			return 0;
		/* not what was remembered: from LMDB, as without a hint */
	}
	if ((rc = lookup(t, id, v, c)) != 0)
		return rc;
	uint64_t off = 0;
	if (file_offset(h, v, &off) == 0) {
		pg = (off - VALUE_PAD) / h->psize;
		pages = (v->mv_size + VALUE_PAD) / h->psize;
		if (pages < (1u << LOC_BITS) && pg < (UINT64_MAX >> LOC_BITS)) {
			const uint8_t *b = (const uint8_t *)v->mv_data - off;
			__atomic_store_n(&h->map_base, b, __ATOMIC_RELEASE);
			__atomic_store_n(loc, pg << LOC_BITS | pages, __ATOMIC_RELAXED);
		}
	}
	return 0;
}

int heap_chunk_open(heap_txn *t, uint64_t id, enum heap_chunk_how how,
                    heap_chunk_view *cv)
{
	return heap_chunk_open_at(t, id, NULL, how, cv);
}

int heap_chunk_open_at(heap_txn *t, uint64_t id, uint64_t *loc,
                       enum heap_chunk_how how, heap_chunk_view *cv)
{
	MDB_val v;
	chdr c;
	const char *problem;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (cv == NULL)
		return AH_EINVAL;
	if ((rc = lookup_at(t, id, loc, &v, &c)) != 0)
		return rc;
	memset(cv, 0, sizeof *cv);
	cv->h = t->h;
	cv->id = id;
	cv->xxh3 = c.xxh3;
	cv->value = v.mv_data;
	cv->value_bytes = v.mv_size;
	cv->bshift = c.bshift;
	if (how == HEAP_CHUNK_SELF && !heap_verify_reads(t->h)) {
		cv->all = true; /* the caller checks what it reads */
	} else if (how == HEAP_CHUNK_WHOLE || how == HEAP_CHUNK_SELF ||
	           c.format == 1 || c.nblocks == 0 || heap_verify_reads(t->h)) {
		if ((problem = check_all(&v, &c)) != NULL)
			return CORRUPT(problem);
		cv->all = true;
	} else {
		struct heap_vcache *vc = vc_of(t->h);
		vc_entry *x;

		if (vc != NULL) {
			pthread_mutex_lock(&vc->mu);
			if ((x = vc_find(vc, id, c.xxh3, false)) != NULL)
				memcpy(cv->seen, x->bits, sizeof cv->seen);
			pthread_mutex_unlock(&vc->mu);
		}
		/* Block 0 holds the header and the first blocks' sums. */
		if (!(cv->seen[0] & 1)) {
			if (c.sum0 != block_sum(1u << c.bshift, v.mv_data, v.mv_size, 0))
				return CORRUPT("chunk page 0 checksum");
			cv->seen[0] |= 1;
			vc_remember(cv);
		}
		cv->all = c.nblocks == 1;
	}
	cv->body = (const uint8_t *)v.mv_data + c.body_off;
	cv->body_used = c.body_used;
	return 0;
}

/* Checks block i of the view unless it was: first the block that holds
 * its sum (block 0, checked at open, or a later header block, whose own
 * sum lies in block 0), then i itself.  *fresh tells a check was made. */
static int touch_block(heap_chunk_view *cv, uint64_t i, bool *fresh)
{
	uint32_t bsize = 1u << cv->bshift, want;
	uint64_t at = HDR2 + 4 * (i - 1); /* i >= 1: block 0 is checked */

	if ((cv->seen[i >> 6] >> (i & 63)) & 1)
		return 0;
	uint64_t j = (at + VALUE_PAD) >> cv->bshift;
	if (j >= i)
		return CORRUPT("chunk block sum not before its block");
	if (j > 0) {
		int rc = touch_block(cv, j, fresh);
		if (rc)
			return rc;
	}
	memcpy(&want, cv->value + at, 4);
	if (want != block_sum(bsize, cv->value, cv->value_bytes, i))
		return CORRUPT("chunk page checksum");
	cv->seen[i >> 6] |= (uint64_t)1 << (i & 63);
	*fresh = true;
	return 0;
}

int heap_chunk_touch_slow(heap_chunk_view *cv, uint64_t off, size_t len)
{
	uint64_t first, last;
	bool fresh = false;
	int rc = 0;

	if (cv->all || len == 0)
		return 0;
	if (off > cv->value_bytes || len > cv->value_bytes - off)
		return CORRUPT("read outside the chunk");
	first = (off + VALUE_PAD) >> cv->bshift;
	last = (off + len - 1 + VALUE_PAD) >> cv->bshift;
	/* Block mode holds only regular chunks: fewer than
	 * HEAP_CHUNK_MAX_BLOCKS blocks (parse). */
	for (uint64_t i = first; i <= last && rc == 0; i++)
		if (i > 0)
			rc = touch_block(cv, i, &fresh);
	if (fresh && cv->h != NULL)
		vc_remember(cv);
	return rc;
}

int heap_chunk_get(heap_txn *t, uint64_t id, const void **body,
                   size_t *body_used)
{
	heap_chunk_view cv;
	int rc;

	if (body == NULL)
		return AH_EINVAL;
	if ((rc = heap_chunk_open(t, id, HEAP_CHUNK_WHOLE, &cv)) != 0)
		return rc;
	*body = cv.body;
	if (body_used != NULL)
		*body_used = cv.body_used;
	return 0;
}

int heap_chunk_prefetch(heap_txn *t, uint64_t id)
{
	MDB_val k = { sizeof id, &id }, v;
	uintptr_t start, end, psize;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	/* mdb_get reads only B-tree pages: the chunk's own pages stay untouched
	 * until the kernel's read brings them in. */
	TRY(heap_trees_usable(t->h, CHUNKS));
	TRY(heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k,
	                                   &v))));
	psize = t->h->psize;
	if (v.mv_size < HDR2)
		return CORRUPT("chunk smaller than its header");
	start = ((uintptr_t)v.mv_data - VALUE_PAD) / psize * psize;
	end = ((uintptr_t)v.mv_data + v.mv_size + psize - 1) / psize * psize;
	if (end - start > PREFETCH_MAX) /* a jumbo chunk, or a damaged size */
		end = start + PREFETCH_MAX;
	(void)madvise((void *)start, end - start, MADV_WILLNEED);
out:
	return rc;
}

int heap_chunk_verify(heap_txn *t, uint64_t id)
{
	MDB_val v;
	chdr c;
	const char *problem;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if ((rc = lookup(t, id, &v, &c)) != 0)
		return rc;
	problem = check_all(&v, &c);
	return problem ? CORRUPT(problem) : 0;
}

int heap_chunk_free(heap_txn *t, uint64_t id)
{
	MDB_val k = { sizeof id, &id }, v;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	rc = heap_trees_usable(t->h, CHUNKS | FREE);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v)));
	if (rc == 0) /* the free list grows by one u64 per freed page */
		rc = heap_space_need(t, v.mv_size / t->h->psize / 500 + 1);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_del(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k,
		                      NULL)));
	return heap_txn_fail(t, rc);
}

int heap_chunk_next(heap_txn *t, uint64_t after, bool first,
                    heap_chunk_info *ci)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t key = after + 1;
	chdr c;
	const char *problem;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (ci == NULL)
		return AH_EINVAL;
	if (!first && after == UINT64_MAX)
		return AH_ENOTFOUND;
	TRY(heap_trees_usable(t->h, CHUNKS));
	TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
	                                  &cur))));
	k.mv_size = sizeof key;
	k.mv_data = &key;
	TRY(heap_err(HEAP_MDB(mdb_cursor_get(cur, &k, &v,
	                                 first ? MDB_FIRST : MDB_SET_RANGE))));
	if (k.mv_size != sizeof key) {
		rc = CORRUPT("chunk key is not a u64");
		goto out;
	}
	memcpy(&key, k.mv_data, sizeof key);
	if (!first && key <= after) { /* a damaged tree went back */
		rc = CORRUPT("chunk keys out of order");
		goto out;
	}
	if ((problem = parse(t->h, key, &v, &c)) != NULL) {
		rc = CORRUPT(problem);
		goto out;
	}
	ci->id = key;
	ci->class_pages = c.class_pages;
	ci->body_used = c.body_used;
	ci->format = (uint32_t)c.format;
	TRY(file_offset(t->h, &v, &ci->file_offset));
	ci->xxh3 = c.xxh3;
	ci->block_bytes = block_bytes(&c);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}

int heap_chunk_put_raw(heap_txn *t, uint64_t id, const void *value,
                       size_t len, bool checksums)
{
	MDB_val k = { sizeof id, &id }, v = { len, (void *)value };
	const char *problem;
	uint64_t off = 0;
	chdr c;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (value == NULL || id == 0 || (uintptr_t)value % 16 != 0)
		return AH_EINVAL;
	/* Checked before anything changes: a bad value poisons nothing. */
	if ((problem = parse(t->h, id, &v, &c)) != NULL ||
	    (checksums && (problem = check_all(&v, &c)) != NULL))
		return CORRUPT(problem);
	TRY(heap_trees_usable(t->h, CHUNKS | FREE));
	TRY(heap_space_need(t, (len + VALUE_PAD) / t->h->psize));
	v.mv_data = NULL;
	rc = HEAP_MDB(mdb_put(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v,
	                      MDB_RESERVE | MDB_NOOVERWRITE));
	if (rc == MDB_KEYEXIST) {
		rc = AH_EEXIST; /* nothing changed */
		goto out;
	}
	TRY(heap_err(rc));
	heap_fault_order();
	/* Written like a sealed buffered chunk: one pwrite to its place,
	 * not a page fault per fresh map page. */
	if (writemap(t->h) && file_offset(t->h, &v, &off) == 0) {
		uint64_t save_size = t->wb_size, save_off = t->wb_off;

		t->wb_size = len;
		t->wb_off = off;
		rc = write_value(t, value);
		t->wb_size = save_size;
		t->wb_off = save_off;
	} else {
		memcpy(v.mv_data, value, len);
	}
	if (rc == 0 && t->next_id != 0 && id >= t->next_id)
		t->next_id = id + 1;
out:
	return rc == AH_EEXIST ? rc : heap_txn_fail(t, rc);
}
