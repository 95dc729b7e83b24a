/*
 * tests/unit/heap/test_heap_space.c - file space: growth from empty to more
 * than 200 MiB (many txns, and one txn), AH_EFULL at a configured maximum
 * and on a really full filesystem (a 32 MiB tmpfs, when root may mount one):
 * no SIGBUS, the failed txn leaves nothing behind, and the same write
 * succeeds once the limit is raised or space is freed; chunks put on freed
 * pages take no new blocks (also on a full filesystem).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

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

/* An open whose max_bytes is below the data already held (here 1 byte,
 * under 1 MiB too) is no error: the map holds exactly the pages in use,
 * nothing is cut, every chunk reads back; a write that needs a page more
 * is AH_EFULL and leaves nothing, and succeeds once the limit is raised.
 * (ah_set_max_bytes with the same value is AH_EINVAL: full_at_max_bytes,
 * api_errors::set_max_bytes_below_data.) */
Test(heap_space, open_below_the_data_maps_the_data)
{
	tl_dir d;
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	ah_heap_stat st;
	struct stat fs;
	size_t n;
	int rc = 0;

	d = tl_tmpdir("heap");
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	n = heap_chunk_max_body(h);
	for (int i = 0; i < 7; i++) {
		cr_assert_eq(heap_txn_begin(h, false, &t), 0);
		put_big(t, n, &rc);
		cr_assert_eq(rc, 0);
		cr_assert_eq(heap_txn_commit(t), 0);
	}
	cr_assert_eq(heap_close(h), 0);

	o = tl_opts(0, 1, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_stat(h, &st), 0);
	uint64_t held = st.pages_used * st.page_size;
	cr_assert_gt(held, 7 * (uint64_t)n, "the data is larger than 1 MiB");
	cr_assert_eq(st.map_bytes, held, "the map holds the pages in use");
	cr_assert_eq(stat(d.path, &fs), 0);
	cr_assert_geq((uint64_t)fs.st_size, held, "nothing cut");
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 7);
	for (uint64_t i = 1; i <= 7; i++)
		check_big(t, i, n);
	heap_txn_abort(t);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	put_big(t, n, &rc);
	cr_assert_eq(rc, AH_EFULL, "%s", ah_err_name(rc));
	heap_txn_abort(t);
	cr_assert_eq(heap_set_max_bytes(h, 1), AH_EINVAL);
	cr_assert_eq(heap_set_max_bytes(h, 16 * MiB), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	uint64_t id = put_big(t, n, &rc);
	cr_assert_eq(rc, 0);
	cr_assert_eq(id, 8);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	for (uint64_t i = 1; i <= 8; i++)
		check_big(t, i, n);
	heap_txn_abort(t);
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

/* A tmpfs of `size` (tl_tmpfs_dir), with path naming a heap in it and
 * filler a file beside it (each 160 bytes). */
static tl_dir tmpfs_heap(const char *size, char *path, char *filler)
{
	tl_dir d = tl_tmpfs_dir("heap", size);

	snprintf(path, 160, "%s/heap", d.dir);
	snprintf(filler, 160, "%s/filler", d.dir);
	return d;
}

/* Commits one chunk of n bytes per txn until a put fails, which must be
 * AH_EFULL; *failed gets that txn, still open.  Returns the chunks
 * committed. */
static uint64_t fill_to_full(heap *h, size_t n, heap_txn **failed)
{
	uint64_t n_ok = 0;
	int rc = 0;

	for (;;) {
		cr_assert_eq(heap_txn_begin(h, false, failed), 0);
		put_big(*failed, n, &rc);
		if (rc != 0)
			break;
		rc = heap_txn_commit(*failed);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
		n_ok++;
	}
	cr_log_info("full after %lu chunks", (unsigned long)n_ok);
	cr_assert_eq(rc, AH_EFULL);
	return n_ok;
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

	d = tmpfs_heap("32m", path, filler);
	cr_assert_eq(heap_open(path, &o, &h), 0);
	n = heap_chunk_max_body(h);
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_eq(st.map_bytes, 32 * MiB); /* the filesystem's size */
	write_filler(filler, 12 * MiB);
	n_ok = fill_to_full(h, n, &t);
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

	d = tmpfs_heap("32m", path, filler);
	write_filler(filler, 2 * MiB);
	cr_assert_eq(heap_open(path, &o, &h), 0);
	n = heap_chunk_max_body(h);
	n_ok = fill_to_full(h, n, &t);
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

/* The child's write txn after the disk filled up: one 4-page chunk.
 * Exits with 0, or 1 + the step (begin, put, commit) that failed and
 * AH_EFULL, or 10 on any other error. */
static void one_put_child(const char *path, size_t n)
{
	ah_open_opts o = tl_opts(0, 0, 0);
	heap *h;
	heap_txn *t;
	int rc;

	if (heap_open(path, &o, &h) != 0)
		_exit(10);
	if ((rc = heap_txn_begin(h, false, &t)) != 0)
		_exit(rc == AH_EFULL ? 1 : 10);
	put_big(t, n, &rc);
	if (rc != 0)
		_exit(rc == AH_EFULL ? 2 : 10);
	if ((rc = heap_txn_commit(t)) != 0)
		_exit(rc == AH_EFULL ? 3 : 10);
	_exit(heap_close(h) == 0 ? 0 : 10);
}

/* LMDB's commit writes back the part of the free list its txn loaded
 * (mdb_freelist_save): in a young heap as a few multi-page records, which
 * take fresh pages when no free run is that long.  The txn's bound counts
 * twice the free DB's pages for them, so on a disk with less room than
 * that the txn gets AH_EFULL, never a SIGBUS at its commit.  (Found by an
 * outside test: the bound had 64 pages for it; here the rewrite takes
 * about 130, past a file whose blocks end at its used pages, as a sparse
 * copy's do, with 100 pages left on the disk.) */
Test(heap_space, free_list_rewrite_has_its_blocks, .timeout = 120)
{
	tl_dir d;
	char path[160], filler[160];
	heap *h;
	heap_txn *t;
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | AH_OPEN_NOSYNC, 0, 0);
	ah_heap_stat st;
	const size_t big = 12 * 4096, small = 3 * 4096;
	const int pairs = 5000;
	int rc, status;

	d = tmpfs_heap("800m", path, filler);
	cr_assert_eq(heap_open(path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < pairs; i++) { /* odd ids big, even ids small */
		put_big(t, big, &rc);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
		put_big(t, small, &rc);
		cr_assert_eq(rc, 0, "%s", ah_err_name(rc));
	}
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (uint64_t id = 1; id < 2 * (uint64_t)pairs; id += 2)
		cr_assert_eq(heap_chunk_free(t, id), 0);
	cr_assert_eq(heap_txn_commit(t), 0);
	free_chunks(h, 2, 2, 4); /* later txns may take those pages */
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_eq(heap_close(h), 0);

	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	off_t used = (off_t)(st.pages_used * st.page_size);
	cr_assert_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
	                       used, (off_t)st.map_bytes - used), 0);
	close(fd);
	struct statvfs vfs;
	cr_assert_eq(statvfs(d.dir, &vfs), 0);
	uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	cr_assert_gt(avail, 100 * 4096 + 65536);
	write_filler(filler, (avail - 100 * 4096) / 65536 * 65536);
	cr_log_info("pages used %lu, free %lu; disk room left %lu KiB",
	            (unsigned long)st.pages_used, (unsigned long)st.pages_free,
	            (unsigned long)((avail - (avail - 100 * 4096) / 65536 * 65536) >> 10));

	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0)
		one_put_child(path, small);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(!WIFSIGNALED(status), "the writer died of signal %d",
	          WTERMSIG(status));
	cr_assert_eq(WEXITSTATUS(status), 1, "exit %d (1: AH_EFULL at begin)",
	             WEXITSTATUS(status));

	/* room again: the same write succeeds, everything else intact */
	cr_assert_eq(unlink(filler), 0);
	pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0)
		one_put_child(path, small);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "status %d", status);
	cr_assert_eq(heap_open(path, &o, &h), 0);
	check_stat_covers(h);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), (uint64_t)pairs - 1); /* 2, 4 freed */
	for (uint64_t id = 6; id < 2 * (uint64_t)pairs; id += 2)
		check_big(t, id, small);
	check_big(t, 2 * (uint64_t)pairs + 1, small);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(umount2(d.dir, MNT_DETACH), 0);
	tl_rmdir(&d);
}

