/*
 * arrheap.h - the one public header of arrheap.
 *
 * arrheap keeps differential-dataflow arrangements (indexed collections of
 * (key, val, time, diff) updates held as immutable sorted batches) directly
 * in one LMDB memory-mapped file, so that a restarted engine remaps its state
 * and resumes from the stored frontier instead of rebuilding it.
 *
 * Conventions (see ARCHITECTURE.md for the whole argument):
 *  - Handles are opaque.  Every function that can fail returns int: 0, or a
 *    negative AH_E* code from the band -32001..-32099, which overlaps neither
 *    errno values, LMDB's codes (-30799..-30780) nor Berkeley DB's
 *    (-30800..-30999).  ah_strerror() and ah_err_name() describe a code.
 *  - Units: sizes are bytes, counts are updates, times are the caller's
 *    uint64_t logical times, durations are ms.
 *  - Pointers returned into the heap (keys, vals, source positions) point
 *    straight into the memory map: zero copy, valid until the transaction
 *    that produced them ends, never to be written through.
 *  - A failed mutation poisons its transaction (also a read transaction
 *    refusing one with AH_EREADONLY): afterwards every call on it fails
 *    with AH_EBADTXN until ah_txn_abort().  Nothing of a poisoned
 *    transaction ever reaches the file.
 *  - No function aborts or asserts on caller input or on bytes read from the
 *    file; bad input is an error code.
 *
 * Semantics follow differential dataflow's trace module (Description{lower,
 * upper, since}, the Cursor trait, spine_fueled) and Materialize persist's
 * compare_and_append.
 *
 * Caveats (as lmdb.h's):
 *  - Linking arrheap leaves the process's malloc alone: the pool's jemalloc
 *    is the library's own copy (Debian's libjemalloc_pic.a with every
 *    symbol made private), so a program keeps the C library's malloc, or
 *    its own jemalloc if it links one (tests/api/test_malloc.c).  That
 *    copy, like Debian's libjemalloc.so.2, uses static TLS: link
 *    libarrheap.so (or libarrheap.a) into the program; a dlopen() after
 *    start-up may fail with "cannot allocate memory in static TLS block"
 *    unless glibc reserves more (GLIBC_TUNABLES=
 *    glibc.rtld.optional_static_tls=8192).
 *  - Open a heap file at most once per process (LMDB's fcntl locks break when
 *    a second descriptor on the same file is closed); a second ah_open of the
 *    same file in one process fails with AH_EBUSY.
 *  - Any number of processes may open one heap; every name that resolves
 *    to the same file (symlinks, relative paths) shares one writer lock and
 *    one reader table.  A second name of the same file that cannot share
 *    its lock (a hard link, a file renamed or a lock file deleted while the
 *    heap is open) is refused with AH_EBUSY while another process has the
 *    heap open under the first.  Likewise one lock file never serves two
 *    files: a new heap created under the name of a heap that was renamed
 *    or deleted while open is refused with AH_EBUSY (in this process or
 *    another) while the old one stays open.
 *  - Never use a handle across fork(): calls from a forked child fail with
 *    AH_EFORK, and the parent is unaffected.  Open the heap anew in the child.
 *    A handle opened with AH_OPEN_BGMERGE has a merge thread, which the
 *    child does not have (ah_merge_wait there is AH_EFORK too).
 *  - A handle that writes a chunk of 64 KiB or more starts one writeback
 *    thread, which hashes and writes such chunks (pwrite) while the
 *    writing thread goes on; it blocks every signal, holds no transaction
 *    or lock, and lives until ah_close.  Commit and abort wait for its
 *    last write; its errors (AH_EIO, AH_EFULL) are returned by a later
 *    call of the same write transaction, at the latest ah_txn_commit.
 *  - A write transaction that writes 32 MiB of chunks or more on a heap
 *    opened without AH_OPEN_NOSYNC starts one flusher thread, which runs
 *    fdatasync on the file every 32 MiB while the transaction goes on, so
 *    that its commit waits for less; it blocks every signal, never runs
 *    while a commit syncs, and lives until ah_close.  A write error it
 *    sees fails the next ah_txn_commit of the handle (AH_EIO, AH_EFULL),
 *    of which nothing is then committed; an abort takes it too; and the
 *    handle then writes no more, as after any failed sync (ah_sync).
 *  - A long-lived read transaction pins every page it can see: the file
 *    grows while it lives.  Keep read snapshots short.
 *  - One write transaction at a time per heap (LMDB's writer lock): a second
 *    writer, in this or another process, waits for the first to end.
 *  - The heap maps its whole size limit: by default the size of its
 *    filesystem (the file is sparse).  Under an address-space limit
 *    (ulimit -v) or valgrind, set ah_open_opts.max_bytes.
 *  - Read hold leases (ah_hold_set) are judged by the wall clock
 *    (CLOCK_REALTIME) of the process that advances since; keep the clocks
 *    of the processes sharing a heap in step.  A binary older than read
 *    holds refuses a heap that held one (format 3), and a binary older
 *    than this one refuses a heap this one wrote a batch to (format 5:
 *    1 KiB checksum blocks, checked filter blocks; format 4 binaries read
 *    version-2 batch chunks but not these; format 6 once a batch of more
 *    than about 1,600 keys: filter blocks bound to their chunk, which
 *    format-5 binaries refuse; format 7, which this library writes with
 *    its first batch: records that list their chunks' XXH3, which format-6
 *    binaries refuse), but one that opened the heap before does not notice
 *    it:
 *    run one library version per heap at a time.  Hold records live in the
 *    meta DB beside the heap's meta record: a damaged page there (a hold's
 *    key flipped out of order, say) is a damaged meta, so ah_open fails
 *    with AH_ECORRUPT and the heap cannot be salvaged in place; restore it
 *    from a backup or snapshot.
 *  - After a failed sync (AH_EIO or AH_EFULL from ah_sync or from a commit's
 *    sync: the handle then refuses write transactions) stop writing to
 *    that filesystem until it is unmounted and mounted again (or the
 *    machine restarted), then open the heap and run ah_verify.  On ext4
 *    (Linux 6.18 here) the commits a reopened handle made after a failed
 *    writeback, each acknowledged and synced, read as zeros after the
 *    next remount (an outside test on a device failing writes on demand:
 *    AH_ECORRUPT, extents left unwritten); xfs kept them.  The library
 *    cannot see a remount: the rule is the operator's.
 *  - LMDB trusts its own pages.  Run ah_verify (in-process is safe) before
 *    reading a heap file you do not trust; once it (or ah_verify_pages)
 *    finds damaged LMDB pages, every call of this handle that would read
 *    them returns AH_ECORRUPT.  See ARCHITECTURE.md §4 for what no check
 *    can see (a txnid flip is a silent rollback to the previous commit).
 */
#ifndef ARRHEAP_H
#define ARRHEAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AH_VERSION_MAJOR 0
#define AH_VERSION_MINOR 1
#define AH_VERSION_PATCH 0
#define AH_VERSION_STRING "0.1.0"

/* The library's run-time version.  Any out pointer may be NULL.  Returns the
 * static string "MAJOR.MINOR.PATCH" (owned by the library, lives forever).
 * Source: SQLite's sqlite3_libversion. */
const char *ah_version(int *major, int *minor, int *patch);

/* Error codes: name, value, message.  One list makes the constants,
 * ah_strerror() and ah_err_name(). */
#define AH_ERRNO_MAP(X)                                                        \
	X(EINVAL, -32001, "invalid argument")                                  \
	X(ENOMEM, -32002, "out of memory")                                     \
	X(EIO, -32003, "I/O error")                                            \
	X(EFULL, -32004, "heap full: disk full or configured maximum reached") \
	X(EFORMAT, -32005, "not an arrheap heap, or of a foreign format")      \
	X(ECORRUPT, -32006, "heap corrupt: checksum or structure check failed") \
	X(EUPPER, -32007, "expected upper does not match the upper")           \
	X(EFRONTIER, -32008, "frontier violation")                             \
	X(ECOMPACTED, -32009, "as_of is before since: compacted away")         \
	X(ENOTREADY, -32010, "as_of is not before upper: not yet complete")    \
	X(EBADTXN, -32011, "transaction failed earlier: only abort accepted")  \
	X(ENOTFOUND, -32012, "not found")                                      \
	X(EEXIST, -32013, "already exists")                                    \
	X(EBUSY, -32014, "busy: heap already open in this process, or in use") \
	X(EREADONLY, -32015, "read-only transaction or heap")                  \
	X(ELIMIT, -32016, "a size or count limit was exceeded")                \
	X(EFORK, -32017, "handle used in a forked child process")              \
	X(ESTATE, -32018, "call not valid in the handle's current state")

