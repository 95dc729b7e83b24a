/*
 * heap/flush.c - the flusher: a thread of the heap handle that asks the
 * device to make the file's written bytes durable (fdatasync) while a
 * write txn is still writing, so that its commit waits for the last
 * FLUSH_EVERY bytes, not for all of them (issue 13: on the VM disk a
 * commit after a full merge at 10M updates spent 138 of its 148 ms in
 * the device's cache flush, for 172 MB written during the merge).
 *
 * Chunk writes (chunk_write_at: pwrite, then sync_file_range) count their
 * bytes here; every FLUSH_EVERY bytes since the last commit the thread is
 * woken for one fdatasync.  An fdatasync only makes bytes durable earlier:
 * with MDB_WRITEMAP the kernel may write any dirty page of the map at any
 * time anyway (pages of the open txn included), and LMDB's commit still
 * syncs the data before it writes the meta page, and the meta page after.
 * So the recovery argument (ARCHITECTURE §4) is unchanged.
 *
 * Errors.  The thread syncs LMDB's own descriptor, and Linux reports a
 * writeback error once per open file description (errseq): an error the
 * thread's fdatasync takes would not be seen again by the commit's msync.
 * So every commit first stops the thread (waits for an fdatasync in flight
 * and lets no other start until the commit ended) and takes the error it
 * saw, if any: the commit then fails (AH_EIO, AH_EFULL for ENOSPC) and
 * the txn is aborted.  An error after the thread's last fdatasync is the
 * commit's own msync's.  An abort takes it too.  ah_sync's msync
 * (heap_sync) can take such an error, of another thread's open write txn:
 * it blocks the thread the same way and takes the thread's error first.
 * Whoever takes it makes the handle's sync error sticky (heap_sync_failed,
 * env_ops.c): no write txn of the handle commits or begins after it.
 * And a commit's sync and heap_sync's never run at once (sync_mu): the
 * one could take the other's error, and a commit whose own msync then
 * said 0 would write its meta page over data that never reached the disk
 * (found by an outside test: a commit acknowledged, then AH_ECORRUPT after
 * a remount).  A heap opened with AH_OPEN_NOSYNC never starts the thread
 * (it has the state, for sync_mu).
 *
 * It must never run while a commit is under way, never drop an error
 * before a commit has taken it, and never touch the descriptor after
 * heap_flush_free (called before LMDB closes it).
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "heap/heap_int.h"

/* Bytes written between two flushes (and since a commit before the
 * first): 32 MiB, a few per full merge at 10M updates. */
#define FLUSH_EVERY ((uint64_t)32 << 20)

struct heap_flush {
	/* held around every sync of LMDB's descriptor but the thread's (a
	 * commit's mdb_txn_commit, heap_sync's mdb_env_sync): of two such
	 * syncs at once, one could take the other's writeback error */
	pthread_mutex_t sync_mu;
	bool nosync;           /* AH_OPEN_NOSYNC: the thread never starts */
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* wanted, done, stop, unblocked */
	pthread_t thr;
	bool started, failed, stop;
	bool busy;             /* an fdatasync in flight */
	bool want;             /* one asked for */
	unsigned blocked;      /* commits under way: none may start */
	uint64_t since;        /* bytes written since the last ask */
	int err;               /* errno of the first failure not yet taken */
	uint64_t flushes;      /* fdatasyncs run (tests) */
};

static void *flush_main(void *arg)
{
	heap *h = arg;
	struct heap_flush *f = h->flush;

	pthread_mutex_lock(&f->mu);
	for (;;) {
		while (!f->stop && (!f->want || f->blocked))
			pthread_cond_wait(&f->cv, &f->mu);
		if (f->stop)
			break;
		f->want = false;
		f->busy = true;
		pthread_mutex_unlock(&f->mu);
		int e = fdatasync(h->fd) == 0 ? 0 : errno;
		pthread_mutex_lock(&f->mu);
		if (e != 0 && f->err == 0)
			f->err = e;
		f->flushes++;
		f->busy = false;
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* Under f->mu: the thread, started once; false when it cannot run. */
static bool start(heap *h, struct heap_flush *f)
{
	if (f->started || f->failed)
		return f->started;
	if (heap_thread_start(&f->thr, flush_main, h))
		f->started = true;
	else
		f->failed = true;
	return f->started;
}

int heap_flush_init(heap *h)
{
	struct heap_flush *f;

	if (h->flags & AH_OPEN_RDONLY)
		return 0;
	if ((f = calloc(1, sizeof *f)) == NULL)
		return AH_ENOMEM;
	f->nosync = (h->flags & AH_OPEN_NOSYNC) != 0;
	if (pthread_mutex_init(&f->mu, NULL) != 0) {
		free(f);
		return AH_ENOMEM;
	}
	if (pthread_mutex_init(&f->sync_mu, NULL) != 0) {
		pthread_mutex_destroy(&f->mu);
		free(f);
		return AH_ENOMEM;
	}
	if (pthread_cond_init(&f->cv, NULL) != 0) {
		pthread_mutex_destroy(&f->sync_mu);
		pthread_mutex_destroy(&f->mu);
		free(f);
		return AH_ENOMEM;
	}
	h->flush = f;
	return 0;
}

void heap_flush_note(heap *h, uint64_t bytes)
{
	struct heap_flush *f = h->flush;

	if (f == NULL || f->nosync)
		return;
	pthread_mutex_lock(&f->mu);
	f->since += bytes;
	if (f->since >= FLUSH_EVERY && start(h, f)) {
		f->since = 0;
		f->want = true;
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
}

int heap_flush_block(heap *h)
{
	struct heap_flush *f = h->flush;
	int e;

	if (f == NULL)
		return 0;
	pthread_mutex_lock(&f->mu);
	f->blocked++;
	while (f->busy)
		pthread_cond_wait(&f->cv, &f->mu);
	e = f->err;
	f->err = 0;
	pthread_mutex_unlock(&f->mu);
	return e == 0 ? 0 : e == ENOSPC ? AH_EFULL : AH_EIO;
}

void heap_flush_unblock(heap *h)
{
	struct heap_flush *f = h->flush;

	if (f == NULL)
		return;
	pthread_mutex_lock(&f->mu);
	f->blocked--;
	/* the commit's sync made everything before it durable */
	f->since = 0;
	f->want = false;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

uint64_t heap_flush_count(heap *h)
{
	struct heap_flush *f = h->flush;
	uint64_t n = 0;

	if (f != NULL) {
		pthread_mutex_lock(&f->mu);
		n = f->flushes;
		pthread_mutex_unlock(&f->mu);
	}
	return n;
}

void heap_sync_lock(heap *h)
{
	if (h->flush != NULL)
		pthread_mutex_lock(&h->flush->sync_mu);
}

void heap_sync_unlock(heap *h)
{
	if (h->flush != NULL)
		pthread_mutex_unlock(&h->flush->sync_mu);
}

void heap_flush_free(heap *h)
{
	struct heap_flush *f = h->flush;

	if (f == NULL)
		return;
	pthread_mutex_lock(&f->mu);
	bool started = f->started;
	f->stop = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	/* in a forked child the thread does not exist (and the child never
	 * gets here: every entry point checks the pid first) */
	if (started && h->pid == getpid())
		pthread_join(f->thr, NULL);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->sync_mu);
	pthread_mutex_destroy(&f->mu);
	free(f);
	h->flush = NULL;
}
