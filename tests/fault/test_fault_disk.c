/*
 * tests/fault/test_fault_disk.c - a really full disk (issue 7): the heap on
 * a 24 MiB tmpfs (root only; skipped with a message otherwise), written
 * through the public API (appends to two arrangements, merges, maintenance)
 * until AH_EFULL, in durable and relaxed (AH_OPEN_NOSYNC) modes.  No
 * SIGBUS; the failed txn is poisoned; the heap reopens on the full disk
 * with exactly the last commit; after space is freed writing continues.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"

#define NUPD 4000

static int write_filler(const char *path, uint64_t bytes)
{
	static char buf[1 << 16];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0)
		return -1;
	memset(buf, 0x5a, sizeof buf);
	for (uint64_t done = 0; done < bytes; done += sizeof buf)
		if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
			break;
	close(fd);
	return 0;
}

/* One commit: NUPD updates to a0 and a1, maintenance, model k. */
static int commit_step(ah_heap *h, uint64_t k, int *stage, ah_txn **left)
{
	static ah_update ups[NUPD];
	static char keys[NUPD][16], val[48];
	uint64_t s = k * 7919;
	ah_txn *t;
	int rc, idle;

	*left = NULL;
	*stage = 0;
	if ((rc = ah_txn_begin(h, 0, &t)) != 0)
		return rc;
	*stage = 1;
	memset(val, 'x', sizeof val);
	for (int i = 0; i < NUPD; i++) {
		snprintf(keys[i], sizeof keys[i], "%012" PRIu64,
		         tl_rand(&s) % 1000000);
		ups[i] = (ah_update){ keys[i], 12, val, sizeof val, k - 1, 1 };
	}
	if (k == 1 && ((rc = ah_arrangement_create(t, "a0")) != 0 ||
	               (rc = ah_arrangement_create(t, "a1")) != 0))
		goto fail;
	if ((rc = ah_append(t, "a0", k - 1, k, ups, NUPD)) != 0 ||
	    (rc = ah_append(t, "a1", k - 1, k, ups, NUPD / 2)) != 0 ||
	    (rc = ah_maintain(t, "a1", 1000, &idle)) != 0 ||
	    (rc = ah_source_put(t, "model", &k, sizeof k)) != 0)
		goto fail;
	*stage = 2;
	return ah_txn_commit(t);
fail:
	*left = t;
	return rc;
}

static void full_disk(unsigned flags)
{
	tl_dir d;
	char filler[160];
	ah_open_opts o = tl_opts(AH_OPEN_CREATE | flags, 0, 4096);
	ah_heap *h;
	ah_txn *left;
	tl_state last = { 0 }, st;
	uint64_t k;
	int rc = 0, stage = 0;

	d = tl_tmpfs_dir("fault", "24m");
	snprintf(filler, sizeof filler, "%s/filler", d.dir);
	cr_assert_eq(write_filler(filler, 6 * TL_MiB), 0);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	for (k = 1; k < 1000; k++) {
		rc = commit_step(h, k, &stage, &left);
		if (rc != 0)
			break;
		cr_assert_eq(tl_state_hash(h, 1, &last), 0);
		cr_assert_eq(last.model, k);
	}
	cr_assert_eq(rc, AH_EFULL, "commit %" PRIu64 ": %s", k,
	             ah_err_name(rc));
	cr_assert_geq(k, 5, "full too early");
	if (stage == 1) {
		cr_assert_eq(ah_append(left, "a0", 0, 1, NULL, 0), AH_EBADTXN);
		cr_assert_eq(ah_txn_commit(left), AH_EBADTXN);
	}
	/* Still full: the same write fails the same clean way. */
	rc = commit_step(h, k, &stage, &left);
	cr_assert_eq(rc, AH_EFULL, "%s", ah_err_name(rc));
	ah_txn_abort(left);
	cr_assert_eq(ah_close(h), 0);

	cr_assert_eq(ah_open(d.path, &o, &h), 0, "reopen on a full disk");
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(tl_state_hash(h, 1, &st), 0);
	cr_assert_eq(st.model, k - 1);
	cr_assert_eq(st.hash, last.hash, "the last commit changed");

	cr_assert_eq(unlink(filler), 0);
	for (uint64_t more = 0; more < 3; more++, k++) {
		rc = commit_step(h, k, &stage, &left);
		cr_assert_eq(rc, 0, "after freeing space, commit %" PRIu64
		             ": %s", k, ah_err_name(rc));
	}
	cr_assert_eq(ah_sync(h), 0);
	cr_assert_eq(tl_verify(h, NULL), 0);
	cr_assert_eq(tl_state_hash(h, 1, &st), 0);
	cr_assert_eq(st.model, k - 1);
	cr_assert_eq(ah_close(h), 0);
	printf("fault/full_tmpfs(%s): AH_EFULL at commit %" PRIu64
	       ", last commit intact, 3 more commits after freeing 6 MiB\n",
	       flags ? "relaxed" : "durable", k - 3);
	cr_assert_eq(umount2(d.dir, MNT_DETACH), 0);
	tl_rmdir(&d);
}

