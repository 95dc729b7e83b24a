/*
 * heap/path.c - one heap file, one name for its lock: path resolution, the
 * publication of a newly created heap, and the opener claim that refuses
 * a second lock file for the same data file.
 *
 * LMDB (MDB_NOSUBDIR) names the lock file after the path it is given,
 * PATH-lock, and the lock file holds the writer mutex and the reader
 * table.  Two processes that reach one data file through different names
 * (a symlink, a hard link, a file renamed while open, a lock file deleted
 * and recreated) would each get their own lock file: two writers at once,
 * and a writer that reuses pages a reader still sees.  So:
 *
 *  1. heap_path_resolve turns the caller's path into the canonical one
 *     (realpath: symlinks, ".", "..", relative paths), so every name that
 *     resolves to the same directory entry shares PATH-lock.
 *  2. heap_path_claim covers what no name can: every opener takes a shared
 *     open-file-description lock (F_OFD_SETLK, F_RDLCK, one byte) on the
 *     DATA file at an offset far beyond its end that is a hash of the
 *     lock file's (dev, inode), then probes the rest of that range for
 *     another opener's byte (F_OFD_GETLK: once over the whole range, which
 *     a lone opener finds free; each side of its own byte only when what
 *     it finds is that byte, held through the same lock file).  Openers through the same lock
 *     file hold the same byte and never conflict; an opener through
 *     another lock file finds the other byte and is refused with
 *     AH_EBUSY before it reads or writes anything.  Each opener locks
 *     before it probes, so of two simultaneous openers at least the
 *     second sees the first.  OFD locks belong to the descriptor, not the
 *     process, so they survive LMDB's fcntl locking and its closes; LMDB
 *     itself never locks the data file (only PATH-lock), so nothing
 *     interferes.
 *     The same claim runs the other way on the LOCK file: every opener
 *     also takes a shared OFD lock on PATH-lock at an offset that is a
 *     hash of the DATA file's (dev, inode), and probes for another's.
 *     So one lock file never serves two data files at once: a heap
 *     renamed or deleted while open, and a new heap created under the
 *     old name, would otherwise share the first one's writer mutex,
 *     reader table and commit counter (lost commits; found by outside
 *     testing).  The second opener is refused with AH_EBUSY.
 *  3. heap_path_publish moves a heap made under a temporary name into
 *     place without ever replacing an existing file (renameat2
 *     RENAME_NOREPLACE, or link + unlink), so of two processes creating
 *     the same heap at once one publishes and the other opens that heap;
 *     neither deletes the other's file.
 *
 * This file must never close a descriptor of a lock file that an LMDB
 * environment of this process has open (closing any descriptor of a file
 * drops the process's fcntl locks on it, LMDB's included): the one the
 * lock-file claim uses (env.c's, kept from heap_space_lockfile, or one
 * opened here) is opened only when no heap of this process uses that lock
 * file (env.c checks under the registry mutex) and closed only after this
 * heap's environment is closed; and it must never
 * unlink a file it did not create in this call.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heap/heap_int.h"

/* The claim bytes: [CLAIM_BASE, CLAIM_BASE + CLAIM_SLOTS) of the data
 * file, far past any real file size (off_t is signed 64-bit). */
#define CLAIM_BASE ((off_t)1 << 61)
#define CLAIM_SLOTS ((off_t)1 << 40)

