/*
 * arrangement/merge_par.c - a large unfueled merge on two cores (issue
 * 13, item 3): `ah_maintain(0)`'s merge of all batches, and any fresh
 * merge run to its end, split into key ranges that the writing thread and
 * a helper thread merge at the same time.
 *
 * The split keys are fences of the inputs' chunks, sorted (any byte
 * strings would do: range i holds the keys in [S_i, S_i+1)), about one
 * range per PAR_RANGE bytes of input.  The writing thread merges the even ranges
 * with mergers of its write txn into one writer W; the helper merges the
 * odd ones, each in a read txn of its own, with a range writer whose
 * chunks are images in memory (as the merge thread's slices, §6).  After
 * its range 2j the writing thread waits for range 2j+1 and appends it to
 * W (batch_writer_absorb: the images stored under ids of the write txn,
 * their fences, key hashes and counts added), then the helper goes on to
 * range 2j+3.  So the output is one batch with the same updates, keys and
 * filter as the merge on one thread; only the chunk boundaries differ
 * (each range starts a chunk).  Memory: one range of images (at most
 * about PAR_RANGE bytes) besides the writer's staging.
 *
 * The helper reads only committed batches: it loads the inputs by id in
 * its own snapshot, and when one is missing there (an input written by
 * this txn) or anything of its fails, the writing thread merges the
 * ranges the helper did not deliver itself.  Nothing is written to the
 * heap but by the writing thread, in its txn; a kill at any moment leaves
 * the last commit (the helper's work is memory only).
 *
 * It never lets the helper outlive the call, and never absorbs a range
 * out of order.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "arrangement/merge.h"

/* Input bytes per range, and the least input worth a second thread
 * (merge_par_tune changes them for tests). */
#define PAR_RANGE ((uint64_t)24 << 20)
#define PAR_MIN ((uint64_t)64 << 20)
static uint64_t par_range = PAR_RANGE, par_min = PAR_MIN; /* atomics */
static uint64_t par_merges, par_helped; /* atomics: merge_par_counts */

void merge_par_counts(uint64_t *merges, uint64_t *helped)
{
	*merges = __atomic_load_n(&par_merges, __ATOMIC_RELAXED);
	*helped = __atomic_load_n(&par_helped, __ATOMIC_RELAXED);
}

uint64_t merge_par_min(void)
{
	return __atomic_load_n(&par_min, __ATOMIC_RELAXED);
}

void merge_par_tune(uint64_t min_bytes, uint64_t range_bytes)
{
	__atomic_store_n(&par_min, min_bytes ? min_bytes : PAR_MIN,
	                 __ATOMIC_RELAXED);
	__atomic_store_n(&par_range, range_bytes ? range_bytes : PAR_RANGE,
	                 __ATOMIC_RELAXED);
}
#define PAR_MAX_RANGES 4096u
/* Units between the helper's looks at the stop flag. */
#define PAR_STEP ((uint64_t)1 << 18)

typedef struct par {
	heap *h;
	const uint64_t *ids;   /* the inputs' batch ids */
	size_t n;
	frontier since;
	const uint8_t **key;   /* split keys: key[i] starts range i (i >= 1) */
	size_t *klen;
	uint32_t nr;           /* ranges */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu */
	uint32_t ready;        /* ranges delivered: 1 + 2j for the last */
	uint32_t taken;        /* odd ranges the writing thread absorbed */
	batch_writer *out;     /* the delivered range's sealed writer */
	bool failed, stop;
	uint64_t units;        /* units the helper spent */
} par;

static void split_bounds(const par *q, uint32_t r, const void **lo,
                         size_t *lol, const void **hi, size_t *hil)
{
	*lo = r ? q->key[r] : NULL;
	*lol = r ? q->klen[r] : 0;
	*hi = r + 1 < q->nr ? q->key[r + 1] : NULL;
	*hil = r + 1 < q->nr ? q->klen[r + 1] : 0;
}

static bool stopped(par *q)
{
	pthread_mutex_lock(&q->mu);
	bool s = q->stop;
	pthread_mutex_unlock(&q->mu);
	return s;
}

/* The helper: ranges 1, 3, 5, ... into range writers, each handed over
 * sealed and freed once absorbed. */
