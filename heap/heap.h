/*
 * heap/heap.h - the heap layer's contract to arrangement/ and txn/.
 *
 * The heap is one LMDB environment in one file (MDB_NOSUBDIR, MDB_WRITEMAP,
 * MDB_NOTLS).  It offers the layers above three things and nothing else:
 *   - transactions (a thin wrapper over MDB_txn that also accounts for the
 *     file blocks a write may touch, so that they are preallocated before
 *     LMDB writes into them: no SIGBUS on a full disk);
 *   - chunks: checksummed, 16-byte-aligned byte blocks of fixed size classes,
 *     named by a 64-bit id, filled in place in the map;
 *   - a few small tables (key -> value) for catalog records.
 * and the transient-memory pool (heap/pool.h).
 *
 * It never includes a header of a higher layer, and no LMDB type or MDB_*
 * code crosses this boundary: LMDB errors are translated to AH_E* here.
 */
#ifndef HEAP_HEAP_H
#define HEAP_HEAP_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arrheap.h"
#include "pool.h"

typedef struct heap heap;
typedef struct heap_txn heap_txn;

/* Format version of the heap: the meta record's version field.
 *  1  arrheap 0.1.0: chunks checksummed whole only, table values raw.
 *  2  chunks carry a checksum per page (block) so that a reader checks
 *     exactly the pages it touches; every table value (arrangement and
 *     batch records, source positions, the batch id counter) is framed
 *     with a checksum over its table, key and bytes (record.c).
 *  3  as 2, and the meta DB may hold read holds (hold.c): a binary that
 *     does not know holds must not open it, since its ah_set_since would
 *     compact past them.
 *  4  as 3, and batch chunks may be body version 2 (arrangement/
 *     batch_int.h: dropped and dictionary columns), which binaries of
 *     format 3 cannot read: the transaction that writes a heap's first
 *     such chunk makes it 4 (heap_format_mark).
 *  5  as 4, and regular chunks may carry a checksum per 1 KiB block
 *     (HEAP_CHUNK_BLOCK) instead of per page, so that a seek hashes a
 *     quarter of the bytes it did (chunk.c); format-4 binaries refuse
 *     such chunks, so the transaction that writes a heap's first one
 *     makes it 5.
 *  6  as 5, and a batch's key filter in a chunk of its own may be of
 *     hash 3 (arrangement/batch_int.h: each block's check bound to the
 *     chunk's id), which format-5 binaries refuse: the transaction that
 *     writes a heap's first such batch record makes it 6.
 *  7  as 6, and a batch record may list the XXH3 of each of its chunks
 *     (arrangement/batch_int.h: BREC_SUMS) and have a key filter of hash 4
 *     (bound to the chunk's id and to those sums), so that a read tells a
 *     chunk its record names from a stale one with the same id at the
 *     same place (a write the storage lost); format-6 binaries refuse
 *     both: the transaction that writes a heap's first such record makes
 *     it 7.
 * This library reads versions 1 to 7 (HEAP_FORMAT_MIN..HEAP_FORMAT_VERSION).
 * New heaps are version 2 (HEAP_FORMAT_BASE), and the first writable open
 * of a version-1 heap upgrades it to 2 in one transaction (meta record and
 * every table value rewritten; chunks stay as they are, version-1 chunks
 * are checked whole, and merges rewrite them).  The transaction that
 * writes a heap's first hold makes it version 3 (heap_hold_put), so a heap
 * without holds stays readable by the binaries that know only 2; a heap
 * never goes back from 3.  Any other version is AH_EFORMAT.  The layouts
 * inside chunk bodies and records have their own version fields
 * (arrangement/). */
#define HEAP_FORMAT_VERSION 7
#define HEAP_FORMAT_BASE 2
#define HEAP_FORMAT_HOLDS 3
#define HEAP_FORMAT_COLS 4
#define HEAP_FORMAT_BLOCKS 5
#define HEAP_FORMAT_FILTER_IDS 6
#define HEAP_FORMAT_CHUNK_SUMS 7
#define HEAP_FORMAT_MIN 1

/* Checksum blocks per page in the regular chunks this library writes:
 * HEAP_CHUNK_SPLIT, of 1 KiB with 4 KiB pages (fewer where the page is
 * under 4 KiB, so that a block is never below 1 KiB); so a regular chunk
 * (at most 256 pages) has at most HEAP_CHUNK_MAX_BLOCKS (chunk.c). */
#define HEAP_CHUNK_SPLIT 4u
#define HEAP_CHUNK_MAX_BLOCKS (256u * HEAP_CHUNK_SPLIT)

/* Small tables, one LMDB named database each, and the holds table, which
 * lives in the meta DB beside the catalog records (so a heap without holds
 * has exactly the DBs a format-2 binary knows).  Keys 1 to 511 bytes
 * (AH_EINVAL otherwise).  HEAP_T_BATCH is MDB_INTEGERKEY: its keys must be
 * exactly 8 bytes (a native u64) and iterate in numeric order.
 * HEAP_T_HOLD keys contain a NUL (arrangement NUL hold), which no catalog
 * key does; heap_next over it skips the catalog records.  Use the
 * heap_hold_* calls below rather than the table calls for it. */