int heap_path_resolve(const char *path, char out[PATH_MAX])
{
	char dir[PATH_MAX], rdir[PATH_MAX];
	const char *base;
	struct stat st;

	if (realpath(path, out) != NULL)
		return 0;
	if (errno != ENOENT)
		return errno == ENAMETOOLONG ? AH_EINVAL : heap_err(errno);
	if (lstat(path, &st) == 0) {
		/* There now: another creator published it after realpath
		 * looked (outside testing: concurrent creators got
		 * AH_ENOTFOUND), or a symlink whose target appeared.  Still
		 * missing behind a symlink: a dangling one. */
		if (realpath(path, out) != NULL)
			return 0;
		if (errno != ENOENT)
			return errno == ENAMETOOLONG ? AH_EINVAL : heap_err(errno);
		if (S_ISLNK(st.st_mode))
			return AH_ENOTFOUND; /* its target is missing */
		/* A file that came and went: resolve it as one to create. */
	}
	/* A file to be created: resolve its directory, keep its name. */
	if (strlen(path) >= sizeof dir)
		return AH_EINVAL;
	strcpy(dir, path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL) {
		strcpy(dir, ".");
		base = path;
	} else {
		base = path + (slash - dir) + 1;
		if (slash == dir)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return AH_EINVAL;
	if (realpath(dir, rdir) == NULL)
		return errno == ENOENT || errno == ENOTDIR ? AH_ENOTFOUND
		                                           : heap_err(errno);
	if ((size_t)snprintf(out, PATH_MAX, "%s/%s",
	                     strcmp(rdir, "/") == 0 ? "" : rdir, base) >= PATH_MAX)
		return AH_EINVAL;
	return 0;
}

/* FNV-1a over a file's identity: the claim byte's slot. */
static off_t claim_slot(dev_t dev, ino_t ino)
{
	uint64_t x = 1469598103934665603ull, v[2] = { (uint64_t)dev,
	                                             (uint64_t)ino };
	const unsigned char *p = (const unsigned char *)v;

	for (size_t i = 0; i < sizeof v; i++)
		x = (x ^ p[i]) * 1099511628211ull;
	return (off_t)(x & (uint64_t)(CLAIM_SLOTS - 1));
}

/* Another open file description holds a claim byte in [start, start+len)? */
static int probe(int fd, off_t start, off_t len, bool *other)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
	                    .l_start = start, .l_len = len };

	*other = false;
	if (len == 0)
		return 0;
	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return errno;
	*other = fl.l_type != F_UNLCK;
	return 0;
}

/* Takes the claim byte at slot on fd and looks for another opener's byte
 * anywhere else in the range.  One probe of the whole range first: fd's
 * own lock never conflicts with itself (OFD locks), so a free range means
 * no other byte, the common case of a lone opener.  A conflict that is
 * exactly our byte is an opener through the same lock file (it holds the
 * same byte): then each side of it is probed.  Returns 0, AH_EBUSY, or an
 * errno (EINVAL, ENOLCK, EOPNOTSUPP: no OFD locks here). */
static int claim_on(int fd, off_t slot)
{
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET,
	                    .l_start = CLAIM_BASE + slot, .l_len = 1 };
	bool other = false;
	int err;

	if (fcntl(fd, F_OFD_SETLK, &fl) != 0)
		return errno;
	fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET,
	                     .l_start = CLAIM_BASE, .l_len = CLAIM_SLOTS };
	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return errno;
	if (fl.l_type == F_UNLCK)
		return 0;
	if (fl.l_start != CLAIM_BASE + slot || fl.l_len != 1)
		return AH_EBUSY;
	err = probe(fd, CLAIM_BASE, slot, &other);
	if (err == 0 && !other)
		err = probe(fd, CLAIM_BASE + slot + 1, CLAIM_SLOTS - slot - 1,
		            &other);
	return err != 0 ? err : other ? AH_EBUSY : 0;
}

static bool no_ofd_locks(int err)
{
	return err == EINVAL || err == ENOLCK || err == EOPNOTSUPP;
}

