/*
 * heap/heap_int.h - private to heap/ sources: the structs behind the heap and
 * heap_txn handles, and the helpers the heap files share (error translation,
 * space preallocation, format checks).
 *
 * Only heap/ sources (and tests/unit/heap) include it.  It is the one place where
 * LMDB types appear next to arrheap types; nothing declared here may leak
 * into heap.h, which the layers above see.
 *
 * It must never be included outside heap/ and tests/unit/heap.
 */
#ifndef HEAP_HEAP_INT_H
#define HEAP_HEAP_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "heap/heap.h"

/* Named databases, in the order heap_open opens them. */
enum { HEAP_DBI_META = HEAP_T__COUNT, HEAP_DBI_CHUNKS, HEAP_DBI__COUNT };

struct heap {
	MDB_env *env;
	MDB_dbi dbi[HEAP_DBI__COUNT];
	int fd;                /* the data file (LMDB's descriptor; not ours) */
	int claim_fd;          /* ours: holds the opener claim (path.c), or -1 */
	int lclaim_fd;         /* ours: holds the claim on the lock file, or -1 */
	bool resize_held;      /* the open holds the map-size lock (path.c) */
	dev_t lock_dev;        /* (dev, ino) of PATH-lock when it existed at */
	ino_t lock_ino;        /* open (lock_ino 0: none) */
	pid_t pid;             /* opener: any other pid gets AH_EFORK */
	dev_t dev;             /* registry key: (dev, ino) of the data file */
	ino_t ino;
	unsigned flags;        /* AH_OPEN_* */
	uint32_t psize;        /* page size in bytes */
	uint64_t max_bytes;    /* configured limit, 0 = the filesystem's size */
	uint64_t map_bytes;    /* current LMDB map size */
	/* The map's first byte, learnt from the first chunk lookup after the
	 * map was made (chunk_read.c, heap_chunk_open_at); NULL again
	 * whenever it is remapped (always with no txn of this handle open). */
	const uint8_t *map_base;
	uint64_t reserved_to;  /* bytes [0, reserved_to) fallocated (space.c) */
	uint8_t uuid[16];
	uint32_t format;       /* format version of the file: set at open, then
	                        * only raised, by a commit (heap_format_raise);
	                        * read it with heap_format_of (threads) */
	pool *pool;
	struct heap_vcache *vcache; /* pages checked by seeks (chunk_read.c) */
	void *aux;             /* the layer above's per-handle cache (heap_aux) */
	void (*aux_free)(void *);
	/* chunk_writeback.c: the two buffers regular chunks are assembled
	 * in (page-aligned, the value at +16 as in the map) and the thread
	 * that writes them; NULL until the first buffered chunk */
	struct heap_wb *wb;
	/* flush.c: the thread that asks for early device flushes while a
	 * write txn writes (NULL: read-only or AH_OPEN_NOSYNC) */
	struct heap_flush *flush;
	/* the error of a failed heap_sync (AH_EIO, AH_EFULL), sticky: later
	 * syncs return it, write txns neither begin nor commit (atomic) */
	int sync_err;
	pthread_mutex_t mu;    /* guards ntxn and the writer fields */
	unsigned ntxn;         /* open txns (heap_close refuses while > 0) */
	bool writer_active;
	unsigned damaged;      /* trees the last page check found damaged
	                        * (HEAP_TREE_BIT); atomic */
	pthread_t writer;      /* thread of the open write txn */
	struct heap *reg_next; /* process-wide registry of open files */
	/* prefetch.c: the cold-read decision and its counters (atomics) */
	uint64_t pf_seeks, pf_samples, pf_cold_samples, pf_issues, pf_pages;
	uint32_t pf_warm_run;  /* resident samples in a row while cold */
	bool pf_warm;          /* false: cold (a fresh handle is) */
};

