/*
 * txn/snapshot.c - incremental snapshots in a directory of plain files
 * (include/arrheap.h "snapshots"; ARCHITECTURE.md §2 and §9): push, here;
 * restore in snapshot_restore.c, foreach and prune in snapshot_prune.c,
 * the directory's files in snapshot_io.c.  The manifest's text is
 * txn/manifest.c.
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
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

static int make_dirs(const char *dir)
{
	char p[PATH_MAX];
	static const char *const sub[] = { "objects", "manifests", "tmp" };
	int rc;

	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return snap_errno_rc(errno);
	for (int i = 0; i < 3; i++) {
		if ((rc = snap_join(p, dir, sub[i], NULL)) != 0)
			return rc;
		if (mkdir(p, 0755) != 0 && errno != EEXIST)
			return snap_errno_rc(errno);
	}
	return 0;
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
	return snap_join(out, p->tmpdir, name, NULL);
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

static int write_object(push *p, const char *final, const void *v,
                        size_t len)
{
	char tmp[PATH_MAX];
	int rc;

	if ((rc = tmp_path(p, tmp)) != 0)
		return rc;
	rc = snap_write_durable(tmp, v, len);
	if (rc == 0 && rename(tmp, final) != 0)
		rc = snap_errno_rc(errno);
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

	snap_object_name(ci->id, ci->xxh3, name);
	if ((rc = snap_join(path, p->objdir, name, NULL)) != 0)
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

static int batch_line(const ah_batch_info *b, void *user)
{
	sbuf *body = user;

	sb_printf(body, "batch %" PRIu64 " lower %" PRIu64 " upper %" PRIu64
	          " since %" PRIu64 " updates %" PRIu64 " chunks %" PRIu64
	          " partial %d\n", b->id, b->lower, b->upper, b->since,
	          b->updates, b->chunks, b->partial);
	return 0;
}

static int chunk_named(const ah_chunk_info *c, void *user)
{
	(void)c;
	(void)user;
	return 0;
}

static int filters_named(ah_txn *t, const char *name, ah_snapshot_info *si)
{
	arrangement *a;
	uint64_t bad = 0;
	int rc = arr_load(t->ht, name, &a);

	if (rc == 0) {
		rc = arr_filters_check(t->ht, a, &bad);
		arr_free(a);
	}
	if (rc)
		SAY(si, "arrangement %s: batch %llu: key filter: %s", name,
		    (unsigned long long)bad, ah_strerror(rc));
	return rc;
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
		/* every data chunk the records name is the one they name (its
		 * header's XXH3 is the record's: a lost write left a chunk of
		 * the same id there, whose own checksums pass) */
		if ((rc = ah_chunk_foreach(t, name, chunk_named, NULL)) != 0) {
			SAY(si, "arrangement %s: %s", name, ah_txn_errmsg(t));
			return rc;
		}
		/* and every key filter is the one its record names (the chunk
		 * of a lost write passes its own checksums; the restore, which
		 * verifies, would refuse the snapshot) */
		if ((rc = filters_named(t, name, si)) != 0)
			return rc;
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
			sb_printf(&p->body, "record %s ", snap_table_word[tb]);
			sb_hex(&p->body, k, kl);
			sb_printf(&p->body, " ");
			sb_hex(&p->body, v, vl);
			sb_printf(&p->body, "\n");
		}
		if (rc != AH_ENOTFOUND) {
			SAY(si, "reading the %s table: %s", snap_table_word[tb],
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
	if ((rc = snap_list_manifests(p->dir, &v, &n)) != 0)
		return rc;
	for (size_t i = n; i-- > 0;) {
		if (memcmp(v[i].id, prefix, 9) != 0)
			continue;
		if (*seq == 0) {
			*seq = v[i].seq;
			snprintf(parent, AH_SNAPSHOT_ID_MAX, "%s", v[i].id);
		}
		if (snap_load_manifest(p->dir, v[i].id, &p->parent) == 0) {
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
	if ((rc = snap_join(p.objdir, dir, "objects", NULL)) != 0 ||
	    (rc = snap_join(p.tmpdir, dir, "tmp", NULL)) != 0)
		return rc;
	if ((lock = snap_lock_dir(dir, LOCK_SH, true, &rc)) < 0) {
		SAY(si, "locking %s/lock: %s", dir, ah_strerror(rc));
		return rc;
	}
	snap_sweep_tmp(dir, false);
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
	if (p.objects_new > 0 && (rc = snap_sync_dir(p.objdir)) != 0)
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
		    (rc = snap_join(final, dir, "manifests", si->id)) != 0)
			goto out;
		rc = snap_write_durable(tmp, text.p, text.len);
		if (rc == 0 && link(tmp, final) != 0)
			rc = snap_errno_rc(errno);
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

		if ((rc = snap_join(mdir, dir, "manifests", NULL)) == 0)
			rc = snap_sync_dir(mdir);
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
