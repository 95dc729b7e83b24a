/*
 * txn/verify.c - ah_verify: checks everything a snapshot holds and names
 * every problem (arrangement, batch, chunk) instead of stopping at the
 * first, as a fsck would.
 *
 * First the LMDB pages themselves (heap_pagecheck, heap/pagecheck.c): every
 * tree is walked without LMDB, and a tree found damaged is reported and
 * quarantined, so that no pass below hands it to LMDB (which trusts its
 * pages and could read outside the file, abort on its own assertions or
 * loop).  The passes that need a damaged tree are skipped, each with one
 * problem saying so.  Then three passes, in this order so the heap is read
 * from disk once, in file order, at the speed of the disk:
 *  1. chunks: one cursor over the chunks table recomputes every XXH3 over
 *     each chunk's whole stored bytes (heap_chunk_scan) and remembers (id,
 *     problem) per chunk;
 *  2. arrangements: every spine (spine_check: S1-S4) and every batch of it
 *     (batch_check without checksums: B1-B5, from the page cache now),
 *     collecting which batch references which chunk, and which spine which
 *     batch;
 *  3. references: the sorted references against the chunk list and the
 *     batch table: every chunk and batch record referenced exactly once,
 *     none leaked, none missing.
 * Problems go to the caller's callback.  Never poisons the transaction.
 * ah_verify_pages is the page check alone.
 *
 * It must never hand LMDB a tree the page check found damaged, never
 * write, and never stop at the first problem.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "txn/txn.h"

typedef struct cref {
	uint64_t chunk, batch;
	uint32_t arr;
} cref;

typedef struct bref {
	uint64_t batch;
	uint32_t arr;
} bref;

typedef struct seen {
	uint64_t id;
	const char *problem;
} seen;

typedef struct verifier {
	ah_txn *t;
	ah_problem_fn fn;
	void *user;
	ah_verify_stats st;
	int stop;            /* fn's non-zero value */
	bool oom;
	char (*names)[AH_NAME_MAX + 1];
	uint32_t nnames;
	cref *cr;
	size_t ncr, ccap;
	bref *br;
	size_t nbr, bcap;
	seen *ch;
	size_t nch, chcap;
	bool batch_ok, chunks_ok; /* their trees' pages are sound */
	uint32_t cur_arr;    /* the arrangement arr_verify is checking */
} verifier;

/* A callback's "fn asked to stop" (positive: never an AH_E* code). */
#define VERIFY_STOP 1