enum {
#define AH__ERR_ENUM(name, val, msg) AH_##name = (val),
	AH_OK = 0,
	AH_ERRNO_MAP(AH__ERR_ENUM)
#undef AH__ERR_ENUM
};

/* A static message for an error code (any int; unknown codes get "unknown
 * error").  Never NULL; owned by the library.  Source: LMDB mdb_strerror,
 * libuv UV_ERRNO_MAP. */
const char *ah_strerror(int err);
/* The constant's name, "AH_EFULL" for AH_EFULL, "AH_OK" for 0, NULL for a
 * code that is not an arrheap code.  Owned by the library. */
const char *ah_err_name(int err);

typedef struct ah_heap ah_heap;
typedef struct ah_txn ah_txn;
typedef struct ah_cursor ah_cursor;
typedef struct ah_builder ah_builder;

/* ---------------------------------------------------------------- heap */

/* ah_open_opts.flags */
#define AH_OPEN_CREATE 0x1u      /* create the heap file if it does not exist */
#define AH_OPEN_RDONLY 0x2u      /* read only (MDB_RDONLY): no write txns */
#define AH_OPEN_NOSYNC 0x4u      /* relaxed: no sync per commit (MDB_NOSYNC) */
#define AH_OPEN_NOMETASYNC 0x8u  /* relaxed: no meta sync (MDB_NOMETASYNC) */
#define AH_OPEN_VERIFY_READS 0x10u /* seeks check whole chunks too (below) */
#define AH_OPEN_BGMERGE 0x20u    /* merges run on a merge thread (below) */

/* Every read checks what it reads, whatever the flags: a walk (scan, merge
 * input) checks each chunk's XXH3 whole, a seek checks each 1 KiB block of
 * a chunk (4 KiB in chunks written before heap format 5) when it first
 * reads from it, a key filter probe checks the 64-byte filter block it
 * reads, and every record (arrangement, batch, source position, meta)
 * carries a checksum over its key and bytes; damage is AH_ECORRUPT, never
 * a wrong answer (ARCHITECTURE.md §2).  Since heap format 7 a batch record
 * also lists each chunk's XXH3 and its key filter's checks are bound to
 * them, so in batches written since, a chunk left at its place by another
 * write of the same id (a write the storage lost or misdirected) is
 * AH_ECORRUPT too.  Not caught
 * (ARCHITECTURE.md §10): a checksum that matches by chance, damage made
 * after a reader checked the bytes, and an older copy of one of LMDB's own
 * pages (records, tree pages), which no parent vouches for.
 * AH_OPEN_VERIFY_READS makes seeks check whole chunks as well.
 *
 * Options for ah_open.  Set .size = sizeof(ah_open_opts) so the struct can
 * grow; zero-initialised fields take their defaults.  opts may be NULL. */
typedef struct ah_open_opts {
	size_t size;          /* sizeof(ah_open_opts) */
	unsigned flags;       /* AH_OPEN_* */
	uint64_t max_bytes;   /* heap size limit in bytes; 0 = bounded by disk.
	                       * Under 1 MiB it is taken as 1 MiB, and below
	                       * the data already held (the pages in use) as
	                       * that: never an error (ah_set_max_bytes
	                       * refuses such a limit).
	                       * A writable open while another process has
	                       * the heap open maps at least the file's size
	                       * (the largest map of those processes; LMDB
	                       * would truncate the file under theirs): the
	                       * limit is then the larger of the two */
	unsigned max_readers; /* LMDB reader slots; 0 = 126 */
	uint64_t merge_quantum; /* updates a suspended merge waits to have fuel
	                         * for before it runs again, and the size up to
	                         * which a merge runs at once; 0 = 65536 */
} ah_open_opts;

/* Opens (or, with AH_OPEN_CREATE, creates) the heap at PATH: one file PATH
 * plus its lock file PATH-lock (LMDB, MDB_NOSUBDIR), PATH resolved first
 * (realpath).  Creation is atomic and never replaces a file: of several
 * processes creating one heap at once, one creates it and the others open
 * it.  Opening maps the file;
 * it reads the two LMDB meta pages and the arrheap meta record, clears reader
 * slots of dead processes (mdb_reader_check) and nothing else: its cost does
 * not depend on the amount of data.
 * On success *out owns the heap until ah_close().
 * Errors: AH_EINVAL (NULL path/out, unknown flags, opts->size too small;
 * also when mmap refuses the map of the size limit with EINVAL, as it does
 * under valgrind: set max_bytes, see Caveats; an address-space limit,
 * ulimit -v, gives AH_ENOMEM),
 * AH_ENOTFOUND (no file and no AH_OPEN_CREATE, or no such directory), AH_EFORMAT (empty file, not
 * LMDB, LMDB but not arrheap, other format version, page size or byte
 * order, a "meta" DB of other flags), AH_ECORRUPT (truncated file, damaged
 * meta, LMDB meta pages whose txnids LMDB never writes (equal, on the
 * wrong page, both 0 on a used heap, >= 2^48), a damaged page of the main
 * or "meta" tree, a named DB missing or of other flags), AH_EBUSY (already open
 * in this process, or open in another process through a lock file of
 * another name: see Caveats; or every reader slot is held by a live
 * process: opening takes one briefly), AH_EREADONLY (AH_OPEN_CREATE with AH_OPEN_RDONLY on a
 * missing file), AH_EIO, AH_ENOMEM, AH_EFULL (no space to create).
 * A failed open changes nothing on disk, except that a heap AH_OPEN_CREATE
 * created and published stays (another process may be using it already).
 * Source: LMDB mdb_env_open, mdb_reader_check. */
int ah_open(const char *path, const ah_open_opts *opts, ah_heap **out);

/* Closes the heap and frees it.  Every transaction must have ended; if one
 * has not, returns AH_ESTATE and closes nothing.  Errors: AH_ESTATE,
 * AH_EFORK (called in a forked child: the handle is only forgotten).
 * Source: mdb_env_close. */
int ah_close(ah_heap *heap);

/* Flushes every commit to disk (for AH_OPEN_NOSYNC/NOMETASYNC heaps; a no-op
 * cost otherwise).  Errors: AH_EIO, AH_EFULL (the write-back found no
 * space), AH_EFORK.  A failed sync of the file is sticky, this call's or
 * any other's of the handle (a commit's, the flusher's: Caveats), because
 * the kernel reports a write error once and a second sync would say 0
 * for pages never written, a failed sync may be about pages of earlier
 * commits (an AH_OPEN_NOMETASYNC heap's meta page), and a filesystem may
 * go on saying 0 for pages it then reads as zeros (ext4, after a remount:
 * ARCHITECTURE.md §5).  What is on disk is then unknown (on an
 * AH_OPEN_NOSYNC heap the file may be damaged), every later ah_sync
 * returns the first error, write transactions are refused (ah_txn_begin
 * AH_EIO, and the commit of one open meanwhile, in another thread, fails
 * with AH_EIO, nothing of it written), and read transactions go on.
 * Close, reopen, and check with ah_verify (or restore a snapshot).
 * Source: mdb_env_sync(force). */
int ah_sync(ah_heap *heap);

/* Raises or lowers the heap's size limit in bytes (0 = bounded by disk).
 * Only with no transaction open in this process (with AH_OPEN_BGMERGE it
 * first waits for a slice of the merge thread in flight, and holds the
 * thread meanwhile).  Errors: AH_ESTATE (a txn is open), AH_EINVAL
 * (max_bytes, as given, below the data already held: the pages in
 * use, ah_heap_stat's pages_used * page_size; nothing changes; so 1 on a
 * heap holding 16 KiB is AH_EINVAL, where ah_open's max_bytes 1 maps
 * 1 MiB), AH_EBUSY
 * (a limit below the file's size while another process has the heap
 * open: LMDB would truncate the file under that process's map; nothing
 * changes), AH_EIO, AH_EFORK.  A limit under 1 MiB that is not below the
 * data held is accepted as 1 MiB (the map's minimum: map_bytes reports
 * it).  Source: mdb_env_set_mapsize. */
int ah_set_max_bytes(ah_heap *heap, uint64_t max_bytes);

