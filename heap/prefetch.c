/*
 * heap/prefetch.c - batched read-ahead for cold point reads, and the
 * per-handle decision of when to do it (contract: heap.h, "batched
 * read-ahead"; the read pattern it serves: ARCHITECTURE.md section 7,
 * "Cold point reads").
 *
 * The map is opened with MDB_NORDAHEAD (MADV_RANDOM), so a touch of a cold
 * page reads that one page, and a seek that touches ten reads ten pages one
 * after another.  A reader that can name its pages first collects them in a
 * heap_prefetch and issues them in one call (MADV_WILLNEED over each range:
 * the kernel starts every read and returns), so the device serves them
 * together and the touches that follow wait for the slowest, not the sum.
 *
 * The decision costs a warm process one relaxed atomic add per seek and a
 * mincore(2) per HEAP_PREFETCH_EVERY seeks (a syscall is 0.4-0.6 us here,
 * a warm point query 18 us): every 16th seek samples one page it is about
 * to read, and a page not in the page cache makes the handle cold.  A cold
 * handle samples every seek (a cold seek waits for reads of ~100 us, so a
 * mincore is nothing to it) and turns warm after HEAP_PREFETCH_WARM_AFTER
 * resident samples in a row: a process whose cache is half warm stays
 * cold, since a warm seek there would wait for its reads one by one.
 *
 * It must never read a chunk byte (the pages may be cold: reading them is
 * what it exists to avoid), never fail a read, and never hand madvise a
 * range outside the chunk value it was asked about.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

#define VALUE_PAD 16u /* a chunk value starts 16 bytes into its page */
/* pidfd of the calling process for process_madvise (Linux 6.13's
 * PIDFD_SELF_THREAD_GROUP): no descriptor to open or to leak. */
#define PIDFD_SELF_PROCESS (-10001)

static void add(heap_prefetch *pf, uintptr_t lo, uintptr_t hi)
{
	uintptr_t ps = pf->t->h->psize;

	lo = lo / ps * ps;
	hi = (hi + ps - 1) / ps * ps;
	if (lo >= hi)
		return;
	for (unsigned i = 0; i < pf->n; i++) /* overlapping or touching */
		if (lo <= pf->hi[i] && pf->lo[i] <= hi) {
			pf->lo[i] = lo < pf->lo[i] ? lo : pf->lo[i];
			pf->hi[i] = hi > pf->hi[i] ? hi : pf->hi[i];
			return;
		}
	if (pf->n < HEAP_PREFETCH_MAX) {
		pf->lo[pf->n] = lo;
		pf->hi[pf->n++] = hi;
	}
}

/* [lo, hi) of a value at v of vbytes bytes, clipped to it. */
static void add_clipped(heap_prefetch *pf, const uint8_t *v, uint64_t vbytes,
                        uint64_t lo, uint64_t hi)
{
	if (lo >= vbytes)
		return;
	add(pf, (uintptr_t)(v + lo), (uintptr_t)(v + (hi < vbytes ? hi : vbytes)));
}

void heap_prefetch_begin(heap_txn *t, heap_prefetch *pf)
{
	pf->t = t;
	pf->n = 0;
}

/* Chunk id's value without a byte of it read: through the remembered place
 * (its bounds checked as heap_chunk_open_at checks them) or LMDB's get,
 * which reads tree pages and computes the value's address. */
static int place(heap_txn *t, uint64_t id, const uint64_t *loc,
                 const uint8_t **v, uint64_t *vbytes)
{
	heap *h = t->h;
	uint64_t l = loc ? __atomic_load_n(loc, __ATOMIC_RELAXED) : 0;
	const uint8_t *base = __atomic_load_n(&h->map_base, __ATOMIC_ACQUIRE);
	uint64_t pg = l >> HEAP_LOC_BITS, pages = l & ((1u << HEAP_LOC_BITS) - 1);
	uint64_t mpages = h->map_bytes / h->psize;
	MDB_val k = { sizeof id, &id }, mv;
	int rc;

	if (l != 0 && base != NULL && pages != 0 && pg < mpages &&
	    pages <= mpages - pg) {
		*v = base + pg * h->psize + VALUE_PAD;
		*vbytes = pages * h->psize - VALUE_PAD;
		return 0;
	}
	if ((rc = heap_trees_usable(h, HEAP_TREE_BIT(HEAP_TREE_CHUNKS))) != 0)
		return rc;
	if ((rc = heap_wb_settle(t, id)) != 0)
		return rc;
	rc = HEAP_MDB(mdb_get(t->txn, h->dbi[HEAP_DBI_CHUNKS], &k, &mv));
	if (rc == MDB_NOTFOUND)
		return AH_ENOTFOUND;
	if ((rc = heap_err(rc)) != 0)
		return rc;
	*v = mv.mv_data;
	*vbytes = mv.mv_size;
	return 0;
}

