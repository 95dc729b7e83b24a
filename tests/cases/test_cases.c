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
#include <sys/wait.h>

Test(cases, run_sh, .timeout = 120)
{
	const char *src = getenv("AH_SRC") ? getenv("AH_SRC") : ".";
	const char *build = getenv("AH_BUILD") ? getenv("AH_BUILD") : "build";
	char cmd[4096];
	static char out[1 << 16];
	size_t n = 0, got;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "bash '%s/tests/cases/run.sh' '%s/tests/cases' "
	         "'%s' 2>&1", src, src, build);
	p = popen(cmd, "r");
	cr_assert_not_null(p, "popen %s", cmd);
	while ((got = fread(out + n, 1, sizeof(out) - 1 - n, p)) > 0)
		n += got;
	out[n] = '\0';
	st = pclose(p);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	          "%s\nexited %d:\n%s", cmd, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
	          out);
	cr_assert(strstr(out, " 0 failed") != NULL, "%s", out);
}
