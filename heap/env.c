/*
 * heap/env.c - the heap's lifecycle: open (with the format checks of
 * format.c), close, sync, the size limit, statistics, and the process-wide
 * registry of open heap files.
 *
 * Why a registry (the heap layer's only global state besides
 * heap_debug): LMDB's locks are fcntl locks, which belong to the
 * process and are dropped when ANY descriptor of the file is closed; a
 * second environment on the same file in one process would silently break
 * the first one's locking when closed.  So heap_open refuses a file that is
 * already open in this process (AH_EBUSY).  Entries carry the opener's pid:
 * a forked child inherits the list but not the environments, and may open
 * the file anew.
 *
 * A failed open changes nothing on disk: an existing file is checked by
 * pread (format.c: the LMDB metas, then the main and "meta" trees' pages,
 * which also hold the catalog: every named DB's record with its flags, and
 * the meta record) before it is opened read-write.  Only a catalog those
 * pages do not prove sound is checked again through a read-only
 * environment (no WRITEMAP, so no ftruncate), which names its error: the
 * writable environment grows the file to its map as it opens.  A new heap
 * is created under PATH.creating and renamed into place complete
 * (create_file), so a process killed inside ah_open never leaves a
 * half-made PATH; a heap this open created is unlinked again if the rest
 * of the open fails.  An LMDB
 * file that never saw a commit (made by older versions, or by hand) holds
 * nothing, and AH_OPEN_CREATE finishes it.
 *
 * It must never close a descriptor of a file LMDB holds locks on, never
 * remove a published heap or its lock file, and never open one file twice
 * in a process.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

#define OPEN_FLAGS                                                             \
	(AH_OPEN_CREATE | AH_OPEN_RDONLY | AH_OPEN_NOSYNC |                    \
	 AH_OPEN_NOMETASYNC | AH_OPEN_VERIFY_READS | AH_OPEN_BGMERGE)
#define MAX_DBS 8
#define DEFAULT_READERS 126

static const char *const dbi_names[HEAP_DBI__COUNT] = {
	[HEAP_T_ARR] = "arr",       [HEAP_T_BATCH] = "batch",
	[HEAP_T_SOURCE] = "source", [HEAP_DBI_META] = "meta",
	[HEAP_DBI_CHUNKS] = "chunks",
};
static const unsigned dbi_flags[HEAP_DBI__COUNT] = {
	[HEAP_T_BATCH] = MDB_INTEGERKEY,
	[HEAP_DBI_CHUNKS] = MDB_INTEGERKEY,
};

/* This process's pid, cached: glibc makes every getpid() a system call,
 * and every API call checks it (14 per point query in the benchmark), as
 * does heap_open (the registry's entries are per pid).  A fork handler
 * refreshes it in the child before any code runs there. */
static pid_t self_pid;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;

static void self_refresh(void)
{
	__atomic_store_n(&self_pid, getpid(), __ATOMIC_RELAXED);
}

static void self_init(void)
{
	self_refresh();
	pthread_atfork(NULL, NULL, self_refresh);
}

static pid_t self(void)
{
	pthread_once(&self_once, self_init);
	return __atomic_load_n(&self_pid, __ATOMIC_RELAXED);
}

int heap_check_pid(const heap *h)
{
	return h->pid == self() ? 0 : AH_EFORK;
}

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static heap *registry;

static bool registered(dev_t dev, ino_t ino)
{
	pid_t me = self();

	for (heap *r = registry; r != NULL; r = r->reg_next)
		if (r->pid == me && r->dev == dev && r->ino == ino)
			return true;
	return false;
}

/* Does a heap of this process use this lock file (by identity)?  Then a
 * descriptor of it must not be opened and closed here: that would drop
 * the other heap's LMDB locks (fcntl locks belong to the process). */
static bool lock_registered(dev_t dev, ino_t ino)
{
	pid_t me = self();

	for (heap *r = registry; r != NULL; r = r->reg_next)
		if (r->pid == me && r->lock_ino != 0 && r->lock_dev == dev &&
		    r->lock_ino == ino)
			return true;
	return false;
}