struct heap_txn {
	heap *h;
	MDB_txn *txn;
	bool rdonly;
	bool poisoned;
	uint64_t next_id;      /* next chunk id, 0 = not looked up yet */
	uint64_t new_lo;       /* the least chunk id this write txn stored
	                        * (UINT64_MAX: none): only such chunks may
	                        * carry LMDB's P_DIRTY (chunk_page_check) */
	/* names.c: the names digest as this txn has it. */
	bool names_loaded, names_have, names_dirty;
	unsigned names_ok;     /* tables (bits) walked and found in step */
	uint64_t names[4];
	uint32_t format_mark;  /* format.c: the file format t made (or saw) */
	/* space.c: pages this write txn may touch, bound_pages = max(hw,
	 * fresh_end) + fixed + pending: the committed high-water mark at
	 * begin, the end of the last chunk LMDB placed past it, the
	 * allowances of every call (and the values of those whose place is
	 * not learnt), the value of a chunk put whose place is not yet
	 * learnt */
	uint64_t bound_pages, hw_pages, fresh_end, fixed_pages, pending_pages;
	/* chunk_write.c: the reserved chunk being assembled in memory (0:
	 * none), the buffer (its value at wb_val), the value's size and its
	 * offset in the file; chunk_writeback.c: the chunk whose write is in
	 * flight (0: none). */
	uint64_t wb_id;
	uint8_t *wb_val;
	size_t wb_size;
	uint64_t wb_off;
	uint64_t wb_inflight;
};

/* chunk_writeback.c (see there): in a write txn, waits for the chunk
 * write in flight (settle: only when it is chunk id's; 0: any) and
 * collects its error (AH_EIO, AH_EFULL), which poisons t; 0 at once in a
 * read txn.  heap_wb_free: the thread stopped, the buffers freed (close,
 * with no txn open). */
int heap_wb_drain(heap_txn *t);
int heap_wb_settle(heap_txn *t, uint64_t id);
void heap_wb_free(heap *h);

/* flush.c (see there): init at open (nothing for a read-only handle, no
 * thread ever for a NOSYNC one; AH_ENOMEM), note after each chunk write (may wake the thread
 * for an fdatasync), block before a write txn's commit or abort (waits
 * for an fdatasync in flight, keeps others from starting, and returns the
 * error one saw: AH_EIO, AH_EFULL; 0), unblock after it, count (tests),
 * free at close (before LMDB closes the descriptor). */
int heap_flush_init(heap *h);
void heap_flush_note(heap *h, uint64_t bytes);
int heap_flush_block(heap *h);
void heap_flush_unblock(heap *h);
/* A sync of h's file failed with rc (AH_EIO, AH_EFULL; anything else is
 * ignored): from now on no write txn of h begins or commits and heap_sync
 * returns the first such error (sync_err, sticky; env_ops.c). */
void heap_sync_failed(heap *h, int rc);
/* Held around a commit's mdb_txn_commit and heap_sync's mdb_env_sync, so
 * that two syncs of LMDB's descriptor never run at once (no-op on a
 * read-only handle). */
void heap_sync_lock(heap *h);
void heap_sync_unlock(heap *h);
uint64_t heap_flush_count(heap *h);
void heap_flush_free(heap *h);

/* error.c */
int heap_err(int mdb_rc);
/* CORRUPT, TRY and FIRST: heap.h (every layer's). */
/* LMDB's assert callback (mdb_env_set_assert): one line naming the likely
 * cause before liblmdb aborts the process. */
void heap_lmdb_assert(MDB_env *env, const char *msg);

/* env_catalog.c, for heap_open (env.c): an LMDB environment on path with
 * h->map_bytes and these mdb_env_open flags; the named DBs opened and the
 * meta record checked (made when create: AH_EFORMAT for a foreign LMDB
 * file); an existing file's catalog checked through a read-only
 * environment; a new heap file made under PATH.creating.PID and published
 * (*exists: another process published one first). */
int heap_env_start(heap *h, const char *path, unsigned mflags,
                   unsigned readers, MDB_env **out);
int heap_env_catalog(heap *h, MDB_env *env, bool create, bool prealloc);
int heap_env_check_catalog(heap *h, const char *path, unsigned readers);
int heap_env_create_file(heap *h, const char *path, unsigned readers,
                         bool *exists);

