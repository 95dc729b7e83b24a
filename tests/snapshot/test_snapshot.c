/*
 * tests/snapshot/test_snapshot.c - incremental snapshots (issue 15): each
 * promise of include/arrheap.h's "snapshots" section tried from outside,
 * through the public header only: a restored heap reads exactly as the
 * pushed snapshot; a push writes only what is new; a push taken while
 * another process commits and merges is one commit's state; a push or a
 * restore killed at any moment leaves every earlier snapshot restorable and
 * no heap at PATH; every damaged object or manifest is an error that
 * leaves nothing; prune never deletes what a kept snapshot needs.
 *
 * Randomized tests print their seed; histories are deterministic per
 * (seed, commit), so a reference heap replays any prefix exactly.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arrheap.h"
#include "tests/lib/tl_dir.h"
#include "tests/lib/tl_file.h"
#include "tests/lib/tl_heap.h"
#include "tests/lib/tl_rand.h"
#include "tests/lib/tl_run.h"

static const char *const arrs[] = { "orders", "users", "wide" };

/* Commit number c (from 1) of the history with this seed: a batch for
 * each arrangement (some keys long enough for several chunks), some merge
 * work left in progress, and source "model" = c.  No Criterion: children
 * use it too.  0 or an error. */
static int commit_one(ah_heap *h, uint64_t seed, uint64_t c)
{
	uint64_t s = seed * 1000003u + c;
	ah_update ups[400];
	char keys[400][24];
	static char big[3000];
	ah_txn *t = NULL;
	int rc = ah_txn_begin(h, 0, &t);

	memset(big, 'v', sizeof big);
	for (size_t a = 0; rc == 0 && a < 3; a++) {
		ah_arrangement_info in;
		size_t n = 50 + tl_below(&s, 350);

		if (c == 1 && (rc = ah_arrangement_create(t, arrs[a])) != 0)
			break;
		if ((rc = ah_arrangement_info_get(t, arrs[a], &in)) != 0)
			break;
		for (size_t i = 0; i < n; i++) {
			snprintf(keys[i], sizeof keys[i], "k%05" PRIu64,
			         tl_below(&s, 3000));
			ups[i].key = keys[i];
			ups[i].key_len = strlen(keys[i]);
			ups[i].val = big;
			ups[i].val_len = a == 2 ? 1000 + tl_below(&s, 2000)
			                        : 1 + tl_below(&s, 40);
			ups[i].time = in.upper + tl_below(&s, 2);
			ups[i].diff = tl_below(&s, 4) == 0 ? -1 : 1;
		}
		rc = ah_append(t, arrs[a], in.upper, in.upper + 2, ups, n);
		if (rc == 0 && c % 3 == 0)
			rc = ah_maintain(t, arrs[a], 300, NULL);
		if (rc == 0 && c % 7 == 0)
			rc = ah_set_since(t, arrs[a], in.upper);
	}
	if (rc == 0)
		rc = ah_source_put(t, "model", &c, sizeof c);
	if (rc == 0)
		return ah_txn_commit(t);
	ah_txn_abort(t);
	return rc;
}

static void commits(ah_heap *h, uint64_t seed, uint64_t from, uint64_t to)
{
	for (uint64_t c = from; c <= to; c++) {
		int rc = commit_one(h, seed, c);

		cr_assert_eq(rc, 0, "commit %" PRIu64 ": %s", c, ah_strerror(rc));
	}
}

static char *path_in(const tl_dir *d, const char *name, char *out)
{
	return tl_dir_file(d, name, out, 256);
}

static int count_files(const char *dir, const char *sub)
{
	char p[300];
	struct dirent *e;
	DIR *dd;
	int n = 0;

	snprintf(p, sizeof p, "%s/%s", dir, sub);
	if ((dd = opendir(p)) == NULL)
		return -1;
	while ((e = readdir(dd)) != NULL)
		n += e->d_name[0] != '.';
	closedir(dd);
	return n;
}

/* No PATH and no PATH.creating.* of anyone beside it. */
static void assert_nothing_at(const char *path)
{
	char dir[256], *slash;
	const char *base;
	struct dirent *e;
	struct stat st;
	DIR *dd;

	cr_assert_neq(lstat(path, &st), 0, "%s exists", path);
	snprintf(dir, sizeof dir, "%s", path);
	slash = strrchr(dir, '/');
	cr_assert_not_null(slash);
	*slash = '\0';
	base = path + (slash - dir) + 1;
	cr_assert_not_null(dd = opendir(dir));
	while ((e = readdir(dd)) != NULL)
		cr_assert(strncmp(e->d_name, base, strlen(base)) != 0,
		          "%s/%s left beside %s", dir, e->d_name, base);
	closedir(dd);
}

/* The same frontiers, spine shapes, sources and consolidated updates: the
 * hash covers them all (tests/lib/tl_heap.h).  Not compared as
 * tl_state_text: at hundreds of commits of kilobyte values that text is
 * gigabytes (a minute a restore). */
static void assert_same_state(ah_heap *a, ah_heap *b)
{
	tl_state ha, hb, la, lb;

	cr_assert_eq(tl_state_hash(a, 0, &la), 0);
	cr_assert_eq(tl_state_hash(b, 0, &lb), 0);
	cr_assert_eq(la.hash, lb.hash, "contents differ: %" PRIu64 " vs %"
	             PRIu64 " updates, model %" PRIu64 " vs %" PRIu64,
	             la.updates, lb.updates, la.model, lb.model);
	cr_assert_eq(tl_state_hash(a, 1, &ha), 0);
	cr_assert_eq(tl_state_hash(b, 1, &hb), 0);
	cr_assert_eq(ha.hash, hb.hash, "spine shapes differ");
}

static void stat_of(ah_heap *h, ah_heap_stat *st)
{
	cr_assert_eq(ah_heap_stat_get(h, st), 0);
}

