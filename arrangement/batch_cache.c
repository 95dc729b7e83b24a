/*
 * arrangement/batch_cache.c - decoded batch records kept per heap handle and
 * shared by the cursors of read-only transactions on every thread, with
 * their checked key filters (filter.h).
 *
 * Why a cached record is never served for another record (ARCHITECTURE.md
 * §7, "Point reads"): an entry is keyed by batch id but is only a
 * candidate.  Every lookup first gets the record as stored in the caller's
 * snapshot (one LMDB get, its frame checksum checked) and serves the entry
 * only if the stored bytes equal the entry's copy exactly; the filter
 * blocks are in those bytes (inline) or named by them (chunk id and XXH3),
 * and were checked against that XXH3 when the entry was made.  Decoding is
 * a pure function of the bytes (and the id), and fence[] points into the
 * entry's copy, so a hit hands out what decoding the stored record would
 * give; anything that rewrites a record (batch_set_desc, an id handed out
 * again after an aborted txn, another process, a restored file, an older
 * snapshot's reader) changes the bytes, misses, and the record is decoded
 * afresh.  Entries are made only from read-only txns (committed records),
 * and write txns bypass the cache: their own uncommitted records never
 * enter.  An entry remembers the snapshot (LMDB's txn id of the read txn)
 * in which its bytes last compared equal: LMDB gives every committed write
 * txn the next id and a read txn reads exactly the snapshot of its id, so
 * another read txn of that id sees the same bytes and is served without
 * the get (the common case: many queries between two commits).
 *
 * Memory: at most BC_MAX_BYTES per handle, counting each entry's record
 * copy, filter, decoded arrays and header; least recently used entries go
 * first; a record above BC_MAX_ENTRY (a filter for more than about 26M
 * keys) is decoded per cursor, without its filter (always visited).  An
 * evicted batch lives on until the last cursor holding it closes (a
 * reference count).  One mutex guards the table; the compare, the decode
 * and the checksum run outside it.  Freed at ah_close (heap_aux).  Nothing
 * here writes to the map.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_int.h"
#include "arrangement/filter.h"

#define BC_MAX_BYTES ((size_t)64 << 20)
#define BC_MAX_ENTRY (BC_MAX_BYTES / 2)
/* 128 chains (1 KiB): a few entries each for a thousand batches, and a
 * table made at a restart's first query that stays in one jemalloc size
 * class with many regions a slab (8 KiB of chains cost it five new slabs
 * and three page faults). */
#define BC_BITS 7
#define BC_BUCKETS (1u << BC_BITS)

typedef struct bc_ent {
	struct bc_ent *hnext;      /* bucket chain */
	struct bc_ent *prev, *next;/* use order: head = most recent */
	batch *b;                  /* holds one reference */
	size_t len, bytes;         /* the record's length; bytes charged */
	uint64_t snap;             /* the snapshot (LMDB txn id) in which the
	                            * stored record last compared equal */
} bc_ent;

typedef struct bcache {
	pthread_mutex_t mu;
	bc_ent *bucket[BC_BUCKETS];
	bc_ent *head, *tail;
	size_t bytes;
} bcache;

static void *bc_make(void)
{
	bcache *bc = calloc(1, sizeof *bc);

	if (bc && pthread_mutex_init(&bc->mu, NULL) != 0) {
		free(bc);
		return NULL;
	}
	return bc;
}

static void bc_destroy(void *p)
{
	bcache *bc = p;

	for (bc_ent *e = bc->head, *nx; e; e = nx) {
		nx = e->next;
		batch_free(e->b);
		free(e);
	}
	pthread_mutex_destroy(&bc->mu);
	free(bc);
}

static bc_ent **slot(bcache *bc, uint64_t id)
{
	bc_ent **p = &bc->bucket[(id * 0x9E3779B97F4A7C15ull) >> (64 - BC_BITS)];

	while (*p && (*p)->b->id != id)
		p = &(*p)->hnext;
	return p;
}

static void list_unlink(bcache *bc, bc_ent *e)
{
	*(e->prev ? &e->prev->next : &bc->head) = e->next;
	*(e->next ? &e->next->prev : &bc->tail) = e->prev;
	e->prev = e->next = NULL;
}

static void list_push(bcache *bc, bc_ent *e)
{
	e->next = bc->head;
	*(bc->head ? &bc->head->prev : &bc->tail) = e;
	bc->head = e;
}

/* Takes e out of the table; the caller frees it (outside the lock). */
static void bc_remove(bcache *bc, bc_ent *e)
{
	bc_ent **p = slot(bc, e->b->id);

	*p = e->hnext;
	list_unlink(bc, e);
	bc->bytes -= e->bytes;
}

/* The entry's batch with a reference for the caller: when snap is not 0,
 * only if the entry was verified in snapshot snap; else if its copy may be
 * the stored record (same length).  NULL otherwise. */
