/*
 * heap/fault.h - the fault-injection layer of the heap: tests make the Nth
 * LMDB call of the process fail as if LMDB had returned an error, to prove
 * that every failure path ends in a clean error code, a poisoned txn and an
 * intact file (issue 7).  Allocation faults live in pool.c
 * (pool_inject_failure); write/sync faults are injected by the test binary,
 * which interposes libc's msync/fdatasync/pwrite (tests/fault/).
 *
 * Each LMDB call in heap/ that can fail is wrapped in HEAP_MDB() (one line);
 * disarmed, the wrapper costs one load and a branch and counts nothing, so
 * it is compiled into every build.  Only heap/ sources include this header;
 * it must never change what a call does when injection is off.
 */
#ifndef HEAP_FAULT_H
#define HEAP_FAULT_H

#include <lmdb.h>
#include <stdbool.h>
#include <stdint.h>

/* Arms injection: the nth wrapped LMDB call from now on (1 = the next one)
 * returns code (an MDB_* code or a positive errno) instead of running;
 * nth = 0 disarms.  Process-wide; set it only while no other thread runs
 * heap calls. */
void heap_fault_mdb_arm(uint64_t nth, int code);
/* Wrapped calls seen since the last arm (counted only while armed), and
 * faults injected since the process started. */
uint64_t heap_fault_mdb_calls(void);
uint64_t heap_fault_mdb_injected(void);

/* The hook: true when this call is the injected one; heap_fault_mdb_code()
 * is then the code to return. */
bool heap_fault_mdb_hit(void);
int heap_fault_mdb_code(void);

/* Evaluates to the injected code instead of running call, or to call's
 * result.  Never for mdb_txn_commit: see heap_fault_commit. */
#define HEAP_MDB(call) (heap_fault_mdb_hit() ? heap_fault_mdb_code() : (call))

/* mdb_txn_commit, or (injected) mdb_txn_abort and the injected code: LMDB
 * frees the txn on a failed commit, and so must the injection. */
int heap_fault_commit(MDB_txn *txn);

/* Makes LMDB's reader/writer ordering visible to ThreadSanitizer: called
 * at every txn begin and end and after a chunk's pages are chosen, it is an
 * acq_rel RMW on one process-wide atomic in TSan builds (so a page written
 * by a commit and read by a later snapshot, or read by an ended snapshot
 * and reused by the writer, is ordered for TSan as LMDB's reader table
 * orders it), and nothing otherwise. */
void heap_fault_order(void);

#endif /* HEAP_FAULT_H */
