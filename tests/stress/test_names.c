/*
 * tests/stress/test_names.c - one heap file reached by several names from
 * several processes.  The promise (include/arrheap.h, ARCHITECTURE.md
 * §10): any two openers of one file, by any name, share one writer lock
 * and one reader table, or the second is refused with AH_EBUSY.  Before,
 * the lock file was named after the path given, so a symlink, a hard
 * link, a renamed file or a deleted lock file gave a second process its
 * own writer lock: two ah-loads through two names lost an arrangement or
 * destroyed the heap.
 *
 * Sharing is observed from outside: a child that opened the heap by
 * another name holds a read snapshot, and the parent's reader table must
 * list the child's pid (one reader table means one lock file, hence one
 * writer mutex).  Public header only; children report through exit codes.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arrheap.h"
#include "tl_dir.h"
#include "tl_run.h"

typedef struct names {
	tl_dir tmp;
	char real[160];  /* tmp.dir/real/heap */
} names;

static void names_init(names *n)
{
	char sub[96];
	ah_heap *h;
	ah_txn *t;
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE,
	                   .max_bytes = 64u << 20 };

	n->tmp = tl_tmpdir("names");
	snprintf(sub, sizeof sub, "%s/real", n->tmp.dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	snprintf(n->real, sizeof n->real, "%s/heap", sub);
	cr_assert_eq(ah_open(n->real, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
}

static void names_fini(names *n)
{
	tl_rmdir(&n->tmp);
}

/* Children open with AH_OPEN_CREATE when set (a new heap at a name). */
static unsigned child_flags;

static ah_heap *open_or(const char *path, int *rc)
{
	ah_open_opts o = { .size = sizeof o, .max_bytes = 64u << 20,
	                   .flags = child_flags };
	ah_heap *h = NULL;

	*rc = ah_open(path, &o, &h);
	return h;
}

static unsigned child_create;

static void child_flags_apply(void)
{
	child_flags = child_create;
}

/* Child: opens path (from dir cwd when given), then holds a read snapshot
 * and writes 'r' to out, or writes 'b' when refused with AH_EBUSY; waits
 * to be killed.  Exit 3 on any other result. */
static pid_t child_open(const char *cwd, const char *path, int out)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_heap *h;
		ah_txn *t;
		int rc;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		child_flags_apply();
		if (cwd != NULL && chdir(cwd) != 0)
			_exit(3);
		h = open_or(path, &rc);
		if (rc == AH_EBUSY) {
			if (write(out, "b", 1) != 1)
				_exit(3);
			_exit(0);
		}
		if (rc != 0 || ah_txn_begin(h, AH_TXN_RDONLY, &t) != 0)
			_exit(3);
		if (write(out, "r", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	return pid;
}

static int find_pid(const ah_reader_info *r, void *user)
{
	return r->pid == *(pid_t *)user && r->txn_id != 0;
}

/* The parent holds path_a open; a child opens path_b.  Returns 'r' when
 * the child shares the parent's reader table, 'b' when it was refused. */
static char second_opener(const char *path_a, const char *cwd,
                          const char *path_b, void (*between)(const names *),
                          const names *n)
{
	int fds[2], rc, status;
	ah_heap *h = open_or(path_a, &rc);
	char c = 0;
	pid_t pid;

	cr_assert_eq(rc, 0, "open %s: %s", path_a, ah_err_name(rc));
	if (between)
		between(n);
	cr_assert_eq(pipe(fds), 0);
	pid = child_open(cwd, path_b, fds[1]);
	close(fds[1]);
	cr_assert_eq(read(fds[0], &c, 1), 1, "child failed opening %s", path_b);
	close(fds[0]);
	if (c == 'r')
		cr_assert_eq(ah_reader_foreach(h, find_pid, &pid), 1,
		             "%s and %s: the child's snapshot is not in the "
		             "parent's reader table (two lock files)", path_a,
		             path_b);
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(c == 'b' || WIFSIGNALED(status));
	cr_assert_eq(ah_close(h), 0);
	return c;
}

Test(names, symlink_shares_the_lock)
{
	names n;
	char s[160];

	names_init(&n);
	snprintf(s, sizeof s, "%s/s", n.tmp.dir);
	cr_assert_eq(symlink(n.real, s), 0);
	cr_assert_eq(second_opener(n.real, NULL, s, NULL, &n), 'r');
	cr_assert_eq(second_opener(s, NULL, n.real, NULL, &n), 'r');
	names_fini(&n);
}

Test(names, symlinked_dir_and_relative_paths_share_the_lock)
{
	names n;
	char dl[160], via[192], cwd[160];

	names_init(&n);
	snprintf(dl, sizeof dl, "%s/dl", n.tmp.dir);
	snprintf(cwd, sizeof cwd, "%s/real", n.tmp.dir);
	cr_assert_eq(symlink(cwd, dl), 0);
	snprintf(via, sizeof via, "%s/heap", dl);
	cr_assert_eq(second_opener(n.real, NULL, via, NULL, &n), 'r');
	cr_assert_eq(second_opener(n.real, cwd, "heap", NULL, &n), 'r');
	cr_assert_eq(second_opener(n.real, n.tmp.dir, "dl/../real/./heap", NULL, &n),
	             'r');
	names_fini(&n);
}

Test(names, hard_link_is_refused_while_open)
{
	names n;
	char hl[160];
	int rc;

	names_init(&n);
	snprintf(hl, sizeof hl, "%s/hard", n.tmp.dir);
	cr_assert_eq(link(n.real, hl), 0);
	cr_assert_eq(second_opener(n.real, NULL, hl, NULL, &n), 'b');
	cr_assert_eq(second_opener(hl, NULL, n.real, NULL, &n), 'b');
	/* Nobody holds it: either name opens. */
	ah_heap *h = open_or(hl, &rc);
	cr_assert_eq(rc, 0);
	cr_assert_eq(ah_close(h), 0);
	names_fini(&n);
}

static void rename_heap(const names *n)
{
	char to[160];

	snprintf(to, sizeof to, "%s/real/moved", n->tmp.dir);
	cr_assert_eq(rename(n->real, to), 0);
}

static void delete_lock(const names *n)
{
	char lock[192];

	snprintf(lock, sizeof lock, "%s-lock", n->real);
	cr_assert_eq(unlink(lock), 0);
}

Test(names, renamed_while_open_is_refused)
{
	names n;
	char to[160];

	names_init(&n);
	snprintf(to, sizeof to, "%s/real/moved", n.tmp.dir);
	cr_assert_eq(second_opener(n.real, NULL, to, rename_heap, &n), 'b');
	names_fini(&n);
}

Test(names, deleted_lock_file_is_refused)
{
	names n;

	names_init(&n);
	cr_assert_eq(second_opener(n.real, NULL, n.real, delete_lock, &n), 'b');
	names_fini(&n);
}

/* Another opener's claim byte found behind one of the same lock file
 * (heap/path.c probes the whole claim range once, and each side of its own
 * byte when what it finds is that byte).  The foreign byte stands for an
 * opener through another lock file: slot 0, a read-only opener without
 * one.  It is taken after the parent's, so the kernel reports the parent's
 * (same slot as the child's) first. */
#define CLAIM_BASE ((off_t)1 << 61) /* heap/path.c */
static int foreign_fd = -1;

static void take_foreign_byte(const names *n)
{
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET,
	                    .l_start = CLAIM_BASE, .l_len = 1 };

	foreign_fd = open(n->real, O_RDONLY | O_CLOEXEC);
	cr_assert_geq(foreign_fd, 0);
	cr_assert_eq(fcntl(foreign_fd, F_OFD_SETLK, &fl), 0);
}

Test(names, other_claim_behind_a_shared_one_is_refused)
{
	names n;

	names_init(&n);
	cr_assert_eq(second_opener(n.real, NULL, n.real, take_foreign_byte, &n),
	             'b');
	close(foreign_fd);
	cr_assert_eq(second_opener(n.real, NULL, n.real, NULL, &n), 'r');
	names_fini(&n);
}

/* One lock file never serves two data files: a heap renamed (or deleted
 * through one of two names) while open, and a new heap created under the
 * old name, would share PATH-lock, so its writer mutex, reader table and
 * commit counter.  Outside testing lost acknowledged commits of both
 * heaps that way, with ah_verify clean. */
Test(names, new_heap_under_a_renamed_heaps_name_is_refused)
{
	names n;

	names_init(&n);
	child_create = AH_OPEN_CREATE;
	cr_assert_eq(second_opener(n.real, NULL, n.real, rename_heap, &n), 'b');
	child_create = 0;
	names_fini(&n);
}

static void unlink_heap_keep_link(const names *n)
{
	char hl[160];

	snprintf(hl, sizeof hl, "%s/real/kept", n->tmp.dir);
	cr_assert_eq(link(n->real, hl), 0);
	cr_assert_eq(unlink(n->real), 0);
}

Test(names, new_heap_under_a_deleted_heaps_name_is_refused)
{
	names n;

	names_init(&n);
	child_create = AH_OPEN_CREATE;
	cr_assert_eq(second_opener(n.real, NULL, n.real, unlink_heap_keep_link,
	                           &n), 'b');
	child_create = 0;
	names_fini(&n);
}

/* The same within one process: refused before the lock file is opened
 * (closing a descriptor of it would drop the open heap's LMDB locks), and
 * the first handle goes on committing. */
Test(names, same_process_new_heap_under_renamed_name_is_refused)
{
	names n;
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE,
	                   .max_bytes = 64u << 20 };
	ah_heap *h, *g = NULL;
	ah_txn *t;
	ah_update u = { "k", 1, "v", 1, 0, 1 };
	int rc;

	names_init(&n);
	h = open_or(n.real, &rc);
	cr_assert_eq(rc, 0);
	rename_heap(&n);
	cr_assert_eq(ah_open(n.real, &o, &g), AH_EBUSY);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", 0, 1, &u, 1), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	/* Another process still finds the writer lock held by our write. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	{
		pid_t pid = fork();
		int st;

		cr_assert_geq(pid, 0);
		if (pid == 0) {
			char moved[192];
			ah_open_opts ro = { .size = sizeof ro };
			ah_heap *c;

			alarm(20);
			snprintf(moved, sizeof moved, "%s/real/moved", n.tmp.dir);
			/* The moved heap by its new name: refused (its lock is
			 * the old name's), never a second writer. */
			_exit(ah_open(moved, &ro, &c) == AH_EBUSY ? 0 : 1);
		}
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	}
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	names_fini(&n);
}

