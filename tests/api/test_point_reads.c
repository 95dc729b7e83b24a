/*
 * tests/api/test_point_reads.c - point reads through the key filters and
 * the per-handle cache of decoded batch records, from outside:
 *  - a cursor opened at a key and then moved (step, seek, rewind) reads
 *    exactly what a cursor opened at the first key and seeked reads, over
 *    batches whose filters exclude the key (they are brought in before the
 *    cursor leaves it) and batches that hold it;
 *  - another process that appends, compacts and merges while this handle
 *    keeps its cache warm: every answer afterwards is the model's;
 *  - reader threads answering point queries while a writer commits new
 *    batches and merges (also under `make tsan`): each answer is exact for
 *    the reader's snapshot.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_heap.h"

static void key_of(uint32_t i, char out[12])
{
	snprintf(out, 12, "k%09u", i);
}

/* Where the cursor is: "key|sum" or "end". */
static void where(ah_cursor *c, int rc, tl_buf *b)
{
	const void *k;
	size_t kl;
	int64_t s;

	cr_assert_geq(rc, 0, "%s", ah_strerror(rc));
	if (!ah_cursor_key_valid(c)) {
		tl_put(b, "end\n");
		return;
	}
	cr_assert_eq(ah_cursor_key(c, &k, &kl), 0);
	cr_assert_eq(ah_cursor_accumulate(c, 4, &s), 0);
	tl_put_bytes(b, k, kl);
	tl_put(b, "|%" PRId64 "\n", s);
}

/* The walk from probe: open (at the key, or at the first key and seek),
 * three steps, a seek 40 keys on, a step, a rewind, a step. */
static void walk(ah_txn *t, uint32_t probe, bool at, tl_buf *b)
{
	ah_cursor *c;
	char kb[12];

	key_of(probe, kb);
	if (at) {
		cr_assert_eq(ah_cursor_open_at(t, "a", kb, 10, &c), 0);
		where(c, 0, b);
	} else {
		cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
		where(c, ah_cursor_seek_key(c, kb, 10), b);
	}
	for (int i = 0; i < 3; i++)
		where(c, ah_cursor_step_key(c), b);
	key_of(probe + 40, kb);
	where(c, ah_cursor_seek_key(c, kb, 10), b);
	where(c, ah_cursor_step_key(c), b);
	where(c, ah_cursor_rewind_keys(c), b);
	where(c, ah_cursor_step_key(c), b);
	cr_assert_eq(ah_cursor_close(c), 0);
}

/* Every batch written here has a filter of 10 bits per key, in 64-byte
 * blocks of 480 filter bits and a check (ah_batch_info, as ah-dump
 * batches --json shows it). */
static int filter_sized(const ah_batch_info *b, void *user)
{
	(void)user;
	cr_assert_eq(b->filter_keys, b->keys);
	cr_assert_eq(b->filter_bytes, (b->keys * 10 + 479) / 480 * 64);
	return 0;
}

