/*
 * heap/env.c - the heap's lifecycle: open (with the format checks of
 * format.c) and close, the lock-file protocol around LMDB's environment,
 * and the process-wide registry of open heap files.  The environment and
 * its catalog are env_catalog.c's; sync, the size limit, statistics and
 * the handle's accessors env_ops.c's.
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
 * (heap_env_create_file, env_catalog.c), so a process killed inside
 * ah_open never leaves a half-made PATH; a heap this open created is
 * unlinked again if the rest of the open fails.  An LMDB
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
#define DEFAULT_READERS 126

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
	if ((rc = heap_space_lockfile(path, readers, &fd, &ls)) != 0)
		return rc;
	if (fd < 0) { /* not writable here: the claim opens it to read */
		if (!others && stat(lock, &ls) == 0) {
			h->lock_dev = ls.st_dev;
			h->lock_ino = ls.st_ino;
		}
		return 0;
	}
	if (ls.st_ino == 0 && fstat(fd, &ls) != 0) /* else the fstat it took */
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
	int fd, rc, resize_fd = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if (!(o->flags & AH_OPEN_CREATE))
			return AH_ENOTFOUND;
		if (o->flags & AH_OPEN_RDONLY)
			return AH_EREADONLY;
		rc = heap_env_create_file(h, path, readers, &exists);
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
	if (rc != 0) {
		close(fd);
		return rc;
	}
	h->dev = st.st_dev;
	h->ino = st.st_ino;
	h->map_bytes = heap_space_map_bytes(
		o->max_bytes ? 0 : heap_space_fs_bytes(path, -1), o->max_bytes,
		h->psize);
	if ((rc = lock_file(h, path, readers)) != 0) {
		close(fd);
		goto out;
	}
	/* Before LMDB reads a byte through PATH-lock: refuse if another
	 * process uses this data file through another lock file.  The
	 * pre-check's descriptor is the claim's (kept or closed there): it
	 * is the file whose identity was checked, and no LMDB lock exists
	 * yet that closing it could drop. */
	/* A writable open holds the map-size lock (path.c) exclusive from
	 * before its claim to after its environment's start: LMDB truncates
	 * the file to the map there, so the map must not be smaller than the
	 * file while another process has the heap open, and that other
	 * process's open must not run between our look and our truncate.  A
	 * read-only environment never truncates. */
	if (!(o->flags & AH_OPEN_RDONLY)) {
		resize_fd = open(path, O_RDWR | O_CLOEXEC);
		if (resize_fd < 0 ||
		    (rc = heap_path_resize_lock(resize_fd, true)) != 0) {
			rc = resize_fd < 0 ? heap_err(errno) : rc;
			close(fd);
			goto out;
		}
		h->resize_held = true;
	}
	TRY(heap_path_claim(h, path, fd));
	if (!(o->flags & AH_OPEN_RDONLY) && heap_path_shared(h)) {
		struct stat now;

		if ((h->claim_fd >= 0 ? fstat(h->claim_fd, &now)
		                      : stat(path, &now)) != 0) {
			rc = AH_EIO;
			goto out;
		}
		if ((uint64_t)now.st_size > h->map_bytes)
			h->map_bytes = ((uint64_t)now.st_size + h->psize - 1) /
			               h->psize * h->psize;
	}
	/* Only what the pread checks could not prove (a foreign or damaged
	 * catalog, or a walk a live writer kept moving) costs an
	 * environment more. */
	if (!unborn && !known && !(o->flags & AH_OPEN_RDONLY))
		TRY(heap_env_check_catalog(h, path, readers));
	TRY(heap_env_start(h, path, mdb_flags(o->flags), readers, &h->env));
	TRY(heap_err(mdb_env_get_fd(h->env, &h->fd)));
	{
		MDB_envinfo info;

		TRY(heap_err(mdb_env_info(h->env, &info)));
		h->map_bytes = info.me_mapsize;
	}
	TRY(heap_env_catalog(h, h->env, unborn, true));
out:
	h->resize_held = false;
	if (resize_fd >= 0)
		close(resize_fd); /* its lock with it (OFD: only this one) */
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
	if ((rc = heap_flush_init(h)) != 0) {
		heap_close(h);
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
	heap_flush_free(h); /* it syncs LMDB's descriptor: stopped first */
	mdb_env_close(h->env);
	heap_path_unclaim(h);
	heap_vcache_free(h);
	if (h->aux != NULL)
		h->aux_free(h->aux);
	heap_wb_free(h);
	pool_destroy(h->pool);
	pthread_mutex_destroy(&h->mu);
	free(h);
	return 0;
}