/* Process A of smaller_map_never_truncates_another_process: opens the heap
 * with the disk's map, puts a chunk, reserves blocks for 16 MiB more (a
 * txn it aborts), tells the test (ready), waits for B (go), then puts the
 * 16 MiB, past B's limit, into the blocks it reserved.  Exit 0, or the
 * step. */
static void map_writer(const char *path, int ready, int go)
{
	ah_open_opts o = tl_opts(AH_OPEN_NOSYNC, 0, 0);
	heap *h;
	heap_txn *t;
	char c = 1;
	int rc;

	if (heap_open(path, &o, &h) != 0 || heap_txn_begin(h, false, &t) != 0)
		_exit(20);
	put_big(t, 3 * MiB, &rc);
	if (rc != 0 || heap_txn_commit(t) != 0)
		_exit(21);
	/* blocks for the 16 MiB put later (reserved, so not fallocated
	 * again), as a txn that gave up leaves them */
	if (heap_txn_begin(h, false, &t) != 0)
		_exit(22);
	for (int i = 0; i < 4; i++) {
		put_big(t, 4 * MiB, &rc);
		if (rc != 0)
			_exit(22);
	}
	heap_txn_abort(t);
	if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1)
		_exit(22);
	if (heap_txn_begin(h, false, &t) != 0)
		_exit(23);
	for (int i = 0; i < 4; i++) {
		put_big(t, 4 * MiB, &rc);
		if (rc != 0)
			_exit(24);
	}
	if (heap_txn_commit(t) != 0)
		_exit(25);
	_exit(heap_close(h) == 0 ? 0 : 26);
}

