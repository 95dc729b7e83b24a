/*
 * tests/unit/heap/test_heap_basic.c - the heap layer's ordinary life:
 * chunks round-trip through close and reopen, size classes and their
 * boundaries, checksums catch a flipped byte, tables, poisoning, and the
 * process rules (same file twice -> AH_EBUSY, forked child -> AH_EFORK).
 */
#include <signal.h>
#include <sys/wait.h>

#include "heap_test.h"

#define SEED 20240601u

Test(heap_basic, roundtrip_reopen)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 256 * MiB, 0);
	uint64_t rs = SEED, ids[60];
	size_t sizes[60];
	int i;

	cr_log_info("seed %u", SEED);
	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	for (i = 0; i < 60; i++) {
		if (i % 10 == 0)
			cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		sizes[i] = (size_t)(tl_rand(&rs) % (3 * MiB));
		ids[i] = ht_put_chunk(t, sizes[i], SEED);
		cr_assert_eq(ids[i], (uint64_t)i + 1);
		if (i % 10 == 9)
			cr_assert_eq(heap_txn_commit(t), 0);
	}
	cr_assert_eq(heap_close(h), 0);

	o.flags = AH_OPEN_VERIFY_READS;
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 60);
	for (i = 0; i < 60; i++) {
		const void *body;
		size_t used;

		cr_assert_eq(heap_chunk_get(t, ids[i], &body, &used), 0);
		cr_assert_eq(used, sizes[i]);
		cr_assert_eq((uintptr_t)body % 16, 0);
		cr_assert(ht_same(body, used, SEED, ids[i]), "chunk %d", i);
		cr_assert_eq(heap_chunk_verify(t, ids[i]), 0);
	}
	cr_assert_eq(heap_chunk_get(t, 61, &(const void *){ NULL }, NULL),
	             AH_ENOTFOUND);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_basic, size_classes)
{
	static const uint32_t cls[] = { 1, 4, 16, 64, 256 };
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 256 * MiB, 0);
	uint32_t ps;
	heap_chunk_info ci;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	/* Header before the body (chunk.c): 40 bytes and one u32 per 1 KiB
	 * block after the first (4 per 4 KiB page), rounded up to 16; jumbo
	 * chunks have no block sums (48). */
	static const size_t hdr[] = { 64, 112, 304, 1072, 4144 };
	ps = heap_page_size(h);
	cr_assert_eq(ps, 4096, "the header sizes above are for 4 KiB pages");
	cr_assert_eq(heap_chunk_max_body(h), (size_t)256 * ps - 16 - 4144);
	cr_assert_eq(heap_chunk_fit(h, 0), (size_t)ps - 16 - 64);
	cr_assert_eq(heap_chunk_stored(h, 0), (size_t)ps - 16);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int c = 0; c < 5; c++) {
		size_t cap = (size_t)cls[c] * ps - 16 - hdr[c];
		size_t sz[3] = { cap - 1, cap, cap + 1 };
		uint32_t want[3] = { cls[c], cls[c],
		                     c < 4 ? cls[c + 1] : 512 };
		size_t whdr[3] = { hdr[c], hdr[c], c < 4 ? hdr[c + 1] : 48 };

		for (int k = 0; k < 3; k++) {
			uint64_t id = ht_put_chunk(t, sz[k], SEED);

			cr_assert_eq(heap_chunk_fit(h, sz[k]),
			             (size_t)want[k] * ps - 16 - whdr[k]);
			cr_assert_eq(heap_chunk_stored(h, sz[k]),
			             (size_t)want[k] * ps - 16);
			cr_assert_eq(heap_chunk_next(t, id - 1, false, &ci), 0);
			cr_assert_eq(ci.id, id);
			cr_assert_eq(ci.class_pages, want[k], "size %zu",
			             sz[k]);
			cr_assert_eq(ci.body_used, sz[k]);
		}
	}
	/* Jumbo: whole multiples of 256 pages; LMDB caps a value at 4 GiB-1. */
	cr_assert_eq(heap_chunk_fit(h, (size_t)1000 * ps),
	             (size_t)1024 * ps - 16 - 48);
	cr_assert_eq(heap_chunk_fit(h, (size_t)5 << 30), 0);
	{
		uint64_t id;
		void *body;

		cr_assert_eq(heap_chunk_reserve(t, (size_t)5 << 30, &id, &body,
		                                NULL),
		             AH_ELIMIT);
	}
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 15);
	for (uint64_t id = 1; id <= 15; id++) {
		const void *body;
		size_t used;

		cr_assert_eq(heap_chunk_get(t, id, &body, &used), 0);
		cr_assert(ht_same(body, used, SEED, id), "chunk %lu",
		          (unsigned long)id);
		cr_assert_eq(heap_chunk_verify(t, id), 0);
	}
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_basic, flipped_byte)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 16 * MiB, 0);
	heap_chunk_info ci;
	const void *body;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 3; i++)
		ht_put_chunk(t, 20000, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_next(t, 1, false, &ci), 0);
	cr_assert_eq(ci.id, 2);
	cr_assert_eq(ci.class_pages, 16);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);

	/* A byte in the chunk's third page (value bytes [8176, 12272)). */
	tl_flip(d.path, ci.file_offset + 9000, 0x10);

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_verify(t, 1), 0);
	cr_assert_eq(heap_chunk_verify(t, 2), AH_ECORRUPT);
	cr_assert_eq(heap_chunk_verify(t, 3), 0);
	/* Read whole, the damage is found at once. */
	cr_assert_eq(heap_chunk_get(t, 2, &body, NULL), AH_ECORRUPT);
	cr_assert_eq(heap_chunk_get(t, 3, &body, NULL), 0);
	/* Read page by page, exactly when the damaged page is touched. */
	heap_chunk_view v;
	cr_assert_eq(heap_chunk_open(t, 2, HEAP_CHUNK_PAGES, &v), 0);
	cr_assert_eq(heap_chunk_touch(&v, v.body, 100), 0, "page 0");
	cr_assert_eq(heap_chunk_touch(&v, v.value + 4100, 4000), 0, "page 1");
	cr_assert_eq(heap_chunk_touch(&v, v.value + 9000, 1), AH_ECORRUPT);
	cr_assert_eq(heap_chunk_touch(&v, v.value + 8000, 300), AH_ECORRUPT,
	             "a range that reaches into page 2");
	cr_assert_eq(heap_chunk_touch(&v, v.value + 12300, 10), 0, "page 3");
	cr_assert_eq(heap_chunk_touch(&v, v.value + v.value_bytes - 4, 8),
	             AH_ECORRUPT, "past the end of the chunk");
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);

	/* With VERIFY_READS a page-by-page open checks the whole chunk. */
	o.flags = AH_OPEN_VERIFY_READS;
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 2, HEAP_CHUNK_PAGES, &v), AH_ECORRUPT);
	cr_assert_eq(heap_chunk_open(t, 3, HEAP_CHUNK_PAGES, &v), 0);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_basic, tables_and_poison)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 16 * MiB, 0);
	const void *k, *v;
	size_t kl, vl;
	uint64_t bid = 7;
	char big[10000];

	memset(big, 'x', sizeof big);
	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_put(t, HEAP_T_ARR, "b", 1, "2", 1), 0);
	cr_assert_eq(heap_put(t, HEAP_T_ARR, "a", 1, big, sizeof big), 0);
	cr_assert_eq(heap_put(t, HEAP_T_SOURCE, "kafka", 5, "", 0), 0);
	cr_assert_eq(heap_put(t, HEAP_T_BATCH, &bid, 8, "r", 1), 0);
	cr_assert_eq(heap_put(t, HEAP_T_BATCH, "x", 1, "r", 1), AH_EINVAL);
	cr_assert_eq(heap_txn_commit(t), 0);

	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_put(t, HEAP_T_ARR, "c", 1, "3", 1), AH_EREADONLY);
	cr_assert_eq(heap_get(t, HEAP_T_ARR, "a", 1, &v, &vl), 0);
	cr_assert_eq(vl, sizeof big);
	cr_assert_eq(memcmp(v, big, vl), 0);
	cr_assert_eq(heap_next(t, HEAP_T_ARR, NULL, 0, &k, &kl, &v, &vl), 0);
	cr_assert_eq(kl, 1);
	cr_assert_eq(*(const char *)k, 'a');
	cr_assert_eq(heap_next(t, HEAP_T_ARR, "a", 1, &k, &kl, &v, &vl), 0);
	cr_assert_eq(*(const char *)k, 'b');
	cr_assert_eq(heap_next(t, HEAP_T_ARR, "b", 1, &k, &kl, &v, &vl),
	             AH_ENOTFOUND);
	cr_assert_eq(heap_get(t, HEAP_T_SOURCE, "kafka", 5, &v, &vl), 0);
	cr_assert_eq(vl, 0);
	cr_assert_eq(heap_get(t, HEAP_T_ARR, "zz", 2, &v, &vl), AH_ENOTFOUND);
	cr_assert_eq(heap_txn_commit(t), 0);

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_del(t, HEAP_T_ARR, "zz", 2), AH_ENOTFOUND);
	cr_assert_eq(heap_del(t, HEAP_T_ARR, "a", 1), 0);
	/* A second write txn from the same thread would deadlock in LMDB. */
	{
		heap_txn *t2;

		cr_assert_eq(heap_txn_begin(h, false, &t2), AH_ESTATE);
	}
	cr_assert_eq(heap_close(h), AH_ESTATE);
	cr_assert_eq(heap_set_max_bytes(h, 32 * MiB), AH_ESTATE);
	/* Reserving past max_bytes fails and poisons the txn. */
	{
		uint64_t id;
		void *body;

		cr_assert_eq(heap_chunk_reserve(t, 20 * MiB, &id, &body, NULL),
		             AH_EFULL);
	}
	cr_assert_eq(heap_put(t, HEAP_T_ARR, "c", 1, "3", 1), AH_EBADTXN);
	cr_assert_eq(heap_get(t, HEAP_T_ARR, "b", 1, &v, &vl), AH_EBADTXN);
	cr_assert_eq(heap_txn_commit(t), AH_EBADTXN);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_get(t, HEAP_T_ARR, "a", 1, &v, &vl), 0,
	             "the poisoned delete must not be committed");
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_basic, busy_and_fork)
{
	tl_dir d;
	heap *h, *h2;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 16 * MiB, 0);
	pid_t pid;
	int status;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_open(d.path, &o, &h2), AH_EBUSY);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	ht_put_chunk(t, 100, SEED);
	cr_assert_eq(heap_txn_commit(t), 0);

	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int bad = 0;
		heap *hc;
		ah_heap_stat st;

		bad |= heap_txn_begin(h, true, &t) != AH_EFORK;
		bad |= heap_stat(h, &st) != AH_EFORK;
		bad |= heap_sync(h) != AH_EFORK;
		bad |= heap_close(h) != AH_EFORK;
		/* The child may open the file anew. */
		bad |= heap_open(d.path, &o, &hc) != 0;
		bad |= heap_close(hc) != 0;
		_exit(bad);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(ht_put_chunk(t, 100, SEED), 2);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(heap_open(d.path, &o, &h2), 0);
	cr_assert_eq(heap_close(h2), 0);
	tl_rmdir(&d);
}

