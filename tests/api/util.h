/*
 * tests/api/util.h - helpers for tests that see only the public header:
 * a private directory per test, opening heaps, and a canonical text form of
 * a heap's whole state (frontiers, contents at every readable time, source
 * positions) to compare "unchanged" exactly.
 */
#ifndef TESTS_API_UTIL_H
#define TESTS_API_UTIL_H

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrheap.h"

static inline char *tu_tmpdir(void)
{
	char *d = strdup("/tmp/ahtest.XXXXXX");
	cr_assert(mkdtemp(d) != NULL);
	return d;
}

static inline void tu_rmdir(char *d)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	cr_assert_eq(system(cmd), 0);
	free(d);
}

static inline ah_heap *tu_open(const char *dir, const char *file, unsigned flags,
                               uint64_t quantum)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	ah_open_opts o = { .size = sizeof o, .flags = flags | AH_OPEN_CREATE,
	                   .merge_quantum = quantum };
	ah_heap *h = NULL;
	int rc = ah_open(path, &o, &h);
	cr_assert_eq(rc, 0, "ah_open(%s): %s", path, ah_strerror(rc));
	return h;
}

/* A growable string. */
typedef struct tu_buf {
	char *p;
	size_t len, cap;
} tu_buf;

static inline void tu_put(tu_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline void tu_put(tu_buf *b, const char *fmt, ...)
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
		cr_assert(b->p);
	}
}

static inline void tu_put_bytes(tu_buf *b, const void *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = p;
	if (b->len + 2 * n + 1 > b->cap) {
		b->cap = (b->len + 2 * n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		cr_assert(b->p);
	}
	for (size_t i = 0; i < n; i++) {
		b->p[b->len++] = hex[s[i] >> 4];
		b->p[b->len++] = hex[s[i] & 15];
	}
	b->p[b->len] = 0;
}

/* Appends NAME's contents as of as_of: "key val diff" lines, hex.  Uses no
 * Criterion assertion, so forked children may call it; returns a status. */
static inline int tu_try_dump_as_of(ah_txn *t, const char *name, uint64_t as_of, tu_buf *b)
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
				tu_put_bytes(b, k, kl);
				tu_put(b, " ");
				tu_put_bytes(b, v, vl);
				tu_put(b, " %" PRId64 "\n", sum);
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

static inline void tu_dump_as_of(ah_txn *t, const char *name, uint64_t as_of, tu_buf *b)
{
	int rc = tu_try_dump_as_of(t, name, as_of, b);
	cr_assert_eq(rc, 0, "dump %s as of %" PRIu64 ": %s (%s)", name, as_of,
	             ah_err_name(rc), ah_txn_errmsg(t));
}

/* The whole readable state of the heap, as text (caller frees). */
static inline char *tu_state(ah_heap *h)
{
	ah_txn *t;
	tu_buf b = { 0 };
	tu_put(&b, "state\n");
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	char name[AH_NAME_MAX + 1];
	const char *after = NULL;
	char prev[AH_NAME_MAX + 1];
	while (ah_arrangement_next(t, after, name) == 0) {
		ah_arrangement_info in;
		cr_assert_eq(ah_arrangement_info_get(t, name, &in), 0);
		tu_put(&b, "arrangement %s upper %" PRIu64 " since %" PRIu64 "\n", name,
		       in.upper, in.since);
		for (uint64_t a = in.since; a < in.upper && a < in.since + 16; a++) {
			tu_put(&b, "as_of %" PRIu64 "\n", a);
			tu_dump_as_of(t, name, a, &b);
		}
		strcpy(prev, name);
		after = prev;
	}
	after = NULL;
	while (ah_source_next(t, after, name) == 0) {
		const void *pos;
		size_t len;
		cr_assert_eq(ah_source_get(t, name, &pos, &len), 0);
		tu_put(&b, "source %s ", name);
		tu_put_bytes(&b, pos, len);
		tu_put(&b, "\n");
		strcpy(prev, name);
		after = prev;
	}
	ah_txn_abort(t);
	return b.p;
}

#endif