static void report(verifier *v, uint32_t arr, uint64_t bid, uint64_t chunk,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* arr == UINT32_MAX: no arrangement. */
static void report(verifier *v, uint32_t arr, uint64_t bid, uint64_t chunk,
                   const char *fmt, ...)
{
	char msg[400];
	ah_problem p;
	va_list ap;

	v->st.problems++;
	if (v->stop || !v->fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	p.arrangement = arr < v->nnames ? v->names[arr] : "";
	p.batch = bid;
	p.chunk = chunk;
	p.message = msg;
	v->stop = v->fn(&p, v->user);
}

static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return true;
	size_t ncap = *cap ? *cap * 2 : 256;
	void *p = realloc(*arr, ncap * elem);
	if (!p)
		return false;
	*arr = p;
	*cap = ncap;
	return true;
}

/* ------------------------------------------------------ LMDB pages */

static int on_page(const heap_page_problem *p, void *user)
{
	verifier *v = user;

	if (p->pgno == UINT64_MAX)
		report(v, UINT32_MAX, 0, 0, "LMDB pages: %s", p->message);
	else if (p->tree == HEAP_TREE__COUNT)
		report(v, UINT32_MAX, 0, 0, "LMDB meta page %llu: %s",
		       (unsigned long long)p->pgno, p->message);
	else
		report(v, UINT32_MAX, 0, 0, "LMDB page %llu (%s tree): %s",
		       (unsigned long long)p->pgno, heap_tree_name(p->tree),
		       p->message);
	return v->stop;
}

static bool tree_ok(const heap_pagecheck_stat *pc, enum heap_tree t)
{
	return !(pc->quarantined & (1u << t));
}

/* ------------------------------------------------- pass 1: chunk scan */

static int on_chunk(const heap_chunk_scan_entry *e, void *user)
{
	verifier *v = user;

	if (!grow((void **)&v->ch, &v->chcap, v->nch, sizeof *v->ch))
		return AH_ENOMEM;
	v->ch[v->nch].id = e->ci.id;
	v->ch[v->nch].problem = e->problem;
	v->nch++;
	v->st.chunks++;
	v->st.chunk_bytes += e->stored_bytes;
	return 0;
}

/* ------------------------------------------------ pass 2: arrangements */

static int add_name(verifier *v, const void *key, size_t len)
{
	void *p = realloc(v->names, (v->nnames + 1) * sizeof *v->names);

	if (!p)
		return AH_ENOMEM;
	v->names = p;
	memcpy(v->names[v->nnames], key, len);
	v->names[v->nnames][len] = 0;
	v->nnames++;
	v->st.arrangements++;
	return 0;
}

/* arr_verify's callbacks, for arrangement v->cur_arr. */
static void on_arr_problem(void *user, uint64_t bid, uint64_t chunk,
                           const char *msg)
{
	verifier *v = user;

	report(v, v->cur_arr, bid, chunk, "%s", msg);
}

static int on_batch_ref(void *user, uint64_t bid)
{
	verifier *v = user;

	if (!grow((void **)&v->br, &v->bcap, v->nbr, sizeof *v->br))
		return AH_ENOMEM;
	v->br[v->nbr++] = (bref){ bid, v->cur_arr };
	v->st.batches++;
	return v->stop ? VERIFY_STOP : 0;
}

static int on_chunk_ref(void *user, uint64_t bid, uint64_t chunk)
{
	verifier *v = user;

	if (!grow((void **)&v->cr, &v->ccap, v->ncr, sizeof *v->cr))
		return AH_ENOMEM;
	v->cr[v->ncr++] = (cref){ chunk, bid, v->cur_arr };
	return 0;
}

static int check_arrangement(verifier *v, uint32_t arr)
{
	arrangement *a;
	arr_verify_cb cb = { on_arr_problem, on_batch_ref, on_chunk_ref, v,
	                     v->batch_ok, v->chunks_ok };
	int rc = arr_load(v->t->ht, v->names[arr], &a);

	if (rc) {
		if (rc == AH_ENOMEM)
			return rc;
		report(v, arr, 0, 0, "cannot load the arrangement record: %s",
		       ah_err_name(rc));
		return 0;
	}
	v->cur_arr = arr;
	rc = arr_verify(v->t->ht, a, &cb);
	arr_free(a);
	return rc == VERIFY_STOP ? 0 : rc;
}

static int check_arrangements(verifier *v)
{
	const void *k = NULL, *val;
	size_t klen = 0, vlen;
	int rc = AH_ENOTFOUND; /* the end, if stopped at once */

	for (;;) {
		const void *nk;
		bool bad;

		if (v->stop)
			break;
		rc = heap_next(v->t->ht, HEAP_T_ARR, k, klen, &nk, &klen, &val,
		               &vlen);
		bad = rc == AH_ECORRUPT && nk != NULL; /* its record's check */
		if (rc != 0 && !bad)
			break;
		k = nk;
		if (klen > AH_NAME_MAX) {
			report(v, UINT32_MAX, 0, 0, "arrangement table: key of %zu "
			       "bytes is no name", klen);
			continue;
		}
		if ((rc = add_name(v, k, klen)))
			return rc;
		if (bad) {
			report(v, v->nnames - 1, 0, 0, "arrangement record checksum "
			       "mismatch (its name or bytes are damaged)");
			if (memchr(k, 0, klen) || !txn_name_ok(v->names[v->nnames - 1]))
				report(v, v->nnames - 1, 0, 0, "arrangement table: a "
				       "stored name of %zu bytes that is no valid "
				       "name", klen);
			continue;
		}
		if (memchr(k, 0, klen) || !txn_name_ok(v->names[v->nnames - 1]))
			report(v, v->nnames - 1, 0, 0, "arrangement table: a stored "
			       "name of %zu bytes that is no valid name", klen);
		if ((rc = check_arrangement(v, v->nnames - 1)))
			return rc;
	}
	if (!v->stop && rc != AH_ENOTFOUND)
		report(v, UINT32_MAX, 0, 0, "arrangement table unreadable: %s",
		       ah_err_name(rc));
	return 0;
}

/* ----------------------------------------- sources and catalog records */

/* Every source record's frame (record.c) and name. */
static void check_sources(verifier *v)
{
	const void *k = NULL, *val;
	size_t klen = 0, vlen;
	char name[AH_NAME_MAX + 1];
	int rc;

	for (;;) {
		const void *nk;

		if (v->stop)
			return;
		rc = heap_next(v->t->ht, HEAP_T_SOURCE, k, klen, &nk, &klen, &val,
		               &vlen);
		if (rc != 0 && !(rc == AH_ECORRUPT && nk != NULL))
			break;
		k = nk;
		size_t n = klen < AH_NAME_MAX ? klen : AH_NAME_MAX;
		memcpy(name, k, n);
		name[n] = 0;
		char esc[4 * AH_NAME_MAX + 1];
		size_t o = 0;
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)name[i];
			if (c >= 0x20 && c < 0x7f && c != '\\')
				esc[o++] = (char)c;
			else
				o += (size_t)snprintf(esc + o, sizeof esc - o, "\\x%02x", c);
		}
		esc[o] = 0;
		if (rc == AH_ECORRUPT)
			report(v, UINT32_MAX, 0, 0, "source %s: record checksum "
			       "mismatch (its name or position is damaged)", esc);
		if (memchr(k, 0, klen) || klen > AH_NAME_MAX || !txn_name_ok(name))
			report(v, UINT32_MAX, 0, 0, "source table: a stored name of "
			       "%zu bytes that is no valid name (%s)", klen, esc);
	}
	if (!v->stop && rc != AH_ENOTFOUND)
		report(v, UINT32_MAX, 0, 0, "source table unreadable: %s",
		       ah_err_name(rc));
}

