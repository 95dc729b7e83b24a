/*
 * heap/space.c - how the heap gets file space before LMDB writes into it:
 * no SIGBUS on a full disk, no MDB_MAP_FULL surprise.
 *
 * The problem.  With MDB_WRITEMAP, LMDB ftruncates the data file to the map
 * size (a sparse file) and then writes pages by storing into the mapping.  A
 * store into a hole needs a block from the filesystem at fault time; on a
 * full disk the kernel has no way to report ENOSPC to a memory store, so the
 * process gets SIGBUS.  LMDB has no hook to prevent this.
 *
 * The mechanism.
 *  1. Map size.  The map is the configured max_bytes (ah_open_opts,
 *     heap_set_max_bytes) or, by default, the whole filesystem's size
 *     (statvfs f_blocks * f_frsize), rounded up to a page, at least 1 MiB.
 *     The map size is thus the only hard limit, and reaching it is LMDB's
 *     MDB_MAP_FULL, which we report as AH_EFULL.
 *  2. An upper bound of the pages a write txn may touch.  At begin it is the
 *     committed high-water mark hw (mdb_env_info me_last_pgno + 1) plus a
 *     fixed slack (SLACK_PAGES: the named DBs' roots, the meta DB) and the
 *     free list's rewrite at commit (freelist_pages: twice the free DB's
 *     pages and a page per record).  Before every LMDB call that
 *     may allocate pages, the caller adds what that call can need: the
 *     value's own pages plus TREE_PAGES for the copy-on-write path and a
 *     split; a chunk free also adds one page per FREE_IDL_PAGES freed
 *     pages, for the free list.  A chunk's pages (an MDB_RESERVE put,
 *     heap_space_need_chunk) count only until LMDB placed it
 *     (heap_space_placed reads the page its header names): then the bound
 *     is max(hw, fresh_end) + the rest, fresh_end the end of the last
 *     chunk placed past hw.  Sound because LMDB takes pages past hw in
 *     order (mdb_page_alloc: mt_next_pgno += the run), so the fresh pages
 *     taken after that chunk are tree and record pages, each counted in
 *     the rest; a chunk put on reused free pages adds nothing.  So the
 *     bound never falls below the last page LMDB can write in this txn.
 *  3. Preallocation.  heap->reserved_to says that bytes [0, reserved_to) of
 *     the file have blocks (posix_fallocate, which on Linux allocates
 *     without writing).  Whenever the bound passes it, we fallocate before
 *     letting LMDB run: a step of max(need, reserved_to + min(64 MiB,
 *     reserved_to / 8)) (at least 1 MiB), capped at the map size.  If the
 *     step fails with ENOSPC we retry with exactly what is needed; if that
 *     fails too, the operation returns AH_EFULL and poisons the txn before
 *     LMDB touched a byte.  Pages LMDB reuses from its free list lie below
 *     the old high-water mark and were allocated long ago.
 *  4. Recovery.  The poisoned txn can only be aborted; nothing reached the
 *     file (LMDB's meta pages only change at commit).  The heap then sees its
 *     last commit, and the same write succeeds once space is freed on the
 *     disk or heap_set_max_bytes (mdb_env_set_mapsize, with no txn open)
 *     raises the map.
 *  5. The lock file (PATH-lock) is mapped too and written on every reader
 *     start: heap_open fallocates its reader table before mdb_env_open,
 *     unless the file already has a block for each byte LMDB will map
 *     (lock_allocated: at least the reader table's size, no hole).
 * reserved_to is per handle; after a reopen it restarts at 0 and the first
 * write fallocates [0, need) again, which costs one pass over the extents
 * already allocated.  fallocate from another process's handle is harmless.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "heap/chunk_int.h"
#include "heap/fault.h"
#include "heap/heap_int.h"

#define SLACK_PAGES 64u
#define TREE_PAGES 8u
#define MIN_MAP (1u << 20)
#define MIN_STEP (1u << 20)
#define MAX_STEP (64u << 20)

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

/* The size of the filesystem holding path (fd >= 0: holding fd). */
uint64_t heap_space_fs_bytes(const char *path, int fd)
{
	struct statvfs vfs;
	char dir[PATH_MAX];
	const char *slash;
	int rc;

	if (fd >= 0) {
		rc = fstatvfs(fd, &vfs);
	} else {
		slash = strrchr(path, '/');
		if (slash == NULL)
			snprintf(dir, sizeof dir, ".");
		else if (slash == path)
			snprintf(dir, sizeof dir, "/");
		else
			snprintf(dir, sizeof dir, "%.*s", (int)(slash - path),
			         path);
		rc = statvfs(dir, &vfs);
	}
	return rc == 0 ? (uint64_t)vfs.f_blocks * vfs.f_frsize : 0;
}