typedef struct ah_heap_stat {
	uint32_t format_version;    /* the file's, as this handle knows it:
	                             * read at ah_open and raised by this
	                             * handle's own commits (a commit of
	                             * another handle or process that raises
	                             * it shows at the next open).  1
	                             * (read-only opens of old heaps), 2, 3
	                             * once it held a read hold (ah_hold_set),
	                             * 4 once a format-4 library wrote a batch
	                             * to it (version-2 batch chunks), 5 once a
	                             * format-5 library did (1 KiB checksum
	                             * blocks, checked key filter blocks), 6
	                             * once a format-6 library wrote a batch
	                             * whose key filter has a chunk of its own
	                             * (blocks bound to it), 7 once this
	                             * library wrote a batch (its record lists
	                             * its chunks' XXH3; ARCHITECTURE.md §2) */
	uint32_t page_size;         /* bytes */
	uint8_t uuid[16];           /* heap UUID, fixed at creation */
	uint64_t map_bytes;         /* virtual map size (= size limit) */
	uint64_t file_bytes;        /* apparent file size (st_size) */
	uint64_t file_alloc_bytes;  /* allocated blocks (st_blocks * 512) */
	uint64_t pages_used;        /* last used page + 1 */
	uint64_t pages_free;        /* pages on LMDB's free list */
	uint64_t last_txn_id;       /* id of the last commit */
	uint32_t readers_used;      /* reader slots in use by live processes */
	uint32_t readers_max;
} ah_heap_stat;

/* Fills *st (sizes in bytes, counts in pages of page_size).  Errors:
 * AH_EINVAL, AH_EIO, AH_EFORK, AH_EBUSY (every reader slot is held by a
 * live process: the free DB is read in a read txn).  Source: mdb_env_info, mdb_stat on the free
 * DB, fstat. */
int ah_heap_stat_get(ah_heap *heap, ah_heap_stat *st);

typedef struct ah_pool_stats {
	uint64_t active_bytes;   /* bytes in live allocations */
	uint64_t dirty_bytes;    /* freed pages not yet returned to the OS */
	uint64_t resident_bytes; /* pages resident in memory */
	uint64_t peak_active_bytes; /* highest active_bytes since open */
} ah_pool_stats;

/* Statistics of the heap's transient-memory pool in bytes (a dedicated
 * jemalloc arena): the writing thread's builders, sorts and merges.  The
 * merge thread of AH_OPEN_BGMERGE and a parallel merge's helper have
 * pools of their own, not counted here.  All zero before the handle's
 * first write (the pool is made then).  Errors: AH_EINVAL, AH_EIO,
 * AH_EFORK.  Source: jemalloc mallctl "epoch", "stats.arenas.<i>.*". */
int ah_pool_stats_get(ah_heap *heap, ah_pool_stats *st);

/* --------------------------------------------------------- transactions */

#define AH_TXN_RDONLY 0x1u

/* Begins a transaction.  A read transaction (AH_TXN_RDONLY) is an MVCC
 * snapshot of one commit across all arrangements; it never blocks a writer
 * and may be used from any one thread at a time (MDB_NOTLS), and ended in
 * any.  A write transaction waits for the heap's writer lock (one writer at
 * a time, across processes) and belongs to the thread that began it (the
 * lock is that thread's): every call on it or on its builder from another
 * thread returns AH_ESTATE and changes nothing, except ah_txn_abort and
 * ah_builder_abandon (see ah_txn_abort).  *out is owned by the caller until
 * commit or abort.
 * Errors: AH_EINVAL, AH_EREADONLY (write txn on a read-only heap), AH_EBUSY
 * (no free reader slot: every slot is held by a live process; those of
 * dead processes are cleared first), AH_ESTATE (this thread already has a write txn),
 * AH_EFORK, AH_ENOMEM, AH_EIO (also: a write txn after a sync of this
 * handle failed; see ah_sync), AH_EFULL.  Source: mdb_txn_begin. */
int ah_txn_begin(ah_heap *heap, unsigned flags, ah_txn **out);

/* Commits every change of the transaction atomically (one LMDB commit: all
 * arrangements' batches, spines, frontiers and source positions, or none)
 * and frees it.  Durable on return unless the heap was opened with a relaxed
 * mode.  A read transaction is simply ended.  The transaction is freed
 * whatever the result.  Errors: AH_EBADTXN (it was poisoned: nothing is
 * written), AH_ENOMEM and AH_EFULL (LMDB's commit could not grow its page
 * lists: nothing is written), AH_EFORK, and AH_EIO or AH_EFULL from a
 * sync: the flusher's fdatasync of this transaction's writes failed
 * (Caveats), or a sync of the handle failed while it was open (AH_EIO;
 * see ah_sync), or the commit's sync of its data failed: in these cases
 * nothing of it is written; or the sync of LMDB's meta page failed, after
 * the data's: then the outcome is unknown (the commit may or may not be
 * in the file).  In every case the failure is sticky (ah_sync): the
 * handle refuses new write transactions.  The code does not tell these
 * apart: when it
 * matters, close, reopen and read the source positions to learn whether
 * the commit is there.  A commit's syncs and ah_sync's never run at once
 * (one could take the other's error).  A write transaction committed
 * from a thread other than the one that began it is not freed: AH_ESTATE,
 * nothing changes, and it stays open for its owner.  After an ah_txn_abort
 * from another thread the owner's commit aborts, frees it and returns
 * AH_EBADTXN.  Source: mdb_txn_commit. */
int ah_txn_commit(ah_txn *txn);

/* Discards every change and frees the transaction; open cursors are
 * detached.  NULL is a no-op.  On a write transaction, from a thread other
 * than the one that began it, it neither discards nor frees anything (LMDB's
 * writer lock can only be released by its thread): it marks the txn, and
 * the owner's later calls on it return AH_EBADTXN, its commit discards,
 * frees and returns AH_EBADTXN, and its ah_txn_abort discards and frees.
 * Source: mdb_txn_abort. */
void ah_txn_abort(ah_txn *txn);

/* The detailed message of the last error in this transaction (it names the
 * frontiers for AH_EUPPER, AH_EFRONTIER, AH_ECOMPACTED, AH_ENOTREADY), or ""
 * when none.  Owned by the txn; valid until it ends or the next call on it.
 * Never NULL.  Source: SQLite's sqlite3_errmsg. */
const char *ah_txn_errmsg(const ah_txn *txn);

/* ------------------------------------------------------- arrangements */

/* Arrangement and source names: 1 to 64 bytes of [A-Za-z0-9_.:/-]. */
#define AH_NAME_MAX 64

/* Creates an empty arrangement NAME with upper = since = 0.
 * Errors: AH_EINVAL (bad name), AH_EEXIST, AH_EREADONLY, AH_EBADTXN, AH_EFULL,
 * AH_EIO.  Each poisons the txn.  Source: differential dataflow's arrange
 * (a trace starts with empty frontiers at the minimum time). */
int ah_arrangement_create(ah_txn *txn, const char *name);

typedef struct ah_arrangement_info {
	uint64_t upper;    /* every update has time < upper; 0 = none sealed */
	uint64_t since;    /* reads at as_of >= since are exact */
	uint64_t batches;  /* batches in the spine */
	uint64_t merging;  /* merges in progress */
	uint64_t updates;  /* stored (time, diff) entries, over all batches */
	uint64_t keys;     /* distinct keys summed over batches */
	uint64_t chunks;   /* data chunks over all batches (merge outputs
	                    * included; a key filter's chunk is not counted,
	                    * ah_verify_stats.chunks counts it) */
	uint64_t bytes;    /* chunk bytes used (payload, without class slack) */
	uint64_t chunk_bytes; /* chunk bytes reserved (size classes) */
} ah_arrangement_info;

/* Fills *info for NAME (counts in updates, keys, chunks; sizes in bytes).
 * Reads only; does not poison.  Errors: AH_EINVAL, AH_ENOTFOUND, AH_EBADTXN,
 * AH_ECORRUPT.  Source: differential dataflow's TraceReader (upper, since). */
int ah_arrangement_info_get(ah_txn *txn, const char *name,
                            ah_arrangement_info *info);

/* Drops arrangement NAME in txn: frees every batch of its trace, every
 * merge's output so far and all their chunks, and removes its record, so
 * that NAME no longer exists (a later ah_arrangement_create makes a new,
 * empty NAME).  The pages return to LMDB's free list when txn commits and
 * are reused once no read snapshot can still see them: a snapshot begun
 * before the commit goes on reading NAME whole.  Source positions are not
 * touched (they may describe other arrangements too); its read holds are
 * dropped with it.  Errors: AH_EINVAL
 * (bad name), AH_ENOTFOUND, AH_EREADONLY, AH_EBADTXN, AH_ESTATE (a builder
 * is open), AH_ECORRUPT (a batch record or chunk it lists is missing),
 * AH_EFULL, AH_EIO; each poisons the txn.  Source: LMDB mdb_drop;
 * RocksDB DropColumnFamily. */
int ah_arrangement_drop(ah_txn *txn, const char *name);

/* Iterates arrangement names in bytewise order: pass after = NULL for the
 * first; the name is copied to buf (caller's, at least AH_NAME_MAX + 1
 * bytes).  Returns 0 and fills buf, or AH_ENOTFOUND past the last.
 * Errors: AH_EINVAL, AH_EBADTXN, AH_ECORRUPT (a damaged table: a stored
 * key that is no valid name or not after `after`, so a loop that feeds
 * each name back as `after` always ends).  Source: mdb_cursor_get
 * MDB_SET_RANGE. */