enum heap_table {
	HEAP_T_ARR = 0,   /* arrangement name -> arrangement record (spine) */
	HEAP_T_BATCH = 1, /* u64 batch id (native) -> batch record */
	HEAP_T_SOURCE = 2,/* source name -> opaque position bytes */
	HEAP_T__COUNT,    /* the tables with a named DB of their own */
	HEAP_T_HOLD = HEAP_T__COUNT, /* arrangement NUL hold -> hold record,
	                  * in the meta DB (same index as its DBI and tree) */
	HEAP_T__ALL
};

/* ------------------------------------------------------------ lifecycle */

/* Opens/creates the heap (see ah_open for flags, checks and errors). */
int heap_open(const char *path, const ah_open_opts *opts, heap **out);
/* Closes; AH_ESTATE if a txn is open (then nothing is closed). */
int heap_close(heap *h);
int heap_sync(heap *h);

/* thread.c: starts fn(arg) on a new thread with every signal blocked (the
 * library's threads take none); false when pthread_create failed. */
bool heap_thread_start(pthread_t *thr, void *(*fn)(void *), void *arg);
int heap_set_max_bytes(heap *h, uint64_t max_bytes);
int heap_stat(heap *h, ah_heap_stat *st);
/* AH_EFORK when called from a process other than the opener. */
int heap_check_pid(const heap *h);
/* The writer's transient-memory pool, created on first use; NULL on a
 * read-only heap or when it cannot be created (treat as AH_ENOMEM).  Only
 * the thread holding the write txn may call it. */
pool *heap_pool(heap *h);
/* True when a thread of this process holds h's write txn. */
bool heap_writer_active(heap *h);
/* True when the calling thread holds h's write txn. */
bool heap_writer_is_self(heap *h);
/* The pool if it was created, without creating it (any thread). */
pool *heap_pool_if_any(const heap *h);
bool heap_verify_reads(const heap *h);
/* The one per-handle slot of the layer above (arrangement/batch_cache.c):
 * on the first call make() creates it, exactly once, under the handle's
 * mutex (any thread; later calls are one atomic load); heap_close frees
 * it with destroy.  NULL when make() returned NULL (out of memory: the
 * caller goes without). */
void *heap_aux(heap *h, void *(*make)(void), void (*destroy)(void *));
uint32_t heap_page_size(const heap *h);

/* --------------------------------------------------------- transactions */

/* Poisoning: a write operation (put, del, chunk reserve/seal/free) that
 * fails after it may have changed something poisons a write txn: later
 * calls return AH_EBADTXN and commit aborts and returns AH_EBADTXN.
 * Failures that change nothing do not poison: AH_ENOTFOUND, AH_EINVAL,
 * AH_EREADONLY (and AH_ELIMIT from heap_chunk_reserve).
 * A second write txn from the thread that holds one is AH_ESTATE. */
int heap_txn_begin(heap *h, bool rdonly, heap_txn **out);
/* Commits and frees t, whatever the result. */
int heap_txn_commit(heap_txn *t);
/* Aborts and frees t.  NULL is a no-op. */
void heap_txn_abort(heap_txn *t);
heap *heap_txn_heap(heap_txn *t);
bool heap_txn_rdonly(const heap_txn *t);
/* Makes the file format at least ver (<= HEAP_FORMAT_VERSION) in write txn
 * t: rewrites the meta record's version when it is lower (once per txn;
 * adopted by the heap at commit, gone with an abort).  Errors: AH_EINVAL
 * (read-only txn, unknown version), AH_ECORRUPT (meta record), AH_EFULL,
 * AH_EIO. */
int heap_format_mark(heap_txn *t, uint32_t ver);
uint64_t heap_txn_id(const heap_txn *t);

/* -------------------------------------------------------------- chunks */

/* Every chunk and table call below returns AH_ECORRUPT without calling
 * LMDB when a page check found its tree damaged (heap_pagecheck). */

/* Chunk size classes, in pages: 1, 4, 16, 64, 256.  A chunk of class c is an
 * LMDB value of c * page_size - 16 bytes (so exactly c overflow pages, the
 * data 16-byte aligned).  A body larger than the largest class gets a jumbo
 * chunk of a whole multiple of the largest class, which keeps the free list
 * in large uniform runs.  The header (checksums, magic, id, class, used,
 * and one checksum per page) comes first; the body follows, 16-byte
 * aligned (layout in chunk.c). */
#define HEAP_NCLASSES 5

/* Capacity in body bytes of the largest regular class. */
size_t heap_chunk_max_body(const heap *h);
/* Smallest class body capacity >= want (jumbo for large want); 0 when no
 * chunk can hold want (over LMDB's 4 GiB - 1 value limit). */
size_t heap_chunk_fit(const heap *h, size_t want);
/* Bytes stored in the file for the chunk that heap_chunk_fit(want) picks
 * (header, capacity, tail: the class's value size); 0 as above. */
size_t heap_chunk_stored(const heap *h, size_t want);

