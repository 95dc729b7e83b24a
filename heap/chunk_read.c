/*
 * heap/chunk_read.c - reading chunks (layout at the top of chunk.c,
 * shared helpers in chunk_int.h): open (checked whole, or block by block
 * as a seek touches them), the location word that skips LMDB's get for a
 * chunk a read txn found before, the touch of a block, get, prefetch, and
 * the verified cache of the blocks a handle's readers checked.
 *
 * It must never hand out a byte of a block before that block's checksum
 * passed (or the caller said it checks what it reads, HEAP_CHUNK_SELF),
 * and never trust a remembered place it did not parse again.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "heap/chunk_int.h"
#include "heap/fault.h"

#define PREFETCH_MAX (8u << 20) /* bytes one heap_chunk_prefetch asks for */

/* ---------------------------------------------------- the verified cache */

/* Pages of regular chunks that a PAGES-mode reader of this heap handle
 * checked, per (chunk id, xxh3): an open-addressing table of at most
 * VC_MAX entries (then it starts over), behind its own mutex (readers of
 * any thread).  An entry for an id with another xxh3 is a chunk whose id
 * was reused: it is replaced. */
#define VC_MAX (1u << 20)
/* The first table: 16 entries (2.3 KiB), so a fresh handle's first
 * queries touch one fresh page, not a 144 KiB calloc's (each a read fault,
 * then a write fault, on this VM ~3 us apiece), nor a 9 KiB one's (a
 * jemalloc size class of one region a slab: a fresh process filling its
 * thread cache made five slabs); it doubles at 70%. */
#define VC_FIRST 16u

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

/* chunk_lookup() through *loc: where a read txn found the chunk before, read
 * without LMDB's get; else the get, remembered in *loc (and the map's
 * base in the handle).  Why a remembered place is right: heap.h. */
static int lookup_at(heap_txn *t, uint64_t id, uint64_t *loc, MDB_val *v,
                     chdr *c)
{
	heap *h = t->h;
	int rc;

	if (loc == NULL || !t->rdonly)
		return chunk_lookup(t, id, v, c);
	uint64_t l = __atomic_load_n(loc, __ATOMIC_RELAXED);
	const uint8_t *base = __atomic_load_n(&h->map_base, __ATOMIC_ACQUIRE);
	uint64_t pg = l >> LOC_BITS, pages = l & ((1u << LOC_BITS) - 1);
	if (l != 0 && base != NULL && pages != 0 &&
	    pg < h->map_bytes / h->psize &&
	    pages <= h->map_bytes / h->psize - pg &&
	    heap_trees_usable(h, CHUNKS) == 0) {
		v->mv_data = (void *)(base + pg * h->psize + VALUE_PAD);
		v->mv_size = pages * h->psize - VALUE_PAD;
		if (chunk_parse(h, id, v, c) == NULL &&
		    chunk_page_check(t, id, v, false) == NULL)
			return 0;
		/* not what was remembered: from LMDB, as without a hint */
	}
	if ((rc = chunk_lookup(t, id, v, c)) != 0)
		return rc;
	uint64_t off = 0;
	if (chunk_file_offset(h, v, &off) == 0) {
		pg = (off - VALUE_PAD) / h->psize;
		pages = (v->mv_size + VALUE_PAD) / h->psize;
		const uint8_t *b = (const uint8_t *)v->mv_data - off;
		const uint8_t *known = __atomic_load_n(&h->map_base,
		                                       __ATOMIC_ACQUIRE);
		/* The base comes from the page's own number: taken only when
		 * it puts LMDB's metas at the start (a page number left by a
		 * misdirected write would put every remembered place out of
		 * the map); once known, chunk_lookup checked the number. */
		if (pages < (1u << LOC_BITS) && pg < (UINT64_MAX >> LOC_BITS) &&
		    (known != NULL ? known == b : chunk_map_base_ok(t, b))) {
			if (known == NULL)
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
		if ((problem = chunk_check_all(&v, &c)) != NULL)
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
	 * HEAP_CHUNK_MAX_BLOCKS blocks (chunk_parse). */
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
	TRY(heap_wb_settle(t, id));
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
