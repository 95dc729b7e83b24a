/*
 * txn/snapshot_restore.c - ah_snapshot_restore (include/arrheap.h
 * "snapshots"; ARCHITECTURE.md §2): a snapshot of DIR into a new heap at
 * PATH.  The manifest is read whole and checked, every object is read and
 * checked against it (XXH3-128), the heap is filled in one write txn under
 * a temporary name, verified whole, and only then published.
 *
 * It must never replace a file at PATH, and never leave one there that is
 * not whole and verified.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "txn/snapshot.h"
#include "txn/txn.h"

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
	if ((rc = snap_list_manifests(dir, &v, &n)) != 0)
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

	snap_object_name(o->id, o->xxh3, name);
	if (snap_join(path, objdir, name, NULL) != 0 ||
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

	snap_object_name(o->id, o->xxh3, name);
	if ((rc = snap_join(path, objdir, name, NULL)) != 0)
		return rc;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0) {
		rc = errno == ENOENT ? AH_ECORRUPT : snap_errno_rc(errno);
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
	rc = snap_read_all(fd, *buf, (size_t)o->bytes);
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

	if ((rc = snap_join(objdir, dir, "objects", NULL)) != 0)
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
			SAY(si, "a %s record: %s", snap_table_word[r->tb],
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
	lock = snap_lock_dir(dir, LOCK_SH, false, &rc);
	if (rc != 0)
		return rc;
	if ((rc = pick(dir, id, sid, si)) != 0)
		goto out;
	if ((rc = snap_load_manifest(dir, sid, &m)) != 0) {
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
