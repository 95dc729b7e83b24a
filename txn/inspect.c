/*
 * txn/inspect.c - the public inspection API (include/arrheap.h,
 * "inspection"): batch and chunk listings, space accounting, reader list
 * and backup.  The verifier, ah_verify, lives in txn/verify.c.
 *
 * Everything here reads only: it takes any transaction, read snapshots
 * included, and never poisons it (errors go through txn_fail, which sets
 * the message and nothing else).  Pointers given to callbacks live only
 * during the call.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "txn/txn.h"

static int enter(ah_txn *t, const char *name, const void *fn)
{
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	if (!fn || (name && !txn_name_ok(name)))
		return AH_EINVAL;
	return 0;
}

static void fill_batch(const arr_batch *b, ah_batch_info *bi)
{
	memset(bi, 0, sizeof *bi);
	bi->id = b->id;
	bi->lower = frontier_time(b->desc.lower);
	bi->upper = frontier_time(b->desc.upper);
	bi->since = frontier_time(b->desc.since);
	bi->updates = b->updates;
	bi->keys = b->keys;
	bi->vals = b->vals;
	bi->chunks = b->nchunks;
	bi->bytes = b->bytes;
	bi->chunk_bytes = b->chunk_bytes;
	bi->partial = b->partial;
	bi->format = b->format;
	bi->filter_keys = b->filter_keys;
	bi->filter_bytes = b->filter_blocks * 64;
}

/* The state of a walk over NAME's batches: the txn (for messages and
 * chunk lookups), the callback and its user data. */
struct walk {
	ah_txn *t;
	const char *name;
	ah_batch_fn bfn;
	ah_chunk_fn cfn;
	void *user;
};

/* Every batch of name, the trace first, merges' outputs after. */
static int walk_batches(ah_txn *t, const char *name, arr_batch_fn each,
                        struct walk *w)
{
	arrangement *a;
	int rc = arr_load(t->ht, name, &a);

	if (rc)
		return txn_fail(t, rc, "arrangement '%s': %s", name,
		                rc == AH_ENOTFOUND ? "no such arrangement"
		                                   : ah_strerror(rc));
	uint64_t bad = 0;

	rc = arr_batches(t->ht, a, true, each, w, &bad);
	if (rc && bad)
		txn_fail(t, rc, "arrangement '%s': batch %llu: %s", name,
		         (unsigned long long)bad, ah_strerror(rc));
	arr_free(a);
	return rc;
}

static int each_batch(const arr_batch *b, void *user)
{
	struct walk *w = user;
	ah_batch_info bi;

	fill_batch(b, &bi);
	return w->bfn(&bi, w->user);
}

int ah_batch_foreach(ah_txn *t, const char *name, ah_batch_fn fn, void *user)
{
	struct walk w = { t, name, fn, NULL, user };
	int rc = enter(t, name ? name : "", (const void *)fn);

	return rc ? rc : walk_batches(t, name, each_batch, &w);
}

static int each_chunk(const arr_batch *b, void *user)
{
	struct walk *w = user;
	ah_txn *t = w->t;
	uint32_t psize = heap_page_size(heap_txn_heap(t->ht));
	heap_chunk_info hi;
	ah_chunk_info ci;
	int rc = 0;

	for (uint32_t i = 0; i < b->nchunks && !rc; i++) {
		uint64_t id = b->chunk_ids[i];

		rc = id ? heap_chunk_next(t->ht, id - 1, false, &hi)
		        : CORRUPT("chunk id 0 in a batch record");
		if (rc == 0 && hi.id != id)
			rc = CORRUPT("a batch record names a chunk that is not there");
		if (rc == AH_ENOTFOUND)
			rc = CORRUPT("a batch record names a chunk that is not there");
		if (rc) {
			txn_fail(t, rc, "batch %llu: chunk %llu: missing or damaged",
			         (unsigned long long)b->id, (unsigned long long)id);
			break;
		}
		if (b->chunk_sums && hi.xxh3 != b->chunk_sums[i]) {
			rc = CORRUPT("a chunk is not the one its batch record names");
			txn_fail(t, rc, "batch %llu: chunk %llu: its XXH3 %016llx is "
			         "not the %016llx its record lists (a lost or "
			         "misplaced write)", (unsigned long long)b->id,
			         (unsigned long long)id, (unsigned long long)hi.xxh3,
			         (unsigned long long)b->chunk_sums[i]);
			break;
		}
		memset(&ci, 0, sizeof ci);
		ci.id = id;
		ci.batch = b->id;
		ci.class_pages = hi.class_pages;
		ci.bytes = hi.body_used;
		ci.stored_bytes = (uint64_t)hi.class_pages * psize - 16;
		ci.file_offset = hi.file_offset;
		ci.xxh3 = hi.xxh3;
		ci.block_bytes = hi.block_bytes;
		rc = w->cfn(&ci, w->user);
	}
	return rc;
}