Test(api_point_reads, moves_after_open_at_equal_open_then_seek, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	/* five batches, no merges: batch bi holds the multiples of bi + 2,
	 * so a key is in some, all or none of them */
	static const uint32_t n[5] = { 30000, 20000, 8000, 3000, 500 };
	for (uint64_t bi = 0; bi < 5; bi++) {
		ah_update *u = calloc(n[bi], sizeof *u);
		char (*kb)[12] = calloc(n[bi], 12);
		for (uint32_t i = 0; i < n[bi]; i++) {
			key_of(i * (uint32_t)(bi + 2), kb[i]);
			u[i] = (ah_update){ kb[i], 10, "v", 1, bi, (int64_t)bi + 1 };
		}
		cr_assert_eq(ah_append(t, "a", bi, bi + 1, u, n[bi]), 0, "%s", ah_txn_errmsg(t));
		free(u);
		free(kb);
	}
	ah_arrangement_info in;
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	cr_assert_geq(in.batches, 3, "batches %llu", (unsigned long long)in.batches);
	cr_assert_eq(ah_batch_foreach(t, "a", filter_sized, NULL), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	tl_buf lazy = { 0 }, eager = { 0 };
	/* 0: in all; 7, 11, 13: in none; 9: only in bi 1; 60: in bi 0..4;
	 * the last keys of the small batches; past every key */
	uint32_t probes[] = { 0, 1, 7, 9, 11, 13, 25, 60, 997, 1000, 1001, 2999,
	                      3000, 11998, 11999, 59998, 59999, 70000, 1000000 };
	for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
		walk(t, probes[i], true, &lazy);
		walk(t, probes[i], false, &eager);
	}
	cr_assert_str_eq(lazy.p, eager.p);
	/* exact: k000000060 is in batches 0 (x2), 1 (x3), 2 (x4), 3 (x5), 4
	 * (x6): diffs 1+2+3+4+5; k000000007 is in none: the next key, 8, is
	 * in batches 0 and 2 (1+3) */
	cr_assert(strstr(lazy.p, "6b303030303030303630|15\n"), "%.200s", lazy.p);
	cr_assert(strstr(lazy.p, "6b303030303030303038|4\n"), "%.200s", lazy.p);
	free(lazy.p);
	free(eager.p);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ---------------------------------------------------- shared workload */

#define PK 400u     /* keys per round: "p<round>-<i>" and "s<i>" */

/* Round r (r >= 1) appends [r - 1, r): key s<i> +1 for every i (so its
 * sum as of r - 1 is r), and p<r>-<i> +1 (in round r's batch only). */
static void round_(ah_heap *h, uint64_t r, bool merge)
{
	static ah_update u[2 * PK];
	static char kb[2 * PK][24];
	ah_txn *t;
	int idle;

	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	if (r == 1)
		cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	for (uint32_t i = 0; i < PK; i++) {
		snprintf(kb[2 * i], 24, "s%05u", i);
		snprintf(kb[2 * i + 1], 24, "p%04u-%05u", (unsigned)r, i);
		u[2 * i] = (ah_update){ kb[2 * i], strlen(kb[2 * i]), "v", 1, r - 1, 1 };
		u[2 * i + 1] = (ah_update){ kb[2 * i + 1], strlen(kb[2 * i + 1]), "v",
		                            1, r - 1, 1 };
	}
	cr_assert_eq(ah_append(t, "a", r - 1, r, u, 2 * PK), 0, "%s", ah_txn_errmsg(t));
	if (merge) {
		cr_assert_eq(ah_set_since(t, "a", r - 1), 0);
		cr_assert_eq(ah_maintain(t, "a", 0, &idle), 0);
	}
	cr_assert_eq(ah_txn_commit(t), 0);
}

/* The sum of key as of upper - 1 in a new read txn; *upper set. */
static int64_t point(ah_heap *h, const char *key, uint64_t *upper, int *found)
{
	ah_txn *t;
	ah_cursor *c;
	ah_arrangement_info in;
	const void *k;
	size_t kl;
	int64_t s = 0;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
	*upper = in.upper;
	cr_assert_eq(ah_cursor_open_at(t, "a", key, strlen(key), &c), 0);
	*found = 0;
	if (ah_cursor_key_valid(c)) {
		cr_assert_eq(ah_cursor_key(c, &k, &kl), 0);
		if (kl == strlen(key) && !memcmp(k, key, kl)) {
			*found = 1;
			cr_assert_eq(ah_cursor_accumulate(c, in.upper - 1, &s), 0);
		}
	}
	cr_assert_eq(ah_cursor_close(c), 0);
	ah_txn_abort(t);
	return s;
}

/* Every key of rounds 1..upper answers exactly; keys of later rounds and
 * of none are absent. */
static void check_all(ah_heap *h, uint64_t want_upper)
{
	char kb[24];
	uint64_t up;
	int found;

	for (uint64_t r = 1; r <= want_upper + 1; r++)
		for (uint32_t i = 0; i < PK; i += 37) {
			snprintf(kb, sizeof kb, "p%04u-%05u", (unsigned)r, i);
			int64_t s = point(h, kb, &up, &found);
			cr_assert_eq(up, want_upper);
			cr_assert_eq(found, r <= want_upper, "%s", kb);
			cr_assert_eq(s, r <= want_upper ? 1 : 0, "%s", kb);
		}
	for (uint32_t i = 0; i < PK; i += 13) {
		snprintf(kb, sizeof kb, "s%05u", i);
		cr_assert_eq(point(h, kb, &up, &found), (int64_t)want_upper, "%s", kb);
	}
	cr_assert_eq(point(h, "q", &up, &found), 0);
	cr_assert_eq(found, 0);
}

Test(api_point_reads, another_process_changes_the_heap, .timeout = 120)
{
	tl_dir d = tl_tmpdir("api");
	int go[2], done[2];
	char c = 0;

	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(done), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* forked before the parent opens: a process of its own */
		ah_heap *ch;
		ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_NOSYNC };
		if (read(go[0], &c, 1) != 1 || ah_open(d.path, &o, &ch) != 0)
			_exit(2);
		for (uint64_t r = 4; r <= 9; r++)
			round_(ch, r, r % 2 == 0); /* merges drop batches */
		_exit(ah_close(ch) == 0 && write(done[1], "x", 1) == 1 ? 0 : 3);
	}
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	for (uint64_t r = 1; r <= 3; r++)
		round_(h, r, false);
	check_all(h, 3); /* the cache holds batches 1..3 now */
	cr_assert_eq(write(go[1], "x", 1), 1);
	cr_assert_eq(read(done[0], &c, 1), 1);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	check_all(h, 9);
	round_(h, 10, true);
	check_all(h, 10);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ------------------------------------------------------------ threads */

