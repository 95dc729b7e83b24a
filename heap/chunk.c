/*
 * heap/chunk.c - chunks: checksummed byte blocks of fixed size classes,
 * stored as LMDB values in the "chunks" DB (MDB_INTEGERKEY, key u64 id) and
 * filled in place in the map (MDB_RESERVE + MDB_WRITEMAP).
 *
 * This file: the size classes, the header's parse and checks, and the
 * reads of the chunks DB that check (verify, next).  The write path
 * (reserve, seal, images, put_raw, free) is chunk_write.c; open, touch,
 * get, prefetch and the verified cache are chunk_read.c; what the three
 * share (the header's struct, the block sums) is chunk_int.h.
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
 * cache, chunk_read.c), keyed by (id, xxh3), so a process pays for each
 * page of a seek's path once, not once per query; whole checks (walks,
 * merges) are never skipped.
 *
 * Everything read back is untrusted: a header that disagrees with the
 * LMDB value holding it, or a checksum that does not match, is
 * AH_ECORRUPT.  Never trust a byte of a page before its checksum passed.
 */
#include <string.h>
#include <sys/mman.h>

#include "heap/chunk_int.h"
#include "heap/codec.h"
#include "heap/fault.h"

const uint32_t heap_class_pages[HEAP_NCLASSES] = { 1, 4, 16, 64, 256 };

#define MAX_VALUE 0xFFFFFFFFull
#define HDR1 32u  /* format 1 header */
static const char magic1[4] = { 'A', 'H', 'C', 'K' };

uint64_t heap_chunk_body_at(const heap *h, uint64_t value_bytes)
{
	return body_off(nblocks_of(h, (value_bytes + VALUE_PAD) / h->psize));
}

static uint64_t cap_of(const heap *h, uint64_t pages)
{
	return pages * h->psize - VALUE_PAD - body_off(nblocks_of(h, pages));
}

/* Pages for a body of want bytes; 0 when over LMDB's largest value. */
uint64_t chunk_pages_for(const heap *h, uint64_t want)
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
	uint64_t pages = chunk_pages_for(h, want);

	return pages ? (size_t)cap_of(h, pages) : 0;
}

size_t heap_chunk_stored(const heap *h, size_t want)
{
	uint64_t pages = chunk_pages_for(h, want);

	return pages ? (size_t)(pages * h->psize - VALUE_PAD) : 0;
}

/* Decodes and checks a chunk header against its key and LMDB value; the
 * problem as static text, or NULL.  Only header fields are trusted after
 * this, and only as far as their checksum has been checked (see
 * heap_chunk_open). */
const char *chunk_parse(const heap *h, uint64_t id, const MDB_val *v,
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

/* Every checksum of the chunk: the xxh3 and, in format 2, sum0 and each
 * block's.  The problem, or NULL. */
const char *chunk_check_all(const MDB_val *v, const chdr *c)
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
	const char *problem = chunk_parse(h, id, v, &c);

	if (ci != NULL) {
		ci->id = id;
		ci->class_pages = c.class_pages;
		ci->body_used = c.body_used;
		ci->xxh3 = c.xxh3;
		ci->format = (uint32_t)c.format;
		ci->block_bytes = block_bytes(&c);
	}
	if (problem == NULL && checksums)
		problem = chunk_check_all(v, &c);
	return problem;
}

/* LMDB's page flags (mdb.c; heap/pagecheck_int.h has the same). */
#define OV_P_OVERFLOW 0x04u
#define OV_P_META 0x08u
#define OV_P_DIRTY 0x10u
#define OV_MAGIC 0xBEEFC0DEu
#define OV_META_TXNID 144u /* MDB_meta.mm_txnid, from the page's start */

bool chunk_map_base_ok(heap_txn *t, const uint8_t *b)
{
	const heap *h = t->h;
	unsigned char vec[2];
	/* the txnid of the commit t sees: a read txn's own id, a write
	 * txn's id less one (mdb_txn_id) */
	uint64_t seen = (uint64_t)mdb_txn_id(t->txn) - (t->rdonly ? 0 : 1);

	if (b == NULL || (uintptr_t)b % h->psize != 0 ||
	    mincore((void *)(uintptr_t)b, 2 * (size_t)h->psize, vec) != 0)
		return false; /* not the start of a mapping of two pages */
	for (uint64_t i = 0; i < 2; i++) {
		const uint8_t *m = b + i * h->psize;
		if (get_u64(m) != i || get_u16(m + 10) != OV_P_META ||
		    get_u32(m + VALUE_PAD) != OV_MAGIC)
			return false;
	}
	/* Pages that only look like LMDB's metas (a stored value may hold
	 * some) would also need the commit t sees, in the meta page LMDB
	 * writes it to (txnid & 1): only the map's own metas have it now. */
	return get_u64(b + (seen & 1) * h->psize + OV_META_TXNID) == seen;
}

