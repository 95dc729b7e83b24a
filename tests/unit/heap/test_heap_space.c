/*
 * tests/unit/heap/test_heap_space.c - file space: growth from empty to more
 * than 200 MiB (many txns, and one txn), AH_EFULL at a configured maximum
 * and on a really full filesystem (a 32 MiB tmpfs, when root may mount one):
 * no SIGBUS, the failed txn leaves nothing behind, and the same write
 * succeeds once the limit is raised or space is freed; chunks put on freed
 * pages take no new blocks (also on a full filesystem).
 */
#include <errno.h>
#include <sys/mount.h>

#include "heap_test.h"

#define SEED 4242u

/* Cheap bodies: the pattern only in the first and last 4 KiB. */
static uint64_t put_big(heap_txn *t, size_t n, int *rcp)
{
	uint64_t id = 0;
	void *body;
	size_t cap;
	int rc = heap_chunk_reserve(t, n, &id, &body, &cap);

	if (rc == 0) {
		memset(body, (int)(id & 0xff), n);
		ht_fill(body, 4096, SEED, id);
		ht_fill((char *)body + n - 4096, 4096, SEED, id + 1000000);
		rc = heap_chunk_seal(t, id, body, n);
	}
	*rcp = rc;
	return id;
}

static void check_big(heap_txn *t, uint64_t id, size_t n)
{
	const void *body;
	size_t used;
	const char *b;

	cr_assert_eq(heap_chunk_get(t, id, &body, &used), 0);
	cr_assert_eq(used, n);
	b = body;
	cr_assert(ht_same(b, 4096, SEED, id));
	cr_assert(ht_same(b + n - 4096, 4096, SEED, id + 1000000));
	cr_assert_eq(b[n / 2], (char)(id & 0xff));
	cr_assert_eq(heap_chunk_verify(t, id), 0);
}

static void check_stat_covers(heap *h)
{
	ah_heap_stat st;

	cr_assert_eq(heap_stat(h, &st), 0);
	/* Every page LMDB uses has its blocks (preallocated). */
	cr_assert_geq(st.file_alloc_bytes, st.pages_used * st.page_size);
	cr_assert_leq(st.pages_used * st.page_size, st.map_bytes);
}