/* Is a heap of this process open?  (Entries of a forked parent's are not.) */
static bool any_registered(void)
{
	pid_t me = self();

	for (heap *r = registry; r != NULL; r = r->reg_next)
		if (r->pid == me)
			return true;
	return false;
}

static void unregister(heap *h)
{
	for (heap **pp = &registry; *pp != NULL; pp = &(*pp)->reg_next)
		if (*pp == h) {
			*pp = h->reg_next;
			return;
		}
}

static void set_debug(void)
{
	const char *d = getenv("AH_DEBUG");

	heap_debug = d != NULL && *d != '\0' && strcmp(d, "0") != 0;
}

static int env_start(heap *h, const char *path, unsigned mflags,
                     unsigned readers, MDB_env **out)
{
	MDB_env *env = NULL;
	int rc = heap_err(mdb_env_create(&env));

	if (rc != 0)
		return rc;
	TRY(heap_err(mdb_env_set_assert(env, heap_lmdb_assert)));
	TRY(heap_err(mdb_env_set_maxdbs(env, MAX_DBS)));
	TRY(heap_err(mdb_env_set_maxreaders(env, readers)));
	TRY(heap_err(mdb_env_set_mapsize(env, h->map_bytes)));
	rc = HEAP_MDB(mdb_env_open(env, path, mflags, 0644));
	if (rc == ENOENT)
		rc = MDB_INVALID; /* vanished between our checks and LMDB's */
	TRY(heap_err(rc));
	TRY(heap_err(HEAP_MDB(mdb_reader_check(env, NULL))));
out:
	if (rc != 0)
		mdb_env_close(env);
	else
		*out = env;
	return rc;
}

/* Opens named DB i.  liblmdb 0.9 opens an existing DB whatever flags it
 * was made with (mdb_dbi_open compares none), and then reads it with the
 * compare those flags pick: a DB of other flags is refused here, before
 * anything reads it, as not arrheap's (the "meta" DB: AH_EFORMAT) or as a
 * damaged catalog (AH_ECORRUPT, like a missing one). */
static int open_dbi(heap *h, MDB_txn *txn, int i, bool create)
{
	unsigned got;
	int rc = HEAP_MDB(mdb_dbi_open(txn, dbi_names[i],
	                      dbi_flags[i] | (create ? MDB_CREATE : 0),
	                      &h->dbi[i]));

	if (rc == 0 && (rc = mdb_dbi_flags(txn, h->dbi[i], &got)) == 0 &&
	    got != dbi_flags[i])
		rc = MDB_INCOMPATIBLE;
	if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
		return i == HEAP_DBI_META ? AH_EFORMAT /* LMDB, but not arrheap */
		                          : CORRUPT("an arrheap named DB is "
		                                    "missing or of other flags");
	return heap_err(rc);
}

/* Opens the named DBs and checks the meta record (creating both when
 * create): AH_EFORMAT for a foreign LMDB file. */
