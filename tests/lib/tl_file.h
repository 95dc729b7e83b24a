/*
 * tests/lib/tl_file.h - files seen from outside the library: reading a
 * whole file (text or bytes), writing one, copying a sparse heap file (holes kept), a
 * fingerprint (size + XXH3) to prove a file unchanged, flipping bits of
 * one byte in place to damage a heap, and the page cache (which pages of a
 * file are resident; dropping them).
 *
 * The tl_try_* functions, tl_copy and tl_file_hash return a status and call
 * no Criterion function: forked children may use them.  The others assert
 * through Criterion (the test's own process only).  Public header only.
 */
#ifndef TESTS_LIB_TL_FILE_H
#define TESTS_LIB_TL_FILE_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

/* The whole file (malloc, with a NUL after it), its size in *len (may be
 * NULL); asserts that it can be read. */
static inline char *tl_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)n + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	if (len != NULL)
		*len = (size_t)n;
	return buf;
}

/* A text file, NUL-terminated (malloc); asserts. */
static inline char *tl_slurp(const char *path)
{
	return tl_read(path, NULL);
}

/* Creates or truncates path with text; asserts. */
static inline void tl_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0, "%s", path);
}

/* Copies src to dst (created or truncated), keeping holes: a heap file is
 * sparse and its apparent size is its map size.  0 or -1. */
static inline int tl_copy(const char *src, const char *dst)
{
	static char buf[1 << 16];
	int in = open(src, O_RDONLY), out = -1, rc = -1;
	struct stat st;
	off_t pos = 0, data, hole;

	if (in < 0 || fstat(in, &st) != 0)
		goto out;
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0 || ftruncate(out, st.st_size) != 0)
		goto out;
	while (pos < st.st_size) {
		data = lseek(in, pos, SEEK_DATA);
		if (data < 0)
			break; /* the rest is a hole */
		hole = lseek(in, data, SEEK_HOLE);
		for (pos = data; pos < hole;) {
			size_t want = (size_t)(hole - pos) < sizeof buf
			                      ? (size_t)(hole - pos)
			                      : sizeof buf;
			ssize_t r = pread(in, buf, want, pos);

			if (r <= 0 || pwrite(out, buf, (size_t)r, pos) != r)
				goto out;
			pos += r;
		}
	}
	rc = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return rc;
}

/* XXH3-64 of the whole file, and its size in *size; 0 (and *size 0) when
 * it cannot be read. */
static inline uint64_t tl_file_hash(const char *path, uint64_t *size)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	uint64_t hash = 0;
	void *buf;

	*size = 0;
	if (fd < 0 || fstat(fd, &st) != 0)
		goto out;
	*size = (uint64_t)st.st_size;
	buf = malloc(*size + 1);
	if (buf != NULL && pread(fd, buf, *size, 0) == (ssize_t)*size)
		hash = XXH3_64bits(buf, *size);
	free(buf);
out:
	if (fd >= 0)
		close(fd);
	return hash;
}

/* Reads every data segment of the file at path (SEEK_DATA / SEEK_HOLE, a
 * 1 MiB buffer), so its written pages are in the page cache; a heap file
 * is as long as its map (sparse), so reading it whole is not an option. */
static inline void tl_file_warm(const char *path)
{
	int fd = open(path, O_RDONLY);
	size_t cap = 1u << 20;
	uint8_t *buf = malloc(cap);
	off_t off = 0, d, h;

	cr_assert(fd >= 0 && buf != NULL, "open %s", path);
	while ((d = lseek(fd, off, SEEK_DATA)) >= 0) {
		h = lseek(fd, d, SEEK_HOLE);
		cr_assert_geq(h, d);
		for (off_t p = d; p < h;) {
			size_t n = (size_t)(h - p) < cap ? (size_t)(h - p) : cap;
			ssize_t got = pread(fd, buf, n, p);

			cr_assert_gt(got, 0);
			p += got;
		}
		off = h;
	}
	free(buf);
	close(fd);
}

typedef struct tl_print {
	uint64_t size;
	uint64_t hash;
} tl_print;

/* Size and XXH3 of the file; asserts that it can be read whole. */
static inline tl_print tl_fingerprint(const char *path)
{
	tl_print fp = { 0, 0 };
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

/* XORs mask into byte off of the file, in place: 0 or -1.  No Criterion. */
static inline int tl_try_flip(const char *path, uint64_t off, uint8_t mask)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	int rc = fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1 &&
	         (b ^= mask, pwrite(fd, &b, 1, (off_t)off) == 1) ? 0 : -1;

	if (fd >= 0 && close(fd) != 0)
		rc = -1;
	return rc;
}

/* The same, asserting each step. */
static inline void tl_flip(const char *path, uint64_t off, uint8_t mask)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	cr_assert_geq(fd, 0, "open %s", path);
	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= mask;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	cr_assert_eq(close(fd), 0);
}

/* Pages of [off, off + len) (off page-aligned) of the file at path that
 * are in the page cache. */
static inline size_t tl_resident(const char *path, uint64_t off, size_t len)
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

/* tl_resident, polled every 10 ms for up to 10 s until there are want
 * pages (a prefetch completes in the background); the last count. */
static inline size_t tl_wait_resident(const char *path, uint64_t off,
                                      size_t len, size_t want)
{
	size_t n = 0;

	for (int i = 0; i < 1000 && (n = tl_resident(path, off, len)) < want; i++)
		usleep(10000);
	return n;
}

/* Drops the file from the page cache (it must not be mapped). */
static inline void tl_evict(const char *path)
{
	int fd = open(path, O_RDONLY);

	cr_assert(fd >= 0);
	cr_assert_eq(fsync(fd), 0);
	cr_assert_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
}

#endif /* TESTS_LIB_TL_FILE_H */
