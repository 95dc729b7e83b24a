/*
 * heap/env_ops.c - what an open heap handle offers besides open and close
 * (env.c): sync, the size limit, statistics (the reader slots, the map,
 * the free pages), the writer's state, the handle's pool and the layer
 * above's per-handle cache.
 *
 * It must never hand a tree a page check found damaged to LMDB
 * (heap_trees_usable), and never change the map while a txn of the handle
 * is open.
 */
#include <string.h>
#include <sys/stat.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

int heap_sync(heap *h)
{
	int rc;

	if (h == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	if (h->flags & AH_OPEN_RDONLY)
		return 0;
	/* The sticky rule (heap_sync_failed); and it never runs during a
	 * commit's sync (heap_sync_lock), whose error it could take. */
	int fe = heap_flush_block(h); /* the thread's failed fdatasync */
	heap_sync_lock(h);
	heap_sync_failed(h, fe);
	if ((rc = __atomic_load_n(&h->sync_err, __ATOMIC_ACQUIRE)) == 0) {
		rc = heap_err(HEAP_MDB(mdb_env_sync(h->env, 1)));
		heap_sync_failed(h, rc);
	}
	heap_sync_unlock(h);
	heap_flush_unblock(h);
	return rc;
}

/* Linux reports a writeback error once per file description, and a
 * second sync then says 0 for pages never written (an outside test, a
 * NOSYNC heap); a failed sync may be about pages of earlier commits (an
 * AH_OPEN_NOMETASYNC heap's unsynced meta page: an acknowledged commit
 * lost although a later ah_sync said 0, an outside test); and ext4 went
 * on returning 0 for later syncs while the pages it wrote read as zeros
 * after a remount (an outside test, extents left unwritten after the
 * error).  So after any failed sync of the file (ah_sync's, a commit's,
 * the flusher's) the handle writes nothing more: close, reopen, verify. */
void heap_sync_failed(heap *h, int rc)
{
	int none = 0;

	if (rc == AH_EIO || rc == AH_EFULL)
		(void)__atomic_compare_exchange_n(&h->sync_err, &none, rc, false,
		                                  __ATOMIC_ACQ_REL,
		                                  __ATOMIC_ACQUIRE);
}

int heap_set_max_bytes(heap *h, uint64_t max_bytes)
{
	MDB_envinfo info;
	uint64_t map, held;
	int rc;

	if (h == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	pthread_mutex_lock(&h->mu);
	if (h->ntxn > 0) {
		rc = AH_ESTATE;
		goto out;
	}
	TRY(heap_err(mdb_env_info(h->env, &info)));
	held = ((uint64_t)info.me_last_pgno + 1) * h->psize;
	map = heap_space_map_bytes(max_bytes ? 0 : heap_space_fs_bytes(NULL, h->fd),
	                           max_bytes, h->psize);
	/* The limit asked for, not the map it rounds to (at least MIN_MAP):
	 * a limit below the pages in use is refused even when the map that
	 * would carry it is larger. */
	if ((max_bytes != 0 && max_bytes < held) || map < held) {
		rc = AH_EINVAL;
		goto out;
	}
	/* LMDB truncates the file to the map: below its size only alone on
	 * the heap (path.c, the map-size lock), else AH_EBUSY. */
	struct stat fs;
	bool locked = false;

	if (!(h->flags & AH_OPEN_RDONLY) && fstat(h->fd, &fs) == 0 &&
	    (uint64_t)fs.st_size > map) {
		TRY(heap_path_resize_lock(h->fd, true));
		locked = true;
		if (heap_path_shared(h)) {
			heap_path_resize_unlock(h->fd);
			rc = AH_EBUSY;
			goto out;
		}
	}
	rc = heap_err(mdb_env_set_mapsize(h->env, map));
	if (locked)
		heap_path_resize_unlock(h->fd);
	if (rc != 0)
		goto out;
	__atomic_store_n(&h->map_base, NULL, __ATOMIC_RELEASE); /* remapped */
	TRY(heap_err(mdb_env_info(h->env, &info)));
	h->map_bytes = info.me_mapsize;
	h->max_bytes = max_bytes;
	if (h->reserved_to > h->map_bytes)
		h->reserved_to = h->map_bytes;
out:
	pthread_mutex_unlock(&h->mu);
	return rc;
}

/* readers_used: mdb_reader_list prints a header line, then one line per
 * slot owned by a live process, or "(no active readers)". */
static int count_reader(const char *msg, void *ctx)
{
	if (strncmp(msg, "(no active", 10) != 0 &&
	    strstr(msg, "pid") == NULL)
		++*(uint32_t *)ctx;
	return 0;
}

static int free_pages(heap *h, uint64_t *out)
{
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t sum = 0, last = 0;
	int rc, op = MDB_FIRST;

	TRY(heap_trees_usable(h, HEAP_TREE_BIT(HEAP_TREE_FREE)));
	TRY(heap_err(mdb_txn_begin(h->env, NULL, MDB_RDONLY, &txn)));
	TRY(heap_err(mdb_cursor_open(txn, 0 /* FREE_DBI */, &cur)));
	while ((rc = mdb_cursor_get(cur, &k, &v, op)) == 0) {
		size_t n, id;

		if (v.mv_size < sizeof n || k.mv_size != sizeof id) {
			rc = CORRUPT("short free-list record");
			goto out;
		}
		memcpy(&id, k.mv_data, sizeof id);
		if (op == MDB_NEXT && id <= last) { /* a damaged tree went back */
			rc = CORRUPT("free-list records out of order");
			goto out;
		}
		op = MDB_NEXT;
		last = id;
		memcpy(&n, v.mv_data, sizeof n);
		sum += n;
	}
	rc = rc == MDB_NOTFOUND ? 0 : heap_err(rc);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	if (txn != NULL)
		mdb_txn_abort(txn);
	*out = sum;
	return rc;
}

int heap_stat(heap *h, ah_heap_stat *st)
{
	MDB_envinfo info;
	struct stat fs;
	int rc;

	if (h == NULL || st == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	memset(st, 0, sizeof *st);
	st->format_version = heap_format_of(h);
	st->page_size = h->psize;
	memcpy(st->uuid, h->uuid, sizeof st->uuid);
	TRY(heap_err(HEAP_MDB(mdb_reader_check(h->env, NULL))));
	TRY(heap_err(mdb_reader_list(h->env, count_reader,
	                                  &st->readers_used)));
	TRY(heap_err(mdb_env_info(h->env, &info)));
	st->map_bytes = info.me_mapsize;
	st->pages_used = (uint64_t)info.me_last_pgno + 1;
	st->last_txn_id = info.me_last_txnid;
	st->readers_max = info.me_maxreaders;
	if (fstat(h->fd, &fs) != 0) {
		rc = AH_EIO;
		goto out;
	}
	st->file_bytes = (uint64_t)fs.st_size;
	st->file_alloc_bytes = (uint64_t)fs.st_blocks * 512;
	TRY(free_pages(h, &st->pages_free));
out:
	return rc;
}

/* The pool is created on first use by the writer, not at open: creating a
 * jemalloc arena cost 60% of a read-only open's instructions (callgrind:
 * 179k of 303k), and readers never need it. */
bool heap_writer_is_self(heap *h)
{
	bool me;

	pthread_mutex_lock(&h->mu);
	me = h->writer_active && pthread_equal(h->writer, pthread_self());
	pthread_mutex_unlock(&h->mu);
	return me;
}

bool heap_writer_active(heap *h)
{
	bool on;

	pthread_mutex_lock(&h->mu);
	on = h->writer_active;
	pthread_mutex_unlock(&h->mu);
	return on;
}

pool *heap_pool(heap *h)
{
	if (h->pool == NULL && !(h->flags & AH_OPEN_RDONLY) &&
	    pool_create(&h->pool) != 0)
		h->pool = NULL;
	return h->pool;
}

pool *heap_pool_if_any(const heap *h)
{
	return h->pool;
}

void *heap_aux(heap *h, void *(*make)(void), void (*destroy)(void *))
{
	void *a = __atomic_load_n(&h->aux, __ATOMIC_ACQUIRE);

	if (a != NULL)
		return a;
	pthread_mutex_lock(&h->mu);
	if ((a = h->aux) == NULL && (a = make()) != NULL) {
		h->aux_free = destroy;
		__atomic_store_n(&h->aux, a, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&h->mu);
	return a;
}

bool heap_verify_reads(const heap *h)
{
	return (h->flags & AH_OPEN_VERIFY_READS) != 0;
}

uint32_t heap_page_size(const heap *h)
{
	return h->psize;
}
