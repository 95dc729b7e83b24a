/*
 * heap/pool.c - the transient-memory pool: one dedicated jemalloc arena per
 * heap, so that its statistics count exactly the builders', sorts' and
 * merges' memory and arena.<i>.reset can drop it all at once.
 *
 * Built with -DAH_POOL_SYSTEM_MALLOC (the sanitizer builds), it uses plain
 * malloc/realloc/free so that ASan sees every block; the statistics then
 * come from our own counters only.  Every block is then linked into a list
 * and pool_reset frees every block still live, exactly as arena.<i>.reset
 * does: a use after reset is a use after free that ASan reports (a pool
 * that never freed at reset hid the two-writer-threads crash).  Either way we count the bytes asked
 * for (active, peak) ourselves: those numbers are exact and the same in
 * both builds.  pool_inject_failure makes the Nth allocation fail, for the
 * fault-injection tests of the layers above.
 *
 * The arena is in arrheap's private copy of jemalloc (above), not the
 * process's malloc: plain malloc in the library is the application's.
 *
 * Never persistent: jemalloc's metadata holds absolute pointers.
 *
 * It must never hand out memory that outlives the write txn (the pool is
 * reset before the writer lock is released).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef AH_POOL_SYSTEM_MALLOC
#include <jemalloc/jemalloc.h>

/* The library's own copy of jemalloc (Makefile: jemalloc_priv.o, Debian's
 * libjemalloc_pic.a with these four entry points renamed and every other
 * symbol made local), so that linking arrheap leaves the process's malloc
 * alone.  The header above gives the flag macros. */
void *ahj_mallocx(size_t size, int flags);
void *ahj_rallocx(void *ptr, size_t size, int flags);
void ahj_sdallocx(void *ptr, size_t size, int flags);
int ahj_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp,
                size_t newlen);
#define mallocx ahj_mallocx
#define rallocx ahj_rallocx
#define sdallocx ahj_sdallocx
#define mallctl ahj_mallctl
#endif

#include "heap/pool.h"

#ifdef AH_POOL_SYSTEM_MALLOC
/* The header of every block: 16 bytes, so the caller's pointer keeps
 * malloc's 16-byte alignment. */
typedef struct blk {
	struct blk *prev, *next;
} blk;
#endif

struct pool {
#ifdef AH_POOL_SYSTEM_MALLOC
	blk head;             /* circular list of live blocks */
#endif
	unsigned arena;
	int flags;            /* MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE */
	uint64_t active;      /* bytes live, as requested */
	uint64_t peak;
	uint64_t allocs;      /* successful allocations (realloc counts) */
	uint64_t frees;
	uint64_t live;        /* blocks live */
	uint64_t fail_at;     /* allocation number that fails, 0 = none */
	uint64_t attempts;    /* allocation attempts since the last injection */
	size_t hint[POOL_HINTS];
};

#ifndef AH_POOL_SYSTEM_MALLOC
/* Arenas of destroyed pools, kept for the next pool_create: jemalloc 5.3
 * keeps about 4.2 KiB of metadata for every arena.<i>.destroy it is
 * asked (measured: stats.metadata +4.2 MB over 1,000 create/destroy
 * pairs, whether or not the index is reused), so a process that opens and
 * closes heaps, or runs parallel merges (a pool per helper), would grow
 * without end.  A kept arena is reset and purged (its pages go back to
 * the system) and waits here, its index plus one in a slot, 0 for
 * empty.  The slots are atomics, not a list under a lock: a fork() on
 * another thread at any moment leaves the child a usable set (at worst
 * an arena the parent was taking is not the child's to reuse).  With
 * every slot taken, an arena is destroyed as before. */
#define SPARE_ARENAS 16
static unsigned spare_arena[SPARE_ARENAS];