/* space.c */
uint64_t heap_space_fs_bytes(const char *path, int fd);
uint64_t heap_space_map_bytes(uint64_t fs_bytes, uint64_t max_bytes,
                              uint32_t psize);
int heap_space_begin(heap_txn *t);
int heap_space_need(heap_txn *t, uint64_t pages);
int heap_space_need_chunk(heap_txn *t, uint64_t pages);
void heap_space_placed(heap_txn *t, const MDB_val *v, uint64_t pages);
int heap_space_ensure(heap *h, uint64_t bytes);
int heap_space_lockfile(const char *path, unsigned readers, int *keep,
                        struct stat *st);

/* path.c: one lock file per data file (see there). */
#include <limits.h>
/* Takes the opener claim on the data file (h->dev/ino, already checked):
 * AH_EBUSY when another process has it open through another lock file.
 * fd: a descriptor of the data file whose fstat gave h->dev/ino (heap_open's
 * pre-check; the claim keeps it, or closes it on failure), or -1: the
 * claim opens PATH and checks it is still that file.
 * The lock-side claim uses h->lclaim_fd when env.c opened the lock file
 * already (its identity h->lock_dev/ino), else opens it to read. */
int heap_path_claim(heap *h, const char *path, int fd);
void heap_path_unclaim(heap *h);
/* The map-size lock (path.c): shared around an opener's claim and
 * environment start, exclusive around a resize that shrinks the map;
 * heap_path_shared: another process has the heap open (or it cannot be
 * ruled out). */
int heap_path_resize_lock(int fd, bool exclusive);
void heap_path_resize_unlock(int fd);
bool heap_path_shared(const heap *h);
/* After MDB_MAP_RESIZED (no txn of env open): maps the file's size, or
 * more, never less (path.c); h->fd and h->map_bytes are env's. */
int heap_path_adopt_map(heap *h, MDB_env *env, bool writable);

/* record.c: the checksum frame of every table value (see there). */
#define HEAP_RECORD_FRAME 8
/* Writes the frame and the bytes (vlen + HEAP_RECORD_FRAME) to out; val may
 * lie at out (the bytes are moved). */
void heap_record_frame(int tb, const void *key, size_t klen, const void *val,
                       size_t vlen, void *out);
/* Checks a stored value and narrows (*val, *vlen) to the bytes.
 * AH_ECORRUPT when the check fails in a format-2 heap. */
int heap_record_unframe(const heap *h, int tb, const void *key, size_t klen,
                        const void **val, size_t *vlen);

/* names.c: the names digest of the arr and source tables (see there). */
int heap_names_put_raw(MDB_txn *txn, MDB_dbi meta, const uint64_t d[4]);
int heap_names_compute(MDB_txn *txn, const MDB_dbi *dbi, uint64_t d[4]);
/* A new key (+1) or a deleted one (-1) of tb. */
int heap_names_note(heap_txn *t, enum heap_table tb, const void *key,
                    size_t klen, int delta);
/* Writes the digest if this txn changed it (before the commit). */
int heap_names_store(heap_txn *t);
/* 0 when tb's keys match the digest (or the heap has none), else
 * AH_ECORRUPT. */
int heap_names_check(heap_txn *t, enum heap_table tb);

/* format.c.  heap_format_precheck checks the existing file fd (st: its
 * fstat, just taken) by pread before LMDB maps it (verdicts at the top of
 * format.c).  On 0, *catalog says whether the pages read also prove what
 * heap_env_catalog (env_catalog.c) checks through LMDB: every named DB
 * present with its flags and a meta record heap_meta_check accepts.  False leaves that to
 * a read-only environment (heap_env_check_catalog), which names the error. */
#define HEAP_META_KEY "arrheap.meta"
#define HEAP_META_BYTES 64
int heap_format_precheck(int fd, uint32_t psize, const struct stat *st,
                         bool *catalog);
