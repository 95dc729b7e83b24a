/*
 * tests/misuse/test_misuse.c - misuse that must fail cleanly (issue 7).
 *  - A second writer process on the same heap waits: LMDB's writer lock
 *    makes its ah_txn_begin block until the first writer's txn ends, then
 *    it proceeds and sees the first writer's commit (documented in
 *    arrheap.h: "a second writer, in this or another process, waits").
 *  - The same heap opened twice in one process is refused with AH_EBUSY
 *    (also through a hard link); a second write txn in the same thread is
 *    AH_ESTATE.
 *  - A heap handle used in a forked child fails with AH_EFORK (begin,
 *    append on the parent's txn, commit, close, stat); the parent's txn
 *    and handle are unaffected, and the child may open the heap anew.
 *  - A cursor used after its transaction ended (or after a mutation in its
 *    write txn) returns AH_ESTATE; closing a heap with a txn open is
 *    AH_ESTATE.
 * Children never call Criterion: plain checks and _exit codes.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "tl_dir.h"
#include "tl_heap.h"

static ah_open_opts opts(void)
{
	return tl_opts(AH_OPEN_CREATE, 64 * TL_MiB, 0);
}

static void append_one(ah_txn *t, const char *name, uint64_t upper,
                       const char *key)
{
	ah_update u = { key, strlen(key), "v", 1, upper, 1 };

	cr_assert_eq(ah_append(t, name, upper, upper + 1, &u, 1), 0);
}

static ah_heap *make_heap(const char *path)
{
	ah_open_opts o = opts();
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	append_one(t, "a", 0, "k0");
	cr_assert_eq(ah_txn_commit(t), 0);
	return h;
}

/* Child of second_writer_waits: 'b' before begin, 'g' once it has the
 * lock; then checks the parent's commit is visible, appends, commits. */
static void second_writer(const char *path, int out)
{
	ah_open_opts o = opts();
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info in;
	ah_update u = { "k2", 2, "v", 1, 2, 1 };

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (ah_open(path, &o, &h) != 0 || write(out, "b", 1) != 1)
		_exit(2);
	if (ah_txn_begin(h, 0, &t) != 0)
		_exit(3);
	if (write(out, "g", 1) != 1)
		_exit(4);
	if (ah_arrangement_info_get(t, "a", &in) != 0 || in.upper != 2)
		_exit(5); /* the first writer's commit must be visible */
	if (ah_append(t, "a", 2, 3, &u, 1) != 0 || ah_txn_commit(t) != 0)
		_exit(6);
	_exit(ah_close(h) == 0 ? 0 : 7);
}