static bool spare_take(unsigned *arena)
{
	for (unsigned i = 0; i < SPARE_ARENAS; i++) {
		unsigned a = __atomic_exchange_n(&spare_arena[i], 0u,
		                                 __ATOMIC_ACQ_REL);
		if (a != 0) {
			*arena = a - 1;
			return true;
		}
	}
	return false;
}

static bool spare_put(unsigned arena)
{
	for (unsigned i = 0; i < SPARE_ARENAS; i++) {
		unsigned empty = 0;
		if (__atomic_compare_exchange_n(&spare_arena[i], &empty,
		                                arena + 1, false, __ATOMIC_ACQ_REL,
		                                __ATOMIC_RELAXED))
			return true;
	}
	return false;
}
#endif

int pool_create(pool **out)
{
	pool *p = calloc(1, sizeof *p);

	if (p == NULL)
		return AH_ENOMEM;
#ifdef AH_POOL_SYSTEM_MALLOC
	p->head.prev = p->head.next = &p->head;
#else
	size_t sz = sizeof p->arena;

	if (!spare_take(&p->arena) &&
	    mallctl("arenas.create", &p->arena, &sz, NULL, 0) != 0) {
		free(p);
		return AH_ENOMEM;
	}
	p->flags = MALLOCX_ARENA(p->arena) | MALLOCX_TCACHE_NONE;
#endif
	*out = p;
	return 0;
}

void pool_destroy(pool *p)
{
	if (p == NULL)
		return;
#ifdef AH_POOL_SYSTEM_MALLOC
	pool_reset(p);
#else
	char name[64];

	/* reset frees every block, purge returns the pages: the arena is
	 * as new but for jemalloc's metadata, which stays for the next */
	snprintf(name, sizeof name, "arena.%u.reset", p->arena);
	if (mallctl(name, NULL, NULL, NULL, 0) == 0) {
		snprintf(name, sizeof name, "arena.%u.purge", p->arena);
		if (mallctl(name, NULL, NULL, NULL, 0) == 0 && spare_put(p->arena)) {
			free(p);
			return;
		}
	}
	snprintf(name, sizeof name, "arena.%u.destroy", p->arena);
	mallctl(name, NULL, NULL, NULL, 0);
#endif
	free(p);
}

/* True when this allocation is the injected failure. */
static bool injected(pool *p)
{
	if (p->fail_at == 0)
		return false;
	return ++p->attempts == p->fail_at;
}

#ifdef AH_POOL_SYSTEM_MALLOC
static void *link_blk(pool *p, blk *b)
{
	b->next = p->head.next;
	b->prev = &p->head;
	b->next->prev = b;
	p->head.next = b;
	return b + 1;
}

static blk *unlink_blk(void *ptr)
{
	blk *b = (blk *)ptr - 1;

	b->prev->next = b->next;
	b->next->prev = b->prev;
	return b;
}
#endif

static void count_alloc(pool *p, size_t size)
{
	p->active += size;
	if (p->active > p->peak)
		p->peak = p->active;
	p->allocs++;
	p->live++;
}

void *pool_malloc(pool *p, size_t size)
{
	void *ptr;

	if (p == NULL || size == 0 || injected(p))
		return NULL;
#ifdef AH_POOL_SYSTEM_MALLOC
	ptr = size < SIZE_MAX - sizeof(blk) ? malloc(sizeof(blk) + size) : NULL;
	if (ptr != NULL)
		ptr = link_blk(p, ptr);
#else
	ptr = mallocx(size, p->flags);
#endif
	if (ptr != NULL)
		count_alloc(p, size);
	return ptr;
}