static int catalog(heap *h, MDB_env *env, bool create, bool prealloc)
{
	MDB_txn *txn = NULL;
	MDB_val k = { sizeof HEAP_META_KEY - 1, (void *)HEAP_META_KEY }, v;
	uint8_t rec[HEAP_META_BYTES];
	int rc, i;

	if (create && prealloc) {
		/* Before LMDB writes the first pages of the new file. */
		TRY(heap_space_ensure(h, 256 * (uint64_t)h->psize));
	}
	TRY(heap_err(HEAP_MDB(mdb_txn_begin(env, NULL, create ? 0 : MDB_RDONLY,
	                                &txn))));
	TRY(open_dbi(h, txn, HEAP_DBI_META, create));
	rc = HEAP_MDB(mdb_get(txn, h->dbi[HEAP_DBI_META], &k, &v));
	if (rc == MDB_NOTFOUND && create) {
		TRY(heap_uuid_new(h->uuid));
		heap_meta_encode(rec, h->psize, h->uuid, HEAP_FORMAT_BASE);
		h->format = HEAP_FORMAT_BASE;
		v.mv_size = sizeof rec;
		v.mv_data = rec;
		TRY(heap_err(HEAP_MDB(mdb_put(txn, h->dbi[HEAP_DBI_META], &k, &v,
		                          0))));
		{
			static const uint64_t none[4] = { 0 };

			TRY(heap_names_put_raw(txn, h->dbi[HEAP_DBI_META], none));
		}
	} else if (rc == MDB_NOTFOUND) {
		rc = AH_EFORMAT;
		goto out;
	} else {
		TRY(heap_err(rc));
		TRY(heap_meta_check(v.mv_data, v.mv_size, h->psize,
		                         h->uuid, &h->format));
	}
	for (i = 0; i < HEAP_DBI__COUNT; i++)
		if (i != HEAP_DBI_META)
			TRY(open_dbi(h, txn, i, create));
	rc = heap_err(heap_fault_commit(txn));
	txn = NULL;
out:
	if (txn != NULL)
		mdb_txn_abort(txn);
	return rc;
}

static unsigned mdb_flags(unsigned flags)
{
	unsigned m = MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD;

	if (flags & AH_OPEN_RDONLY)
		m |= MDB_RDONLY;
	else
		m |= MDB_WRITEMAP;
	if (flags & AH_OPEN_NOSYNC)
		m |= MDB_NOSYNC;
	if (flags & AH_OPEN_NOMETASYNC)
		m |= MDB_NOMETASYNC;
	return m;
}

/* Existing file whose catalog the pread checks did not prove: a read-only
 * environment checks it without changing a byte (no WRITEMAP, so no
 * ftruncate), and fails with the error catalog() names. */
static int check_catalog(heap *h, const char *path, unsigned readers)
{
	MDB_env *env = NULL;
	int rc = env_start(h, path,
	                   MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD | MDB_RDONLY,
	                   readers, &env);

	if (rc == 0)
		rc = catalog(h, env, false, false);
	mdb_env_close(env);
	return rc;
}

/* Creates the heap file at path atomically: the environment and its catalog
 * are made under PATH.creating.<pid> (this creator's own name), without
 * WRITEMAP (LMDB then writes with pwrite, so a full disk is an error, not
 * a SIGBUS), committed durably, and published without replacing anything
 * (heap/path.c).  A process killed at any moment leaves either no PATH or
 * a complete empty heap.  *exists is set when another process published
 * the heap first: the caller then opens that one. */
static int create_file(heap *h, const char *path, unsigned readers,
                       bool *exists)
{
	char tmp[PATH_MAX], tmplock[PATH_MAX];
	MDB_env *env = NULL;
	uint64_t map = h->map_bytes;
	int rc, dfd;

	*exists = false;
	if ((rc = heap_path_temp(path, tmp)) != 0)
		return rc;
	if ((size_t)snprintf(tmplock, sizeof tmplock, "%s-lock", tmp) >= sizeof tmplock)
		return AH_EINVAL;
	/* Name a missing or unwritable directory as such (LMDB would only say
	 * it cannot open the file). */
	dfd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (dfd < 0)
		return errno == ENOENT ? AH_ENOTFOUND : heap_err(errno);
	close(dfd);
	unlink(tmp);
	h->map_bytes = 1u << 20;
	rc = heap_space_lockfile(tmp, readers, NULL);
	if (rc == 0)
		rc = env_start(h, tmp, MDB_NOSUBDIR | MDB_NOTLS, readers, &env);
	h->map_bytes = map;
	if (rc == 0)
		rc = catalog(h, env, true, false);
	if (env != NULL)
		mdb_env_close(env);
	if (rc == 0)
		rc = heap_path_publish(tmp, path, exists);
	unlink(tmplock);
	if (rc != 0)
		unlink(tmp);
	return rc;
}

