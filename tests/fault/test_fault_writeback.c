/*
 * tests/fault/test_fault_writeback.c - the writeback thread
 * (heap/chunk_writeback.c): a regular chunk of 64 KiB or more is finished
 * and written by a thread of the handle after heap_chunk_seal returns.
 * Each test tries to catch a chunk whose write is still in flight:
 * - read back at once in its own txn (open, get, verify, the chunk cursor)
 *   and freed at once (LMDB reuses the pages in the same txn): exact bytes;
 * - the txn aborted or committed right after the seal, and the pages used
 *   again by the next txn: exact bytes after reopen;
 * - the Nth pwrite fails (EIO, ENOSPC), for every N: the error reaches the
 *   caller (a later seal, a read of the chunk, or the commit; never a
 *   commit that returns 0), and the file holds exactly the last committed
 *   state.
 * Seeds are fixed and printed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <unistd.h>

#include "heap/heap.h"
#include "interpose.h"
#include "usr1.h"
#include "tests/unit/heap/heap_test.h"

#define SEED 20261204u

/* Sizes from below the thread's threshold to the largest regular class. */
static const size_t sizes[] = { 70000, 1000, 1040000, 300000, 65536,
                                500000, 200, 1030000 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void expect_chunk(heap_txn *t, uint64_t id, size_t n, uint64_t seed)
{
	const void *body;
	size_t used;

	cr_assert_eq(heap_chunk_get(t, id, &body, &used), 0, "chunk %" PRIu64, id);
	cr_assert_eq(used, n);
	cr_assert(ht_same(body, n, seed, id), "chunk %" PRIu64 " bytes", id);
	cr_assert_eq(heap_chunk_verify(t, id), 0, "chunk %" PRIu64 " sums", id);
}

static heap *open_heap(tl_dir *d, unsigned flags)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | flags, 256 * MiB, 0);
	heap *h;

	cr_assert_eq(heap_open(d->path, &o, &h), 0);
	return h;
}

Test(writeback, read_and_freed_in_their_own_txn, .timeout = 60)
{
	tl_dir d = tl_tmpdir("wb");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	uint64_t ids[NSIZES], spare;

	uint64_t off0 = io_calls_off_main(IO_PWRITE);

	printf("writeback/read_and_freed_in_their_own_txn: seed %u\n", SEED);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (size_t i = 0; i < NSIZES; i++) {
		ids[i] = ht_put_chunk(t, sizes[i], SEED);
		/* read at once: the write may still be in flight */
		expect_chunk(t, ids[i], sizes[i], SEED);
	}
	/* the chunk cursor of the same txn sees every one, sound */
	cr_assert_eq(ht_count_chunks(t), NSIZES);
	/* freed right after its seal: LMDB hands its pages to the next put
	 * of this txn, which must not meet the first write landing late */
	spare = ht_put_chunk(t, 1040000, SEED + 1);
	cr_assert_eq(heap_chunk_free(t, spare), 0);
	spare = ht_put_chunk(t, 1040000, SEED + 2);
	expect_chunk(t, spare, 1040000, SEED + 2);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	/* the six chunks of 64 KiB and more, and the two spares, were
	 * written by the thread; the two small ones by the writer */
	cr_assert_eq(io_calls_off_main(IO_PWRITE) - off0, 8, "%llu off main",
	             (unsigned long long)(io_calls_off_main(IO_PWRITE) - off0));

	h = open_heap(&d, 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	for (size_t i = 0; i < NSIZES; i++)
		expect_chunk(t, ids[i], sizes[i], SEED);
	expect_chunk(t, spare, 1040000, SEED + 2);
	cr_assert_eq(ht_count_chunks(t), NSIZES + 1);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* A txn ends right after a seal, 40 times over, alternately aborted and
 * committed.  After each abort the next txn at once writes 60 small chunks
 * (written by the writer itself, with no wait for the thread), whose
 * values and B-tree pages LMDB takes from the aborted txn's pages: a
 * write of the aborted txn landing late would overwrite them. */
Test(writeback, txn_ends_with_a_write_in_flight, .timeout = 120)
{
	tl_dir d = tl_tmpdir("wb");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	enum { SMALL = 60 };
	uint64_t kept[20], small[20][SMALL];
	unsigned nkept = 0, nsmall = 0;

	printf("writeback/txn_ends_with_a_write_in_flight: seed %u\n", SEED);
	for (unsigned r = 0; r < 40; r++) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		uint64_t id = ht_put_chunk(t, 1040000, SEED + r);
		if (r % 2 == 0) {
			heap_txn_abort(t);
			cr_assert_eq(heap_txn_begin(h, false, &t), 0);
			for (unsigned i = 0; i < SMALL; i++)
				small[nsmall][i] = ht_put_chunk(t, 3000 + 7 * i,
				                                SEED + 1000 * r + i);
			cr_assert_eq(heap_txn_commit(t), 0);
			nsmall++;
			continue;
		}
		cr_assert_eq(heap_txn_commit(t), 0);
		kept[nkept++] = id;
	}
	/* closed right after a seal of an aborted txn */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	(void)ht_put_chunk(t, 1040000, SEED);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);

	h = open_heap(&d, 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), nkept + nsmall * SMALL);
	for (unsigned i = 0; i < nkept; i++)
		expect_chunk(t, kept[i], 1040000, SEED + 2 * i + 1);
	for (unsigned r = 0; r < nsmall; r++)
		for (unsigned i = 0; i < SMALL; i++)
			expect_chunk(t, small[r][i], 3000 + 7 * i,
			             SEED + 1000 * (2 * r) + i);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* The Nth pwrite of a txn writing eight chunks fails, N = 1, 2, ... until
 * a round sees no fault.  Whatever returns the error, the commit never
 * returns 0 after one, and the file is the committed base. */
