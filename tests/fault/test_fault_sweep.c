/*
 * tests/fault/test_fault_sweep.c - fault-injection sweeps (issue 7): an
 * append-merge-commit sequence over three arrangements (tiny merge quantum,
 * since + ah_maintain, a source position) is run with the Nth pool
 * allocation, the Nth LMDB call, or the Nth write/sync/fallocate failing,
 * for N = 1, 2, 3, ... until the sequence succeeds.  After each failure:
 * a clean AH_E* code, the txn poisoned (further mutations AH_EBADTXN,
 * commit AH_EBADTXN), no pool block live, the heap closes, reopens, verifies
 * and holds exactly the previous commit.  (A failed msync of the meta page
 * at commit is the one ambiguous case: LMDB has already written the new
 * meta into the map, so the commit may be there after reopen; then it must
 * be exactly the new state.)  Leaks are ASan's part (make asan).
 */
#include <criterion/criterion.h>
#include <errno.h>

#include "heap/fault.h"
#include "heap/heap.h"
#include "heap/pool.h"
#include "interpose.h"
#include "txn/txn.h" /* ah_heap->h: the pool behind a public handle */
#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_run.h"

#define QUANTUM 16
#define NARR 3

static const char *const arr[NARR] = { "a0", "a1", "a2" };

/* The base heap: three arrangements with a few batches each. */
static void make_base(const char *path)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 4 * TL_MiB, QUANTUM);
	ah_heap *h;
	ah_txn *t;
	ah_update ups[30];
	char keys[30][8];

	cr_assert_eq(ah_open(path, &o, &h), 0);
	for (uint64_t c = 0; c < 3; c++) {
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		for (int a = 0; a < NARR; a++) {
			if (c == 0)
				cr_assert_eq(ah_arrangement_create(t, arr[a]), 0);
			for (int i = 0; i < 30; i++) {
				snprintf(keys[i], sizeof keys[i], "k%03d",
				         (i * 7 + (int)c * 3 + a) % 50);
				ups[i] = (ah_update){ keys[i], 4, "v", 1, c,
				                      (i % 3) ? 1 : -1 };
			}
			cr_assert_eq(ah_append(t, arr[a], c, c + 1, ups, 30), 0);
		}
		cr_assert_eq(ah_txn_commit(t), 0);
	}
	cr_assert_eq(ah_close(h), 0);
}

enum { ST_BEGIN, ST_MUTATE, ST_COMMIT };

/* The sequence under test, on an open heap.  Returns 0, or the first error
 * with *stage saying where it happened; a txn that failed in ST_MUTATE is
 * left in *left for the caller's poisoning checks. */
static int sequence(ah_heap *h, int *stage, ah_txn **left)
{
	ah_txn *t = NULL;
	ah_update ups[40];
	char keys[40][8];
	uint64_t model = 2;
	int rc, idle;

	*left = NULL;
	*stage = ST_BEGIN;
	if ((rc = ah_txn_begin(h, 0, &t)) != 0)
		return rc;
	*stage = ST_MUTATE;
	for (uint64_t r = 0; r < 3; r++)
		for (int a = 0; a < NARR; a++) {
			uint64_t u = 3 + r;

			for (int i = 0; i < 40; i++) {
				snprintf(keys[i], sizeof keys[i], "k%03d",
				         (i * 11 + (int)r + a) % 60);
				ups[i] = (ah_update){ keys[i], 4, "w", 1, u,
				                      (i % 4) ? 1 : -1 };
			}
			if ((rc = ah_append(t, arr[a], u, u + 1, ups, 40)))
				goto fail;
		}
	/* Every arrangement's upper is 6 now. */
	if ((rc = ah_set_since(t, "a0", 4)) != 0 ||
	    (rc = ah_set_since(t, "a2", 5)) != 0 ||
	    (rc = ah_maintain(t, "a0", 0, &idle)) != 0 ||
	    (rc = ah_maintain(t, "a2", 25, &idle)) != 0 ||
	    (rc = ah_source_put(t, "model", &model, sizeof model)) != 0)
		goto fail;
	*stage = ST_COMMIT;
	return ah_txn_commit(t);
fail:
	*left = t;
	return rc;
}

