/*
 * arrangement/slice.c - the background merge's unit of work (ARCHITECTURE
 * §6 "The merge thread"): a slice of one merge in progress, computed in a
 * read transaction into chunk images in memory, then installed in a short
 * write transaction of its own.
 *
 * Compute (arr_slice_compute, read txn rt): loads the spine, picks a merge
 * in progress (the one with the most credit: the furthest behind the
 * inline schedule; then the one with the least left), remembers exactly
 * what it computes from (the merge's run, its input batch ids and their
 * span, its since, partial batch and boundary), resumes the merge with a
 * detached writer (merge.h) and steps it until the inputs are exhausted
 * or the images reach the bound: at least min_bytes, more while the
 * writer lock is busy anyway (the install would wait), never past
 * max_bytes.
 *
 * Install (arr_slice_install, write txn wt, rt still open): reloads the
 * spine and finds a merge that is exactly the one computed from; anything
 * else (the arrangement dropped, the merge finished, advanced or given up
 * by an inline merge or ah_maintain, an input's Description changed) makes
 * the slice stale: nothing is written and the caller discards it.  Else
 * the images become chunks (merger_attach), and the merge is suspended at
 * the slice's end boundary or completed: the same transitions as the
 * inline path (spine.c run_merge), so a kill at any moment leaves the
 * spine of the last commit, resumable from its stored boundary.
 *
 * Whole (arr_slice_bound.whole): while a caller waits for the thread
 * (ah_merge_wait), its core is idle, and a merge not yet started whose
 * inputs hold merge_par_min() to whole_max bytes is run to its end by the
 * install instead, on two threads (merge_parallel, as spine.c's inline
 * path runs a fresh merge to its end): decided at the compute (nothing is
 * computed) or at the install (the slice's images are dropped).  Its
 * write txn holds the writer lock for the whole merge, which whole_max
 * bounds.
 *
 * It never writes in rt, and never changes the spine of a merge it did
 * not find unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/arrangement.h"
#include "arrangement/batch_int.h"
#include "arrangement/merge.h"
#include "arrangement/spine.h"

struct arr_slice {
	char name[AH_NAME_MAX + 1];
	uint32_t first, count;     /* the merge's run, as computed from */
	uint64_t *ids;             /* its input batch ids */
	frontier since, lower, upper;
	uint64_t partial_id;
	bool has_boundary;
	uint8_t *key, *val;        /* the boundary computed from (malloc'd) */
	size_t klen, vlen;
	batch **in;                /* inputs as loaded in rt */
	merger *mg;
	uint64_t spent;
	bool done;
	bool whole;                /* run to its end at the install */
	bool refused;              /* ... and merge_parallel did not take it */
	uint64_t in_bytes;         /* the inputs' chunk_bytes */
	bool (*whole_ok)(void *);  /* the bound's whole, user and whole_max */
	void *user;
	uint64_t whole_max;
};

void arr_slice_free(arr_slice *s)
{
	if (!s)
		return;
	merger_free(s->mg);
	for (uint32_t i = 0; s->in && i < s->count; i++)
		batch_free(s->in[i]);
	free(s->in);
	free(s->ids);
	free(s->key);
	free(s->val);
	free(s);
}

/* The merge to work on: most credit, then least left; -1 when none. */
static int pick(const spine *sp)
{
	int best = -1;

	for (uint32_t i = 0; i < sp->nmerges; i++) {
		const spine_merge *m = &sp->merges[i], *b;

		if (best < 0) {
			best = (int)i;
			continue;
		}
		b = &sp->merges[best];
		if (m->credit > b->credit ||
		    (m->credit == b->credit &&
		     spine_merge_left(sp, m) < spine_merge_left(sp, b)))
			best = (int)i;
	}
	return best;
}

static int remember(arr_slice *s, const spine *sp, const spine_merge *m)
{
	s->first = m->first;
	s->count = m->count;
	s->since = m->since;
	s->partial_id = m->partial_id;
	s->has_boundary = m->has_boundary;
	s->ids = calloc(m->count, sizeof *s->ids);
	s->in = calloc(m->count, sizeof *s->in);
	s->key = malloc(m->klen ? m->klen : 1);
	s->val = malloc(m->vlen ? m->vlen : 1);
	if (!s->ids || !s->in || !s->key || !s->val)
		return AH_ENOMEM;
	memcpy(s->key, m->key, m->klen);
	memcpy(s->val, m->val, m->vlen);
	s->klen = m->klen;
	s->vlen = m->vlen;
	for (uint32_t i = 0; i < m->count; i++)
		s->ids[i] = sp->batches[m->first + i].id;
	return 0;
}

