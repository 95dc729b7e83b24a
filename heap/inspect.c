/*
 * heap/inspect.c - read-only views of the heap for ah-dump and the public
 * inspection API (txn/inspect.c): a tolerant walk over every chunk, LMDB's
 * free list and page accounting, the reader table, and hot backups.
 *
 * Unlike heap_chunk_next, the chunk walk does not stop at a damaged chunk:
 * it reports what is wrong with each entry and goes on, because a verifier
 * must name every bad chunk, not only the first.  The header checks repeat
 * chunk.c's (the layout is drawn there); keep both in step.
 *
 * Nothing here writes to the heap file or poisons a transaction.  Every
 * LMDB code is translated with heap_err; tree damage is AH_ECORRUPT.  Each
 * MDB_NEXT walk checks that its keys strictly increase and stops with
 * AH_ECORRUPT when they do not (a damaged tree can make the cursor go
 * back, and the walk would never end).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/fault.h"
#include "heap/heap_int.h"

#define VALUE_PAD 16u

/* The file offset of an overflow value: its first page's header starts with
 * the page number (MDB_page.mp_pgno), see chunk.c. */
static uint64_t value_offset(const heap *h, const MDB_val *v)
{
	const char *page = (const char *)v->mv_data - VALUE_PAD;
	uint64_t pgno;

	if ((uintptr_t)page % h->psize != 0)
		return 0;
	memcpy(&pgno, page, sizeof pgno);
	return pgno < h->map_bytes / h->psize ? pgno * h->psize + VALUE_PAD : 0;
}

/* Asks the kernel to read the whole chunk ahead (one large request instead
 * of a fault per readahead window): verify then reads at disk speed.
 * Advice only; returns 0. */
static int prefetch(const heap *h, const MDB_val *v)
{
	char *page = (char *)v->mv_data - VALUE_PAD;

	if ((uintptr_t)page % h->psize == 0)
		(void)madvise(page, v->mv_size + VALUE_PAD, MADV_WILLNEED);
	return 0;
}

/* Fills e from one entry of the chunks table; e->problem names the first
 * thing wrong with it. */
static void scan_one(const heap *h, const MDB_val *k, const MDB_val *v,
                     bool checksums, heap_chunk_scan_entry *e)
{
	uint64_t id;

	memset(e, 0, sizeof *e);
	e->stored_bytes = v->mv_size;
	if (k->mv_size != sizeof(uint64_t)) {
		e->problem = "chunk key is not a u64";
		return;
	}
	memcpy(&id, k->mv_data, sizeof(uint64_t));
	e->problem = heap_chunk_problem(h, id, v, false, &e->ci);
	e->ci.id = id;
	e->ci.file_offset = value_offset(h, v);
	if (e->problem == NULL && e->ci.file_offset == 0)
		e->problem = "chunk page header";
	if (e->problem == NULL && checksums && !prefetch(h, v))
		e->problem = heap_chunk_problem(h, id, v, true, NULL);
}

int heap_chunk_scan(heap_txn *t, bool checksums,
                    int (*fn)(const heap_chunk_scan_entry *e, void *user),
                    void *user)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	heap_chunk_scan_entry e;
	uint64_t prev = 0;
	bool any = false;
	int rc, op = MDB_FIRST;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (fn == NULL)
		return AH_EINVAL;
	TRY(heap_wb_settle(t, 0));
	TRY(heap_trees_usable(t->h, HEAP_TREE_BIT(HEAP_TREE_CHUNKS)));
	TRY(heap_err(mdb_cursor_open(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
	                                  &cur)));
	while ((rc = mdb_cursor_get(cur, &k, &v, op)) == 0) {
		op = MDB_NEXT;
		scan_one(t->h, &k, &v, checksums, &e);
		if (k.mv_size == sizeof(uint64_t) && any && e.ci.id <= prev) {
			/* A damaged tree went back: MDB_NEXT would go round. */
			rc = CORRUPT("chunk keys out of order");
			goto out;
		}
		any = true;
		prev = e.ci.id;
		if ((rc = fn(&e, user)) != 0)
			goto out;
	}
	rc = rc == MDB_NOTFOUND ? 0 : heap_err(rc);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Collects every page number of the free list into *pages (malloc'd). */
static int free_pages(heap_txn *t, uint64_t pin_txn, heap_free_info *fi,
                      uint64_t **pages, size_t *n)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	size_t cap = 0, cnt, txnid, prev = 0;
	int rc, op = MDB_FIRST;

	*pages = NULL;
	*n = 0;
	TRY(heap_err(mdb_cursor_open(t->txn, 0 /* FREE_DBI */, &cur)));
	while ((rc = mdb_cursor_get(cur, &k, &v, op)) == 0) {
		op = MDB_NEXT;
		if (k.mv_size != sizeof txnid || v.mv_size < sizeof cnt) {
			rc = CORRUPT("free-list record");
			goto out;
		}
		memcpy(&txnid, k.mv_data, sizeof txnid);
		if (fi->records > 0 && txnid <= prev) {
			rc = CORRUPT("free-list records out of order");
			goto out;
		}
		prev = txnid;
		memcpy(&cnt, v.mv_data, sizeof cnt);
		if (cnt > v.mv_size / sizeof cnt - 1) {
			rc = CORRUPT("free-list record length");
			goto out;
		}
		fi->records++;
		fi->pages_free += cnt;
		if (txnid >= pin_txn)
			fi->pages_pinned += cnt;
		if (*n + cnt > cap) {
			size_t ncap = (*n + cnt) * 2;
			uint64_t *np = realloc(*pages, ncap * sizeof *np);

			if (np == NULL) {
				rc = AH_ENOMEM;
				goto out;
			}
			*pages = np;
			cap = ncap;
		}
		memcpy(*pages + *n, (const char *)v.mv_data + sizeof cnt,
		       cnt * sizeof(uint64_t));
		*n += cnt;
	}
	rc = rc == MDB_NOTFOUND ? 0 : heap_err(rc);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}

