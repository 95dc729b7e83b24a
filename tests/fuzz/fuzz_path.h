/*
 * tests/fuzz/fuzz_path.h - the path the heap fuzzer drives, shared by the
 * libFuzzer target (tests/fuzz/fuzz_heap.c) and the regression test that
 * replays tests/fuzz/corpus and tests/fuzz/crashers under `make test`
 * (live::fuzz_regressions in tests/dump/test_live.c): open read-only, verify, list batches
 * and chunks, read every arrangement to the end, space and readers.
 *
 * An input is not a whole file but damage to a real heap: byte 0 picks a
 * seed heap of tests/fuzz/seeds (sorted by name), then each 5 bytes are one
 * patch: a u32 (little endian) offset into the seed's chunks (all chunk
 * spans concatenated, modulo their total) and a byte XORed there.  So the
 * fuzzer damages what arrheap decodes (chunk headers, batch chunk tries)
 * while LMDB's own pages stay intact: those are heap/pagecheck*.c's, swept
 * page class by page class by tests/fault/test_corrupt_pages.c (the first
 * raw-file run found a SIGBUS in mdb_dbi_open within seconds; the input,
 * kept in tests/fuzz/lmdb/, is now refused by heap_open's page check and
 * replayed in-process by that file and through ah-dump by tests/dump).
 *
 * Any result code is fine; what must never happen is a crash, a hang or a
 * sanitizer report.  Public API only; no Criterion calls (the fuzzer links
 * no Criterion).
 */
#ifndef TESTS_FUZZ_FUZZ_PATH_H
#define TESTS_FUZZ_FUZZ_PATH_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrheap.h"

static int fp_batch(const ah_batch_info *b, void *u)
{
	*(uint64_t *)u += b->updates;
	return 0;
}

static int fp_chunk(const ah_chunk_info *c, void *u)
{
	*(uint64_t *)u += c->bytes;
	return 0;
}

static int fp_problem(const ah_problem *p, void *u)
{
	*(uint64_t *)u += strlen(p->message) + strlen(p->arrangement);
	return 0;
}

static int fp_reader(const ah_reader_info *r, void *u)
{
	*(uint64_t *)u += r->txn_id;
	return 0;
}

/* Reads NAME to the end with a cursor, accumulating at upper - 1. */
static void fp_read(ah_txn *t, const char *name, uint64_t *sink)
{
	ah_arrangement_info info;
	ah_cursor *c = NULL;
	int rc;

	if (ah_arrangement_info_get(t, name, &info) || info.upper == 0 ||
	    ah_cursor_open(t, name, &c))
		return;
	for (rc = 0; rc >= 0 && ah_cursor_key_valid(c); rc = ah_cursor_step_key(c))
		for (; rc >= 0 && ah_cursor_val_valid(c); rc = ah_cursor_step_val(c)) {
			int64_t sum;
			const void *v;
			size_t vl;

			if (ah_cursor_val(c, &v, &vl) == 0)
				*sink += vl;
			if (ah_cursor_accumulate(c, info.upper - 1, &sum) == 0)
				*sink += (uint64_t)sum;
		}
	ah_cursor_close(c);
}

/* Runs the whole path on the heap file at path; returns ah_open's code. */
static int fuzz_heap_path(const char *path)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	ah_heap *h = NULL;
	ah_txn *t = NULL;
	ah_verify_stats st;
	ah_space_info si;
	char name[AH_NAME_MAX + 1];
	uint64_t sink = 0;
	int rc = ah_open(path, &o, &h), n = 0;

	if (rc)
		return rc;
	if (ah_txn_begin(h, AH_TXN_RDONLY, &t) == 0) {
		ah_verify(t, fp_problem, &sink, &st);
		ah_space_get(t, &si);
		for (rc = ah_arrangement_next(t, NULL, name); rc == 0 && n < 64;
		     rc = ah_arrangement_next(t, name, name), n++) {
			ah_batch_foreach(t, name, fp_batch, &sink);
			ah_chunk_foreach(t, name, fp_chunk, &sink);
			fp_read(t, name, &sink);
		}
		ah_txn_abort(t);
	}
	ah_reader_foreach(h, fp_reader, &sink);
	ah_close(h);
	return sink == UINT64_MAX; /* keeps sink alive */
}

