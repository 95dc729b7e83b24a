/*
 * tests/dump/dump_util.h - helpers of the ah-dump tests: a private
 * directory per test, running a tool command and capturing its output and
 * exit status, JSON checks through python3, and building heaps with the
 * public API.  The tools are found through AH_BUILD, the sources through
 * AH_SRC (both set by `make test`).
 */
#ifndef TESTS_DUMP_DUMP_UTIL_H
#define TESTS_DUMP_DUMP_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "arrheap.h"

static char du_dir[] = "/tmp/ah-dump-test-XXXXXX";

static inline void du_setup(void)
{
	cr_assert_not_null(mkdtemp(du_dir));
}

/* .fini: runs after a failed assertion too. */
static inline void du_teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", du_dir);
	if (system(cmd) != 0)
		cr_log_warn("could not remove %s", du_dir);
}

static inline const char *du_build(void)
{
	return getenv("AH_BUILD") ? getenv("AH_BUILD") : "build";
}

static inline const char *du_src(void)
{
	return getenv("AH_SRC") ? getenv("AH_SRC") : ".";
}

/* Runs cmd through sh (stderr too when err), returns the exit status (-1 if
 * it died of a signal); *out (malloc'd, may be NULL) gets the output. */
static inline int du_sh(const char *cmd, bool err, char **out)
{
	char full[8192];
	size_t n = 0, cap = 1 << 16, got;
	char *buf = malloc(cap);
	FILE *p;
	int st;

	snprintf(full, sizeof full, "%s%s", cmd, err ? " 2>&1" : " 2>/dev/null");
	p = popen(full, "r");
	cr_assert_not_null(p);
	while ((got = fread(buf + n, 1, cap - 1 - n, p)) > 0) {
		n += got;
		if (n + 1 == cap)
			buf = realloc(buf, cap *= 2);
	}
	buf[n] = 0;
	st = pclose(p);
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ah-dump HEAP ARGS: exit status, output in *out. */
static inline int du_dump(const char *heap, const char *args, bool err, char **out)
{
	char cmd[4096];

	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s", du_build(), heap, args);
	return du_sh(cmd, err, out);
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

	snprintf(js, sizeof js, "%s/out.json", du_dir);
	snprintf(py, sizeof py, "%s/check.py", du_dir);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s --json > '%s'", du_build(),
	         heap, args, js);
	rc = du_sh(cmd, false, NULL);
	cr_assert_eq(rc, want_rc, "%s: exit %d", cmd, rc);
	f = fopen(py, "w");
	cr_assert_not_null(f);
	fprintf(f, "import json, sys\nd = json.load(open(sys.argv[1]))\n"
	           "print(%s)\n", expr);
	fclose(f);
	snprintf(cmd, sizeof cmd, "python3 -S -E '%s' '%s'", py, js);
	rc = du_sh(cmd, true, &out);
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

static inline ah_heap *du_open(const char *path)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE };
	ah_heap *h = NULL;
	int rc = ah_open(path, &o, &h);

	cr_assert_eq(rc, 0, "ah_open(%s): %s", path, ah_strerror(rc));
	return h;
}

static inline void du_ok(int rc, const char *what)
{
	cr_assert_eq(rc, 0, "%s: %s", what, ah_strerror(rc));
}

#endif /* TESTS_DUMP_DUMP_UTIL_H */
