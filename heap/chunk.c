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
 * Chunk header (HEAP_CHUNK_HDR = 32 bytes, native byte order), then the
 * body (16-byte aligned), then zeroes up to the end of the value:
 *
 *   off  size  field
 *     0     8  xxh3        XXH3_64bits of bytes [8, value size): the rest of
 *                          the header, the body and the zeroed tail
 *     8     4  magic       "AHCK"
 *    12     4  class_pages pages of the value; must match its LMDB size
 *    16     8  id          the chunk's own key
 *    24     8  body_used   body bytes in use, <= value size - 32
 *
 * Everything read back is untrusted: a header that disagrees with the
 * LMDB value holding it is AH_ECORRUPT.  The format version of this layout
 * is HEAP_FORMAT_VERSION (in the heap's meta record).
 */
#include <string.h>
#include <sys/mman.h>

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
/* Trees a call hands to LMDB: never one a page check found damaged. */
#define CHUNKS HEAP_TREE_BIT(HEAP_TREE_CHUNKS)
#define FREE HEAP_TREE_BIT(HEAP_TREE_FREE)
static const char chunk_magic[4] = { 'A', 'H', 'C', 'K' };

struct hdr {
	uint64_t xxh3;
	char magic[4];
	uint32_t class_pages;
	uint64_t id;
	uint64_t body_used;
};
_Static_assert(sizeof(struct hdr) == HEAP_CHUNK_HDR, "chunk header size");

static uint64_t cap_of(const heap *h, uint64_t pages)
{
	return pages * h->psize - VALUE_PAD - HEAP_CHUNK_HDR;
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
	pages = (want + VALUE_PAD + HEAP_CHUNK_HDR + unit - 1) / unit * LARGEST;
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

static bool valid_class(uint64_t pages)
{
	for (int i = 0; i < HEAP_NCLASSES; i++)
		if (pages == heap_class_pages[i])
			return true;
	return pages > LARGEST && pages % LARGEST == 0;
}

/* Checks a chunk value against its key and LMDB size. */
static int check(const heap *h, uint64_t id, const MDB_val *v)
{
	struct hdr hd;
	uint64_t pages;

	if ((v->mv_size + VALUE_PAD) % h->psize != 0 ||
	    v->mv_size < (size_t)h->psize - VALUE_PAD)
		return HEAP_CORRUPT("chunk value size is not a whole class");
	if ((uintptr_t)v->mv_data % 16 != 0)
		return HEAP_CORRUPT("chunk not 16-byte aligned");
	pages = (v->mv_size + VALUE_PAD) / h->psize;
	memcpy(&hd, v->mv_data, sizeof hd);
	if (memcmp(hd.magic, chunk_magic, 4) != 0)
		return HEAP_CORRUPT("chunk magic");
	if (!valid_class(pages) || hd.class_pages != pages)
		return HEAP_CORRUPT("chunk class does not match its size");
	if (hd.id != id)
		return HEAP_CORRUPT("chunk id does not match its key");
	if (hd.body_used > v->mv_size - HEAP_CHUNK_HDR)
		return HEAP_CORRUPT("chunk body_used beyond capacity");
	return 0;
}

static uint64_t checksum(const MDB_val *v)
{
	return XXH3_64bits((const char *)v->mv_data + 8, v->mv_size - 8);
}

static int lookup(heap_txn *t, uint64_t id, MDB_val *v)
{
	MDB_val k = { sizeof id, &id };
	int rc = heap_trees_usable(t->h, CHUNKS);

	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, v)));

	return rc ? rc : check(t->h, id, v);
}

static int next_id(heap_txn *t)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t last = 0;
	int rc;

	HEAP_TRY(heap_trees_usable(t->h, CHUNKS));
	HEAP_TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
	                                  &cur))));
	rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_LAST));
	if (rc == 0 && k.mv_size != sizeof last)
		rc = HEAP_CORRUPT("chunk key is not a u64");
	else if (rc == 0)
		memcpy(&last, k.mv_data, sizeof last);
	else if (rc == MDB_NOTFOUND)
		rc = 0;
	HEAP_TRY(heap_err(rc));
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
	struct hdr hd = { 0 };
	MDB_val k, v;
	uint64_t pages, nid;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (id == NULL || body == NULL)
		return AH_EINVAL;
	if ((pages = pages_for(t->h, body_bytes)) == 0)
		return AH_ELIMIT;
	HEAP_TRY(heap_trees_usable(t->h, CHUNKS | FREE));
	if (t->next_id == 0)
		HEAP_TRY(next_id(t));
	HEAP_TRY(heap_space_need(t, pages));
	nid = t->next_id;
	k.mv_size = sizeof nid;
	k.mv_data = &nid;
	v.mv_size = pages * t->h->psize - VALUE_PAD;
	v.mv_data = NULL;
	HEAP_TRY(heap_err(HEAP_MDB(mdb_put(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v,
	                          MDB_RESERVE | MDB_APPEND))));
	heap_fault_order();
	if ((uintptr_t)v.mv_data % 16 != 0) {
		rc = HEAP_CORRUPT("reserved chunk not 16-byte aligned");
		goto out;
	}
	memcpy(hd.magic, chunk_magic, 4);
	hd.class_pages = (uint32_t)pages;
	hd.id = nid;
	memcpy(v.mv_data, &hd, sizeof hd);
	t->next_id++;
	*id = nid;
	*body = (char *)v.mv_data + HEAP_CHUNK_HDR;
	if (body_cap != NULL)
		*body_cap = v.mv_size - HEAP_CHUNK_HDR;
