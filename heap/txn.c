/*
 * heap/txn.c - heap_txn: a thin wrapper over MDB_txn that adds what LMDB
 * lacks for us: poisoning, fork detection, a count of open txns (so that
 * heap_close and heap_set_max_bytes can refuse while one is open), the
 * same-thread second-writer check (LMDB would deadlock on its own mutex),
 * and the space bound of space.c.
 *
 * Poisoning (as LMDB's MDB_TXN_ERROR): a write operation that failed after
 * it may have changed something poisons the txn; afterwards every call but
 * abort returns AH_EBADTXN, and commit aborts and returns AH_EBADTXN.
 * Failures that change nothing (AH_ENOTFOUND on a delete or lookup,
 * AH_EINVAL on bad arguments, AH_EREADONLY) do not poison.
 *
 * It must never touch the pool or the writer fields of a write txn after
 * LMDB has released the writer lock (the next writer owns them then), and
 * never free a txn whose LMDB state belongs to another process (a forked
 * child only forgets it).
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

int heap_txn_usable(const heap_txn *t, bool write)
{
	int rc;

	if (t == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(t->h)) != 0)
		return rc;
	if (t->poisoned)
		return AH_EBADTXN;
	if (write && t->rdonly)
		return AH_EREADONLY;
	return 0;
}

int heap_txn_fail(heap_txn *t, int rc)
{
	if (rc != 0 && rc != AH_ENOTFOUND && rc != AH_EINVAL &&
	    rc != AH_EREADONLY && !t->rdonly)
		t->poisoned = true;
	return rc;
}

/* The end of a write txn, while this thread still holds LMDB's writer
 * lock: the pool is reset and the writer fields cleared BEFORE
 * mdb_txn_commit/abort releases the lock.  Afterwards the next writer (any
 * thread) may already be inside its own txn: it owns the pool and the
 * writer fields from that moment, and nothing of ours may touch them. */
static void writer_end(heap_txn *t)
{
	heap *h = t->h;

	if (t->rdonly)
		return;
	pool_reset(h->pool);
	pthread_mutex_lock(&h->mu);
	h->writer_active = false;
	pthread_mutex_unlock(&h->mu);
}

/* After LMDB ended the txn: only the count of open txns. */
static void release(heap_txn *t)
{
	heap *h = t->h;

	pthread_mutex_lock(&h->mu);
	h->ntxn--;
	pthread_mutex_unlock(&h->mu);
	free(t);
}

/* Another process grew the map: adopt its size (only with no other txn of
 * ours open, as mdb_env_set_mapsize requires). */
