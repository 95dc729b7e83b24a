/*
 * heap/chunk_writeback.c - the writeback thread: a regular chunk assembled
 * in memory (chunk_write.c) is finished (its zero tail, block sums, sum0
 * and xxh3: chunk_finish) and written to its place in the file (pwrite,
 * then sync_file_range) by a thread of the heap handle, while the writer
 * assembles the next chunk in the other of two buffers.  The writer's
 * thread then only sorts, merges and copies; the hashing and the kernel's
 * copy into the page cache (a quarter of a full merge's time) run on the
 * second core.
 *
 * One job at most is in flight, and only the write txn's own thread posts
 * or waits for one (the handle has one write txn at a time).  The txn
 * remembers the in-flight chunk's id (heap_txn.wb_inflight); every way a
 * write txn reaches a chunk's bytes or pages waits for that chunk first
 * (heap_wb_settle: chunk_lookup, the chunk cursor and scan, prefetch's
 * place, free), and commit and abort wait for any (heap_wb_drain), so that
 * nothing reads a chunk through the map before its bytes are in the page
 * cache, LMDB never reuses or syncs a page a write is still filling, and
 * the next writer finds the thread idle.  A write's error (AH_EIO, AH_EFULL)
 * is kept until the writer collects it (the next post, a settle, the
 * drain); collecting one poisons the txn, so a chunk whose write failed is
 * never committed.
 *
 * Small chunks (under WB_MIN bytes) are written by the writer itself: a
 * hand-off costs two wake-ups, more than a small pwrite.  Without the
 * thread (it failed to start) every chunk is.
 *
 * It must never touch a buffer the thread owns, never let a txn end with a
 * write in flight, and never drop an error.
 */
#include <stdlib.h>

#include "heap/chunk_int.h"

#define WB_MIN ((size_t)64 << 10)

struct heap_wb {
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* a job posted, a job done, stop */
	pthread_t thr;
	bool started, failed, stop;
	uint8_t *buf[2];       /* page-aligned, LARGEST pages each */
	unsigned fill;         /* the buffer the writer assembles in */
	/* the job, under mu */
	bool busy;
	uint8_t *val;
	size_t size;
	uint64_t off;
	chdr c;
	int err;               /* the first error not yet collected */
};

static void *wb_main(void *arg)
{
	heap *h = arg;
	struct heap_wb *w = h->wb;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->busy && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (!w->busy)
			break;
		uint8_t *val = w->val;
		size_t size = w->size;
		uint64_t off = w->off;
		chdr c = w->c;
		pthread_mutex_unlock(&w->mu);
		chunk_finish(val, size, &c);
		int rc = chunk_write_at(h, val, size, off);
		pthread_mutex_lock(&w->mu);
		if (rc != 0 && w->err == 0)
			w->err = rc;
		w->busy = false;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

uint8_t *heap_wb_buffer(heap *h)
{
	struct heap_wb *w = h->wb;
	size_t bytes = (size_t)LARGEST * h->psize;

	if (w == NULL) {
		if ((w = calloc(1, sizeof *w)) == NULL)
			return NULL;
		if (pthread_mutex_init(&w->mu, NULL) != 0) {
			free(w);
			return NULL;
		}
		if (pthread_cond_init(&w->cv, NULL) != 0) {
			pthread_mutex_destroy(&w->mu);
			free(w);
			return NULL;
		}
		h->wb = w;
	}
	/* buf[fill] is never the in-flight job's (heap_wb_post) */
	if (w->buf[w->fill] == NULL &&
	    posix_memalign((void **)&w->buf[w->fill], 4096, bytes) != 0)
		w->buf[w->fill] = NULL;
	return w->buf[w->fill];
}

/* Under w->mu: waits for the job in flight; its error, collected. */
static int wait_idle(struct heap_wb *w)
{
	int rc;

	while (w->busy)
		pthread_cond_wait(&w->cv, &w->mu);
	rc = w->err;
	w->err = 0;
	return rc;
}

/* The writer's end of a collected error: the txn may not commit. */
static int collected(heap_txn *t, int rc)
{
	if (rc != 0)
		t->poisoned = true;
	return rc;
}

/* Under w->mu: the thread, started once; false when it cannot run. */
static bool start(heap *h, struct heap_wb *w)
{
	if (w->started || w->failed)
		return w->started;
	if (heap_thread_start(&w->thr, wb_main, h))
		w->started = true;
	else
		w->failed = true;
	return w->started;
}

int heap_wb_post(heap_txn *t, uint64_t id, uint8_t *val, size_t size,
                 uint64_t off, const chdr *c)
{
	heap *h = t->h;
	struct heap_wb *w = h->wb;
	int rc;

	if (size < WB_MIN) {
		chunk_finish(val, size, c);
		return chunk_write_at(h, val, size, off);
	}
	pthread_mutex_lock(&w->mu);
	rc = wait_idle(w);
	t->wb_inflight = 0;
	if (rc == 0 && start(h, w)) {
		w->val = val;
		w->size = size;
		w->off = off;
		w->c = *c;
		w->busy = true;
		w->fill ^= 1u;
		t->wb_inflight = id;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		return 0;
	}
	pthread_mutex_unlock(&w->mu);
	if (rc != 0)
		return collected(t, rc);
	chunk_finish(val, size, c); /* no thread: written here */
	return chunk_write_at(h, val, size, off);
}

int heap_wb_drain(heap_txn *t)
{
	struct heap_wb *w;
	int rc;

	/* h->wb is the writer's: a read txn never looks at it */
	if (t->rdonly || (w = t->h->wb) == NULL)
		return 0;
	pthread_mutex_lock(&w->mu);
	rc = wait_idle(w);
	pthread_mutex_unlock(&w->mu);
	t->wb_inflight = 0;
	return collected(t, rc);
}

int heap_wb_settle(heap_txn *t, uint64_t id)
{
	if (t->wb_inflight == 0 || (id != 0 && id != t->wb_inflight))
		return 0;
	return heap_wb_drain(t);
}

void heap_wb_free(heap *h)
{
	struct heap_wb *w = h->wb;

	if (w == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	if (w->started)
		pthread_join(w->thr, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w->buf[0]);
	free(w->buf[1]);
	free(w);
	h->wb = NULL;
}
