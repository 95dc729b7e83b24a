/*
 * tests/fault/test_fault_flush.c - the flusher (heap/flush.c): every
 * FLUSH_EVERY (32 MiB) bytes of chunk writes in a write txn, a thread of
 * the handle runs fdatasync, so that the commit waits for less.  Each
 * test tries to break one of its promises from outside:
 * - it never runs while a commit syncs: every fdatasync is slowed down,
 *   and txns commit right after the 32nd MiB, when one has just been
 *   asked for; no LMDB msync may begin while an fdatasync is in flight;
 * - an error it sees fails the next commit (AH_EIO; ENOSPC: AH_EFULL), so
 *   LMDB's msync, which would no longer see it, never acknowledges writes
 *   that failed; nothing of that txn lands, and the next txn commits;
 * - an abort drops such an error with its writes;
 * - a read-only or AH_OPEN_NOSYNC handle never starts it, and close joins
 *   it (the process's thread count is back where it was).
 * Seeds are fixed and printed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "heap/heap.h"
#include "heap/heap_int.h"
#include "interpose.h"
#include "usr1.h"
#include "tests/unit/heap/heap_test.h"

#define SEED 20261206u
#define CHUNK 1040000u
/* chunks of a txn: 34 MB, past the flusher's 32 MiB */
#define PER_TXN 34u

static heap *open_heap(tl_dir *d, unsigned flags)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | flags, 512 * MiB, 0);
	heap *h;

	cr_assert_eq(heap_open(d->path, &o, &h), 0);
	return h;
}

/* Writes PER_TXN chunks in t (ids into ids). */
static void write_txn(heap_txn *t, uint64_t seed, uint64_t *ids)
{
	for (unsigned i = 0; i < PER_TXN; i++)
		ids[i] = ht_put_chunk(t, CHUNK, seed + i);
}

/* Waits (up to 10 s) until the flusher ran n fdatasyncs in all. */
static void wait_flushes(heap *h, uint64_t n)
{
	for (int i = 0; i < 10000 && heap_flush_count(h) < n; i++)
		usleep(1000);
	cr_assert_geq(heap_flush_count(h), n, "the flusher did not run");
}

static unsigned threads(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned n = 0;

	cr_assert_not_null(f);
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Threads: %u", &n) == 1)
			break;
	fclose(f);
	return n;
}

Test(flush, never_runs_while_a_commit_syncs, .timeout = 120)
{
	tl_dir d = tl_tmpdir("flush");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	uint64_t ids[2][PER_TXN];
	uint64_t over0 = io_msync_overlaps(), fds0 = io_calls_off_main(IO_FDATASYNC);

	printf("flush/never_runs_while_a_commit_syncs: seed %u\n", SEED);
	io_fdatasync_delay(20000);
	for (unsigned r = 0; r < 8; r++) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		if (r > 0) /* last round's: the file stays bounded */
			for (unsigned i = 0; i < PER_TXN; i++)
				cr_assert_eq(heap_chunk_free(t, ids[(r - 1) % 2][i]), 0);
		write_txn(t, SEED + 100 * r, ids[r % 2]);
		/* at once: an fdatasync was just asked for, and is slow */
		cr_assert_eq(heap_txn_commit(t), 0, "round %u", r);
	}
	io_fdatasync_delay(0);
	uint64_t ran = io_calls_off_main(IO_FDATASYNC) - fds0;
	cr_log_info("flush: %" PRIu64 " early flushes in 8 commits, %" PRIu64
	            " overlapped", ran, io_msync_overlaps() - over0);
	cr_assert_eq(io_msync_overlaps(), over0,
	             "an LMDB msync began while an early flush was in flight");
	cr_assert_geq(heap_flush_count(h), 1, "the flusher never ran");
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	for (unsigned i = 0; i < PER_TXN; i++) {
		const void *body;
		size_t used;
		cr_assert_eq(heap_chunk_get(t, ids[7 % 2][i], &body, &used), 0);
		cr_assert(used == CHUNK && ht_same(body, used, SEED + 700 + i,
		                                   ids[7 % 2][i]));
	}
	cr_assert_eq(ht_count_chunks(t), PER_TXN);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