int ah_arrangement_next(ah_txn *txn, const char *after, char *buf);

/* One update.  key and val are byte strings of any length (len 0 allowed,
 * ptr may then be NULL), ordered as unsigned bytes, shorter prefix first. */
typedef struct ah_update {
	const void *key;
	size_t key_len;
	const void *val;
	size_t val_len;
	uint64_t time;
	int64_t diff;
} ah_update;

/* Compare-and-append (persist's compare_and_append): appends the n updates
 * as one batch [expected_upper, new_upper) to NAME and sets its upper to
 * new_upper.  The caller's memory is copied; it may be reused on return.
 * Errors: AH_EUPPER (NAME's upper != expected_upper; the message names both),
 * AH_EFRONTIER (new_upper < expected_upper, or an update time outside
 * [expected_upper, new_upper)), AH_ELIMIT (updates of one (key, val, time)
 * sum outside int64; updates of different times never do: a compaction
 * that would overflow keeps them apart, see ARCHITECTURE.md §10),
 * AH_ENOTFOUND, AH_EINVAL, AH_EREADONLY, AH_EBADTXN, AH_EFULL, AH_ENOMEM,
 * AH_EIO.  On any error the transaction is poisoned (but for AH_ESTATE
 * from a thread that does not own it, which changes nothing).
 * Appending also spends merge fuel proportional to n (spine_fueled).
 * Source: Materialize persist's compare_and_append; differential
 * dataflow's Batcher (sort + consolidate) and trace::Description. */
int ah_append(ah_txn *txn, const char *name, uint64_t expected_upper,
              uint64_t new_upper, const ah_update *ups, size_t n);

/* A streaming append for inputs of any size: begin, push pieces, finish.
 * The builder sorts and consolidates in the pool in bounded memory (runs of
 * at most 64 MiB, merged).  Same checks and errors as ah_append: AH_EUPPER at
 * begin, AH_EFRONTIER at push.  *out is owned by the caller until finish or
 * abandon; the txn must not end before (commit with an open builder fails
 * with AH_ESTATE).  Only one builder per txn; other mutations of the txn
 * fail with AH_ESTATE while it is open.  Source: differential dataflow's
 * trace::Builder, external merge sort. */
int ah_builder_begin(ah_txn *txn, const char *name, uint64_t expected_upper,
                     uint64_t new_upper, ah_builder **out);
int ah_builder_push(ah_builder *b, const ah_update *ups, size_t n);
/* Seals the batch into the arrangement and frees the builder (whatever the
 * result).  If the builder's txn already ended (commit or abort with the
 * builder open), push returns AH_ESTATE and finish frees it and returns
 * AH_ESTATE.  From a thread other than the txn's (ah_txn_begin), push and
 * finish return AH_ESTATE and change nothing: the builder stays open. */
int ah_builder_finish(ah_builder *b);
/* Frees the builder and poisons the transaction (its chunks were written);
 * after its txn ended, only frees it.  From a thread other than the txn's it
 * acts as ah_txn_abort from there: the txn is marked (its owner's calls
 * return AH_EBADTXN) and the builder is freed when the txn ends. */
void ah_builder_abandon(ah_builder *b);

/* Advances NAME's upper to new_upper with no data (an empty batch costs no
 * chunk and no batch record).  Errors: AH_EUPPER, AH_EFRONTIER (new_upper <
 * expected_upper), AH_ENOTFOUND, AH_EINVAL, AH_EREADONLY, AH_EBADTXN; each
 * poisons the txn.  Source: persist's compare_and_append of an empty batch. */
int ah_advance(ah_txn *txn, const char *name, uint64_t expected_upper,
               uint64_t new_upper);

/* Logical compaction: sets NAME's since.  since never goes backwards and
 * never beyond upper: AH_EFRONTIER otherwise (message names both).  Nor
 * past a live read hold of NAME (ah_hold_set): a since above a live
 * hold's frontier is AH_EFRONTIER, and the message names the lowest such
 * hold, its frontier and its lease ("since 120 of 'orders' would pass hold
 * 'reader-2' at 99 (lease 30000 ms, renewed 2026-12-01T12:00:00.123Z)").
 * Holds whose lease ran out do not stop it; those it passes are kept,
 * marked released (ah_hold_info.released).  Reads at as_of < since fail
 * afterwards.  Errors: AH_EFRONTIER, AH_ENOTFOUND, AH_EINVAL, AH_EREADONLY,
 * AH_EBADTXN, AH_ECORRUPT (a damaged hold record anywhere in the heap: a
 * since is never decided without every hold), AH_ENOMEM, AH_EFULL, AH_EIO;
 * each poisons the txn.  Source: differential dataflow's
 * TraceReader::set_logical_compaction. */
int ah_set_since(ah_txn *txn, const char *name, uint64_t since);

/* Spends up to fuel units of merge work (one unit = one input update read;
 * 0 = no limit) on NAME: in-progress merges first, then merges that an idle
 * arrangement still deserves (batches behind since, or more than one batch),
 * so that retracted and compacted data gives its space back.  fuel 0 is one
 * merge of the whole trace (merges in progress are given up, not finished
 * first, so each update is read once), after which the arrangement is one
 * batch.  *idle (may be NULL) is set to 1 when nothing is left to do.
 * With AH_OPEN_BGMERGE and fuel > 0 the merge work is the merge thread's:
 * the call starts the merges the policy and an idle arrangement ask for
 * (as above) and leaves their computing to the thread, so *idle stays 0
 * until the thread has done it; each call grants at most the heap's
 * merge_quantum of credit, and a merge that falls 8 quanta behind runs
 * inline as at an append (backpressure: a loop of ah_maintain calls ends
 * even when the thread makes no progress: each merge, reading U updates,
 * takes about max(U, 9 x merge_quantum) / min(fuel, merge_quantum) calls,
 * and the merges a finished one starts add theirs, so fuel 1 is slow, as
 * inline).  A loop with no pause on an AH_OPEN_NOSYNC heap can outrun the
 * thread and end that way; a durable heap's ends once the thread's
 * installs land (20-26 calls in an outside test's durable runs).  fuel 0
 * runs inline always.
 * Errors: as ah_append.  Source: differential dataflow's Spine::exert
 * (spine_fueled). */
int ah_maintain(ah_txn *txn, const char *name, uint64_t fuel, int *idle);

/* The merge thread (AH_OPEN_BGMERGE; ARCHITECTURE.md §6 "The merge
 * thread").  A heap opened with it merges on a thread of its own: the
 * first commit that leaves a merge in progress starts it, ah_close stops
 * and joins it (a slice being computed is dropped; the spine stays as
 * last committed, every merge resumable from its stored boundary).  It
 * computes each slice of a merge (8 to 32 MiB of output, less at its
 * end) in a read txn, outside any write txn, and installs it in a short write txn of its own:
 * a write ah_txn_begin of this process waits only for such an install,
 * never for the compute.  Appends then spend no merge fuel themselves,
 * unless a merge falls behind the inline schedule by more than
 * 8 x merge_quantum units of credit (16 x for the merge the thread is on;
 * backpressure: it then runs inline as without the flag), so batches and
 * space stay bounded as without it.  Each install is a durable commit of
 * its own (with the syncs of the heap's mode).
 * Answers, durability and recovery are exactly as without it;
 * ah_maintain with fuel > 0 leaves its merges to the thread too (above),
 * with fuel 0 runs inline.  Only a merge in progress at a commit of this
 * handle is picked up (one left by an earlier process waits for the next
 * append or ah_maintain of its arrangement).  Never fork with the flag and
 * use the handle in the child (Caveats: the child has no merge thread). */
typedef struct ah_merge_stats {
	uint64_t installed;  /* slices installed */
	uint64_t discarded;  /* slices computed from a merge that had changed
	                      * by the install (dropped, advanced inline, given
	                      * up by ah_maintain): nothing written */
	uint64_t errors;     /* slices that failed (the merge is left as it was) */
} ah_merge_stats;

/* Waits until the merge thread has nothing left to do (no arrangement
 * queued, no slice in flight), fills *st (may be NULL) with its counts
 * since ah_open, and returns the first error a slice met since the last
 * call (0 if none; the merges it failed on are left as they were, and are
 * retried at the next commit or run inline by backpressure).  While a
 * caller waits, its core is idle: a merge not yet started whose inputs
 * hold 64 to 512 MiB is not sliced but run to its end in one install, on
 * two threads (as ah_maintain with fuel 0 runs one), so other writers of
 * the heap wait for that install (1 to 2 s at 512 MiB of input on the
 * machine of BENCHMARKS.md, whose full merge runs at 260-570 MB/s); it
 * counts as one slice installed.  Without
 * AH_OPEN_BGMERGE: returns 0 at once (*st zeroed).  Errors: AH_EINVAL,
 * AH_EFORK, AH_ESTATE (the calling thread holds a write txn: the thread
 * could never install), and a slice's: AH_EFULL, AH_EIO, AH_ECORRUPT,
 * AH_ENOMEM, AH_EBUSY. */