/* The reproduction, as two writer processes: one through a
 * symlink, one through the real path, each committing 100 appends to its
 * own arrangement and 100 compare-and-appends to a shared one.  With one
 * writer lock every commit survives and the heap verifies clean. */
static int writer_proc(const char *path, const char *own)
{
	ah_open_opts o = { .size = sizeof o, .max_bytes = 64u << 20,
	                   .flags = AH_OPEN_NOSYNC };
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info info;
	char key[32];
	int rc = ah_open(path, &o, &h);

	if (rc != 0)
		return 10;
	for (uint64_t k = 0; k < 100 && rc == 0; k++) {
		ah_update u;

		snprintf(key, sizeof key, "%s-%" PRIu64, own, k);
		u = (ah_update){ key, strlen(key), "v", 1, k, 1 };
		if ((rc = ah_txn_begin(h, 0, &t)) != 0)
			break;
		if (k == 0)
			rc = ah_arrangement_create(t, own);
		if (rc == 0)
			rc = ah_append(t, own, k, k + 1, &u, 1);
		if (rc == 0)
			rc = ah_arrangement_info_get(t, "a", &info);
		if (rc == 0) {
			u.time = info.upper;
			rc = ah_append(t, "a", info.upper, info.upper + 1, &u, 1);
		}
		if (rc == 0)
			rc = ah_txn_commit(t);
		else
			ah_txn_abort(t);
	}
	ah_close(h);
	return rc == 0 ? 0 : 11;
}