Test(heap_space, growth_200mib, .timeout = 60)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC, 0, 0);
	ah_heap_stat st;
	const size_t n = 3 * MiB + 12345; /* jumbo: 1024 pages */
	uint64_t id;
	int rc;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	for (int i = 0; i < 70; i++) { /* many txns: 70 * 4 MiB */
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		id = put_big(t, n, &rc);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
		cr_assert_eq(id, (uint64_t)i + 1);
		cr_assert_eq(heap_txn_commit(t), 0);
	}
	check_stat_covers(h);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0); /* one txn: 70 more */
	for (int i = 0; i < 70; i++) {
		id = put_big(t, n, &rc);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
	}
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_sync(h), 0);
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_log_info("pages_used %lu file_alloc %lu MiB",
	            (unsigned long)st.pages_used,
	            (unsigned long)(st.file_alloc_bytes >> 20));
	cr_assert_gt(st.pages_used * st.page_size, 2 * 270 * MiB);
	check_stat_covers(h);
	cr_assert_eq(heap_close(h), 0);

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 140);
	for (uint64_t i = 1; i <= 140; i++)
		check_big(t, i, n);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_space, full_at_max_bytes)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 8 * MiB, 0);
	size_t n; /* one 256-page chunk */
	uint64_t n_ok = 0, id;
	int rc = 0;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	n = heap_chunk_max_body(h);
	for (;;) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		id = put_big(t, n, &rc);
		if (rc != 0)
			break;
		cr_assert_eq(heap_txn_commit(t), 0);
		n_ok++;
	}
	cr_assert_eq(rc, AH_EFULL);
	cr_assert_eq(n_ok, 7);
	cr_assert_eq(heap_txn_commit(t), AH_EBADTXN);
	cr_assert_eq(heap_set_max_bytes(h, 4 * MiB), AH_EINVAL);
	cr_assert_eq(heap_close(h), 0);

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), n_ok);
	for (uint64_t i = 1; i <= n_ok; i++)
		check_big(t, i, n);
	heap_txn_abort(t);
	cr_assert_eq(heap_set_max_bytes(h, 16 * MiB), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	id = put_big(t, n, &rc);
	cr_assert_eq(rc, 0);
	cr_assert_eq(id, n_ok + 1);
	cr_assert_eq(heap_txn_commit(t), 0);
	check_stat_covers(h);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

static void write_filler(const char *path, size_t bytes)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	char buf[65536];

	cr_assert_geq(fd, 0);
	memset(buf, 0x5a, sizeof buf);
	for (size_t off = 0; off < bytes; off += sizeof buf)
		cr_assert_eq(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
	close(fd);
}

Test(heap_space, full_disk_tmpfs, .timeout = 60)
{
	tl_dir d;
	char path[160], filler[160];
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 0, 0);
	ah_heap_stat st;
	size_t n;
	uint64_t n_ok = 0, id;
	int rc = 0;

	d = tl_tmpfs_dir("heap", "32m");
	snprintf(path, sizeof path, "%s/heap", d.dir);
	snprintf(filler, sizeof filler, "%s/filler", d.dir);
	cr_assert_eq(heap_open(path, &o, &h), 0);
	n = heap_chunk_max_body(h);
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_eq(st.map_bytes, 32 * MiB); /* the filesystem's size */
	write_filler(filler, 12 * MiB);
	for (;;) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		id = put_big(t, n, &rc);
		if (rc != 0)
			break;
		rc = heap_txn_commit(t);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
		n_ok++;
	}
	cr_log_info("full after %lu chunks", (unsigned long)n_ok);
	cr_assert_eq(rc, AH_EFULL);
	cr_assert_geq(n_ok, 10);
	cr_assert_eq(heap_txn_commit(t), AH_EBADTXN);
	cr_assert_eq(heap_close(h), 0);

	cr_assert_eq(heap_open(path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), n_ok);
	for (uint64_t i = 1; i <= n_ok; i++)
		check_big(t, i, n);
	heap_txn_abort(t);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	put_big(t, n, &rc);
	cr_assert_eq(rc, AH_EFULL, "still full");
	heap_txn_abort(t);
	cr_assert_eq(unlink(filler), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	id = put_big(t, n, &rc);
	cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
	cr_assert_eq(id, n_ok + 1);
	cr_assert_eq(heap_txn_commit(t), 0);
	check_stat_covers(h);
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(umount2(d.dir, MNT_DETACH), 0);
	tl_rmdir(&d);
}

static uint64_t alloc_bytes(heap *h)
{
	ah_heap_stat st;

	cr_assert_eq(heap_stat(h, &st), 0);
	return st.file_alloc_bytes;
}

/* Frees chunks first..last in one txn, then frees chunk extra in the
 * next: LMDB hands pages freed by txn T to txns from T + 2 on. */
static void free_chunks(heap *h, uint64_t first, uint64_t last,
                        uint64_t extra)
{
	heap_txn *t;

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (uint64_t id = first; id <= last; id++)
		cr_assert_eq(heap_chunk_free(t, id), 0);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_chunk_free(t, extra), 0);
	cr_assert_eq(heap_txn_commit(t), 0);
}

/* Chunks that LMDB places on free pages take no new blocks: the bound on
 * the pages a txn may touch counts a placed chunk only as far as it lies
 * past the high-water mark (space.c), where it counted every chunk whole
 * and a txn that rewrote 64 MiB in freed pages fallocated 64 MiB more. */