static void failed_flush_case(int err, int want)
{
	tl_dir d = tl_tmpdir("flush");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	uint64_t base[PER_TXN], lost[PER_TXN], again[PER_TXN];

	/* a committed base */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	write_txn(t, SEED, base);
	cr_assert_eq(heap_txn_commit(t), 0);
	uint64_t n0 = heap_flush_count(h), inj0 = io_fault_injected();

	/* the flusher's next fdatasync fails; the commit must say so */
	io_fault_arm(1, 1u << IO_FDATASYNC, err);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	write_txn(t, SEED + 1000, lost);
	wait_flushes(h, n0 + 1);
	cr_assert_eq(io_fault_injected(), inj0 + 1, "no fault was injected");
	int rc = heap_txn_commit(t);
	cr_assert_eq(rc, want, "a commit after a failed early flush returned "
	             "%d, not %d", rc, want);
	io_fault_arm(0, 0, 0);

	/* nothing of that txn landed, in this handle or after a reopen; the
	 * handle writes no more (the file's state after a failed sync is not
	 * known: heap_sync_failed), and its syncs say so */
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), PER_TXN);
	heap_txn_abort(t);
	heap_txn *w = NULL;
	cr_assert_eq(heap_txn_begin(h, false, &w), AH_EIO);
	cr_assert_null(w);
	cr_assert_eq(heap_sync(h), want, "a sync after a failed commit");
	cr_assert_eq(heap_close(h), 0);
	h = open_heap(&d, 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), PER_TXN);
	for (unsigned i = 0; i < PER_TXN; i++) {
		const void *body;
		size_t used;
		cr_assert_eq(heap_chunk_get(t, base[i], &body, &used), 0);
		cr_assert(used == CHUNK && ht_same(body, used, SEED + i, base[i]));
	}
	heap_txn_abort(t);

	/* and the next txn commits */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	write_txn(t, SEED + 2000, again);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 2 * PER_TXN);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(flush, a_failed_early_flush_fails_the_commit_eio, .timeout = 120)
{
	failed_flush_case(EIO, AH_EIO);
}

Test(flush, a_failed_early_flush_fails_the_commit_enospc, .timeout = 120)
{
	failed_flush_case(ENOSPC, AH_EFULL);
}

/* An abort takes the flusher's error with the writes it was about, but
 * the file's state after a failed sync is not known (an outside test:
 * ext4 read pages written after such an error as zeros after a remount),
 * so the handle writes no more: the next write txn is AH_EIO, reads go
 * on, and a reopened handle writes again. */
