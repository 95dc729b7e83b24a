/*
 * tests/holds/test_holds.c - durable named read holds, from outside (public
 * header only): each promise of ah_hold_set / drop / foreach / meet and of
 * ah_set_since against holds, tried to break.  Since refused past a live
 * hold with the hold named; drop one of two holds and since still stops at
 * the other; leases (1 ms and a 50 ms sleep to expire, 1 hour not to; no
 * other timing); released holds seen through ah_hold_foreach and
 * `ah-dump holds`; holds across close/reopen, a kill -9 of another process
 * mid-transaction, and another process holding while this one advances
 * since; snapshots carry them; a flipped byte in a hold record is found by
 * ah_verify and refused by every since decision; bad input changes
 * nothing.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_run.h"

#define HOUR_MS 3600000u

static tl_dir dir;
static ah_heap *h;

/* "orders" with upper 200 and since 0. */
static void setup(void)
{
	ah_txn *t;

	dir = tl_tmpdir("holds");
	h = tl_open_path(dir.path, 0, 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "orders"), 0);
	cr_assert_eq(ah_advance(t, "orders", 0, 200), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
}

static void teardown(void)
{
	if (h)
		cr_assert_eq(ah_close(h), 0);
	h = NULL;
	tl_dir_cleanup(&dir);
}

TestSuite(holds, .init = setup, .fini = teardown);

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* One write txn: ah_hold_set, committed; returns its result (aborts on
 * failure) and copies the txn's message into msg (may be NULL). */
static int set_hold(const char *arr, const char *hold, uint64_t at,
                    uint64_t lease, char *msg, size_t cap)
{
	ah_txn *t;
	int rc;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	rc = ah_hold_set(t, arr, hold, at, lease);
	if (msg)
		snprintf(msg, cap, "%s", ah_txn_errmsg(t));
	if (rc == 0)
		return ah_txn_commit(t);
	ah_txn_abort(t);
	return rc;
}

static int set_since(const char *arr, uint64_t since, char *msg, size_t cap)
{
	ah_txn *t;
	int rc;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	rc = ah_set_since(t, arr, since);
	if (msg)
		snprintf(msg, cap, "%s", ah_txn_errmsg(t));
	if (rc == 0)
		return ah_txn_commit(t);
	/* Every mutation error poisons. */
	cr_assert_eq(ah_advance(t, arr, 200, 200), AH_EBADTXN);
	ah_txn_abort(t);
	return rc;
}

static int drop_hold(const char *arr, const char *hold)
{
	ah_txn *t;
	int rc;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	rc = ah_hold_drop(t, arr, hold);
	if (rc == 0)
		return ah_txn_commit(t);
	ah_txn_abort(t);
	return rc;
}

static uint64_t since_of(const char *arr)
{
	ah_txn *t;
	ah_arrangement_info in;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, arr, &in), 0);
	ah_txn_abort(t);
	return in.since;
}

static uint64_t meet_of(const char *arr)
{
	ah_txn *t;
	uint64_t m = 7;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_hold_meet(t, arr, &m), 0);
	ah_txn_abort(t);
	return m;
}

/* Every hold as text: "arr/name frontier lease state;" in walk order. */
static int hold_line(const ah_hold_info *hi, void *user)
{
	tl_buf *b = user;

	tl_put(b, "%s/%s %" PRIu64 " %" PRIu64 " %s;", hi->arrangement,
	       hi->name, hi->frontier, hi->lease_ms,
	       hi->released ? "released" : hi->expired ? "expired" : "live");
	return 0;
}