out:
	return heap_txn_fail(t, rc);
}

int heap_chunk_seal(heap_txn *t, uint64_t id, void *body, size_t body_used)
{
	MDB_val v;
	char *p, *end;
	uint64_t sum;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	HEAP_TRY(lookup(t, id, &v));
	if (body != (char *)v.mv_data + HEAP_CHUNK_HDR ||
	    body_used > v.mv_size - HEAP_CHUNK_HDR)
		return AH_EINVAL;
	memcpy((char *)v.mv_data + offsetof(struct hdr, body_used), &body_used,
	       sizeof(uint64_t));
	/* Fresh map pages fill fastest in pieces (see background notes). */
	end = (char *)v.mv_data + v.mv_size;
	for (p = (char *)body + body_used; p < end; p += PIECE)
		memset(p, 0, (size_t)(end - p) < PIECE ? (size_t)(end - p)
		                                       : PIECE);
	sum = checksum(&v);
	memcpy(v.mv_data, &sum, sizeof sum);
out:
	return heap_txn_fail(t, rc);
}

int heap_chunk_get(heap_txn *t, uint64_t id, const void **body,
                   size_t *body_used)
{
	MDB_val v;
	struct hdr hd;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (body == NULL)
		return AH_EINVAL;
	if ((rc = lookup(t, id, &v)) != 0)
		return rc;
	memcpy(&hd, v.mv_data, sizeof hd);
	if (heap_verify_reads(t->h) && hd.xxh3 != checksum(&v))
		return HEAP_CORRUPT("chunk checksum");
	*body = (const char *)v.mv_data + HEAP_CHUNK_HDR;
	if (body_used != NULL)
		*body_used = hd.body_used;
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
	HEAP_TRY(heap_trees_usable(t->h, CHUNKS));
	HEAP_TRY(heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k,
	                                   &v))));
	psize = t->h->psize;
	if (v.mv_size < HEAP_CHUNK_HDR)
		return HEAP_CORRUPT("chunk smaller than its header");
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
	uint64_t stored;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if ((rc = lookup(t, id, &v)) != 0)
		return rc;
	memcpy(&stored, v.mv_data, sizeof stored);
	return stored == checksum(&v) ? 0 : HEAP_CORRUPT("chunk checksum");
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
		return HEAP_CORRUPT("chunk page header");
	*off = pgno * h->psize + VALUE_PAD;
	return 0;
}

int heap_chunk_next(heap_txn *t, uint64_t after, bool first,
                    heap_chunk_info *ci)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t key = after + 1;
	struct hdr hd;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (ci == NULL)
		return AH_EINVAL;
	if (!first && after == UINT64_MAX)
		return AH_ENOTFOUND;
	HEAP_TRY(heap_trees_usable(t->h, CHUNKS));
	HEAP_TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
	                                  &cur))));
	k.mv_size = sizeof key;
	k.mv_data = &key;
	HEAP_TRY(heap_err(HEAP_MDB(mdb_cursor_get(cur, &k, &v,
	                                 first ? MDB_FIRST : MDB_SET_RANGE))));
	if (k.mv_size != sizeof key) {
		rc = HEAP_CORRUPT("chunk key is not a u64");
		goto out;
	}
	memcpy(&key, k.mv_data, sizeof key);
	if (!first && key <= after) { /* a damaged tree went back */
		rc = HEAP_CORRUPT("chunk keys out of order");
		goto out;
	}
	HEAP_TRY(check(t->h, key, &v));
	memcpy(&hd, v.mv_data, sizeof hd);
	ci->id = key;
	ci->class_pages = hd.class_pages;
	ci->body_used = hd.body_used;
	HEAP_TRY(file_offset(t->h, &v, &ci->file_offset));
	ci->xxh3 = hd.xxh3;
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}
