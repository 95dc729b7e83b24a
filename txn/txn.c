/*
 * txn/txn.c - heap handles and transactions of the public API.
 *
 * A write transaction is one LMDB write transaction: every arrangement's
 * batches, spine, frontiers and source positions change together at
 * ah_txn_commit or not at all.  A failed mutation poisons the transaction
 * (as LMDB's MDB_TXN_ERROR): afterwards only abort is accepted, and commit
 * aborts and reports AH_EBADTXN, so a partial change can never be committed.
 *
 * This file must never hand out a pointer that outlives its transaction
 * without saying so: cursors still open at commit/abort are detached
 * (their later use is AH_ESTATE), and an open builder is abandoned.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txn.h"

int txn_fail(ah_txn *t, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->msg, sizeof t->msg, fmt, ap);
	va_end(ap);
	return err;
}

int txn_poison(ah_txn *t, int err, const char *fmt, ...)
{
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(t->msg, sizeof t->msg, fmt, ap);
		va_end(ap);
	} else if (!t->msg[0] || !t->poisoned) {
		snprintf(t->msg, sizeof t->msg, "%s", ah_strerror(err));
	}
	t->poisoned = true;
	return err;
}

int txn_owner_check(const ah_txn *t)
{
	return t->rdonly || pthread_equal(t->owner, pthread_self()) ? 0 : AH_ESTATE;
}

int txn_foreign_abort_check(ah_txn *t)
{
	if (!atomic_load(&t->foreign_abort))
		return 0;
	if (!t->poisoned)
		txn_poison(t, AH_EBADTXN, "ah_txn_abort was called on this write "
		           "transaction from another thread: only abort is accepted");
	return AH_EBADTXN;
}

int txn_enter(ah_txn *t, bool write)
{
	if (!t)
		return AH_EINVAL;
	int rc = heap_check_pid(t->heap->h);
	if (rc)
		return rc;
	/* Before anything touches t: another thread's call must change
	 * nothing (not even the message) of the owner's txn. */
	if ((rc = txn_owner_check(t)))
		return rc;
	if ((rc = txn_foreign_abort_check(t)))
		return rc;
	if (t->poisoned)
		return AH_EBADTXN;
	if (write && t->rdonly)
		return txn_poison(t, AH_EREADONLY, "read-only transaction");
	if (write && t->builder)
		return txn_poison(t, AH_ESTATE, "a builder is open in this transaction");
	if (write && !heap_pool(t->heap->h))
		return txn_poison(t, AH_ENOMEM, "cannot create the memory pool");
	if (write) {
		/* A mutation may free chunks an open cursor points into: detach
		 * the cursors, their later use is AH_ESTATE. */
		for (ah_cursor *c = t->cursors; c; c = c->next)
			c->txn = NULL;
		t->cursors = NULL;
	}
	t->msg[0] = 0;
	return 0;
}

bool txn_name_ok(const char *name)
{
	if (!name)
		return false;
	size_t n = strlen(name);
	if (n < 1 || n > AH_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
		      c == '/' || c == '-'))
			return false;
	}
	return true;
}

/* ----------------------------------------------------------- heap */

int ah_open(const char *path, const ah_open_opts *opts, ah_heap **out)
{
	if (!path || !out)
		return AH_EINVAL;
	*out = NULL;
	ah_heap *ah = calloc(1, sizeof *ah);
	if (!ah)
		return AH_ENOMEM;
	int rc = heap_open(path, opts, &ah->h);
	if (rc) {
		free(ah);
		return rc;
	}
	pthread_mutex_init(&ah->mu, NULL);
	if (opts && opts->size >= offsetof(ah_open_opts, merge_quantum) + sizeof(uint64_t))
		ah->merge_quantum = opts->merge_quantum;
	if (opts && (opts->flags & AH_OPEN_BGMERGE) &&
	    !(opts->flags & AH_OPEN_RDONLY) && (rc = bgm_create(ah))) {
		heap_close(ah->h);
		pthread_mutex_destroy(&ah->mu);
		free(ah);
		return rc;
	}
	*out = ah;
	return 0;
}

int ah_close(ah_heap *ah)
{
	if (!ah)
		return AH_EINVAL;
	int rc = heap_check_pid(ah->h);
	if (rc == AH_EFORK) {
		/* Forget the handle in the child: closing would release the
		 * parent's locks (LMDB: never use an env across fork). */
		return rc;
	}
	pthread_mutex_lock(&ah->mu);
	unsigned open = ah->open_txns;
	pthread_mutex_unlock(&ah->mu);
	if (open)
		return AH_ESTATE;
	bgm_destroy(ah); /* its txns end before the heap closes */
	if ((rc = heap_close(ah->h)))
		return rc;
	pthread_mutex_destroy(&ah->mu);
	free(ah);
	return 0;
}

int ah_sync(ah_heap *ah)
{
	return ah ? heap_sync(ah->h) : AH_EINVAL;
}

int ah_set_max_bytes(ah_heap *ah, uint64_t max_bytes)
{
	if (!ah)
		return AH_EINVAL;
	/* A forked child must not touch the merge thread's state. */
	int prc = heap_check_pid(ah->h);
	if (prc)
		return prc;
	pthread_mutex_lock(&ah->mu);
	unsigned open = ah->open_txns;
	pthread_mutex_unlock(&ah->mu);
	if (open)
		return AH_ESTATE;
	bgm_pause(ah, true); /* the thread's txns count as open */
	int rc = heap_set_max_bytes(ah->h, max_bytes);
	bgm_pause(ah, false);
	return rc;
}

