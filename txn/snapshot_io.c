/*
 * txn/snapshot_io.c - the files of a snapshot directory, for push
 * (snapshot.c), restore (snapshot_restore.c), foreach and prune
 * (snapshot_prune.c): errno translation, paths, whole reads and durable
 * writes, the DIR/lock flock, DIR/tmp sweeping, object names, and the
 * listing and loading of manifests (their text: manifest.c).  Layout of
 * DIR: the top of snapshot.c.
 *
 * It must never leave a file it wrote without fsync, and never hand out a
 * manifest it did not parse and check whole (mf_parse).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "txn/snapshot.h"
#include "txn/txn.h"

void snap_say(ah_snapshot_info *si, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(si->message, sizeof si->message, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------ files */

int snap_errno_rc(int e)
{
	switch (e) {
	case ENOENT: case ENOTDIR: return AH_ENOTFOUND;
	case EEXIST: return AH_EEXIST;
	case EACCES: case EPERM: case EROFS: return AH_EREADONLY;
	case ENOSPC: case EDQUOT: return AH_EFULL;
	case ENOMEM: return AH_ENOMEM;
	case ENAMETOOLONG: return AH_EINVAL;
	default: return AH_EIO;
	}
}

int snap_join(char *out, const char *dir, const char *a, const char *b)
{
	int n = snprintf(out, PATH_MAX, "%s/%s%s%s", dir, a, b ? "/" : "",
	                 b ? b : "");

	return n < 0 || n >= PATH_MAX ? AH_EINVAL : 0;
}

int snap_sync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return snap_errno_rc(errno);
	if (fsync(fd) != 0)
		rc = snap_errno_rc(errno);
	close(fd);
	return rc;
}

static int write_all(int fd, const void *p, size_t len)
{
	const char *s = p;

	while (len > 0) {
		ssize_t n = write(fd, s, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? snap_errno_rc(errno) : AH_EIO;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

int snap_read_all(int fd, void *p, size_t len)
{
	char *s = p;

	while (len > 0) {
		ssize_t n = read(fd, s, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return snap_errno_rc(errno);
		if (n == 0)
			return AH_ECORRUPT; /* shorter than it said */
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The whole file at path, malloc'd, NUL-terminated. */
static int slurp(const char *path, char **out, size_t *len)
{
	struct stat st;
	char *p;
	/* O_NONBLOCK: a FIFO put there must not block the open. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), rc;

	if (fd < 0)
		return snap_errno_rc(errno);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return AH_ECORRUPT;
	}
	if ((p = malloc((size_t)st.st_size + 1)) == NULL) {
		close(fd);
		return AH_ENOMEM;
	}
	rc = snap_read_all(fd, p, (size_t)st.st_size);
	close(fd);
	if (rc != 0) {
		free(p);
		return rc;
	}
	p[st.st_size] = '\0';
	*out = p;
	*len = (size_t)st.st_size;
	return 0;
}

/* DIR/lock, flocked: LOCK_SH or LOCK_EX.  -1 and *rc on failure.  With
 * need false (a restore, which only reads DIR) the lock is taken only
 * when the file exists and can be opened: a DIR copied from an object
 * store has none, and nobody prunes it meanwhile. */
int snap_lock_dir(const char *dir, int how, bool need, int *rc)
{
	char path[PATH_MAX];
	int fd;

	if ((*rc = snap_join(path, dir, "lock", NULL)) != 0)
		return -1;
	/* A restore only reads DIR: it takes the lock when there is one. */
	fd = need ? open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644)
	          : open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (!need && (errno == EACCES || errno == EROFS || errno == ENOENT)) {
			*rc = 0;
			return -1;
		}
		*rc = snap_errno_rc(errno);
		return -1;
	}
	while (flock(fd, how) != 0) {
		if (errno == EINTR)
			continue;
		*rc = snap_errno_rc(errno);
		close(fd);
		return -1;
	}
	return fd;
}

/* Removes DIR/tmp files of processes that are gone (all of them when
 * all: prune holds the exclusive lock, so no push is running). */
void snap_sweep_tmp(const char *dir, bool all)
{
	char tdir[PATH_MAX], p[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (snap_join(tdir, dir, "tmp", NULL) != 0 || (d = opendir(tdir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long pid;

		if (e->d_name[0] == '.')
			continue;
		pid = strtol(e->d_name, &end, 10);
		if (!all && (pid <= 0 || *end != '.' ||
		             kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue;
		if (snap_join(p, tdir, e->d_name, NULL) == 0)
			unlink(p);
	}
	closedir(d);
}

void snap_object_name(uint64_t id, uint64_t xxh3, char out[40])
{
	snprintf(out, 40, "%016" PRIx64 "-%016" PRIx64, id, xxh3);
}

/* ------------------------------------------------------- manifests */

static int by_id(const void *a, const void *b)
{
	return strcmp(((const snap_name *)a)->id, ((const snap_name *)b)->id);
}

/* The manifest names in DIR/manifests, sorted (by UUID8, then SEQ). */
int snap_list_manifests(const char *dir, snap_name **out, size_t *n)
{
	char mdir[PATH_MAX];
	struct dirent *e;
	snap_name *v = NULL, *q;
	size_t cap = 0;
	DIR *d;
	int rc;

	*out = NULL;
	*n = 0;
	if ((rc = snap_join(mdir, dir, "manifests", NULL)) != 0)
		return rc;
	if ((d = opendir(mdir)) == NULL) {
		struct stat st;

		if (errno == ENOENT && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
			return 0; /* a DIR nothing was pushed to yet */
		return snap_errno_rc(errno);
	}
	while ((e = readdir(d)) != NULL) {
		if (!mf_id_valid(e->d_name))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			if ((q = realloc(v, cap * sizeof *v)) == NULL) {
				closedir(d);
				free(v);
				return AH_ENOMEM;
			}
			v = q;
		}
		memcpy(v[*n].id, e->d_name, 16);
		v[*n].seq = strtoull(e->d_name + 9, NULL, 10);
		(*n)++;
	}
	closedir(d);
	if (*n > 1)
		qsort(v, *n, sizeof *v, by_id);
	*out = v;
	return 0;
}

int snap_load_manifest(const char *dir, const char *id, manifest *m)
{
	char path[PATH_MAX], *text = NULL;
	size_t len = 0;
	int rc;

	memset(m, 0, sizeof *m);
	if ((rc = snap_join(path, dir, "manifests", id)) != 0 ||
	    (rc = slurp(path, &text, &len)) != 0)
		return rc;
	rc = mf_parse(text, len, m);
	free(text);
	if (rc == 0 && strcmp(m->info.id, id) != 0)
		rc = AH_ECORRUPT; /* a manifest under another's name */
	return rc;
}

/* A new file tmp holding exactly v[0, len), fsync'd.  On failure tmp may
 * be left: the caller unlinks it. */
int snap_write_durable(const char *tmp, const void *v, size_t len)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc;

	if (fd < 0)
		return snap_errno_rc(errno);
	rc = write_all(fd, v, len);
	if (rc == 0 && fsync(fd) != 0)
		rc = snap_errno_rc(errno);
	if (close(fd) != 0 && rc == 0)
		rc = snap_errno_rc(errno);
	return rc;
}

const char *const snap_table_word[4] = { "arr", "batch", "source", "hold" };
_Static_assert(MF_T_HOLD == (int)HEAP_T_HOLD && MF_T_SOURCE == (int)HEAP_T_SOURCE,
               "manifest record tags are the heap's table numbers");

