/*
 * tests/fault/test_corrupt_pages.c - damaged LMDB pages against the whole
 * read path, in-process and through ah-dump (issue "Nothing acknowledged is
 * ever lost", items 8, 9): a child page pointer that makes iteration go
 * back (it must end in AH_ECORRUPT, not spin), one that makes liblmdb
 * assert (ah_verify must report it, not abort), the fuzzer's SIGBUS input
 * opened in-process, a name that holds a NUL.  The sweep over every class
 * of page is tests/fault/test_corrupt_sweep.c.
 *
 * Each damaged heap is read in a forked child under alarm(): a hang or a
 * signal is a failure, and so is any answer that is neither an error nor
 * exactly the undamaged heap's.  The page layout is found with
 * tests/fault/lmdb_pages.h on the undamaged file.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>

#include "lmdb_pages.h"
#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_run.h"

/* Runs fn(arg) in a forked child under alarm(secs); returns its exit
 * status, or 128 + signal. */
static int in_child(int (*fn)(const char *path), const char *path,
                    unsigned secs)
{
	pid_t pid = fork();
	int st;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(secs);
		_exit(fn(path));
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* n arrangements "aNNN", one update each, in one commit: the arr, batch
 * and chunks trees get a branch root. */
static void many_arrangements(const char *path, int n)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * TL_MiB, 0);
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (int a = 0; a < n; a++) {
		char name[8];
		ah_update u = { name, 4, "v", 1, 0, 1 };

		snprintf(name, sizeof name, "a%03d", a);
		cr_assert_eq(ah_arrangement_create(t, name), 0);
		cr_assert_eq(ah_append(t, name, 0, 1, &u, 1), 0);
	}
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
}

/* Points node 1 of tree's root at page to (child 0, or the root itself). */
static void repoint(const char *path, enum lp_tree tree, bool to_root)
{
	lp_file f;
	uint64_t root;

	cr_assert_eq(lp_load(path, &f), 0);
	root = f.root[tree];
	cr_assert_eq(f.depth[tree], 2, "%s depth %llu", lp_tree_names[tree],
	             (unsigned long long)f.depth[tree]);
	cr_assert_geq(lp_nkeys(&f, root), 2);
	lp_set_child(&f, root, 1, to_root ? root : lp_child(&f, root, 0));
	cr_assert_eq(lp_store(&f, path, root * LP_PSIZE, LP_PSIZE), 0);
	lp_unload(&f);
}

/* Child: every name once, in order, then AH_ECORRUPT (exit 0); a name not
 * after the previous is a wrong answer (2), the end of the list one too
 * (3: child 1's keys were never listed). */
static int list_names(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	char name[AH_NAME_MAX + 1], prev[AH_NAME_MAX + 1] = "";
	ah_heap *h;
	ah_txn *t;
	int rc = 0;

	if (ah_open(path, &o, &h) || ah_txn_begin(h, AH_TXN_RDONLY, &t))
		return 4;
	for (int i = 0; i < 1000; i++) {
		rc = ah_arrangement_next(t, i ? prev : NULL, name);
		if (rc)
			break;
		if (i && strcmp(name, prev) <= 0)
			return 2;
		strcpy(prev, name);
	}
	ah_txn_abort(t);
	ah_close(h);
	return rc == AH_ECORRUPT ? 0 : rc == AH_ENOTFOUND ? 3 : 5;
}

/* Item 8: on a branch page whose second child is its first, MDB_SET_RANGE
 * then MDB_NEXT goes back to the first key: heap_next must see that its
 * answer is not after `after` and say AH_ECORRUPT. */
Test(corrupt_pages, next_never_goes_back, .timeout = 60)
{
	tl_dir d;
	int st;

	d = tl_tmpdir("fault");
	many_arrangements(d.path, 300);
	repoint(d.path, LP_ARR, false);
	st = in_child(list_names, d.path, 20);
	cr_assert_eq(st, 0, "listing names: exit %d (2: went back, 3: ended "
	             "early, 128+: signal)", st);
	tl_rmdir(&d);
}

/* A key byte of the last arrangement set to NUL: the name comes back cut
 * short, is fed back as `after`, and LMDB answers the same key again. */