Test(writeback, every_failed_write_is_reported, .timeout = 300)
{
	tl_dir d = tl_tmpdir("wb");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	uint64_t base_id, n, faults = 0;

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	base_id = ht_put_chunk(t, 500000, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);

	for (n = 1; n < 100; n++) {
		int err = n % 2 ? EIO : ENOSPC, rc = 0, want = n % 2 ? AH_EIO : AH_EFULL;
		uint64_t inj = io_fault_injected();

		h = open_heap(&d, 0);
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		io_fault_arm(n, 1u << IO_PWRITE, err);
		for (size_t i = 0; i < NSIZES && rc == 0; i++) {
			uint64_t id = 0;
			void *body = NULL;

			rc = heap_chunk_reserve(t, sizes[i], &id, &body, NULL);
			if (rc == 0) {
				ht_fill(body, sizes[i], SEED + n, id);
				rc = heap_chunk_seal(t, id, body, sizes[i]);
			}
			/* a read of the chunk just sealed waits for its write */
			if (rc == 0 && i % 3 == 2) {
				const void *b;
				size_t used;

				rc = heap_chunk_get(t, id, &b, &used);
				if (rc == 0)
					cr_assert(ht_same(b, sizes[i], SEED + n, id));
			}
		}
		if (rc == 0)
			rc = heap_txn_commit(t);
		else
			heap_txn_abort(t);
		io_fault_arm(0, 0, 0);
		if (io_fault_injected() == inj) {
			cr_assert_eq(rc, 0, "N=%" PRIu64 ": %s", n, ah_err_name(rc));
			cr_assert_eq(heap_close(h), 0);
			break;
		}
		faults++;
		cr_assert_eq(rc, want, "N=%" PRIu64 ": %s, not %s", n,
		             ah_err_name(rc), ah_err_name(want));
		cr_assert_eq(heap_close(h), 0);
		/* nothing of the failed txn: only the base chunk */
		h = open_heap(&d, 0);
		cr_assert_eq(heap_txn_begin(h, true, &t), 0);
		cr_assert_eq(ht_count_chunks(t), 1, "N=%" PRIu64, n);
		expect_chunk(t, base_id, 500000, SEED);
		heap_txn_abort(t);
		cr_assert_eq(heap_close(h), 0);
	}
	cr_assert_lt(n, 100, "the txn never succeeded");
	/* every chunk's one pwrite was failed once, in the thread or not */
	cr_assert_eq(faults, NSIZES, "%llu faults", (unsigned long long)faults);
	printf("writeback/every_failed_write_is_reported: %" PRIu64 " faults\n",
	       faults);
	tl_rmdir(&d);
}

/* The thread takes no signals (header Caveats): started from a thread
 * that takes SIGUSR1, it leaves the signal to that thread (usr1.h). */
Test(writeback, thread_takes_no_signal, .timeout = 60)
{
	tl_dir d = tl_tmpdir("wb");
	heap *h = open_heap(&d, 0);
	heap_txn *t;
	uint64_t off0 = io_calls_off_main(IO_PWRITE);

	usr1_install();
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 4; i++) /* the thread is started and has run */
		(void)ht_put_chunk(t, 1040000, SEED + (uint64_t)i);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_geq(io_calls_off_main(IO_PWRITE) - off0, 4);
	usr1_only_here();
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
