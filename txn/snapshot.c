/*
 * txn/snapshot.c - incremental snapshots in a directory of plain files
 * (include/arrheap.h "snapshots"; ARCHITECTURE.md §2 and §9): push,
 * restore, foreach, prune.  The manifest's text is txn/manifest.c.
 *
 *   DIR/objects/ID-XXH3   a chunk's stored value (ID 16 hex digits, XXH3
 *                         its header checksum, 16 hex digits)
 *   DIR/manifests/SNAP    a snapshot, published last with link(2)
 *   DIR/tmp/PID.N         files being written; a dead pid's are removed
 *   DIR/lock              flock: pushes and restores shared, prune
 *                         exclusive
 *
 * It must never publish a manifest before every object it names is
 * durable, never replace a manifest, never delete an object a manifest
 * names (prune waits for pushes), and never leave a restored heap at
 * PATH that is not whole and verified.
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
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "txn/snapshot.h"
#include "txn/txn.h"

static void say(ah_snapshot_info *si, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void say(ah_snapshot_info *si, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(si->message, sizeof si->message, fmt, ap);
	va_end(ap);
}
#define SAY say

/* ------------------------------------------------------------ files */

static int errno_rc(int e)
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

static int join(char *out, const char *dir, const char *a, const char *b)
{
	int n = snprintf(out, PATH_MAX, "%s/%s%s%s", dir, a, b ? "/" : "",
	                 b ? b : "");

	return n < 0 || n >= PATH_MAX ? AH_EINVAL : 0;
}

static int sync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return errno_rc(errno);
	if (fsync(fd) != 0)
		rc = errno_rc(errno);
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
			return n < 0 ? errno_rc(errno) : AH_EIO;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t len)
{
	char *s = p;

	while (len > 0) {
		ssize_t n = read(fd, s, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno_rc(errno);
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
		return errno_rc(errno);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return AH_ECORRUPT;
	}
	if ((p = malloc((size_t)st.st_size + 1)) == NULL) {
		close(fd);
		return AH_ENOMEM;
	}
	rc = read_all(fd, p, (size_t)st.st_size);
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
static int lock_dir(const char *dir, int how, bool need, int *rc)
{
	char path[PATH_MAX];
	int fd;

	if ((*rc = join(path, dir, "lock", NULL)) != 0)
		return -1;
	/* A restore only reads DIR: it takes the lock when there is one. */
	fd = need ? open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644)
	          : open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (!need && (errno == EACCES || errno == EROFS || errno == ENOENT)) {
			*rc = 0;
			return -1;
		}
		*rc = errno_rc(errno);
		return -1;
	}
	while (flock(fd, how) != 0) {
		if (errno == EINTR)
			continue;
		*rc = errno_rc(errno);
		close(fd);
		return -1;
	}
	return fd;
}

static int make_dirs(const char *dir)
{
	char p[PATH_MAX];
	static const char *const sub[] = { "objects", "manifests", "tmp" };
	int rc;

	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return errno_rc(errno);
	for (int i = 0; i < 3; i++) {
		if ((rc = join(p, dir, sub[i], NULL)) != 0)
			return rc;
		if (mkdir(p, 0755) != 0 && errno != EEXIST)
			return errno_rc(errno);
	}
	return 0;
}

/* Removes DIR/tmp files of processes that are gone (all of them when
 * all: prune holds the exclusive lock, so no push is running). */
static void sweep_tmp(const char *dir, bool all)
{
	char tdir[PATH_MAX], p[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (join(tdir, dir, "tmp", NULL) != 0 || (d = opendir(tdir)) == NULL)
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
		if (join(p, tdir, e->d_name, NULL) == 0)
			unlink(p);
	}
	closedir(d);
}

static void object_name(uint64_t id, uint64_t xxh3, char out[40])
{
	snprintf(out, 40, "%016" PRIx64 "-%016" PRIx64, id, xxh3);
}

/* ------------------------------------------------------- manifests */

typedef struct snap_name {
	char id[AH_SNAPSHOT_ID_MAX];
	uint64_t seq;
} snap_name;

static int by_id(const void *a, const void *b)
{
	return strcmp(((const snap_name *)a)->id, ((const snap_name *)b)->id);
}