/* The map size for a limit: max_bytes, or else the filesystem's size. */
uint64_t heap_space_map_bytes(uint64_t fs_bytes, uint64_t max_bytes,
                              uint32_t psize)
{
	uint64_t want = max_bytes ? max_bytes : fs_bytes;

	if (want == 0)
		want = (uint64_t)1 << 30; /* statvfs failed: a modest map */
	if (want > UINT64_MAX / 2)
		want = UINT64_MAX / 2;
	want = round_up(want, psize);
	return want < MIN_MAP ? round_up(MIN_MAP, psize) : want;
}

static int fallocate_range(int fd, uint64_t from, uint64_t to)
{
	int err;

	do
		err = posix_fallocate(fd, (off_t)from, (off_t)(to - from));
	while (err == EINTR);
	return err;
}

int heap_space_ensure(heap *h, uint64_t bytes)
{
	uint64_t step, target;
	int err;

	if (bytes > h->map_bytes)
		bytes = h->map_bytes;
	if (bytes <= h->reserved_to)
		return 0;
	step = h->reserved_to / 8;
	step = step < MIN_STEP ? MIN_STEP : step > MAX_STEP ? MAX_STEP : step;
	target = h->reserved_to + step;
	if (target < bytes)
		target = bytes;
	if (target > h->map_bytes)
		target = h->map_bytes;
	err = fallocate_range(h->fd, h->reserved_to, target);
	if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
		target = bytes;
		err = fallocate_range(h->fd, h->reserved_to, target);
	}
	if (err != 0)
		return heap_err(err);
	h->reserved_to = target;
	return 0;
}

/* What a commit may write fresh for LMDB's free list (heap_space_begin):
 * LMDB 0.9's mdb_freelist_save deletes the free-list records the txn
 * loaded and writes what is left of them back, split into records of
 * whole pages (each rounded up), besides the record of the pages the txn
 * freed (counted by each free: heap_chunk_free, heap_del).  So
 * twice the free DB's pages and a page per record bound it. */
static uint64_t freelist_pages(const MDB_stat *fs)
{
	return 2 * ((uint64_t)fs->ms_branch_pages + fs->ms_leaf_pages +
	            fs->ms_overflow_pages) + fs->ms_entries;
}

/* bound_pages from its terms (heap_int.h), and blocks for it. */
static int space_bound(heap_txn *t)
{
	uint64_t base = t->fresh_end > t->hw_pages ? t->fresh_end : t->hw_pages;

	t->bound_pages = base + t->fixed_pages + t->pending_pages;
	return heap_space_ensure(t->h, t->bound_pages * t->h->psize);
}

int heap_space_begin(heap_txn *t)
{
	MDB_envinfo info;
	int rc = heap_err(HEAP_MDB(mdb_env_info(t->h->env, &info)));

	if (rc != 0)
		return rc;
	MDB_stat fs;

	if ((rc = heap_err(mdb_stat(t->txn, 0 /* FREE_DBI */, &fs))) != 0)
		return rc;
	t->hw_pages = (uint64_t)info.me_last_pgno + 1;
	t->fresh_end = 0;
	/* The commit's mdb_freelist_save writes back what is left of the
	 * free list it loaded (up to all of it) as records of its own,
	 * multi-page ones in a young heap, which take fresh pages when no
	 * free run is long enough: at most the free DB's pages again, with
	 * a page of rounding per record (FREELIST_PAGES). */
	t->fixed_pages = SLACK_PAGES + freelist_pages(&fs);
	t->pending_pages = 0;
	return space_bound(t);
}

/* A chunk put whose place was never learnt (its put failed, or its page
 * header was not readable) counts whole, as if past the high-water. */
static void settle_pending(heap_txn *t)
{
	t->fixed_pages += t->pending_pages;
	t->pending_pages = 0;
}

/* Called before each LMDB call that may allocate: pages is what the value
 * itself needs (0 for a delete); the tree allowance is added here. */
int heap_space_need(heap_txn *t, uint64_t pages)
{
	settle_pending(t);
	t->fixed_pages += pages + TREE_PAGES;
	return space_bound(t);
}