/* Reserves a chunk whose body holds at least body_bytes (the smallest class
 * that fits), allocating a fresh id (the largest id committed + 1, so the id
 * of a freed last chunk may be handed out again by a later txn).  *body is
 * 16-byte aligned and is where the caller writes the body: for a regular
 * class, the heap's write buffer when it is free (one pwrite at seal
 * instead of a page fault per fresh map page), else the map.  It is valid
 * until heap_chunk_seal; read the stored chunk with heap_chunk_open.  The
 * caller calls heap_chunk_seal before the txn commits (an unsealed chunk
 * fails verification).
 * Errors: AH_EFULL (disk full or max_bytes), AH_ELIMIT (over 4 GiB),
 * AH_EREADONLY, AH_EIO, AH_ENOMEM. */
int heap_chunk_reserve(heap_txn *t, size_t body_bytes, uint64_t *id,
                       void **body, size_t *body_cap);
/* Records body_used, zeroes the rest of the chunk, computes its checksums
 * (one per page, then the whole chunk's XXH3-64), and writes a buffered
 * chunk to its place in the file (pwrite, then writeback started with
 * sync_file_range unless AH_OPEN_NOSYNC; the commit's msync covers it).
 * Errors: AH_EINVAL (body is not the reserved chunk's), AH_ECORRUPT,
 * AH_EIO, AH_EFULL (the pwrite); any error poisons the txn. */
int heap_chunk_seal(heap_txn *t, uint64_t id, void *body, size_t body_used);

/* Chunk images: a chunk built in memory outside any txn (the merge
 * thread's slices, ARCHITECTURE §6), stored later by one write txn.
 * heap_chunk_image_new allocates (posix_memalign; the caller frees it
 * with free) the whole LMDB value of the smallest class holding
 * body_bytes, header written with id 0, and reports where the body goes
 * (16-byte aligned) and its capacity.  heap_chunk_image_seal records
 * body_used, zeroes the rest and computes every page checksum but page
 * 0's: none of them depends on the id.  Errors: AH_ELIMIT (over 4 GiB),
 * AH_ENOMEM; seal: AH_EINVAL (not such an image, body_used too large). */
int heap_chunk_image_new(const heap *h, size_t body_bytes, void **img,
                         size_t *img_bytes, void **body, size_t *body_cap);
int heap_chunk_image_seal(const heap *h, void *img, size_t img_bytes,
                          size_t body_used);
/* Stores a sealed image under a fresh id (as heap_chunk_reserve picks
 * it): reserves the value, writes the id, page 0's sum and the chunk's
 * XXH3 into the image (about 1 KiB hashed; a jumbo image is hashed
 * whole), and writes it to its place with one pwrite (the map: memcpy).
 * The image may be freed afterwards.  Errors: AH_EINVAL, AH_ECORRUPT
 * (not an image of this heap's format), AH_EFULL, AH_EIO, AH_EREADONLY;
 * any error after the reserve poisons t. */
int heap_chunk_image_put(heap_txn *t, void *img, size_t img_bytes,
                         uint64_t *id);

/* Stores a whole chunk value made elsewhere (a snapshot's object, by
 * ah_snapshot_restore) under its own id: value is the LMDB value a
 * heap_chunk_open view calls `value`, len bytes (value_bytes), 16-byte
 * aligned.  Its header (and with checksums, every checksum) is checked
 * first; a bad value is AH_ECORRUPT and changes nothing.  A caller that
 * passes checksums false must check the stored chunks whole before it
 * trusts them (ah_snapshot_restore's verify opens every referenced chunk
 * whole, and a chunk no batch references fails it).  Written to the file
 * with pwrite like a sealed chunk.  Later heap_chunk_reserve ids follow
 * the largest.  Errors: AH_EINVAL, AH_ECORRUPT, AH_EEXIST (id in use;
 * nothing changed), AH_EFULL, AH_EIO, AH_EREADONLY; other errors poison
 * the txn. */
int heap_chunk_put_raw(heap_txn *t, uint64_t id, const void *value,
                       size_t len, bool checksums);

/* Rewrites the meta record with uuid (same format version), for a heap
 * nobody else knows yet (ah_snapshot_restore's new file): the handle's
 * copy (heap_stat) changes at once, even if t aborts.  Errors:
 * AH_ECORRUPT (meta record), AH_EFULL, AH_EIO; poisons t on failure. */
int heap_set_uuid(heap_txn *t, const uint8_t uuid[16]);

/* A chunk opened for reading: where its body is, and which of its pages
 * this view has checked.  Plain data: it may be copied (a copy keeps what
 * the original had checked).  Valid until the txn ends. */
typedef struct heap_chunk_view {
	heap *h;               /* for the verified cache (chunk_read.c) */
	uint64_t id, xxh3;
	const uint8_t *value;  /* the LMDB value (its first byte) */
	const uint8_t *body;   /* 16-byte aligned */
	uint64_t body_used;
	uint64_t value_bytes;  /* stored bytes */
	uint32_t bshift;       /* log2(checksum block size): the page size,
	                        * or a quarter of it in chunks since format 5 */
	bool all;              /* every byte is checked: touches are free */
	uint64_t seen[HEAP_CHUNK_MAX_BLOCKS / 64]; /* blocks checked */
} heap_chunk_view;