const char *chunk_page_check(heap_txn *t, uint64_t id, const MDB_val *v,
                             bool strict)
{
	heap *h = t->h;
	const uint8_t *pg = (const uint8_t *)v->mv_data - VALUE_PAD;
	uint16_t flags = get_u16(pg + 10);
	uint64_t need = (v->mv_size + VALUE_PAD + h->psize - 1) / h->psize;
	const uint8_t *base = __atomic_load_n(&h->map_base, __ATOMIC_ACQUIRE);

	if ((flags & ~OV_P_DIRTY) != OV_P_OVERFLOW || get_u32(pg + 12) != need)
		return "chunk's LMDB page header: flags or page count";
	/* LMDB sets P_DIRTY on the pages of a write txn and clears it at
	 * commit: on a chunk this txn did not store it is the header of a
	 * write that never committed, left in place by a later write the
	 * storage lost (mdb_ovpage_free would assert on it). */
	if ((flags & OV_P_DIRTY) && (t->rdonly || id < t->new_lo))
		return "chunk's LMDB page header: dirty flag of a write that "
		       "never committed (a lost write)";
	if (base == NULL && strict) {
		uint64_t pgno = get_u64(pg);
		const uint8_t *b = pgno < h->map_bytes / h->psize &&
		                   (uintptr_t)pg >= pgno * h->psize
		                   ? pg - pgno * h->psize : NULL;
		if (chunk_map_base_ok(t, b)) {
			__atomic_store_n(&h->map_base, b, __ATOMIC_RELEASE);
			return NULL;
		}
		/* A read txn of an older commit cannot prove a base (a newer
		 * commit rewrote its meta page): the number goes unchecked
		 * here; a write txn sees the newest commit, so a free always
		 * proves it. */
		return t->rdonly ? NULL
		       : "chunk's LMDB page header: page number is not its place";
	}
	if (base != NULL &&
	    (pg < base || (uint64_t)(pg - base) >= h->map_bytes ||
	     get_u64(pg) != (uint64_t)(pg - base) / h->psize))
		return "chunk's LMDB page header: page number is not its place";
	return NULL;
}

int chunk_lookup(heap_txn *t, uint64_t id, MDB_val *v, chdr *c)
{
	MDB_val k = { sizeof id, &id };
	int rc = heap_trees_usable(t->h, CHUNKS);
	const char *problem;

	if (rc == 0) /* its bytes in the file before anything reads them */
		rc = heap_wb_settle(t, id);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, v)));

	if (rc != 0)
		return rc;
	if ((problem = chunk_page_check(t, id, v, false)) != NULL ||
	    (problem = chunk_parse(t->h, id, v, c)) != NULL)
		return CORRUPT(problem);
	return 0;
}

/* mdb_env_info's me_mapaddr is only the MDB_FIXEDMAP address, so the file
 * offset comes from the page itself: a chunk is an overflow value starting
 * right after its first page's 16-byte header, whose first field is the
 * page number (LMDB's MDB_page.mp_pgno). */
int chunk_file_offset(const heap *h, const MDB_val *v, uint64_t *off)
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

int heap_chunk_verify(heap_txn *t, uint64_t id)
{
	MDB_val v;
	chdr c;
	const char *problem;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if ((rc = chunk_lookup(t, id, &v, &c)) != 0)
		return rc;
	problem = chunk_check_all(&v, &c);
	return problem ? CORRUPT(problem) : 0;
}

int heap_chunk_sum(heap_txn *t, uint64_t id, uint64_t *sum)
{
	MDB_val v;
	chdr c;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (sum == NULL)
		return AH_EINVAL;
	if ((rc = chunk_lookup(t, id, &v, &c)) != 0)
		return rc;
	*sum = c.xxh3;
	return 0;
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
	TRY(heap_wb_settle(t, 0));
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
	/* the file offset below comes from LMDB's page header: checked
	 * (strict: the base learned where unknown) */
	if ((problem = chunk_parse(t->h, key, &v, &c)) != NULL ||
	    (problem = chunk_page_check(t, key, &v, true)) != NULL) {
		rc = CORRUPT(problem);
		goto out;
	}
	ci->id = key;
	ci->class_pages = c.class_pages;
	ci->body_used = c.body_used;
	ci->format = (uint32_t)c.format;
	TRY(chunk_file_offset(t->h, &v, &ci->file_offset));
	ci->xxh3 = c.xxh3;
	ci->block_bytes = block_bytes(&c);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}