/* Process B: a writable open with a 4 MiB limit, and a lower limit. */
static void map_shrinker(const char *path, uint64_t file_bytes)
{
	ah_open_opts o = tl_opts(0, 4 * MiB, 0);
	ah_heap_stat st;
	heap *h;

	if (heap_open(path, &o, &h) != 0)
		_exit(30);
	if (heap_stat(h, &st) != 0 || st.map_bytes < file_bytes)
		_exit(31); /* it mapped less than the file A maps */
	if (heap_set_max_bytes(h, st.pages_used * st.page_size) != AH_EBUSY)
		_exit(32);
	if (heap_stat(h, &st) != 0 || st.file_bytes < file_bytes)
		_exit(33);
	_exit(heap_close(h) == 0 ? 0 : 34);
}

/* LMDB (MDB_WRITEMAP) truncates the file to its map at every open and
 * resize.  A writable open with a smaller max_bytes than another
 * process's map, or ah_set_max_bytes lowered below the file's size, used
 * to cut the file under that process, which died of SIGBUS at its next
 * store past the new end (found by an outside test, no full disk
 * needed).  Now the open maps at least the file's size while another
 * process has it open, and the lower limit is AH_EBUSY; alone, the limit
 * lowers as before. */
Test(heap_space, smaller_map_never_truncates_another_process, .timeout = 60)
{
	tl_dir d = tl_tmpdir("heap");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 0, 0);
	int ready[2], go[2], sa, sb;
	struct stat fs;
	heap *h;
	char c;

	cr_assert_eq(heap_open(d.path, &o, &h), 0); /* created, then closed */
	cr_assert_eq(heap_close(h), 0);
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(go), 0);
	pid_t a = fork();
	cr_assert_neq(a, -1);
	if (a == 0)
		map_writer(d.path, ready[1], go[0]);
	cr_assert_eq(read(ready[0], &c, 1), 1);
	cr_assert_eq(stat(d.path, &fs), 0);
	pid_t b = fork();
	cr_assert_neq(b, -1);
	if (b == 0)
		map_shrinker(d.path, (uint64_t)fs.st_size);
	cr_assert_eq(waitpid(b, &sb, 0), b);
	cr_assert_eq(write(go[1], &c, 1), 1);
	cr_assert_eq(waitpid(a, &sa, 0), a);
	cr_assert(!WIFSIGNALED(sa), "A died of signal %d", WTERMSIG(sa));
	cr_assert(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "B: status %d", sb);
	cr_assert(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "A: status %d", sa);

	/* alone again: the limit lowers to the data held, and reads back */
	o = tl_opts(0, 0, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	ah_heap_stat st;
	heap_txn *t;
	cr_assert_eq(heap_stat(h, &st), 0);
	cr_assert_eq(heap_set_max_bytes(h, st.pages_used * st.page_size +
	                                   MiB), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 5);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

/* Process S of remap_never_truncates_another_process: a small map, then
 * a read txn once another process's commit outgrew it (MDB_MAP_RESIZED:
 * the remap).  Exit 0, or the step. */
static void small_reader(const char *path, int ready, int go)
{
	ah_open_opts o = tl_opts(0, MiB, 0);
	heap *h;
	heap_txn *t;
	char c = 1;

	if (heap_open(path, &o, &h) != 0)
		_exit(40);
	if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1)
		_exit(41);
	if (heap_txn_begin(h, true, &t) != 0)
		_exit(42);
	heap_txn_abort(t);
	_exit(heap_close(h) == 0 ? 0 : 43);
}