/* The inputs, as rt holds them: their span and bytes. */
static int load_inputs(arr_slice *s, heap_txn *rt)
{
	int rc = 0;

	for (uint32_t i = 0; i < s->count && rc == 0; i++)
		rc = batch_load_listed(rt, s->ids[i], &s->in[i]);
	if (rc)
		return rc;
	s->lower = s->in[0]->desc.lower;
	s->upper = s->in[s->count - 1]->desc.upper;
	s->in_bytes = 0;
	for (uint32_t i = 0; i < s->count; i++)
		s->in_bytes += s->in[i]->chunk_bytes;
	return 0;
}

/* A merge not yet started, of a size to run whole, and the bound's whole
 * says so now. */
static bool want_whole(const arr_slice *s)
{
	return s->whole_ok && !s->has_boundary && !s->partial_id &&
	       s->in_bytes >= merge_par_min() && s->in_bytes <= s->whole_max &&
	       s->whole_ok(s->user);
}

static int run(arr_slice *s, heap_txn *rt, pool *p, const arr_slice_bound *b,
               uint64_t quantum, const bool *stop)
{
	merge_resume res = { s->has_boundary, s->key, s->klen, s->val,
	                     s->vlen, s->partial_id };
	int rc = 0;

	if ((rc = load_inputs(s, rt)))
		return rc;
	if (want_whole(s)) {
		s->whole = true; /* nothing to compute: the install runs it */
		return 0;
	}
	if ((rc = merger_open_detached(rt, p, s->in, s->count, s->since, &res,
	                               &s->mg)))
		return rc;
	for (;;) {
		uint64_t spent = 0, have = merger_image_bytes(s->mg);

		if (s->done || have >= b->max_bytes ||
		    (have >= b->min_bytes && !(b->busy && b->busy(b->user))))
			break;
		if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE))
			return AH_ESTATE; /* the caller's stop */
		if ((rc = merger_step(s->mg, quantum, &s->done, &spent)))
			return rc;
		s->spent += spent;
	}
	return 0;
}