/* How a reader opens a chunk: HEAP_CHUNK_WHOLE checks the whole chunk now
 * (XXH3 over all of it): for readers that walk it all (scans, merges,
 * verify).  HEAP_CHUNK_PAGES checks only the header page now, and each
 * further page when heap_chunk_touch first covers it: for seeks, which
 * read a few pages.  A version-1 chunk (no page checksums) and a jumbo
 * chunk are always checked whole; so is every chunk of a heap opened with
 * AH_OPEN_VERIFY_READS. */
enum heap_chunk_how { HEAP_CHUNK_WHOLE = 0, HEAP_CHUNK_PAGES = 1,
	/* HEAP_CHUNK_SELF checks no checksum (the header only against its
	 * LMDB value, as every open does) and makes every touch free: for a
	 * reader whose bytes carry their own checks, which it makes before it
	 * trusts them (arrangement/filter.h: checked filter blocks).  Whole
	 * under AH_OPEN_VERIFY_READS. */
	HEAP_CHUNK_SELF = 2 };

/* Finds chunk id, checks its header against its LMDB value (magic, id,
 * class against the value size, used <= capacity, alignment) and its
 * checksum as `how` says, and fills *v.  Errors: AH_ENOTFOUND,
 * AH_ECORRUPT (header or checksum). */
int heap_chunk_open(heap_txn *t, uint64_t id, enum heap_chunk_how how,
                    heap_chunk_view *v);
/* heap_chunk_open with a remembered place: *loc (0 at first, then owned
 * by this call, read and written atomically, so callers on several
 * threads may share it) says where a read-only txn found chunk id, and
 * the next read-only open reads the header there instead of asking
 * LMDB's chunks tree (a B-tree descent per open: 17% of a point query's
 * instructions).  Only for a chunk that keeps its place and id for as
 * long as *loc is used: the chunk of a batch record, remembered with the
 * decoded record (batch_cache.c), whose id stays its own while the batch
 * lives (an id is handed out again only after its chunk was freed, or
 * by the transaction after one that aborted); a
 * stored chunk is never moved or rewritten, and while a batch's record
 * is in a snapshot its chunks are (LMDB keeps their pages from reuse
 * until the last reader of that snapshot ends).  The header is parsed
 * and checked as on every open (id, class against the size), and a
 * place that does not hold it is looked up as without a hint; write txns
 * always look up. */
int heap_chunk_open_at(heap_txn *t, uint64_t id, uint64_t *loc,
                       enum heap_chunk_how how, heap_chunk_view *v);
/* The slow half of heap_chunk_touch: checks every unchecked page of
 * value bytes [off, off + len).  AH_ECORRUPT on a mismatch or a range
 * outside the value. */
int heap_chunk_touch_slow(heap_chunk_view *v, uint64_t off, size_t len);
/* Before reading [p, p + len) of a chunk's body: checks the pages it lies
 * in unless this view already did.  0 or AH_ECORRUPT.  A view made
 * without a chunk (value NULL, all true) accepts everything. */
static inline int heap_chunk_touch(heap_chunk_view *v, const void *p,
                                   size_t len)
{
	if (v->all)
		return 0;
	uint64_t o = (uint64_t)((const uint8_t *)p - v->value);
	uint64_t b = (o + 16) >> v->bshift;
	if (len != 0 && b == (o + 15 + len) >> v->bshift &&
	    b < HEAP_CHUNK_MAX_BLOCKS &&
	    ((v->seen[b >> 6] >> (b & 63)) & 1))
		return 0;
	return heap_chunk_touch_slow(v, o, len);
}
/* heap_chunk_open(WHOLE), for callers that want only the body. */
int heap_chunk_get(heap_txn *t, uint64_t id, const void **body,
                   size_t *body_used);
/* Asks the kernel to start reading chunk id's pages now
 * (madvise(MADV_WILLNEED) on its page range), for a reader about to walk it
 * sequentially: the map is opened with MDB_NORDAHEAD, so without this every
 * cold page would be its own 4 KiB read.  At most the first 8 MiB of a chunk
 * (jumbo chunks are larger).  Advisory: touches no chunk byte and
 * returns 0 whether or not the kernel acts.  Errors: AH_ENOTFOUND,
 * AH_ECORRUPT (a value too small to be a chunk). */
int heap_chunk_prefetch(heap_txn *t, uint64_t id);
/* ------------------------------------------------ batched read-ahead */

/* Cold point reads (heap/prefetch.c, ARCHITECTURE.md section 7, "Cold
 * point reads"): the map has no read-around (MDB_NORDAHEAD), so each cold page a
 * seek touches is one 4 KiB read, waited for before the next is known.  A
 * reader that can name the pages it is about to read collects them here
 * and asks for them all with one call, so that the device serves them
 * together.  Advisory only: nothing here reads a chunk byte, checks one
 * or fails a read; a wrong range costs a wasted read, never an answer. */
