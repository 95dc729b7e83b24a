/*
 * tests/stress/test_merge_par.c - the merge of all batches on two threads
 * (arrangement/merge_par.c, ARCHITECTURE.md §6 "The merge of all batches
 * on two cores").  Its promises, each tried from outside:
 * - the output holds exactly what the merge on one thread writes: the
 *   same contents, stored updates and spine shape, and verifies clean
 *   (fences, counts, key filter), for fixed-width keys and vals (the run
 *   loop) and variable ones (the group-at-a-time path), with since
 *   consolidating;
 * - an input written by the merge's own txn (which the helper's snapshot
 *   cannot see) makes the writing thread merge every range itself, with
 *   the same output;
 * - readers on other threads see exact sums in every snapshot meanwhile
 *   (also under `make tsan`);
 * - a process killed at any moment of it leaves the last commit.
 * The thresholds are made small so that a few MiB split into many ranges.
 * Public header only, plus the two test hooks of arrangement/merge.h,
 * declared here.  Seeds are fixed and printed.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arrheap.h"
#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_rand.h"

/* arrangement/merge.h (the library's, not the public header's) */
void merge_par_tune(uint64_t min_bytes, uint64_t range_bytes);
void merge_par_counts(uint64_t *merges, uint64_t *helped);

#define SEED 4121u
#define NAPP 6
#define NUP 6000
#define NKEYS 20000u
#define VW 400

static const char *const names[2] = { "fixed", "var" };

/* Append k's updates of arrangement a into u (keys and vals in kb, vb):
 * random keys over NKEYS, a few vals each, diffs +-1 (1 in 4 negative),
 * all at time k. */
static void updates(unsigned a, unsigned k, ah_update *u, uint8_t (*kb)[16],
                    uint8_t (*vb)[VW])
{
	uint64_t s = SEED * 131 + 17 * k + a;

	for (unsigned i = 0; i < NUP; i++) {
		uint64_t key = tl_below(&s, NKEYS), val = tl_below(&s, 3);
		size_t kl = 8, vl = VW;

		memset(kb[i], 0, 16);
		memset(vb[i], 0, VW);
		for (int j = 0; j < 8; j++)
			kb[i][j] = (uint8_t)(key >> (56 - 8 * j));
		vb[i][0] = (uint8_t)val;
		vb[i][VW - 1] = (uint8_t)(key * 7);
		if (a == 1) { /* var: lengths from the key and val */
			kl = 6 + key % 9;
			vl = 1 + (size_t)((key + val) % (VW - 1));
		}
		u[i] = (ah_update){ kb[i], kl, vb[i], vl, k,
		                    tl_below(&s, 4) ? 1 : -1 };
	}
}

static ah_update *ups;
static uint8_t (*kbuf)[16];
static uint8_t (*vbuf)[VW];

static void bufs(void)
{
	if (ups)
		return;
	ups = calloc(NUP, sizeof *ups);
	kbuf = calloc(NUP, sizeof *kbuf);
	vbuf = calloc(NUP, sizeof *vbuf);
	cr_assert(ups && kbuf && vbuf);
}

static ah_heap *open_heap(const char *path, unsigned flags)
{
	/* a small quantum: appends leave merges in progress, several
	 * batches for the merge of all */
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC | flags,
	                         1u << 30, 64);
	ah_heap *h;

	TL_OK(ah_open(path, &o, &h));
	return h;
}

static void append(ah_txn *t, unsigned a, unsigned k)
{
	updates(a, k, ups, kbuf, vbuf);
	TL_OK(ah_append(t, names[a], k, k + 1, ups, NUP));
}

/* NAPP appends, each committed, to both arrangements (their merges left
 * in progress: maintain is not run), since at NAPP - 2. */