static void *helper(void *arg)
{
	par *q = arg;
	heap_txn *rt = NULL;
	pool *p = NULL;
	batch **in = calloc(q->n, sizeof *in);
	int rc = in ? 0 : AH_ENOMEM;

	if (rc == 0)
		rc = pool_create(&p);
	if (rc == 0)
		rc = heap_txn_begin(q->h, true, &rt);
	for (size_t i = 0; i < q->n && rc == 0; i++)
		rc = batch_load(rt, q->ids[i], &in[i]); /* ENOTFOUND: this txn's */
	for (uint32_t r = 1; r < q->nr && rc == 0 && !stopped(q); r += 2) {
		const void *lo, *hi;
		size_t lol, hil;
		merger *m = NULL;
		batch_writer *w = NULL;
		bool done = false;
		uint64_t spent, units = 0;

		split_bounds(q, r, &lo, &lol, &hi, &hil);
		rc = batch_writer_new_range(rt, p, &w);
		if (rc == 0)
			rc = merger_open_range(rt, p, in, q->n, q->since, lo, lol,
			                       hi, hil, w, &m);
		while (rc == 0 && !done && !stopped(q)) {
			rc = merger_step(m, PAR_STEP, &done, &spent);
			units += spent;
		}
		merger_free(m);
		if (rc == 0 && done)
			rc = batch_writer_seal_staged(w);
		pthread_mutex_lock(&q->mu);
		if (rc == 0 && done && !q->stop) {
			q->out = w;
			q->ready = r;
			q->units += units;
			pthread_cond_broadcast(&q->cv);
			while (q->taken < (r + 1) / 2 && !q->stop)
				pthread_cond_wait(&q->cv, &q->mu);
		} else if (rc == 0) {
			rc = AH_ESTATE; /* stopped */
		}
		q->out = NULL;
		pthread_mutex_unlock(&q->mu);
		if (w)
			batch_writer_free(w);
		pool_reset(p);
	}
	for (size_t i = 0; in && i < q->n; i++)
		if (in[i])
			batch_free(in[i]);
	free(in);
	if (rt)
		heap_txn_abort(rt);
	if (p)
		pool_destroy(p);
	pthread_mutex_lock(&q->mu);
	if (rc != 0)
		q->failed = true;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

/* Merges range r of the inputs into w in t; adds its units to *units. */
static int merge_range(heap_txn *t, pool *p, batch *const *in, par *q,
                       uint32_t r, batch_writer *w, uint64_t *units)
{
	const void *lo, *hi;
	size_t lol, hil;
	merger *m = NULL;
	bool done = false;
	uint64_t spent = 0;
	int rc;

	split_bounds(q, r, &lo, &lol, &hi, &hil);
	rc = merger_open_range(t, p, in, q->n, q->since, lo, lol, hi, hil, w, &m);
	if (rc == 0)
		rc = merger_step(m, 0, &done, &spent);
	if (rc == 0 && !done)
		rc = AH_ECORRUPT; /* an unfueled step ends its range */
	*units += spent;
	merger_release_writer(m);
	merger_free(m);
	return rc;
}

/* Range r (odd) from the helper into w, or false (*got) when the helper
 * will not deliver it. */
static int take_range(par *q, uint32_t r, batch_writer *w, bool *got)
{
	int rc = 0;

	pthread_mutex_lock(&q->mu);
	while (q->ready < r && !q->failed)
		pthread_cond_wait(&q->cv, &q->mu);
	*got = q->ready == r && q->out != NULL;
	if (*got) {
		rc = batch_writer_absorb(w, q->out);
		__atomic_add_fetch(&par_helped, 1, __ATOMIC_RELAXED);
	}
	q->taken = (r + 1) / 2;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return rc;
}

/* Split keys: fences of the inputs' chunks (each chunk's first key, or a
 * prefix of it), sorted, about one per range, strictly increasing.  The
 * sort of pointers: qsort's comparator sees the fences through this. */
typedef struct fence_ref {
	const uint8_t *k;
	size_t kl;
} fence_ref;

static int fence_cmp(const void *a, const void *b)
{
	const fence_ref *x = a, *y = b;

	return bytes_cmp(x->k, x->kl, y->k, y->kl);
}

static uint32_t choose_splits(batch *const *in, size_t n, uint64_t bytes,
                              const uint8_t **key, size_t *klen,
                              uint8_t **copy)
{
	uint64_t per = __atomic_load_n(&par_range, __ATOMIC_RELAXED), nf = 0;
	uint32_t want, nr = 1;
	fence_ref *f;

	for (size_t i = 0; i < n; i++)
		nf += in[i]->nchunks;
	if (nf < 2 || !(f = malloc(nf * sizeof *f)))
		return 1;
	nf = 0;
	for (size_t i = 0; i < n; i++)
		for (uint32_t c = 1; c < in[i]->nchunks; c++)
			if (in[i]->fence_len[c] > 0)
				f[nf++] = (fence_ref){ in[i]->fence[c],
				                       in[i]->fence_len[c] };
	qsort(f, nf, sizeof *f, fence_cmp);
	want = bytes / per + 1 > PAR_MAX_RANGES ? PAR_MAX_RANGES
	                                        : (uint32_t)(bytes / per + 1);
	if (want > nf + 1)
		want = (uint32_t)nf + 1;
	key[0] = NULL;
	klen[0] = 0;
	for (uint32_t r = 1; r < want; r++) {
		const fence_ref *x = &f[(uint64_t)r * nf / want];

		if (nr > 1 && bytes_cmp(x->k, x->kl, key[nr - 1], klen[nr - 1]) <= 0)
			continue;
		key[nr] = x->k;
		klen[nr++] = x->kl;
	}
	free(f);
	/* copies, read by the helper: the fences lie in the write txn's map */
	size_t total = 0;
	for (uint32_t r = 1; r < nr; r++)
		total += klen[r];
	if (!(*copy = malloc(total + 1)))
		return 1;
	total = 0;
	for (uint32_t r = 1; r < nr; r++) {
		memcpy(*copy + total, key[r], klen[r]);
		key[r] = *copy + total;
		total += klen[r];
	}
	return nr;
}

int merge_parallel(heap_txn *t, pool *p, batch *const *in, size_t n,
                   frontier since, batch_writer **out, uint64_t *units,
                   bool *ran)
{
	uint64_t bytes = 0, *ids = NULL;
	const uint8_t **key = NULL;
	uint8_t *kcopy = NULL;
	size_t *klen = NULL;
	batch_writer *w = NULL;
	pthread_t th;
	bool started = false;
	par q;
	int rc = 0;

	*ran = false;
	*out = NULL;
	*units = 0;
	for (size_t i = 0; i < n; i++)
		bytes += in[i]->chunk_bytes;
	if (n < 2 || bytes < __atomic_load_n(&par_min, __ATOMIC_RELAXED) ||
	    heap_txn_rdonly(t))
		return 0;
	memset(&q, 0, sizeof q);
	key = calloc(PAR_MAX_RANGES, sizeof *key);
	klen = calloc(PAR_MAX_RANGES, sizeof *klen);
	ids = calloc(n, sizeof *ids);
	if (!key || !klen || !ids)
		goto out; /* not run: the merge goes on alone */
	q.nr = choose_splits(in, n, bytes, key, klen, &kcopy);
	if (q.nr < 2)
		goto out;
	for (size_t i = 0; i < n; i++)
		ids[i] = in[i]->id;
	q.h = heap_txn_heap(t);
	q.ids = ids;
	q.n = n;
	q.since = since;
	q.key = key;
	q.klen = klen;
	if (pthread_mutex_init(&q.mu, NULL) != 0)
		goto out;
	if (pthread_cond_init(&q.cv, NULL) != 0) {
		pthread_mutex_destroy(&q.mu);
		goto out;
	}
	if ((rc = batch_writer_new(t, p, &w)))
		goto done;
	started = heap_thread_start(&th, helper, &q); /* no signals */
	if (!started)
		q.failed = true;
	*ran = true;
	__atomic_add_fetch(&par_merges, 1, __ATOMIC_RELAXED);
	for (uint32_t r = 0; r < q.nr && rc == 0; r++) {
		bool got = false;

		if (r % 2 == 1 && (rc = take_range(&q, r, w, &got)))
			break;
		if (!got)
			rc = merge_range(t, p, in, &q, r, w, units);
	}
done:
	if (started) {
		pthread_mutex_lock(&q.mu);
		q.stop = true;
		pthread_cond_broadcast(&q.cv);
		pthread_mutex_unlock(&q.mu);
		pthread_join(th, NULL);
		*units += q.units;
	}
	pthread_cond_destroy(&q.cv);
	pthread_mutex_destroy(&q.mu);
	if (rc == 0 && *ran) {
		*out = w;
		w = NULL;
	}
	if (w)
		batch_writer_free(w);
out:
	free(key);
	free(kcopy);
	free(klen);
	free(ids);
	return rc;
}
