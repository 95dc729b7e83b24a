/*
 * tests/fault/rel.h - helpers of the reliability tests (issue 7: crash,
 * fault, stress, misuse, format): private directories, a seeded generator,
 * a canonical hash of a heap's whole logical state, a structural check of
 * a heap, and a sparse file copy.
 *
 * Everything here returns a status and never calls a Criterion assertion,
 * so forked children may use it (a cr_assert in a forked child confuses the
 * runner).  Test-only; it sees the library's internals (txn/txn.h) to walk
 * every chunk.
 */
#ifndef TESTS_FAULT_REL_H
#define TESTS_FAULT_REL_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arrheap.h"
#include "heap/heap.h"
#include "txn/txn.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define REL_MiB ((uint64_t)1 << 20)

static inline int rel_torture(void)
{
	const char *t = getenv("AH_TORTURE");

	return t != NULL && *t != '\0' && strcmp(t, "0") != 0;
}

typedef struct rel_dir {
	char dir[64];
	char path[128]; /* dir/heap */
} rel_dir;

/* 0 or -1; the directory is /tmp/ah-rel-XXXXXX. */
static inline int rel_mkdir(rel_dir *d)
{
	snprintf(d->dir, sizeof d->dir, "/tmp/ah-rel-XXXXXX");
	if (mkdtemp(d->dir) == NULL)
		return -1;
	snprintf(d->path, sizeof d->path, "%s/heap", d->dir);
	return 0;
}

static inline int rel_rmdir(const rel_dir *d)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
	return system(cmd);
}

static inline uint64_t rel_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline ah_open_opts rel_opts(unsigned flags, uint64_t max_bytes,
                                    uint64_t quantum)
{
	ah_open_opts o;

	memset(&o, 0, sizeof o);
	o.size = sizeof o;
	o.flags = flags;
	o.max_bytes = max_bytes;
	o.merge_quantum = quantum;
	return o;
}

/* ------------------------------------------------------ canonical state */

typedef struct rel_td {
	uint64_t t;
	int64_t d;
} rel_td;