#define FZ_SEEDS 16
#define FZ_SPANS 4096

typedef struct fz_seed {
	uint8_t *bytes;
	size_t len;
	uint32_t nspans;
	uint64_t off[FZ_SPANS], len_of[FZ_SPANS], total;
} fz_seed;

static fz_seed fz_seeds[FZ_SEEDS];
static int fz_nseeds;

static int fz_span(const ah_chunk_info *c, void *u)
{
	fz_seed *s = u;

	if (s->nspans < FZ_SPANS && c->file_offset + c->stored_bytes <= s->len) {
		s->off[s->nspans] = c->file_offset;
		s->len_of[s->nspans++] = c->stored_bytes;
		s->total += c->stored_bytes;
	}
	return 0;
}

static int fz_write(const char *path, const uint8_t *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600), ok;

	if (fd < 0)
		return -1;
	ok = len == 0 || write(fd, b, len) == (ssize_t)len;
	close(fd);
	return ok ? 0 : -1;
}

static int fz_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads the seed heaps of dir and finds their chunks (through a copy at
 * work).  Returns the number of seeds, or -1. */
static int fz_load_seeds(const char *dir, const char *work)
{
	char *names[FZ_SEEDS], path[1024];
	int n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return -1;
	while ((e = readdir(d)) && n < FZ_SEEDS)
		if (strstr(e->d_name, ".heap"))
			names[n++] = strdup(e->d_name);
	closedir(d);
	qsort(names, (size_t)n, sizeof *names, fz_cmp);
	for (int i = 0; i < n; i++) {
		fz_seed *s = &fz_seeds[fz_nseeds];
		FILE *f;
		ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
		ah_heap *h;
		ah_txn *t;
		char name[AH_NAME_MAX + 1];

		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		free(names[i]);
		memset(s, 0, sizeof *s);
		if (!(f = fopen(path, "rb")))
			return -1;
		fseek(f, 0, SEEK_END);
		s->len = (size_t)ftell(f);
		fseek(f, 0, SEEK_SET);
		s->bytes = malloc(s->len ? s->len : 1);
		if (!s->bytes || fread(s->bytes, 1, s->len, f) != s->len) {
			fclose(f);
			return -1;
		}
		fclose(f);
		if (fz_write(work, s->bytes, s->len) || ah_open(work, &o, &h))
			return -1;
		if (ah_txn_begin(h, AH_TXN_RDONLY, &t) == 0) {
			int rc;

			for (rc = ah_arrangement_next(t, NULL, name); rc == 0;
			     rc = ah_arrangement_next(t, name, name))
				ah_chunk_foreach(t, name, fz_span, s);
			ah_txn_abort(t);
		}
		ah_close(h);
		fz_nseeds++;
	}
	return fz_nseeds;
}

/* Builds the damaged heap of one input at work and runs the path on it. */
static int fz_run(const uint8_t *data, size_t size, const char *work)
{
	fz_seed *s;
	uint8_t *b;
	int rc;

	if (size == 0 || fz_nseeds == 0)
		return 0;
	s = &fz_seeds[data[0] % fz_nseeds];
	if (!(b = malloc(s->len ? s->len : 1)))
		return -1;
	memcpy(b, s->bytes, s->len);
	for (size_t i = 1; i + 5 <= size && s->total; i += 5) {
		uint32_t at = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 |
		              (uint32_t)data[i + 2] << 16 | (uint32_t)data[i + 3] << 24;
		uint64_t pos = at % s->total;

		for (uint32_t k = 0; k < s->nspans; k++) {
			if (pos < s->len_of[k]) {
				b[s->off[k] + pos] ^= data[i + 4];
				break;
			}
			pos -= s->len_of[k];
		}
	}
	rc = fz_write(work, b, s->len);
	free(b);
	if (rc == 0)
		fuzz_heap_path(work);
	return rc;
}

#endif /* TESTS_FUZZ_FUZZ_PATH_H */
