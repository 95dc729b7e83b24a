/*
 * heap/env_catalog.c - the LMDB environment under a heap and its catalog,
 * for heap_open (env.c): starting an environment, opening the named DBs
 * with the flags they must have, reading (or, for a new heap, writing) the
 * meta record; the read-only environment that checks a catalog the pread
 * checks (format.c, pagecheck.c) did not prove; and the atomic creation
 * of a new heap file under PATH.creating.PID.
 *
 * It must never open a writable environment on an existing file whose
 * catalog is unproven (a writable one grows the file to its map), never
 * read a named DB whose flags differ from dbi_flags, and never leave a
 * half-made heap at PATH.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

#define MAX_DBS 8

static const char *const dbi_names[HEAP_DBI__COUNT] = {
	[HEAP_T_ARR] = "arr",       [HEAP_T_BATCH] = "batch",
	[HEAP_T_SOURCE] = "source", [HEAP_DBI_META] = "meta",
	[HEAP_DBI_CHUNKS] = "chunks",
};
static const unsigned dbi_flags[HEAP_DBI__COUNT] = {
	[HEAP_T_BATCH] = MDB_INTEGERKEY,
	[HEAP_DBI_CHUNKS] = MDB_INTEGERKEY,
};

int heap_env_start(heap *h, const char *path, unsigned mflags,
                   unsigned readers, MDB_env **out)
{
	MDB_env *env = NULL;
	int rc = heap_err(mdb_env_create(&env));

	if (rc != 0)
		return rc;
	TRY(heap_err(mdb_env_set_assert(env, heap_lmdb_assert)));
	TRY(heap_err(mdb_env_set_maxdbs(env, MAX_DBS)));
	TRY(heap_err(mdb_env_set_maxreaders(env, readers)));
	TRY(heap_err(mdb_env_set_mapsize(env, h->map_bytes)));
	rc = HEAP_MDB(mdb_env_open(env, path, mflags, 0644));
	if (rc == ENOENT)
		rc = MDB_INVALID; /* vanished between our checks and LMDB's */
	TRY(heap_err(rc));
	TRY(heap_err(HEAP_MDB(mdb_reader_check(env, NULL))));
out:
	if (rc != 0)
		mdb_env_close(env);
	else
		*out = env;
	return rc;
}

/* Opens named DB i.  liblmdb 0.9 opens an existing DB whatever flags it
 * was made with (mdb_dbi_open compares none), and then reads it with the
 * compare those flags pick: a DB of other flags is refused here, before
 * anything reads it, as not arrheap's (the "meta" DB: AH_EFORMAT) or as a
 * damaged catalog (AH_ECORRUPT, like a missing one). */
static int open_dbi(heap *h, MDB_txn *txn, int i, bool create)
{
	unsigned got;
	int rc = HEAP_MDB(mdb_dbi_open(txn, dbi_names[i],
	                      dbi_flags[i] | (create ? MDB_CREATE : 0),
	                      &h->dbi[i]));

	if (rc == 0 && (rc = mdb_dbi_flags(txn, h->dbi[i], &got)) == 0 &&
	    got != dbi_flags[i])
		rc = MDB_INCOMPATIBLE;
	if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
		return i == HEAP_DBI_META ? AH_EFORMAT /* LMDB, but not arrheap */
		                          : CORRUPT("an arrheap named DB is "
		                                    "missing or of other flags");
	return heap_err(rc);
}

/* Opens the named DBs and checks the meta record (creating both when
 * create): AH_EFORMAT for a foreign LMDB file. */