Test(heap_space, reused_pages_take_no_new_blocks, .timeout = 60)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC, 0, 0);
	ah_heap_stat st0, st1;
	const uint64_t n_chunks = 64;
	size_t n;
	uint64_t id;
	int rc;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	n = heap_chunk_max_body(h); /* 256 pages each */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (uint64_t i = 0; i < n_chunks + 1; i++) {
		put_big(t, n, &rc);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
	}
	cr_assert_eq(heap_txn_commit(t), 0);
	free_chunks(h, 1, n_chunks, n_chunks + 1);
	cr_assert_eq(heap_stat(h, &st0), 0);
	uint64_t a0 = alloc_bytes(h);

	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (uint64_t i = 0; i < n_chunks; i++) {
		id = put_big(t, n, &rc);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
	}
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_stat(h, &st1), 0);
	uint64_t a1 = alloc_bytes(h);
	cr_log_info("pages_used %lu -> %lu, allocated %lu -> %lu KiB",
	            (unsigned long)st0.pages_used, (unsigned long)st1.pages_used,
	            (unsigned long)(a0 >> 10), (unsigned long)(a1 >> 10));
	/* LMDB put them on the freed pages (the premise)... */
	cr_assert_leq(st1.pages_used, st0.pages_used + 64);
	/* ...and the file got at most one preallocation step more (1 MiB,
	 * or an eighth of what it had), not the 64 MiB the chunks hold */
	cr_assert_leq(a1, a0 + (a0 / 8 > MiB ? a0 / 8 : MiB) + MiB,
	              "allocated %lu -> %lu", (unsigned long)a0,
	              (unsigned long)a1);
	check_stat_covers(h);
	cr_assert_eq(heap_close(h), 0);

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), n_chunks);
	for (uint64_t i = 0; i < n_chunks; i++)
		check_big(t, id - i, n);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* On a full filesystem with 2 MiB left, chunks freed and put again fit
 * in their freed pages: a txn of eight 1 MiB puts succeeds, since each put
 * needs blocks for itself and the allowances only (where it needed them
 * for all eight before: AH_EFULL at the third), every page LMDB uses
 * has its blocks, and what the free pages cannot hold still gets
 * AH_EFULL, not SIGBUS. */
Test(heap_space, full_disk_reuses_freed_pages, .timeout = 60)
{
	tl_dir d;
	char path[160], filler[160];
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 0, 0);
	size_t n;
	uint64_t n_ok = 0, id;
	int rc = 0;

	d = tl_tmpfs_dir("heap", "32m");
	snprintf(path, sizeof path, "%s/heap", d.dir);
	snprintf(filler, sizeof filler, "%s/filler", d.dir);
	write_filler(filler, 2 * MiB);
	cr_assert_eq(heap_open(path, &o, &h), 0);
	n = heap_chunk_max_body(h);
	for (;;) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		put_big(t, n, &rc);
		if (rc != 0)
			break;
		cr_assert_eq(heap_txn_commit(t), 0);
		n_ok++;
	}
	cr_assert_eq(rc, AH_EFULL);
	heap_txn_abort(t);
	cr_assert_geq(n_ok, 12);
	free_chunks(h, 1, 8, 9); /* 9 MiB freed, 8 of it reusable now */
	cr_assert_eq(unlink(filler), 0); /* 2 MiB of headroom */
	for (uint64_t round = 0; round < 3; round++) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		for (int i = 0; i < 8; i++) {
			id = put_big(t, n, &rc);
			cr_assert_eq(rc, 0, "round %lu put %d: %s",
			             (unsigned long)round, i, ah_err_name(rc));
		}
		cr_assert_eq(heap_txn_commit(t), 0);
		check_stat_covers(h);
		free_chunks(h, id - 7, id, 10 + round);
	}
	/* what the free pages cannot hold still stops at AH_EFULL */
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	int puts = 0;
	for (; puts < 64; puts++) {
		put_big(t, n, &rc);
		if (rc != 0)
			break;
	}
	cr_log_info("full again after %d puts in one txn", puts);
	cr_assert_eq(rc, AH_EFULL);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(umount2(d.dir, MNT_DETACH), 0);
	tl_rmdir(&d);
}