static char *holds_text_of(ah_heap *hp, const char *arr)
{
	tl_buf b = { 0 };
	ah_txn *t;

	cr_assert_eq(ah_txn_begin(hp, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_hold_foreach(t, arr, hold_line, &b), 0);
	ah_txn_abort(t);
	tl_put(&b, "%s", "");
	return b.p;
}

static char *holds_text(const char *arr)
{
	return holds_text_of(h, arr);
}

#define EXPECT_HOLDS(arr, want)                                                \
	do {                                                                   \
		char *got_ = holds_text(arr);                                  \
		cr_assert_str_eq(got_, want);                                  \
		free(got_);                                                    \
	} while (0)

/* ------------------------------------------------------------- since */

Test(holds, since_refused_past_a_live_hold_names_it)
{
	char msg[400];

	cr_assert_eq(set_hold("orders", "reader-2", 99, 30000, NULL, 0), 0);
	cr_assert_eq(set_since("orders", 120, msg, sizeof msg), AH_EFRONTIER);
	cr_assert(strstr(msg, "since 120 of 'orders' would pass hold 'reader-2' "
	                 "at 99 (lease 30000 ms, renewed 20") == msg, "%s", msg);
	cr_assert_eq(since_of("orders"), 0);
	/* Up to the frontier is allowed, not one past it. */
	cr_assert_eq(set_since("orders", 100, NULL, 0), AH_EFRONTIER);
	cr_assert_eq(set_since("orders", 99, NULL, 0), 0);
	cr_assert_eq(since_of("orders"), 99);
	cr_assert_eq(meet_of("orders"), 99);
	/* A hold without a lease says so. */
	cr_assert_eq(set_hold("orders", "forever", 150, 0, NULL, 0), 0);
	cr_assert_eq(set_hold("orders", "reader-2", 190, 30000, NULL, 0), 0);
	cr_assert_eq(set_since("orders", 151, msg, sizeof msg), AH_EFRONTIER);
	cr_assert(strstr(msg, "since 151 of 'orders' would pass hold 'forever' "
	                 "at 150 (no lease, set 20") == msg, "%s", msg);
	EXPECT_HOLDS(NULL, "orders/forever 150 0 live;"
	                   "orders/reader-2 190 30000 live;");
}

Test(holds, two_holds_drop_one_since_stops_at_the_other)
{
	char msg[400];

	cr_assert_eq(set_hold("orders", "r1", 50, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(set_hold("orders", "r2", 80, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(meet_of("orders"), 50);
	/* The lowest hold is named. */
	cr_assert_eq(set_since("orders", 90, msg, sizeof msg), AH_EFRONTIER);
	cr_assert(strstr(msg, "would pass hold 'r1' at 50 ") != NULL, "%s", msg);
	cr_assert_eq(drop_hold("orders", "r1"), 0);
	/* Dropping changes no since. */
	cr_assert_eq(since_of("orders"), 0);
	cr_assert_eq(meet_of("orders"), 80);
	cr_assert_eq(set_since("orders", 90, msg, sizeof msg), AH_EFRONTIER);
	cr_assert(strstr(msg, "would pass hold 'r2' at 80 ") != NULL, "%s", msg);
	cr_assert_eq(set_since("orders", 80, NULL, 0), 0);
	cr_assert_eq(drop_hold("orders", "r2"), 0);
	cr_assert_eq(since_of("orders"), 80);
	cr_assert_eq(meet_of("orders"), UINT64_MAX);
	cr_assert_eq(set_since("orders", 200, NULL, 0), 0);
	EXPECT_HOLDS(NULL, "");
}

Test(holds, holds_of_other_arrangements_do_not_count)
{
	ah_txn *t;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "orders.x"), 0);
	cr_assert_eq(ah_advance(t, "orders.x", 0, 100), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(set_hold("orders.x", "r", 10, 0, NULL, 0), 0);
	cr_assert_eq(set_since("orders", 150, NULL, 0), 0);
	cr_assert_eq(set_since("orders.x", 11, NULL, 0), AH_EFRONTIER);
	EXPECT_HOLDS("orders", "");
	EXPECT_HOLDS("orders.x", "orders.x/r 10 0 live;");
}

/* ------------------------------------------------------------ leases */

Test(holds, expired_lease_lets_since_pass_and_is_released)
{
	char msg[400], cmd[600], *out;

	cr_assert_eq(set_hold("orders", "dead", 10, 1, NULL, 0), 0);
	cr_assert_eq(set_hold("orders", "alive", 30, HOUR_MS, NULL, 0), 0);
	sleep_ms(50);
	EXPECT_HOLDS(NULL, "orders/alive 30 3600000 live;"
	                   "orders/dead 10 1 expired;");
	cr_assert_eq(meet_of("orders"), 30);
	cr_assert_eq(set_since("orders", 20, NULL, 0), 0);
	EXPECT_HOLDS(NULL, "orders/alive 30 3600000 live;"
	                   "orders/dead 10 1 released;");
	/* The 1-hour lease is still holding. */
	cr_assert_eq(set_since("orders", 31, NULL, 0), AH_EFRONTIER);
	/* The dead reader learns it was released... */
	cr_assert_eq(set_hold("orders", "dead", 15, 1, msg, sizeof msg),
	             AH_ECOMPACTED);
	cr_assert_str_eq(msg, "hold 'dead' of 'orders' at 15: the since is 20 "
	                 "(the hold was released: its lease ran out and since "
	                 "passed it)");
	EXPECT_HOLDS(NULL, "orders/alive 30 3600000 live;"
	                   "orders/dead 10 1 released;");
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' holds | cut -f1,2,3,4,6",
	         tl_build(), dir.path);
	cr_assert_eq(tl_sh(cmd, false, &out), 0);
	cr_assert_str_eq(out, "orders\talive\t30\t3600000ms\tlive\n"
	                      "orders\tdead\t10\t1ms\treleased\n");
	free(out);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' holds orders --json",
	         tl_build(), dir.path);
	cr_assert_eq(tl_sh(cmd, false, &out), 0);
	cr_assert(strstr(out, "\"name\": \"dead\",\n") != NULL, "%s", out);
	cr_assert(strstr(out, "\"frontier\": 10,\n") != NULL, "%s", out);
	cr_assert(strstr(out, "\"lease_ms\": 1,\n") != NULL, "%s", out);
	cr_assert(strstr(out, "\"state\": \"released\"\n") != NULL, "%s", out);
	free(out);
	/* ...and re-establishes it at or above since. */
	cr_assert_eq(set_hold("orders", "dead", 20, HOUR_MS, NULL, 0), 0);
	EXPECT_HOLDS(NULL, "orders/alive 30 3600000 live;"
	                   "orders/dead 20 3600000 live;");
	cr_assert_eq(meet_of("orders"), 20);
	cr_assert_eq(set_since("orders", 21, NULL, 0), AH_EFRONTIER);
	cr_assert_eq(since_of("orders"), 20);
}

Test(holds, expired_hold_not_passed_stays_expired_and_renews)
{
	cr_assert_eq(set_hold("orders", "r", 50, 1, NULL, 0), 0);
	sleep_ms(50);
	/* A since below it does not release it. */
	cr_assert_eq(set_since("orders", 50, NULL, 0), 0);
	EXPECT_HOLDS(NULL, "orders/r 50 1 expired;");
	/* Renewing an expired hold makes it live again (may not move back). */
	cr_assert_eq(set_hold("orders", "r", 49, HOUR_MS, NULL, 0), AH_ECOMPACTED);
	cr_assert_eq(set_hold("orders", "r", 50, HOUR_MS, NULL, 0), 0);
	EXPECT_HOLDS(NULL, "orders/r 50 3600000 live;");
	cr_assert_eq(set_since("orders", 51, NULL, 0), AH_EFRONTIER);
}

/* --------------------------------------------------------- durability */

Test(holds, survive_close_and_reopen_as_format_3)
{
	ah_heap_stat st;

	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 2, "a heap without holds stays 2");
	cr_assert_eq(set_hold("orders", "a", 40, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(set_hold("orders", "b", 60, 0, NULL, 0), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 3);
	cr_assert_eq(ah_close(h), 0);
	h = tl_open_path(dir.path, 0, 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 3);
	EXPECT_HOLDS(NULL, "orders/a 40 3600000 live;orders/b 60 0 live;");
	cr_assert_eq(set_since("orders", 41, NULL, 0), AH_EFRONTIER);
	cr_assert_eq(tl_verify(h, NULL), 0);
	/* Dropping every hold keeps format 3. */
	cr_assert_eq(drop_hold("orders", "a"), 0);
	cr_assert_eq(drop_hold("orders", "b"), 0);
	cr_assert_eq(ah_close(h), 0);
	h = tl_open_path(dir.path, AH_OPEN_RDONLY, 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(st.format_version, 3);
	EXPECT_HOLDS(NULL, "");
}

/* Waits for one byte on fd (the child's "ready"). */
static void wait_byte(int fd)
{
	char c;

	cr_assert_eq(read(fd, &c, 1), 1);
}

Test(holds, kill_9_of_another_process_mid_txn_keeps_committed_holds)
{
	int p[2];
	pid_t pid;
	int st;

	cr_assert_eq(set_hold("orders", "kept", 70, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(ah_close(h), 0);
	h = NULL;
	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_heap *ch;
		ah_txn *t;
		ah_open_opts o = tl_opts(0, 0, 0);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		if (ah_open(dir.path, &o, &ch) != 0 || ah_txn_begin(ch, 0, &t) != 0 ||
		    ah_hold_set(t, "orders", "kept", 90, HOUR_MS) != 0 ||
		    ah_hold_set(t, "orders", "ghost", 75, 0) != 0 ||
		    ah_hold_drop(t, "orders", "kept") != 0 ||
		    ah_set_since(t, "orders", 74) != 0)
			_exit(2);
		if (write(p[1], "x", 1) != 1)
			_exit(3);
		for (;;)
			pause(); /* killed here, the txn open */
	}
	close(p[1]);
	wait_byte(p[0]);
	close(p[0]);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFSIGNALED(st));
	h = tl_open_path(dir.path, 0, 0);
	EXPECT_HOLDS(NULL, "orders/kept 70 3600000 live;");
	cr_assert_eq(since_of("orders"), 0);
	/* The writer lock the dead child held is free again. */
	cr_assert_eq(set_since("orders", 71, NULL, 0), AH_EFRONTIER);
	cr_assert_eq(set_since("orders", 70, NULL, 0), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
}

Test(holds, another_process_holds_while_this_one_advances)
{
	int up[2], down[2];
	pid_t pid;
	int st;
	char msg[400];

	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	/* A forked child may open the file anew (the registry is per pid). */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_heap *ch = NULL;
		ah_txn *t;
		ah_open_opts o = tl_opts(0, 0, 0);
		char c;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (ah_open(dir.path, &o, &ch) != 0 || ah_txn_begin(ch, 0, &t) != 0 ||
		    ah_hold_set(t, "orders", "child", 40, HOUR_MS) != 0 ||
		    ah_txn_commit(t) != 0)
			_exit(2);
		if (write(up[1], "h", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(3);
		if (ah_txn_begin(ch, 0, &t) != 0 ||
		    ah_hold_drop(t, "orders", "child") != 0 ||
		    ah_txn_commit(t) != 0)
			_exit(4);
		if (write(up[1], "d", 1) != 1)
			_exit(5);
		_exit(ah_close(ch) == 0 ? 0 : 6);
	}
	wait_byte(up[0]);
	cr_assert_eq(set_since("orders", 50, msg, sizeof msg), AH_EFRONTIER);
	cr_assert(strstr(msg, "since 50 of 'orders' would pass hold 'child' at "
	                 "40 (lease 3600000 ms, renewed ") == msg, "%s", msg);
	cr_assert_eq(set_since("orders", 40, NULL, 0), 0);
	cr_assert_eq(write(down[1], "g", 1), 1);
	wait_byte(up[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d", st);
	cr_assert_eq(set_since("orders", 50, NULL, 0), 0);
	EXPECT_HOLDS(NULL, "");
}

/* ---------------------------------------------------------- snapshots */

Test(holds, snapshot_push_and_restore_carry_holds)
{
	char snaps[256], path[256];
	ah_heap *r;
	ah_heap_stat st;
	ah_snapshot_info si;
	char *a, *b;

	cr_assert_eq(set_hold("orders", "live", 40, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(set_hold("orders", "gone", 10, 1, NULL, 0), 0);
	sleep_ms(50);
	cr_assert_eq(set_since("orders", 20, NULL, 0), 0);
	tl_dir_file(&dir, "snaps", snaps, sizeof snaps);
	tl_dir_file(&dir, "restored", path, sizeof path);
	cr_assert_eq(ah_snapshot_push(h, snaps, &si), 0, "%s", si.message);
	cr_assert_eq(ah_snapshot_restore(snaps, NULL, path, 0, &si), 0, "%s",
	             si.message);
	r = tl_open_path(path, 0, 0);
	cr_assert_eq(ah_heap_stat_get(r, &st), 0);
	cr_assert_eq(st.format_version, 3);
	a = holds_text(NULL);
	b = holds_text_of(r, NULL);
	cr_assert_str_eq(a, "orders/gone 10 1 released;"
	                    "orders/live 40 3600000 live;");
	cr_assert_str_eq(b, a);
	free(a);
	free(b);
	cr_assert_eq(tl_verify(r, NULL), 0);
	{
		ah_txn *t;

		cr_assert_eq(ah_txn_begin(r, 0, &t), 0);
		cr_assert_eq(ah_set_since(t, "orders", 41), AH_EFRONTIER);
		cr_assert(strstr(ah_txn_errmsg(t), "hold 'live' at 40") != NULL);
		ah_txn_abort(t);
	}
	cr_assert_eq(ah_close(r), 0);
}

/* ------------------------------------------------------------- damage */

static int count_problem(const ah_problem *p, void *user)
{
	tl_buf *b = user;

	tl_put(b, "%s|", p->message);
	return 0;
}

/* Flips the frontier's low byte in every copy of hold records "AHHD" v1
 * in the first `bytes` of the file (stale copies in free pages too: the
 * live one is among them).  Returns how many. */
static int flip_holds(const char *path, uint64_t bytes)
{
	int fd = open(path, O_RDONLY), n = 0;
	char *f = malloc(bytes);

	cr_assert(fd >= 0 && f != NULL);
	cr_assert_eq(pread(fd, f, bytes, 0), (ssize_t)bytes);
	close(fd);
	for (size_t i = 0; i + 16 <= bytes; i++)
		if (memcmp(f + i, "AHHD\x01\x00", 6) == 0) {
			tl_flip(path, i + 8, 0x01);
			n++;
		}
	free(f);
	return n;
}

Test(holds, flipped_byte_in_a_hold_is_found_never_a_wrong_since)
{
	ah_txn *t;
	tl_buf b = { 0 };
	uint64_t m;

	ah_heap_stat st;

	cr_assert_eq(set_hold("orders", "r", 98, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(ah_close(h), 0);
	h = NULL;
	cr_assert_geq(flip_holds(dir.path, st.pages_used * st.page_size), 1);
	h = tl_open_path(dir.path, 0, 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_verify(t, count_problem, &b, NULL), 0);
	tl_put(&b, "%s", "");
	cr_assert(strcmp(b.p, "hold orders/r: record damaged (checksum, layout or key)|") == 0, "%s",
	          b.p);
	cr_assert_eq(ah_hold_meet(t, "orders", &m), AH_ECORRUPT);
	cr_assert_eq(ah_hold_foreach(t, NULL, hold_line, &b), AH_ECORRUPT);
	ah_txn_abort(t);
	free(b.p);
	/* The frontier read as 99 would let since 99 through: refused. */
	cr_assert_eq(set_since("orders", 99, NULL, 0), AH_ECORRUPT);
	cr_assert_eq(set_since("orders", 1, NULL, 0), AH_ECORRUPT);
	cr_assert_eq(since_of("orders"), 0);
}

/* ---------------------------------------------------------- bad input */

static int count_fn(const ah_hold_info *hi, void *user)
{
	(void)hi;
	++*(int *)user;
	return 0;
}

/* Runs one bad call in a fresh write txn: expects rc, and the txn poisoned
 * when it is a mutation. */
#define BAD_WRITE(call, want)                                                  \
	do {                                                                   \
		ah_txn *t;                                                     \
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);                       \
		cr_assert_eq((call), (want), #call);                           \
		cr_assert_eq(ah_hold_set(t, "orders", "ok", 100, 0),           \
		             AH_EBADTXN, #call " did not poison");             \
		ah_txn_abort(t);                                               \
	} while (0)

Test(holds, bad_input_gives_its_error_and_changes_nothing)
{
	char long_name[AH_NAME_MAX + 2];
	ah_txn *rt;
	uint64_t m;
	int n = 0;

	memset(long_name, 'x', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = 0;
	cr_assert_eq(set_hold("orders", "r", 100, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(set_since("orders", 10, NULL, 0), 0);
	cr_assert_eq(ah_hold_set(NULL, "orders", "r", 1, 0), AH_EINVAL);
	cr_assert_eq(ah_hold_drop(NULL, "orders", "r"), AH_EINVAL);
	cr_assert_eq(ah_hold_foreach(NULL, NULL, count_fn, &n), AH_EINVAL);
	cr_assert_eq(ah_hold_meet(NULL, "orders", &m), AH_EINVAL);
	BAD_WRITE(ah_hold_set(t, NULL, "r", 100, 0), AH_EINVAL);
	BAD_WRITE(ah_hold_set(t, "orders", NULL, 100, 0), AH_EINVAL);
	BAD_WRITE(ah_hold_set(t, "orders", "", 100, 0), AH_EINVAL);
	BAD_WRITE(ah_hold_set(t, "orders", "a b", 100, 0), AH_EINVAL);
	BAD_WRITE(ah_hold_set(t, "orders", long_name, 100, 0), AH_EINVAL);
	BAD_WRITE(ah_hold_set(t, "nope", "r", 100, 0), AH_ENOTFOUND);
	BAD_WRITE(ah_hold_set(t, "orders", "r", 99, 0), AH_EFRONTIER);
	BAD_WRITE(ah_hold_set(t, "orders", "new", 9, 0), AH_ECOMPACTED);
	BAD_WRITE(ah_hold_drop(t, "orders", "absent"), AH_ENOTFOUND);
	BAD_WRITE(ah_hold_drop(t, "nope", "r"), AH_ENOTFOUND);
	BAD_WRITE(ah_hold_drop(t, "orders", "a\nb"), AH_EINVAL);
	BAD_WRITE(ah_hold_drop(t, NULL, "r"), AH_EINVAL);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &rt), 0);
	cr_assert_eq(ah_hold_set(rt, "orders", "r", 150, 0), AH_EREADONLY);
	ah_txn_abort(rt);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &rt), 0);
	cr_assert_eq(ah_hold_drop(rt, "orders", "r"), AH_EREADONLY);
	ah_txn_abort(rt);
	/* The read calls do not poison. */
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &rt), 0);
	cr_assert_eq(ah_hold_foreach(rt, NULL, NULL, NULL), AH_EINVAL);
	cr_assert_eq(ah_hold_foreach(rt, "bad name", count_fn, &n), AH_EINVAL);
	cr_assert_eq(ah_hold_foreach(rt, "nope", count_fn, &n), AH_ENOTFOUND);
	cr_assert_eq(ah_hold_meet(rt, "orders", NULL), AH_EINVAL);
	cr_assert_eq(ah_hold_meet(rt, NULL, &m), AH_EINVAL);
	cr_assert_eq(ah_hold_meet(rt, "nope", &m), AH_ENOTFOUND);
	cr_assert_eq(ah_hold_foreach(rt, "orders", count_fn, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(ah_hold_meet(rt, "orders", &m), 0);
	cr_assert_eq(m, 100);
	ah_txn_abort(rt);
	EXPECT_HOLDS(NULL, "orders/r 100 3600000 live;");
	cr_assert_eq(since_of("orders"), 10);
}

static int stop_fn(const ah_hold_info *hi, void *user)
{
	(void)hi;
	++*(int *)user;
	return 42;
}

Test(holds, callback_value_stops_the_walk)
{
	ah_txn *t;

	cr_assert_eq(set_hold("orders", "a", 100, 0, NULL, 0), 0);
	cr_assert_eq(set_hold("orders", "b", 100, 0, NULL, 0), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	int n = 0;
	cr_assert_eq(ah_hold_foreach(t, NULL, count_fn, &n), 0);
	cr_assert_eq(n, 2);
	n = 0;
	cr_assert_eq(ah_hold_foreach(t, "orders", stop_fn, &n), 42);
	cr_assert_eq(n, 1);
	ah_txn_abort(t);
}

Test(holds, arrangement_drop_drops_its_holds)
{
	ah_txn *t;

	cr_assert_eq(set_hold("orders", "a", 100, 0, NULL, 0), 0);
	cr_assert_eq(set_hold("orders", "b", 120, HOUR_MS, NULL, 0), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "other"), 0);
	cr_assert_eq(ah_hold_set(t, "other", "c", 0, 0), 0);
	cr_assert_eq(ah_arrangement_drop(t, "orders"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	EXPECT_HOLDS(NULL, "other/c 0 0 live;");
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "orders"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	EXPECT_HOLDS("orders", "");
	cr_assert_eq(meet_of("orders"), UINT64_MAX);
	cr_assert_eq(tl_verify(h, NULL), 0);
}

/* Hold keys sort among the meta DB's own records ("arrheap.meta" <
 * "arrheap.meta\0x" < "arrheap.names" < "arrheap.names\0x"): a walk skips
 * exactly those two records and no hold. */
Test(holds, arrangements_named_like_catalog_records)
{
	ah_txn *t;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "arrheap.meta"), 0);
	cr_assert_eq(ah_arrangement_create(t, "arrheap.names"), 0);
	cr_assert_eq(ah_arrangement_create(t, "arrheap"), 0);
	cr_assert_eq(ah_hold_set(t, "arrheap.meta", "x", 0, 0), 0);
	cr_assert_eq(ah_hold_set(t, "arrheap.names", "x", 0, 0), 0);
	cr_assert_eq(ah_hold_set(t, "arrheap", "meta", 0, 0), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	EXPECT_HOLDS(NULL, "arrheap/meta 0 0 live;arrheap.meta/x 0 0 live;"
	                   "arrheap.names/x 0 0 live;");
	cr_assert_eq(meet_of("arrheap.meta"), 0);
	cr_assert_eq(meet_of("arrheap.names"), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	h = tl_open_path(dir.path, 0, 0);
	EXPECT_HOLDS("arrheap.names", "arrheap.names/x 0 0 live;");
	cr_assert_eq(tl_verify(h, NULL), 0);
}

Test(holds, dump_holds_empty_unknown_and_since_refused)
{
	char cmd[700], *out;

	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' holds", tl_build(),
	         dir.path);
	cr_assert_eq(tl_sh(cmd, true, &out), 0);
	cr_assert_str_eq(out, "");
	free(out);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' holds --json | tr -d ' \\n'",
	         tl_build(), dir.path);
	cr_assert_eq(tl_sh(cmd, true, &out), 0);
	cr_assert_str_eq(out, "{\"holds\":[]}");
	free(out);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' holds nope", tl_build(),
	         dir.path);
	cr_assert_eq(tl_sh(cmd, true, &out), 1);
	cr_assert(strstr(out, "unknown arrangement nope") != NULL, "%s", out);
	free(out);
	cr_assert_eq(set_hold("orders", "reader-2", 99, 0, NULL, 0), 0);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' since orders 120", tl_build(),
	         dir.path);
	cr_assert_eq(tl_sh(cmd, true, &out), 1);
	cr_assert(strstr(out, "since 120 of 'orders' would pass hold 'reader-2' "
	                 "at 99 (no lease, set ") != NULL, "%s", out);
	free(out);
	cr_assert_eq(since_of("orders"), 0);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' | grep '^hold '", tl_build(),
	         dir.path);
	cr_assert_eq(tl_sh(cmd, true, &out), 0);
	cr_assert(strncmp(out, "hold orders/reader-2: frontier 99, lease none, "
	                  "renewed 20", 48) == 0, "%s", out);
	cr_assert(strstr(out, "Z, live\n") != NULL, "%s", out);
	free(out);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' verify", tl_build(),
	         dir.path);
	cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s", out);
	free(out);
}

/* A lease that cannot overflow: renewed + lease beyond 2^64 never expires. */
Test(holds, huge_lease_never_expires)
{
	cr_assert_eq(set_hold("orders", "r", 5, UINT64_MAX, NULL, 0), 0);
	EXPECT_HOLDS(NULL, "orders/r 5 18446744073709551615 live;");
	cr_assert_eq(set_since("orders", 6, NULL, 0), AH_EFRONTIER);
	cr_assert_eq(meet_of("orders"), 5);
}

/* A hold at UINT64_MAX never stops a since; one at the upper stops it
 * exactly there. */
Test(holds, frontier_extremes)
{
	cr_assert_eq(set_hold("orders", "max", UINT64_MAX, 0, NULL, 0), 0);
	cr_assert_eq(set_since("orders", 200, NULL, 0), 0);
	cr_assert_eq(meet_of("orders"), UINT64_MAX);
	EXPECT_HOLDS(NULL, "orders/max 18446744073709551615 0 live;");
	cr_assert_eq(set_hold("orders", "max", 200, 0, NULL, 0), AH_EFRONTIER);
}

Test(holds, backup_carries_holds)
{
	char path[256];
	ah_heap *r;
	ah_heap_stat st;
	char *a, *b;

	cr_assert_eq(set_hold("orders", "r", 40, HOUR_MS, NULL, 0), 0);
	tl_dir_file(&dir, "copy", path, sizeof path);
	cr_assert_eq(ah_backup(h, path), 0);
	r = tl_open_path(path, 0, 0);
	cr_assert_eq(ah_heap_stat_get(r, &st), 0);
	cr_assert_eq(st.format_version, 3);
	a = holds_text(NULL);
	b = holds_text_of(r, NULL);
	cr_assert_str_eq(a, "orders/r 40 3600000 live;");
	cr_assert_str_eq(b, a);
	free(a);
	free(b);
	cr_assert_eq(ah_close(r), 0);
}