#define HEAP_PREFETCH_MAX 64   /* page ranges one request holds */
#define HEAP_PREFETCH_EVERY 16 /* a warm handle samples every 16th seek */
#define HEAP_PREFETCH_WARM_AFTER 8 /* resident samples in a row: warm */
typedef struct heap_prefetch {
	heap_txn *t;
	unsigned n;            /* ranges in lo/hi (more are dropped) */
	uintptr_t lo[HEAP_PREFETCH_MAX], hi[HEAP_PREFETCH_MAX]; /* pages */
} heap_prefetch;

/* Starts an empty request for read-only txn t (a write txn's requests
 * are ignored: its chunks may be in the write buffer, not the map). */
void heap_prefetch_begin(heap_txn *t, heap_prefetch *pf);
/* Adds bytes [off, off + len) of chunk id's body (as the chunks this
 * library writes lay out a value of that size: the exact start is in its
 * header, which this does not read), and the chunk's first page (its
 * header) unless *loc is known (this handle opened the chunk, so read its
 * header), found through the place *loc remembers (heap_chunk_open_at;
 * NULL or 0: one lookup in LMDB's tree, which reads tree pages only).
 * The range is clipped to the chunk's value.  Errors: AH_ECORRUPT for a
 * damaged chunks tree, heap_err's; a missing chunk adds nothing. */
/* Where chunk id's body lies, without reading a byte of the chunk: its
 * value through the place *loc remembers (use_loc; checked as
 * heap_chunk_open_at checks it) or LMDB's get (which reads tree pages
 * only, and is then remembered in *loc of a read txn when the map's base
 * is known), and the body where this library lays it out in a value of
 * that size.  Nothing about the chunk is checked: the caller must check
 * every byte it uses, and that the bytes are this chunk's (a remembered
 * place may be stale; retry with use_loc false).  *body_bytes: the body's
 * capacity.  Errors: AH_ENOTFOUND, AH_ECORRUPT (a chunks tree a page
 * check found damaged, also with a remembered place; a value too small
 * for a body), heap_err's. */
int heap_chunk_place(heap_txn *t, uint64_t id, uint64_t *loc, bool use_loc,
                     const uint8_t **body, uint64_t *body_bytes);
int heap_prefetch_chunk(heap_prefetch *pf, uint64_t id, const uint64_t *loc,
                        uint64_t off, uint64_t len);
/* The same; header false: never the first page (the caller's read will
 * not look at the header). */
int heap_prefetch_chunk_at(heap_prefetch *pf, uint64_t id, const uint64_t *loc,
                           uint64_t off, uint64_t len, bool header);
/* Adds the pages of [p, p + len) of an opened view's chunk, clipped to its
 * value (a range outside it adds nothing). */
void heap_prefetch_view(heap_prefetch *pf, const heap_chunk_view *v,
                        const void *p, size_t len);
/* Asks the kernel for every collected page (MADV_WILLNEED, one vectored
 * process_madvise where the kernel has it, else one madvise per range) and
 * empties the request.  Returns at once: the reads go on in the
 * background, and a touch of a page in flight waits only for it. */
void heap_prefetch_issue(heap_prefetch *pf);
/* The per-handle decision: every call is one seek.  Returns whether the
 * handle is in its cold state (the seek should collect and issue its
 * pages) and sets *sample when the caller is to name one page it is about
 * to read to heap_prefetch_sample: on every seek of a cold handle, and on
 * every HEAP_PREFETCH_EVERY-th of a warm one; *first on the handle's
 * first seek.  A fresh handle is cold. */
bool heap_prefetch_due(heap *h, bool *sample, bool *first);
/* Samples p's page with mincore(2): not in the page cache makes the
 * handle cold; HEAP_PREFETCH_WARM_AFTER resident samples in a row make it
 * warm.  Returns the new state (true: cold) and, when resident is not
 * NULL, whether p's page was in the cache.  A p in no mapping, or any
 * other mincore error, counts as resident. */
bool heap_prefetch_sample(heap *h, const void *p, bool *resident);
/* What the decision did (counters since the open; relaxed atomics). */
typedef struct heap_prefetch_stat {
	uint64_t seeks;        /* heap_prefetch_due calls */
	uint64_t samples;      /* heap_prefetch_sample calls */
	uint64_t cold_samples; /* of them, pages not resident */
	uint64_t issues;       /* heap_prefetch_issue calls with pages */
	uint64_t pages;        /* pages those asked for */
	bool cold;             /* the state now */
} heap_prefetch_stat;
void heap_prefetch_stat_get(const heap *h, heap_prefetch_stat *st);

/* Recomputes every checksum of the chunk: the whole chunk's XXH3 (header
 * and tail included) and, in version 2, each page's.
 * Errors: AH_ECORRUPT, AH_ENOTFOUND. */
int heap_chunk_verify(heap_txn *t, uint64_t id);
/* *sum = chunk id's XXH3 as its header states it (what a batch record
 * lists for it, BREC_SUMS), after any write of it in flight is done; the
 * header is checked against its LMDB value (heap_chunk_open), no checksum
 * is computed.  Errors: AH_ENOTFOUND, AH_ECORRUPT. */
int heap_chunk_sum(heap_txn *t, uint64_t id, uint64_t *sum);
/* Deletes chunk id; its pages return to LMDB's free list at commit (reused
 * once no reader snapshot can see them).  Errors: AH_ENOTFOUND, AH_EIO. */
