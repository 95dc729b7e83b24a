/*
 * tests/fault/interpose.c - libc interposition for write/sync fault
 * injection (see interpose.h).  An executable's definitions come first in
 * symbol lookup, so LMDB's msync/fdatasync/pwrite land here; each forwards
 * through dlsym(RTLD_NEXT) unless the armed counter says to fail.  The
 * counters are atomics: every test of the suite runs through these.
 * Never changes a call's effect when disarmed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "interpose.h"

static _Atomic uint64_t calls[IO__COUNT], off_main[IO__COUNT];
static _Atomic uint64_t fail_at, seen, injected;
static _Atomic unsigned fail_mask;
static _Atomic int fail_err;
/* fdatasyncs in flight, msyncs that began while one was, and a delay
 * before each fdatasync (microseconds) that widens the window */
static _Atomic int fds_inflight;
static _Atomic uint64_t overlaps;
static _Atomic unsigned fds_delay_us;
/* msyncs in flight, msyncs that began while another was, and a delay
 * inside each msync (microseconds) */
static _Atomic int ms_inflight;
static _Atomic uint64_t ms_overlaps;
static _Atomic unsigned ms_delay_us;

void io_msync_delay(unsigned us)
{
	atomic_store(&ms_delay_us, us);
}

uint64_t io_msync_msync_overlaps(void)
{
	return atomic_load(&ms_overlaps);
}

void io_fdatasync_delay(unsigned us)
{
	atomic_store(&fds_delay_us, us);
}

uint64_t io_msync_overlaps(void)
{
	return atomic_load(&overlaps);
}

void io_fault_arm(uint64_t nth, unsigned mask, int err)
{
	atomic_store(&fail_at, 0);
	atomic_store(&seen, 0);
	atomic_store(&fail_mask, mask);
	atomic_store(&fail_err, err);
	atomic_store(&fail_at, nth);
}

uint64_t io_calls(enum io_kind k)
{
	return atomic_load(&calls[k]);
}

uint64_t io_calls_off_main(enum io_kind k)
{
	return atomic_load(&off_main[k]);
}

uint64_t io_fault_seen(void)
{
	return atomic_load(&seen);
}

uint64_t io_fault_injected(void)
{
	return atomic_load(&injected);
}

/* Counts the call; returns the errno to fail with, or 0. */
static int hit(enum io_kind k)
{
	uint64_t at;

	atomic_fetch_add(&calls[k], 1);
	if (gettid() != getpid())
		atomic_fetch_add(&off_main[k], 1);
	at = atomic_load(&fail_at);
	if (at == 0 || !(atomic_load(&fail_mask) & (1u << k)))
		return 0;
	if (atomic_fetch_add(&seen, 1) + 1 != at)
		return 0;
	atomic_fetch_add(&injected, 1);
	return atomic_load(&fail_err);
}

static void *next(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

static int (*real_msync)(void *, size_t, int);
static int (*real_fdatasync)(int);
static int (*real_fsync)(int);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);

/* Resolved once before main, so that threads never write the pointers. */
__attribute__((constructor)) static void resolve(void)
{
	real_msync = (int (*)(void *, size_t, int))next("msync");
	real_fdatasync = (int (*)(int))next("fdatasync");
	real_fsync = (int (*)(int))next("fsync");
	real_pwrite = (ssize_t (*)(int, const void *, size_t, off_t))next(
		"pwrite");
	real_posix_fallocate = (int (*)(int, off_t, off_t))next(
		"posix_fallocate");
	real_fallocate = (int (*)(int, int, off_t, off_t))next("fallocate");
}

int msync(void *addr, size_t len, int flags)
{
	int err = hit(IO_MSYNC), rc;

	if (atomic_load(&fds_inflight) > 0)
		atomic_fetch_add(&overlaps, 1);
	if (atomic_fetch_add(&ms_inflight, 1) > 0)
		atomic_fetch_add(&ms_overlaps, 1);
	unsigned us = atomic_load(&ms_delay_us);
	if (us)
		usleep(us);
	if (err) {
		errno = err;
		rc = -1;
	} else {
		rc = real_msync(addr, len, flags);
	}
	atomic_fetch_sub(&ms_inflight, 1);
	return rc;
}

int fdatasync(int fd)
{
	atomic_fetch_add(&fds_inflight, 1);
	unsigned us = atomic_load(&fds_delay_us);
	if (us)
		usleep(us);
	int err = hit(IO_FDATASYNC), rc;

	if (err) {
		errno = err;
		rc = -1;
	} else {
		rc = real_fdatasync(fd);
	}
	atomic_fetch_sub(&fds_inflight, 1);
	return rc;
}

int fsync(int fd)
{
	int err = hit(IO_FSYNC);

	if (err) {
		errno = err;
		return -1;
	}
	return real_fsync(fd);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	int err = hit(IO_PWRITE);

	if (err) {
		errno = err;
		return -1;
	}
	return real_pwrite(fd, buf, n, off);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
	int err = hit(IO_FALLOCATE);

	if (err)
		return err; /* returns the error, errno untouched */
	return real_posix_fallocate(fd, off, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	int err = hit(IO_FALLOCATE);

	if (err) {
		errno = err;
		return -1;
	}
	return real_fallocate(fd, mode, off, len);
}