int ah_merge_wait(ah_heap *heap, ah_merge_stats *st);

/* ---------------------------------------------------------- read holds */

/* Durable named read holds: a reader that will read NAME at times >= F
 * sets a hold at frontier F, and no since of NAME passes F while the hold
 * lives, in this process or any other, across crashes and restarts: holds
 * are records in the heap, checksummed like every record, committed with
 * the transaction that sets them, carried by ah_backup and by snapshots
 * (ah_snapshot_push / restore).  An arrangement's since never passes the
 * meet (minimum frontier) of its live holds.
 *
 * A hold may carry a lease (ms): it lives until dropped, or until its
 * lease runs out without a renewal (renewed_ms + lease_ms <= now, in
 * CLOCK_REALTIME ms since the epoch; each ah_hold_set renews), so that a
 * reader that died stops holding compaction back.  A hold whose lease ran
 * out (expired) does not stop ah_set_since; once a since passes its
 * frontier it is marked released and kept (ah-dump holds shows it), and
 * the reader learns it from its next ah_hold_set (AH_ECOMPACTED).  The
 * clock is the wall clock of the process that decides: set back by J it
 * lets a hold live J longer (never forever); set forward by J it expires
 * holds up to J early, never earlier.
 *
 * Hold names follow the arrangement name rules (1 to AH_NAME_MAX bytes of
 * [A-Za-z0-9_.:/-]); a hold is named by (arrangement, hold name).  The
 * first hold written to a heap makes its file format 3 (ah_heap_stat),
 * which binaries that do not know holds refuse to open (AH_EFORMAT), so
 * none of them can compact past a hold.
 * Source: differential dataflow's TraceAgent (set_logical_compaction over
 * a MutableAntichain of its readers' frontiers); Materialize's ReadHold
 * and persist's since handles with leases. */

/* Creates hold HOLD of arrangement ARR at FRONTIER, or moves it there, and
 * renews its lease: lease_ms from now (0: no lease, it holds until
 * dropped).  Errors: AH_ECOMPACTED (FRONTIER < ARR's since: the message
 * says both, and whether the hold was released; nothing changes),
 * AH_EFRONTIER (the hold exists, is not released, and FRONTIER is below
 * its frontier: holds never move back), AH_EINVAL (NULL or bad names),
 * AH_ENOTFOUND (no arrangement ARR), AH_EREADONLY, AH_EBADTXN, AH_ECORRUPT
 * (the stored hold is damaged), AH_EFULL, AH_EIO; each poisons the txn.  A
 * released hold set again at a FRONTIER >= since lives again.  Source:
 * Materialize's ReadHold::try_downgrade, persist's heartbeat of a since
 * handle. */
int ah_hold_set(ah_txn *txn, const char *arrangement, const char *hold,
                uint64_t frontier, uint64_t lease_ms);

/* Removes hold HOLD of ARR.  since does not change (so dropping one hold
 * never compacts past another: the next ah_set_since is checked against
 * the holds left).  Errors: AH_ENOTFOUND (no arrangement ARR, or no such
 * hold), AH_EINVAL, AH_EREADONLY, AH_EBADTXN, AH_EFULL, AH_EIO; each
 * poisons the txn.  ah_arrangement_drop drops an arrangement's holds. */
int ah_hold_drop(ah_txn *txn, const char *arrangement, const char *hold);

typedef struct ah_hold_info {
	const char *arrangement; /* valid during the callback only */
	const char *name;        /* the hold's name (valid likewise) */
	uint64_t frontier;       /* since may not pass it: since <= frontier */
	uint64_t lease_ms;       /* 0: no lease (holds until dropped) */
	uint64_t renewed_ms;     /* CLOCK_REALTIME ms since the epoch of the
	                          * last ah_hold_set */
	int expired;             /* 1: lease ran out (renewed_ms + lease_ms
	                          * <= now) */
	int released;            /* 1: expired AND a since advanced past its
	                          * frontier: it holds nothing any more */
} ah_hold_info;

typedef int (*ah_hold_fn)(const ah_hold_info *h, void *user);

/* Calls fn for every hold of ARR (NULL: of every arrangement), by
 * arrangement name then hold name; expired is judged against the clock
 * at the call.  Reads only; does not poison.  A nonzero return from fn
 * stops the walk and is returned.  Errors: AH_EINVAL (NULL fn, bad name),
 * AH_ENOTFOUND (no arrangement ARR), AH_ECORRUPT (a damaged hold record;
 * the walk stops), AH_EBADTXN, AH_EFORK, or fn's value. */
int ah_hold_foreach(ah_txn *txn, const char *arrangement, ah_hold_fn fn,
                    void *user);

/* *meet = the largest since ARR's live holds allow: the minimum frontier
 * over its holds that are neither expired nor released; UINT64_MAX (and
 * 0 returned) when it has none.  Reads only; does not poison.  Errors:
 * AH_EINVAL, AH_ENOTFOUND, AH_ECORRUPT, AH_EBADTXN, AH_EFORK.  Source:
 * differential dataflow's MutableAntichain::frontier of the holds. */
int ah_hold_meet(ah_txn *txn, const char *arrangement, uint64_t *meet);

/* ------------------------------------------------------------- sources */

/* Records POS (len bytes, opaque: a Kafka offset, an LSN, a file offset) as
 * source SOURCE's position, committed atomically with the data.  The bytes
 * are copied.  Errors: AH_EINVAL (bad name, len > 65536), AH_EREADONLY,
 * AH_EBADTXN, AH_EFULL, AH_EIO; each poisons the txn.  Source: the source
 * contract in ARCHITECTURE.md (Kafka consumer offsets committed with the
 * results; PostgreSQL confirmed_flush_lsn). */
int ah_source_put(ah_txn *txn, const char *source, const void *pos, size_t len);

/* Looks up SOURCE's position: *pos points into the map, valid until the txn
 * ends (in a write txn: until its next mutation).  Does not poison.
 * Errors: AH_ENOTFOUND, AH_EINVAL, AH_EBADTXN.  Source: as ah_source_put. */
int ah_source_get(ah_txn *txn, const char *source, const void **pos,
                  size_t *len);

/* Iterates source names in bytewise order, as ah_arrangement_next (same
 * buffer rule, same errors). */
int ah_source_next(ah_txn *txn, const char *after, char *buf);

/* ------------------------------------------------------------- cursors */

/* Cursors (differential dataflow's Cursor trait).  A cursor merges all
 * batches of NAME by key, then val; times are reported advanced to the
 * arrangement's since.
 *
 * Return values: every movement returns 1 when the cursor is positioned
 * afterwards (on a key for key movements, on a val of the current key for
 * val movements), 0 at the end, or a negative AH_E* error.  Errors are
 * sticky: after the first error every call on the cursor returns that
 * error, key_valid/val_valid return 0, and ah_cursor_close returns it.
 * Only the errors about one call's arguments, which leave the cursor where
 * it was, are not: AH_EINVAL, AH_ECOMPACTED and AH_ENOTREADY (as_of
 * outside [since, upper)), AH_ELIMIT (a sum that does not fit int64).  So
 * a loop driven by the movements' values cannot end "successfully" on
 * damage, also when the damage is met in an inner loop:
 *
 *	int rc = ah_cursor_open(txn, name, &c);
 *	if (rc == 0) {
 *		for (rc = ah_cursor_key_valid(c); rc == 1; rc = ah_cursor_step_key(c))
 *			for (rc = ah_cursor_val_valid(c); rc == 1; rc = ah_cursor_step_val(c))
 *				if ((rc = ah_cursor_accumulate(c, as_of, &n)) < 0)
 *					goto done;
 *	done:	rc = rc < 0 ? (ah_cursor_close(c), rc) : ah_cursor_close(c);
 *	}
 *
 * A cursor belongs to its txn: once the txn ends, or a mutation runs in
 * the same write txn, it is detached and every call on it returns
 * AH_ESTATE (close it still).  Source: differential dataflow's
 * trace::cursor::Cursor and CursorList; LMDB's mdb_cursor_get (0,
 * MDB_NOTFOUND or an error). */

/* Opens a cursor positioned at the first key of NAME and its first val
 * (reading the first chunk of every batch).  *out is owned by the caller
 * until ah_cursor_close.  Errors: AH_EINVAL, AH_ENOTFOUND, AH_EBADTXN,
 * AH_ENOMEM, AH_ECORRUPT (a record or the first chunk of a batch is
 * damaged): then *out is NULL and nothing is to be closed. */