int heap_chunk_free(heap_txn *t, uint64_t id);

typedef struct heap_chunk_info {
	uint64_t id;
	uint32_t format;       /* chunk format: 1 or 2 */
	uint32_t class_pages;
	uint64_t body_used;    /* body bytes used */
	uint64_t file_offset;  /* offset of the chunk's first byte in the file */
	uint64_t xxh3;         /* stored checksum */
	uint32_t block_bytes;  /* bytes per checksum block; 0: checked whole
	                        * only (format 1, jumbo) */
} heap_chunk_info;
/* Iterates all chunks in id order: first call with after = 0 and first =
 * true.  Returns 0 and fills *ci, or AH_ENOTFOUND past the last;
 * AH_ECORRUPT for a damaged header, or an id not after `after` (a damaged
 * tree: so the loop always ends). */
int heap_chunk_next(heap_txn *t, uint64_t after, bool first,
                    heap_chunk_info *ci);

/* -------------------------------------------------------------- tables */

/* Values are checked records (record.c): heap_put frames the bytes with a
 * checksum over (table, key, bytes), heap_get and heap_next check it and
 * return the bytes, so a flipped byte in a value or its key is AH_ECORRUPT.
 * *val points into the map (only 2-byte aligned: decode with memcpy), valid
 * until the next write in t or its end.  Errors: AH_ENOTFOUND, AH_EINVAL,
 * AH_ECORRUPT. */
int heap_get(heap_txn *t, enum heap_table tb, const void *key, size_t klen,
             const void **val, size_t *vlen);
int heap_put(heap_txn *t, enum heap_table tb, const void *key, size_t klen,
             const void *val, size_t vlen);
/* Errors: AH_ENOTFOUND when absent. */
int heap_del(heap_txn *t, enum heap_table tb, const void *key, size_t klen);
/* Iterates in key order: the first entry > after (or the first if after is
 * NULL).  Returns 0 with pointers as heap_get, AH_ENOTFOUND past the end,
 * AH_ECORRUPT when the key LMDB finds is not after `after` (a damaged
 * tree: so a loop feeding each key back as `after` always ends).
 * AH_ECORRUPT with *key set (not NULL) is a record whose check failed:
 * *key and *klen name it, so a walk can report it and go on after it (*val is
 * then unusable); with *key NULL the table itself could not be walked. */
int heap_next(heap_txn *t, enum heap_table tb, const void *after, size_t alen,
              const void **key, size_t *klen, const void **val, size_t *vlen);
/* Checks the catalog records of the meta DB: the meta record (checksum,
 * fields, uuid) and the names digest against the arr and source tables
 * (heap/names.c).  Each problem goes to fn; returns 0 when the check ran.
 * Errors: AH_EBADTXN, AH_ECORRUPT (the meta tree is refused), AH_EIO. */
int heap_catalog_check(heap_txn *t, void (*fn)(const char *problem, void *user),
                       void *user);
/* The largest key below `below` of the (integer-keyed) batch table, or 0
 * when there is none.  Errors: AH_EINVAL, AH_ECORRUPT. */
int heap_last_below(heap_txn *t, enum heap_table tb, uint64_t below,
                    uint64_t *id);

/* Read holds (hold.c): one record per (arrangement, hold name), framed
 * like every table value, in the meta DB.  This layer stores and checks
 * them; what they mean (leases, since) is txn/hold.c's. */
#define HEAP_HOLD_RELEASED 0x1u  /* since passed it after its lease ran out */
#define HEAP_HOLD_KEY_MAX (2 * AH_NAME_MAX + 1)
typedef struct heap_hold {
	char arr[AH_NAME_MAX + 1];   /* NUL-terminated */
	char name[AH_NAME_MAX + 1];
	uint64_t frontier;           /* since <= frontier while it holds */
	uint64_t lease_ms;           /* 0: no lease */
	uint64_t renewed_ms;         /* CLOCK_REALTIME ms of the last set */
	uint32_t flags;              /* HEAP_HOLD_* */
} heap_hold;
/* A walk's place: the last key answered (klen 0: before the first). */
typedef struct heap_hold_pos {
	size_t klen;
	uint8_t key[HEAP_HOLD_KEY_MAX];
} heap_hold_pos;

/* Looks up hold NAME of ARR (names 1 to AH_NAME_MAX bytes, no NUL).
 * Errors: AH_ENOTFOUND, AH_EINVAL, AH_ECORRUPT (frame or layout). */
int heap_hold_get(heap_txn *t, const char *arr, const char *name,
                  heap_hold *out);
/* Creates or replaces the hold; the first hold of a heap of format < 3
 * rewrites its meta record as format 3 in t.  Errors: as heap_put, and
 * AH_ECORRUPT (meta record); poisons t on failure. */
int heap_hold_put(heap_txn *t, const heap_hold *hd);
/* Errors: AH_ENOTFOUND (nothing changes), as heap_del. */
int heap_hold_del(heap_txn *t, const char *arr, const char *name);
/* The hold after *pos in key order (arrangement, then name): 0 with *out
 * filled and *pos moved to it, AH_ENOTFOUND past the last.  AH_ECORRUPT
 * for a record that fails its frame or layout: *pos is moved past it when
 * its key could be read (a walk may report it and go on; compare klen),
 * else left as it was (the table cannot be walked: stop). */