int heap_chunk_place(heap_txn *t, uint64_t id, uint64_t *loc, bool use_loc,
                     const uint8_t **body, uint64_t *body_bytes)
{
	heap *h = t->h;
	const uint8_t *v, *base;
	uint64_t vb;
	/* as heap_chunk_open_at: no remembered place in a damaged tree */
	int rc = heap_trees_usable(h, HEAP_TREE_BIT(HEAP_TREE_CHUNKS));

	if (rc == 0)
		rc = place(t, id, use_loc ? loc : NULL, &v, &vb);
	if (rc != 0)
		return rc;
	/* LMDB's place remembered, when the map's base is known (else
	 * learning it would read the chunk's first page) */
	base = __atomic_load_n(&h->map_base, __ATOMIC_ACQUIRE);
	if (loc != NULL && t->rdonly && base != NULL &&
	    (!use_loc || __atomic_load_n(loc, __ATOMIC_RELAXED) == 0) &&
	    v >= base + VALUE_PAD && (uint64_t)(v - base) < h->map_bytes) {
		uint64_t pg = (uint64_t)(v - VALUE_PAD - base) / h->psize;
		uint64_t pages = (vb + VALUE_PAD) / h->psize;
		if ((uint64_t)(v - VALUE_PAD - base) % h->psize == 0 &&
		    pages < (1u << HEAP_LOC_BITS) && pg < (UINT64_MAX >> HEAP_LOC_BITS))
			__atomic_store_n(loc, pg << HEAP_LOC_BITS | pages,
			                 __ATOMIC_RELAXED);
	}
	uint64_t off = heap_chunk_body_at(h, vb);
	if (off > vb)
		return CORRUPT("chunk value smaller than its header");
	*body = v + off;
	*body_bytes = vb - off;
	return 0;
}

int heap_prefetch_chunk(heap_prefetch *pf, uint64_t id, const uint64_t *loc,
                        uint64_t off, uint64_t len)
{
	return heap_prefetch_chunk_at(pf, id, loc, off, len, true);
}

int heap_prefetch_chunk_at(heap_prefetch *pf, uint64_t id, const uint64_t *loc,
                           uint64_t off, uint64_t len, bool header)
{
	const uint8_t *v;
	uint64_t vbytes, body;
	int rc;

	if (!pf->t->rdonly)
		return 0;
	if ((rc = place(pf->t, id, loc, &v, &vbytes)) != 0)
		return rc == AH_ENOTFOUND ? 0 : rc;
	body = heap_chunk_body_at(pf->t->h, vbytes);
	/* a remembered place: this handle opened the chunk, so read its
	 * header page, which stays in the page cache while the chunk is used */
	if (header && (loc == NULL || __atomic_load_n(loc, __ATOMIC_RELAXED) == 0))
		add_clipped(pf, v, vbytes, 0, 1);
	if (len != 0 && body < vbytes && off < vbytes - body) {
		uint64_t lo = body + off;
		add_clipped(pf, v, vbytes, lo, len < vbytes - lo ? lo + len : vbytes);
	}
	return 0;
}

/* Has the view checked every block of value bytes [a, z) (so this handle
 * read them: a page it read stays cached in all but memory pressure)? */
static bool seen(const heap_chunk_view *cv, uint64_t a, uint64_t z)
{
	for (uint64_t b = (a + VALUE_PAD) >> cv->bshift;
	     b <= (z - 1 + VALUE_PAD) >> cv->bshift; b++)
		if (b >= HEAP_CHUNK_MAX_BLOCKS || !((cv->seen[b >> 6] >> (b & 63)) & 1))
			return false;
	return true;
}

void heap_prefetch_view(heap_prefetch *pf, const heap_chunk_view *cv,
                        const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p, v = (uintptr_t)cv->value;
	uint64_t ps = pf->t->h->psize;

	if (!pf->t->rdonly || cv->value == NULL || cv->all || a < v ||
	    a - v >= cv->value_bytes)
		return; /* all: checked whole at its open, so just read */
	uint64_t lo = a - v, rest = cv->value_bytes - lo;
	uint64_t hi = lo + (len < rest ? len : rest);
	/* page by page, skipping those this handle has read: value byte o
	 * lies in page (o + 16) / ps of the value */
	while (lo < hi) {
		uint64_t pe = ((lo + VALUE_PAD) / ps + 1) * ps - VALUE_PAD;
		uint64_t z = pe < hi ? pe : hi;

		if (!seen(cv, lo, z))
			add_clipped(pf, cv->value, cv->value_bytes, lo, z);
		lo = z;
	}
}