int ah_cursor_open(ah_txn *txn, const char *name, ah_cursor **out);
/* As ah_cursor_open, positioned at the first key >= KEY (len bytes; ptr may
 * be NULL when len is 0) instead: every batch binary-searches its fence
 * keys and reads only the one chunk that can hold KEY, so a point query
 * costs one chunk per batch.  Same errors. */
int ah_cursor_open_at(ah_txn *txn, const char *name, const void *key,
                      size_t len, ah_cursor **out);
/* A cursor over the one batch BATCH_ID of NAME (an id of
 * ah_batch_foreach: a batch of the trace or a merge's output so far),
 * positioned at its first key, for seeing a batch's raw updates (tools:
 * ah-dump updates, history).  Unlike the cursors above it reports times
 * as stored in that batch, NOT advanced to NAME's since; so a time may be
 * below since (a batch not yet merged since since advanced), and a
 * merge's output holds updates its inputs still hold too.  The movements
 * and walks are those of every cursor; ah_cursor_accumulate keeps the
 * frontier rule of NAME (as_of in [since, upper)) and sums this batch's
 * share of the answer, which advancing times would not change.  Errors:
 * as ah_cursor_open, and AH_ENOTFOUND also when NAME has no batch
 * BATCH_ID (the txn's message says which).  Source: RocksDB sst_dump
 * --command=scan (one file's entries with their sequence numbers). */
int ah_cursor_open_batch(ah_txn *txn, const char *name, uint64_t batch_id,
                         ah_cursor **out);
/* Frees the cursor (also after its txn ended; NULL is a no-op).  Returns
 * the cursor's first error (0 if none): the last chance to see one. */
int ah_cursor_close(ah_cursor *c);

/* 1 while the cursor is on a key (val), 0 past the end or once the cursor
 * has failed (the error is what the failing call returned, and what later
 * calls and ah_cursor_close return). */
int ah_cursor_key_valid(const ah_cursor *c);
int ah_cursor_val_valid(const ah_cursor *c);

/* The current key (val): *ptr points into the map, valid until the txn ends.
 * Errors: AH_ESTATE (not on a key / val), AH_EINVAL. */
int ah_cursor_key(ah_cursor *c, const void **ptr, size_t *len);
int ah_cursor_val(ah_cursor *c, const void **ptr, size_t *len);

/* Movement: 1, 0 or an error, as above.  step past the end stays at the
 * end (0).  seek_key moves to the first key >= the given one (forward
 * only, as DD's); seek_val to the first val >= the given one within the
 * current key.  Moving to a key positions on its first val.  Errors:
 * AH_ECORRUPT (a chunk failed its checks), AH_EINVAL, AH_ESTATE (cursor
 * used after its transaction ended, or misuse), AH_EBADTXN. */
int ah_cursor_step_key(ah_cursor *c);
int ah_cursor_seek_key(ah_cursor *c, const void *key, size_t len);
int ah_cursor_step_val(ah_cursor *c);
int ah_cursor_seek_val(ah_cursor *c, const void *val, size_t len);
int ah_cursor_rewind_keys(ah_cursor *c);
int ah_cursor_rewind_vals(ah_cursor *c);

/* Walks the (time, diff) pairs of the current (key, val) over all batches
 * (DD's map_times), times advanced to since, not sorted across batches.
 * time_next returns 1 and fills *time and *diff, 0 at the end, or an error.
 * times_rewind restarts the walk (0 or an error). */
int ah_cursor_time_next(ah_cursor *c, uint64_t *time, int64_t *diff);
int ah_cursor_times_rewind(ah_cursor *c);

/* Sums the diffs of the current (key, val) with time <= as_of, walking its
 * times (afterwards time_next returns 0 until times_rewind).  Returns 0 and
 * sets *sum.  as_of must lie in [since, upper): AH_ECOMPACTED (as_of <
 * since) or AH_ENOTREADY (as_of >= upper) otherwise, never an empty
 * success (check first with ah_check_as_of: like every cursor error, these
 * are sticky).  Errors also AH_ESTATE, AH_ELIMIT (sum overflows int64),
 * AH_ECORRUPT.  Source: differential dataflow's accumulation in
 * consolidation; persist's snapshot(as_of) frontier rules. */
int ah_cursor_accumulate(ah_cursor *c, uint64_t as_of, int64_t *sum);

/* Checks as_of against NAME's [since, upper) as ah_cursor_accumulate does;
 * the txn's message names the frontier.  Does not poison the txn.
 * Errors: AH_ECOMPACTED, AH_ENOTREADY, AH_ENOTFOUND, AH_EINVAL.  Source:
 * persist's snapshot(as_of): since <= as_of < upper. */
int ah_check_as_of(ah_txn *txn, const char *name, uint64_t as_of);

/* ---------------------------------------------------------- inspection */

/* Read-only views of a heap's internals for tools (ah-dump), monitoring and
 * tests.  They accept any transaction, read snapshots included, never
 * change the heap and never poison the transaction.  Walks report through
 * a callback: a callback returning non-zero stops the walk, and the
 * function then returns that value.  Pointers handed to a callback are
 * valid only during the call.
 * Source: LMDB mdb_stat, mdb_reader_list, mdb_env_copyfd2; differential
 * dataflow's trace::Description for the batch fields. */

typedef struct ah_batch_info {
	uint64_t id;          /* batch id: stable while the batch lives */
	uint64_t lower, upper, since; /* its Description (logical times) */
	uint64_t updates;     /* (time, diff) entries */
	uint64_t keys;        /* distinct keys (a key split over chunks once) */
	uint64_t vals;        /* distinct (key, val) */
	uint64_t chunks;      /* data chunks (not its key filter's chunk) */
	uint64_t bytes;       /* chunk body bytes used */
	uint64_t chunk_bytes; /* chunk bytes reserved (size classes) */
	int partial;          /* 1: the output so far of a merge in progress,
	                       * not part of the chain readers see */
	uint64_t filter_keys; /* its key filter (ARCHITECTURE.md §2): keys */
	uint64_t filter_bytes;/* hashed and bytes of blocks; 0 and 0 for a
	                       * batch without one (always visited) */
	unsigned format;      /* layout of its chunks (ARCHITECTURE.md §2):
	                       * 2 = every chunk is batch chunk version 2
	                       * (written by this library); 1 = it may hold
	                       * version-1 chunks (written before format 4,
	                       * rewritten by the merge that takes it) */
} ah_batch_info;

typedef int (*ah_batch_fn)(const ah_batch_info *b, void *user);

/* Calls fn for every batch of NAME: the chain oldest first, then the
 * partial outputs of merges in progress.  Cost: one batch record read per
 * batch, no chunk read.  Errors: AH_EINVAL (NULL txn or fn, bad name),
 * AH_ENOTFOUND (no such arrangement), AH_ECORRUPT (a record fails to
 * decode), AH_ENOMEM, AH_EBADTXN, AH_EFORK, or fn's value. */
int ah_batch_foreach(ah_txn *txn, const char *name, ah_batch_fn fn,
                     void *user);

typedef struct ah_chunk_info {
	uint64_t id;           /* chunk id */
	uint64_t batch;        /* the batch whose record lists it */
	uint32_t class_pages;  /* size class: pages of the chunk */
	uint64_t bytes;        /* body bytes used */
	uint64_t stored_bytes; /* bytes of the chunk in the file: header, body
	                        * capacity and zeroed tail, all checksummed */
	uint64_t file_offset;  /* byte offset of its first byte in the file */
	uint64_t xxh3;         /* stored XXH3-64 that stands for the chunk:
	                        * of its header and block checksums (format 2,
	                        * ARCHITECTURE.md §2), of bytes [8, stored_bytes)
	                        * (format 1 and jumbo chunks) */
	uint32_t block_bytes;  /* bytes per checksum block, which a seek checks
	                        * alone: 1 KiB for chunks this library writes
	                        * (4 KiB pages), the page size for chunks
	                        * written before heap format 5, 0 for chunks
	                        * checked only whole (format 1, jumbo) */
} ah_chunk_info;

typedef int (*ah_chunk_fn)(const ah_chunk_info *c, void *user);

/* Calls fn for every data chunk of NAME, batch by batch in the order of
 * ah_batch_foreach, each batch's chunks in key order (a key filter's own
 * chunk is not listed: ah_batch_info.filter_bytes; ah_verify checks and
 * counts it).  Reads each chunk's
 * header (one page), not its body; checksums are not recomputed.
 * Errors: as ah_batch_foreach; AH_ECORRUPT also for a chunk that is
 * missing or whose header is damaged, or (batches written since heap
 * format 7) whose XXH3 is not the one its batch record lists: a chunk of
 * another write of its id (ah_verify names such chunks). */