Test(corrupt_pages, name_with_nul_ends_listing, .timeout = 60)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * TL_MiB, 0);
	tl_dir d;
	lp_file f;
	ah_heap *h;
	ah_txn *t;
	uint8_t *at = NULL;
	int st, hits = 0;

	d = tl_tmpdir("fault");
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (int a = 0; a < 11; a++) {
		char name[8];

		snprintf(name, sizeof name, a < 10 ? "a%03d" : "zz9", a);
		cr_assert_eq(ah_arrangement_create(t, name), 0);
	}
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(lp_load(d.path, &f), 0);
	for (uint8_t *p = f.b; (p = memmem(p, f.b + f.len - p, "zz9", 3)); p++) {
		at = p;
		hits++;
	}
	cr_assert_eq(hits, 1, "\"zz9\" stored %d times", hits);
	at[2] = 0;
	cr_assert_eq(lp_store(&f, d.path, (uint64_t)(at + 2 - f.b), 1), 0);
	lp_unload(&f);
	st = in_child(list_names, d.path, 20);
	cr_assert_eq(st, 0, "listing names: exit %d (2: went back)", st);
	tl_rmdir(&d);
}

static int count_problem(const ah_problem *p, void *user)
{
	(void)p;
	++*(uint64_t *)user;
	return 0;
}

/* Child: ah_verify reports problems (0), then every read call answers or
 * fails without a signal. */
static int verify_then_read(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	char name[AH_NAME_MAX + 1];
	const char *after = NULL;
	ah_arrangement_info in;
	ah_verify_stats st;
	uint64_t problems = 0;
	ah_heap *h;
	ah_txn *t;
	tl_state s;
	int rc;

	if ((rc = ah_open(path, &o, &h)) != 0)
		return rc == AH_ECORRUPT ? 0 : 4;
	if (ah_txn_begin(h, AH_TXN_RDONLY, &t) ||
	    ah_verify(t, count_problem, &problems, &st))
		return 5;
	if (problems == 0 || st.problems != problems)
		return 6;
	for (int i = 0; i < 1000 && (rc = ah_arrangement_next(t, after, name)) == 0;
	     i++) {
		(void)ah_arrangement_info_get(t, name, &in);
		after = name;
	}
	(void)tl_state_hash_txn(t, 1, &s);
	ah_txn_abort(t);
	return ah_close(h) ? 7 : 0;
}

/* Item 9: a branch page's child pointing back at the branch makes
 * liblmdb's mdb_cursor_next assert IS_LEAF (SIGABRT) in ah_verify's scan
 * of the chunks table.  Verify must report the damaged tree and skip it. */
Test(corrupt_pages, verify_survives_lmdb_assert, .timeout = 60)
{
	tl_dir d;
	char cmd[512];
	int st;

	d = tl_tmpdir("fault");
	many_arrangements(d.path, 300);
	repoint(d.path, LP_CHUNKS, true);
	st = in_child(verify_then_read, d.path, 20);
	cr_assert_eq(st, 0, "verify then read: exit %d (128+: signal)", st);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' verify >/dev/null 2>&1",
	         tl_build(), d.path);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "ah-dump verify: %d",
	          st);
	tl_rmdir(&d);
}

/* The fuzzer's raw-file input whose damaged main-DB page made liblmdb
 * SIGBUS in mdb_dbi_open (tests/fuzz/lmdb/): in-process, ah_open must
 * refuse it (or verify report it), never fault. */
Test(corrupt_pages, fuzz_sigbus_input_in_process, .timeout = 60)
{
	const char *src = tl_src();
	char from[512];
	tl_dir d;
	int st;

	d = tl_tmpdir("fault");
	snprintf(from, sizeof from, "%s/tests/fuzz/lmdb/"
	         "crash-b785d507a55dae8312d6c06f4bb8afc603252e6b", src);
	cr_assert_eq(tl_copy(from, d.path), 0, "copy %s", from);
	st = in_child(verify_then_read, d.path, 20);
	cr_assert_eq(st, 0, "open/verify of the SIGBUS input: exit %d", st);
	tl_rmdir(&d);
}