static int adopt_map(heap *h)
{
	int rc = AH_EBUSY;

	pthread_mutex_lock(&h->mu);
	if (h->ntxn == 1) {
		rc = heap_path_adopt_map(h, h->env,
		                         !(h->flags & AH_OPEN_RDONLY));
		/* remapped: chunk_read.c learns the new base again */
		__atomic_store_n(&h->map_base, NULL, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&h->mu);
	return rc;
}

int heap_txn_begin(heap *h, bool rdonly, heap_txn **out)
{
	unsigned mflags = rdonly ? MDB_RDONLY : 0;
	heap_txn *t;
	int rc;

	if (h == NULL || out == NULL)
		return AH_EINVAL;
	*out = NULL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	if (!rdonly && (h->flags & AH_OPEN_RDONLY))
		return AH_EREADONLY;
	/* an ah_sync failed: what is on disk is unknown (heap_sync) */
	if (!rdonly && __atomic_load_n(&h->sync_err, __ATOMIC_ACQUIRE))
		return AH_EIO;
	if ((t = heap_zalloc(1, sizeof *t)) == NULL)
		return AH_ENOMEM;
	t->h = h;
	t->rdonly = rdonly;
	t->new_lo = UINT64_MAX;
	pthread_mutex_lock(&h->mu);
	if (!rdonly && h->writer_active &&
	    pthread_equal(h->writer, pthread_self()))
		rc = AH_ESTATE;
	else
		h->ntxn++;
	pthread_mutex_unlock(&h->mu);
	if (rc != 0) {
		free(t);
		return rc;
	}
	/* A reader killed while holding a snapshot leaves its slot behind,
	 * and the slot pins every page the snapshot could see.  Clearing
	 * such slots only at open would let a long-lived writer's file grow
	 * without bound, so every write txn clears them first (one fcntl
	 * probe per other process in the reader table). */
	if (!rdonly)
		rc = heap_err(HEAP_MDB(mdb_reader_check(h->env, NULL)));
	if (rc != 0) {
		release(t);
		return rc;
	}
	rc = HEAP_MDB(mdb_txn_begin(h->env, NULL, mflags, &t->txn));
	if (rc == MDB_MAP_RESIZED && (rc = adopt_map(h)) == 0)
		rc = mdb_txn_begin(h->env, NULL, mflags, &t->txn);
	/* A read txn finds the table full: slots of dead processes are
	 * cleared here too (else only the next write txn would), then once
	 * more. */
	if (rc == MDB_READERS_FULL && rdonly &&
	    (rc = HEAP_MDB(mdb_reader_check(h->env, NULL))) == 0)
		rc = HEAP_MDB(mdb_txn_begin(h->env, NULL, mflags, &t->txn));
	if ((rc = heap_err(rc)) != 0) {
		release(t);
		return rc;
	}
	heap_fault_order();
	if (!rdonly) {
		pthread_mutex_lock(&h->mu);
		h->writer_active = true;
		h->writer = pthread_self();
		pthread_mutex_unlock(&h->mu);
		if ((rc = heap_space_begin(t)) != 0) {
			writer_end(t);
			mdb_txn_abort(t->txn);
			release(t);
			return rc;
		}
	}
	*out = t;
	return 0;
}

int heap_txn_commit(heap_txn *t)
{
	int rc;

	if (t == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(t->h)) != 0) {
		free(t); /* LMDB state belongs to the parent */
		return rc;
	}
	heap_fault_order();
	/* Every chunk written before LMDB syncs the map (a failed write
	 * poisons t), then the last write of a write txn, while it can still
	 * fail cleanly. */
	rc = heap_wb_drain(t);
	if (!t->poisoned && !t->rdonly && (rc = heap_names_store(t)) != 0)
		t->poisoned = true;
	/* No early flush while LMDB commits, and the error one saw (which
	 * LMDB's msync would no longer see: flush.c) fails the commit. */
	int frc = t->rdonly ? 0 : heap_flush_block(t->h);
	/* no heap_sync while LMDB syncs: it could take this commit's error */
	if (!t->rdonly)
		heap_sync_lock(t->h);
	if (frc != 0) /* the flusher's fdatasync failed: sticky */
		heap_sync_failed(t->h, frc);
	if (frc == 0 && !t->rdonly &&
	    __atomic_load_n(&t->h->sync_err, __ATOMIC_ACQUIRE))
		frc = AH_EIO; /* a sync failed while this txn was open */
	if (frc != 0 && !t->poisoned) {
		t->poisoned = true;
		rc = frc;
	}
	writer_end(t);
	if (t->poisoned) {
		mdb_txn_abort(t->txn);
		rc = rc ? rc : AH_EBADTXN;
	} else if (t->rdonly) {
		mdb_txn_abort(t->txn);
	} else {
		int raw = heap_fault_commit(t->txn);

		rc = heap_err(raw);
		/* in a write txn of a map LMDB writes through (MDB_WRITEMAP)
		 * only its msyncs fail with these: sticky */
		if (raw == EIO || raw == ENOSPC || raw == EDQUOT)
			heap_sync_failed(t->h, rc);
		if (rc == 0)
			heap_format_raise(t->h, t->format_mark); /* heap_format_mark */
	}
	if (!t->rdonly) {
		heap_sync_unlock(t->h);
		heap_flush_unblock(t->h);
	}
	release(t);
	return rc;
}

void heap_txn_abort(heap_txn *t)
{
	if (t == NULL)
		return;
	if (heap_check_pid(t->h) != 0) {
		free(t);
		return;
	}
	heap_fault_order();
	/* no write may land in pages the next writer reuses */
	(void)heap_wb_drain(t);
	/* an early flush's error was about these writes, but the file's
	 * state after it is not known: sticky (heap_sync_failed) */
	if (!t->rdonly)
		heap_sync_failed(t->h, heap_flush_block(t->h));
	writer_end(t);
	mdb_txn_abort(t->txn);
	if (!t->rdonly)
		heap_flush_unblock(t->h);
	release(t);
}

heap *heap_txn_heap(heap_txn *t)
{
	return t->h;
}

bool heap_txn_rdonly(const heap_txn *t)
{
	return t->rdonly;
}

uint64_t heap_txn_id(const heap_txn *t)
{
	return (uint64_t)mdb_txn_id(t->txn);
}