static void load(ah_heap *h)
{
	ah_txn *t;

	bufs();
	TL_OK(ah_txn_begin(h, 0, &t));
	TL_OK(ah_arrangement_create(t, names[0]));
	TL_OK(ah_arrangement_create(t, names[1]));
	TL_OK(ah_txn_commit(t));
	for (unsigned k = 0; k < NAPP; k++) {
		TL_OK(ah_txn_begin(h, 0, &t));
		append(t, 0, k);
		append(t, 1, k);
		if (k == NAPP - 1) {
			TL_OK(ah_set_since(t, names[0], NAPP - 2));
			TL_OK(ah_set_since(t, names[1], NAPP - 2));
		}
		TL_OK(ah_txn_commit(t));
	}
}

/* One txn: (inside: another append first), ah_maintain(0) of both. */
static void maintain_all(ah_heap *h, bool inside)
{
	ah_txn *t;
	int idle;

	TL_OK(ah_txn_begin(h, 0, &t));
	if (inside) {
		append(t, 0, NAPP);
		append(t, 1, NAPP);
	}
	TL_OK(ah_maintain(t, names[0], 0, &idle));
	TL_OK(ah_maintain(t, names[1], 0, &idle));
	TL_OK(ah_txn_commit(t));
}

/* The one batch of an arrangement after the merge of all: its counts
 * into *sig, and its key filter counts every key. */
static int one_batch(const ah_batch_info *b, void *user)
{
	uint64_t *sig = user;

	cr_assert_eq(b->partial, 0);
	cr_assert_eq(b->filter_keys, b->keys, "a filter over every key");
	cr_assert_gt(b->filter_bytes, 0);
	*sig = *sig * 1000003u + b->updates * 31u + b->keys * 7u + b->vals;
	return 0;
}

/* Loads a heap and merges it all, with the thresholds given; its state
 * hash (contents and spine shape) and the batch counts, verified clean. */
static uint64_t run(uint64_t min, uint64_t range, bool inside,
                    uint64_t *merges, uint64_t *helped)
{
	tl_dir d = tl_tmpdir("mpar");
	char path[4200];
	uint64_t m0, h0;
	tl_state st;
	ah_heap *h;

	snprintf(path, sizeof path, "%s/heap", d.dir);
	merge_par_tune(min, range);
	h = open_heap(path, 0);
	load(h);
	merge_par_counts(&m0, &h0);
	maintain_all(h, inside);
	merge_par_counts(merges, helped);
	*merges -= m0;
	*helped -= h0;
	merge_par_tune(0, 0);
	TL_OK(tl_verify(h, NULL));
	TL_OK(tl_state_hash(h, 1, &st));
	{
		ah_txn *t;
		ah_arrangement_info in;

		TL_OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
		for (int a = 0; a < 2; a++) {
			TL_OK(ah_arrangement_info_get(t, names[a], &in));
			cr_assert_eq(in.batches, 1, "%s: %u batches", names[a],
			             (unsigned)in.batches);
			TL_OK(ah_batch_foreach(t, names[a], one_batch, &st.hash));
		}
		ah_txn_abort(t);
	}
	TL_OK(ah_close(h));
	tl_rmdir(&d);
	return st.hash;
}

Test(merge_par, equals_one_thread, .timeout = 240)
{
	uint64_t m, hp, one, two, many;

	printf("merge_par/equals_one_thread: seed %u\n", SEED);
	one = run(UINT64_MAX, 0, false, &m, &hp);
	cr_assert_eq(m, 0, "no merge on two threads when below the threshold");
	/* a few ranges, and many (at most one chunk of the largest input) */
	two = run(1, 2u << 20, false, &m, &hp);
	cr_assert_eq(m, 2, "both arrangements merged on two threads");
	cr_assert_geq(hp, 2, "the helper's ranges absorbed");
	many = run(1, 1, false, &m, &hp);
	cr_assert_eq(m, 2);
	cr_assert_geq(hp, 4);
	cr_assert_eq(two, one, "contents and shape as on one thread");
	cr_assert_eq(many, one);
}