int heap_hold_next(heap_txn *t, heap_hold_pos *pos, heap_hold *out);

/* Debug checks (invariants), compiled in every build, on when
 * AH_DEBUG is set in the environment at open. */
extern bool heap_debug;

/* ------------------------------------------------- errors, every layer */

/* The one corruption breakpoint (SQLite's SQLITE_CORRUPT_BKPT): every
 * layer reports data it cannot trust through CORRUPT("what"), which
 * returns AH_ECORRUPT and, under AH_DEBUG, logs file:line and what.  Set
 * a debugger breakpoint on heap_corrupt_at to stop where damage is seen. */
int heap_corrupt_at(const char *file, int line, const char *what);
#define CORRUPT(what) heap_corrupt_at(__FILE__, __LINE__, (what))

/* The cleanup idiom of every layer: one `out:` label, `int rc` threaded
 * through, cleanup safe on partial initialisation, the first error wins.
 *   TRY(expr):        rc = expr; on error goto out.
 *   FIRST(rc, expr):  evaluate expr (cleanup that may fail) and keep its
 *                     error only if rc has none yet.
 * With CORRUPT and HEAP_MDB (heap/fault.h, heap/ only) these are all the
 * helper macros the library has. */
#define TRY(expr)                                                              \
	do {                                                                   \
		if ((rc = (expr)) != 0)                                        \
			goto out;                                              \
	} while (0)
#define FIRST(rc, expr)                                                        \
	do {                                                                   \
		int first_rc_ = (expr);                                        \
		if ((rc) == 0)                                                 \
			(rc) = first_rc_;                                      \
	} while (0)

/* ---------------------------------------------------------- inspection */

/* Read-only views for ah-dump and ah_verify/ah_space_get (heap/inspect.c).
 * None of them writes to the heap or poisons a txn; they work in read
 * snapshots.  LMDB damage met on the way is AH_ECORRUPT. */

/* One entry of the chunks table as found by heap_chunk_scan: the header
 * fields as stored (untrusted when problem != NULL), and what is wrong. */
typedef struct heap_chunk_scan_entry {
	heap_chunk_info ci;      /* file_offset 0 when unknown */
	uint64_t stored_bytes;   /* the LMDB value: header + capacity + tail */
	const char *problem;     /* NULL, or a static text: bad header field,
	                          * checksum mismatch */
} heap_chunk_scan_entry;

/* Walks every chunk in key order with one cursor, checking each header
 * against its key and value size and, if checksums, its XXH3 over the
 * whole value.  A bad chunk is reported to fn (problem set) and the walk
 * goes on.  fn returning non-zero stops the walk and is returned.  Returns
 * AH_ECORRUPT when LMDB cannot walk the table (damaged tree pages, keys
 * that do not increase: the walk stops there). */
int heap_chunk_scan(heap_txn *t, bool checksums,
                    int (*fn)(const heap_chunk_scan_entry *e, void *user),
                    void *user);

/* LMDB's free list and page accounting as this txn's snapshot sees it. */
typedef struct heap_free_info {
	uint64_t pages_free;     /* pages listed in the free list */
	uint64_t pages_pinned;   /* of those, freed by commits >= pin_txn */
	uint64_t runs;           /* runs of consecutive free pages */
	uint64_t largest_run;    /* pages in the longest run */
	uint64_t records;        /* free-list records (one per freeing commit) */
	uint64_t chunk_pages;    /* overflow pages of the chunks table */
	uint64_t chunks;         /* entries of the chunks table */
	uint64_t tree_pages;     /* branch + leaf pages of every table, the
	                          * main DB and the free list itself */
} heap_free_info;

/* Fills *fi; pin_txn is the snapshot of the oldest reader that holds pages
 * back (LMDB reuses a free-list record only when it is older than every
 * reader).  Errors: AH_ECORRUPT, AH_ENOMEM, AH_EINVAL. */
int heap_free_stat(heap_txn *t, uint64_t pin_txn, heap_free_info *fi);

/* ------------------------------------------------------- page check */

/* LMDB's trees in one heap file.  The first five are the named DBs, in the
 * order of enum heap_table and the heap's own DBs (heap_int.h). */
enum heap_tree {
	HEAP_TREE_ARR = HEAP_T_ARR,
	HEAP_TREE_BATCH = HEAP_T_BATCH,
	HEAP_TREE_SOURCE = HEAP_T_SOURCE,
	HEAP_TREE_META,      /* "meta": the arrheap meta record */
	HEAP_TREE_CHUNKS,    /* "chunks" */
	HEAP_TREE_MAIN,      /* LMDB's main DB: the named DBs' records */
	HEAP_TREE_FREE,      /* LMDB's free list */
	HEAP_TREE__COUNT
};

/* "arr", "batch", "source", "meta", "chunks", "main", "free"; "file" for
 * HEAP_TREE__COUNT (a problem of the file as a whole). */