static int64_t count(ah_txn *t, const char *name, uint64_t as_of)
{
	ah_cursor *c;
	int64_t n = 0, sum;
	int rc = ah_cursor_open(t, name, &c);

	if (rc != 0)
		return -1;
	for (; rc >= 0 && ah_cursor_key_valid(c); rc = ah_cursor_step_key(c)) {
		if ((rc = ah_cursor_accumulate(c, as_of, &sum)) < 0)
			break;
		n += sum;
	}
	ah_cursor_close(c);
	return rc < 0 ? -1 : n;
}

static int count_problem(const ah_problem *p, void *user)
{
	(void)p;
	++*(int *)user;
	return 0;
}

Test(names, two_writers_through_two_names, .timeout = 120)
{
	names n;
	char s[160];
	pid_t pid[2];
	int status, rc, problems = 0;

	names_init(&n);
	snprintf(s, sizeof s, "%s/s", n.tmp.dir);
	cr_assert_eq(symlink(n.real, s), 0);
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		cr_assert_geq(pid[i], 0);
		if (pid[i] == 0)
			_exit(writer_proc(i ? s : n.real, i ? "viasym" : "viareal"));
	}
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(waitpid(pid[i], &status, 0), pid[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		          "writer %d: status %d", i, status);
	}
	ah_heap *h = open_or(n.real, &rc);
	ah_txn *t;
	cr_assert_eq(rc, 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(count(t, "viareal", 99), 100);
	cr_assert_eq(count(t, "viasym", 99), 100);
	cr_assert_eq(count(t, "a", 199), 200);
	cr_assert_eq(ah_verify(t, count_problem, &problems, NULL), 0);
	cr_assert_eq(problems, 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	names_fini(&n);
}

/* Concurrent creation: 6 processes open the same new path with
 * AH_OPEN_CREATE at once (released together by closing a pipe), each
 * commits its own arrangement, 15 rounds.  Every open must succeed and
 * every commit must be in the heap afterwards: before, all creators used
 * PATH.creating (deleting each other's file in progress: AH_ENOTFOUND)
 * and the last rename replaced a heap another creator had already
 * committed to. */
#define NCREATORS 6
Test(names, concurrent_create, .timeout = 120)
{
	names n;
	char path[160], name[16];

	names_init(&n);
	for (int round = 0; round < 15; round++) {
		pid_t pid[NCREATORS];
		int go[2], status, rc;

		snprintf(path, sizeof path, "%s/new%d", n.tmp.dir, round);
		cr_assert_eq(pipe(go), 0);
		for (int i = 0; i < NCREATORS; i++) {
			pid[i] = fork();
			cr_assert_geq(pid[i], 0);
			if (pid[i] == 0) {
				ah_open_opts o = { .size = sizeof o,
				                   .flags = AH_OPEN_CREATE,
				                   .max_bytes = 64u << 20 };
				ah_heap *h;
				ah_txn *t;
				char b;

				close(go[1]);
				if (read(go[0], &b, 1) != 0)
					_exit(9);
				if ((rc = ah_open(path, &o, &h)) != 0)
					_exit(20 + (-rc % 100));
				snprintf(name, sizeof name, "c%d", i);
				if (ah_txn_begin(h, 0, &t) != 0 ||
				    ah_arrangement_create(t, name) != 0 ||
				    ah_txn_commit(t) != 0)
					_exit(12);
				_exit(ah_close(h) == 0 ? 0 : 13);
			}
		}
		close(go[0]);
		close(go[1]);
		for (int i = 0; i < NCREATORS; i++) {
			cr_assert_eq(waitpid(pid[i], &status, 0), pid[i]);
			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			          "round %d creator %d: exit %d", round, i,
			          WEXITSTATUS(status));
		}
		ah_heap *h = open_or(path, &rc);
		ah_txn *t;
		ah_arrangement_info info;

		cr_assert_eq(rc, 0);
		cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
		for (int i = 0; i < NCREATORS; i++) {
			snprintf(name, sizeof name, "c%d", i);
			cr_assert_eq(ah_arrangement_info_get(t, name, &info), 0,
			             "round %d: arrangement %s lost", round, name);
		}
		ah_txn_abort(t);
		cr_assert_eq(ah_close(h), 0);
	}
	/* No temporary file is left behind. */
	char cmd[256];
	snprintf(cmd, sizeof cmd, "ls '%s' | grep -c creating", n.tmp.dir);
	char *out;
	(void)tl_sh(cmd, false, &out); /* grep -c exits 1 when it counts 0 */
	cr_assert_str_eq(out, "0\n");
	free(out);
	names_fini(&n);
}

