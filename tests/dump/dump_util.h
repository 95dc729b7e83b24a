/*
 * tests/dump/dump_util.h - the fixture of the ah-dump tests: a private
 * directory per test (du_setup/du_teardown, .init/.fini: removed after a
 * failed assertion too), running `ah-dump HEAP ARGS` and capturing its
 * output and exit status, and JSON checks through python3.  Built on
 * tests/lib (tl_sh runs the commands; heaps are built with the public
 * API).  The tools are found through AH_BUILD, the sources through AH_SRC
 * (both set by `make test`).  Everything here asserts through Criterion:
 * the test's own process only.
 */
#ifndef TESTS_DUMP_DUMP_UTIL_H
#define TESTS_DUMP_DUMP_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrheap.h"
#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_run.h"

/* The running test's directory (one test per process). */
static tl_dir du_tmp;

static inline void du_setup(void)
{
	du_tmp = tl_tmpdir("dump-test");
}

/* .fini: runs after a failed assertion too. */
static inline void du_teardown(void)
{
	tl_dir_cleanup(&du_tmp);
}

/* ah-dump HEAP ARGS: exit status, output in *out. */
static inline int du_dump(const char *heap, const char *args, bool err, char **out)
{
	char cmd[4096];

	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s", tl_build(), heap, args);
	return tl_sh(cmd, err, out);
}

/* Runs `ah-dump HEAP ARGS --json` (must exit want_rc), checks it is one
 * JSON document, and returns what python prints for EXPR over it (d is the
 * document), malloc'd, without the final newline. */
static inline char *du_json(const char *heap, const char *args, int want_rc,
                     const char *expr)
{
	char cmd[8192], js[512], py[512];
	char *out;
	FILE *f;
	int rc;

	snprintf(js, sizeof js, "%s/out.json", du_tmp.dir);
	snprintf(py, sizeof py, "%s/check.py", du_tmp.dir);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s --json > '%s'", tl_build(),
	         heap, args, js);
	rc = tl_sh(cmd, false, NULL);
	cr_assert_eq(rc, want_rc, "%s: exit %d", cmd, rc);
	f = fopen(py, "w");
	cr_assert_not_null(f);
	fprintf(f, "import json, sys\nd = json.load(open(sys.argv[1]))\n"
	           "print(%s)\n", expr);
	fclose(f);
	snprintf(cmd, sizeof cmd, "python3 -S -E '%s' '%s'", py, js);
	rc = tl_sh(cmd, true, &out);
	cr_assert_eq(rc, 0, "python %s on ah-dump %s --json:\n%s", expr, args, out);
	if (*out && out[strlen(out) - 1] == '\n')
		out[strlen(out) - 1] = 0;
	return out;
}

static inline void du_json_eq(const char *heap, const char *args, const char *expr,
                       const char *want)
{
	char *got = du_json(heap, args, 0, expr);

	cr_assert_str_eq(got, want, "ah-dump %s --json: %s", args, expr);
	free(got);
}

static inline void du_ok(int rc, const char *what)
{
	cr_assert_eq(rc, 0, "%s: %s", what, ah_strerror(rc));
}

#endif /* TESTS_DUMP_DUMP_UTIL_H */
