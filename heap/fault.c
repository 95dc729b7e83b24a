/*
 * heap/fault.c - the LMDB-call fault injector (heap/fault.h): a process-wide
 * counter checked by HEAP_MDB() before each wrapped LMDB call in heap/.
 *
 * Disarmed (fail_at == 0), the hook only reads fail_at: no writes, so reader
 * threads may run through it concurrently without a data race.  Armed, it
 * is meant for single-threaded fault sweeps.  It must never change an LMDB
 * call's effect when disarmed.
 */
#include "heap/fault.h"

#if defined(__SANITIZE_THREAD__)
#include <stdatomic.h>

static atomic_uint_fast64_t order;

void heap_fault_order(void)
{
	atomic_fetch_add_explicit(&order, 1, memory_order_acq_rel);
}
#else
void heap_fault_order(void)
{
}
#endif

static uint64_t fail_at;   /* call number that fails, 0 = disarmed */
static uint64_t calls;     /* wrapped calls since arming */
static uint64_t injected;  /* faults injected, ever */
static int fail_code;

void heap_fault_mdb_arm(uint64_t nth, int code)
{
	fail_at = nth;
	fail_code = code;
	calls = 0;
}

uint64_t heap_fault_mdb_calls(void)
{
	return calls;
}

uint64_t heap_fault_mdb_injected(void)
{
	return injected;
}

bool heap_fault_mdb_hit(void)
{
	if (fail_at == 0)
		return false;
	if (++calls != fail_at)
		return false;
	injected++;
	return true;
}

int heap_fault_mdb_code(void)
{
	return fail_code;
}

int heap_fault_commit(MDB_txn *txn)
{
	if (heap_fault_mdb_hit()) {
		mdb_txn_abort(txn);
		return fail_code;
	}
	return mdb_txn_commit(txn);
}