int ah_chunk_foreach(ah_txn *txn, const char *name, ah_chunk_fn fn,
                     void *user);

/* One problem found by ah_verify. */
typedef struct ah_problem {
	const char *arrangement; /* its name, or "" when it belongs to none */
	uint64_t batch;          /* batch id, or 0 */
	uint64_t chunk;          /* chunk id, or 0 */
	const char *message;     /* one line, no newline */
} ah_problem;

typedef int (*ah_problem_fn)(const ah_problem *p, void *user);

typedef struct ah_verify_stats {
	uint64_t arrangements;
	uint64_t batches;       /* batch records checked, partial ones too */
	uint64_t chunks;        /* chunks whose checksum was recomputed */
	uint64_t chunk_bytes;   /* bytes hashed */
	uint64_t problems;      /* problems reported to fn */
} ah_verify_stats;

/* Checks everything the snapshot holds.  First LMDB's own pages, without
 * LMDB (as ah_verify_pages): a tree found damaged is reported, skipped by
 * the checks below, and refused from then on (see ah_verify_pages), so
 * that ah_verify is safe on any file, in-process: it never hangs, faults or
 * lets liblmdb abort.  Then every chunk's header and XXH3 over its whole
 * stored bytes; every arrangement's spine (S1-S4: since <= upper,
 * contiguous Descriptions, merges disjoint, no empty batch) and every batch
 * (B1-B5: sorted, consolidated, no zero diff, times inside the Description,
 * offsets in bounds, counts), batch since <= the arrangement's since; every
 * chunk referenced by exactly one batch record and every batch record by
 * exactly one spine (chain or merge output), none leaked; every stored
 * arrangement name a valid name; every read hold record (checksum, layout,
 * names, an arrangement that exists, since <= frontier unless released,
 * frontier < since when released).  Each problem is passed to fn (may be
 * NULL: then only counted) and the check goes on.  Cost: the page check,
 * then every chunk read once for its checksum and once more for its
 * structure (the second from the page cache).  *st (may be NULL) gets the
 * totals.  Returns 0 when the check ran to the end, whatever it found.
 * An engine that does not trust a heap file runs this first, in the same
 * process, and reads nothing if it reports a problem (ARCHITECTURE.md §4
 * says what it cannot see).  Errors: AH_EINVAL, AH_ENOMEM, AH_EBADTXN,
 * AH_EFORK, AH_EBUSY and AH_EIO (as ah_verify_pages), or fn's value. */
int ah_verify(ah_txn *txn, ah_problem_fn fn, void *user,
              ah_verify_stats *st);

#define AH_PAGE_TREES 7

typedef struct ah_page_stats {
	uint64_t txn_id;        /* the snapshot checked (commit id) */
	uint64_t pages;         /* its pages: last used page + 1 */
	uint64_t pages_free;    /* of those, on LMDB's free list */
	uint64_t problems;      /* problems reported to fn */
	struct ah_tree_stats {
		const char *name;   /* "arr", "batch", "source", "meta", "chunks"
		                     * (the named DBs), "main" (LMDB's catalog of
		                     * them), "free" (LMDB's free list) */
		uint32_t depth;     /* B-tree levels; 0: empty */
		uint64_t branch_pages, leaf_pages, overflow_pages;
		uint64_t entries;   /* key/value pairs */
		int damaged;        /* 1: refused from now on (AH_ECORRUPT) */
	} trees[AH_PAGE_TREES];
} ah_page_stats;

/* Checks the structure of every LMDB page of txn's snapshot, reading the
 * file itself, never through LMDB: the meta page, every branch, leaf and
 * overflow page reachable from the main DB, the named DBs and the free
 * list (page numbers, flags, bounds of every node, key order within pages
 * and against their parents' separators, equal depth, the counts in each
 * DB's record, no page reached twice, the free list against the trees and
 * LMDB's page accounting).  Problems go to fn (may be NULL) and are
 * counted in *st (may be NULL), with every tree's depth and page counts.
 * A tree found damaged (every tree, if the meta or the main DB is) is
 * refused by every later call of this heap handle that would read it
 * through LMDB, which trusts its pages: they return AH_ECORRUPT instead,
 * until a later check finds it sound.  Cost: reads every B-tree page and
 * the first page of every chunk; one byte of memory per page.  Returns 0
 * when the check ran, whatever it found.  Errors: AH_EINVAL, AH_ENOMEM,
 * AH_EIO, AH_EBADTXN, AH_EFORK, AH_EBUSY (the snapshot's meta page was
 * overwritten by two later commits: check in a fresh read transaction), or
 * fn's value.  A meta page that stably holds another txnid than the
 * snapshot's and is no later commit's (a txnid damaged after the open:
 * LMDB reads whatever tree that page names) is not AH_EBUSY but a problem naming the meta page
 * and both txnids; the check goes on over the tree LMDB reads
 * (ARCHITECTURE.md §4 says which txnid flips stay invisible).  Source:
 * LMDB mdb_audit, mdb_page_search, mdb_node_search. */
int ah_verify_pages(ah_txn *txn, ah_problem_fn fn, void *user,
                    ah_page_stats *st);

typedef struct ah_space_info {
	uint32_t page_size;         /* bytes */
	uint64_t pages_used;        /* last used page + 1 (latest commit) */
	uint64_t pages_free;        /* pages on LMDB's free list (snapshot) */
	uint64_t pages_pinned;      /* of those, not reusable yet: freed by a
	                             * commit the oldest reader may still see */
	uint64_t free_runs;         /* runs of consecutive free pages */
	uint64_t free_largest_run;  /* pages in the longest run */
	uint64_t chunk_pages;       /* pages held by chunks */
	uint64_t chunks;            /* chunks in the heap */
	uint64_t tree_pages;        /* B-tree pages of every table and of the
	                             * free list itself */
	uint64_t last_txn_id;       /* the latest commit */
	int64_t oldest_reader_pid;  /* the other process's reader with the
	                             * oldest snapshot; 0 when none */
	uint64_t oldest_reader_txn; /* its snapshot (commit id) */
	uint64_t oldest_reader_age; /* commits made since its snapshot */
} ah_space_info;

/* Fills *si from txn's snapshot (the free list) and the reader table.
 * Readers of the calling process are not counted as holding pages back;
 * slots of dead processes are cleared first, so a dead pid is never named.
 * Cost: reads the whole free list.  txn must be a read txn (LMDB walks
 * its free list only there).  Errors: AH_EINVAL (also a write txn, which
 * it leaves usable), AH_ECORRUPT, AH_ENOMEM, AH_EIO, AH_EBADTXN,
 * AH_EFORK. */
int ah_space_get(ah_txn *txn, ah_space_info *si);

typedef struct ah_reader_info {
	int64_t pid;       /* owning process */
	uint64_t thread;   /* pthread id, as LMDB records it */
	uint64_t txn_id;   /* snapshot held (commit id); 0 = slot idle */
	uint64_t age;      /* commits made since that snapshot (0 if idle) */
	int self;          /* 1: a slot of the calling process */
} ah_reader_info;

typedef int (*ah_reader_fn)(const ah_reader_info *r, void *user);

/* Calls fn for each reader slot held by a live process (mdb_reader_list,
 * after mdb_reader_check has cleared the slots of dead processes).
 * Errors: AH_EINVAL, AH_EIO, AH_EFORK, or fn's value. */
int ah_reader_foreach(ah_heap *heap, ah_reader_fn fn, void *user);

/* Writes a consistent, compacted copy of the heap's latest commit to the
 * new file PATH (mdb_env_copyfd2 with MDB_CP_COMPACT: it runs in a read
 * snapshot and never blocks a writer, in this or another process), then
 * fsyncs it.  The copy is itself a heap: restoring is ah_open on it (chunk
 * file offsets differ, contents and checksums are equal).  PATH must not
 * exist.  The copy is written under a temporary name beside PATH and
 * published complete, never replacing a file, so PATH never holds a partial
 * copy, even if the process is killed; on failure nothing is left.  Errors: AH_EINVAL, AH_EEXIST,
 * AH_ENOTFOUND (no such directory), AH_EREADONLY (no permission), AH_EFULL,
 * AH_EIO, AH_EFORK, AH_EBUSY (every reader slot is held by a live
 * process: the copy runs in a read snapshot). */
int ah_backup(ah_heap *heap, const char *path);

/* ah_backup_opts.flags */
#define AH_BACKUP_NEW_UUID 0x1u  /* the copy gets a UUID of its own */

/* Options for ah_backup_v2.  Set .size = sizeof(ah_backup_opts); zero
 * fields take their defaults.  opts may be NULL (all defaults). */
typedef struct ah_backup_opts {
	size_t size;      /* sizeof(ah_backup_opts) */
	unsigned flags;   /* AH_BACKUP_* */
} ah_backup_opts;