/* The lock file, before the claim (path.c): opened (made if missing, the
 * reader table's blocks reserved: heap_space_lockfile) and kept open as
 * the lock-side claim's descriptor, h->lock_dev/ino its identity.  A lock
 * file another heap of this process uses (its data file renamed or
 * deleted, a new one made under the old name) is refused before anything
 * here opens it, since closing that descriptor again would drop the other
 * heap's LMDB locks; with no heap of this process open (the registry
 * mutex is held) no file can be one, and that stat is skipped. */
static int lock_file(heap *h, const char *path, unsigned readers)
{
	char lock[PATH_MAX];
	struct stat ls;
	bool others = any_registered();
	int rc, fd;

	if ((size_t)snprintf(lock, sizeof lock, "%s-lock", path) >= sizeof lock)
		return AH_EINVAL;
	if (others && stat(lock, &ls) == 0) {
		if (lock_registered(ls.st_dev, ls.st_ino))
			return AH_EBUSY;
		h->lock_dev = ls.st_dev;
		h->lock_ino = ls.st_ino;
	}
	if ((rc = heap_space_lockfile(path, readers, &fd)) != 0)
		return rc;
	if (fd < 0) { /* not writable here: the claim opens it to read */
		if (!others && stat(lock, &ls) == 0) {
			h->lock_dev = ls.st_dev;
			h->lock_ino = ls.st_ino;
		}
		return 0;
	}
	if (fstat(fd, &ls) != 0)
		rc = AH_EIO;
	else if (h->lock_ino != 0 ? ls.st_dev != h->lock_dev ||
	                                    ls.st_ino != h->lock_ino
	                          : others && lock_registered(ls.st_dev,
	                                                      ls.st_ino))
		rc = AH_EBUSY; /* replaced between our checks: try again */
	if (rc != 0) {
		close(fd);
		return rc;
	}
	h->lock_dev = ls.st_dev;
	h->lock_ino = ls.st_ino;
	h->lclaim_fd = fd;
	return 0;
}

/* Every descriptor of the data and lock files that we open ourselves is
 * either closed before LMDB opens the environment or kept (the claims',
 * path.c) until after the environment is closed: closing any descriptor
 * of a file drops all of the process's fcntl locks on it, LMDB's
 * included. */
static int open_locked(heap *h, const char *path, const ah_open_opts *o)
{
	unsigned readers = o->max_readers ? o->max_readers : DEFAULT_READERS;
	struct stat st;
	bool unborn = false, known = false, exists;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if (!(o->flags & AH_OPEN_CREATE))
			return AH_ENOTFOUND;
		if (o->flags & AH_OPEN_RDONLY)
			return AH_EREADONLY;
		rc = create_file(h, path, readers, &exists);
		if (rc != 0)
			return rc;
		/* Published (by us or by a concurrent creator): from here on
		 * it is a heap like any other, which another process may
		 * already be using, so a failure below never removes it. */
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0)
		return heap_err(errno);
	rc = fstat(fd, &st) != 0 ? AH_EIO : 0;
	if (rc == 0 && registered(st.st_dev, st.st_ino))
		rc = AH_EBUSY;
	if (rc == 0 && (o->flags & AH_OPEN_CREATE) &&
	    !(o->flags & AH_OPEN_RDONLY))
		unborn = heap_format_unborn(fd, h->psize, &st);
	if (rc == 0 && !unborn)
		rc = heap_format_precheck(fd, h->psize, &st, &known);
	close(fd);
	TRY(rc);
	h->dev = st.st_dev;
	h->ino = st.st_ino;
	h->map_bytes = heap_space_map_bytes(
		o->max_bytes ? 0 : heap_space_fs_bytes(path, -1), o->max_bytes,
		h->psize);
	TRY(lock_file(h, path, readers));
	/* Before LMDB reads a byte through PATH-lock: refuse if another
	 * process uses this data file through another lock file. */
	TRY(heap_path_claim(h, path));
	/* Only what the pread checks could not prove (a foreign or damaged
	 * catalog, or a walk a live writer kept moving) costs an
	 * environment more. */
	if (!unborn && !known && !(o->flags & AH_OPEN_RDONLY))
		TRY(check_catalog(h, path, readers));
	TRY(env_start(h, path, mdb_flags(o->flags), readers, &h->env));
	TRY(heap_err(mdb_env_get_fd(h->env, &h->fd)));
	{
		MDB_envinfo info;

		TRY(heap_err(mdb_env_info(h->env, &info)));
		h->map_bytes = info.me_mapsize;
	}
	TRY(catalog(h, h->env, unborn, true));