Test(flush, an_abort_takes_the_error_and_the_handle_stops_writing,
     .timeout = 120)
{
	tl_dir d = tl_tmpdir("flush");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	uint64_t ids[PER_TXN];

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	uint64_t n0 = heap_flush_count(h), inj0 = io_fault_injected();
	io_fault_arm(1, 1u << IO_FDATASYNC, EIO);
	write_txn(t, SEED, ids);
	wait_flushes(h, n0 + 1);
	cr_assert_eq(io_fault_injected(), inj0 + 1);
	io_fault_arm(0, 0, 0);
	heap_txn_abort(t);
	heap_txn *w = NULL;
	cr_assert_eq(heap_txn_begin(h, false, &w), AH_EIO);
	cr_assert_null(w);
	cr_assert_eq(heap_sync(h), AH_EIO);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0, "reads stop");
	cr_assert_eq(ht_count_chunks(t), 0);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	/* reopened, a small txn commits */
	h = open_heap(&d, 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	uint64_t id = ht_put_chunk(t, 1000, SEED + 5);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 1);
	const void *body;
	size_t used;
	cr_assert_eq(heap_chunk_get(t, id, &body, &used), 0);
	cr_assert(used == 1000 && ht_same(body, used, SEED + 5, id));
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(flush, nosync_never_flushes_early_and_close_joins_it, .timeout = 120)
{
	tl_dir d = tl_tmpdir("flush");
	unsigned before = threads();
	uint64_t ids[PER_TXN];
	heap_txn *t;

	/* AH_OPEN_NOSYNC: no fdatasync at all, no flusher thread */
	heap *h = open_heap(&d, AH_OPEN_NOSYNC);
	uint64_t fds0 = io_calls(IO_FDATASYNC);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	write_txn(t, SEED, ids);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(io_calls(IO_FDATASYNC), fds0, "a NOSYNC heap was flushed");
	cr_assert_eq(heap_flush_count(h), 0);
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(threads(), before);

	/* a synced heap starts the thread, and its close joins it (and the
	 * writeback thread's) */
	h = open_heap(&d, 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (unsigned i = 0; i < PER_TXN; i++)
		cr_assert_eq(heap_chunk_free(t, ids[i]), 0);
	write_txn(t, SEED + 1, ids);
	wait_flushes(h, 1);
	cr_assert_gt(threads(), before);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(threads(), before, "a thread outlived its heap's close");

	/* read-only: never */
	ah_open_opts ro = tl_opts(AH_OPEN_RDONLY, 0, 0);
	cr_assert_eq(heap_open(d.path, &ro, &h), 0);
	cr_assert_eq(heap_flush_count(h), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* Through the public API: an append of 40 MB whose early flush fails is
 * AH_EIO at ah_txn_commit, nothing of it is there, the handle refuses
 * write txns (AH_EIO) and ah_sync says AH_EIO while reads go on (the
 * header: a failed sync is sticky); reopened, the heap verifies and the
 * same append commits. */
Test(flush, a_failed_early_flush_stops_the_handle_writing, .timeout = 120)
{
	tl_dir d = tl_tmpdir("flush");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 512 * MiB, 0);
	enum { N = 40000, VAL = 1000 };
	static char vals[N][VAL];
	static char keys[N][8];
	static ah_update u[N];
	ah_heap *h;
	ah_txn *t;
	ah_arrangement_info ai;

	for (unsigned i = 0; i < N; i++) {
		snprintf(keys[i], sizeof keys[i], "%07u", i);
		memset(vals[i], 'a' + (int)(i % 26), VAL);
		u[i] = (ah_update){ keys[i], 7, vals[i], VAL, 1, 1 };
	}
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_append(t, "a", 0, 2, u, 1000), 0);
	cr_assert_eq(ah_txn_commit(t), 0);

	for (unsigned i = 0; i < N; i++)
		u[i].time = 2;
	uint64_t inj0 = io_fault_injected();
	io_fault_arm(1, 1u << IO_FDATASYNC, EIO);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_append(t, "a", 2, 4, u, N), 0);
	/* the flusher ran during the append, or runs now: wait for it */
	for (int i = 0; i < 10000 && io_fault_injected() == inj0; i++)
		usleep(1000);
	cr_assert_eq(io_fault_injected(), inj0 + 1, "the flusher never ran");
	io_fault_arm(0, 0, 0);
	cr_assert_eq(ah_txn_commit(t), AH_EIO);

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &ai), 0);
	cr_assert_eq(ai.updates, 1000, "the failed append left %llu updates",
	             (unsigned long long)ai.updates);
	cr_assert_eq(ai.upper, 2);
	ah_txn_abort(t);
	ah_txn *w = NULL;
	cr_assert_eq(ah_txn_begin(h, 0, &w), AH_EIO, "the handle goes on");
	cr_assert_null(w);
	cr_assert_eq(ah_sync(h), AH_EIO);
	cr_assert_eq(ah_close(h), 0);
	o.flags = 0;
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0, "the reopened handle refuses");
	cr_assert_eq(ah_append(t, "a", 2, 4, u, N), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "a", &ai), 0);
	cr_assert_eq(ai.updates, 1000 + N);
	cr_assert_eq(ai.upper, 4);
	ah_txn_abort(t);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ah_sync (heap_sync) runs msync on LMDB's descriptor too: an error it
 * takes may be about the writes of a write txn open beside it, whose
 * commit's msync would then not see it.  So that commit fails; and since
 * the kernel reports the error once, the failure is sticky: a second
 * sync says the same (not 0), no write txn begins, reads go on, and a
 * reopened handle writes again. */