static int tree_pages(heap_txn *t, MDB_dbi dbi, heap_free_info *fi)
{
	MDB_stat st;
	int rc = heap_err(mdb_stat(t->txn, dbi, &st));

	if (rc == 0)
		fi->tree_pages += st.ms_branch_pages + st.ms_leaf_pages;
	if (rc == 0 && dbi == t->h->dbi[HEAP_DBI_CHUNKS]) {
		fi->chunk_pages = st.ms_overflow_pages;
		fi->chunks = st.ms_entries;
	}
	return rc;
}

int heap_free_stat(heap_txn *t, uint64_t pin_txn, heap_free_info *fi)
{
	uint64_t *pages = NULL;
	size_t n = 0, run = 0;
	int rc;

	if ((rc = heap_txn_usable(t, false)) != 0)
		return rc;
	if (fi == NULL)
		return AH_EINVAL;
	memset(fi, 0, sizeof *fi);
	/* mdb_stat of a named DB reads its record from the main tree */
	TRY(heap_trees_usable(t->h, HEAP_TREE_BIT(HEAP_TREE_FREE) |
	                                 HEAP_TREE_BIT(HEAP_TREE_MAIN)));
	TRY(free_pages(t, pin_txn, fi, &pages, &n));
	if (n > 0)
		qsort(pages, n, sizeof *pages, cmp_u64);
	for (size_t i = 0; i < n; i++) {
		run = i > 0 && pages[i] == pages[i - 1] + 1 ? run + 1 : 1;
		fi->runs += run == 1;
		if (run > fi->largest_run)
			fi->largest_run = run;
	}
	TRY(tree_pages(t, 0 /* FREE_DBI */, fi));
	TRY(tree_pages(t, 1 /* MAIN_DBI */, fi));
	for (int i = 0; i < HEAP_DBI__COUNT; i++)
		TRY(tree_pages(t, t->h->dbi[i], fi));
out:
	free(pages);
	return rc;
}