int heap_path_claim(heap *h, const char *path, int fd)
{
	char lock[PATH_MAX];
	struct stat ds, ls;
	int err;

	if ((size_t)snprintf(lock, sizeof lock, "%s-lock", path) >= sizeof lock) {
		if (fd >= 0)
			close(fd);
		return AH_EINVAL;
	}
	if (fd < 0) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return heap_err(errno);
		if (fstat(fd, &ds) != 0) {
			close(fd);
			return AH_EIO;
		}
		if (ds.st_dev != h->dev || ds.st_ino != h->ino) {
			close(fd); /* replaced between our checks: try again */
			return AH_EBUSY;
		}
	}
	/* The lock file's identity as heap_open found it (its descriptor's
	 * identity is compared with it below, before anything relies on it).
	 * No lock file (a read-only heap on a read-only filesystem, where
	 * LMDB runs without one): nobody can write, slot 0 stands for it. */
	err = claim_on(fd, h->lock_ino != 0 ? claim_slot(h->lock_dev,
	                                                  h->lock_ino) : 0);
	if (err != 0) {
		close(fd);
		/* A filesystem without OFD locks: the names' rule (1.) is all
		 * that protects the heap there. */
		if (no_ofd_locks(err))
			return 0;
		return err == AH_EBUSY ? err : heap_err(err);
	}
	h->claim_fd = fd;
	/* The lock file's side: one data file per lock file, on the
	 * descriptor env.c kept (its identity checked there) or on one
	 * opened to read here (a lock file not writable here). */
	if (h->lclaim_fd < 0 && h->lock_ino != 0 &&
	    (fd = open(lock, O_RDONLY | O_CLOEXEC)) >= 0) {
		if (fstat(fd, &ls) != 0 || ls.st_dev != h->lock_dev ||
		    ls.st_ino != h->lock_ino) {
			close(fd); /* replaced between our checks: try again */
			heap_path_unclaim(h);
			return AH_EBUSY;
		}
		h->lclaim_fd = fd;
	}
	if (h->lclaim_fd < 0)
		return 0;
	err = claim_on(h->lclaim_fd, claim_slot(h->dev, h->ino));
	if (no_ofd_locks(err))
		return 0; /* no OFD locks here: as above */
	if (err != 0) {
		heap_path_unclaim(h);
		return err == AH_EBUSY ? err : heap_err(err);
	}
	return 0;
}

void heap_path_unclaim(heap *h)
{
	if (h->claim_fd >= 0)
		close(h->claim_fd);
	h->claim_fd = -1;
	if (h->lclaim_fd >= 0)
		close(h->lclaim_fd);
	h->lclaim_fd = -1;
}

/* The map-size lock: one byte of the data file below the claim range.
 * LMDB (MDB_WRITEMAP) truncates the data file to its map at every
 * mdb_env_open and mdb_env_set_mapsize, also below the size another
 * process maps: that process then dies of SIGBUS on its next store past
 * the new end (found by outside testing).  So a map is made smaller than
 * the file only by a handle alone on the heap, and every step that may
 * truncate holds this byte exclusive from its look at the file and the
 * other openers to its remap: a writable open from before its claim to
 * after its environment's start, a shrinking ah_set_max_bytes, and the
 * remap after MDB_MAP_RESIZED (which maps the file's size, never less,
 * heap_path_adopt_map).  None runs inside another. */
#define RESIZE_BYTE (CLAIM_BASE - 1)

static int resize_lock(int fd, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
	                    .l_start = RESIZE_BYTE, .l_len = 1 };
	int err;

	do
		err = fcntl(fd, F_OFD_SETLKW, &fl) != 0 ? errno : 0;
	while (err == EINTR);
	return no_ofd_locks(err) ? 0 : err;
}

int heap_path_resize_lock(int fd, bool exclusive)
{
	return heap_err(resize_lock(fd, exclusive ? F_WRLCK : F_RDLCK));
}

void heap_path_resize_unlock(int fd)
{
	(void)resize_lock(fd, F_UNLCK);
}

bool heap_path_shared(const heap *h)
{
	bool other = true;

	/* Another open file description holding our claim byte (an opener
	 * through the same lock file, in another process: this process
	 * opens a file once).  Without a claim (no OFD locks here) nobody
	 * can be ruled out. */
	if (h->claim_fd < 0)
		return true;
	if (probe(h->claim_fd, CLAIM_BASE + (h->lock_ino != 0 ?
	          claim_slot(h->lock_dev, h->lock_ino) : 0), 1, &other) != 0)
		return true;
	return other;
}