/* As ah_backup; with AH_BACKUP_NEW_UUID the copy's meta record gets a
 * fresh random UUID (v4) before it is published, so the copy and the
 * heap it came from, which may both live on and diverge, can be told
 * apart (ah_heap_stat.uuid).  Without the flag the copy is exact, UUID
 * included: the restore point of one heap.  Contents, frontiers, source
 * positions and checksums are equal either way.  Errors: as ah_backup,
 * and AH_EINVAL for unknown flags or opts->size too small.  Source:
 * xfs_copy (a new UUID for every copy unless -d). */
int ah_backup_v2(ah_heap *heap, const char *path, const ah_backup_opts *opts);

/* ----------------------------------------------------------- snapshots */

/* Incremental snapshots of a heap in a directory DIR of plain files whose
 * names are fixed once written, so `rclone sync` ships DIR to any object
 * store (ARCHITECTURE.md §9, layout and manifest format in §2):
 *
 *   DIR/objects/ID-XXH3    one chunk's stored bytes (an LMDB value, byte
 *                          for byte); sealed chunks never change, so an
 *                          object is written once and named by many
 *                          snapshots
 *   DIR/manifests/SNAP     one text manifest per snapshot, published last
 *   DIR/tmp/, DIR/lock     work files of pushes and prunes (not shipped,
 *                          not needed to restore)
 *
 * A snapshot id SNAP is "UUID8-SEQ": the first 8 hex digits of the heap's
 * UUID and the snapshot's number among that heap's, from 1, 6 digits
 * ("3f2a9c1e-000007").  Snapshots of several heaps may share one DIR and
 * its objects; each manifest names its heap's whole UUID.  Source:
 * Feldera's checkpoint sync (rclone), Flink's incremental checkpoints
 * (shared immutable files plus a manifest). */

#define AH_SNAPSHOT_ID_MAX 24  /* bytes of an id, NUL included */

typedef struct ah_snapshot_source {
	const char *name;       /* source name (NUL-terminated) */
	const void *pos;        /* its stored position bytes */
	size_t len;
} ah_snapshot_source;

/* One snapshot, as a push made it or a manifest describes it. */
typedef struct ah_snapshot_info {
	char id[AH_SNAPSHOT_ID_MAX];  /* "UUID8-SEQ" */
	uint8_t uuid[16];       /* the heap's (ah_heap_stat.uuid) */
	uint64_t seq;           /* 1, 2, ... per heap */
	int64_t time_ns;        /* push time, ns since the Unix epoch */
	uint64_t txn_id;        /* the heap commit the snapshot shows */
	uint64_t arrangements;
	uint64_t objects;       /* chunks it names */
	uint64_t bytes;         /* their bytes: the restored heap's chunks */
	uint64_t objects_new;   /* of those, written by this push */
	uint64_t bytes_new;
	uint64_t manifest_bytes;
	size_t nsources;        /* source positions, by name order */
	const ah_snapshot_source *sources; /* valid during the callback only;
	                                    * NULL from ah_snapshot_push */
	int status;             /* ah_snapshot_foreach: 0, or why the manifest
	                         * could not be used (only id and seq are set
	                         * then): AH_ECORRUPT damaged, AH_EFORMAT
	                         * another version, AH_EIO or AH_EREADONLY
	                         * could not be read */
	char message[160];      /* on failure: what and which file; else "" */
} ah_snapshot_info;

/* Writes a snapshot of HEAP's latest commit into DIR (created if missing;
 * its parent must exist).  One read transaction: the writer, in this or
 * another process, goes on committing and merging meanwhile.  Every chunk
 * is read whole and its checksums checked, each data chunk's XXH3
 * against the one its batch record lists (heap format 7), and each key
 * filter against its record's XXH3 of its blocks; a damaged heap, or one
 * holding a chunk of another write of the same id (a lost write), is
 * refused: AH_ECORRUPT, nothing published.  Chunks
 * whose object an earlier
 * snapshot of this heap already wrote are not read or written again, so a
 * push writes the chunks sealed since the last push, plus the manifest
 * (the heap's records: spines, batch records, source positions, about
 * 100 bytes per chunk).  Objects are written under DIR/tmp and renamed,
 * each fsync'd, and the manifest is published last with link(2), which
 * never replaces: a push killed at any moment leaves every earlier
 * snapshot whole and no manifest of its own.  Pushes of one heap to one
 * DIR may run at once (each gets its own SEQ); ah_snapshot_prune waits
 * for them (flock on DIR/lock).  *out (may be NULL) gets the snapshot;
 * its message says what failed.  Errors: AH_EINVAL, AH_ENOTFOUND (DIR's
 * parent missing, or DIR not a directory), AH_EREADONLY (DIR not writable), AH_ECORRUPT (a damaged
 * chunk or record in the heap), AH_EEXIST (DIR holds another heap whose
 * UUID starts with the same 8 digits), AH_EFULL, AH_EIO, AH_ENOMEM,
 * AH_EFORK, AH_EBUSY (as ah_verify_pages, or every reader slot is held
 * by a live process: the push reads in a snapshot). */
int ah_snapshot_push(ah_heap *heap, const char *dir, ah_snapshot_info *out);

/* ah_snapshot_restore flags */
#define AH_RESTORE_NEW_UUID 0x1u  /* the new heap gets a UUID of its own */

/* Builds a new heap at PATH (which must not exist) from snapshot ID of DIR
 * (NULL: the newest, when DIR holds one heap's snapshots).  The manifest's
 * checksum is checked, then every object against the manifest (size and
 * XXH3-128) and its chunk checksums, before it is stored; the heap is
 * written under a temporary name beside PATH, committed, checked whole
 * with ah_verify, and published without replacing anything, so PATH
 * never holds a partial heap, even if the process is killed; on failure
 * nothing is left.  The new heap reads exactly as the snapshot's
 * transaction did: arrangements, frontiers, batches, source positions;
 * it keeps the snapshot's UUID (it continues that heap: its later pushes
 * to DIR follow its SEQs) unless AH_RESTORE_NEW_UUID (a copy that lives
 * beside the original; give it its own).  Its commit ids (txn_id,
 * ah_heap_stat.last_txn_id) start again from 1: they are LMDB's, per
 * file; SEQ, not the commit id, orders a heap's snapshots.  DIR is only
 * read (DIR/lock is taken shared when it exists, so a prune in DIR waits).
 * *out (may be NULL) gets the
 * snapshot's description; its message names what failed.  Errors:
 * AH_EINVAL (bad arguments or flags, malformed id), AH_EEXIST (PATH
 * exists), AH_ENOTFOUND (no such DIR or snapshot), AH_ESTATE (ID NULL and
 * DIR holds snapshots of more than one heap), AH_ECORRUPT (a damaged
 * manifest; an object missing, truncated or altered; the result does not
 * verify; an object that is not a regular file), AH_EFORMAT (another
 * manifest version or page size), AH_EFULL,
 * AH_EIO, AH_ENOMEM. */
int ah_snapshot_restore(const char *dir, const char *id, const char *path,
                        unsigned flags, ah_snapshot_info *out);

typedef int (*ah_snapshot_fn)(const ah_snapshot_info *s, void *user);

/* Calls fn for each snapshot in DIR, by heap UUID then SEQ (oldest
 * first), reading each manifest (its checksum checked).  A manifest
 * that cannot be used is passed with its status set.  A nonzero return from fn
 * stops the walk and is returned.  Errors: AH_EINVAL, AH_ENOTFOUND (no
 * DIR), AH_ENOMEM, AH_EIO, or fn's value. */
int ah_snapshot_foreach(const char *dir, ah_snapshot_fn fn, void *user);

typedef struct ah_prune_info {
	uint64_t snapshots_removed;
	uint64_t objects_removed;   /* objects no kept snapshot names */
	uint64_t bytes_removed;
	uint64_t snapshots_kept;
	char message[160];          /* on failure: what and which file */
} ah_prune_info;

/* Keeps the KEEP (>= 1) newest snapshots of each heap in DIR and deletes
 * the older manifests, then every object no kept manifest names and the
 * leftovers of killed pushes.  An object a kept snapshot needs is never
 * deleted.  Waits for running pushes (exclusive flock on DIR/lock).  DIR is
 * arrheap's: any file in DIR/objects that no kept manifest names goes.  A
 * damaged manifest among the kept ones stops it before anything is
 * deleted (AH_ECORRUPT; older damaged ones are deleted).  *out may be
 * NULL.  Errors: AH_EINVAL, AH_ENOTFOUND, AH_ECORRUPT, AH_EREADONLY,
 * AH_EIO, AH_ENOMEM. */
int ah_snapshot_prune(const char *dir, unsigned keep, ah_prune_info *out);

#ifdef __cplusplus
}
#endif
#endif /* ARRHEAP_H */