int ah_heap_stat_get(ah_heap *ah, ah_heap_stat *st)
{
	return ah && st ? heap_stat(ah->h, st) : AH_EINVAL;
}

int ah_pool_stats_get(ah_heap *ah, ah_pool_stats *st)
{
	if (!ah || !st)
		return AH_EINVAL;
	int rc = heap_check_pid(ah->h);
	if (rc)
		return rc;
	pool *p = heap_pool_if_any(ah->h);
	if (!p) { /* no write yet: no pool */
		memset(st, 0, sizeof *st);
		return 0;
	}
	return pool_stats(p, st);
}

/* ------------------------------------------------------ transactions */

int ah_txn_begin(ah_heap *ah, unsigned flags, ah_txn **out)
{
	if (!ah || !out || (flags & ~AH_TXN_RDONLY))
		return AH_EINVAL;
	*out = NULL;
	int rc = heap_check_pid(ah->h);
	if (rc)
		return rc;
	bool rdonly = flags & AH_TXN_RDONLY;
	ah_txn *t = heap_zalloc(1, sizeof *t);
	if (!t)
		return AH_ENOMEM;
	t->heap = ah;
	t->rdonly = rdonly;
	t->owner = pthread_self();
	atomic_init(&t->foreign_abort, false);
	if (!rdonly)
		bgm_turnstile(ah);
	if ((rc = heap_txn_begin(ah->h, rdonly, &t->ht))) {
		free(t);
		return rc;
	}
	pthread_mutex_lock(&ah->mu);
	ah->open_txns++;
	pthread_mutex_unlock(&ah->mu);
	*out = t;
	return 0;
}

/* Detaches cursors and the builder: before the heap txn ends, because the
 * builder's memory is in the pool, which heap_txn_commit/abort reset while
 * this thread still holds the writer lock. */
static void txn_detach(ah_txn *t)
{
	for (ah_cursor *c = t->cursors; c; c = c->next)
		c->txn = NULL;
	t->cursors = NULL;
	if (t->builder) {
		/* The caller still owns the handle: detach it (later calls are
		 * AH_ESTATE, abandon frees the shell) -- unless it was already
		 * abandoned from another thread, which left the shell to us. */
		builder_free(t->builder->b);
		if (atomic_load(&t->builder->abandoned)) {
			free(t->builder);
		} else {
			t->builder->b = NULL;
			t->builder->txn = NULL;
		}
		t->builder = NULL;
	}
}

/* After the heap txn ended: the heap-level count, and the handle. */
static void txn_release(ah_txn *t)
{
	ah_heap *ah = t->heap;

	pthread_mutex_lock(&ah->mu);
	ah->open_txns--;
	pthread_mutex_unlock(&ah->mu);
	free(t->bg_names);
	free(t);
}

int txn_note_merging(ah_txn *t, const char *name)
{
	for (unsigned i = 0; i < t->bg_n; i++)
		if (strcmp(t->bg_names[i], name) == 0)
			return 0;
	if (t->bg_n == t->bg_cap) {
		unsigned ncap = t->bg_cap ? 2 * t->bg_cap : 4;
		char (*nn)[AH_NAME_MAX + 1] = realloc(t->bg_names, ncap * sizeof *nn);

		if (!nn)
			return AH_ENOMEM;
		t->bg_names = nn;
		t->bg_cap = ncap;
	}
	snprintf(t->bg_names[t->bg_n++], AH_NAME_MAX + 1, "%s", name);
	return 0;
}

int ah_txn_commit(ah_txn *t)
{
	if (!t)
		return AH_EINVAL;
	int rc = heap_check_pid(t->heap->h);
	if (rc)
		return rc;
	/* LMDB's writer lock is the beginning thread's: committing (or
	 * aborting) from another thread would return normally and never
	 * release it.  Refuse, and leave the txn to its owner. */
	if ((rc = txn_owner_check(t)))
		return rc;
	bool foreign = txn_foreign_abort_check(t) != 0;
	if (t->builder && !t->poisoned)
		txn_poison(t, AH_ESTATE, "commit with an open builder");
	bool had_builder = t->builder != NULL;
	txn_detach(t);
	if (t->poisoned) {
		heap_txn_abort(t->ht);
		rc = had_builder && !foreign ? AH_ESTATE : AH_EBADTXN;
	} else {
		rc = heap_txn_commit(t->ht);
		if (rc == 0)
			bgm_notify(t->heap, (const char (*)[AH_NAME_MAX + 1])t->bg_names,
			           t->bg_n);
	}
	txn_release(t);
	return rc;
}

void ah_txn_abort(ah_txn *t)
{
	if (!t || heap_check_pid(t->heap->h))
		return;
	if (txn_owner_check(t)) {
		/* Not this thread's write txn: LMDB must not be touched here.
		 * Mark it; the owner's next call fails with AH_EBADTXN, its
		 * commit aborts, and its abort frees the txn. */
		atomic_store(&t->foreign_abort, true);
		return;
	}
	txn_detach(t);
	heap_txn_abort(t->ht);
	txn_release(t);
}

const char *ah_txn_errmsg(const ah_txn *t)
{
	return t ? t->msg : "";
}
