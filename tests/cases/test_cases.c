/*
 * tests/cases/test_cases.c - runs the arrangement cases (one folder per case under tests/cases) end
 * to end through the command-line tools: `bash run.sh CASES BUILD` must exit
 * 0.  The case folders are a verbatim copy of the shared cases; never edit
 * an expected output to make this pass.
 *
 * Needs the tools built: the Makefile's test target sets AH_SRC (repo root)
 * and AH_BUILD (build dir holding ah-load and ah-dump).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tl_dir.h"
#include "tl_run.h"

Test(cases, run_sh, .timeout = 120)
{
	char cmd[4096], *out;
	int rc;

	snprintf(cmd, sizeof(cmd), "bash '%s/tests/cases/run.sh' '%s/tests/cases' "
	         "'%s'", tl_src(), tl_src(), tl_build());
	rc = tl_sh(cmd, true, &out);
	cr_assert(rc == 0, "%s\nexited %d:\n%s", cmd, rc, out);
	cr_assert(strstr(out, " 0 failed") != NULL, "%s", out);
	free(out);
}

/* Runs CMD (stdout+stderr captured, at most cap - 1 bytes kept), returns
 * its exit status. */
static int run_capture(const char *cmd, char *out, size_t cap)
{
	char full[4096], *text;
	int rc;

	snprintf(full, sizeof(full), "(%s)", cmd);
	rc = tl_sh(full, true, &text);
	snprintf(out, cap, "%s", text);
	free(text);
	cr_assert(rc >= 0, "%s died", cmd);
	return rc;
}

static tl_dir bad;

static void bad_setup(void)
{
	bad = tl_tmpdir("dump-bad");
}

/* .fini: runs after a failed assertion too. */
static void bad_teardown(void)
{
	tl_dir_cleanup(&bad);
}

/* ah-dump on things that are no heap: one line on stderr, exit 1, no crash,
 * and no lock file left beside a file it refused. */
Test(cases, dump_bad_input, .init = bad_setup, .fini = bad_teardown)
{
	const char *build = tl_build();
	const char *dir = bad.dir;
	char cmd[1024], out[16384];
	const char *setup = "cd '%s' && : > empty && head -c 65536 /dev/zero > zeros "
	                    "&& printf 'hello\\n' > text && mkdir sub";
	const char *heaps[] = { "missing", "empty", "zeros", "text", "sub" };

	snprintf(cmd, sizeof(cmd), setup, dir);
	cr_assert_eq(system(cmd), 0);
	for (size_t i = 0; i < sizeof(heaps) / sizeof(heaps[0]); i++) {
		for (int c = 0; c < 3; c++) {
			const char *args[] = { "", "arrangements", "read a" };

			snprintf(cmd, sizeof(cmd), "'%s/ah-dump' '%s/%s' %s", build, dir,
			         heaps[i], args[c]);
			cr_assert_eq(run_capture(cmd, out, sizeof(out)), 1, "%s: %s", cmd, out);
			cr_assert(strncmp(out, "ah-dump: ", 9) == 0 &&
			          strchr(out, '\n') == out + strlen(out) - 1,
			          "%s: not one line: %s", cmd, out);
		}
	}
	snprintf(cmd, sizeof(cmd), "ls '%s' | tr '\\n' ' '", dir);
	run_capture(cmd, out, sizeof(out));
	cr_assert_str_eq(out, "empty sub text zeros ");
	snprintf(cmd, sizeof(cmd), "'%s/ah-dump' '%s/empty' frobnicate", build, dir);
	cr_assert_eq(run_capture(cmd, out, sizeof(out)), 2, "%s", out);
	snprintf(cmd, sizeof(cmd), "'%s/ah-dump' --help", build);
	cr_assert_eq(run_capture(cmd, out, sizeof(out)), 0, "%s", out);
	cr_assert(strstr(out, "read NAME [--as-of T]"), "%s", out);
}
