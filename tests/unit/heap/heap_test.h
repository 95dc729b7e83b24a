/*
 * tests/unit/heap/heap_test.h - helpers shared by the heap layer's unit
 * tests: a private temporary directory per test, deterministic byte
 * patterns from a seed, and a file fingerprint (size + XXH3) to prove that
 * a failed open changed nothing.  Test-only; never linked into the library.
 */
#ifndef TESTS_UNIT_HEAP_HEAP_TEST_H
#define TESTS_UNIT_HEAP_HEAP_TEST_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heap/heap.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define MiB ((uint64_t)1 << 20)

typedef struct ht_dir {
	char dir[64];
	char path[128];
} ht_dir;

static inline void ht_mkdir(ht_dir *d)
{
	snprintf(d->dir, sizeof d->dir, "/tmp/ah-heap-XXXXXX");
	cr_assert_not_null(mkdtemp(d->dir));
	snprintf(d->path, sizeof d->path, "%s/heap", d->dir);
}

static inline void ht_rmdir(ht_dir *d)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
	cr_assert_eq(system(cmd), 0);
}

static inline uint64_t ht_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Bytes of a chunk body: a function of (seed, id, offset). */
static inline void ht_fill(void *buf, size_t n, uint64_t seed, uint64_t id)
{
	uint64_t s = seed * 1000003u + id, w;
	unsigned char *p = buf;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		w = ht_rand(&s);
		memcpy(p + i, &w, 8);
	}
	w = ht_rand(&s);
	memcpy(p + i, &w, n - i);
}

static inline bool ht_same(const void *body, size_t n, uint64_t seed,
                           uint64_t id)
{
	void *want = malloc(n + 8);
	bool same;

	ht_fill(want, n, seed, id);
	same = memcmp(want, body, n) == 0;
	free(want);
	return same;
}

typedef struct ht_print {
	uint64_t size;
	uint64_t hash;
} ht_print;

static inline ht_print ht_fingerprint(const char *path)
{
	ht_print fp = { 0, 0 };
	struct stat st;
	int fd = open(path, O_RDONLY);
	void *buf;

	cr_assert_geq(fd, 0, "open %s", path);
	cr_assert_eq(fstat(fd, &st), 0);
	fp.size = (uint64_t)st.st_size;
	buf = malloc(fp.size + 1);
	cr_assert_eq(pread(fd, buf, fp.size, 0), (ssize_t)fp.size);
	fp.hash = XXH3_64bits(buf, fp.size);
	free(buf);
	close(fd);
	return fp;
}

static inline ah_open_opts ht_opts(unsigned flags, uint64_t max_bytes)
{
	ah_open_opts o;

	memset(&o, 0, sizeof o);
	o.size = sizeof o;
	o.flags = flags;
	o.max_bytes = max_bytes;
	return o;
}

/* Writes one chunk of n body bytes in t; returns its id. */
static inline uint64_t ht_put_chunk(heap_txn *t, size_t n, uint64_t seed)
{
	uint64_t id = 0;
	void *body = NULL;
	size_t cap = 0;

	int rc = heap_chunk_reserve(t, n, &id, &body, &cap);

	cr_assert_eq(rc, 0, "reserve %zu: %s", n, ah_err_name(rc));
	cr_assert_geq(cap, n);
	ht_fill(body, n, seed, id);
	cr_assert_eq(heap_chunk_seal(t, id, body, n), 0);
	return id;
}

static inline uint64_t ht_count_chunks(heap_txn *t)
{
	heap_chunk_info ci;
	uint64_t n = 0, after = 0;
	bool first = true;
	int rc;

	while ((rc = heap_chunk_next(t, after, first, &ci)) == 0) {
		n++;
		after = ci.id;
		first = false;
	}
	cr_assert_eq(rc, AH_ENOTFOUND);
	return n;
}

/* Pages of [off, off + len) (off page-aligned) of the file at path that are in the page cache. */
static inline size_t ht_resident(const char *path, uint64_t off, size_t len)
{
	int fd = open(path, O_RDONLY);
	long ps = sysconf(_SC_PAGESIZE);
	size_t n = 0, pages = len / (size_t)ps;
	unsigned char *vec = calloc(pages, 1);
	void *m;

	cr_assert(fd >= 0 && vec != NULL && off % (uint64_t)ps == 0);
	m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
	cr_assert_neq(m, MAP_FAILED);
	cr_assert_eq(mincore(m, len, vec), 0);
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	munmap(m, len);
	free(vec);
	close(fd);
	return n;
}

/* Drops the file from the page cache (it must not be mapped). */
static inline void ht_evict(const char *path)
{
	int fd = open(path, O_RDONLY);

	cr_assert(fd >= 0);
	cr_assert_eq(fsync(fd), 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
}

#endif
