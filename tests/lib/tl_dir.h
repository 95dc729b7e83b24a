/*
 * tests/lib/tl_dir.h - a private temporary directory per test: every test
 * (and every fixture) makes its own under /tmp, named after the test kind,
 * keeps its heap file at d->path (d->dir + "/heap") and removes the whole
 * directory at the end, also from a .fini after a failed assertion.
 *
 * Two flavours: tl_dir_try and tl_dir_try_remove return a status and call
 * no Criterion function, so forked children and threads may use them;
 * tl_tmpdir, tl_rmdir and tl_dir_cleanup assert (or warn) through Criterion
 * and belong to the test's own process.  Public header only (tests/lib is
 * for tests that may see nothing but include/arrheap.h).
 */
#ifndef TESTS_LIB_TL_DIR_H
#define TESTS_LIB_TL_DIR_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

typedef struct tl_dir {
	char dir[64];   /* /tmp/ah-TAG-XXXXXX */
	char path[128]; /* dir/heap */
} tl_dir;

/* Makes /tmp/ah-TAG-XXXXXX: 0, or -1 (errno set).  No Criterion. */
static inline int tl_dir_try(tl_dir *d, const char *tag)
{
	snprintf(d->dir, sizeof d->dir, "/tmp/ah-%s-XXXXXX", tag);
	if (mkdtemp(d->dir) == NULL) {
		d->dir[0] = '\0';
		return -1;
	}
	snprintf(d->path, sizeof d->path, "%s/heap", d->dir);
	return 0;
}

/* rm -rf of the directory: system()'s status (0 when removed).  No
 * Criterion. */
static inline int tl_dir_try_remove(const tl_dir *d)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
	return system(cmd);
}

/* Makes the directory and returns it; asserts. */
static inline tl_dir tl_tmpdir(const char *tag)
{
	tl_dir d;

	cr_assert_eq(tl_dir_try(&d, tag), 0, "mkdtemp /tmp/ah-%s-XXXXXX", tag);
	return d;
}

/* Removes the directory; asserts that it went. */
static inline void tl_rmdir(tl_dir *d)
{
	cr_assert_eq(tl_dir_try_remove(d), 0, "rm -rf %s", d->dir);
	d->dir[0] = '\0';
}

/* tl_tmpdir with a tmpfs of SIZE (mount's "size=" form, e.g. "24m")
 * mounted on it, for a really full disk; skips the test (Criterion) when
 * not root or when the mount fails.  umount2(d.dir, MNT_DETACH) before
 * tl_rmdir. */
static inline tl_dir tl_tmpfs_dir(const char *tag, const char *size)
{
	char opt[32];
	tl_dir d;

	if (geteuid() != 0)
		cr_skip_test("needs root to mount a tmpfs");
	d = tl_tmpdir(tag);
	snprintf(opt, sizeof opt, "size=%s", size);
	if (mount("tmpfs", d.dir, "tmpfs", 0, opt) != 0) {
		int e = errno;

		tl_rmdir(&d);
		cr_skip_test("cannot mount a tmpfs: %s", strerror(e));
	}
	return d;
}

/* For a .fini: removes the directory if one was made, warns (never
 * asserts: the test may already have failed) when it cannot, and forgets
 * it, so it is safe to call twice. */
static inline void tl_dir_cleanup(tl_dir *d)
{
	if (d->dir[0] == '\0')
		return;
	if (tl_dir_try_remove(d) != 0)
		cr_log_warn("could not remove %s", d->dir);
	d->dir[0] = '\0';
}

/* d->dir/name into out (cap bytes); returns out. */
static inline char *tl_dir_file(const tl_dir *d, const char *name, char *out,
                                size_t cap)
{
	snprintf(out, cap, "%s/%s", d->dir, name);
	return out;
}

#endif /* TESTS_LIB_TL_DIR_H */