int heap_path_adopt_map(heap *h, MDB_env *env, bool writable)
{
	struct stat fs;
	MDB_envinfo info;
	int rc;

	/* LMDB asks for a remap (MDB_MAP_RESIZED) when another process's
	 * commits outgrew our map.  mdb_env_set_mapsize(env, 0) would map
	 * the size the last committer recorded, below the file another
	 * process may have grown since (and truncate it there): map the
	 * file's size instead, never less than ours, under the map-size
	 * lock so that no shrink runs meanwhile. */
	bool lock = writable && !h->resize_held; /* the open holds it */

	if (lock && (rc = heap_path_resize_lock(h->fd, true)) != 0)
		return rc;
	rc = fstat(h->fd, &fs) != 0 ? AH_EIO : 0;
	if (rc == 0)
		rc = heap_err(mdb_env_info(env, &info));
	if (rc == 0) {
		uint64_t map = (uint64_t)fs.st_size > info.me_mapsize ?
		               (uint64_t)fs.st_size : info.me_mapsize;
		map = (map + h->psize - 1) / h->psize * h->psize;
		rc = heap_err(mdb_env_set_mapsize(env, map));
	}
	if (rc == 0)
		rc = heap_err(mdb_env_info(env, &info));
	if (rc == 0)
		h->map_bytes = info.me_mapsize;
	if (lock)
		heap_path_resize_unlock(h->fd);
	return rc;
}

/* Removes PATH.creating.<pid> files (and their locks) left by creators
 * that died: a pid that no longer exists.  Best effort. */
static void sweep_stale(const char *path)
{
	char dir[PATH_MAX], name[PATH_MAX];
	const char *base = strrchr(path, '/');
	size_t blen;
	DIR *d;
	struct dirent *e;

	if (base == NULL || (size_t)(base - path) >= sizeof dir)
		return;
	memcpy(dir, path, (size_t)(base - path));
	dir[base - path] = '\0';
	if (dir[0] == '\0')
		strcpy(dir, "/");
	base++;
	blen = strlen(base);
	if ((d = opendir(dir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		const char *s = e->d_name;
		char *end;
		long pid;

		if (strncmp(s, base, blen) != 0 ||
		    strncmp(s + blen, ".creating.", 10) != 0)
			continue;
		pid = strtol(s + blen + 10, &end, 10);
		/* PATH.creating.PID, its -lock, and files made under that
		 * name in turn (a restore creates its heap at
		 * PATH.creating.PID: PATH.creating.PID.creating.PID...). */
		if (pid <= 0 || (*end != '\0' && strcmp(end, "-lock") != 0 &&
		                 strncmp(end, ".creating.", 10) != 0))
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if ((size_t)snprintf(name, sizeof name, "%s/%s",
		                     strcmp(dir, "/") == 0 ? "" : dir, s) < sizeof name)
			unlink(name);
	}
	closedir(d);
}

int heap_path_temp(const char *path, char tmp[PATH_MAX])
{
	char lock[PATH_MAX];

	if ((size_t)snprintf(tmp, PATH_MAX, "%s.creating.%d", path,
	                     (int)getpid()) >= PATH_MAX ||
	    (size_t)snprintf(lock, sizeof lock, "%s-lock", tmp) >= sizeof lock)
		return AH_EINVAL;
	sweep_stale(path);
	/* Our own pid's leftovers are a dead process's (pids are reused);
	 * within this process, heap_open is serialized. */
	unlink(tmp);
	unlink(lock);
	return 0;
}

int heap_path_publish(const char *tmp, const char *path, bool *exists)
{
	char dir[PATH_MAX];
	int rc = 0, dfd;

	*exists = false;
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) != 0) {
		int err = errno;
		bool linked = false;

		if (err == EINVAL || err == ENOSYS) {
			/* No RENAME_NOREPLACE here: link never replaces. */
			err = link(tmp, path) == 0 ? 0 : errno;
			linked = err == 0;
		}
		if (err == EEXIST) {
			*exists = true; /* another creator won: open its heap */
			unlink(tmp);
			return 0;
		}
		if (err != 0)
			return heap_err(err);
		if (linked)
			unlink(tmp);
	}
	/* The new name must survive a power loss. */
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else if (slash != NULL)
		*slash = '\0';
	else
		strcpy(dir, ".");
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) != 0)
			rc = AH_EIO;
		close(dfd);
	}
	return rc;
}