static void failed_sync_case(unsigned flags, int err, int want)
{
	tl_dir d = tl_tmpdir("flush");
	heap *h = open_heap(&d, flags);
	heap_txn *t;

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	uint64_t base = ht_put_chunk(t, 100000, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_sync(h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	uint64_t id = ht_put_chunk(t, 100000, SEED + 1);
	cr_assert_neq(id, 0);
	io_fault_arm(1, 1u << IO_MSYNC, err);
	cr_assert_eq(heap_sync(h), want);
	io_fault_arm(0, 0, 0);
	int rc = heap_txn_commit(t);
	cr_assert_eq(rc, AH_EIO, "the commit after a failed sync returned %d", rc);
	cr_assert_eq(heap_sync(h), want, "a second sync forgot the failure");
	heap_txn *w = NULL;
	cr_assert_eq(heap_txn_begin(h, false, &w), AH_EIO);
	cr_assert_null(w);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0, "reads stop");
	cr_assert_eq(ht_count_chunks(t), 1);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);

	h = open_heap(&d, flags);
	cr_assert_eq(heap_sync(h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 1);
	const void *body;
	size_t used;
	cr_assert_eq(heap_chunk_get(t, base, &body, &used), 0);
	cr_assert(used == 100000 && ht_same(body, used, SEED, base));
	heap_txn_abort(t);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	(void)ht_put_chunk(t, 100000, SEED + 2);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_sync(h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 2);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(flush, a_failed_sync_fails_the_open_txn_and_sticks, .timeout = 60)
{
	failed_sync_case(0, EIO, AH_EIO);
}

Test(flush, a_failed_sync_of_a_nosync_heap_sticks, .timeout = 60)
{
	failed_sync_case(AH_OPEN_NOSYNC, ENOSPC, AH_EFULL);
}

/* The flusher blocks every signal: started from a thread that takes
 * SIGUSR1, it leaves the signal to that thread (usr1.h). */
Test(flush, thread_takes_no_signal, .timeout = 60)
{
	tl_dir d = tl_tmpdir("flush");
	heap *h = open_heap(&d, 0);
	heap_txn *t;

	/* Chunks under 64 KiB are written by the writer itself, so the
	 * flusher is started from this thread, which takes SIGUSR1. */
	usr1_install();
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (unsigned i = 0; i < 600; i++)
		(void)ht_put_chunk(t, 60000, SEED + i);
	wait_flushes(h, 1); /* started, and has run */
	usr1_only_here();
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* A commit's sync and ah_sync's never run at once: of two msyncs of
 * LMDB's descriptor at once, one could take the other's writeback error,
 * and a commit whose own msync then said 0 wrote its meta page over data
 * that never reached the disk (an outside test: a commit acknowledged
 * while a concurrent ah_sync failed, AH_ECORRUPT after a remount).  Every
 * msync is slowed by 2 ms; one thread commits, another syncs in a loop;
 * no msync may begin while another is in flight. */
typedef struct syncer_arg {
	heap *h;
	atomic_int stop;
	uint64_t syncs;
	int bad;
} syncer_arg;

static void *syncer(void *p)
{
	syncer_arg *a = p;

	while (!atomic_load(&a->stop)) {
		int rc = heap_sync(a->h);
		if (rc != 0)
			a->bad = rc;
		a->syncs++;
	}
	return NULL;
}

Test(flush, a_sync_never_runs_during_a_commit, .timeout = 120)
{
	tl_dir d = tl_tmpdir("flush");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	syncer_arg a = { .h = h };
	pthread_t th;
	uint64_t o0 = io_msync_msync_overlaps();

	printf("flush/a_sync_never_runs_during_a_commit: seed %u\n", SEED);
	io_msync_delay(2000);
	cr_assert_eq(pthread_create(&th, NULL, syncer, &a), 0);
	for (unsigned i = 0; i < 40; i++) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		(void)ht_put_chunk(t, 100000, SEED + i);
		cr_assert_eq(heap_txn_commit(t), 0, "commit %u", i);
	}
	atomic_store(&a.stop, 1);
	pthread_join(th, NULL);
	io_msync_delay(0);
	cr_log_info("flush: 40 commits beside %" PRIu64 " syncs", a.syncs);
	cr_assert_eq(a.bad, 0, "a sync failed: %d", a.bad);
	cr_assert_gt(a.syncs, 0);
	cr_assert_eq(io_msync_msync_overlaps(), o0,
	             "%" PRIu64 " msyncs began while another was in flight",
	             io_msync_msync_overlaps() - o0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 40);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