Test(heap_basic, errors_and_version)
{
	int ma, mi, pa;

	cr_assert_str_eq(ah_version(&ma, &mi, &pa), AH_VERSION_STRING);
	cr_assert_eq(ma, AH_VERSION_MAJOR);
	cr_assert_eq(mi, AH_VERSION_MINOR);
	cr_assert_eq(pa, AH_VERSION_PATCH);
	cr_assert_str_eq(ah_err_name(AH_EFULL), "AH_EFULL");
	cr_assert_str_eq(ah_err_name(0), "AH_OK");
	cr_assert_null(ah_err_name(-1));
	cr_assert_str_eq(ah_strerror(AH_ECORRUPT),
	                 "heap corrupt: checksum or structure check failed");
	cr_assert_str_eq(ah_strerror(12345), "unknown error");
	cr_assert_str_eq(ah_err_name(AH_ESTATE), "AH_ESTATE");
}

/* The map has no read-around (MDB_NORDAHEAD): opening a chunk page by
 * page from a cold file brings in its first page (header and page sums),
 * not the 256 of its 1 MiB class; touching a byte brings in its page;
 * heap_chunk_prefetch then reads the whole chunk (asynchronously: polled for
 * up to 10 s). */
Test(heap_basic, cold_reads_and_prefetch)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 256 * MiB, 0);
	heap_chunk_info ci;
	uint64_t off;
	size_t len, n = 0;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 3; i++) /* 1 MiB class: 256 pages each */
		cr_assert_eq(ht_put_chunk(t, 900 * 1024, SEED), (uint64_t)i + 1);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_next(t, 1, false, &ci), 0);
	cr_assert_eq(ci.id, 2);
	cr_assert_eq(ci.class_pages, 256);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	off = ci.file_offset - 16; /* the chunk's first page */
	len = (size_t)ci.class_pages * 4096;

	tl_evict(d.path);
	cr_assert_eq(tl_resident(d.path, off, len), 0);
	o.flags = 0;
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	heap_chunk_view v;
	cr_assert_eq(heap_chunk_open(t, 2, HEAP_CHUNK_PAGES, &v), 0);
	cr_assert_eq(tl_resident(d.path, off, len), 1);
	cr_assert_eq(heap_chunk_touch(&v, v.value + 20000, 8), 0);
	cr_assert_eq(tl_resident(d.path, off, len), 2);
	cr_assert_eq(heap_chunk_prefetch(t, 2), 0);
	for (int i = 0; i < 1000 && (n = tl_resident(d.path, off, len)) < 256; i++)
		usleep(10000);
	cr_assert_eq(n, 256);
	cr_assert_eq(heap_chunk_verify(t, 2), 0);
	cr_assert_eq(heap_chunk_prefetch(t, 4), AH_ENOTFOUND);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* The verified cache is keyed by (chunk id, xxh3): a chunk whose id is
 * reused by a later commit (the newest chunk freed, then a new one
 * reserved) is not trusted through the old chunk's entry.  Chunk 1's
 * pages are all checked page by page (cached), then chunk 1 is replaced
 * by other content whose page 2 is damaged after sealing: touching it
 * must fail, also in the same heap handle. */