int heap_env_catalog(heap *h, MDB_env *env, bool create, bool prealloc)
{
	MDB_txn *txn = NULL;
	MDB_val k = { sizeof HEAP_META_KEY - 1, (void *)HEAP_META_KEY }, v;
	uint8_t rec[HEAP_META_BYTES];
	int rc, i;

	if (create && prealloc) {
		/* Before LMDB writes the first pages of the new file. */
		TRY(heap_space_ensure(h, 256 * (uint64_t)h->psize));
	}
	rc = HEAP_MDB(mdb_txn_begin(env, NULL, create ? 0 : MDB_RDONLY, &txn));
	/* Another process committed past our map since our open mapped it
	 * (found by outside testing: AH_EIO from ah_open): remap as a txn
	 * begin does, the file's size or more, and again. */
	if (rc == MDB_MAP_RESIZED && env == h->env &&
	    (rc = heap_path_adopt_map(h, env,
	                              !(h->flags & AH_OPEN_RDONLY))) == 0)
		rc = HEAP_MDB(mdb_txn_begin(env, NULL,
		                            create ? 0 : MDB_RDONLY, &txn));
	TRY(heap_err(rc));
	TRY(open_dbi(h, txn, HEAP_DBI_META, create));
	rc = HEAP_MDB(mdb_get(txn, h->dbi[HEAP_DBI_META], &k, &v));
	if (rc == MDB_NOTFOUND && create) {
		TRY(heap_uuid_new(h->uuid));
		heap_meta_encode(rec, h->psize, h->uuid, HEAP_FORMAT_BASE);
		h->format = HEAP_FORMAT_BASE;
		v.mv_size = sizeof rec;
		v.mv_data = rec;
		TRY(heap_err(HEAP_MDB(mdb_put(txn, h->dbi[HEAP_DBI_META], &k, &v,
		                          0))));
		{
			static const uint64_t none[4] = { 0 };

			TRY(heap_names_put_raw(txn, h->dbi[HEAP_DBI_META], none));
		}
	} else if (rc == MDB_NOTFOUND) {
		rc = AH_EFORMAT;
		goto out;
	} else {
		TRY(heap_err(rc));
		TRY(heap_meta_check(v.mv_data, v.mv_size, h->psize,
		                         h->uuid, &h->format));
	}
	for (i = 0; i < HEAP_DBI__COUNT; i++)
		if (i != HEAP_DBI_META)
			TRY(open_dbi(h, txn, i, create));
	rc = heap_err(heap_fault_commit(txn));
	txn = NULL;
out:
	if (txn != NULL)
		mdb_txn_abort(txn);
	return rc;
}

/* Existing file whose catalog the pread checks did not prove: a read-only
 * environment checks it without changing a byte (no WRITEMAP, so no
 * ftruncate), and fails with the error heap_env_catalog() names. */
int heap_env_check_catalog(heap *h, const char *path, unsigned readers)
{
	MDB_env *env = NULL;
	int rc = heap_env_start(h, path,
	                        MDB_NOSUBDIR | MDB_NOTLS | MDB_NORDAHEAD |
	                        MDB_RDONLY, readers, &env);

	if (rc == 0)
		rc = heap_env_catalog(h, env, false, false);
	mdb_env_close(env);
	return rc;
}

/* Creates the heap file at path atomically: the environment and its catalog
 * are made under PATH.creating.<pid> (this creator's own name), without
 * WRITEMAP (LMDB then writes with pwrite, so a full disk is an error, not
 * a SIGBUS), committed durably, and published without replacing anything
 * (heap/path.c).  A process killed at any moment leaves either no PATH or
 * a complete empty heap.  *exists is set when another process published
 * the heap first: the caller then opens that one. */
int heap_env_create_file(heap *h, const char *path, unsigned readers,
                         bool *exists)
{
	char tmp[PATH_MAX], tmplock[PATH_MAX];
	MDB_env *env = NULL;
	uint64_t map = h->map_bytes;
	int rc, dfd;

	*exists = false;
	if ((rc = heap_path_temp(path, tmp)) != 0)
		return rc;
	if ((size_t)snprintf(tmplock, sizeof tmplock, "%s-lock", tmp) >= sizeof tmplock)
		return AH_EINVAL;
	/* Name a missing or unwritable directory as such (LMDB would only say
	 * it cannot open the file). */
	dfd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (dfd < 0)
		return errno == ENOENT ? AH_ENOTFOUND : heap_err(errno);
	close(dfd);
	unlink(tmp);
	h->map_bytes = 1u << 20;
	rc = heap_space_lockfile(tmp, readers, NULL, NULL);
	if (rc == 0)
		rc = heap_env_start(h, tmp, MDB_NOSUBDIR | MDB_NOTLS, readers,
		                    &env);
	h->map_bytes = map;
	if (rc == 0)
		rc = heap_env_catalog(h, env, true, false);
	if (env != NULL)
		mdb_env_close(env);
	if (rc == 0)
		rc = heap_path_publish(tmp, path, exists);
	unlink(tmplock);
	if (rc != 0)
		unlink(tmp);
	return rc;
}