out:
	if (rc != 0) {
		if (h->env != NULL)
			mdb_env_close(h->env);
		h->env = NULL;
		heap_path_unclaim(h);
	}
	return rc;
}

int heap_open(const char *path, const ah_open_opts *opts, heap **out)
{
	ah_open_opts o;
	heap *h = NULL;
	int rc = 0;

	if (path == NULL || out == NULL || *path == '\0')
		return AH_EINVAL;
	*out = NULL;
	memset(&o, 0, sizeof o);
	if (opts != NULL) {
		if (opts->size < offsetof(ah_open_opts, max_bytes))
			return AH_EINVAL;
		memcpy(&o, opts,
		       opts->size < sizeof o ? opts->size : sizeof o);
	}
	if (o.flags & ~OPEN_FLAGS)
		return AH_EINVAL;
	set_debug();
	h = calloc(1, sizeof *h);
	if (h == NULL)
		return AH_ENOMEM;
	h->pid = self();
	h->flags = o.flags;
	h->max_bytes = o.max_bytes;
	h->psize = (uint32_t)sysconf(_SC_PAGESIZE);
	h->fd = -1;
	h->claim_fd = -1;
	h->lclaim_fd = -1;
	if (pthread_mutex_init(&h->mu, NULL) != 0) {
		free(h);
		return AH_ENOMEM;
	}
	char real[PATH_MAX];

	if ((rc = heap_path_resolve(path, real)) != 0) {
		pthread_mutex_destroy(&h->mu);
		free(h);
		return rc;
	}
	pthread_mutex_lock(&registry_mu);
	rc = open_locked(h, real, &o);
	if (rc == 0) {
		h->reg_next = registry;
		registry = h;
	}
	pthread_mutex_unlock(&registry_mu);
	/* A writable open of a format-1 heap makes it format 2 (heap.h). */
	if (rc == 0 && h->format < HEAP_FORMAT_BASE &&
	    !(o.flags & AH_OPEN_RDONLY) && (rc = heap_upgrade(h)) != 0) {
		heap_close(h);
		return rc;
	}
	if (rc != 0) {
		pthread_mutex_destroy(&h->mu);
		free(h);
		return rc;
	}
	*out = h;
	return 0;
}

int heap_close(heap *h)
{
	int rc;

	if (h == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc; /* the child only forgets the handle */
	pthread_mutex_lock(&h->mu);
	rc = h->ntxn > 0 ? AH_ESTATE : 0;
	pthread_mutex_unlock(&h->mu);
	if (rc != 0)
		return rc;
	pthread_mutex_lock(&registry_mu);
	unregister(h);
	pthread_mutex_unlock(&registry_mu);
	mdb_env_close(h->env);
	heap_path_unclaim(h);
	heap_vcache_free(h);
	if (h->aux != NULL)
		h->aux_free(h->aux);
	free(h->wbuf);
	pool_destroy(h->pool);
	pthread_mutex_destroy(&h->mu);
	free(h);
	return 0;
}

int heap_sync(heap *h)
{
	int rc;

	if (h == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	if (h->flags & AH_OPEN_RDONLY)
		return 0;
	return heap_err(HEAP_MDB(mdb_env_sync(h->env, 1)));
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
	TRY(heap_err(mdb_env_set_mapsize(h->env, map)));
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
	st->format_version = h->format;
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