Test(heap_basic, verified_cache_follows_id_reuse)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	heap_chunk_view v;
	void *body;
	size_t cap;
	uint64_t id;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(ht_put_chunk(t, 60000, SEED), 1);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), 0);
	cr_assert_eq(heap_chunk_touch(&v, v.body, 60000), 0);
	heap_txn_abort(t);
	/* Reused id, other content, page 2 damaged after the seal. */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_chunk_free(t, 1), 0);
	cr_assert_eq(heap_chunk_reserve(t, 60000, &id, &body, &cap), 0);
	cr_assert_eq(id, 1, "the newest id is handed out again");
	ht_fill(body, 60000, SEED + 1, id);
	cr_assert_eq(heap_chunk_seal(t, id, body, 60000), 0);
	/* body may be a write buffer (chunk_write.c): damage the stored
	 * chunk */
	cr_assert_eq(heap_chunk_open(t, id, HEAP_CHUNK_PAGES, &v), 0);
	((uint8_t *)v.body)[9000] ^= 0x20; /* test-only write through the map */
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_PAGES, &v), 0);
	cr_assert_eq(heap_chunk_touch(&v, v.body, 100), 0);
	cr_assert_eq(heap_chunk_touch(&v, (const uint8_t *)v.body + 9000, 1),
	             AH_ECORRUPT);
	cr_assert_eq(heap_chunk_open(t, 1, HEAP_CHUNK_WHOLE, &v), AH_ECORRUPT);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