const char *heap_tree_name(enum heap_tree t);

/* What the walk found in one tree (counts as walked, not as recorded). */
typedef struct heap_tree_stat {
	uint32_t depth;          /* md_depth: pages on every root-leaf path */
	uint64_t branch_pages, leaf_pages, overflow_pages;
	uint64_t entries;        /* leaf nodes */
	bool damaged;            /* a problem was found in it */
} heap_tree_stat;

typedef struct heap_pagecheck_stat {
	uint64_t txn_id;         /* the snapshot checked */
	uint64_t last_pg;        /* its last used page (mm_last_pg) */
	uint64_t free_pages;     /* pages on its free list */
	uint64_t problems;
	unsigned quarantined;    /* trees now refused (1 << enum heap_tree) */
	heap_tree_stat tree[HEAP_TREE__COUNT];
} heap_pagecheck_stat;

typedef struct heap_page_problem {
	enum heap_tree tree;     /* HEAP_TREE__COUNT: the file as a whole */
	uint64_t pgno;           /* the page where it was found (0, 1: metas;
	                          * UINT64_MAX: the page accounting) */
	const char *message;     /* one line; valid during the call */
} heap_page_problem;

/* Walks every LMDB page of t's snapshot (for a write txn: the commit it
 * started from) without LMDB (heap/pagecheck.c lists the checks) and
 * passes each problem to fn (may be NULL); fn
 * returning non-zero stops the walk and is returned.  *st (may be NULL)
 * gets per-tree counts.  Afterwards the heap quarantines what was found
 * damaged (a damaged meta or main tree, or a stopped walk: every tree):
 * heap_get/put/del/next, the chunk calls and the inspection calls of such
 * a tree return AH_ECORRUPT without calling LMDB, until a later check of
 * the heap finds it sound.  Cost: reads every B-tree page and the first
 * page of every overflow value; one byte of memory per page of the file.
 * Errors: AH_EBUSY (the snapshot's meta page was overwritten: two commits
 * since the snapshot began; check in a fresh read txn), AH_ENOMEM, AH_EIO,
 * AH_EBADTXN, AH_EFORK. */
int heap_pagecheck(heap_txn *t,
                   int (*fn)(const heap_page_problem *p, void *user),
                   void *user, heap_pagecheck_stat *st);

/* The latest commit's page high-water mark (last used page + 1) and id
 * (mdb_env_info: not the snapshot's).  Errors: AH_EINVAL, AH_EFORK. */
int heap_env_pages(heap *h, uint64_t *pages_used, uint64_t *last_txn);

typedef struct heap_reader {
	int64_t pid;
	uint64_t thread;
	uint64_t txn_id;         /* snapshot held; 0 = slot idle (no txn) */
} heap_reader;

/* Calls fn for each reader slot owned by a live process
 * (mdb_reader_list).  fn returning non-zero stops.  Errors: AH_EIO. */
int heap_reader_list(heap *h, int (*fn)(const heap_reader *r, void *user),
                     void *user);

/* Writes a compacted consistent copy of the heap's last commit to path
 * (mdb_env_copyfd2 with MDB_CP_COMPACT: a read txn, the writer is never
 * blocked), fsynced; with fresh_uuid the copy's meta record gets a new
 * UUID before it is published.  path must not exist; on failure nothing
 * is left.  Errors: AH_EEXIST, AH_ENOTFOUND, AH_EREADONLY, AH_EFULL,
 * AH_EIO. */
int heap_backup(heap *h, const char *path, bool fresh_uuid);

/* Paths (path.c), for files made beside a heap (backup, restore): the
 * canonical path (realpath; for a file to be created, its directory's
 * realpath and its name; AH_ENOTFOUND for a missing directory or a
 * dangling symlink, AH_EINVAL for a name too long); this creator's
 * temporary name for path (stale ones of dead creators are removed); and
 * its publication, which never replaces an existing path (*exists when
 * one was there; tmp is then removed). */
int heap_path_resolve(const char *path, char out[PATH_MAX]);
int heap_path_temp(const char *path, char tmp[PATH_MAX]);
int heap_path_publish(const char *tmp, const char *path, bool *exists);
/* A fresh random (version 4) UUID; AH_EIO when getrandom fails. */
int heap_uuid_new(uint8_t uuid[16]);

/* calloc for the small structs every read makes and frees (txn, cursor,
 * batch cursor, spine): glibc's calloc (2.36, Debian 12) never takes its
 * per-thread cache, so each call runs _int_malloc (about 190
 * instructions, 15 calls a point query), where malloc of a size freed
 * before is a cache hit (up to 1032 bytes).  Zeroed as calloc; NULL on
 * overflow or no memory. */
static inline void *heap_zalloc(size_t n, size_t size)
{
	size_t bytes;

	if (__builtin_mul_overflow(n, size, &bytes))
		return NULL;
	void *p = malloc(bytes ? bytes : 1);
	/* gcc turns malloc + memset 0 back into calloc: the empty asm hides
	 * where p came from */
	__asm__("" : "+r"(p));
	if (p)
		memset(p, 0, bytes);
	return p;
}

#endif /* HEAP_HEAP_H */
