/*
 * txn/snapshot_prune.c - ah_snapshot_foreach and ah_snapshot_prune
 * (include/arrheap.h "snapshots"): the snapshots of DIR, and dropping all
 * but the newest KEEP of each heap with the objects no kept manifest names.
 *
 * Prune holds DIR/lock exclusive (no push or restore meanwhile).  It must
 * never delete anything when a manifest to keep cannot be read, and never
 * delete an object before the manifests that name it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "txn/snapshot.h"
#include "txn/txn.h"

int ah_snapshot_foreach(const char *dir, ah_snapshot_fn fn, void *user)
{
	snap_name *v;
	size_t n;
	int rc;

	if (dir == NULL || fn == NULL)
		return AH_EINVAL;
	if ((rc = snap_list_manifests(dir, &v, &n)) != 0)
		return rc;
	for (size_t i = 0; i < n && rc == 0; i++) {
		manifest m;
		int lr = snap_load_manifest(dir, v[i].id, &m);

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
	if ((lock = snap_lock_dir(dir, LOCK_EX, true, &rc)) < 0) {
		snprintf(out->message, sizeof out->message, "locking %s/lock: %s",
		         dir, ah_strerror(rc));
		return rc;
	}
	if ((rc = snap_list_manifests(dir, &v, &n)) != 0)
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
		if ((rc = snap_load_manifest(dir, v[i].id, &m)) != 0) {
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
			snap_object_name(m.obj[k].id, m.obj[k].xxh3, name);
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
		if (!drop[i] || snap_join(path, dir, "manifests", v[i].id) != 0)
			continue;
		if (unlink(path) != 0 && errno != ENOENT) {
			rc = snap_errno_rc(errno);
			goto out;
		}
		out->snapshots_removed++;
	}
	if ((rc = snap_join(odir, dir, "manifests", NULL)) != 0 ||
	    (rc = snap_sync_dir(odir)) != 0 ||
	    (rc = snap_join(odir, dir, "objects", NULL)) != 0)
		goto out;
	if ((d = opendir(odir)) == NULL) {
		rc = errno == ENOENT ? 0 : snap_errno_rc(errno);
		goto out;
	}
	while ((e = readdir(d)) != NULL) {
		const char *key = e->d_name;

		if (key[0] == '.' ||
		    bsearch(&key, names, nn, sizeof *names, cmp_name) != NULL)
			continue;
		if (snap_join(path, odir, e->d_name, NULL) != 0 ||
		    lstat(path, &st) != 0)
			continue;
		if (unlink(path) == 0) {
			out->objects_removed++;
			out->bytes_removed += (uint64_t)st.st_size;
		}
	}
	closedir(d);
	snap_sync_dir(odir);
	snap_sweep_tmp(dir, true);
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