int heap_env_pages(heap *h, uint64_t *pages_used, uint64_t *last_txn)
{
	MDB_envinfo info;
	int rc;

	if (h == NULL || pages_used == NULL || last_txn == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	if ((rc = heap_err(mdb_env_info(h->env, &info))) != 0)
		return rc;
	*pages_used = (uint64_t)info.me_last_pgno + 1;
	*last_txn = info.me_last_txnid;
	return 0;
}

struct reader_ctx {
	int (*fn)(const heap_reader *r, void *user);
	void *user;
	int rc;
};

/* mdb_reader_list prints "%10d %zx %zu\n" per live slot ("-" for an idle
 * slot's txnid) after one header line. */
static int reader_line(const char *msg, void *ctx)
{
	struct reader_ctx *c = ctx;
	heap_reader r = { 0 };
	char txn[32];
	int pid;
	size_t tid;

	if (sscanf(msg, "%d %zx %31s", &pid, &tid, txn) != 3)
		return 0;
	r.pid = pid;
	r.thread = tid;
	r.txn_id = txn[0] == '-' ? 0 : strtoull(txn, NULL, 10);
	if ((c->rc = c->fn(&r, c->user)) != 0)
		return -1;
	return 0;
}

int heap_reader_list(heap *h, int (*fn)(const heap_reader *r, void *user),
                     void *user)
{
	struct reader_ctx c = { fn, user, 0 };
	int rc;

	if (h == NULL || fn == NULL)
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	/* mdb_reader_list lists every slot with a pid, a dead process's
	 * too: clear those first, so that only live readers are named. */
	if ((rc = heap_err(HEAP_MDB(mdb_reader_check(h->env, NULL)))) != 0)
		return rc;
	rc = mdb_reader_list(h->env, reader_line, &c);
	if (c.rc != 0)
		return c.rc;
	return rc < 0 ? AH_EIO : 0;
}

/* Gives the unpublished copy at tmp a new UUID: one LMDB write txn that
 * rewrites the meta record (same format version).  MDB_NOLOCK: nobody
 * else can know the file yet.  Without MDB_WRITEMAP, a full disk is an
 * error, not a SIGBUS. */
static int new_uuid(heap *h, const char *tmp)
{
	MDB_val k = { sizeof HEAP_META_KEY - 1, (void *)HEAP_META_KEY }, v;
	uint8_t rec[HEAP_META_BYTES], uuid[16];
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	MDB_dbi dbi;
	struct stat st;
	uint32_t ver;
	int rc;

	if (stat(tmp, &st) != 0)
		return heap_err(errno);
	TRY(heap_err(mdb_env_create(&env)));
	TRY(heap_err(mdb_env_set_maxdbs(env, HEAP_DBI__COUNT)));
	TRY(heap_err(mdb_env_set_mapsize(env, (size_t)st.st_size +
	                                              (64u << 20))));
	TRY(heap_err(mdb_env_open(env, tmp, MDB_NOSUBDIR | MDB_NOLOCK, 0644)));
	TRY(heap_err(mdb_txn_begin(env, NULL, 0, &txn)));
	TRY(heap_err(mdb_dbi_open(txn, "meta", 0, &dbi)));
	TRY(heap_err(mdb_get(txn, dbi, &k, &v)));
	TRY(heap_meta_check(v.mv_data, v.mv_size, h->psize, uuid, &ver));
	TRY(heap_uuid_new(uuid));
	heap_meta_encode(rec, h->psize, uuid, ver);
	v.mv_size = sizeof rec;
	v.mv_data = rec;
	TRY(heap_err(mdb_put(txn, dbi, &k, &v, 0)));
	rc = heap_err(mdb_txn_commit(txn));
	txn = NULL;
out:
	if (txn != NULL)
		mdb_txn_abort(txn);
	if (env != NULL)
		mdb_env_close(env);
	return rc;
}

int heap_backup(heap *h, const char *path, bool fresh_uuid)
{
	char real[PATH_MAX], tmp[PATH_MAX];
	struct stat st;
	bool exists;
	int fd, rc;

	if (h == NULL || path == NULL || *path == '\0')
		return AH_EINVAL;
	if ((rc = heap_check_pid(h)) != 0)
		return rc;
	/* The compacting copy walks every tree. */
	if ((rc = heap_trees_usable(h, HEAP_TREES_ALL)) != 0)
		return rc;
	if ((rc = heap_path_resolve(path, real)) == 0 && stat(real, &st) == 0)
		rc = AH_EEXIST;
	if (rc != 0)
		return rc;
	/* Written under this process's temporary name and published without
	 * replacing anything, like a new heap: a backup killed half-way
	 * never leaves a partial file at PATH. */
	if ((rc = heap_path_temp(real, tmp)) != 0)
		return rc;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return heap_err(errno);
	{
		/* The map has no read-around (MDB_NORDAHEAD): ask for the used
		 * pages up front so a cold copy reads in large requests, not a
		 * 4 KiB fault at a time.  Advice only. */
		MDB_envinfo info;

		if (mdb_env_info(h->env, &info) == 0)
			(void)posix_fadvise(h->fd, 0,
			                    (off_t)(info.me_last_pgno + 1) * h->psize,
			                    POSIX_FADV_WILLNEED);
	}
	rc = heap_err(mdb_env_copyfd2(h->env, fd, MDB_CP_COMPACT));
	if (rc == 0 && fsync(fd) != 0)
		rc = heap_err(errno);
	if (close(fd) != 0 && rc == 0)
		rc = heap_err(errno);
	if (rc == 0 && fresh_uuid)
		rc = new_uuid(h, tmp); /* its commit syncs */
	if (rc == 0) {
		rc = heap_path_publish(tmp, real, &exists);
		if (rc == 0 && exists)
			rc = AH_EEXIST;
	}
	if (rc != 0)
		unlink(tmp);
	return rc;
}
