/*
 * tests/lib/tl_run.h - the suite's environment and the built tools.
 * `make test` sets AH_BUILD (where build/ah-load, ah-dump and ah-pgsync
 * are) and AH_SRC (the source tree: README.md, tests/cases, fixtures);
 * without them the tests look in "build" and "." (run from the top of the
 * tree).  AH_TORTURE=1 (`make torture`) makes the long tests longer.
 *
 * tl_sh runs a shell command and captures its output and exit status; it
 * asserts that the command could be started, so it is for the test's own
 * process only.  tl_build, tl_src and tl_torture call no Criterion
 * function.  Public header only: the tools are run, never linked.
 */
#ifndef TESTS_LIB_TL_RUN_H
#define TESTS_LIB_TL_RUN_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static inline const char *tl_build(void)
{
	return getenv("AH_BUILD") ? getenv("AH_BUILD") : "build";
}

static inline const char *tl_src(void)
{
	return getenv("AH_SRC") ? getenv("AH_SRC") : ".";
}

/* 1 when AH_TORTURE is set to anything but "" or "0". */
static inline int tl_torture(void)
{
	const char *t = getenv("AH_TORTURE");

	return t != NULL && *t != '\0' && strcmp(t, "0") != 0;
}

/* Runs cmd through sh (its stderr too when err, else to /dev/null: the
 * redirection is appended to cmd as is, so wrap a list of commands in
 * parentheses to catch all of it); returns the exit status, -1 if it died
 * of a signal.  *out (malloc'd, NUL-terminated; may be NULL) gets
 * everything it printed. */
static inline int tl_sh(const char *cmd, bool err, char **out)
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

#endif /* TESTS_LIB_TL_RUN_H */