typedef struct sweep {
	tl_dir d;
	char base[160];
	tl_state s0, s1;   /* before and after the sequence */
	uint64_t faults, at_commit_new, pool_live_max;
} sweep;

static void sweep_setup(sweep *s)
{
	ah_open_opts o = tl_opts(0, 4 * TL_MiB, QUANTUM);
	ah_heap *h;
	ah_txn *left;
	int stage;

	s->d = tl_tmpdir("fault");
	snprintf(s->base, sizeof s->base, "%s/base", s->d.dir);
	make_base(s->base);
	cr_assert_eq(tl_copy(s->base, s->d.path), 0);
	cr_assert_eq(ah_open(s->d.path, &o, &h), 0);
	cr_assert_eq(tl_state_hash(h, 1, &s->s0), 0);
	cr_assert_eq(sequence(h, &stage, &left), 0);
	cr_assert_eq(tl_state_hash(h, 1, &s->s1), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_neq(s->s0.hash, s->s1.hash);
	cr_assert_eq(s->s1.model, 2);
	cr_assert_eq(tl_copy(s->base, s->d.path), 0);
}

/* Checks after a failed run: clean code, poisoning, pool, reopen, state.
 * new_ok: the new state is acceptable too (a sync fault at commit). */
static void after_failure(sweep *s, ah_heap *h, uint64_t n, int rc, int stage,
                          ah_txn *left, bool new_ok)
{
	ah_open_opts o = tl_opts(0, 4 * TL_MiB, QUANTUM);
	tl_state st;
	uint64_t live = 0;
	int vrc;

	cr_assert_not_null(ah_err_name(rc), "N=%" PRIu64 ": %d is no AH_E* code",
	                   n, rc);
	if (stage == ST_MUTATE) {
		cr_assert_not_null(left);
		cr_assert_eq(ah_append(left, "a1", 0, 1, NULL, 0), AH_EBADTXN,
		             "N=%" PRIu64 ": txn not poisoned after %s", n,
		             ah_err_name(rc));
		cr_assert_eq(ah_set_since(left, "a1", 0), AH_EBADTXN);
		cr_assert_eq(ah_source_put(left, "x", "y", 1), AH_EBADTXN);
		if (n % 2)
			cr_assert_eq(ah_txn_commit(left), AH_EBADTXN);
		else
			ah_txn_abort(left);
	}
	if (h != NULL) {
		pool_counts(heap_pool(h->h), NULL, NULL, &live);
		if (live > s->pool_live_max)
			s->pool_live_max = live;
		cr_assert_eq(live, 0, "N=%" PRIu64 ": %" PRIu64
		             " pool blocks live after %s", n, live,
		             ah_err_name(rc));
		cr_assert_eq(ah_close(h), 0);
	}
	cr_assert_eq(ah_open(s->d.path, &o, &h), 0,
	             "N=%" PRIu64 ": reopen after %s", n, ah_err_name(rc));
	vrc = tl_verify(h, NULL);
	cr_assert_eq(vrc, 0, "N=%" PRIu64 ": verify: %s", n, ah_err_name(vrc));
	cr_assert_eq(tl_state_hash(h, 1, &st), 0);
	if (new_ok && st.hash == s->s1.hash)
		s->at_commit_new++;
	else
		cr_assert_eq(st.hash, s->s0.hash,
		             "N=%" PRIu64 " (%s at stage %d): state is neither "
		             "the previous commit%s", n, ah_err_name(rc), stage,
		             new_ok ? " nor the new one" : "");
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(tl_copy(s->base, s->d.path), 0);
}

static uint64_t sweep_limit(void)
{
	return tl_torture() ? 200000 : 20000;
}

Test(fault, pool_alloc_sweep, .timeout = 120)
{
	sweep s = { 0 };
	ah_open_opts o = tl_opts(0, 4 * TL_MiB, QUANTUM);
	uint64_t n;

	sweep_setup(&s);
	for (n = 1; n < sweep_limit(); n++) {
		ah_heap *h;
		ah_txn *left;
		int stage, rc;

		cr_assert_eq(ah_open(s.d.path, &o, &h), 0);
		pool_inject_failure(heap_pool(h->h), n);
		rc = sequence(h, &stage, &left);
		pool_inject_failure(heap_pool(h->h), 0);
		if (rc == 0) {
			tl_state st;

			cr_assert_eq(tl_state_hash(h, 1, &st), 0);
			cr_assert_eq(st.hash, s.s1.hash);
			cr_assert_eq(ah_close(h), 0);
			break;
		}
		cr_assert(rc == AH_ENOMEM, "N=%" PRIu64 ": %s at stage %d", n,
		          ah_err_name(rc), stage);
		s.faults++;
		after_failure(&s, h, n, rc, stage, left, false);
	}
	cr_assert_lt(n, sweep_limit(), "the sequence never succeeded");
	cr_assert_gt(s.faults, 10);
	cr_log_info("fault/pool_alloc_sweep: %" PRIu64 " allocation faults "
	            "injected, all clean", s.faults);
	printf("fault/pool_alloc_sweep: %" PRIu64 " faults\n", s.faults);
	tl_rmdir(&s.d);
}

static const int mdb_codes[] = { EIO, MDB_MAP_FULL, MDB_PANIC, ENOMEM,
                                 MDB_CORRUPTED, ENOSPC };

/* The sweep over LMDB calls includes the open. */
Test(fault, lmdb_call_sweep, .timeout = 120)
{
	sweep s = { 0 };
	ah_open_opts o = tl_opts(0, 4 * TL_MiB, QUANTUM);
	uint64_t n, open_faults = 0;

	sweep_setup(&s);
	for (n = 1; n < sweep_limit(); n++) {
		ah_heap *h = NULL;
		ah_txn *left = NULL;
		int stage = ST_BEGIN, rc;
		int code = mdb_codes[n % (sizeof mdb_codes / sizeof *mdb_codes)];
		uint64_t size, before = tl_file_hash(s.d.path, &size), after;

		heap_fault_mdb_arm(n, code);
		rc = ah_open(s.d.path, &o, &h);
		if (rc != 0) {
			heap_fault_mdb_arm(0, 0);
			cr_assert_not_null(ah_err_name(rc));
			after = tl_file_hash(s.d.path, &size);
			cr_assert_eq(after, before,
			             "N=%" PRIu64 ": a failed open changed the file",
			             n);
			open_faults++;
			s.faults++;
			after_failure(&s, NULL, n, rc, ST_BEGIN, NULL, false);
			continue;
		}
		rc = sequence(h, &stage, &left);
		heap_fault_mdb_arm(0, 0);
		if (rc == 0) {
			tl_state st;

			cr_assert_eq(tl_state_hash(h, 1, &st), 0);
			cr_assert_eq(st.hash, s.s1.hash);
			cr_assert_eq(ah_close(h), 0);
			break;
		}
		s.faults++;
		after_failure(&s, h, n, rc, stage, left, false);
	}
	cr_assert_lt(n, sweep_limit(), "the sequence never succeeded");
	cr_assert_gt(open_faults, 3);
	printf("fault/lmdb_call_sweep: %" PRIu64 " faults (%" PRIu64
	       " in open), %" PRIu64 " injected\n", s.faults, open_faults,
	       heap_fault_mdb_injected());
	cr_assert_eq(heap_fault_mdb_injected(), s.faults);
	tl_rmdir(&s.d);
}

#define IO_ALL                                                                 \
	((1u << IO_MSYNC) | (1u << IO_FDATASYNC) | (1u << IO_FSYNC) |          \
	 (1u << IO_PWRITE) | (1u << IO_FALLOCATE))

/* Proves that the interposition really sees LMDB's and space.c's calls. */
Test(fault, interposition_counts)
{
	tl_dir d;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 4 * TL_MiB, QUANTUM);
	ah_heap *h;
	ah_txn *t;
	uint64_t ms, pw, fa, fd;

	d = tl_tmpdir("fault");
	ms = io_calls(IO_MSYNC);
	fd = io_calls(IO_FDATASYNC) + io_calls(IO_FSYNC);
	pw = io_calls(IO_PWRITE);
	fa = io_calls(IO_FALLOCATE);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_gt(io_calls(IO_PWRITE), pw, "LMDB's pwrite of the new metas");
	cr_assert_gt(io_calls(IO_FALLOCATE), fa, "space.c's fallocate");
	cr_assert_gt(io_calls(IO_MSYNC) + io_calls(IO_FDATASYNC) +
	             io_calls(IO_FSYNC), ms + fd, "LMDB's sync of the new heap");
	ms = io_calls(IO_MSYNC);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "x"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(io_calls(IO_MSYNC), ms + 2, "data sync + meta sync");
	/* A failed data sync fails the commit, writes nothing, and is
	 * sticky: no write txn begins, ah_sync says AH_EIO, reads go on. */
	io_fault_arm(1, 1u << IO_MSYNC, EIO);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "y"), 0);
	cr_assert_eq(ah_txn_commit(t), AH_EIO);
	io_fault_arm(0, 0, 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), AH_EIO);
	cr_assert_eq(ah_sync(h), AH_EIO);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	{
		ah_arrangement_info in;

		cr_assert_eq(ah_arrangement_info_get(t, "y", &in), AH_ENOTFOUND);
	}
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "y"), 0);
	io_fault_arm(2, 1u << IO_MSYNC, EIO);
	/* A failed meta sync: LMDB wrote the meta into the map already, so
	 * the commit is visible after reopen although it reported AH_EIO;
	 * the handle is dead (LMDB's MDB_FATAL_ERROR) until reopened. */
	cr_assert_eq(ah_txn_commit(t), AH_EIO);
	io_fault_arm(0, 0, 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), AH_EIO);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	{
		ah_arrangement_info in;

		cr_assert_eq(ah_arrangement_info_get(t, "x", &in), 0);
		cr_assert_eq(ah_arrangement_info_get(t, "y", &in), 0);
	}
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* A commit whose data sync fails may have lost more than its own pages:
 * on an AH_OPEN_NOMETASYNC heap that msync also carried the unsynced meta
 * page of the commit before it (an outside test: that acknowledged commit
 * was gone after a remount although a later ah_sync said 0).  So the
 * failure is sticky in every mode that syncs at commit: ah_sync says
 * AH_EIO, no write txn begins, reads go on; reopened, the heap holds
 * exactly the commit before, and writes again. */