struct reader {
	ah_heap *h;
	uint64_t seed, queries;
	volatile int *stop;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char kb[24];
	uint64_t x = r->seed, up;
	int found;

	while (!__atomic_load_n(r->stop, __ATOMIC_ACQUIRE) || r->queries < 200) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t i = (uint32_t)(x >> 33) % PK;
		unsigned round = (unsigned)(x >> 20) % 40 + 1;
		ah_txn *t;
		ah_cursor *c;
		ah_arrangement_info in;
		/* one snapshot for the upper and both answers */
		cr_assert_eq(ah_txn_begin(r->h, AH_TXN_RDONLY, &t), 0);
		cr_assert_eq(ah_arrangement_info_get(t, "a", &in), 0);
		up = in.upper;
		for (int which = 0; which < 2; which++) {
			if (which)
				snprintf(kb, sizeof kb, "p%04u-%05u", round, i);
			else
				snprintf(kb, sizeof kb, "s%05u", i);
			const void *k;
			size_t kl;
			int64_t s = 0;
			cr_assert_eq(ah_cursor_open_at(t, "a", kb, strlen(kb), &c), 0);
			found = ah_cursor_key_valid(c) &&
			        ah_cursor_key(c, &k, &kl) == 0 && kl == strlen(kb) &&
			        !memcmp(k, kb, kl);
			if (found)
				cr_assert_eq(ah_cursor_accumulate(c, up - 1, &s), 0);
			cr_assert_eq(ah_cursor_close(c), 0);
			if (which)
				cr_assert_eq(s, round <= up ? 1 : 0, "%s at upper %llu", kb,
				             (unsigned long long)up);
			else
				cr_assert_eq(s, (int64_t)up, "%s at upper %llu", kb,
				             (unsigned long long)up);
		}
		ah_txn_abort(t);
		r->queries++;
	}
	return NULL;
}

Test(api_point_reads, threads_query_while_a_writer_commits, .timeout = 300)
{
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, 0);
	volatile int stop = 0;
	struct reader rd[3];
	pthread_t th[3];

	round_(h, 1, false);
	for (int i = 0; i < 3; i++) {
		rd[i] = (struct reader){ h, 1000 + (uint64_t)i, 0, &stop };
		cr_assert_eq(pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
	}
	for (uint64_t r = 2; r <= 40; r++)
		round_(h, r, r % 3 == 0);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(pthread_join(th[i], NULL), 0);
		cr_assert_geq(rd[i].queries, 200);
	}
	check_all(h, 40);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