static inline int rel_td_cmp(const void *a, const void *b)
{
	const rel_td *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/* Feeds one (key, val)'s (time, diff) list to st: times (already advanced
 * to since by the cursor) sorted and consolidated, zero sums dropped.  The
 * result is the same however the updates are spread over batches, so it is
 * canonical for the logical collection. */
static inline int rel_hash_times(ah_cursor *c, XXH3_state_t *st, rel_td **buf,
                                 size_t *cap, uint64_t *nupd)
{
	size_t n = 0, m = 0;
	uint64_t t;
	int64_t d;
	int rc;

	while ((rc = ah_cursor_time_next(c, &t, &d)) == 1) {
		if (n == *cap) {
			*cap = *cap ? *cap * 2 : 64;
			*buf = realloc(*buf, *cap * sizeof **buf);
			if (*buf == NULL)
				return AH_ENOMEM;
		}
		(*buf)[n].t = t;
		(*buf)[n++].d = d;
	}
	if (rc < 0)
		return rc;
	qsort(*buf, n, sizeof **buf, rel_td_cmp);
	for (size_t i = 0; i < n; i++) {
		if (m > 0 && (*buf)[m - 1].t == (*buf)[i].t)
			(*buf)[m - 1].d += (*buf)[i].d;
		else
			(*buf)[m++] = (*buf)[i];
	}
	n = m;
	m = 0;
	for (size_t i = 0; i < n; i++)
		if ((*buf)[i].d != 0)
			(*buf)[m++] = (*buf)[i];
	XXH3_64bits_update(st, &m, sizeof m);
	XXH3_64bits_update(st, *buf, m * sizeof **buf);
	*nupd += m;
	return 0;
}

static inline int rel_hash_arr(ah_txn *t, const char *name, XXH3_state_t *st,
                               uint64_t *nupd)
{
	ah_cursor *c = NULL;
	rel_td *buf = NULL;
	size_t cap = 0;
	const void *p;
	size_t len;
	int rc = ah_cursor_open(t, name, &c);

	while (rc == 0 && ah_cursor_key_valid(c)) {
		if ((rc = ah_cursor_key(c, &p, &len)) != 0)
			break;
		XXH3_64bits_update(st, &len, sizeof len);
		XXH3_64bits_update(st, p, len);
		while (rc == 0 && ah_cursor_val_valid(c)) {
			if ((rc = ah_cursor_val(c, &p, &len)) != 0)
				break;
			XXH3_64bits_update(st, &len, sizeof len);
			XXH3_64bits_update(st, p, len);
			rc = rel_hash_times(c, st, &buf, &cap, nupd);
			if (rc == 0 && (rc = ah_cursor_step_val(c)) > 0)
				rc = 0;
		}
		if (rc == 0 && (rc = ah_cursor_step_key(c)) > 0)
			rc = 0;
	}
	ah_cursor_close(c);
	free(buf);
	return rc;
}

/* What rel_state found. */
typedef struct rel_state {
	uint64_t hash;       /* over everything below and the contents */
	uint64_t narr;       /* arrangements */
	uint64_t updates;    /* consolidated (key, val, time) entries */
	uint64_t model;      /* source "model" position as u64, or 0 */
} rel_state;

/* Hashes the whole state of t's snapshot: each arrangement's name,
 * frontiers, spine shape (batches, merges in progress, stored updates:
 * deterministic for a deterministic history) and contents; each source.
 * With shape = 0 the spine shape is left out (only logical contents). */
static inline int rel_state_txn(ah_txn *t, int shape, rel_state *out)
{
	XXH3_state_t *st = XXH3_createState();
	char name[AH_NAME_MAX + 1], prev[AH_NAME_MAX + 1];
	const char *after = NULL;
	ah_arrangement_info in;
	int rc;

	if (st == NULL)
		return AH_ENOMEM;
	memset(out, 0, sizeof *out);
	XXH3_64bits_reset(st);
	while ((rc = ah_arrangement_next(t, after, name)) == 0) {
		if ((rc = ah_arrangement_info_get(t, name, &in)) != 0)
			goto out;
		XXH3_64bits_update(st, name, strlen(name) + 1);
		XXH3_64bits_update(st, &in.upper, sizeof in.upper);
		XXH3_64bits_update(st, &in.since, sizeof in.since);
		if (shape) {
			XXH3_64bits_update(st, &in.batches, sizeof in.batches);
			XXH3_64bits_update(st, &in.merging, sizeof in.merging);
			XXH3_64bits_update(st, &in.updates, sizeof in.updates);
		}
		if ((rc = rel_hash_arr(t, name, st, &out->updates)) != 0)
			goto out;
		out->narr++;
		strcpy(prev, name);
		after = prev;
	}
	if (rc != AH_ENOTFOUND)
		goto out;
	after = NULL;
	while ((rc = ah_source_next(t, after, name)) == 0) {
		const void *pos;
		size_t len;

		if ((rc = ah_source_get(t, name, &pos, &len)) != 0)
			goto out;
		XXH3_64bits_update(st, name, strlen(name) + 1);
		XXH3_64bits_update(st, &len, sizeof len);
		XXH3_64bits_update(st, pos, len);
		if (strcmp(name, "model") == 0 && len == 8)
			memcpy(&out->model, pos, 8);
		strcpy(prev, name);
		after = prev;
	}
	if (rc == AH_ENOTFOUND)
		rc = 0;
out:
	out->hash = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return rc;
}

static inline int rel_state_get(ah_heap *h, int shape, rel_state *out)
{
	ah_txn *t = NULL;
	int rc = ah_txn_begin(h, AH_TXN_RDONLY, &t);

	if (rc == 0)
		rc = rel_state_txn(t, shape, out);
	ah_txn_abort(t);
	return rc;
}

/* ------------------------------------------------------ structural check */

/* ah_verify over the last commit (every chunk's checksum, every spine and
 * batch, every chunk referenced exactly once), plus our own walk of every
 * chunk (heap_chunk_next + heap_chunk_verify) and every arrangement read to
 * its end by a cursor (rel_state).  *chunks (may be NULL) gets the count.
 * A problem ah_verify finds is AH_ECORRUPT; its first message goes to
 * stderr. */
static inline int rel_verify_problem(const ah_problem *p, void *user)
{
	if ((*(int *)user)++ == 0)
		fprintf(stderr, "ah_verify: %s batch %" PRIu64 " chunk %" PRIu64
		        ": %s\n", p->arrangement, p->batch, p->chunk,
		        p->message);
	return 0;
}
static inline int rel_verify(ah_heap *ah, uint64_t *chunks)
{
	heap_txn *t = NULL;
	heap_chunk_info ci;
	uint64_t after = 0, n = 0;
	bool first = true;
	rel_state s;
	ah_txn *at = NULL;
	ah_verify_stats vs;
	int problems = 0, rc = ah_txn_begin(ah, AH_TXN_RDONLY, &at);

	if (rc == 0)
		rc = ah_verify(at, rel_verify_problem, &problems, &vs);
	ah_txn_abort(at);
	if (rc == 0 && problems != 0)
		rc = AH_ECORRUPT;
	if (rc != 0)
		return rc;
	rc = heap_txn_begin(ah->h, true, &t);

	while (rc == 0 && (rc = heap_chunk_next(t, after, first, &ci)) == 0) {
		if ((rc = heap_chunk_verify(t, ci.id)) != 0)
			break;
		after = ci.id;
		first = false;
		n++;
	}
	if (rc == AH_ENOTFOUND)
		rc = 0;
	heap_txn_abort(t);
	if (rc == 0)
		rc = rel_state_get(ah, 1, &s);
	if (chunks != NULL)
		*chunks = n;
	return rc;
}

/* ------------------------------------------------------------- files */

/* Copies src to dst (created or truncated), keeping holes. */
static inline int rel_copy(const char *src, const char *dst)
{
	static char buf[1 << 16];
	int in = open(src, O_RDONLY), out = -1, rc = -1;
	struct stat st;
	off_t pos = 0, data, hole;

	if (in < 0 || fstat(in, &st) != 0)
		goto out;
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0 || ftruncate(out, st.st_size) != 0)
		goto out;
	while (pos < st.st_size) {
		data = lseek(in, pos, SEEK_DATA);
		if (data < 0)
			break; /* the rest is a hole */
		hole = lseek(in, data, SEEK_HOLE);
		for (pos = data; pos < hole;) {
			size_t want = (size_t)(hole - pos) < sizeof buf
			                      ? (size_t)(hole - pos)
			                      : sizeof buf;
			ssize_t r = pread(in, buf, want, pos);

			if (r <= 0 || pwrite(out, buf, (size_t)r, pos) != r)
				goto out;
			pos += r;
		}
	}
	rc = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return rc;
}

static inline uint64_t rel_file_hash(const char *path, uint64_t *size)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	uint64_t hash = 0;
	void *buf;

	*size = 0;
	if (fd < 0 || fstat(fd, &st) != 0)
		goto out;
	*size = (uint64_t)st.st_size;
	buf = malloc(*size + 1);
	if (buf != NULL && pread(fd, buf, *size, 0) == (ssize_t)*size)
		hash = XXH3_64bits(buf, *size);
	free(buf);
out:
	if (fd >= 0)
		close(fd);
	return hash;
}

#endif /* TESTS_FAULT_REL_H */