/* Every read hold record: frame and layout (heap/hold.c), names, an
 * arrangement that exists, and H2/H3 of txn/hold.c against its since. */
static void check_holds(verifier *v)
{
	heap_hold_pos pos = { 0 };
	heap_hold h;
	int rc;

	while (!v->stop) {
		size_t before = pos.klen;
		uint8_t last[HEAP_HOLD_KEY_MAX];

		memcpy(last, pos.key, before);
		rc = heap_hold_next(v->t->ht, &pos, &h);
		if (rc == AH_ENOTFOUND)
			return;
		if (rc == AH_ECORRUPT && (pos.klen != before ||
		                          memcmp(last, pos.key, before) != 0)) {
			char esc[4 * HEAP_HOLD_KEY_MAX + 1];
			size_t o = 0;
			uint32_t ai = UINT32_MAX;

			/* arrangement/hold, as stored (maybe damaged) */
			for (size_t i = 0; i < pos.klen; i++) {
				unsigned char c = pos.key[i];

				if (c == 0)
					esc[o++] = '/';
				else if (c >= 0x20 && c < 0x7f && c != '\\')
					esc[o++] = (char)c;
				else
					o += (size_t)snprintf(esc + o, sizeof esc - o,
					                      "\\x%02x", c);
			}
			esc[o] = 0;
			for (size_t i = 0; i < v->nnames; i++) {
				size_t n = strlen(v->names[i]);

				if (n < pos.klen && pos.key[n] == 0 &&
				    memcmp(v->names[i], pos.key, n) == 0)
					ai = (uint32_t)i;
			}
			report(v, ai, 0, 0, "hold %s: record damaged (checksum, "
			       "layout or key)", esc);
			continue;
		}
		if (rc != 0) {
			report(v, UINT32_MAX, 0, 0, "hold records unreadable: %s",
			       ah_err_name(rc));
			return;
		}
		uint32_t ai = UINT32_MAX;

		for (size_t i = 0; i < v->nnames; i++)
			if (strcmp(v->names[i], h.arr) == 0)
				ai = (uint32_t)i;
		if (!txn_name_ok(h.arr) || !txn_name_ok(h.name)) {
			report(v, ai, 0, 0, "hold record under a key that is no name");
			continue;
		}
		arrangement *a;

		rc = arr_load(v->t->ht, h.arr, &a);
		if (rc == AH_ENOTFOUND) {
			report(v, ai, 0, 0, "hold '%s' of '%s': no such arrangement",
			       h.name, h.arr);
			continue;
		}
		if (rc) {
			report(v, ai, 0, 0, "hold '%s' of '%s': arrangement "
			       "unreadable: %s", h.name, h.arr, ah_err_name(rc));
			continue;
		}
		uint64_t since = frontier_time(arr_since(a));

		arr_free(a);
		if (!(h.flags & HEAP_HOLD_RELEASED) && since > h.frontier)
			report(v, ai, 0, 0, "hold '%s' of '%s' at %" PRIu64 ": since "
			       "%" PRIu64 " passed it and it is not released",
			       h.name, h.arr, h.frontier, since);
		else if ((h.flags & HEAP_HOLD_RELEASED) && since <= h.frontier)
			report(v, ai, 0, 0, "hold '%s' of '%s' at %" PRIu64 " is "
			       "released but since %" PRIu64 " has not passed it",
			       h.name, h.arr, h.frontier, since);
	}
}