Test(snapshot, restore_reads_as_pushed_and_keeps_uuid)
{
	tl_dir d = tl_tmpdir("snap");
	uint64_t seed = tl_seed("snapshot::restore_reads_as_pushed", 11);
	char snaps[256], r1[256], r2[256];
	ah_heap *h = tl_open_path(d.path, 0, 2000), *g;
	ah_snapshot_info si, ri;
	ah_heap_stat hs, gs;
	ah_arrangement_info in;
	ah_txn *t;
	int rc;

	commits(h, seed, 1, 20);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "orders", &in), 0);
	ah_txn_abort(t);
	cr_assert_gt(in.merging, 0, "the history leaves a merge in progress");
	path_in(&d, "snaps", snaps);
	rc = ah_snapshot_push(h, snaps, &si);
	cr_assert_eq(rc, 0, "push: %s", si.message);
	stat_of(h, &hs);
	cr_assert_eq(si.seq, 1);
	cr_assert_eq(si.arrangements, 3);
	cr_assert_eq(si.objects_new, si.objects);
	cr_assert_eq(si.bytes_new, si.bytes);
	cr_assert_eq(memcmp(si.uuid, hs.uuid, 16), 0);
	cr_assert_eq(si.txn_id, hs.last_txn_id);
	cr_assert_str_eq(si.message, "");

	path_in(&d, "restored", r1);
	rc = ah_snapshot_restore(snaps, NULL, r1, 0, &ri);
	cr_assert_eq(rc, 0, "restore: %s", ri.message);
	cr_assert_str_eq(ri.id, si.id);
	g = tl_open_path(r1, 0, 2000);
	assert_same_state(h, g);
	cr_assert_eq(tl_verify(g, NULL), 0);
	stat_of(g, &gs);
	cr_assert_eq(memcmp(gs.uuid, hs.uuid, 16), 0, "restore keeps the UUID");
	cr_assert_eq(gs.format_version, hs.format_version);
	cr_assert_eq(gs.format_version, 7, "a format-7 heap restores as format 7");
	/* The restored heap goes on exactly as the original does. */
	commits(h, seed, 21, 30);
	commits(g, seed, 21, 30);
	assert_same_state(h, g);
	cr_assert_eq(ah_close(g), 0);

	path_in(&d, "copy", r2);
	cr_assert_eq(ah_snapshot_restore(snaps, si.id, r2, AH_RESTORE_NEW_UUID,
	                                 &ri), 0, "%s", ri.message);
	g = tl_open_path(r2, 0, 2000);
	stat_of(g, &gs);
	cr_assert_neq(memcmp(gs.uuid, hs.uuid, 16), 0, "--new-uuid");
	cr_assert_eq(tl_verify(g, NULL), 0);
	cr_assert_eq(ah_close(g), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* Chunks sealed since the last push are all a push writes. */
typedef struct chunk_set {
	uint64_t id[4096], xxh3[4096], bytes[4096];
	size_t n;
} chunk_set;

static int add_chunk(const ah_chunk_info *c, void *user)
{
	chunk_set *cs = user;

	cr_assert_lt(cs->n, 4096);
	cs->id[cs->n] = c->id;
	cs->xxh3[cs->n] = c->xxh3;
	cs->bytes[cs->n++] = c->stored_bytes;
	return 0;
}

static void chunks_of(ah_heap *h, chunk_set *cs)
{
	ah_txn *t;

	cs->n = 0;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	for (int a = 0; a < 3; a++)
		cr_assert_eq(ah_chunk_foreach(t, arrs[a], add_chunk, cs), 0);
	ah_txn_abort(t);
}

/* Of now's chunks, those not in before: count and bytes. */
static void new_chunks(const chunk_set *before, const chunk_set *now,
                       uint64_t *n, uint64_t *bytes)
{
	*n = *bytes = 0;
	for (size_t i = 0; i < now->n; i++) {
		bool old = false;

		for (size_t j = 0; j < before->n && !old; j++)
			old = before->id[j] == now->id[i] &&
			      before->xxh3[j] == now->xxh3[i];
		if (!old) {
			(*n)++;
			*bytes += now->bytes[i];
		}
	}
}

Test(snapshot, push_writes_only_what_is_new)
{
	tl_dir d = tl_tmpdir("snap");
	char snaps[256];
	ah_heap *h = tl_open_path(d.path, 0, 2000);
	static chunk_set c1, c2;
	ah_snapshot_info s1, s2, s3;
	uint64_t n, bytes;

	commits(h, 5, 1, 8);
	path_in(&d, "snaps", snaps);
	chunks_of(h, &c1);
	cr_assert_eq(ah_snapshot_push(h, snaps, &s1), 0, "%s", s1.message);
	cr_assert_eq(s1.objects, c1.n);
	commits(h, 5, 9, 12); /* new batches, and merges of old ones */
	chunks_of(h, &c2);
	new_chunks(&c1, &c2, &n, &bytes);
	cr_assert_gt(n, 0);
	cr_assert_eq(ah_snapshot_push(h, snaps, &s2), 0, "%s", s2.message);
	cr_assert_eq(s2.seq, 2);
	cr_assert_eq(s2.objects, c2.n);
	cr_assert_eq(s2.objects_new, n, "objects new %" PRIu64 ", chunks new %"
	             PRIu64, s2.objects_new, n);
	cr_assert_eq(s2.bytes_new, bytes);
	cr_assert_eq(ah_snapshot_push(h, snaps, &s3), 0, "%s", s3.message);
	cr_assert_eq(s3.objects_new, 0);
	cr_assert_eq(s3.bytes_new, 0);
	cr_assert_eq(s3.objects, s2.objects);
	/* Every object any snapshot named, each once. */
	new_chunks(&c2, &c1, &n, &bytes); /* c1's chunks merged away since */
	cr_assert_eq(count_files(snaps, "objects"), (int)(c2.n + n));
	cr_assert_eq(count_files(snaps, "manifests"), 3);
	cr_assert_eq(count_files(snaps, "tmp"), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* The newest commit's "model" position as reader sees it now. */
static uint64_t live_model(ah_heap *reader)
{
	ah_txn *t;
	const void *pos;
	size_t len;
	uint64_t c = 0;

	cr_assert_eq(ah_txn_begin(reader, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_source_get(t, "model", &pos, &len), 0);
	cr_assert_eq(len, 8);
	memcpy(&c, pos, 8);
	ah_txn_abort(t);
	return c;
}

/* Pushes run while another process commits and merges: each snapshot is
 * exactly the state after some commit c (its "model" position), which a
 * reference heap replays. */
Test(snapshot, push_beside_a_merging_writer_is_one_commit, .timeout = 240)
{
	tl_dir d = tl_tmpdir("snap");
	uint64_t seed = tl_seed("snapshot::push_beside_a_merging_writer", 23);
	char snaps[256], ref[256], r[256];
	ah_open_opts ro = tl_opts(AH_OPEN_RDONLY, 0, 0);
	ah_heap *h = tl_open_path(d.path, 0, 2000), *reader, *rh, *g;
	uint64_t done = 0, got[12], first = 0;
	int n = 0, st, stop[2];
	pid_t pid;

	commits(h, seed, 1, 2);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(pipe(stop), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_open_opts o = tl_opts(0, 0, 2000);
		ah_heap *w;
		char b;

		/* Commits until the pushes are done (the parent closes the
		 * pipe, or dies), at most 400: the writer runs beside every
		 * push, and the replay below stays short. */
		close(stop[1]);
		if (fcntl(stop[0], F_SETFL, O_NONBLOCK) != 0 ||
		    ah_open(d.path, &o, &w) != 0)
			_exit(3);
		for (uint64_t c = 3; c <= 400 && read(stop[0], &b, 1) < 0 &&
		                     errno == EAGAIN; c++)
			if (commit_one(w, seed, c) != 0)
				_exit(4);
		_exit(ah_close(w) == 0 ? 0 : 5);
	}
	close(stop[0]);
	cr_assert_eq(ah_open(d.path, &ro, &reader), 0);
	path_in(&d, "snaps", snaps);
	for (int i = 0; i < 12; i++) {
		ah_snapshot_info si;
		int rc;

		/* The last push waits for a commit after the first push's. */
		while (i == 11 && live_model(reader) <= first)
			usleep(10000);
		rc = ah_snapshot_push(reader, snaps, &si);
		cr_assert_eq(rc, 0, "push %d: %s", i, si.message);
		if (i == 0)
			first = live_model(reader);
		usleep(20000);
	}
	close(stop[1]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer status %d", st);
	cr_assert_eq(ah_close(reader), 0);
	/* Restore each, read its commit number, compare with the replay. */
	path_in(&d, "ref", ref);
	rh = tl_open_path(ref, 0, 2000);
	for (int i = 1; i <= 12; i++) {
		char id[AH_SNAPSHOT_ID_MAX];
		ah_heap_stat hs;
		ah_txn *t;
		const void *pos;
		size_t len;
		uint64_t c;

		stat_of(rh, &hs); /* any heap: only for the id's form */
		(void)hs;
		snprintf(r, sizeof r, "%s/r%d", d.dir, i);
		{
			/* The ids are UUID8-SEQ of the pushed heap. */
			ah_heap *o;
			ah_heap_stat os;

			cr_assert_eq(ah_open(d.path, &ro, &o), 0);
			stat_of(o, &os);
			ah_close(o);
			snprintf(id, sizeof id, "%02x%02x%02x%02x-%06d", os.uuid[0],
			         os.uuid[1], os.uuid[2], os.uuid[3], i);
		}
		cr_assert_eq(ah_snapshot_restore(snaps, id, r, 0, NULL), 0, "%s", id);
		g = tl_open_path(r, 0, 2000);
		cr_assert_eq(ah_txn_begin(g, AH_TXN_RDONLY, &t), 0);
		cr_assert_eq(ah_source_get(t, "model", &pos, &len), 0);
		cr_assert_eq(len, 8);
		memcpy(&c, pos, 8);
		ah_txn_abort(t);
		cr_assert_geq(c, done, "snapshots go forward");
		commits(rh, seed, done + 1, c);
		done = c;
		assert_same_state(rh, g);
		got[n++] = c;
		cr_assert_eq(ah_close(g), 0);
	}
	cr_assert_eq(ah_close(rh), 0);
	cr_assert_gt(got[n - 1], got[0], "the writer ran during the pushes");
	fprintf(stderr, "push_beside_a_merging_writer: commits %" PRIu64
	        " .. %" PRIu64 "\n", got[0], got[n - 1]);
	tl_rmdir(&d);
}

/* Kills a push at random moments: every manifest in DIR restores to the
 * state it was pushed from, and a killed push publishes nothing partial. */
Test(snapshot, killed_push_keeps_every_snapshot, .timeout = 300)
{
	tl_dir d = tl_tmpdir("snap");
	uint64_t seed = tl_seed("snapshot::killed_push", 31), rng = seed;
	char snaps[256], r[256];
	ah_heap *h = tl_open_path(d.path, 0, 2000);
	uint64_t state_at[64] = { 0 }; /* by seq: the model position */
	uint64_t window;
	int published = 0;

	path_in(&d, "snaps", snaps);
	commits(h, seed, 1, 10);
	{
		struct timespec a, b;

		clock_gettime(CLOCK_MONOTONIC, &a);
		cr_assert_eq(ah_snapshot_push(h, snaps, NULL), 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		/* Kill moments spread over twice a push's time (plus the
		 * child's open); not a timing assertion. */
		window = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u +
		         (uint64_t)(b.tv_nsec - a.tv_nsec);
		window = 2 * window + 2000000;
	}
	state_at[1] = 10;
	published = 1;
	for (int round = 0; round < 30; round++) {
		uint64_t c0 = 10 + (uint64_t)round * 3, ns = tl_below(&rng, window);
		struct timespec ts = { (time_t)(ns / 1000000000u),
		                       (long)(ns % 1000000000u) };
		int st, n;
		pid_t pid;

		commits(h, seed, c0 + 1, c0 + 3);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			/* A handle does not cross fork: the child opens its own. */
			ah_open_opts ro = tl_opts(AH_OPEN_RDONLY, 0, 0);
			ah_heap *c;

			if (ah_open(d.path, &ro, &c) != 0)
				_exit(2);
			_exit(ah_snapshot_push(c, snaps, NULL) == 0 ? 0 : 1);
		}
		/* Every fifth push runs to its end (it must publish), every
		 * fifth is killed at once (before it can), the rest at a random
		 * moment: no outcome rests on timing. */
		if (round % 5 != 0) {
			if (round % 5 != 1)
				nanosleep(&ts, NULL);
			kill(pid, SIGKILL);
		}
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
		          "push failed on its own: %d", st);
		cr_assert(round % 5 != 0 || WIFEXITED(st), "round %d", round);
		n = count_files(snaps, "manifests");
		cr_assert(n == published || n == published + 1,
		          "round %d: %d manifests after %d", round, n, published);
		if (n == published + 1)
			state_at[++published] = c0 + 3;
	}
	cr_assert_eq(ah_close(h), 0);
	fprintf(stderr, "killed_push: %d of 31 pushes published\n", published);
	cr_assert_lt(published, 31, "some push was killed before publishing");
	cr_assert_gt(published, 1, "some push published before its kill");
	/* Every published snapshot restores to its state. */
	{
		ah_heap *o, *rh, *g;
		ah_open_opts ro = tl_opts(AH_OPEN_RDONLY, 0, 0);
		ah_heap_stat os;
		char ref[256];
		uint64_t done = 0;

		cr_assert_eq(ah_open(d.path, &ro, &o), 0);
		stat_of(o, &os);
		ah_close(o);
		path_in(&d, "ref", ref);
		rh = tl_open_path(ref, 0, 2000);
		for (int s = 1; s <= published; s++) {
			char id[AH_SNAPSHOT_ID_MAX];

			snprintf(id, sizeof id, "%02x%02x%02x%02x-%06d", os.uuid[0],
			         os.uuid[1], os.uuid[2], os.uuid[3], s);
			snprintf(r, sizeof r, "%s/r%d", d.dir, s);
			cr_assert_eq(ah_snapshot_restore(snaps, id, r, 0, NULL), 0,
			             "%s", id);
			g = tl_open_path(r, 0, 2000);
			commits(rh, seed, done + 1, state_at[s]);
			done = state_at[s];
			assert_same_state(rh, g);
			cr_assert_eq(ah_close(g), 0);
			{
				char lk[300];

				snprintf(lk, sizeof lk, "%s-lock", r);
				unlink(r);
				unlink(lk);
			}
		}
		cr_assert_eq(ah_close(rh), 0);
	}
	tl_rmdir(&d);
}

/* Kills a restore at random moments: PATH is absent or a whole heap. */
Test(snapshot, killed_restore_leaves_no_heap, .timeout = 300)
{
	tl_dir d = tl_tmpdir("snap");
	uint64_t seed = tl_seed("snapshot::killed_restore", 37), rng = seed;
	char snaps[256], r[256];
	ah_heap *h = tl_open_path(d.path, 0, 2000), *g;
	uint64_t window;
	int whole = 0, none = 0;

	commits(h, seed, 1, 40);
	path_in(&d, "snaps", snaps);
	cr_assert_eq(ah_snapshot_push(h, snaps, NULL), 0);
	path_in(&d, "r", r);
	{
		struct timespec a, b;
		char lk[300];

		clock_gettime(CLOCK_MONOTONIC, &a);
		cr_assert_eq(ah_snapshot_restore(snaps, NULL, r, 0, NULL), 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		window = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u +
		         (uint64_t)(b.tv_nsec - a.tv_nsec);
		window = window + window / 2 + 1000000;
		snprintf(lk, sizeof lk, "%s-lock", r);
		unlink(r);
		unlink(lk);
	}
	for (int round = 0; round < 25; round++) {
		uint64_t ns = tl_below(&rng, window);
		struct timespec ts = { (time_t)(ns / 1000000000u),
		                       (long)(ns % 1000000000u) };
		struct stat st;
		int ws;
		pid_t pid = fork();

		cr_assert_geq(pid, 0);
		if (pid == 0)
			_exit(ah_snapshot_restore(snaps, NULL, r, 0, NULL) == 0 ? 0 : 1);
		if (round % 5 != 0) { /* as in killed_push */
			if (round % 5 != 1)
				nanosleep(&ts, NULL);
			kill(pid, SIGKILL);
		}
		cr_assert_eq(waitpid(pid, &ws, 0), pid);
		cr_assert(WIFSIGNALED(ws) || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0),
		          "restore failed on its own: %d", ws);
		cr_assert(round % 5 != 0 || stat(r, &st) == 0, "round %d", round);
		if (stat(r, &st) != 0) {
			none++;
			continue;
		}
		whole++;
		g = tl_open_path(r, 0, 2000);
		cr_assert_eq(tl_verify(g, NULL), 0);
		assert_same_state(h, g);
		cr_assert_eq(ah_close(g), 0);
		unlink(r);
		{
			char lk[300];

			snprintf(lk, sizeof lk, "%s-lock", r);
			unlink(lk);
		}
	}
	fprintf(stderr, "killed_restore: %d whole, %d absent\n", whole, none);
	cr_assert_gt(none, 0, "some restore was killed before publishing");
	cr_assert_gt(whole, 0, "some restore published before its kill");
	/* A later restore sweeps the dead ones' leftovers. */
	cr_assert_eq(ah_snapshot_restore(snaps, NULL, r, 0, NULL), 0);
	unlink(r);
	{
		char lk[300];

		snprintf(lk, sizeof lk, "%s-lock", r);
		unlink(lk);
	}
	assert_nothing_at(r);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* -------------------------------------------------------- damage */

typedef struct fixture {
	tl_dir d;
	char snaps[256], r[256], id[AH_SNAPSHOT_ID_MAX], manifest[320];
	ah_snapshot_info si;
} fixture;

static void fixture_make(fixture *f)
{
	ah_heap *h;

	f->d = tl_tmpdir("snapdmg");
	h = tl_open_path(f->d.path, 0, 2000);
	commits(h, 3, 1, 12);
	path_in(&f->d, "snaps", f->snaps);
	cr_assert_eq(ah_snapshot_push(h, f->snaps, &f->si), 0);
	cr_assert_eq(ah_close(h), 0);
	snprintf(f->id, sizeof f->id, "%s", f->si.id);
	snprintf(f->manifest, sizeof f->manifest, "%s/manifests/%s", f->snaps,
	         f->id);
	path_in(&f->d, "restored", f->r);
}

/* Restore must fail with want, say something, and leave nothing. */
static void refused(fixture *f, int want, const char *what)
{
	ah_snapshot_info ri;
	int rc = ah_snapshot_restore(f->snaps, f->id, f->r, 0, &ri);

	cr_assert_eq(rc, want, "%s: %s, want %s (%s)", what, ah_err_name(rc),
	             ah_err_name(want), ri.message);
	cr_assert_neq(ri.message[0], '\0', "%s: no message", what);
	assert_nothing_at(f->r);
}

static char *first_object(fixture *f, char *out)
{
	char p[300];
	struct dirent *e;
	DIR *dd;

	snprintf(p, sizeof p, "%s/objects", f->snaps);
	cr_assert_not_null(dd = opendir(p));
	while ((e = readdir(dd)) != NULL && e->d_name[0] == '.')
		;
	cr_assert_not_null(e);
	snprintf(out, 600, "%.300s/%.255s", p, e->d_name);
	closedir(dd);
	return out;
}

Test(snapshot, missing_truncated_or_altered_objects_are_refused)
{
	fixture f;
	char obj[600], save[620];
	uint64_t size;

	fixture_make(&f);
	first_object(&f, obj);
	snprintf(save, sizeof save, "%s.save", obj);
	cr_assert_eq(rename(obj, save), 0);
	refused(&f, AH_ECORRUPT, "missing object");
	cr_assert_eq(tl_copy(save, obj), 0);
	cr_assert_eq(truncate(obj, 4096 - 17), 0);
	refused(&f, AH_ECORRUPT, "truncated object");
	/* A flipped byte in every page of an object, one at a time (header
	 * page, body pages, the zeroed tail). */
	tl_file_hash(save, &size);
	for (uint64_t off = 0; off < size; off += 4096 / 2 + 7) {
		cr_assert_eq(tl_copy(save, obj), 0);
		tl_flip(obj, off, 0x10);
		refused(&f, AH_ECORRUPT, "flipped object byte");
	}
	cr_assert_eq(tl_copy(save, obj), 0);
	unlink(save);
	cr_assert_eq(ah_snapshot_restore(f.snaps, f.id, f.r, 0, NULL), 0,
	             "undamaged again");
	tl_rmdir(&f.d);
}

/* A manifest edited with its checksum put right: the records it carries
 * are checked by the restored heap's verify. */
static void rewrite_manifest(const char *path, const char *from,
                             const char *to)
{
	size_t len;
	char *t = tl_read(path, &len), *p, *end;
	tl_buf b = { 0 };
	char line[64];

	cr_assert_not_null(t);
	cr_assert_not_null(p = strstr(t, from), "%s not in the manifest", from);
	end = strstr(t, "\nend ");
	cr_assert_not_null(end);
	end[1] = '\0';
	*p = '\0';
	tl_put(&b, "%s%s%s", t, to, p + strlen(from));
	snprintf(line, sizeof line, "end %016" PRIx64 "\n",
	         (uint64_t)XXH3_64bits(b.p, b.len));
	tl_put(&b, "%s", line);
	unlink(path);
	tl_write_file(path, b.p);
	free(b.p);
	free(t);
}

Test(snapshot, damaged_manifests_are_refused)
{
	fixture f;
	char save[400];
	size_t len;
	char *text;

	fixture_make(&f);
	snprintf(save, sizeof save, "%s.save", f.manifest);
	cr_assert_eq(tl_copy(f.manifest, save), 0);
	text = tl_read(save, &len);
	/* A flipped byte anywhere: the checksum line catches it. */
	for (size_t off = 0; off < len; off += len / 23 + 1) {
		cr_assert_eq(tl_copy(save, f.manifest), 0);
		tl_flip(f.manifest, off, 0x01);
		refused(&f, AH_ECORRUPT, "flipped manifest byte");
	}
	cr_assert_eq(tl_copy(save, f.manifest), 0);
	cr_assert_eq(truncate(f.manifest, (off_t)len / 2), 0);
	refused(&f, AH_ECORRUPT, "truncated manifest");
	/* Right checksum, wrong content. */
	cr_assert_eq(tl_copy(save, f.manifest), 0);
	rewrite_manifest(f.manifest, "arrheap-snapshot 1\n", "arrheap-snapshot 2\n");
	refused(&f, AH_EFORMAT, "another version");
	cr_assert_eq(tl_copy(save, f.manifest), 0);
	rewrite_manifest(f.manifest, "\nrecord batch ", "\nrecord arr ");
	refused(&f, AH_ECORRUPT, "a batch record as an arrangement's");
	cr_assert_eq(tl_copy(save, f.manifest), 0);
	{
		/* Drop the first object line: its chunk's batch lacks it. */
		char *o = strstr(text, "\nobject "), *nl;
		char from[200];

		cr_assert_not_null(o);
		nl = strchr(o + 1, '\n');
		snprintf(from, sizeof from, "%.*s", (int)(nl - o), o);
		rewrite_manifest(f.manifest, from, "");
		refused(&f, AH_ECORRUPT, "an object left out");
	}
	cr_assert_eq(tl_copy(save, f.manifest), 0);
	rewrite_manifest(f.manifest, "\npage-size 4096\n", "\npage-size 16384\n");
	refused(&f, AH_EFORMAT, "another page size");
	cr_assert_eq(tl_copy(save, f.manifest), 0);
	unlink(save);
	cr_assert_eq(ah_snapshot_restore(f.snaps, f.id, f.r, 0, NULL), 0);
	free(text);
	tl_rmdir(&f.d);
}

Test(snapshot, restore_never_replaces_a_path)
{
	fixture f;
	char link[300];
	uint64_t h0, h1, sz;

	fixture_make(&f);
	tl_write_file(f.r, "precious\n");
	h0 = tl_file_hash(f.r, &sz);
	cr_assert_eq(ah_snapshot_restore(f.snaps, NULL, f.r, 0, NULL), AH_EEXIST);
	h1 = tl_file_hash(f.r, &sz);
	cr_assert_eq(h0, h1);
	/* A symlink, dangling or not, is not replaced either. */
	snprintf(link, sizeof link, "%s/dangling", f.d.dir);
	cr_assert_eq(symlink("/nonexistent/x", link), 0);
	cr_assert_neq(ah_snapshot_restore(f.snaps, NULL, link, 0, NULL), 0);
	snprintf(link, sizeof link, "%s/tofile", f.d.dir);
	cr_assert_eq(symlink(f.r, link), 0);
	cr_assert_eq(ah_snapshot_restore(f.snaps, NULL, link, 0, NULL), AH_EEXIST);
	cr_assert_eq(tl_file_hash(f.r, &sz), h0);
	tl_rmdir(&f.d);
}

/* Two heaps in one DIR: a restore must name one; each restores to its own. */
Test(snapshot, two_heaps_in_one_dir_are_not_mixed_up)
{
	tl_dir d = tl_tmpdir("snap");
	char snaps[256], pa[256], pb[256], r[256];
	ah_heap *a, *b, *g;
	ah_snapshot_info sa, sb, ri;
	ah_heap_stat gs;

	path_in(&d, "a", pa);
	path_in(&d, "b", pb);
	path_in(&d, "snaps", snaps);
	a = tl_open_path(pa, 0, 2000);
	b = tl_open_path(pb, 0, 2000);
	commits(a, 1, 1, 6);
	commits(b, 2, 1, 9);
	cr_assert_eq(ah_snapshot_push(a, snaps, &sa), 0);
	cr_assert_eq(ah_snapshot_push(b, snaps, &sb), 0);
	cr_assert_eq(sa.seq, 1);
	cr_assert_eq(sb.seq, 1);
	cr_assert_str_neq(sa.id, sb.id);
	path_in(&d, "r", r);
	cr_assert_eq(ah_snapshot_restore(snaps, NULL, r, 0, &ri), AH_ESTATE);
	cr_assert(strstr(ri.message, "more than one heap") != NULL, "%s", ri.message);
	assert_nothing_at(r);
	cr_assert_eq(ah_snapshot_restore(snaps, sb.id, r, 0, NULL), 0);
	g = tl_open_path(r, 0, 2000);
	assert_same_state(b, g);
	stat_of(g, &gs);
	cr_assert_eq(memcmp(gs.uuid, sb.uuid, 16), 0);
	cr_assert_eq(ah_close(g), 0);
	cr_assert_eq(ah_close(a), 0);
	cr_assert_eq(ah_close(b), 0);
	tl_rmdir(&d);
}

typedef struct seen {
	int n, damaged;
	uint64_t seqs[32];
} seen;

static int collect(const ah_snapshot_info *s, void *user)
{
	seen *v = user;

	if (s->status)
		v->damaged++;
	else
		v->seqs[v->n++] = s->seq;
	return 0;
}

static int collect_all(const ah_snapshot_info *s, void *user)
{
	seen *v = user;

	cr_assert_eq(s->status, 0);
	cr_assert_lt(v->n, 32);
	v->seqs[v->n++] = s->seq;
	return 0;
}

Test(snapshot, prune_keeps_what_kept_snapshots_need)
{
	tl_dir d = tl_tmpdir("snap");
	char snaps[256], r[256];
	ah_heap *h = tl_open_path(d.path, 0, 2000), *g;
	ah_snapshot_info s[6];
	ah_prune_info pi;
	seen v = { 0 };
	int objs_before;

	path_in(&d, "snaps", snaps);
	for (int i = 0; i < 6; i++) {
		commits(h, 9, (uint64_t)i * 6 + 1, (uint64_t)i * 6 + 6);
		cr_assert_eq(ah_snapshot_push(h, snaps, &s[i]), 0);
	}
	objs_before = count_files(snaps, "objects");
	cr_assert_eq(ah_snapshot_prune(snaps, 0, NULL), AH_EINVAL);
	cr_assert_eq(ah_snapshot_prune(snaps, 2, &pi), 0);
	cr_assert_eq(pi.snapshots_removed, 4);
	cr_assert_eq(pi.snapshots_kept, 2);
	cr_assert_gt(pi.objects_removed, 0, "merges freed chunks");
	cr_assert_eq(count_files(snaps, "objects") + (int)pi.objects_removed,
	             objs_before);
	cr_assert_eq(ah_snapshot_foreach(snaps, collect, &v), 0);
	cr_assert_eq(v.n, 2);
	cr_assert_eq(v.seqs[0], 5);
	cr_assert_eq(v.seqs[1], 6);
	path_in(&d, "r", r);
	cr_assert_eq(ah_snapshot_restore(snaps, s[0].id, r, 0, NULL), AH_ENOTFOUND);
	cr_assert_eq(ah_snapshot_restore(snaps, s[4].id, r, 0, NULL), 0);
	g = tl_open_path(r, 0, 2000);
	cr_assert_eq(tl_verify(g, NULL), 0);
	cr_assert_eq(ah_close(g), 0);
	unlink(r);
	/* The kept objects are exactly the union of the kept manifests': the
	 * newest alone restores, and equals the heap. */
	cr_assert_eq(ah_snapshot_restore(snaps, NULL, r, 0, NULL), 0);
	g = tl_open_path(r, 0, 2000);
	assert_same_state(h, g);
	cr_assert_eq(ah_close(g), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* The source contract through the tools: a heap restored from a snapshot
 * resumes its changelog from the snapshot's position, exactly once. */
Test(snapshot, restored_heap_resumes_ah_load_exactly_once, .timeout = 120)
{
	tl_dir d = tl_tmpdir("snapload");
	uint64_t seed = tl_seed("snapshot::restored_heap_resumes_ah_load", 41);
	uint64_t rng = seed, t = 0;
	char log[256], snaps[256], r[256], full[256], cmd[2048], *o, *a, *b;
	const char *B = tl_build();
	FILE *f;

	path_in(&d, "log", log);
	path_in(&d, "snaps", snaps);
	path_in(&d, "restored", r);
	path_in(&d, "full", full);
	cr_assert_not_null(f = fopen(log, "w"));
	fprintf(f, "arrange\ta\n");
	for (int part = 0; part < 2; part++) {
		for (int c = 0; c < 20; c++, t++) {
			for (int i = 0; i < 300; i++)
				fprintf(f, "update\ta\t%" PRIu64 "\tk%04" PRIu64 "\tv%" PRIu64
				        "\t%d\n", t, tl_below(&rng, 2000),
				        tl_below(&rng, 5), tl_below(&rng, 3) ? 1 : -1);
			fprintf(f, "advance\ta\t%" PRIu64 "\ncommit\n", t + 1);
		}
		fflush(f);
		snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' '%s'", B, d.path, log);
		cr_assert_eq(tl_sh(cmd, true, &o), 0, "%s", o);
		free(o);
		if (part == 0) {
			snprintf(cmd, sizeof cmd, "'%s/ah-snapshot' push '%s' '%s'", B,
			         d.path, snaps);
			cr_assert_eq(tl_sh(cmd, true, &o), 0, "%s", o);
			free(o);
		}
	}
	cr_assert_eq(fclose(f), 0);
	/* The machine is lost after the second load: only the snapshot of
	 * the first is left. */
	snprintf(cmd, sizeof cmd, "rm -f '%s' '%s-lock'", d.path, d.path);
	cr_assert_eq(tl_sh(cmd, true, NULL), 0);
	snprintf(cmd, sizeof cmd, "'%s/ah-snapshot' restore '%s' '%s'", B, snaps, r);
	cr_assert_eq(tl_sh(cmd, true, &o), 0, "%s", o);
	free(o);
	snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' '%s'", B, r, log);
	cr_assert_eq(tl_sh(cmd, true, &o), 0, "%s", o);
	cr_assert(strstr(o, "applied 20 commits (6040 records, 6000 updates)") != NULL,
	          "seed %" PRIu64 ": %s", seed, o);
	free(o);
	snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' '%s'", B, full, log);
	cr_assert_eq(tl_sh(cmd, true, NULL), 0);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' read a --as-of 39", B, r);
	cr_assert_eq(tl_sh(cmd, false, &a), 0);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' read a --as-of 39", B, full);
	cr_assert_eq(tl_sh(cmd, false, &b), 0);
	cr_assert_gt(strlen(a), 1000);
	cr_assert_str_eq(a, b);
	free(a);
	free(b);
	tl_rmdir(&d);
}

/* Pushes of one heap to one DIR at once, from two threads of one process
 * and from another process: each gets its own SEQ and restores. */
typedef struct pusher {
	ah_heap *h;
	const char *dir;
	int rc[8];
	uint64_t seq[8];
} pusher;

static void *push_thread(void *arg)
{
	pusher *p = arg;

	for (int i = 0; i < 8; i++) {
		ah_snapshot_info si;

		p->rc[i] = ah_snapshot_push(p->h, p->dir, &si);
		p->seq[i] = si.seq;
	}
	return NULL;
}

Test(snapshot, concurrent_pushes_each_get_a_seq, .timeout = 120)
{
	tl_dir d = tl_tmpdir("snap");
	char snaps[256], r[256];
	ah_heap *h = tl_open_path(d.path, 0, 2000), *g;
	pusher a = { 0 }, b = { 0 };
	pthread_t ta, tb;
	pid_t pid;
	int st;

	commits(h, 13, 1, 10);
	path_in(&d, "snaps", snaps);
	a.h = b.h = h;
	a.dir = b.dir = snaps;
	cr_assert_eq(ah_close(h), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		ah_open_opts ro = tl_opts(AH_OPEN_RDONLY, 0, 0);
		ah_heap *c;
		int bad = 0;

		if (ah_open(d.path, &ro, &c) != 0)
			_exit(2);
		for (int i = 0; i < 8; i++)
			bad |= ah_snapshot_push(c, snaps, NULL) != 0;
		_exit(bad);
	}
	h = tl_open_path(d.path, 0, 2000);
	a.h = b.h = h;
	cr_assert_eq(pthread_create(&ta, NULL, push_thread, &a), 0);
	cr_assert_eq(pthread_create(&tb, NULL, push_thread, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d", st);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(a.rc[i], 0, "%s", ah_strerror(a.rc[i]));
		cr_assert_eq(b.rc[i], 0, "%s", ah_strerror(b.rc[i]));
		cr_assert_neq(a.seq[i], b.seq[i]);
	}
	/* 24 pushes, 24 manifests: no SEQ was taken twice (link never
	 * replaces), and SEQs run 1..24. */
	cr_assert_eq(count_files(snaps, "manifests"), 24);
	{
		seen v = { 0 };

		cr_assert_eq(ah_snapshot_foreach(snaps, collect_all, &v), 0);
		cr_assert_eq(v.n, 24);
		for (int i = 0; i < 24; i++)
			cr_assert_eq(v.seqs[i], (uint64_t)i + 1);
	}
	cr_assert_eq(count_files(snaps, "tmp"), 0);
	path_in(&d, "r", r);
	cr_assert_eq(ah_snapshot_restore(snaps, NULL, r, 0, NULL), 0);
	g = tl_open_path(r, 0, 2000);
	assert_same_state(h, g);
	cr_assert_eq(ah_close(g), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* An object's name taken by a FIFO: an error, never a blocked restore;
 * a kept manifest damaged: prune names it and deletes nothing. */
Test(snapshot, odd_files_are_errors_not_hangs, .timeout = 60)
{
	fixture f;
	char obj[600], save[620];
	ah_prune_info pi;
	int before;

	fixture_make(&f);
	first_object(&f, obj);
	snprintf(save, sizeof save, "%s.save", obj);
	cr_assert_eq(rename(obj, save), 0);
	cr_assert_eq(mkfifo(obj, 0644), 0);
	refused(&f, AH_ECORRUPT, "a FIFO for an object");
	cr_assert_eq(unlink(obj), 0);
	cr_assert_eq(mkdir(obj, 0755), 0);
	refused(&f, AH_ECORRUPT, "a directory for an object");
	cr_assert_eq(rmdir(obj), 0);
	cr_assert_eq(rename(save, obj), 0);
	/* A FIFO as the manifest. */
	cr_assert_eq(rename(f.manifest, save), 0);
	cr_assert_eq(mkfifo(f.manifest, 0644), 0);
	refused(&f, AH_ECORRUPT, "a FIFO for the manifest");
	cr_assert_eq(unlink(f.manifest), 0);
	cr_assert_eq(rename(save, f.manifest), 0);
	/* A damaged kept manifest stops prune, which says which. */
	before = count_files(f.snaps, "objects");
	tl_flip(f.manifest, 20, 0x01);
	cr_assert_eq(ah_snapshot_prune(f.snaps, 1, &pi), AH_ECORRUPT);
	cr_assert(strstr(pi.message, f.id) != NULL, "%s", pi.message);
	cr_assert_eq(count_files(f.snaps, "objects"), before);
	cr_assert_eq(count_files(f.snaps, "manifests"), 1);
	tl_rmdir(&f.d);
}

/* list's NAME=POS fields cannot be misread: spaces and '=' are escaped;
 * --json carries the exact bytes as hex. */
Test(snapshot, list_fields_are_unambiguous)
{
	tl_dir d = tl_tmpdir("snaplist");
	char snaps[256], cmd[1024], *o;
	ah_heap *h = tl_open_path(d.path, 0, 2000);
	ah_txn *t;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_source_put(t, "sp", "a  b=c\xe9", 7), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	path_in(&d, "snaps", snaps);
	cr_assert_eq(ah_snapshot_push(h, snaps, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	snprintf(cmd, sizeof cmd, "'%s/ah-snapshot' list '%s'", tl_build(), snaps);
	cr_assert_eq(tl_sh(cmd, false, &o), 0);
	cr_assert(strstr(o, "  sp=a\\x20\\x20b\\x3dc\\xe9\n") != NULL, "%s", o);
	free(o);
	snprintf(cmd, sizeof cmd, "'%s/ah-snapshot' list '%s' --json | python3 -c "
	         "'import json,sys; s=json.load(sys.stdin)[\"snapshots\"][0][\"sources\"][0]; "
	         "print(s[\"name\"], s[\"position_hex\"])'", tl_build(), snaps);
	cr_assert_eq(tl_sh(cmd, false, &o), 0);
	cr_assert_str_eq(o, "sp 612020623d63e9\n");
	free(o);
	tl_rmdir(&d);
}

/* An object altered together with its manifest line (XXH3-128 and the
 * end checksum put right): the restore stores it without checking its
 * chunk sums (heap_chunk_put_raw, checksums false) and relies on the
 * final verify, which opens every chunk whole.  It must still be refused. */
Test(snapshot, altered_object_with_matching_manifest_is_refused)
{
	fixture f;
	char obj[600], from[200], to[200];
	size_t len;
	uint8_t *bytes;
	XXH128_hash_t h;
	FILE *o;

	fixture_make(&f);
	first_object(&f, obj);
	cr_assert_not_null(bytes = (uint8_t *)tl_read(obj, &len));
	h = XXH3_128bits(bytes, len);
	/* The end of its object line: "... BYTES H128". */
	snprintf(from, sizeof from, " %zu %016" PRIx64 "%016" PRIx64 "\n",
	         len, h.high64, h.low64);
	bytes[len - 100] ^= 0x40; /* in the zeroed tail: a page sum covers it */
	h = XXH3_128bits(bytes, len);
	snprintf(to, sizeof to, " %zu %016" PRIx64 "%016" PRIx64 "\n",
	         len, h.high64, h.low64);
	cr_assert_not_null(o = fopen(obj, "w"));
	cr_assert_eq(fwrite(bytes, 1, len, o), len);
	cr_assert_eq(fclose(o), 0);
	rewrite_manifest(f.manifest, from, to);
	refused(&f, AH_ECORRUPT, "an object altered with its manifest line");
	free(bytes);
	tl_rmdir(&f.d);
}