Test(misuse, second_writer_waits, .timeout = 60)
{
	tl_dir d;
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info in;
	int fds[2], status;
	struct pollfd p;
	char c;
	pid_t pid;

	d = tl_tmpdir("misuse");
	h = make_heap(d.path);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0); /* hold the writer lock */
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(fds[0]);
		second_writer(d.path, fds[1]);
	}
	close(fds[1]);
	cr_assert_eq(read(fds[0], &c, 1), 1);
	cr_assert_eq(c, 'b');
	/* It cannot get the lock while we hold it: nothing in 300 ms. */
	p = (struct pollfd){ fds[0], POLLIN, 0 };
	cr_assert_eq(poll(&p, 1, 300), 0, "the second writer did not wait");
	append_one(t, "a", 1, "k1");
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(read(fds[0], &c, 1), 1, "the second writer never ran");
	cr_assert_eq(c, 'g');
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "second writer exited with %d", WEXITSTATUS(status));
	close(fds[0]);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	cr_assert_eq(in.upper, 3, "both writers' commits are there");
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(misuse, open_twice_in_process)
{
	tl_dir d;
	ah_open_opts o = opts();
	ah_heap *h, *h2 = NULL;
	ah_txn *t, *t2;
	char link_path[192];

	d = tl_tmpdir("misuse");
	h = make_heap(d.path);
	cr_assert_eq(ah_open(d.path, &o, &h2), AH_EBUSY);
	cr_assert_null(h2);
	snprintf(link_path, sizeof link_path, "%s/other-name", d.dir);
	cr_assert_eq(link(d.path, link_path), 0);
	cr_assert_eq(ah_open(link_path, &o, &h2), AH_EBUSY);
	o.flags = AH_OPEN_RDONLY;
	cr_assert_eq(ah_open(d.path, &o, &h2), AH_EBUSY);
	/* One writer per thread: a second write txn would self-deadlock. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t2), AH_ESTATE);
	cr_assert_eq(ah_close(h), AH_ESTATE, "close with a txn open");
	/* The first handle still works. */
	append_one(t, "a", 1, "k1");
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	/* Closed: it may be opened again. */
	o = opts();
	cr_assert_eq(ah_open(link_path, &o, &h), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* Child of fork_child_handle: every call on the inherited handle fails
 * with AH_EFORK; a fresh open works.  Exit code = first failed check. */
static int forked_checks(const char *path, ah_heap *h, ah_txn *t)
{
	ah_open_opts o = opts();
	ah_heap *h2;
	ah_txn *t2 = NULL;
	ah_heap_stat st;
	ah_arrangement_info in;

	if (ah_txn_begin(h, AH_TXN_RDONLY, &t2) != AH_EFORK)
		return 2;
	if (ah_append(t, "a", 1, 2, NULL, 0) != AH_EFORK)
		return 3;
	if (ah_heap_stat_get(h, &st) != AH_EFORK)
		return 4;
	if (ah_sync(h) != AH_EFORK)
		return 5;
	if (ah_txn_commit(t) != AH_EFORK) /* frees the child's copy only */
		return 6;
	if (ah_close(h) != AH_EFORK)
		return 7;
	/* A fresh handle of the child's own works (read-only here: the
	 * parent holds the writer lock). */
	if (ah_open(path, &o, &h2) != 0 ||
	    ah_txn_begin(h2, AH_TXN_RDONLY, &t2) != 0 ||
	    ah_arrangement_info_get(t2, "a", &in) != 0 || in.upper != 1)
		return 8;
	ah_txn_abort(t2);
	return ah_close(h2) == 0 ? 0 : 9;
}

Test(misuse, fork_child_handle, .timeout = 60)
{
	tl_dir d;
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info in;
	int status;
	pid_t pid;

	d = tl_tmpdir("misuse");
	h = make_heap(d.path);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	append_one(t, "a", 1, "k1");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(forked_checks(d.path, h, t));
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "child check %d failed", WEXITSTATUS(status));
	/* The parent is unaffected: its txn goes on and commits. */
	append_one(t, "a", 2, "k2");
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	cr_assert_eq(in.upper, 3);
	ah_txn_abort(t);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

static void expect_detached(ah_cursor *c)
{
	const void *p;
	size_t len;
	uint64_t tm;
	int64_t diff;

	cr_assert_eq(ah_cursor_step_key(c), AH_ESTATE);
	cr_assert_eq(ah_cursor_step_val(c), AH_ESTATE);
	cr_assert_eq(ah_cursor_seek_key(c, "k", 1), AH_ESTATE);
	cr_assert_eq(ah_cursor_seek_val(c, "v", 1), AH_ESTATE);
	cr_assert_eq(ah_cursor_rewind_keys(c), AH_ESTATE);
	cr_assert_eq(ah_cursor_rewind_vals(c), AH_ESTATE);
	cr_assert_eq(ah_cursor_key(c, &p, &len), AH_ESTATE);
	cr_assert_eq(ah_cursor_val(c, &p, &len), AH_ESTATE);
	cr_assert_eq(ah_cursor_time_next(c, &tm, &diff), AH_ESTATE);
	cr_assert_eq(ah_cursor_times_rewind(c), AH_ESTATE);
	cr_assert_eq(ah_cursor_accumulate(c, 0, &diff), AH_ESTATE);
	cr_assert_eq(ah_cursor_key_valid(c), 0);
	cr_assert_eq(ah_cursor_val_valid(c), 0);
	ah_cursor_close(c);
}

Test(misuse, cursor_after_txn_end)
{
	tl_dir d;
	ah_heap *h;
	ah_txn *t;
	ah_cursor *c;

	d = tl_tmpdir("misuse");
	h = make_heap(d.path);
	/* After abort of a read txn. */
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	cr_assert_eq(ah_cursor_key_valid(c), 1);
	ah_txn_abort(t);
	expect_detached(c);
	/* After commit of a read txn. */
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	expect_detached(c);
	/* After a mutation in the same write txn, and after its commit. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	append_one(t, "a", 1, "k1");
	expect_detached(c);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	expect_detached(c);
	/* After abort of a write txn. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	ah_txn_abort(t);
	expect_detached(c);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ---- write txns belong to their thread (ARCHITECTURE.md section 3) ----
 * LMDB's writer lock is a mutex held by the thread that began the write
 * txn: a commit or abort from another thread used to return normally and
 * never release it, so the owner's next ah_txn_begin(write) and every
 * other process's writer hung.  Now: another thread's commit is AH_ESTATE
 * and changes nothing; its abort only marks the txn (the owner's calls are
 * AH_EBADTXN, its commit aborts, its abort frees).  Every wait here is
 * bounded (.timeout, alarm in the child), so a regression fails instead of
 * hanging. */

enum { XT_COMMIT, XT_ABORT, XT_MUTATE, XT_BUILDER, XT_BUILDER_ABANDON, XT_READ };

typedef struct xt {
	int op;
	ah_txn *t;
	ah_builder *b;
	int rc[4];
} xt;

static void *xt_run(void *arg)
{
	xt *x = arg;
	ah_update u = { "kx", 2, "v", 1, 1, 1 };
	ah_arrangement_info in;
	int idle;

	switch (x->op) {
	case XT_COMMIT:
		x->rc[0] = ah_txn_commit(x->t);
		break;
	case XT_ABORT:
		ah_txn_abort(x->t);
		break;
	case XT_MUTATE:
		x->rc[0] = ah_append(x->t, "a", 1, 2, &u, 1);
		x->rc[1] = ah_maintain(x->t, "a", 0, &idle);
		x->rc[2] = ah_arrangement_info_get(x->t, "a", &in);
		x->rc[3] = ah_arrangement_create(x->t, "other");
		break;
	case XT_BUILDER:
		x->rc[0] = ah_builder_push(x->b, &u, 1);
		x->rc[1] = ah_builder_finish(x->b);
		break;
	case XT_BUILDER_ABANDON:
		ah_builder_abandon(x->b);
		break;
	case XT_READ:
		x->rc[0] = ah_arrangement_info_get(x->t, "a", &in);
		x->rc[1] = (int)in.upper;
		x->rc[2] = ah_txn_commit(x->t);
		break;
	}
	return NULL;
}

static xt in_thread(int op, ah_txn *t, ah_builder *b)
{
	xt x = { op, t, b, { -1, -1, -1, -1 } };
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, xt_run, &x), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	return x;
}

static uint64_t upper_of(ah_heap *h)
{
	ah_txn *t;
	ah_arrangement_info in;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	ah_txn_abort(t);
	return in.upper;
}

/* Another process's writer appends at UPPER within 10 s (alarm: a hang is
 * SIGALRM, a failed check its exit code). */
static void other_process_writes(const char *path, uint64_t upper)
{
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_open_opts o = opts();
		ah_heap *h;
		ah_txn *t;
		ah_update u = { "kp", 2, "v", 1, upper, 1 };

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(10);
		if (ah_open(path, &o, &h) != 0)
			_exit(2);
		if (ah_txn_begin(h, 0, &t) != 0)
			_exit(3);
		if (ah_append(t, "a", upper, upper + 1, &u, 1) != 0 ||
		    ah_txn_commit(t) != 0)
			_exit(4);
		_exit(ah_close(h) == 0 ? 0 : 5);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(!WIFSIGNALED(status), "the other process's writer hung "
	          "(signal %d): the writer lock was never released",
	          WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "other process's writer failed check %d", WEXITSTATUS(status));
}

Test(misuse, write_txn_commit_other_thread, .timeout = 60)
{
	tl_dir d = tl_tmpdir("misuse");
	ah_heap *h = make_heap(d.path);
	ah_txn *t;
	xt x;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	append_one(t, "a", 1, "k1");
	x = in_thread(XT_COMMIT, t, NULL);
	cr_assert_eq(x.rc[0], AH_ESTATE, "commit from another thread: %d", x.rc[0]);
	/* Every other call from there is refused too, and changes nothing:
	 * not the txn's state, not its message. */
	x = in_thread(XT_MUTATE, t, NULL);
	cr_assert_eq(x.rc[0], AH_ESTATE);
	cr_assert_eq(x.rc[1], AH_ESTATE);
	cr_assert_eq(x.rc[2], AH_ESTATE);
	cr_assert_eq(x.rc[3], AH_ESTATE);
	cr_assert_str_eq(ah_txn_errmsg(t), "");
	/* The txn is still open for its owner, unpoisoned. */
	append_one(t, "a", 2, "k2");
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(upper_of(h), 3);
	/* The lock was released: this thread and another process write. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	append_one(t, "a", 3, "k3");
	cr_assert_eq(ah_txn_commit(t), 0);
	other_process_writes(d.path, 4);
	cr_assert_eq(upper_of(h), 5);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(misuse, write_txn_abort_other_thread, .timeout = 60)
{
	tl_dir d = tl_tmpdir("misuse");
	ah_heap *h = make_heap(d.path);
	ah_txn *t;
	ah_update u = { "k9", 2, "v", 1, 1, 1 };

	/* Abort from another thread, then the owner's abort frees it. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	append_one(t, "a", 1, "k1");
	in_thread(XT_ABORT, t, NULL);
	cr_assert_eq(ah_append(t, "a", 1, 2, &u, 1), AH_EBADTXN);
	cr_assert(strstr(ah_txn_errmsg(t), "another thread"), "%s", ah_txn_errmsg(t));
	ah_txn_abort(t);
	cr_assert_eq(upper_of(h), 1, "nothing of the aborted txn is there");
	other_process_writes(d.path, 1);
	cr_assert_eq(upper_of(h), 2);
	/* Abort from another thread, then the owner's commit aborts. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	append_one(t, "a", 2, "k2");
	in_thread(XT_ABORT, t, NULL);
	cr_assert_eq(ah_txn_commit(t), AH_EBADTXN);
	cr_assert_eq(upper_of(h), 2);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0, "the writer lock was released");
	append_one(t, "a", 2, "k2");
	cr_assert_eq(ah_txn_commit(t), 0);
	other_process_writes(d.path, 3);
	cr_assert_eq(upper_of(h), 4);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(misuse, builder_other_thread, .timeout = 60)
{
	tl_dir d = tl_tmpdir("misuse");
	ah_heap *h = make_heap(d.path);
	ah_txn *t;
	ah_builder *b;
	ah_update u = { "k1", 2, "v", 1, 1, 1 };
	xt x;

	/* push and finish from another thread: AH_ESTATE, the builder stays
	 * open and usable by the owner. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_builder_begin(t, "a", 1, 2, &b), 0);
	x = in_thread(XT_BUILDER, t, b);
	cr_assert_eq(x.rc[0], AH_ESTATE);
	cr_assert_eq(x.rc[1], AH_ESTATE);
	cr_assert_eq(ah_builder_push(b, &u, 1), 0);
	cr_assert_eq(ah_builder_finish(b), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(upper_of(h), 2);
	/* abandon from another thread: as ah_txn_abort from there; the txn
	 * frees the builder when it ends (LeakSanitizer checks). */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_builder_begin(t, "a", 2, 3, &b), 0);
	in_thread(XT_BUILDER_ABANDON, t, b);
	cr_assert_eq(ah_txn_commit(t), AH_EBADTXN);
	cr_assert_eq(upper_of(h), 2);
	other_process_writes(d.path, 2);
	cr_assert_eq(upper_of(h), 3);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(misuse, read_txn_moves_between_threads, .timeout = 60)
{
	tl_dir d = tl_tmpdir("misuse");
	ah_heap *h = make_heap(d.path);
	ah_txn *t;
	xt x;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	x = in_thread(XT_READ, t, NULL);
	cr_assert_eq(x.rc[0], 0);
	cr_assert_eq(x.rc[1], 1);
	cr_assert_eq(x.rc[2], 0, "a read txn may end in another thread");
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