void *pool_realloc(pool *p, void *ptr, size_t old_size, size_t new_size)
{
	void *np;

	if (ptr == NULL)
		return pool_malloc(p, new_size);
	if (p == NULL || new_size == 0 || injected(p))
		return NULL;
#ifdef AH_POOL_SYSTEM_MALLOC
	if (new_size >= SIZE_MAX - sizeof(blk))
		return NULL;
	blk *b = unlink_blk(ptr), *nb = realloc(b, sizeof(blk) + new_size);

	if (nb == NULL) {
		link_blk(p, b); /* the old block stays live */
		return NULL;
	}
	np = link_blk(p, nb);
#else
	np = rallocx(ptr, new_size, p->flags);
#endif
	if (np == NULL)
		return NULL;
	p->active = p->active - old_size + new_size;
	if (p->active > p->peak)
		p->peak = p->active;
	p->allocs++;
	p->frees++;
	return np;
}

void pool_free(pool *p, void *ptr, size_t size)
{
	if (p == NULL || ptr == NULL)
		return;
#ifdef AH_POOL_SYSTEM_MALLOC
	free(unlink_blk(ptr));
#else
	sdallocx(ptr, size, p->flags);
#endif
	p->active -= size;
	p->frees++;
	p->live--;
}

void pool_reset(pool *p)
{
	if (p == NULL)
		return;
#ifdef AH_POOL_SYSTEM_MALLOC
	while (p->head.next != &p->head)
		free(unlink_blk(p->head.next + 1));
#else
	char name[64];

	snprintf(name, sizeof name, "arena.%u.reset", p->arena);
	mallctl(name, NULL, NULL, NULL, 0);
#endif
	p->active = 0;
	p->live = 0;
}

int pool_stats(pool *p, ah_pool_stats *st)
{
	if (p == NULL || st == NULL)
		return AH_EINVAL;
	st->active_bytes = p->active;
	st->peak_active_bytes = p->peak;
	st->dirty_bytes = 0;
	st->resident_bytes = 0;
#ifndef AH_POOL_SYSTEM_MALLOC
	{
		uint64_t epoch = 1;
		size_t sz = sizeof epoch, v, vsz;
		char name[96];
		long page = sysconf(_SC_PAGESIZE);

		if (mallctl("epoch", &epoch, &sz, &epoch, sz) != 0)
			return AH_EIO;
		vsz = sizeof v;
		snprintf(name, sizeof name, "stats.arenas.%u.pdirty", p->arena);
		if (mallctl(name, &v, &vsz, NULL, 0) != 0)
			return AH_EIO;
		st->dirty_bytes = (uint64_t)v * (uint64_t)page;
		vsz = sizeof v;
		snprintf(name, sizeof name, "stats.arenas.%u.resident",
		         p->arena);
		if (mallctl(name, &v, &vsz, NULL, 0) == 0)
			st->resident_bytes = v;
		else {
			vsz = sizeof v;
			snprintf(name, sizeof name, "stats.arenas.%u.pactive",
			         p->arena);
			if (mallctl(name, &v, &vsz, NULL, 0) != 0)
				return AH_EIO;
			st->resident_bytes = (uint64_t)v * (uint64_t)page;
		}
	}
#else
	st->resident_bytes = p->active;
#endif
	return 0;
}

void pool_inject_failure(pool *p, uint64_t nth)
{
	if (p == NULL)
		return;
	p->fail_at = nth;
	p->attempts = 0;
}

void pool_counts(const pool *p, uint64_t *allocs, uint64_t *frees,
                 uint64_t *live_blocks)
{
	if (allocs)
		*allocs = p ? p->allocs : 0;
	if (frees)
		*frees = p ? p->frees : 0;
	if (live_blocks)
		*live_blocks = p ? p->live : 0;
}

unsigned pool_arena(const pool *p)
{
#ifdef AH_POOL_SYSTEM_MALLOC
	(void)p;
	return 0;
#else
	return p->arena;
#endif
}

size_t pool_hint(const pool *p, unsigned slot)
{
	return p && slot < POOL_HINTS ? p->hint[slot] : 0;
}

void pool_set_hint(pool *p, unsigned slot, size_t size)
{
	if (p && slot < POOL_HINTS)
		p->hint[slot] = size;
}