Test(merge_par, inputs_of_the_same_txn_fall_back, .timeout = 240)
{
	uint64_t m, hp, one, two;

	one = run(UINT64_MAX, 0, true, &m, &hp);
	cr_assert_eq(m, 0);
	two = run(1, 1, true, &m, &hp);
	cr_assert_eq(m, 2, "the merges began on two threads");
	cr_assert_eq(hp, 0, "the helper cannot see an uncommitted input");
	cr_assert_eq(two, one);
}

/* Readers: in every snapshot, each arrangement's diffs sum (as of its
 * upper - 1) to what the writer appended up to that upper. */
typedef struct rd {
	ah_heap *h;
	_Atomic int64_t want[2][4 * NAPP];
	atomic_int done, bad;
	atomic_uint_fast64_t reads;
} rd;

static int64_t sum_of(ah_txn *t, const char *name, uint64_t *upper)
{
	ah_arrangement_info in;
	ah_cursor *c = NULL;
	int64_t n = 0, s;
	int rc;

	if (ah_arrangement_info_get(t, name, &in) != 0)
		return INT64_MIN;
	*upper = in.upper;
	if (in.upper == 0)
		return 0;
	rc = ah_cursor_open(t, name, &c);
	for (; rc >= 0 && c && ah_cursor_key_valid(c); rc = ah_cursor_step_key(c))
		for (; rc >= 0 && ah_cursor_val_valid(c); rc = ah_cursor_step_val(c)) {
			if ((rc = ah_cursor_accumulate(c, in.upper - 1, &s)) < 0)
				break;
			n += s;
		}
	ah_cursor_close(c);
	return rc < 0 ? INT64_MIN : n;
}

static void *reader(void *arg)
{
	rd *r = arg;

	while (!atomic_load(&r->done)) {
		ah_txn *t;

		if (ah_txn_begin(r->h, AH_TXN_RDONLY, &t) != 0) {
			atomic_store(&r->bad, 1);
			break;
		}
		for (int a = 0; a < 2; a++) {
			uint64_t up = 0;
			int64_t s = sum_of(t, names[a], &up);

			if (up > 0 && (up >= 4 * NAPP || s != atomic_load(&r->want[a][up])))
				atomic_store(&r->bad, 1);
		}
		ah_txn_abort(t);
		atomic_fetch_add(&r->reads, 1);
	}
	return NULL;
}

Test(merge_par, readers_meanwhile, .timeout = 600)
{
	tl_dir d = tl_tmpdir("mpar");
	char path[4200];
	pthread_t th[2];
	uint64_t m0, h0, m1, h1;
	rd r;
	ah_txn *t;
	int idle;

	memset(&r, 0, sizeof r);
	snprintf(path, sizeof path, "%s/heap", d.dir);
	bufs();
	merge_par_tune(1, 1);
	r.h = open_heap(path, 0);
	TL_OK(ah_txn_begin(r.h, 0, &t));
	TL_OK(ah_arrangement_create(t, names[0]));
	TL_OK(ah_arrangement_create(t, names[1]));
	TL_OK(ah_txn_commit(t));
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, reader, &r), 0);
	merge_par_counts(&m0, &h0);
	for (unsigned k = 0; k < 3 * NAPP; k++) {
		TL_OK(ah_txn_begin(r.h, 0, &t));
		for (unsigned a = 0; a < 2; a++) {
			int64_t s = atomic_load(&r.want[a][k]);

			updates(a, k, ups, kbuf, vbuf);
			for (unsigned i = 0; i < NUP; i++)
				s += ups[i].diff;
			atomic_store(&r.want[a][k + 1], s);
			TL_OK(ah_append(t, names[a], k, k + 1, ups, NUP));
		}
		TL_OK(ah_txn_commit(t));
		if (k % 3 != 2)
			continue;
		TL_OK(ah_txn_begin(r.h, 0, &t));
		TL_OK(ah_maintain(t, names[0], 0, &idle));
		TL_OK(ah_maintain(t, names[1], 0, &idle));
		TL_OK(ah_txn_commit(t));
	}
	atomic_store(&r.done, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	merge_par_counts(&m1, &h1);
	merge_par_tune(0, 0);
	cr_assert_eq(atomic_load(&r.bad), 0, "a reader saw a wrong sum");
	cr_assert_geq(m1 - m0, 10, "merges on two threads");
	cr_assert_geq(h1 - h0, 10, "ranges from the helper");
	cr_assert_gt(atomic_load(&r.reads), 0);
	TL_OK(tl_verify(r.h, NULL));
	TL_OK(ah_close(r.h));
	tl_rmdir(&d);
}