static void on_catalog(const char *problem, void *user)
{
	report(user, UINT32_MAX, 0, 0, "%s", problem);
}

/* -------------------------------------------------- pass 3: references */

static int cmp_cref(const void *a, const void *b)
{
	const cref *x = a, *y = b;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

static int cmp_bref(const void *a, const void *b)
{
	const bref *x = a, *y = b;
	return x->batch < y->batch ? -1 : x->batch > y->batch;
}

/* Each chunk against the references to it (both sorted by id). */
static void check_chunk_refs(verifier *v)
{
	size_t j = 0;

	for (size_t i = 0; i < v->nch && !v->stop; i++) {
		uint64_t id = v->ch[i].id;
		size_t n = 0;

		for (; j < v->ncr && v->cr[j].chunk < id; j++)
			report(v, v->cr[j].arr, v->cr[j].batch, v->cr[j].chunk,
			       "chunk missing from the chunks table");
		const cref *owner = j < v->ncr && v->cr[j].chunk == id ? &v->cr[j]
		                                                       : NULL;
		for (; j < v->ncr && v->cr[j].chunk == id; j++)
			n++;
		if (v->ch[i].problem)
			report(v, owner ? owner->arr : UINT32_MAX,
			       owner ? owner->batch : 0, id, "%s", v->ch[i].problem);
		if (n == 0)
			report(v, UINT32_MAX, 0, id, "chunk leaked: no batch "
			       "references it");
		else if (n > 1)
			report(v, owner->arr, owner->batch, id, "chunk referenced %zu "
			       "times", n);
	}
	for (; j < v->ncr && !v->stop; j++)
		report(v, v->cr[j].arr, v->cr[j].batch, v->cr[j].chunk,
		       "chunk missing from the chunks table");
}

/* Every batch record against the spines' references to it. */
static void check_batch_refs(verifier *v)
{
	const void *k = NULL, *val;
	size_t klen = 0, vlen, j = 0;
	uint64_t id;
	int rc;

	while (!v->stop && (rc = heap_next(v->t->ht, HEAP_T_BATCH, k, klen, &k,
	                                   &klen, &val, &vlen)) == 0) {
		size_t n = 0;

		if (klen != sizeof id) {
			report(v, UINT32_MAX, 0, 0, "batch table: key of %zu bytes",
			       klen);
			continue;
		}
		memcpy(&id, k, sizeof id);
		if (arr_batch_key_is_counter(id))
			continue;
		for (; j < v->nbr && v->br[j].batch < id; j++)
			report(v, v->br[j].arr, v->br[j].batch, 0,
			       "batch record missing");
		const bref *owner = j < v->nbr && v->br[j].batch == id ? &v->br[j]
		                                                       : NULL;
		for (; j < v->nbr && v->br[j].batch == id; j++)
			n++;
		if (n == 0)
			report(v, UINT32_MAX, id, 0, "batch record leaked: no "
			       "arrangement references it");
		else if (n > 1)
			report(v, owner->arr, id, 0, "batch referenced %zu times", n);
	}
	if (!v->stop && rc != AH_ENOTFOUND)
		report(v, UINT32_MAX, 0, 0, "batch table unreadable: %s",
		       ah_err_name(rc));
	/* Missing records were reported by pass 2 (cannot load). */
}

static int verify(ah_txn *t, bool sums, ah_problem_fn fn, void *user,
                  ah_verify_stats *st)
{
	verifier v = { .t = t, .fn = fn, .user = user };
	heap_pagecheck_stat pc;
	bool scan_ok = false, arr_ok;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	rc = heap_pagecheck(t->ht, on_page, &v, &pc);
	if (rc || v.stop)
		goto out; /* AH_EBUSY, AH_ENOMEM, AH_EIO, or fn's value */
	arr_ok = tree_ok(&pc, HEAP_TREE_ARR);
	v.batch_ok = tree_ok(&pc, HEAP_TREE_BATCH);
	v.chunks_ok = tree_ok(&pc, HEAP_TREE_CHUNKS);
	if (!v.chunks_ok)
		report(&v, UINT32_MAX, 0, 0, "chunks not checked: the chunks "
		       "tree's pages are damaged");
	if (!arr_ok)
		report(&v, UINT32_MAX, 0, 0, "arrangements not checked: the arr "
		       "tree's pages are damaged");
	if (!v.batch_ok)
		report(&v, UINT32_MAX, 0, 0, "batch records not checked: the batch "
		       "tree's pages are damaged");
	if (!v.stop && v.chunks_ok) {
		rc = heap_chunk_scan(t->ht, sums, on_chunk, &v);
		if (rc == AH_ENOMEM)
			goto out;
		scan_ok = rc == 0;
		if (rc)
			report(&v, UINT32_MAX, 0, 0, "chunks table unreadable after "
			       "%zu chunks: %s", v.nch, ah_err_name(rc));
	}
	rc = 0;
	if (!v.stop && arr_ok && (rc = check_arrangements(&v)))
		goto out;
	if (v.ncr > 0)
		qsort(v.cr, v.ncr, sizeof *v.cr, cmp_cref);
	if (v.nbr > 0)
		qsort(v.br, v.nbr, sizeof *v.br, cmp_bref);
	/* Else every later chunk or batch would be "missing" or "leaked". */
	if (!v.stop && scan_ok && arr_ok && v.batch_ok)
		check_chunk_refs(&v);
	if (!v.stop && arr_ok && v.batch_ok)
		check_batch_refs(&v);
	if (!v.stop && tree_ok(&pc, HEAP_TREE_SOURCE))
		check_sources(&v);
	if (!v.stop && tree_ok(&pc, HEAP_TREE_META) &&
	    (rc = heap_catalog_check(t->ht, on_catalog, &v)) != 0 && !v.stop)
		report(&v, UINT32_MAX, 0, 0, "catalog records unreadable: %s",
		       ah_err_name(rc));
	if (!v.stop && arr_ok && tree_ok(&pc, HEAP_TREE_META))
		check_holds(&v);
	rc = v.stop;
out:
	if (st)
		*st = v.st;
	free(v.names);
	free(v.cr);
	free(v.br);
	free(v.ch);
	return rc;
}

int ah_verify(ah_txn *t, ah_problem_fn fn, void *user, ah_verify_stats *st)
{
	return verify(t, true, fn, user, st);
}

int txn_verify_checked_chunks(ah_txn *t, ah_problem_fn fn, void *user,
                              ah_verify_stats *st)
{
	return verify(t, false, fn, user, st);
}

int ah_verify_pages(ah_txn *t, ah_problem_fn fn, void *user,
                    ah_page_stats *st)
{
	verifier v = { .t = t, .fn = fn, .user = user };
	heap_pagecheck_stat pc;
	int rc = txn_enter(t, false);

	if (rc)
		return rc;
	rc = heap_pagecheck(t->ht, on_page, &v, &pc);
	if (st) {
		memset(st, 0, sizeof *st);
		st->txn_id = pc.txn_id;
		st->pages = pc.last_pg + 1;
		st->pages_free = pc.free_pages;
		st->problems = v.st.problems;
		for (int i = 0; i < AH_PAGE_TREES && i < HEAP_TREE__COUNT; i++) {
			const heap_tree_stat *ts = &pc.tree[i];

			st->trees[i].name = heap_tree_name((enum heap_tree)i);
			st->trees[i].depth = ts->depth;
			st->trees[i].branch_pages = ts->branch_pages;
			st->trees[i].leaf_pages = ts->leaf_pages;
			st->trees[i].overflow_pages = ts->overflow_pages;
			st->trees[i].entries = ts->entries;
			st->trees[i].damaged = !tree_ok(&pc, (enum heap_tree)i);
		}
	}
	return rc;
}
