/*
 * tests/dump/test_ops_load.c - ah-load for operators, exact output: the
 * line it prints on success (applied, already there, resumed), "-" as
 * standard input (a pipe, resumed by reading through; a redirected file),
 * and the two mistakes of hand-made changelogs named as such (a CRLF file,
 * spaces instead of TABs).
 */
#include "tests/dump/ops_util.h"

static char heap[300], log_path[300];

static void setup(void)
{
	du_setup();
	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	snprintf(log_path, sizeof log_path, "%s/log", du_tmp.dir);
}

static void write_log(const char *text, const char *mode)
{
	FILE *f = fopen(log_path, mode);

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

/* Runs `ah-load HEAP CHANGELOG` (args after the heap, or a whole shell
 * line with %s for the tool and %s for the heap when pipe). */
static void load(const char *args, int want, const char *out_want,
                 const char *err_want)
{
	char cmd[2048], *o, *e;
	int rc;

	snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' %s", tl_build(), heap, args);
	rc = ops_run(cmd, &o, &e);
	cr_assert_eq(rc, want, "%s: %d\n%s\n%s", args, rc, o, e);
	cr_assert_str_eq(o, out_want, "%s: stdout:\n%s", args, o);
	cr_assert_str_eq(e, err_want, "%s: stderr:\n%s", args, e);
	free(o);
	free(e);
}

static const char first[] = "arrange\ta\nupdate\ta\t0\tk\tv\t1\nadvance\ta\t1\n"
                            "commit\narrange\tb\ncommit\n";

Test(ops_load, says_what_it_applied, .init = setup, .fini = du_teardown)
{
	char args[400];

	write_log(first, "w");
	snprintf(args, sizeof args, "'%s'", log_path);
	load(args, 0, "applied 2 commits (6 records, 1 update); source changelog "
	     "at offset 63\n", "");
	load(args, 0, "nothing to apply: source changelog already at offset 63\n",
	     "");
	write_log("update\ta\t1\tk\tv\t2\nadvance\ta\t2\ncommit\n", "a");
	load(args, 0, "resumed at offset 63; applied 1 commit (3 records, 1 "
	     "update); source changelog at offset 99\n", "");
	/* Another source name starts over, and the frontiers fence it off. */
	snprintf(args, sizeof args, "'%s' --source other", log_path);
	{
		char want[600];

		snprintf(want, sizeof want, "%s:2: time before upper: time 0 < a upper "
		         "2\n", log_path);
		load(args, 1, "", want);
	}
	write_log("# nothing\n\n", "w");
	snprintf(args, sizeof args, "'%s' --source s2", log_path);
	{
		char want[600];

		snprintf(want, sizeof want, "nothing to apply: %s holds no commit "
		         "record\n", log_path);
		load(args, 0, want, "");
	}
	ops_expect(heap, "read a", 0, "k\tv\t3\n", "");
}

Test(ops_load, stdin_pipe_and_redirect, .init = setup, .fini = du_teardown)
{
	char cmd[2048], *o, *e;

	write_log(first, "w");
	snprintf(cmd, sizeof cmd, "cat '%s' | '%s/ah-load' '%s' -", log_path,
	         tl_build(), heap);
	cr_assert_eq(ops_run(cmd, &o, &e), 0, "%s", e);
	cr_assert_str_eq(o, "applied 2 commits (6 records, 1 update); source "
	                 "changelog at offset 63\n");
	free(o);
	free(e);
	/* The same stream again: read through to the stored position. */
	cr_assert_eq(ops_run(cmd, &o, &e), 0, "%s", e);
	cr_assert_str_eq(o, "nothing to apply: source changelog already at "
	                 "offset 63\n");
	free(o);
	free(e);
	/* Grown, through a pipe and through a redirect. */
	write_log("update\ta\t1\tk\tv\t2\nadvance\ta\t2\ncommit\n", "a");
	cr_assert_eq(ops_run(cmd, &o, &e), 0, "%s", e);
	cr_assert_str_eq(o, "resumed at offset 63; applied 1 commit (3 records, 1 "
	                 "update); source changelog at offset 99\n");
	free(o);
	free(e);
	snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' - < '%s'", tl_build(), heap,
	         log_path);
	cr_assert_eq(ops_run(cmd, &o, &e), 0, "%s", e);
	cr_assert_str_eq(o, "nothing to apply: source changelog already at "
	                 "offset 99\n");
	free(o);
	free(e);
	/* A stream shorter than the stored position is another one. */
	snprintf(cmd, sizeof cmd, "head -c 70 '%s' | '%s/ah-load' '%s' -",
	         log_path, tl_build(), heap);
	cr_assert_eq(ops_run(cmd, &o, &e), 1);
	cr_assert_str_eq(o, "");
	cr_assert_str_eq(e, "ah-load: -: changelog is shorter than the stored "
	                 "position 99: not the file this heap was loaded from\n");
	free(o);
	free(e);
	/* As is one with no commit ending there. */
	snprintf(cmd, sizeof cmd, "yes '#' | head -c 100 | '%s/ah-load' '%s' -",
	         tl_build(), heap);
	cr_assert_eq(ops_run(cmd, &o, &e), 1);
	cr_assert_str_eq(e, "ah-load: -: no commit record ends at the stored "
	                 "position 99: not the file this heap was loaded from\n");
	free(o);
	free(e);
	ops_expect(heap, "read a", 0, "k\tv\t3\n", "");
}

Test(ops_load, crlf_and_spaces_named, .init = setup, .fini = du_teardown)
{
	const struct {
		const char *text, *why;
	} cases[] = {
		{ "arrange\ta\r\ncommit\r\n", "1: line ends with CR: a CRLF (DOS) file? "
		  "Lines end with LF alone (convert with dos2unix or sed 's/\\r$//')" },
		{ "arrange a\ncommit\n", "1: unknown record \"arrange a\" (fields are "
		  "separated by one TAB, not spaces)" },
		{ "arrange\ta\nadvance\ta 5\ncommit\n", "2: advance takes 3 fields, "
		  "not 2 (fields are separated by one TAB, not spaces)" },
		{ "arrange\ta b\n", "1: bad name \"a b\" (fields are separated by one "
		  "TAB, not spaces)" },
		{ "arrange\ta\nupdate\ta\t0\tk\tv\t 1\n", "2: bad DIFF (decimal int64) "
		  "\" 1\" (fields are separated by one TAB, not spaces)" },
		{ "arrange\ta?\n", "1: bad name \"a?\"" },
	};
	char args[400], want[600];

	snprintf(args, sizeof args, "'%s'", log_path);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		write_log(cases[i].text, "w");
		snprintf(want, sizeof want, "%s:%s\n", log_path, cases[i].why);
		load(args, 1, "", want);
	}
}

Test(ops_load, help_and_version, .init = setup, .fini = du_teardown)
{
	char cmd[400], *o;

	snprintf(cmd, sizeof cmd, "'%s/ah-load' --help", tl_build());
	cr_assert_eq(tl_sh(cmd, true, &o), 0);
	cr_assert(strstr(o, "\"-\": standard input"), "%s", o);
	cr_assert(strstr(o, "nothing to apply: source NAME already at offset X"),
	          "%s", o);
	free(o);
	snprintf(cmd, sizeof cmd, "'%s/ah-load' --version", tl_build());
	cr_assert_eq(tl_sh(cmd, true, &o), 0);
	{
		char want[200];

		snprintf(want, sizeof want, "ah-load (arrheap) %s, library %s\n",
		         AH_VERSION_STRING, ah_version(NULL, NULL, NULL));
		cr_assert_str_eq(o, want);
	}
	free(o);
}