static void failed_commit_sync_case(unsigned flags)
{
	tl_dir d = tl_tmpdir("fault");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | flags, 4 * TL_MiB, QUANTUM);
	ah_arrangement_info in;
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "x"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "y"), 0);
	io_fault_arm(1, 1u << IO_MSYNC, EIO); /* the commit's data sync */
	cr_assert_eq(ah_txn_commit(t), AH_EIO);
	io_fault_arm(0, 0, 0);
	cr_assert_eq(ah_sync(h), AH_EIO, "ah_sync forgot the commit's failure");
	cr_assert_eq(ah_sync(h), AH_EIO);
	cr_assert_eq(ah_txn_begin(h, 0, &t), AH_EIO);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0, "reads stop");
	cr_assert_eq(ah_arrangement_info_get(t, "x", &in), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "y", &in), AH_ENOTFOUND);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(ah_sync(h), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "x", &in), 0);
	cr_assert_eq(ah_arrangement_info_get(t, "y", &in), AH_ENOTFOUND);
	cr_assert_eq(ah_arrangement_create(t, "y"), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

Test(fault, a_failed_commit_sync_sticks)
{
	failed_commit_sync_case(0);
}

Test(fault, a_failed_commit_sync_sticks_nometasync)
{
	failed_commit_sync_case(AH_OPEN_NOMETASYNC);
}

Test(fault, io_sweep, .timeout = 120)
{
	sweep s = { 0 };
	ah_open_opts o = tl_opts(0, 4 * TL_MiB, QUANTUM);
	uint64_t n, open_faults = 0, inj0 = io_fault_injected();

	sweep_setup(&s);
	for (n = 1; n < sweep_limit(); n++) {
		ah_heap *h = NULL;
		ah_txn *left = NULL;
		int stage = ST_BEGIN, rc, err = (n % 2) ? EIO : ENOSPC;
		uint64_t size, before = tl_file_hash(s.d.path, &size);

		io_fault_arm(n, IO_ALL, err);
		rc = ah_open(s.d.path, &o, &h);
		if (rc != 0) {
			io_fault_arm(0, 0, 0);
			cr_assert_not_null(ah_err_name(rc));
			cr_assert_eq(tl_file_hash(s.d.path, &size), before);
			open_faults++;
			s.faults++;
			after_failure(&s, NULL, n, rc, ST_BEGIN, NULL, false);
			continue;
		}
		rc = sequence(h, &stage, &left);
		io_fault_arm(0, 0, 0);
		if (rc == 0 && io_fault_injected() - inj0 == s.faults) {
			tl_state st;

			cr_assert_eq(tl_state_hash(h, 1, &st), 0);
			cr_assert_eq(st.hash, s.s1.hash);
			cr_assert_eq(ah_close(h), 0);
			break;
		}
		s.faults++;
		if (rc == 0) {
			/* The fault hit a call whose failure LMDB ignores. */
			cr_assert_eq(ah_close(h), 0);
			cr_assert_eq(tl_copy(s.base, s.d.path), 0);
			continue;
		}
		cr_assert(rc == AH_EIO || rc == AH_EFULL,
		          "N=%" PRIu64 ": %s", n, ah_err_name(rc));
		after_failure(&s, h, n, rc, stage, left, stage == ST_COMMIT);
	}
	cr_assert_lt(n, sweep_limit(), "the sequence never succeeded");
	cr_assert_gt(s.faults, 2);
	printf("fault/io_sweep: %" PRIu64 " faults (%" PRIu64 " in open, %"
	       PRIu64 " commits found done after a failed meta sync)\n",
	       s.faults, open_faults, s.at_commit_new);
	tl_rmdir(&s.d);
}

/* Creating a heap under LMDB-call faults: every failure leaves nothing (or
 * an unborn file that AH_OPEN_CREATE finishes), never a half heap. */
Test(fault, create_sweep, .timeout = 60)
{
	tl_dir d;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 4 * TL_MiB, QUANTUM);
	uint64_t n, faults = 0;

	d = tl_tmpdir("fault");
	for (n = 1; n < 1000; n++) {
		ah_heap *h = NULL;
		tl_state st;
		int rc;

		heap_fault_mdb_arm(n, mdb_codes[n % 3]);
		rc = ah_open(d.path, &o, &h);
		heap_fault_mdb_arm(0, 0);
		if (rc == 0) {
			cr_assert_eq(ah_close(h), 0);
			break;
		}
		faults++;
		cr_assert_not_null(ah_err_name(rc));
		cr_assert_eq(ah_open(d.path, &o, &h), 0,
		             "N=%" PRIu64 ": create after a failed create", n);
		cr_assert_eq(tl_state_hash(h, 1, &st), 0);
		cr_assert_eq(st.narr, 0);
		cr_assert_eq(ah_close(h), 0);
		unlink(d.path);
	}
	for (n = 1; n < 1000; n++) {
		ah_heap *h = NULL;
		int rc;

		io_fault_arm(n, IO_ALL, (n % 2) ? EIO : ENOSPC);
		rc = ah_open(d.path, &o, &h);
		io_fault_arm(0, 0, 0);
		if (rc == 0) {
			cr_assert_eq(ah_close(h), 0);
			unlink(d.path);
			if (n > 3 && io_fault_seen() < n)
				break;
			continue;
		}
		faults++;
		cr_assert_not_null(ah_err_name(rc));
		cr_assert_eq(ah_open(d.path, &o, &h), 0,
		             "N=%" PRIu64 ": create after a failed create (%s)",
		             n, ah_err_name(rc));
		cr_assert_eq(ah_close(h), 0);
		unlink(d.path);
	}
	printf("fault/create_sweep: %" PRIu64 " faults\n", faults);
	tl_rmdir(&d);
}