#ifndef AH_TSAN_DRIVER
/* A child merges all batches of a copy of a loaded heap and is killed
 * after 0 to ~60 ms, 12 times: the heap verifies, and holds the same
 * contents, in its batches before the merge or in 1 after. */
Test(merge_par, killed_at_any_moment, .timeout = 600)
{
	tl_dir d = tl_tmpdir("mpar");
	char base[4200], path[4200];
	uint64_t s = SEED, before, merged;
	tl_state st;
	ah_heap *h;
	unsigned after = 0, kept = 0, nb;

	snprintf(base, sizeof base, "%s/base", d.dir);
	snprintf(path, sizeof path, "%s/heap", d.dir);
	printf("merge_par/killed_at_any_moment: seed %u\n", SEED);
	h = open_heap(base, 0);
	load(h);
	TL_OK(tl_state_hash(h, 0, &st));
	before = st.hash;
	{
		ah_txn *t;
		ah_arrangement_info in;

		TL_OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
		TL_OK(ah_arrangement_info_get(t, names[0], &in));
		nb = (unsigned)in.batches;
		ah_txn_abort(t);
	}
	cr_assert_gt(nb, 1, "batches to merge");
	TL_OK(ah_close(h));
	/* the contents after the merge (times advanced to since) */
	cr_assert_eq(tl_copy(base, path), 0);
	h = open_heap(path, 0);
	maintain_all(h, false);
	TL_OK(tl_state_hash(h, 0, &st));
	merged = st.hash;
	TL_OK(ah_close(h));
	for (int round = 0; round < 12; round++) {
		unsigned us = (unsigned)tl_below(&s, 60000);
		pid_t pid;
		int status;

		unlink(path);
		cr_assert_eq(tl_copy(base, path), 0);
		fflush(NULL);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			ah_heap *ch;
			ah_open_opts o = tl_opts(AH_OPEN_NOSYNC, 1u << 30, 64);
			ah_txn *t;
			int idle;

			merge_par_tune(1, 1);
			if (ah_open(path, &o, &ch) != 0 || ah_txn_begin(ch, 0, &t) != 0 ||
			    ah_maintain(t, names[0], 0, &idle) != 0 ||
			    ah_maintain(t, names[1], 0, &idle) != 0 ||
			    ah_txn_commit(t) != 0)
				_exit(1);
			_exit(0);
		}
		usleep(us);
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFSIGNALED(status) || WEXITSTATUS(status) == 0,
		          "round %d: the child failed", round);
		h = open_heap(path, 0);
		TL_OK(tl_verify(h, NULL));
		TL_OK(tl_state_hash(h, 0, &st));
		cr_assert(st.hash == before || st.hash == merged,
		          "round %d (%u us): contents", round, us);
		{
			ah_txn *t;
			ah_arrangement_info in;

			TL_OK(ah_txn_begin(h, AH_TXN_RDONLY, &t));
			TL_OK(ah_arrangement_info_get(t, names[0], &in));
			cr_assert(in.batches == 1 || in.batches == nb,
			          "round %d: %u batches", round, (unsigned)in.batches);
			cr_assert_eq(st.hash, in.batches == 1 ? merged : before);
			if (in.batches == 1)
				after++;
			else
				kept++;
			ah_txn_abort(t);
		}
		TL_OK(ah_close(h));
	}
	printf("merge_par/killed_at_any_moment: %u rounds before the commit, "
	       "%u after\n", kept, after);
	cr_assert_gt(kept, 0, "no kill landed inside the merge");
	tl_rmdir(&d);
}
#endif
