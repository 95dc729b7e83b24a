/*
 * tests/api/test_cursor_errors.c - a cursor cannot end "successfully" on
 * damage.  Movements return 1 (positioned), 0 (the end) or an error;
 * errors are sticky (every later call returns the error, valid() is 0,
 * ah_cursor_close returns it); opening fails when the first chunk it needs
 * is damaged.  Before, ah_cursor_key_valid returned 0 both past the end
 * and after an error, and ah_cursor_open returned 0 on a corrupt first
 * chunk, so the README's loop read no rows and reported success.
 *
 * Damage is made from outside: a byte of a chunk is flipped in the file at
 * the offset ah_chunk_foreach reports.  Public header only.
 */
#include <fcntl.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"

#define NKEYS 150000 /* four chunks at 25 bytes an update (version-2 columns) */

typedef struct chunks {
	uint64_t off[64];
	uint64_t bytes[64];
	int n;
} chunks;

static int on_chunk(const ah_chunk_info *ci, void *user)
{
	chunks *cs = user;

	if (cs->n < 64) {
		cs->off[cs->n] = ci->file_offset;
		cs->bytes[cs->n] = ci->stored_bytes;
		cs->n++;
	}
	return 0;
}

/* One batch of NKEYS keys "k%08d" -> "v", spanning several chunks; returns
 * the path and the chunks' file offsets in key order. */
static char *make(const tl_dir *d, chunks *cs)
{
	static char keys[NKEYS][12];
	static ah_update ups[NKEYS];
	char *path = strdup(d->path);
	ah_heap *h = tl_open_path(d->path, AH_OPEN_NOSYNC, 0);
	ah_txn *t;

	for (int i = 0; i < NKEYS; i++) {
		snprintf(keys[i], sizeof keys[i], "k%08d", i);
		ups[i] = (ah_update){ keys[i], 9, "vvvvvvvvvvvvvvvv", 16, 0, 1 };
	}
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_append(t, "a", 0, 1, ups, NKEYS), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	memset(cs, 0, sizeof *cs);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_chunk_foreach(t, "a", on_chunk, cs), 0);
	ah_txn_abort(t);
	cr_assert_geq(cs->n, 3, "want several chunks, got %d", cs->n);
	cr_assert_eq(ah_close(h), 0);
	return path;
}

static ah_heap *reopen(const char *path)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_VERIFY_READS };
	ah_heap *h;

	cr_assert_eq(ah_open(path, &o, &h), 0);
	return h;
}

/* The README's loop; returns its final status and counts keys. */
static int readme_loop(ah_txn *t, int *keys)
{
	ah_cursor *c;
	int64_t n;
	int rc = ah_cursor_open(t, "a", &c);

	*keys = 0;
	if (rc != 0)
		return rc;
	for (rc = ah_cursor_key_valid(c); rc == 1; rc = ah_cursor_step_key(c)) {
		++*keys;
		for (rc = ah_cursor_val_valid(c); rc == 1; rc = ah_cursor_step_val(c))
			if ((rc = ah_cursor_accumulate(c, 0, &n)) < 0)
				goto done;
	}
done:
	return rc < 0 ? (ah_cursor_close(c), rc) : ah_cursor_close(c);
}

Test(api_cursor_errors, healthy_loop_returns_1_then_0)
{
	tl_dir d = tl_tmpdir("api");
	chunks cs;
	char *path = make(&d, &cs);
	ah_heap *h = reopen(path);
	ah_txn *t;
	ah_cursor *c;
	int keys;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(readme_loop(t, &keys), 0);
	cr_assert_eq(keys, NKEYS);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	cr_assert_eq(ah_cursor_step_val(c), 0, "one val per key");
	cr_assert_eq(ah_cursor_rewind_vals(c), 1);
	char last[12];
	snprintf(last, sizeof last, "k%08d", NKEYS - 1);
	cr_assert_eq(ah_cursor_seek_key(c, last, 9), 1);
	cr_assert_eq(ah_cursor_step_key(c), 0, "past the last key");
	cr_assert_eq(ah_cursor_step_key(c), 0, "stays at the end");
	cr_assert_eq(ah_cursor_rewind_keys(c), 1);
	cr_assert_eq(ah_cursor_seek_key(c, "l", 1), 0);
	cr_assert_eq(ah_cursor_close(c), 0);
	cr_assert_eq(ah_cursor_open_at(t, "a", "k00000100", 9, &c), 0);
	const void *k;
	size_t kl;
	cr_assert_eq(ah_cursor_key(c, &k, &kl), 0);
	cr_assert(kl == 9 && memcmp(k, "k00000100", 9) == 0);
	cr_assert_eq(ah_cursor_close(c), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	free(path);
	tl_rmdir(&d);
}

/* A damaged first chunk: open fails, nothing to close. */
Test(api_cursor_errors, open_fails_on_damaged_first_chunk)
{
	tl_dir d = tl_tmpdir("api");
	chunks cs;
	char *path = make(&d, &cs);
	ah_txn *t;
	ah_cursor *c = (ah_cursor *)&c;
	int keys;

	tl_flip(path, cs.off[0] + cs.bytes[0] / 2, 0x40);
	ah_heap *h = reopen(path);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_cursor_open(t, "a", &c), AH_ECORRUPT);
	cr_assert_null(c);
	cr_assert_eq(readme_loop(t, &keys), AH_ECORRUPT);
	cr_assert_eq(keys, 0);
	cr_assert_eq(ah_cursor_open_at(t, "a", "k", 1, &c), AH_ECORRUPT);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	free(path);
	tl_rmdir(&d);
}

/* A damaged middle chunk: the scan stops there with the error, which
 * sticks: valid() 0, every later call returns it, close returns it. */
Test(api_cursor_errors, scan_error_is_sticky)
{
	tl_dir d = tl_tmpdir("api");
	chunks cs;
	char *path = make(&d, &cs);
	ah_txn *t;
	ah_cursor *c;
	int keys, rc;
	const void *p;
	size_t len;
	int64_t n;

	tl_flip(path, cs.off[1] + cs.bytes[1] / 2, 0x40);
	ah_heap *h = reopen(path);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(readme_loop(t, &keys), AH_ECORRUPT);
	cr_assert(keys > 0 && keys < NKEYS, "%d keys before the damage", keys);
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	while ((rc = ah_cursor_step_key(c)) == 1)
		;
	cr_assert_eq(rc, AH_ECORRUPT);
	cr_assert_eq(ah_cursor_key_valid(c), 0);
	cr_assert_eq(ah_cursor_val_valid(c), 0);
	cr_assert_eq(ah_cursor_step_key(c), AH_ECORRUPT);
	cr_assert_eq(ah_cursor_rewind_keys(c), AH_ECORRUPT, "no way around it");
	cr_assert_eq(ah_cursor_key(c, &p, &len), AH_ECORRUPT);
	cr_assert_eq(ah_cursor_accumulate(c, 0, &n), AH_ECORRUPT);
	cr_assert_eq(ah_cursor_close(c), AH_ECORRUPT);
	/* An argument error is only returned: the cursor stays usable. */
	cr_assert_eq(ah_cursor_open(t, "a", &c), 0);
	cr_assert_eq(ah_cursor_accumulate(c, 5, &n), AH_ENOTREADY);
	cr_assert_eq(ah_cursor_seek_key(c, NULL, 3), AH_EINVAL);
	cr_assert_eq(ah_cursor_step_key(c), 1);
	cr_assert_eq(ah_cursor_close(c), 0);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	free(path);
	tl_rmdir(&d);
}
