/*
 * tests/dump/ops_util.h - the heap of known contents the operators' tests
 * (tests/dump/test_ops_*.c) run the tools against, and running a tool
 * with stdout and stderr apart.  Over tests/dump/dump_util.h.
 *
 * ops_heap(path) holds, with batch ids 1 and 2 for a's two batches:
 *   a    batch 1 [0, 2): (k1 x 0 +3) (k1 x 1 -1) (k1 y 1 +2) (k2 x 0 +1)
 *                        (k3 z 1 +1) (k4 w 0 +1) (k4 w 1 -1)
 *        batch 2 [2, 4): (k1 x 2 +5)                      since 3
 *        (no merge: the newer batch is under half the older)
 *   bin  ("\x00\xff\t", "v", 7, +1) in [0, 10)
 *   c    ("k", "v", 0, +1) in [0, 5), since 5 = upper: no readable time
 *   e    created only: upper 0
 *   sources: big (65,536 bytes of 'x'), bin (00 ff), lines ("system=1\n
 *   database=db\nslot=s\n"), s ("pos-7")
 */
#ifndef TESTS_DUMP_OPS_UTIL_H
#define TESTS_DUMP_OPS_UTIL_H

#include <fcntl.h>
#include <unistd.h>

#include "tests/dump/dump_util.h"

static inline void ops_heap(const char *path)
{
	static char big[65536];
	ah_heap *h = tl_open_path(path, 0, 0);
	ah_txn *t;
	ah_update a1[] = {
		{ "k1", 2, "x", 1, 0, 3 }, { "k1", 2, "x", 1, 1, -1 },
		{ "k1", 2, "y", 1, 1, 2 }, { "k2", 2, "x", 1, 0, 1 },
		{ "k3", 2, "z", 1, 1, 1 }, { "k4", 2, "w", 1, 0, 1 },
		{ "k4", 2, "w", 1, 1, -1 },
	};
	ah_update a2 = { "k1", 2, "x", 1, 2, 5 };
	ah_update b = { "\x00\xff\t", 3, "v", 1, 7, 1 };
	ah_update c = { "k", 1, "v", 1, 0, 1 };

	memset(big, 'x', sizeof big);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "a"), "create a");
	du_ok(ah_append(t, "a", 0, 2, a1, 7), "append a 1");
	du_ok(ah_append(t, "a", 2, 4, &a2, 1), "append a 2");
	du_ok(ah_set_since(t, "a", 3), "since a");
	du_ok(ah_arrangement_create(t, "bin"), "create bin");
	du_ok(ah_append(t, "bin", 0, 10, &b, 1), "append bin");
	du_ok(ah_arrangement_create(t, "c"), "create c");
	du_ok(ah_append(t, "c", 0, 5, &c, 1), "append c");
	du_ok(ah_set_since(t, "c", 5), "since c");
	du_ok(ah_arrangement_create(t, "e"), "create e");
	du_ok(ah_source_put(t, "big", big, sizeof big), "source big");
	du_ok(ah_source_put(t, "bin", "\x00\xff", 2), "source bin");
	du_ok(ah_source_put(t, "lines", "system=1\ndatabase=db\nslot=s\n", 28),
	      "source lines");
	du_ok(ah_source_put(t, "s", "pos-7", 5), "source s");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
}

/* Runs cmd with stdout to *out and stderr to *err (both malloc'd); returns
 * the exit status. */
static inline int ops_run(const char *cmd, char **out, char **err)
{
	char full[8192], ef[300];
	FILE *f;
	int rc;

	snprintf(ef, sizeof ef, "%s/stderr.txt", du_tmp.dir);
	snprintf(full, sizeof full, "{ %s 2>'%s'; }", cmd, ef);
	rc = tl_sh(full, false, out);
	f = fopen(ef, "r");
	cr_assert_not_null(f);
	*err = calloc(1, 1 << 16);
	if (fread(*err, 1, (1 << 16) - 1, f) == 0)
		(*err)[0] = 0;
	fclose(f);
	return rc;
}

/* ah-dump HEAP ARGS: exit status want, stdout out_want and stderr
 * err_want exactly (err_want NULL: not checked).  "%H" in either stands
 * for the heap's path. */
static inline void ops_expect(const char *heap, const char *args, int want,
                              const char *out_want, const char *err_want)
{
	char cmd[4096], ow[1 << 15], ew[1 << 15], *out, *err;
	const char *src[2] = { out_want, err_want };
	char *dst[2] = { ow, ew };
	int rc;

	for (int i = 0; i < 2; i++) {
		const char *s = src[i];
		char *o = dst[i];

		if (!s)
			continue;
		for (; *s; s++)
			if (s[0] == '%' && s[1] == 'H') {
				o += sprintf(o, "%s", heap);
				s++;
			} else {
				*o++ = *s;
			}
		*o = 0;
	}
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s", tl_build(), heap, args);
	rc = ops_run(cmd, &out, &err);
	cr_assert_eq(rc, want, "%s: exit %d\nstdout: %s\nstderr: %s", args, rc,
	             out, err);
	cr_assert_str_eq(out, ow, "%s: stdout:\n%s\nwanted:\n%s", args, out, ow);
	if (err_want)
		cr_assert_str_eq(err, ew, "%s: stderr:\n%s\nwanted:\n%s", args, err, ew);
	free(out);
	free(err);
}

#endif /* TESTS_DUMP_OPS_UTIL_H */
