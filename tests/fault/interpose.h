/*
 * tests/fault/interpose.h - write and sync faults for the test binary:
 * tests/fault/interpose.c defines msync, fdatasync, fsync, pwrite,
 * posix_fallocate and fallocate in the executable, which preempts libc's
 * for liblmdb.so's calls and for heap/space.c's.  Disarmed they forward to
 * the next definition (libc, or a sanitizer's interceptor) and only count.
 * Test-only.
 */
#ifndef TESTS_FAULT_INTERPOSE_H
#define TESTS_FAULT_INTERPOSE_H

#include <stdint.h>

enum io_kind { IO_MSYNC, IO_FDATASYNC, IO_FSYNC, IO_PWRITE, IO_FALLOCATE,
               IO__COUNT };

/* The nth counted call from now on (of kinds in mask, 1 << IO_*) fails with
 * errno err (EIO or ENOSPC); nth = 0 disarms. */
void io_fault_arm(uint64_t nth, unsigned mask, int err);
/* Calls of kind k since the process started (counted always). */
uint64_t io_calls(enum io_kind k);
/* Calls of kind k made by a thread other than the process's first one
 * (the writeback thread's pwrites, say). */
uint64_t io_calls_off_main(enum io_kind k);
/* Calls matching the armed mask since io_fault_arm. */
uint64_t io_fault_seen(void);
/* Faults injected since the process started. */
uint64_t io_fault_injected(void);
/* Sleeps us microseconds at the start of every fdatasync (0: none). */
void io_fdatasync_delay(unsigned us);
/* msync calls that began while an fdatasync was in flight, since the
 * process started. */
uint64_t io_msync_overlaps(void);
/* Sleeps us microseconds inside every msync (0: none). */
void io_msync_delay(unsigned us);
/* msync calls that began while another msync was in flight, since the
 * process started. */
uint64_t io_msync_msync_overlaps(void);

#endif