int arr_slice_compute(heap_txn *rt, pool *p, const char *name,
                      const arr_slice_bound *b, uint64_t quantum,
                      const bool *stop, arr_slice **out)
{
	arr_slice *s = NULL;
	spine sp;
	size_t n = strlen(name);
	int rc, mi;

	*out = NULL;
	if (n > AH_NAME_MAX)
		return AH_EINVAL;
	if (!quantum)
		quantum = SPINE_MERGE_QUANTUM;
	rc = spine_load(rt, name, &sp);
	if (rc == AH_ENOTFOUND)
		return 0; /* dropped: nothing to do */
	if (rc)
		return rc;
	if ((mi = pick(&sp)) < 0)
		goto out;
	if ((s = calloc(1, sizeof *s)) == NULL) {
		rc = AH_ENOMEM;
		goto out;
	}
	memcpy(s->name, name, n + 1);
	s->whole_ok = b->whole;
	s->user = b->user;
	s->whole_max = b->whole_max;
	if ((rc = remember(s, &sp, &sp.merges[mi])) == 0 && b->picked)
		b->picked(b->user, s->ids[0]);
	if (rc == 0)
		rc = run(s, rt, p, b, quantum, stop);
out:
	spine_clear(&sp);
	if (rc) {
		arr_slice_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* The merge of sp that is exactly the one s computed from, or -1. */
static int find(const arr_slice *s, const spine *sp)
{
	for (uint32_t i = 0; i < sp->nmerges; i++) {
		const spine_merge *m = &sp->merges[i];

		if (m->first != s->first || m->count != s->count ||
		    !frontier_eq(m->since, s->since) ||
		    m->partial_id != s->partial_id ||
		    m->has_boundary != s->has_boundary || m->klen != s->klen ||
		    m->vlen != s->vlen || memcmp(m->key, s->key, s->klen) != 0 ||
		    memcmp(m->val, s->val, s->vlen) != 0)
			continue;
		for (uint32_t j = 0; j < m->count; j++)
			if (sp->batches[m->first + j].id != s->ids[j])
				return -1;
		return (int)i;
	}
	return -1;
}

/* The inputs again, in wt: their Descriptions must be the ones computed
 * with (a neighbour's empty merge may have moved a lower). */
static int reload(const arr_slice *s, heap_txn *wt, batch **in, bool *same)
{
	int rc = 0;

	for (uint32_t i = 0; i < s->count && rc == 0; i++)
		rc = batch_load_listed(wt, s->ids[i], &in[i]);
	if (rc == 0)
		*same = frontier_eq(in[0]->desc.lower, s->lower) &&
		        frontier_eq(in[s->count - 1]->desc.upper, s->upper);
	return rc;
}

/* Suspends or completes merge mi with the attached merger. */
static int land(arr_slice *s, heap_txn *wt, spine *sp, uint32_t mi,
                batch **in)
{
	spine_merge *m = &sp->merges[mi];
	merge_resume r2;
	uint64_t out_id = 0;
	int rc;

	m->done += s->spent;
	m->credit = m->credit > s->spent ? m->credit - s->spent : 0;
	if (!s->done) {
		if ((rc = merger_suspend(s->mg, &r2)))
			return rc;
		return spine_set_boundary(m, &r2);
	}
	batch_desc d = { s->lower, s->upper, s->since };
	if ((rc = merger_finish(s->mg, &d, &out_id)))
		return rc;
	return spine_complete(wt, sp, mi, in, out_id);
}

/* Runs merge mi (not yet started, inputs in as wt holds them) to its end
 * on two threads: *ran false when merge_parallel did not take it
 * (nothing written). */
static int land_whole(arr_slice *s, heap_txn *wt, pool *p, spine *sp,
                      uint32_t mi, batch **in, bool *ran)
{
	spine_merge *m = &sp->merges[mi];
	batch_writer *w = NULL;
	uint64_t units = 0, out_id = 0;
	int rc = merge_parallel(wt, p, in, s->count, s->since, &w, &units, ran);

	if (rc || !*ran)
		return rc;
	m->done += units;
	m->credit = m->credit > units ? m->credit - units : 0;
	batch_desc d = { in[0]->desc.lower, in[s->count - 1]->desc.upper,
	                 s->since };
	if ((rc = batch_writer_finish(w, &d, &out_id)))
		return rc;
	s->done = true;
	return spine_complete(wt, sp, mi, in, out_id);
}

int arr_slice_install(heap_txn *wt, pool *p, arr_slice *s, uint64_t quantum,
                      bool *installed)
{
	batch **in = NULL;
	spine sp;
	bool same = false;
	int rc, mi;

	*installed = false;
	if (!quantum)
		quantum = SPINE_MERGE_QUANTUM;
	rc = spine_load(wt, s->name, &sp);
	if (rc == AH_ENOTFOUND)
		return 0;
	if (rc)
		return rc;
	if ((mi = find(s, &sp)) < 0)
		goto out;
	if ((in = calloc(s->count, sizeof *in)) == NULL) {
		rc = AH_ENOMEM;
		goto out;
	}
	if ((rc = reload(s, wt, in, &same)) || !same)
		goto out;
	if (!s->whole && want_whole(s)) { /* its images are not needed */
		merger_free(s->mg);
		s->mg = NULL;
		s->whole = true;
	}
	if (s->whole) {
		bool ran = false;

		TRY(land_whole(s, wt, p, &sp, (uint32_t)mi, in, &ran));
		if (!ran) { /* nothing written: the next slice computes */
			s->refused = true;
			goto out;
		}
	} else {
		TRY(merger_attach(s->mg, wt));
		TRY(land(s, wt, &sp, (uint32_t)mi, in));
	}
	if (s->done)
		TRY(spine_tidy(wt, p, &sp, quantum, true));
	TRY(spine_store(wt, s->name, &sp));
	*installed = true;
out:
	for (uint32_t i = 0; in && i < s->count; i++)
		batch_free(in[i]);
	free(in);
	spine_clear(&sp);
	return rc;
}

bool arr_slice_more(const arr_slice *s)
{
	return s && !s->done;
}

bool arr_slice_refused(const arr_slice *s)
{
	return s && s->refused;
}