/* True for a heap file whose creation was interrupted (killed inside
 * ah_open after LMDB wrote its meta pages): both metas valid with txnid 0,
 * i.e. no commit ever.  Such a file holds nothing and AH_OPEN_CREATE
 * finishes creating it.  st: fd's fstat. */
bool heap_format_unborn(int fd, uint32_t psize, const struct stat *st);
void heap_meta_encode(uint8_t out[HEAP_META_BYTES], uint32_t psize,
                      const uint8_t uuid[16], uint32_t version);
/* Checks a stored meta record; *version gets its format version. */
int heap_meta_check(const void *val, size_t len, uint32_t psize,
                    uint8_t uuid[16], uint32_t *version);
/* Rewrites a format-1 heap as format 2 in one write txn: the meta record
 * and every table value framed (record.c).  A no-op for format 2 and 3. */
int heap_upgrade(heap *h);

/* hold.c: makes t's file format 3 unless its meta record already says so
 * (heap_put calls it before the first hold record of t). */

/* txn.c: the checks every txn operation starts with. */
int heap_txn_usable(const heap_txn *t, bool write);
int heap_txn_fail(heap_txn *t, int rc);
/* XXH3-64 compiled for AVX2 (hash.c): call only where the CPU has it. */
uint64_t heap_xxh3_avx2(const void *p, size_t len);

/* pagecheck.c.  heap_pagecheck_open walks the main and "meta" trees of
 * the meta page LMDB will use, before heap_open lets LMDB read them, from
 * the first 152 bytes of both metas that format.c read: AH_ECORRUPT when
 * damaged.  *catalog (false on every error) is true when the walk read one
 * snapshot without a problem, every named DB of it has exactly the flags
 * env_catalog.c opens it with, and the meta tree holds a HEAP_META_BYTES value
 * under HEAP_META_KEY, copied to rec (unchecked: heap_meta_check).
 * heap_trees_usable is every LMDB call's
 * gate: AH_ECORRUPT when a page check found one of trees damaged. */
#define HEAP_TREE_BIT(t) (1u << (t))
#define HEAP_TREES_ALL ((1u << HEAP_TREE__COUNT) - 1)
int heap_pagecheck_open(int fd, uint32_t psize, uint64_t file_bytes,
                        const uint8_t *meta0, const uint8_t *meta1,
                        uint8_t rec[HEAP_META_BYTES], bool *catalog);
int heap_trees_usable(const heap *h, unsigned trees);

/* chunk.c: the size classes. */
extern const uint32_t heap_class_pages[HEAP_NCLASSES];
/* What is wrong with chunk value v stored under key id (header against
 * key and value size; with checksums, every checksum), as static text, or
 * NULL; fills *ci (may be NULL) from the header as stored. */
const char *heap_chunk_problem(const heap *h, uint64_t id, const MDB_val *v,
                               bool checksums, heap_chunk_info *ci);
/* A location word (heap_chunk_open_at): the chunk's first page number
 * above HEAP_LOC_BITS bits of its page count; 0 = not known. */
#define HEAP_LOC_BITS 24u
/* Where the body of a chunk this library writes with a value of
 * value_bytes starts in the value (the header of one it read may say
 * otherwise: format 1, or blocks of a page). */
uint64_t heap_chunk_body_at(const heap *h, uint64_t value_bytes);
/* Frees the verified cache (heap_close). */
void heap_vcache_free(heap *h);

/* The handle's file format, read by any thread while a writer's commit
 * may raise it. */
static inline uint32_t heap_format_of(const heap *h)
{
	return __atomic_load_n(&h->format, __ATOMIC_ACQUIRE);
}

/* Raises the handle's format to ver if it is lower (writer threads of one
 * handle commit one after another, but readers and stat read it
 * meanwhile). */
static inline void heap_format_raise(heap *h, uint32_t ver)
{
	uint32_t cur = heap_format_of(h);

	while (cur < ver && !__atomic_compare_exchange_n(&h->format, &cur, ver,
	                                                 false, __ATOMIC_ACQ_REL,
	                                                 __ATOMIC_ACQUIRE))
		;
}

#endif /* HEAP_HEAP_INT_H */
