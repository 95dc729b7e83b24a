/*
 * tests/dump/test_ops_docs.c - the tools' documentation keeps up with the
 * tools: every ah-dump command of `--help` has its entry in tools/ah-dump.1
 * and its name in README.md; ah-load.1 and ah-pgsync.1 say what the issue
 * asks them to (stdin, the success line; wal_level, REPLICATION, the
 * defaults, that the slot retains WAL); `make install` installs all three
 * pages; groff reads them without a warning.
 */
#include "tests/dump/dump_util.h"

static char *slurp(const char *rel)
{
	char path[600];
	char *buf;
	long n;
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", tl_src(), rel);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

Test(ops_docs, every_dump_command_documented)
{
	char cmd[600], *help, *man = slurp("tools/ah-dump.1"),
		*readme = slurp("README.md");
	int n = 0;

	snprintf(cmd, sizeof cmd, "'%s/ah-dump' --help | sed -n 's/^ah-dump HEAP "
	         "\\([a-z]*\\).*/\\1/p' | sort -u", tl_build());
	cr_assert_eq(tl_sh(cmd, false, &help), 0);
	for (char *c = strtok(help, "\n"); c; c = strtok(NULL, "\n"), n++) {
		char b[80], bi[80], br[80], tick[80];

		snprintf(b, sizeof b, "\n.B %s\n", c);
		snprintf(bi, sizeof bi, "\n.BI %s ", c);
		snprintf(br, sizeof br, "\n.BR %s ", c);
		snprintf(tick, sizeof tick, "`%s", c);
		cr_assert(strstr(man, b) || strstr(man, bi) || strstr(man, br),
		          "tools/ah-dump.1 has no entry for %s", c);
		cr_assert(strstr(readme, tick), "README.md does not name %s", c);
	}
	cr_assert_eq(n, 18, "commands in --help: %d", n);
	free(help);
	free(man);
	free(readme);
}

Test(ops_docs, load_and_pgsync_pages)
{
	char *load = slurp("tools/ah-load.1"), *pg = slurp("tools/ah-pgsync.1");
	const char *in_load[] = {
		".B \\-\n", "applied 3 commits", "nothing to apply: source changelog "
		"already at offset", "CRLF", "one TAB, not spaces", "\\-\\-version",
	};
	const char *in_pg[] = {
		"wal_level = logical", ".B REPLICATION", "\\-\\-version",
		".SH THE SLOT RETAINS WAL", "pg_drop_replication_slot",
		"max_slot_wal_keep_size", "(default\n.BR ah_pgsync ;",
		"(default 200)", "(default 1000)", "(default\n60)",
		".BI wait \" HEAP", ".BI verify \" HEAP", ".BI status \" HEAP",
		".BI \\-\\-confirm\\-after\\-snapshot \" DIR\"",
	};

	for (size_t i = 0; i < sizeof in_load / sizeof *in_load; i++)
		cr_assert(strstr(load, in_load[i]), "ah-load.1 lacks %s", in_load[i]);
	for (size_t i = 0; i < sizeof in_pg / sizeof *in_pg; i++)
		cr_assert(strstr(pg, in_pg[i]), "ah-pgsync.1 lacks %s", in_pg[i]);
	free(load);
	free(pg);
}

Test(ops_docs, installed_and_clean)
{
	char cmd[1200], *out;

	snprintf(cmd, sizeof cmd, "make -s -n -C '%s' install BUILD='%s' "
	         "DESTDIR=/nonexistent | grep -c 'tools/ah-dump.1 tools/ah-load.1 "
	         "tools/ah-pgsync.1 tools/ah-snapshot.1 /nonexistent'", tl_src(),
	         tl_build());
	cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s", out);
	cr_assert_str_eq(out, "1\n");
	free(out);
	if (tl_sh("command -v groff", false, NULL) != 0) {
		cr_log_warn("groff not installed: man pages not rendered");
		return;
	}
	for (const char *m = "ah-dump.1\0ah-load.1\0ah-pgsync.1\0ah-snapshot.1\0"; *m;
	     m += strlen(m) + 1) {
		snprintf(cmd, sizeof cmd, "LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "
		         "'%s/tools/%s'", tl_src(), m);
		cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s: %s", m, out);
		cr_assert_str_eq(out, "", "%s", m);
		free(out);
	}
}

/* maintain's --fuel as the code does it (tests/dump/test_ops_write.c,
 * merging_counts_and_fuel): exactly N units, 0 the whole merge; no claim
 * of steps of at least 65,536 or of "at most about N". */
Test(ops_docs, maintain_fuel_as_the_code_does)
{
	char cmd[600], *help, *man = slurp("tools/ah-dump.1");

	snprintf(cmd, sizeof cmd, "'%s/ah-dump' --help", tl_build());
	cr_assert_eq(tl_sh(cmd, false, &help), 0);
	cr_assert_null(strstr(man, "at least 65,536"));
	cr_assert_null(strstr(man, "at most about N"));
	cr_assert_not_null(strstr(man, "\\-\\-fuel 0 (no limit): one merge of\n"
	                          "the whole trace"));
	cr_assert_not_null(strstr(man, "is not counted against N"));
	cr_assert_not_null(strstr(help, "No --fuel or --fuel 0: one merge of the "
	                          "whole trace"));
	cr_assert_not_null(strstr(help, "merges in progress: N, M"));
	free(help);
	free(man);
}
