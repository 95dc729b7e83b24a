/*
 * tests/api/test_readme.c - the README's C example is compiled and run, so
 * it stays true: its block (from "#include <arrheap.h>" to the closing
 * fence) becomes the body of a function, built against the public header
 * and build/libarrheap.a with -Werror, and run in a fresh directory; it
 * must return 0 and leave a heap whose "orders" holds k1/v1 at time 0;
 * run again it fails (AH_EEXIST, as its comment says) and changes nothing.
 * Skipped when AH_SRC or AH_BUILD is not set (the Makefile sets both).
 */
#include <sys/wait.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_heap.h"

/* The heap at path holds what the example commits: k1/v1 at time 0. */
static void orders_hold_k1(const char *path)
{
	ah_heap *h;
	ah_txn *t;
	tl_buf b = { 0 };

	cr_assert_eq(ah_open(path, NULL, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	tl_dump_as_of(t, "orders", 0, &b);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_str_eq(b.p, "6b31 7631 1\n");
	free(b.p);
}

Test(api_readme, example_compiles_and_runs, .timeout = 120)
{
	const char *src = getenv("AH_SRC"), *build = getenv("AH_BUILD");
	const char *san = getenv("AH_SAN"); /* the sanitizer build's flags */
	char path[512], cmd[2048];

	if (!src || !build)
		cr_skip_test("AH_SRC/AH_BUILD not set");
	snprintf(path, sizeof path, "%s/README.md", src);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	tl_dir d = tl_tmpdir("api");
	snprintf(path, sizeof path, "%s/example.c", d.dir);
	FILE *o = fopen(path, "w");
	cr_assert_not_null(o);
	fprintf(o, "#include <arrheap.h>\n#include <stdint.h>\n"
	           "static int example(void)\n{\n");
	char line[1024];
	int state = 0, lines = 0; /* 0 before the block, 1 inside, 2 after */
	while (fgets(line, sizeof line, f)) {
		if (state == 0 && strcmp(line, "#include <arrheap.h>\n") == 0) {
			state = 1;
			continue;
		}
		if (state == 1 && strncmp(line, "```", 3) == 0) {
			state = 2;
			break;
		}
		if (state == 1) {
			fputs(line, o);
			lines++;
		}
	}
	fclose(f);
	cr_assert_eq(state, 2, "no C example found in README.md");
	cr_assert_gt(lines, 20);
	fprintf(o, "}\nint main(void) { return example() == 0 ? 0 : 1; }\n");
	cr_assert_eq(fclose(o), 0);
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && cc -std=c11 -Wall -Wextra -Werror %s "
	         "-I'%s/include' -o example example.c '%s/libarrheap.a' "
	         "-llmdb -lpthread -lm 2>&1 && ./example 2>&1",
	         d.dir, san ? san : "", src, build);
	int st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d", cmd, st);

	/* What the example committed. */
	snprintf(path, sizeof path, "%s/state.heap", d.dir);
	orders_hold_k1(path);
	/* Run again, as its comment says: create finds "orders" (AH_EEXIST,
	 * the example returns it), and the heap is as it was. */
	snprintf(cmd, sizeof cmd, "cd '%s' && ./example 2>&1", d.dir);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "second run: status %d",
	          st);
	orders_hold_k1(path);
	tl_rmdir(&d);
}