static batch *bc_find(bcache *bc, uint64_t id, uint64_t snap, size_t len)
{
	batch *b = NULL;

	pthread_mutex_lock(&bc->mu);
	bc_ent *e = *slot(bc, id);
	if (e && (snap ? e->snap == snap : e->len == len)) {
		b = e->b;
		__atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
		list_unlink(bc, e);
		list_push(bc, e);
	}
	pthread_mutex_unlock(&bc->mu);
	return b;
}

/* b compared equal to the record stored in snapshot snap. */
static void bc_verified(bcache *bc, const batch *b, uint64_t snap)
{
	pthread_mutex_lock(&bc->mu);
	bc_ent *e = *slot(bc, b->id);
	if (e && e->b == b)
		e->snap = snap;
	pthread_mutex_unlock(&bc->mu);
}

/* Enters b (refs already counting the cache's), replacing any entry of
 * its id and making room; what goes is freed after the lock. */
static void bc_insert(bcache *bc, bc_ent *e)
{
	bc_ent *gone = NULL;

	pthread_mutex_lock(&bc->mu);
	bc_ent *old = *slot(bc, e->b->id);
	if (old) {
		bc_remove(bc, old);
		old->hnext = gone;
		gone = old;
	}
	while (bc->tail && bc->bytes + e->bytes > BC_MAX_BYTES) {
		bc_ent *x = bc->tail;
		bc_remove(bc, x);
		x->hnext = gone;
		gone = x;
	}
	bc_ent **p = slot(bc, e->b->id);
	e->hnext = NULL;
	*p = e;
	list_push(bc, e);
	bc->bytes += e->bytes;
	pthread_mutex_unlock(&bc->mu);
	for (bc_ent *nx; gone; gone = nx) {
		nx = gone->hnext;
		batch_free(gone->b);
		free(gone);
	}
}

/* Decodes a private copy of the stored record (its filter not yet). */
static int decode_own(uint64_t id, const uint8_t *rec, size_t len,
                      batch **out)
{
	uint8_t *copy = malloc(len ? len : 1);
	batch *b = NULL;
	int rc;

	if (!copy)
		return AH_ENOMEM;
	memcpy(copy, rec, len);
	if ((rc = batch_decode(id, copy, len, &b))) {
		free(copy);
		return rc;
	}
	b->own_rec = copy;
	*out = b;
	return 0;
}

int batch_load_cached(heap_txn *t, uint64_t id, batch **out)
{
	const uint8_t *rec;
	size_t len;
	batch *b;
	bcache *bc;
	int rc;

	if (!t || !out)
		return AH_EINVAL;
	if (!heap_txn_rdonly(t) ||
	    !(bc = heap_aux(heap_txn_heap(t), bc_make, bc_destroy)))
		return batch_load_listed(t, id, out);
	/* Verified in this very snapshot: the same committed bytes. */
	uint64_t snap = heap_txn_id(t);
	if ((b = bc_find(bc, id, snap, 0))) {
		*out = b;
		return 0;
	}
	if ((rc = batch_record_get(t, id, &rec, &len)))
		return rc == AH_ENOTFOUND ? CORRUPT("a listed batch record is missing") : rc;
	if ((b = bc_find(bc, id, 0, len))) {
		if (memcmp(b->own_rec, rec, len) == 0) {
			bc_verified(bc, b, snap);
			*out = b;
			return 0;
		}
		batch_free(b); /* another record now: decoded afresh below */
	}
	if ((rc = decode_own(id, rec, len, &b)))
		return rc;
	bc_ent *e = calloc(1, sizeof *e);
	/* A filter in a chunk of its own stays there (batch_probe reads the
	 * probed block page by page): loading it whole would read and hash
	 * all of it at a restart's first query. */
	bool load = !b->filter_chunk;
	size_t bytes = sizeof *b + sizeof *e + len +
	               (load ? FILTER_BLOCK * b->filter_blocks : 0) +
	               b->nchunks * (sizeof(uint64_t) + sizeof(void *) + sizeof(size_t));
	/* Too large to keep: decoded per cursor, without its filter (read
	 * and checked per query it would cost more than it saves). */
	if (e && bytes <= BC_MAX_ENTRY && load && (rc = batch_filter_load(t, b))) {
		free(e);
		batch_free(b);
		return rc;
	}
	/* the chunks' places (heap_chunk_open_at), filter chunk last: only
	 * for a batch that is kept, as its id and chunks never change */
	if (e && bytes <= BC_MAX_ENTRY &&
	    !(b->chunk_loc = calloc(b->nchunks + 1, sizeof *b->chunk_loc))) {
		free(e);
		e = NULL;
	}
	bytes += (b->nchunks + 1) * sizeof *b->chunk_loc;
	if (e && bytes <= BC_MAX_ENTRY) {
		e->b = b;
		e->len = len;
		e->bytes = bytes;
		e->snap = snap;
		b->refs = 2; /* the cache's and the caller's */
		bc_insert(bc, e);
	} else {
		free(e); /* private: freed by the caller's batch_free */
	}
	*out = b;
	return 0;
}