Test(fault, full_tmpfs_durable, .timeout = 120)
{
	full_disk(0);
}

Test(fault, full_tmpfs_relaxed, .timeout = 120)
{
	full_disk(AH_OPEN_NOSYNC);
}

/* Writes 4 KiB blocks to path until the filesystem refuses one. */
static void fill_up(const char *path)
{
	static char buf[4096];
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);

	cr_assert_geq(fd, 0);
	memset(buf, 0x5a, sizeof buf);
	while (write(fd, buf, sizeof buf) == (ssize_t)sizeof buf)
		;
	close(fd);
}

static struct stat lock_stat(const char *lock)
{
	struct stat st;

	cr_assert_eq(stat(lock, &st), 0);
	return st;
}

/* The lock file LMDB maps (ARCHITECTURE.md §3, item 4): a reopen skips
 * fallocating it only when it has a block for every byte LMDB will map.
 * Each damaged lock file below, on a disk filled to the last block, must
 * be AH_EFULL (fallocate's ENOSPC), not an open that maps a hole (SIGBUS at
 * LMDB's first store into it, or later); once space is freed the open
 * allocates the blocks.  Cases: the whole file a hole; a hole in the
 * middle with fewer blocks than bytes; a hole in the middle with blocks
 * past the end making up the count (only SEEK_HOLE sees it); a
 * max_readers larger than the file's reader table (LMDB grows it). */
Test(fault, lock_file_holes_on_a_full_disk, .timeout = 60)
{
	static const char *const cases[] = { "sparse", "hole", "hole+tail",
		                             "more readers" };
	static const char zero[64];
	tl_dir d;
	char filler[160], lock[300];
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 0, 4096);
	ah_heap *h;
	uint64_t k = 1;
	int stage, fd;
	ah_txn *left;

	d = tl_tmpfs_dir("fault", "24m");
	snprintf(filler, sizeof filler, "%s/filler", d.dir);
	snprintf(lock, sizeof lock, "%s-lock", d.path);
	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	cr_assert_eq(commit_step(h, k, &stage, &left), 0);
	cr_assert_eq(ah_close(h), 0);
	/* An intact lock file: 126 readers' table, every byte a block. */
	cr_assert_eq(lock_stat(lock).st_size, 126 * 64 + 128);
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		ah_open_opts oc = o;
		struct stat before, after;

		if (c < 3) { /* a new lock file of the same size */
			cr_assert_eq(unlink(lock), 0);
			fd = open(lock, O_RDWR | O_CREAT, 0644);
			cr_assert_geq(fd, 0);
			cr_assert_eq(ftruncate(fd, 126 * 64 + 128), 0);
			if (c >= 1) /* block 0 written, block 1 a hole */
				cr_assert_eq(pwrite(fd, zero, sizeof zero, 0),
				             (ssize_t)sizeof zero);
			if (c == 2) /* blocks past the end: 3 blocks for 2 */
				cr_assert_eq(fallocate(fd, FALLOC_FL_KEEP_SIZE,
				                       8192, 8192), 0);
			close(fd);
		} else {
			oc.max_readers = 1000;
		}
		before = lock_stat(lock);
		if (c == 2)
			cr_assert_geq((uint64_t)before.st_blocks * 512,
			              (uint64_t)before.st_size,
			              "the block count alone covers the size");
		fill_up(filler);
		int rc = ah_open(d.path, &oc, &h);
		cr_assert_eq(rc, AH_EFULL, "%s lock file on a full disk: %s",
		             cases[c], ah_err_name(rc));
		cr_assert_eq(unlink(filler), 0);
		cr_assert_eq(ah_open(d.path, &oc, &h), 0, "%s", cases[c]);
		after = lock_stat(lock);
		cr_assert_gt(after.st_blocks, before.st_blocks,
		             "%s: open allocated nothing", cases[c]);
		cr_assert_geq((uint64_t)after.st_blocks * 512,
		              (uint64_t)after.st_size, "%s", cases[c]);
		k++;
		cr_assert_eq(commit_step(h, k, &stage, &left), 0, "%s",
		             cases[c]);
		cr_assert_eq(ah_close(h), 0);
	}
	/* Intact again: a reopen on the full disk opens. */
	fill_up(filler);
	cr_assert_eq(ah_open(d.path, &o, &h), 0, "intact lock file, full disk");
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(umount2(d.dir, MNT_DETACH), 0);
	tl_rmdir(&d);
}
