/*
 * heap/error.c - the error convention at the lowest layer: ah_version,
 * ah_strerror and ah_err_name (all three from include/arrheap.h), and the
 * translation of LMDB's MDB_* codes and errno values to AH_E* codes.
 *
 * Every LMDB return value in heap/ passes through heap_err(): no MDB_* code
 * or errno value may cross the heap boundary.  Corruption is reported with
 * HEAP_CORRUPT, which names the place it was detected on stderr when
 * AH_DEBUG is set, and never asserts.  LMDB's own assertions (on pages
 * no check refused) get a line of explanation, heap_lmdb_assert.
 */
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>

#include "heap/heap_int.h"

bool heap_debug;

const char *ah_version(int *major, int *minor, int *patch)
{
	if (major)
		*major = AH_VERSION_MAJOR;
	if (minor)
		*minor = AH_VERSION_MINOR;
	if (patch)
		*patch = AH_VERSION_PATCH;
	return AH_VERSION_STRING;
}

const char *ah_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
#define AH__ERR_MSG(name, val, msg)                                            \
	case (val):                                                            \
		return (msg);
		AH_ERRNO_MAP(AH__ERR_MSG)
#undef AH__ERR_MSG
	default:
		return "unknown error";
	}
}

const char *ah_err_name(int err)
{
	switch (err) {
	case 0:
		return "AH_OK";
#define AH__ERR_NAME(name, val, msg)                                           \
	case (val):                                                            \
		return "AH_" #name;
		AH_ERRNO_MAP(AH__ERR_NAME)
#undef AH__ERR_NAME
	default:
		return NULL;
	}
}

/* LMDB returns its own codes (-30799..-30780) or a positive errno; codes
 * already in the AH_E* band pass through unchanged. */
int heap_err(int rc)
{
	if (rc <= -32001 && rc >= -32099)
		return rc; /* already ours */
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return AH_ENOTFOUND;
	case MDB_KEYEXIST:
		return AH_EEXIST;
	case MDB_TXN_FULL:
	case MDB_DBS_FULL:
		return AH_ELIMIT;
	case MDB_MAP_FULL:
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		return AH_EFULL;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
		return AH_ECORRUPT;
	case MDB_VERSION_MISMATCH:
	case MDB_INCOMPATIBLE:
		return AH_EFORMAT;
	case MDB_READERS_FULL:
	case EAGAIN:
	case EBUSY:
		return AH_EBUSY;
	case MDB_BAD_VALSIZE:
	case EINVAL:
		return AH_EINVAL;
	case MDB_BAD_TXN:
		return AH_EBADTXN;
	case ENOMEM:
		return AH_ENOMEM;
	case EACCES:
	case EROFS:
	case EPERM:
		return AH_EREADONLY;
	case ENOENT:
		return AH_ENOTFOUND;
	default:
		return AH_EIO;
	}
}

/* liblmdb 0.9 asserts on its own pages (mdb_assert_fail) and then aborts
 * whatever the callback does; on a heap that is a damaged page read before
 * any page check (ah_verify) could refuse it.  Say so first. */
void heap_lmdb_assert(MDB_env *env, const char *msg)
{
	(void)env;
	fprintf(stderr, "arrheap: liblmdb stops on a damaged page (%s); check "
	        "an untrusted heap with ah_verify before reading it\n", msg);
}

int heap_corrupt_at(const char *file, int line, const char *what)
{
	if (heap_debug)
		fprintf(stderr, "arrheap: corruption detected at %s:%d: %s\n",
		        file, line, what);
	return AH_ECORRUPT;
}