/* Before an MDB_RESERVE put of a chunk of pages, followed by
 * heap_space_placed once LMDB placed it: its pages count only until
 * then, and afterwards only as far as they lie past the high-water. */
int heap_space_need_chunk(heap_txn *t, uint64_t pages)
{
	settle_pending(t);
	t->fixed_pages += TREE_PAGES;
	t->pending_pages = pages;
	return space_bound(t);
}

/* v: the value the reserve returned (its first page's header, LMDB's
 * own, names the page).  LMDB hands out pages past the high-water in
 * order (mdb_page_alloc: mt_next_pgno grows by each run it takes), so the
 * last page it can have written is below the end of the last chunk it
 * placed there plus every allowance since: max(hw, fresh_end) + fixed
 * bounds it.  A chunk placed on reused free pages adds nothing. */
void heap_space_placed(heap_txn *t, const MDB_val *v, uint64_t pages)
{
	uint64_t off;

	if (t->pending_pages == 0 || chunk_file_offset(t->h, v, &off) != 0)
		return; /* left pending: counted whole at the next call */
	uint64_t end = off / t->h->psize + pages;

	if (end > t->fresh_end)
		t->fresh_end = end;
	t->pending_pages = 0;
}

/* The reader table LMDB maps from the lock file for this many readers:
 * its header (two 64-byte lines) and a 64-byte slot per reader.  LMDB
 * grows a smaller file to it (as its first opener) and maps a larger one
 * whole. */
static off_t lmdb_lock_bytes(unsigned readers)
{
	return (off_t)readers * 64 + 128;
}

/* Has every byte LMDB will map from fd a block already?  Only when the
 * file is at least the reader table's size (LMDB will not grow it), its
 * blocks cover its size, and SEEK_HOLE finds no hole before its end (a
 * hole the block count would miss: blocks past the end, allocated with
 * FALLOC_FL_KEEP_SIZE).  Both are conservative: a fallocated range never
 * written reads as a hole, so the answer is then "no" and the caller
 * fallocates, as before. */
static bool lock_allocated(int fd, unsigned readers, struct stat *st)
{
	if (fstat(fd, st) != 0) {
		st->st_ino = 0; /* unknown */
		return false;
	}
	if (!S_ISREG(st->st_mode) || st->st_size < lmdb_lock_bytes(readers) ||
	    (off_t)st->st_blocks * 512 < st->st_size)
		return false;
	return lseek(fd, 0, SEEK_HOLE) >= st->st_size;
}

/* The reader table in PATH-lock is written through a mapping as well.
 * Called before LMDB opens the environment (see env.c on fcntl locks): it
 * allocates blocks for the whole table with FALLOC_FL_KEEP_SIZE, so the
 * size LMDB finds (and from which it derives the reader count) is not
 * changed, and LMDB's later ftruncate extends over allocated blocks;
 * unless lock_allocated finds them all there already (a reopen).
 * LMDB 0.9: 64 bytes per reader slot plus two 64-byte header lines.
 * keep (may be NULL) gets the descriptor, left open, or -1 when the lock
 * file could not be opened to write; st (may be NULL) its fstat, taken
 * before any fallocate (which keeps the size), or st_ino 0 when unknown. */
int heap_space_lockfile(const char *path, unsigned readers, int *keep,
                        struct stat *st)
{
	char lock[PATH_MAX];
	off_t len = (off_t)readers * 64 + 4096;
	struct stat own;
	int fd, err = 0;

	if (st == NULL)
		st = &own;
	st->st_ino = 0;
	if (keep != NULL)
		*keep = -1;
	if ((size_t)snprintf(lock, sizeof lock, "%s-lock", path) >= sizeof lock)
		return AH_EINVAL;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return 0; /* read-only place: LMDB decides what it can do */
	/* A reopen's lock file has its blocks: fstat and lseek (~11 us
	 * here) instead of fallocate (~33 us at p50, a journal wait at
	 * worst), which even on blocks it has takes the inode lock. */
	if (!lock_allocated(fd, readers, st) &&
	    fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, len) != 0)
		err = errno;
	if (err == ENOSPC || err == EDQUOT) {
		close(fd);
		return AH_EFULL;
	}
	if (keep != NULL)
		*keep = fd;
	else
		close(fd);
	return 0; /* EOPNOTSUPP and the like: nothing better to do */
}
