/*
 * bench/bench.h - what the benchmark programs share: the workload, the flat
 * update log, timing, and the child side of the driver protocol.
 *
 * The benchmark is four programs built from bench/: the driver ah-bench
 * (bench/driver.c) and one program per system, ah-bench-arrheap,
 * ah-bench-rocksdb and ah-bench-lmdb, each linked only with what its system
 * needs so that a restart pays exactly that system's process start.  The
 * driver fork+execs a system program for every measurement; the child prints
 * its figures as "name value" lines on stdout.
 *
 * Like tools/, these are thin programs over public interfaces (arrheap.h,
 * rocksdb/c.h, lmdb.h).  They measure and report; they never assert
 * anything about speed.
 *
 * Nothing here may name a system's types: this header and bench/common.c
 * include no system's header, so the driver links none.
 */
#ifndef BENCH_BENCH_H
#define BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* One update as stored in the flat log: 40 bytes, native byte order. */
typedef struct bench_rec {
	uint8_t key[8];  /* big endian, so byte order = numeric order */
	uint8_t val[16];
	uint64_t time;   /* index of the append that carries it */
	int64_t diff;    /* +1, or -1 for a retraction of an earlier update */
} bench_rec;

#define BENCH_APPEND 100000u  /* updates per append (one durable commit) */
#define BENCH_SEED 0x5eed0008u
#define BENCH_GETS 1000u      /* timed point queries after the first */

/* Fills rec with update j of the stream of n updates (deterministic). */
void bench_gen(uint64_t seed, uint64_t n, uint64_t j, bench_rec *rec);
/* The key of query q of run r (q = 0: the first answer), a key that exists. */
void bench_query_key(uint64_t seed, uint64_t n, uint64_t run, uint64_t q,
                     uint8_t key[8]);
/* Number of appends for n updates, and the latest time (as_of of queries). */
uint64_t bench_appends(uint64_t n);

/* Monotonic clock in ns (CLOCK_MONOTONIC: comparable across processes). */
uint64_t bench_now_ns(void);
/* Peak resident set of this process, bytes (getrusage ru_maxrss). */
uint64_t bench_maxrss(void);
/* Major page faults of this process so far. */
/* this process's major and minor page faults so far (one getrusage) */
void bench_faults(uint64_t *major, uint64_t *minor);
/* Allocated bytes (st_blocks * 512) of a file, or of all files in a dir. */
uint64_t bench_alloc_bytes(const char *path);

/* Diagnostic, only when the environment has BENCH_MADV_RANDOM: madvise
 * MADV_RANDOM on this process's mappings of PATH (what LMDB's MDB_NORDAHEAD
 * does), to show what the kernel's mmap read-around costs a cold start.
 * Not part of the reported systems. */
void bench_madv_random(const char *path);
/* A decimal argument, or bench_die. */
uint64_t bench_arg_u64(const char *s);
/* Prints one figure for the driver. */
void bench_put(const char *name, double v);
/* Prints a message to stderr and exits 1. */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Reads the log in pieces: returns records read (0 at the end). */
typedef struct bench_log {
	int fd;
	uint64_t n;
} bench_log;
void bench_log_open(bench_log *l, const char *path);
size_t bench_log_read(bench_log *l, bench_rec *buf, size_t max);
void bench_log_close(bench_log *l);

/* Sorts recs by (key, val) and adds the diffs of equal (key, val): one
 * append holds one time, so this is the consolidation a key-value store
 * needs before a put.  Returns the new count (zero sums are dropped). */
size_t bench_consolidate(bench_rec *recs, size_t n);

/* A system as the generic start/scan children drive it.  All return 0 or
 * exit through bench_die. */
typedef struct bench_sys {
	const char *name;
	void (*load)(const char *dir, const char *log, uint64_t n);
	void *(*open)(const char *dir, uint64_t n);
	int64_t (*get)(void *db, const uint8_t key[8]);
	void (*scan)(void *db, uint64_t *groups, int64_t *sum);
	void (*close)(void *db);
	/* optional extra subcommand (arrheap: merge, rebuild; rocksdb: kill) */
	int (*extra)(int argc, char **argv);
} bench_sys;

/* BENCH_GETS point queries of run RUN, each timed: prints get_p50_us,
 * get_p99_us and gets_check (the sum of the answers). */
void bench_timed_gets(const bench_sys *s, void *db, uint64_t n, uint64_t run);

/* main() of a system program:
 *   load DIR LOG N
 *   start DIR N RUN T0_NS     open, first answer, BENCH_GETS timed gets
 *   scan DIR N                open and a full scan
 * and anything sys->extra accepts. */
int bench_child_main(const bench_sys *sys, int argc, char **argv);

#endif /* BENCH_BENCH_H */
