/*
 * tests/lib/tl_heap.h - heaps through the public API only: options and
 * opening; a canonical text of a heap's whole readable state (frontiers,
 * contents at every readable time, source positions) to compare
 * "unchanged" exactly and to print a difference; a canonical hash of the
 * same (plus, optionally, the spine's shape) for tests that compare many
 * states or compare inside forked children; and a full check of a heap
 * (ah_verify, then every arrangement read to its end).
 *
 * Two flavours.  tl_opts, tl_buf/tl_put*, tl_try_dump_as_of,
 * tl_state_hash*, tl_verify and tl_td_cmp return a status and never call
 * Criterion, so forked children and threads may use them (a cr_assert in a
 * forked child confuses the runner).  tl_open*, tl_dump_as_of and
 * tl_state_text assert: the test's own process only.
 */
#ifndef TESTS_LIB_TL_HEAP_H
#define TESTS_LIB_TL_HEAP_H

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrheap.h"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#define TL_MiB ((uint64_t)1 << 20)
/* Batches the size policy merges at once: SPINE_FANIN of
 * arrangement/spine.h, which public tests cannot include (the unit test
 * arrangement/test_spine.c asserts the two agree). */
#define TL_FANIN 3

/* ------------------------------------------------------------- opening */

static inline ah_open_opts tl_opts(unsigned flags, uint64_t max_bytes,
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

/* Opens (creating) path with flags and merge quantum; asserts. */
static inline ah_heap *tl_open_path(const char *path, unsigned flags,
                                    uint64_t quantum)
{
	ah_open_opts o = { .size = sizeof o, .flags = flags | AH_OPEN_CREATE,
	                   .merge_quantum = quantum };
	ah_heap *h = NULL;
	int rc = ah_open(path, &o, &h);

	cr_assert_eq(rc, 0, "ah_open(%s): %s", path, ah_strerror(rc));
	return h;
}

/* The same for dir/file. */
static inline ah_heap *tl_open(const char *dir, const char *file,
                               unsigned flags, uint64_t quantum)
{
	char path[512];

	snprintf(path, sizeof path, "%s/%s", dir, file);
	return tl_open_path(path, flags, quantum);
}

/* -------------------------------------------------------- text of state */

/* A growable string; p is NUL-terminated once anything was put. */
typedef struct tl_buf {
	char *p;
	size_t len, cap;
} tl_buf;

static inline void tl_put(tl_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline void tl_put(tl_buf *b, const char *fmt, ...)
{
	va_list ap;

	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		b->cap = b->cap * 2 + (size_t)n + 64;
		b->p = realloc(b->p, b->cap);
		if (b->p == NULL)
			abort(); /* no Criterion here: children use it */
	}
}

/* Appends the bytes in lowercase hex. */
static inline void tl_put_bytes(tl_buf *b, const void *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = p;

	if (b->len + 2 * n + 1 > b->cap) {
		b->cap = (b->len + 2 * n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (b->p == NULL)
			abort();
	}
	for (size_t i = 0; i < n; i++) {
		b->p[b->len++] = hex[s[i] >> 4];
		b->p[b->len++] = hex[s[i] & 15];
	}
	b->p[b->len] = 0;
}

/* Appends NAME's contents as of as_of: "key val diff" lines, hex, the
 * (key, val)s whose accumulation is not 0.  Returns a status. */
static inline int tl_try_dump_as_of(ah_txn *t, const char *name, uint64_t as_of,
                                    tl_buf *b)
{
	ah_cursor *c = NULL;
	int rc = ah_cursor_open(t, name, &c);

	while (!rc && ah_cursor_key_valid(c)) {
		const void *k;
		size_t kl;
		if ((rc = ah_cursor_key(c, &k, &kl)))
			break;
		while (!rc && ah_cursor_val_valid(c)) {
			const void *v;
			size_t vl;
			int64_t sum;
			if ((rc = ah_cursor_val(c, &v, &vl)) ||
			    (rc = ah_cursor_accumulate(c, as_of, &sum)))
				break;
			if (sum) {
				tl_put_bytes(b, k, kl);
				tl_put(b, " ");
				tl_put_bytes(b, v, vl);
				tl_put(b, " %" PRId64 "\n", sum);
			}
			if ((rc = ah_cursor_step_val(c)) > 0)
				rc = 0;
		}
		if (!rc && (rc = ah_cursor_step_key(c)) > 0)
			rc = 0;
	}
	if (c)
		ah_cursor_close(c);
	return rc;
}

static inline void tl_dump_as_of(ah_txn *t, const char *name, uint64_t as_of,
                                 tl_buf *b)
{
	int rc = tl_try_dump_as_of(t, name, as_of, b);

	cr_assert_eq(rc, 0, "dump %s as of %" PRIu64 ": %s (%s)", name, as_of,
	             ah_err_name(rc), ah_txn_errmsg(t));
}

/* The whole readable state of the heap as text (malloc): each arrangement's
 * frontiers and its contents as of since .. min(upper, since + 16) - 1,
 * then each source's position. */
static inline char *tl_state_text(ah_heap *h)
{
	ah_txn *t;
	tl_buf b = { 0 };
	char name[AH_NAME_MAX + 1], prev[AH_NAME_MAX + 1];
	const char *after = NULL;

	tl_put(&b, "state\n");
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	while (ah_arrangement_next(t, after, name) == 0) {
		ah_arrangement_info in;
		cr_assert_eq(ah_arrangement_info_get(t, name, &in), 0);
		tl_put(&b, "arrangement %s upper %" PRIu64 " since %" PRIu64 "\n",
		       name, in.upper, in.since);
		for (uint64_t a = in.since; a < in.upper && a < in.since + 16; a++) {
			tl_put(&b, "as_of %" PRIu64 "\n", a);
			tl_dump_as_of(t, name, a, &b);
		}
		strcpy(prev, name);
		after = prev;
	}
	after = NULL;
	while (ah_source_next(t, after, name) == 0) {
		const void *pos;
		size_t len;
		cr_assert_eq(ah_source_get(t, name, &pos, &len), 0);
		tl_put(&b, "source %s ", name);
		tl_put_bytes(&b, pos, len);
		tl_put(&b, "\n");
		strcpy(prev, name);
		after = prev;
	}
	ah_txn_abort(t);
	return b.p;
}

/* -------------------------------------------------------- hash of state */

typedef struct tl_td {
	uint64_t t;
	int64_t d;
} tl_td;

/* qsort order of (time, diff) pairs: by time. */
static inline int tl_td_cmp(const void *a, const void *b)
{
	const tl_td *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/* Feeds one (key, val)'s (time, diff) list to st: times (already advanced
 * to since by the cursor) sorted and consolidated, zero sums dropped.  The
 * result is the same however the updates are spread over batches, so it is
 * canonical for the logical collection. */
static inline int tl_hash_times(ah_cursor *c, XXH3_state_t *st, tl_td **buf,
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
	qsort(*buf, n, sizeof **buf, tl_td_cmp);
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

static inline int tl_hash_arr(ah_txn *t, const char *name, XXH3_state_t *st,
                              uint64_t *nupd)
{
	ah_cursor *c = NULL;
	tl_td *buf = NULL;
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
			rc = tl_hash_times(c, st, &buf, &cap, nupd);
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

/* What tl_state_hash found. */
typedef struct tl_state {
	uint64_t hash;       /* over everything below and the contents */
	uint64_t narr;       /* arrangements */
	uint64_t updates;    /* consolidated (key, val, time) entries */
	uint64_t model;      /* source "model" position as u64, or 0 */
} tl_state;

/* Hashes the whole state of t's snapshot: each arrangement's name,
 * frontiers, spine shape (batches, merges in progress, stored updates:
 * deterministic for a deterministic history) and contents; each source.
 * With shape = 0 the spine shape is left out (only logical contents). */
static inline int tl_state_hash_txn(ah_txn *t, int shape, tl_state *out)
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
		if ((rc = tl_hash_arr(t, name, st, &out->updates)) != 0)
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

/* The same in a fresh read snapshot of h. */
static inline int tl_state_hash(ah_heap *h, int shape, tl_state *out)
{
	ah_txn *t = NULL;
	int rc = ah_txn_begin(h, AH_TXN_RDONLY, &t);

	if (rc == 0)
		rc = tl_state_hash_txn(t, shape, out);
	ah_txn_abort(t);
	return rc;
}

#define TL_OK(expr)                                                            \
	do {                                                                   \
		int tl_ok_rc_ = (expr);                                        \
		cr_assert_eq(tl_ok_rc_, 0, "%s: %s", #expr,                    \
		             ah_err_name(tl_ok_rc_));                          \
	} while (0)

/* The logical collection of NAME as of its latest time, and the "model"
 * source position (*m, 0 when absent): every (key, val)
 * whose consolidated times are not all zero, with them (a (key, val) whose
 * diffs cancel is there until a merge drops it: not part of the answer). */
static inline void tl_content(ah_heap *h, const char *name, uint64_t *hash,
                              uint64_t *nupd, uint64_t *m)
{
	XXH3_state_t *st = XXH3_createState();
	tl_td *buf = NULL;
	size_t cap = 0;
	ah_cursor *c = NULL;
	ah_txn *t;
	const void *k, *v, *pos;
	size_t kl, vl, len;
	int rc;

	*nupd = 0;
	XXH3_64bits_reset(st);
	TL_OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
	*m = 0;
	if (ah_source_get(t, "model", &pos, &len) == 0 && len == 8)
		memcpy(m, pos, 8);
	TL_OK(ah_cursor_open(t, name, &c));
	while (ah_cursor_key_valid(c)) {
		TL_OK(ah_cursor_key(c, &k, &kl));
		while (ah_cursor_val_valid(c)) {
			XXH3_state_t *one = XXH3_createState();
			uint64_t n = 0;

			TL_OK(ah_cursor_val(c, &v, &vl));
			XXH3_64bits_reset(one);
			TL_OK(tl_hash_times(c, one, &buf, &cap, &n));
			if (n) {
				uint64_t x = XXH3_64bits_digest(one);

				XXH3_64bits_update(st, &kl, sizeof kl);
				XXH3_64bits_update(st, k, kl);
				XXH3_64bits_update(st, &vl, sizeof vl);
				XXH3_64bits_update(st, v, vl);
				XXH3_64bits_update(st, &x, sizeof x);
				*nupd += n;
			}
			XXH3_freeState(one);
			cr_assert_geq(rc = ah_cursor_step_val(c), 0);
		}
		cr_assert_geq(rc = ah_cursor_step_key(c), 0);
	}
	ah_cursor_close(c);
	ah_txn_abort(t);
	*hash = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	free(buf);
}

/* ------------------------------------------------------- a full check */

static inline int tl_verify_problem(const ah_problem *p, void *user)
{
	if ((*(int *)user)++ == 0)
		fprintf(stderr, "ah_verify: %s batch %" PRIu64 " chunk %" PRIu64
		        ": %s\n", p->arrangement, p->batch, p->chunk,
		        p->message);
	return 0;
}

/* ah_verify over the last commit, then every arrangement read to its end
 * by a cursor (tl_state_hash).  ah_verify walks the whole chunks table and
 * recomputes every chunk's checksum (a damaged, missing, leaked or twice
 * referenced chunk is a problem), checks every spine, batch and record;
 * *chunks (may be NULL) gets the number of chunks it checked.  0, or
 * AH_ECORRUPT when it reported a problem (the first goes to stderr), or
 * the error of a call. */
static inline int tl_verify(ah_heap *h, uint64_t *chunks)
{
	ah_txn *t = NULL;
	ah_verify_stats vs;
	tl_state s;
	int problems = 0, rc = ah_txn_begin(h, AH_TXN_RDONLY, &t);

	if (rc == 0)
		rc = ah_verify(t, tl_verify_problem, &problems, &vs);
	ah_txn_abort(t);
	if (rc == 0 && problems != 0)
		rc = AH_ECORRUPT;
	if (rc != 0)
		return rc;
	if (chunks != NULL)
		*chunks = vs.chunks;
	return tl_state_hash(h, 1, &s);
}

#endif /* TESTS_LIB_TL_HEAP_H */