/* 1: process_madvise takes the calling process; 0: it does not (an older
 * kernel): one madvise per range.  Every thread finds the same. */
static int vectored = -1;

void heap_prefetch_issue(heap_prefetch *pf)
{
	heap *h = pf->t->h;
	struct iovec iov[HEAP_PREFETCH_MAX];
	uint64_t pages = 0;
	unsigned n = pf->n;

	pf->n = 0;
	if (n == 0)
		return;
	for (unsigned i = 0; i < n; i++) {
		iov[i].iov_base = (void *)pf->lo[i];
		iov[i].iov_len = pf->hi[i] - pf->lo[i];
		pages += iov[i].iov_len / h->psize;
	}
	__atomic_add_fetch(&h->pf_issues, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->pf_pages, pages, __ATOMIC_RELAXED);
	if (__atomic_load_n(&vectored, __ATOMIC_RELAXED) != 0) {
		long r = syscall(SYS_process_madvise, PIDFD_SELF_PROCESS, iov,
		                 (size_t)n, MADV_WILLNEED, 0u);
		if (r >= 0 || (errno != EBADF && errno != ENOSYS &&
		               errno != EINVAL && errno != EPERM)) {
			__atomic_store_n(&vectored, 1, __ATOMIC_RELAXED);
			return; /* advisory: a range it refused is only unread */
		}
		__atomic_store_n(&vectored, 0, __ATOMIC_RELAXED);
	}
	for (unsigned i = 0; i < n; i++)
		(void)madvise(iov[i].iov_base, iov[i].iov_len, MADV_WILLNEED);
}

bool heap_prefetch_due(heap *h, bool *sample, bool *first)
{
	uint64_t n = __atomic_fetch_add(&h->pf_seeks, 1, __ATOMIC_RELAXED);
	bool cold = !__atomic_load_n(&h->pf_warm, __ATOMIC_RELAXED);

	*first = n == 0;
	*sample = cold || n % HEAP_PREFETCH_EVERY == 0;
	return cold;
}

bool heap_prefetch_sample(heap *h, const void *p, bool *resident)
{
	uintptr_t ps = h->psize, a = (uintptr_t)p / ps * ps;
	unsigned char vec = 1;
	bool cold;

	/* mincore reads no page; outside any mapping it fails (ENOMEM) */
	if (mincore((void *)a, ps, &vec) != 0)
		vec = 1;
	cold = !(vec & 1);
	if (resident != NULL)
		*resident = !cold;
	__atomic_add_fetch(&h->pf_samples, 1, __ATOMIC_RELAXED);
	if (cold)
		__atomic_add_fetch(&h->pf_cold_samples, 1, __ATOMIC_RELAXED);
	if (cold) {
		__atomic_store_n(&h->pf_warm_run, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&h->pf_warm, false, __ATOMIC_RELAXED);
		return true;
	}
	/* warm again after HEAP_PREFETCH_WARM_AFTER resident samples in a
	 * row: a cold seek waits for a dozen reads, so the costly mistake is
	 * the warm state in a cold process */
	if (__atomic_add_fetch(&h->pf_warm_run, 1, __ATOMIC_RELAXED) >=
	    HEAP_PREFETCH_WARM_AFTER)
		__atomic_store_n(&h->pf_warm, true, __ATOMIC_RELAXED);
	return !__atomic_load_n(&h->pf_warm, __ATOMIC_RELAXED);
}

void heap_prefetch_stat_get(const heap *h, heap_prefetch_stat *st)
{
	st->seeks = __atomic_load_n(&h->pf_seeks, __ATOMIC_RELAXED);
	st->samples = __atomic_load_n(&h->pf_samples, __ATOMIC_RELAXED);
	st->cold_samples = __atomic_load_n(&h->pf_cold_samples, __ATOMIC_RELAXED);
	st->issues = __atomic_load_n(&h->pf_issues, __ATOMIC_RELAXED);
	st->pages = __atomic_load_n(&h->pf_pages, __ATOMIC_RELAXED);
	st->cold = !__atomic_load_n(&h->pf_warm, __ATOMIC_RELAXED);
}