/* ah_backup killed half-way leaves nothing at PATH (it writes under a
 * temporary name and publishes the finished copy), and a backup onto an
 * existing path is AH_EEXIST and leaves that file alone. */
Test(names, backup_killed_leaves_no_partial_copy, .timeout = 120)
{
	names n;
	char out[160], tmp[192], big[4096];
	ah_open_opts o = { .size = sizeof o, .max_bytes = 1u << 30,
	                   .flags = AH_OPEN_NOSYNC };
	ah_heap *h;
	ah_txn *t;
	struct stat st;
	int status;

	names_init(&n);
	cr_assert_eq(ah_open(n.real, &o, &h), 0);
	memset(big, 'x', sizeof big);
	static char keys[20000][16];
	static ah_update ups[20000];

	for (int k = 0; k < 20000; k++) {
		snprintf(keys[k], sizeof keys[k], "%08d", k);
		ups[k] = (ah_update){ keys[k], 8, big, sizeof big, 0, 1 };
	}
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", 0, 1, ups, 20000), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	snprintf(out, sizeof out, "%s/copy", n.tmp.dir);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (ah_open(n.real, &o, &h) != 0)
			_exit(2);
		_exit(ah_backup(h, out) == 0 ? 0 : 3);
	}
	snprintf(tmp, sizeof tmp, "%s.creating.%d", out, (int)pid);
	bool seen = false;
	for (int i = 0; i < 100000 && !seen; i++) {
		seen = stat(tmp, &st) == 0 && st.st_size > (1 << 20);
		if (!seen)
			usleep(100);
	}
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(seen, "the backup's temporary file never grew");
	cr_assert(WIFSIGNALED(status), "the backup finished before the kill");
	cr_assert_neq(stat(out, &st), 0, "a killed backup left a file at PATH");
	/* The stale temporary of a dead process is swept by the next one. */
	cr_assert_eq(ah_open(n.real, &o, &h), 0);
	cr_assert_eq(ah_backup(h, out), 0);
	cr_assert_neq(stat(tmp, &st), 0, "stale temporary left behind");
	cr_assert_eq(ah_backup(h, out), AH_EEXIST);
	cr_assert_eq(ah_close(h), 0);
	ah_heap *c;
	cr_assert_eq(ah_open(out, &o, &c), 0);
	cr_assert_eq(ah_close(c), 0);
	names_fini(&n);
}