int ah_chunk_foreach(ah_txn *t, const char *name, ah_chunk_fn fn, void *user)
{
	struct walk w = { t, name, NULL, fn, user };
	int rc = enter(t, name ? name : "", (const void *)fn);

	return rc ? rc : walk_batches(t, name, each_chunk, &w);
}

/* ------------------------------------------------------------- space */

struct oldest {
	int64_t self, pid;
	uint64_t txn;
};

static int find_oldest(const heap_reader *r, void *user)
{
	struct oldest *o = user;

	if (r->pid != o->self && r->txn_id != 0 && r->txn_id < o->txn) {
		o->txn = r->txn_id;
		o->pid = r->pid;
	}
	return 0;
}

int ah_space_get(ah_txn *t, ah_space_info *si)
{
	struct oldest o = { getpid(), 0, UINT64_MAX };
	heap *h;
	heap_free_info fi;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	if (!si)
		return AH_EINVAL;
	if (!t->rdonly) /* LMDB walks its free list only in a read txn */
		return txn_fail(t, AH_EINVAL, "space: needs a read transaction");
	h = heap_txn_heap(t->ht);
	memset(si, 0, sizeof *si);
	si->page_size = heap_page_size(h);
	if ((rc = heap_env_pages(h, &si->pages_used, &si->last_txn_id)) ||
	    (rc = heap_reader_list(h, find_oldest, &o)) ||
	    (rc = heap_free_stat(t->ht, o.txn, &fi)))
		return txn_fail(t, rc, "space: %s", ah_strerror(rc));
	si->pages_free = fi.pages_free;
	si->pages_pinned = fi.pages_pinned;
	si->free_runs = fi.runs;
	si->free_largest_run = fi.largest_run;
	si->chunk_pages = fi.chunk_pages;
	si->chunks = fi.chunks;
	si->tree_pages = fi.tree_pages;
	if (o.pid) {
		si->oldest_reader_pid = o.pid;
		si->oldest_reader_txn = o.txn;
		si->oldest_reader_age = si->last_txn_id > o.txn
		                                ? si->last_txn_id - o.txn : 0;
	}
	return 0;
}

struct reader_cb {
	ah_reader_fn fn;
	void *user;
	uint64_t last;
	int64_t self;
};

static int each_reader(const heap_reader *r, void *user)
{
	struct reader_cb *c = user;
	ah_reader_info ri = { 0 };

	ri.pid = r->pid;
	ri.thread = r->thread;
	ri.txn_id = r->txn_id;
	ri.age = r->txn_id && c->last > r->txn_id ? c->last - r->txn_id : 0;
	ri.self = r->pid == c->self;
	return c->fn(&ri, c->user);
}

int ah_reader_foreach(ah_heap *ah, ah_reader_fn fn, void *user)
{
	struct reader_cb c = { fn, user, 0, getpid() };
	uint64_t pages;
	int rc;

	if (!ah || !fn)
		return AH_EINVAL;
	if ((rc = heap_env_pages(ah->h, &pages, &c.last)))
		return rc;
	return heap_reader_list(ah->h, each_reader, &c);
}

int ah_backup(ah_heap *ah, const char *path)
{
	if (!ah)
		return AH_EINVAL;
	return heap_backup(ah->h, path, false);
}

int ah_backup_v2(ah_heap *ah, const char *path, const ah_backup_opts *opts)
{
	unsigned flags = opts ? opts->flags : 0;

	if (!ah || (opts && opts->size < sizeof *opts) ||
	    (flags & ~AH_BACKUP_NEW_UUID))
		return AH_EINVAL;
	return heap_backup(ah->h, path, (flags & AH_BACKUP_NEW_UUID) != 0);
}