/* The manifest names in DIR/manifests, sorted (by UUID8, then SEQ). */
static int list_manifests(const char *dir, snap_name **out, size_t *n)
{
	char mdir[PATH_MAX];
	struct dirent *e;
	snap_name *v = NULL, *q;
	size_t cap = 0;
	DIR *d;
	int rc;

	*out = NULL;
	*n = 0;
	if ((rc = join(mdir, dir, "manifests", NULL)) != 0)
		return rc;
	if ((d = opendir(mdir)) == NULL) {
		struct stat st;

		if (errno == ENOENT && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
			return 0; /* a DIR nothing was pushed to yet */
		return errno_rc(errno);
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

static int load_manifest(const char *dir, const char *id, manifest *m)
{
	char path[PATH_MAX], *text = NULL;
	size_t len = 0;
	int rc;

	memset(m, 0, sizeof *m);
	if ((rc = join(path, dir, "manifests", id)) != 0 ||
	    (rc = slurp(path, &text, &len)) != 0)
		return rc;
	rc = mf_parse(text, len, m);
	free(text);
	if (rc == 0 && strcmp(m->info.id, id) != 0)
		rc = AH_ECORRUPT; /* a manifest under another's name */
	return rc;
}

/* ------------------------------------------------------------- push */

typedef struct push {
	const char *dir;
	char objdir[PATH_MAX], tmpdir[PATH_MAX];
	manifest parent;          /* known objects: an earlier snapshot's */
	size_t pi;                /* merge position in parent.obj */
	bool have_parent;
	uint64_t objects, bytes, objects_new, bytes_new;
	sbuf body;
} push;

static int tmp_path(push *p, char out[PATH_MAX])
{
	/* One counter for the process: pushes in several threads at once
	 * never pick the same name. */
	static unsigned long counter;
	char name[64];

	snprintf(name, sizeof name, "%d.%lu", (int)getpid(),
	         __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
	return join(out, p->tmpdir, name, NULL);
}

/* Does DIR/objects/name hold exactly these bytes? */
static bool object_matches(const char *path, uint64_t bytes, XXH128_hash_t h)
{
	struct stat st;
	XXH3_state_t *s;
	char buf[1 << 16];
	bool ok = false;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return false;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size == bytes &&
	    (s = XXH3_createState()) != NULL) {
		ssize_t n;

		XXH3_128bits_reset(s);
		while ((n = read(fd, buf, sizeof buf)) > 0)
			XXH3_128bits_update(s, buf, (size_t)n);
		if (n == 0) {
			XXH128_hash_t g = XXH3_128bits_digest(s);

			ok = g.high64 == h.high64 && g.low64 == h.low64;
		}
		XXH3_freeState(s);
	}
	close(fd);
	return ok;
}

/* A new file tmp holding exactly v[0, len), fsync'd.  On failure tmp may
 * be left: the caller unlinks it. */
static int write_durable(const char *tmp, const void *v, size_t len)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), rc;

	if (fd < 0)
		return errno_rc(errno);
	rc = write_all(fd, v, len);
	if (rc == 0 && fsync(fd) != 0)
		rc = errno_rc(errno);
	if (close(fd) != 0 && rc == 0)
		rc = errno_rc(errno);
	return rc;
}

static int write_object(push *p, const char *final, const void *v,
                        size_t len)
{
	char tmp[PATH_MAX];
	int rc;

	if ((rc = tmp_path(p, tmp)) != 0)
		return rc;
	rc = write_durable(tmp, v, len);
	if (rc == 0 && rename(tmp, final) != 0)
		rc = errno_rc(errno);
	if (rc != 0)
		unlink(tmp);
	return rc;
}

/* One chunk into the snapshot: named from the parent when an earlier
 * push wrote it (and it is still there), else read whole (its checksums
 * checked) and written unless an identical object is already there. */
static int push_chunk(push *p, heap_txn *ht, const heap_chunk_info *ci,
                      ah_snapshot_info *si)
{
	char name[40], path[PATH_MAX];
	const mf_object *known = NULL;
	uint64_t bytes = (uint64_t)ci->class_pages * heap_page_size(heap_txn_heap(ht)) - 16;
	XXH128_hash_t h;
	struct stat st;
	int rc;

	object_name(ci->id, ci->xxh3, name);
	if ((rc = join(path, p->objdir, name, NULL)) != 0)
		return rc;
	while (p->have_parent && p->pi < p->parent.nobj &&
	       p->parent.obj[p->pi].id < ci->id)
		p->pi++;
	if (p->have_parent && p->pi < p->parent.nobj &&
	    p->parent.obj[p->pi].id == ci->id &&
	    p->parent.obj[p->pi].xxh3 == ci->xxh3 &&
	    p->parent.obj[p->pi].bytes == bytes)
		known = &p->parent.obj[p->pi];
	if (known && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size == bytes) {
		h.high64 = known->h128_hi;
		h.low64 = known->h128_lo;
	} else {
		heap_chunk_view cv;

		if ((rc = heap_chunk_open(ht, ci->id, HEAP_CHUNK_WHOLE, &cv)) != 0) {
			SAY(si, "chunk %" PRIu64 " of the heap: %s", ci->id,
			    ah_strerror(rc));
			return rc;
		}
		bytes = cv.value_bytes;
		h = XXH3_128bits(cv.value, cv.value_bytes);
		if (!object_matches(path, bytes, h)) {
			if ((rc = write_object(p, path, cv.value, cv.value_bytes)) != 0) {
				SAY(si, "writing %s: %s", path, ah_strerror(rc));
				return rc;
			}
			p->objects_new++;
			p->bytes_new += bytes;
		}
	}
	p->objects++;
	p->bytes += bytes;
	sb_printf(&p->body, "object %" PRIu64 " %016" PRIx64 " %" PRIu64
	          " %016" PRIx64 "%016" PRIx64 "\n",
	          ci->id, ci->xxh3, bytes, h.high64, h.low64);
	return 0;
}

static const char *const table_word[] = { "arr", "batch", "source", "hold" };
_Static_assert(MF_T_HOLD == (int)HEAP_T_HOLD && MF_T_SOURCE == (int)HEAP_T_SOURCE,
               "manifest record tags are the heap's table numbers");

static int batch_line(const ah_batch_info *b, void *user)
{
	sbuf *body = user;

	sb_printf(body, "batch %" PRIu64 " lower %" PRIu64 " upper %" PRIu64
	          " since %" PRIu64 " updates %" PRIu64 " chunks %" PRIu64
	          " partial %d\n", b->id, b->lower, b->upper, b->since,
	          b->updates, b->chunks, b->partial);
	return 0;
}

static int push_records(push *p, ah_txn *t, ah_snapshot_info *si)
{
	char name[AH_NAME_MAX + 1], *after = NULL;
	ah_arrangement_info ai;
	int rc;

	/* For readers of the manifest: each arrangement's frontiers. */
	while ((rc = ah_arrangement_next(t, after, name)) == 0) {
		if ((rc = ah_arrangement_info_get(t, name, &ai)) != 0)
			break;
		sb_printf(&p->body, "arrangement ");
		sb_hex(&p->body, name, strlen(name));
		sb_printf(&p->body, " upper %" PRIu64 " since %" PRIu64
		          " batches %" PRIu64 " updates %" PRIu64 "\n",
		          ai.upper, ai.since, ai.batches, ai.updates);
		if ((rc = ah_batch_foreach(t, name, batch_line, &p->body)) != 0)
			break;
		si->arrangements++;
		after = name;
	}
	if (rc != AH_ENOTFOUND) {
		SAY(si, "listing arrangements: %s", ah_strerror(rc));
		return rc;
	}
	for (int tb = 0; tb < HEAP_T__ALL; tb++) {
		const void *k = NULL, *v;
		size_t kl = 0, vl;

		while ((rc = heap_next(t->ht, tb, k, kl, &k, &kl, &v, &vl)) == 0) {
			sb_printf(&p->body, "record %s ", table_word[tb]);
			sb_hex(&p->body, k, kl);
			sb_printf(&p->body, " ");
			sb_hex(&p->body, v, vl);
			sb_printf(&p->body, "\n");
		}
		if (rc != AH_ENOTFOUND) {
			SAY(si, "reading the %s table: %s", table_word[tb],
			    ah_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* The newest SEQ of uuid in DIR, and (best effort) its manifest as the
 * list of objects already written. */
static int find_parent(push *p, const uint8_t uuid[16], uint64_t *seq,
                       char parent[AH_SNAPSHOT_ID_MAX], ah_snapshot_info *si)
{
	char prefix[AH_SNAPSHOT_ID_MAX];
	snap_name *v;
	size_t n;
	int rc;

	*seq = 0;
	parent[0] = '\0';
	mf_id(uuid, 1, prefix);
	if ((rc = list_manifests(p->dir, &v, &n)) != 0)
		return rc;
	for (size_t i = n; i-- > 0;) {
		if (memcmp(v[i].id, prefix, 9) != 0)
			continue;
		if (*seq == 0) {
			*seq = v[i].seq;
			snprintf(parent, AH_SNAPSHOT_ID_MAX, "%s", v[i].id);
		}
		if (load_manifest(p->dir, v[i].id, &p->parent) == 0) {
			if (memcmp(p->parent.info.uuid, uuid, 16) != 0) {
				SAY(si, "%s/manifests/%s is of another heap whose "
				    "UUID starts like this one's", p->dir, v[i].id);
				mf_free(&p->parent);
				free(v);
				return AH_EEXIST;
			}
			p->have_parent = true;
			break;
		}
		mf_free(&p->parent);
	}
	free(v);
	return 0;
}

int ah_snapshot_push(ah_heap *ah, const char *dir, ah_snapshot_info *si)
{
	push p = { 0 };
	ah_snapshot_info mine;
	ah_heap_stat hs;
	ah_txn *t = NULL;
	heap_chunk_info ci;
	char parent[AH_SNAPSHOT_ID_MAX], tmp[PATH_MAX], final[PATH_MAX];
	struct timespec now;
	sbuf text = { 0 };
	uint64_t seq;
	bool first = true;
	int lock = -1, rc;

	if (si == NULL)
		si = &mine;
	memset(si, 0, sizeof *si);
	if (ah == NULL || dir == NULL || *dir == '\0')
		return AH_EINVAL;
	if ((rc = heap_check_pid(ah->h)) != 0)
		return rc;
	p.dir = dir;
	if ((rc = make_dirs(dir)) != 0) {
		struct stat ds;

		if (stat(dir, &ds) == 0 && !S_ISDIR(ds.st_mode))
			SAY(si, "%s is not a directory", dir);
		else
			SAY(si, "making %s: %s", dir, ah_strerror(rc));
		return rc;
	}
	if ((rc = join(p.objdir, dir, "objects", NULL)) != 0 ||
	    (rc = join(p.tmpdir, dir, "tmp", NULL)) != 0)
		return rc;
	if ((lock = lock_dir(dir, LOCK_SH, true, &rc)) < 0) {
		SAY(si, "locking %s/lock: %s", dir, ah_strerror(rc));
		return rc;
	}
	sweep_tmp(dir, false);
	if ((rc = ah_heap_stat_get(ah, &hs)) != 0)
		goto out;
	memcpy(si->uuid, hs.uuid, 16);
	if ((rc = find_parent(&p, hs.uuid, &seq, parent, si)) != 0)
		goto out;
	if ((rc = ah_txn_begin(ah, AH_TXN_RDONLY, &t)) != 0)
		goto out;
	si->txn_id = heap_txn_id(t->ht);
	clock_gettime(CLOCK_REALTIME, &now);
	si->time_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	if ((rc = push_records(&p, t, si)) != 0)
		goto out;
	for (uint64_t after = 0;; first = false) {
		rc = heap_chunk_next(t->ht, after, first, &ci);
		if (rc == AH_ENOTFOUND)
			break;
		if (rc != 0) {
			SAY(si, "listing chunks: %s", ah_strerror(rc));
			goto out;
		}
		if ((rc = push_chunk(&p, t->ht, &ci, si)) != 0)
			goto out;
		after = ci.id;
	}
	ah_txn_abort(t);
	t = NULL;
	if (p.objects_new > 0 && (rc = sync_dir(p.objdir)) != 0)
		goto out;
	sb_printf(&p.body, "objects %" PRIu64 "\nbytes %" PRIu64
	          "\nobjects-new %" PRIu64 "\nbytes-new %" PRIu64 "\n",
	          p.objects, p.bytes, p.objects_new, p.bytes_new);
	si->objects = p.objects;
	si->bytes = p.bytes;
	si->objects_new = p.objects_new;
	si->bytes_new = p.bytes_new;
	/* Published with link(2), which never replaces: a push of the same
	 * heap that took this SEQ first makes us take the next. */
	for (int tries = 0;; tries++) {
		si->seq = seq + 1 + (uint64_t)tries;
		mf_id(hs.uuid, si->seq, si->id);
		text.len = 0;
		mf_head(&text, si, parent, hs.format_version, hs.page_size);
		sb_printf(&text, "%s", p.body.p ? p.body.p : "");
		mf_end(&text);
		if (text.oom || p.body.oom) {
			rc = AH_ENOMEM;
			goto out;
		}
		if ((rc = tmp_path(&p, tmp)) != 0 ||
		    (rc = join(final, dir, "manifests", si->id)) != 0)
			goto out;
		rc = write_durable(tmp, text.p, text.len);
		if (rc == 0 && link(tmp, final) != 0)
			rc = errno_rc(errno);
		unlink(tmp);
		if (rc == AH_EEXIST && tries < 1000)
			continue;
		if (rc != 0) {
			SAY(si, "publishing %s: %s", final, ah_strerror(rc));
			goto out;
		}
		break;
	}
	si->manifest_bytes = text.len;
	{
		char mdir[PATH_MAX];

		if ((rc = join(mdir, dir, "manifests", NULL)) == 0)
			rc = sync_dir(mdir);
	}
out:
	if (t != NULL)
		ah_txn_abort(t);
	if (rc != 0 && si->message[0] == '\0')
		SAY(si, "%s", ah_strerror(rc));
	if (rc != 0)
		si->id[0] = '\0';
	mf_free(&p.parent);
	sb_free(&p.body);
	sb_free(&text);
	if (lock >= 0)
		close(lock);
	return rc;
}

/* ---------------------------------------------------------- restore */

/* The id to restore: the one named, or the newest when DIR holds one
 * heap's snapshots. */
static int pick(const char *dir, const char *id, char out[AH_SNAPSHOT_ID_MAX],
                ah_snapshot_info *si)
{
	snap_name *v;
	size_t n;
	int rc;

	if (id != NULL) {
		if (!mf_id_valid(id))
			return AH_EINVAL;
		snprintf(out, AH_SNAPSHOT_ID_MAX, "%s", id);
		return 0;
	}
	if ((rc = list_manifests(dir, &v, &n)) != 0)
		return rc;
	if (n == 0) {
		free(v);
		SAY(si, "%s holds no snapshot", dir);
		return AH_ENOTFOUND;
	}
	for (size_t i = 1; i < n; i++)
		if (memcmp(v[i].id, v[0].id, 8) != 0) {
			SAY(si, "%s holds snapshots of more than one heap "
			    "(%.8s, %.8s): name one", dir, v[0].id, v[i].id);
			free(v);
			return AH_ESTATE;
		}
	snprintf(out, AH_SNAPSHOT_ID_MAX, "%s", v[n - 1].id);
	free(v);
	return 0;
}

/* Asks the kernel to start reading object o (advice only). */
static void advise_object(const char *objdir, const mf_object *o)
{
	char name[40], path[PATH_MAX];
	int fd;

	object_name(o->id, o->xxh3, name);
	if (join(path, objdir, name, NULL) != 0 ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0)
		return;
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
	close(fd);
}

/* Reads object o into buf (grown as needed, 16-byte aligned) and checks
 * it against the manifest. */
static int read_object(const char *objdir, const mf_object *o, void **buf,
                       size_t *cap, ah_snapshot_info *si)
{
	char name[40], path[PATH_MAX];
	struct stat st;
	XXH128_hash_t h;
	int fd, rc;

	object_name(o->id, o->xxh3, name);
	if ((rc = join(path, objdir, name, NULL)) != 0)
		return rc;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		rc = errno == ENOENT ? AH_ECORRUPT : errno_rc(errno);
		SAY(si, "object %s: %s", path, errno == ENOENT ? "missing"
		                                               : strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		SAY(si, "object %s: not a regular file", path);
		return AH_ECORRUPT;
	}
	if ((uint64_t)st.st_size != o->bytes) {
		close(fd);
		SAY(si, "object %s: %lld bytes, the manifest says %" PRIu64,
		    path, (long long)st.st_size, o->bytes);
		return AH_ECORRUPT;
	}
	if (*cap < o->bytes) {
		void *nb;

		if (o->bytes > SIZE_MAX ||
		    posix_memalign(&nb, 4096, (size_t)o->bytes) != 0) {
			close(fd);
			return AH_ENOMEM;
		}
		free(*buf);
		*buf = nb;
		*cap = (size_t)o->bytes;
	}
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	rc = read_all(fd, *buf, (size_t)o->bytes);
	close(fd);
	if (rc != 0) {
		SAY(si, "object %s: %s", path, ah_strerror(rc));
		return rc;
	}
	h = XXH3_128bits(*buf, (size_t)o->bytes);
	if (h.high64 != o->h128_hi || h.low64 != o->h128_lo) {
		SAY(si, "object %s: its bytes do not match the manifest "
		    "(XXH3-128)", path);
		return AH_ECORRUPT;
	}
	return 0;
}

static int count_problem(const ah_problem *pr, void *user)
{
	ah_snapshot_info *si = user;

	if (si->message[0] == '\0')
		SAY(si, "the restored heap does not verify: %s", pr->message);
	return 0;
}

/* Fills the new heap at tmp from m. */
static int fill(const char *dir, const manifest *m, const char *tmp,
                unsigned flags, ah_snapshot_info *si)
{
	ah_open_opts oo = { sizeof oo, AH_OPEN_CREATE, 0, 0, 0 };
	ah_heap *ah = NULL;
	ah_txn *t = NULL;
	ah_verify_stats vs;
	char objdir[PATH_MAX];
	uint8_t uuid[16];
	void *buf = NULL;
	size_t cap = 0;
	int rc;

	if ((rc = join(objdir, dir, "objects", NULL)) != 0)
		return rc;
	if ((rc = ah_open(tmp, &oo, &ah)) != 0) {
		SAY(si, "creating %s: %s", tmp, ah_strerror(rc));
		return rc;
	}
	if ((rc = ah_txn_begin(ah, 0, &t)) != 0)
		goto out;
	for (size_t i = 0; i < m->nobj; i++) {
		/* The kernel reads the next objects while this one is
		 * checked and written (each is its own file: no read-ahead
		 * crosses from one to the next). */
		for (size_t k = i + 1; k < m->nobj && k <= i + 4; k++)
			if (k == i + 4 || i == 0)
				advise_object(objdir, &m->obj[k]);
		if ((rc = read_object(objdir, &m->obj[i], &buf, &cap, si)) != 0)
			goto out;
		/* The object matched the manifest's XXH3-128; its chunk sums
		 * are checked once, by the verify below (every referenced
		 * chunk opened whole; an unreferenced one fails it). */
		if ((rc = heap_chunk_put_raw(t->ht, m->obj[i].id, buf,
		                             (size_t)m->obj[i].bytes, false)) != 0) {
			SAY(si, "object %016" PRIx64 "-%016" PRIx64 ": %s",
			    m->obj[i].id, m->obj[i].xxh3, ah_strerror(rc));
			goto out;
		}
	}
	for (size_t i = 0; i < m->nrec; i++) {
		const mf_record *r = &m->rec[i];

		if ((rc = heap_put(t->ht, r->tb, r->key, r->klen, r->val,
		                   r->vlen)) != 0) {
			SAY(si, "a %s record: %s", table_word[r->tb],
			    ah_strerror(rc));
			goto out;
		}
	}
	/* The snapshot's file format (format 4: version-2 batch chunks,
	 * which format-3 binaries cannot read), in the txn of its chunks. */
	if (m->format > HEAP_FORMAT_BASE &&
	    (rc = heap_format_mark(t->ht, m->format)) != 0)
		goto out;
	memcpy(uuid, m->info.uuid, 16);
	if ((flags & AH_RESTORE_NEW_UUID) && (rc = heap_uuid_new(uuid)) != 0)
		goto out;
	if ((rc = heap_set_uuid(t->ht, uuid)) != 0)
		goto out;
	rc = ah_txn_commit(t);
	t = NULL;
	if (rc != 0)
		goto out;
	/* Checked whole before anyone can open it: the records a manifest
	 * carries are checked only as records until now, the chunks only
	 * against the manifest.  The verify's structure pass opens every
	 * referenced chunk whole (all its sums) and fails on a chunk no batch
	 * references, so its separate sums pass would hash every byte twice. */
	if ((rc = ah_txn_begin(ah, AH_TXN_RDONLY, &t)) != 0)
		goto out;
	si->message[0] = '\0';
	if ((rc = txn_verify_checked_chunks(t, count_problem, si, &vs)) == 0 &&
	    vs.problems)
		rc = AH_ECORRUPT;
out:
	if (t != NULL)
		ah_txn_abort(t);
	free(buf);
	if (ah != NULL) {
		int crc = ah_close(ah);

		if (rc == 0)
			rc = crc;
	}
	return rc;
}

int ah_snapshot_restore(const char *dir, const char *id, const char *path,
                        unsigned flags, ah_snapshot_info *si)
{
	char real[PATH_MAX], tmp[PATH_MAX], lockp[PATH_MAX + 8], sid[AH_SNAPSHOT_ID_MAX];
	ah_snapshot_info mine;
	manifest m = { 0 };
	struct stat st;
	bool exists;
	int lock = -1, rc;

	if (si == NULL)
		si = &mine;
	memset(si, 0, sizeof *si);
	if (dir == NULL || path == NULL || *path == '\0' || *dir == '\0' ||
	    (flags & ~AH_RESTORE_NEW_UUID))
		return AH_EINVAL;
	if ((rc = heap_path_resolve(path, real)) != 0) {
		SAY(si, "%s: %s", path, ah_strerror(rc));
		return rc;
	}
	if (lstat(real, &st) == 0 || lstat(path, &st) == 0) {
		SAY(si, "%s exists: a restore never replaces a file", path);
		return AH_EEXIST;
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		SAY(si, "%s: no such directory", dir);
		return AH_ENOTFOUND;
	}
	lock = lock_dir(dir, LOCK_SH, false, &rc);
	if (rc != 0)
		return rc;
	if ((rc = pick(dir, id, sid, si)) != 0)
		goto out;
	if ((rc = load_manifest(dir, sid, &m)) != 0) {
		SAY(si, "%s/manifests/%s: %s", dir, sid,
		    rc == AH_ENOTFOUND ? "no such snapshot"
		    : rc == AH_EFORMAT ? "another manifest version"
		                       : "damaged (its checksum or a line)");
		goto out;
	}
	if (m.psize != (uint32_t)sysconf(_SC_PAGESIZE)) {
		SAY(si, "the snapshot's page size is %u, this machine's %ld",
		    m.psize, sysconf(_SC_PAGESIZE));
		rc = AH_EFORMAT;
		goto out;
	}
	if (m.format > HEAP_FORMAT_VERSION) {
		SAY(si, "the snapshot's heap format is %u, this library's at most %u",
		    m.format, HEAP_FORMAT_VERSION);
		rc = AH_EFORMAT;
		goto out;
	}
	if ((rc = heap_path_temp(real, tmp)) != 0)
		goto out;
	rc = fill(dir, &m, tmp, flags, si);
	snprintf(lockp, sizeof lockp, "%s-lock", tmp);
	unlink(lockp);
	if (rc == 0) {
		rc = heap_path_publish(tmp, real, &exists);
		if (rc == 0 && exists) {
			SAY(si, "%s appeared meanwhile: not replaced", path);
			rc = AH_EEXIST;
		}
	}
	if (rc != 0)
		unlink(tmp);
out:
	if (rc == 0 || m.info.id[0]) {
		char msg[sizeof si->message];

		memcpy(msg, si->message, sizeof msg);
		*si = m.info;
		si->sources = NULL;
		si->nsources = 0;
		if (rc != 0)
			memcpy(si->message, msg, sizeof msg);
	}
	if (rc != 0 && si->message[0] == '\0')
		SAY(si, "%s", ah_strerror(rc));
	mf_free(&m);
	if (lock >= 0)
		close(lock);
	return rc;
}

/* ------------------------------------------------------- list, prune */

int ah_snapshot_foreach(const char *dir, ah_snapshot_fn fn, void *user)
{
	snap_name *v;
	size_t n;
	int rc;

	if (dir == NULL || fn == NULL)
		return AH_EINVAL;
	if ((rc = list_manifests(dir, &v, &n)) != 0)
		return rc;
	for (size_t i = 0; i < n && rc == 0; i++) {
		manifest m;
		int lr = load_manifest(dir, v[i].id, &m);

		if (lr == AH_ENOMEM) {
			rc = lr;
		} else if (lr == AH_ENOTFOUND) {
			/* pruned meanwhile */
		} else {
			if (lr != 0) {
				memset(&m.info, 0, sizeof m.info);
				snprintf(m.info.id, sizeof m.info.id, "%s", v[i].id);
				m.info.seq = v[i].seq;
				/* Damage, or the error that kept it from
				 * being read (a permission, an I/O error). */
				m.info.status = lr == AH_EFORMAT ? AH_EFORMAT
				                : lr == AH_EIO || lr == AH_EREADONLY
				                        ? lr : AH_ECORRUPT;
				m.info.sources = NULL;
				m.info.nsources = 0;
			}
			rc = fn(&m.info, user);
		}
		mf_free(&m);
	}
	free(v);
	return rc;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int ah_snapshot_prune(const char *dir, unsigned keep, ah_prune_info *out)
{
	ah_prune_info mine;
	snap_name *v = NULL;
	char **names = NULL, path[PATH_MAX], odir[PATH_MAX];
	size_t n, nn = 0, cap = 0;
	bool *drop = NULL;
	struct stat st;
	int lock = -1, rc;
	DIR *d;
	struct dirent *e;

	if (out == NULL)
		out = &mine;
	memset(out, 0, sizeof *out);
	if (dir == NULL || keep == 0)
		return AH_EINVAL;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(out->message, sizeof out->message,
		         "%s: no such directory", dir);
		return AH_ENOTFOUND;
	}
	if ((lock = lock_dir(dir, LOCK_EX, true, &rc)) < 0) {
		snprintf(out->message, sizeof out->message, "locking %s/lock: %s",
		         dir, ah_strerror(rc));
		return rc;
	}
	if ((rc = list_manifests(dir, &v, &n)) != 0)
		goto out;
	if ((drop = calloc(n + 1, sizeof *drop)) == NULL) {
		rc = AH_ENOMEM;
		goto out;
	}
	/* Sorted by UUID8 then SEQ: per heap, all but the last keep go. */
	for (size_t i = 0; i < n;) {
		size_t j = i;

		while (j < n && memcmp(v[j].id, v[i].id, 8) == 0)
			j++;
		for (size_t k = i; k + keep < j; k++)
			drop[k] = true;
		i = j;
	}
	/* The objects every kept manifest names (all kept ones must read). */
	for (size_t i = 0; i < n; i++) {
		manifest m;

		if (drop[i])
			continue;
		if ((rc = load_manifest(dir, v[i].id, &m)) != 0) {
			mf_free(&m);
			if (rc != AH_ENOMEM)
				rc = AH_ECORRUPT;
			snprintf(out->message, sizeof out->message,
			         "%s/manifests/%s, one of the %u to keep, cannot "
			         "be read: nothing deleted", dir, v[i].id, keep);
			goto out;
		}
		for (size_t k = 0; k < m.nobj; k++) {
			char name[40];

			if (nn == cap) {
				char **q;

				cap = cap ? 2 * cap : 1024;
				if ((q = realloc(names, cap * sizeof *q)) == NULL) {
					mf_free(&m);
					rc = AH_ENOMEM;
					goto out;
				}
				names = q;
			}
			object_name(m.obj[k].id, m.obj[k].xxh3, name);
			if ((names[nn] = strdup(name)) == NULL) {
				mf_free(&m);
				rc = AH_ENOMEM;
				goto out;
			}
			nn++;
		}
		mf_free(&m);
		out->snapshots_kept++;
	}
	qsort(names, nn, sizeof *names, cmp_name);
	/* Manifests first: an object is unnamed before it goes. */
	for (size_t i = 0; i < n; i++) {
		if (!drop[i] || join(path, dir, "manifests", v[i].id) != 0)
			continue;
		if (unlink(path) != 0 && errno != ENOENT) {
			rc = errno_rc(errno);
			goto out;
		}
		out->snapshots_removed++;
	}
	if ((rc = join(odir, dir, "manifests", NULL)) != 0 ||
	    (rc = sync_dir(odir)) != 0 ||
	    (rc = join(odir, dir, "objects", NULL)) != 0)
		goto out;
	if ((d = opendir(odir)) == NULL) {
		rc = errno == ENOENT ? 0 : errno_rc(errno);
		goto out;
	}
	while ((e = readdir(d)) != NULL) {
		const char *key = e->d_name;

		if (key[0] == '.' ||
		    bsearch(&key, names, nn, sizeof *names, cmp_name) != NULL)
			continue;
		if (join(path, odir, e->d_name, NULL) != 0 || lstat(path, &st) != 0)
			continue;
		if (unlink(path) == 0) {
			out->objects_removed++;
			out->bytes_removed += (uint64_t)st.st_size;
		}
	}
	closedir(d);
	sync_dir(odir);
	sweep_tmp(dir, true);
out:
	for (size_t i = 0; i < nn; i++)
		free(names[i]);
	free(names);
	free(drop);
	free(v);
	if (lock >= 0)
		close(lock);
	return rc;
}