/* Process X: the disk's map, blocks reserved for 32 MiB (a txn it
 * aborts), then, after S's remap, the 32 MiB put into them. */
static void big_writer(const char *path, int ready, int go)
{
	ah_open_opts o = tl_opts(AH_OPEN_NOSYNC, 0, 0);
	heap *h;
	heap_txn *t;
	char c = 1;
	int rc;

	if (heap_open(path, &o, &h) != 0)
		_exit(50);
	for (int round = 0; round < 2; round++) {
		if (round == 1 && (write(ready, &c, 1) != 1 ||
		                   read(go, &c, 1) != 1))
			_exit(51);
		if (heap_txn_begin(h, false, &t) != 0)
			_exit(52);
		for (int i = 0; i < 8; i++) {
			put_big(t, 4 * MiB, &rc);
			if (rc != 0)
				_exit(53);
		}
		if (round == 0)
			heap_txn_abort(t);
		else if (heap_txn_commit(t) != 0)
			_exit(54);
	}
	_exit(heap_close(h) == 0 ? 0 : 55);
}

/* The remap after MDB_MAP_RESIZED used mdb_env_set_mapsize(env, 0): the
 * map the last committer recorded, which LMDB truncates the file to, below
 * what a process that opened since (and did not commit yet) maps: it died
 * of SIGBUS at its next store past that size (found by outside testing).
 * The remap now maps the file's size, never less. */
Test(heap_space, remap_never_truncates_another_process, .timeout = 60)
{
	tl_dir d = tl_tmpdir("heap");
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 0, 0);
	int sr[2], sg[2], xr[2], xg[2], ss, sx, rc;
	heap *h;
	heap_txn *t;
	char c = 1;

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_close(h), 0);
	cr_assert(pipe(sr) == 0 && pipe(sg) == 0 && pipe(xr) == 0 &&
	          pipe(xg) == 0);
	pid_t s = fork();
	cr_assert_neq(s, -1);
	if (s == 0)
		small_reader(d.path, sr[1], sg[0]);
	cr_assert_eq(read(sr[0], &c, 1), 1);
	/* W: a 24 MiB map commits 3 MiB (the size LMDB records) and closes */
	o = tl_opts(0, 24 * MiB, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	put_big(t, 3 * MiB, &rc);
	cr_assert_eq(rc, 0);
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_close(h), 0);
	pid_t x = fork();
	cr_assert_neq(x, -1);
	if (x == 0)
		big_writer(d.path, xr[1], xg[0]);
	cr_assert_eq(read(xr[0], &c, 1), 1);
	cr_assert_eq(write(sg[1], &c, 1), 1); /* S remaps */
	cr_assert_eq(waitpid(s, &ss, 0), s);
	cr_assert_eq(write(xg[1], &c, 1), 1); /* X writes its 32 MiB */
	cr_assert_eq(waitpid(x, &sx, 0), x);
	cr_assert(!WIFSIGNALED(sx), "X died of signal %d", WTERMSIG(sx));
	cr_assert(WIFEXITED(ss) && WEXITSTATUS(ss) == 0, "S: status %d", ss);
	cr_assert(WIFEXITED(sx) && WEXITSTATUS(sx) == 0, "X: status %d", sx);
	o = tl_opts(0, 0, 0);
	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	cr_assert_eq(ht_count_chunks(t), 9);
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
