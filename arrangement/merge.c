/*
 * arrangement/merge.c - the fueled, resumable k-way merge of batches
 * (differential dataflow's spine_fueled merges, with logical compaction).
 *
 * Every input is read through a batch cursor opened with `since`, so times
 * arrive advanced to max(t, since).  The merge visits (key, val) groups in
 * order: the smallest current (key, val) over all cursors (a binary heap
 * of the inputs, compared on cached 8-byte prefixes first), every input
 * that holds it contributes its (time, diff) pairs, the pairs are sorted by time,
 * equal times summed (in 128 bits, so the result does not depend on the
 * order of the inputs) and zeros dropped.  A sum outside int64, possible
 * only where advancing to since made distinct times equal, is written as
 * several updates at distinct times <= since (split), never refused:
 * a merge that could not complete would wedge the arrangement.
 * Memory is per group: the pairs of one (key, val) in one pool buffer.
 *
 * Invariants:
 *  M1 between groups every cursor is either exhausted or on a valid val;
 *  M2 every input (key, val) <= the boundary has been consumed (written to
 *     the output, or consolidated away) and none above it;
 *  M3 the inputs are only read, never modified or freed.
 * It never writes to an input batch and never frees the output's chunks
 * except through the writer (an empty finish).
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/merge_int.h"

static void account(merger *m, int64_t delta)
{
	m->bytes += (uint64_t)delta;
	if (m->bytes > m->peak)
		m->peak = m->bytes;
}

static inline int hent_cmp(const hent *a, const hent *b)
{
	return kv_cmp(&a->r, &b->r);
}

static void pq_sift_down(hent *h, size_t n, size_t i)
{
	hent x = h[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && hent_cmp(&h[c + 1], &h[c]) < 0)
			c++;
		if (hent_cmp(&h[c], &x) >= 0)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = x;
}

/* Input i's current (key, val) with the prefixes its cursor keeps. */
static inline void load_ent(batch_cursor *c, size_t i, hent *x)
{
	x->r.k = c->key;
	x->r.kl = c->klen;
	x->r.kp = c->kp;
	x->r.v = c->val;
	x->r.vl = c->vlen;
	x->r.vp = c->vp;
	x->idx = i;
}

/* Adds input i (on a valid val) to the heap (n > 2). */
static void pq_push_heap(merger *m, size_t i)
{
	hent x;
	size_t j = m->hn++;

	load_ent(m->cur[i], i, &x);
	while (j > 0 && hent_cmp(&x, &m->hp[(j - 1) / 2]) < 0) {
		m->hp[j] = m->hp[(j - 1) / 2];
		j = (j - 1) / 2;
	}
	m->hp[j] = x;
}

/* Adds input i (on a valid val) to the heap (two inputs: to two[],
 * inline: a merge does it once per (key, val) read). */
static inline void pq_push(merger *m, size_t i)
{
	if (m->n == 2) {
		load_ent(m->cur[i], i, &m->two[i]);
		m->live[i] = true;
		m->hn += 1;
		return;
	}
	pq_push_heap(m, i);
}

static hent pq_pop(merger *m)
{
	hent top = m->hp[0];
	m->hp[0] = m->hp[--m->hn];
	if (m->hn)
		pq_sift_down(m->hp, m->hn, 0);
	return top;
}

/* The held top (next_group) after its input i moved: its next (key, val)
 * in its place, or off the heap when the input is exhausted. */
static void requeue_top(merger *m, size_t i)
{
	batch_cursor *c = m->cur[i];

	m->held = false;
	if (bcur_key_valid(c)) {
		load_ent(c, i, &m->hp[0]);
		pq_sift_down(m->hp, m->hn, 0);
	} else {
		(void)pq_pop(m);
	}
}

/* M1: a key with no val left (end of its vals) moves to the next key. */
static int settle(batch_cursor *c)
{
	int rc = 0;
	while (rc == 0 && bcur_key_valid(c) && !bcur_val_valid(c))
		rc = bcur_next_key(c);
	return rc;
}

/* Positions c on the first (key, val) strictly after (bk, bv). */
static int seek_past(batch_cursor *c, const void *bk, size_t bkl,
                     const void *bv, size_t bvl)
{
	const void *k, *v;
	size_t kl, vl;
	int rc = bcur_seek_key(c, bk, bkl);
	if (rc || !bcur_key_valid(c))
		return rc;
	bcur_key(c, &k, &kl);
	if (bytes_cmp(k, kl, bk, bkl) != 0)
		return settle(c);
	rc = bcur_seek_val(c, bv, bvl);
	if (rc)
		return rc;
	if (bcur_val_valid(c)) {
		bcur_val(c, &v, &vl);
		if (bytes_cmp(v, vl, bv, bvl) == 0)
			rc = bcur_step_val(c);
	}
	return rc ? rc : settle(c);
}

static int copy_boundary(merger *m, const void *k, size_t kl, const void *v,
                         size_t vl)
{
	size_t need = kl + vl ? kl + vl : 1;
	if (need > m->bcopy_cap) {
		uint8_t *nb = pool_malloc(m->p, need);
		if (!nb)
			return AH_ENOMEM;
		if (m->bcopy) {
			pool_free(m->p, m->bcopy, m->bcopy_cap);
			account(m, -(int64_t)m->bcopy_cap);
		}
		m->bcopy = nb;
		m->bcopy_cap = need;
		account(m, (int64_t)need);
	}
	if (kl)
		memcpy(m->bcopy, k, kl);
	if (vl)
		memcpy(m->bcopy + kl, v, vl);
	m->has_boundary = true;
	m->lkey = m->bcopy;
	m->lklen = kl;
	m->lval = m->bcopy + kl;
	m->lvlen = vl;
	return 0;
}

/* A range's bounds and writer (merger_open_range); NULL: the whole
 * merge, its own writer. */
typedef struct mrange {
	const void *lo, *hi;
	size_t lolen, hilen;
	batch_writer *w;
} mrange;

static int open_merger(heap_txn *t, pool *p, batch *const *inputs, size_t n,
                       frontier since, const merge_resume *resume,
                       bool detached, const mrange *rg, merger **out)
{
	merger *m = NULL;
	int rc = 0;

	if (!t || !p || !out || (n && !inputs))
		return AH_EINVAL;
	*out = NULL;
	m = calloc(1, sizeof *m);
	if (!m)
		return AH_ENOMEM;
	m->t = t;
	m->p = p;
	m->inputs = inputs;
	m->n = n;
	m->since = since;
	m->runs = true;
	if (n) {
		m->cur = calloc(n, sizeof *m->cur);
		m->hits = calloc(n, sizeof *m->hits);
		m->hp = calloc(n, sizeof *m->hp);
		if (!m->cur || !m->hits || !m->hp) {
			rc = AH_ENOMEM;
			goto out;
		}
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = bcur_open(t, inputs[i], since, &m->cur[i]);
		if (rc == 0) {
			bcur_set_walk(m->cur[i]);
			rc = settle(m->cur[i]);
		}
		if (rc == 0 && rg && rg->lo) { /* the range's first key and on */
			rc = bcur_seek_key(m->cur[i], rg->lo, rg->lolen);
			if (rc == 0)
				rc = settle(m->cur[i]);
		}
	}
	if (rc)
		goto out;
	m->own_w = !(rg && rg->w);
	if (rg && rg->hi) {
		m->stop = rg->hi;
		m->stoplen = rg->hilen;
		m->stop_kp = bytes_prefix8(rg->hi, rg->hilen);
	}
	if (resume && resume->has_boundary) {
		if ((resume->klen && !resume->key) ||
		    (resume->vlen && !resume->val)) {
			rc = AH_EINVAL;
			goto out;
		}
		rc = copy_boundary(m, resume->key, resume->klen, resume->val,
		                   resume->vlen);
		for (size_t i = 0; i < n && rc == 0; i++)
			rc = seek_past(m->cur[i], m->lkey, m->lklen, m->lval,
			               m->lvlen);
		if (rc)
			goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (bcur_key_valid(m->cur[i]))
			pq_push(m, i);
	if (rg && rg->w)
		m->w = rg->w;
	else if (detached)
		rc = batch_writer_new_detached(t, p, resume ? resume->partial_id : 0,
		                               &m->w);
	else if (resume && resume->partial_id)
		rc = batch_writer_resume(t, p, resume->partial_id, &m->w);
	else
		rc = batch_writer_new(t, p, &m->w);
out:
	if (rc) {
		merger_free(m);
		m = NULL;
	}
	*out = m;
	return rc;
}

int merger_open(heap_txn *t, pool *p, batch *const *inputs, size_t n,
                frontier since, const merge_resume *resume, merger **out)
{
	return open_merger(t, p, inputs, n, since, resume, false, NULL, out);
}

int merger_open_detached(heap_txn *t, pool *p, batch *const *inputs,
                         size_t n, frontier since, const merge_resume *resume,
                         merger **out)
{
	return open_merger(t, p, inputs, n, since, resume, true, NULL, out);
}

int merger_open_range(heap_txn *t, pool *p, batch *const *inputs, size_t n,
                      frontier since, const void *lo, size_t lolen,
                      const void *hi, size_t hilen, batch_writer *w,
                      merger **out)
{
	mrange rg = { lo, hi, lolen, hilen, w };

	if ((lolen && !lo) || (hilen && !hi))
		return AH_EINVAL;
	return open_merger(t, p, inputs, n, since, NULL, w == NULL, &rg, out);
}

batch_writer *merger_release_writer(merger *m)
{
	batch_writer *w = m ? m->w : NULL;

	if (m)
		m->w = NULL;
	return w;
}

int merger_attach(merger *m, heap_txn *wt)
{
	if (!m || !m->w)
		return AH_ESTATE;
	return batch_writer_attach(m->w, wt);
}

uint64_t merger_image_bytes(const merger *m)
{
	return m ? batch_writer_image_bytes(m->w) : 0;
}

/* Whether heap entry i (a child of the root) exists and equals the top:
 * on the key prefixes first. */
static inline bool ties_top(const merger *m, size_t i)
{
	return i < m->hn && m->hp[i].r.kp == m->hp[0].r.kp &&
	       hent_cmp(&m->hp[i], &m->hp[0]) == 0;
}

/* Takes the smallest current (key, val) off the heap with every input on
 * it: fills m->hits, returns their count (0 when all are exhausted). */
static size_t next_group(merger *m, const void **k, size_t *kl,
                         const void **v, size_t *vl, uint64_t *kp,
                         uint64_t *vp)
{
	hent min;
	size_t nh = 0;
	if (m->hn == 0)
		return 0;
	if (m->n == 2) { /* two inputs: one compare, no heap */
		int c = !m->live[1] ? -1 : !m->live[0] ? 1
		                         : hent_cmp(&m->two[0], &m->two[1]);
		const hent *e = &m->two[c <= 0 ? 0 : 1];

		if (past_stop(m, e->r.k, e->r.kl, e->r.kp))
			return 0; /* the range ends: nothing taken */
		if (c <= 0) {
			m->hits[nh++] = 0;
			m->live[0] = false;
		}
		if (c >= 0) {
			m->hits[nh++] = 1;
			m->live[1] = false;
		}
		m->hn -= nh;
		*k = e->r.k, *kl = e->r.kl, *v = e->r.v, *vl = e->r.vl;
		*kp = e->r.kp, *vp = e->r.vp;
		return nh;
	}
	if (past_stop(m, m->hp[0].r.k, m->hp[0].r.kl, m->hp[0].r.kp))
		return 0; /* the range ends: nothing taken */
	/* The top alone holds the smallest (key, val) unless a child of the
	 * root equals it (an equal entry's parents are all equal): then it
	 * stays on the heap, and its input's next (key, val) replaces it
	 * (one sift down, not a pop and a push: requeue_top). */
	if (!ties_top(m, 1) && !ties_top(m, 2)) {
		min = m->hp[0];
		m->held = true;
		m->hits[0] = min.idx;
		*k = min.r.k, *kl = min.r.kl, *v = min.r.v, *vl = min.r.vl;
		*kp = min.r.kp, *vp = min.r.vp;
		return 1;
	}
	min = pq_pop(m);
	m->hits[nh++] = min.idx;
	while (m->hn && hent_cmp(&m->hp[0], &min) == 0)
		m->hits[nh++] = pq_pop(m).idx;
	*k = min.r.k, *kl = min.r.kl, *v = min.r.v, *vl = min.r.vl;
	*kp = min.r.kp, *vp = min.r.vp;
	return nh;
}

/* Room for n pairs in m->pairs. */
static int reserve_pairs(merger *m, size_t n)
{
	if (n <= m->pairs_cap)
		return 0;
	size_t ncap = m->pairs_cap ? m->pairs_cap : 64;
	while (ncap < n)
		ncap *= 2;
	tpair *nb = m->pairs ?
		pool_realloc(m->p, m->pairs, m->pairs_cap * sizeof *nb,
		             ncap * sizeof *nb) :
		pool_malloc(m->p, ncap * sizeof *nb);
	if (!nb)
		return AH_ENOMEM;
	account(m, (int64_t)((ncap - m->pairs_cap) * sizeof *nb));
	m->pairs = nb;
	m->pairs_cap = ncap;
	return 0;
}

static int push_pair(merger *m, size_t *np, uint64_t time, int64_t diff)
{
	int rc;

	if (*np == m->pairs_cap && (rc = reserve_pairs(m, *np + 1)))
		return rc;
	m->pairs[*np].time = time;
	m->pairs[(*np)++].diff = diff;
	return 0;
}

static int tpair_cmp(const void *a, const void *b)
{
	return time_cmp(((const tpair *)a)->time, ((const tpair *)b)->time);
}

static void sort_pairs(tpair *a, size_t n)
{
	if (n > 32) {
		qsort(a, n, sizeof *a, tpair_cmp);
		return;
	}
	for (size_t i = 1; i < n; i++) {
		tpair x = a[i];
		size_t j = i;
		while (j > 0 && time_cmp(a[j - 1].time, x.time) > 0) {
			a[j] = a[j - 1];
			j--;
		}
		a[j] = x;
	}
}

/* Writes a sum that does not fit int64 as several updates that each do:
 * at distinct times since - (p - 1) .. since, increasing (B1).  Only a run
 * at time since can need it: every input's times are distinct and the
 * inputs' ranges disjoint, so equal times come only from advancing to
 * since, and the colliding entries had distinct times in [lower, since],
 * at least as many as the pieces.  Times <= since read the same at every
 * readable as_of (>= since), so the pieces mean exactly the sum: the
 * updates are kept apart instead of the arrangement being wedged. */
static int split(merger *m, diff_sum sum, atime time, size_t used,
                 size_t *out)
{
	diff_sum left = sum;
	uint64_t p = 0;
	atime lower = m->n ? frontier_time(m->inputs[0]->desc.lower) : 0;

	for (; !diff_fits(left); p++)
		left -= sum > 0 ? INT64_MAX : INT64_MIN;
	/* The seam: pieces at distinct times before since's element; with
	 * product times this needs distinct times that advance to the same
	 * time (time.h).  The pieces never outnumber the pairs they replace
	 * (used), so they are written in place. */
	if (time != frontier_time(m->since) || time - lower < p || *out != 0 ||
	    p + (left != 0) > used)
		return AH_ELIMIT; /* cannot happen in a spine (see above) */
	for (uint64_t i = p; i > 0; i--) {
		m->pairs[*out].time = time - i;
		m->pairs[(*out)++].diff = sum > 0 ? INT64_MAX : INT64_MIN;
	}
	if (left != 0) {
		m->pairs[*out].time = time;
		m->pairs[(*out)++].diff = (int64_t)left;
	}
	return 0;
}

/* Sums equal times of the sorted pairs in place, dropping zeros; the one
 * sum that does not fit int64 (at since, the group's least time: see
 * split) becomes its pieces.  np shrinks to the consolidated run. */
static int consolidate(merger *m, size_t *np)
{
	size_t out = 0;

	for (size_t i = 0; i < *np;) {
		diff_sum sum = 0;
		atime time = m->pairs[i].time;
		size_t from = i;
		int rc;

		for (; i < *np && time_cmp(m->pairs[i].time, time) == 0; i++)
			sum += m->pairs[i].diff;
		if (!diff_fits(sum)) {
			if ((rc = split(m, sum, time, i - from, &out)))
				return rc;
		} else if (sum != 0) {
			m->pairs[out].time = time;
			m->pairs[out++].diff = (int64_t)sum;
		}
	}
	*np = out;
	return 0;
}

/* Appends input h's stored pairs advanced by since, sorted: the times not
 * beyond since all become since (a prefix: the stored times increase), the
 * rest keep their order. */
static void gather(merger *m, size_t *np, const atime *t, const int64_t *d,
                   uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		m->pairs[*np].time = time_advance_by(t[i], m->since);
		m->pairs[(*np)++].diff = d[i];
	}
}

/* Merges two sorted runs of pairs (a then b, adjacent in m->pairs) by
 * time into the scratch after them, then moves the result down. */
static void merge_runs(merger *m, size_t na, size_t nb)
{
	tpair *a = m->pairs, *b = m->pairs + na, *o = m->pairs + na + nb;
	size_t i = 0, j = 0, n = 0;

	while (i < na || j < nb)
		o[n++] = j == nb || (i < na && time_cmp(a[i].time, b[j].time) <= 0)
		         ? a[i++] : b[j++];
	memmove(m->pairs, o, n * sizeof *o);
}

/* The group's pairs, consolidated, in m->pairs: straight from the chunks
 * when every input holds its part in one chunk (one or two inputs: a
 * copy, or a merge of two sorted runs), else through the time walk and a
 * sort. */
static int group_pairs(merger *m, size_t nh, size_t *np, uint64_t *units)
{
	const atime *t[2];
	const int64_t *d[2];
	uint32_t n[2] = { 0, 0 };
	int rc = 0;
	bool direct = nh <= 2;

	*np = 0;
	for (size_t h = 0; h < nh && direct; h++) {
		if ((rc = bcur_times_next(m->cur[m->hits[h]], &t[h], &d[h], &n[h])) < 0)
			return rc;
		direct = rc == 0;
	}
	if (direct && nh == 1 && n[0] == 1) {
		/* One input, one update: nothing to sort or sum. */
		if (m->pairs_cap == 0 && (rc = reserve_pairs(m, 1)))
			return rc;
		*units = 1;
		m->pairs[0].time = time_advance_by(t[0][0], m->since);
		m->pairs[0].diff = d[0][0];
		*np = d[0][0] != 0;
		return 0;
	}
	if (direct) {
		size_t total = (size_t)n[0] + n[1];

		if ((rc = reserve_pairs(m, 2 * total)))
			return rc;
		gather(m, np, t[0], d[0], n[0]);
		if (nh == 2) {
			gather(m, np, t[1], d[1], n[1]);
			merge_runs(m, n[0], n[1]);
		}
	} else {
		rc = 0; /* bcur_times said "may go on": walk instead */
		for (size_t h = 0; h < nh && rc == 0; h++) {
			batch_cursor *c = m->cur[m->hits[h]];
			uint64_t time;
			int64_t diff;

			if ((rc = bcur_times_rewind(c)))
				return rc;
			while ((rc = bcur_time_next(c, &time, &diff)) == 1)
				if ((rc = push_pair(m, np, time, diff)))
					return rc;
		}
		if (rc)
			return rc;
		/* One input's times are sorted, and advancing keeps them so. */
		if (nh > 1)
			sort_pairs(m->pairs, *np);
	}
	*units = *np;
	return consolidate(m, np);
}

/* The one pair of input c's current val, advanced by since, into
 * m->pairs[0], when it lies inline (a chunk checked whole, not its last
 * val, one update: most vals of a merge): 1; 0 when not (group_pairs
 * reads it); AH_ECORRUPT.  The same checks as bcur_times_next's. */
static inline int one_pair(merger *m, const batch_cursor *c)
{
	const bchunk *v = &c->cv;
	uint32_t lo, hi;
	atime t;
	int64_t d;

	if (!v->hv.all || !bcur_val_valid(c) || c->vi + 1 >= v->nvals ||
	    m->pairs_cap == 0)
		return 0;
	bchunk_range(v->vu, c->vi, &lo, &hi);
	if (lo >= hi || hi > v->nupds)
		return CORRUPT("batch chunk val_upds");
	if (hi - lo != 1)
		return 0;
	if (!bchunk_upd(v, lo, &t, &d))
		return CORRUPT("batch chunk dictionary index");
	m->pairs[0].time = time_advance_by(t, m->since);
	m->pairs[0].diff = d;
	return 1;
}

/* Consumes one (key, val) group; *units = pairs read. */
static int merge_group(merger *m, uint64_t *units)
{
	const void *k = NULL, *v = NULL;
	size_t kl = 0, vl = 0, np = 0;
	uint64_t kp = 0, vp = 0;
	int rc = 0;
	size_t nh = next_group(m, &k, &kl, &v, &vl, &kp, &vp);

	if (nh == 0) {
		m->done = true;
		return 0;
	}
	if (nh == 1 && (rc = one_pair(m, m->cur[m->hits[0]])) != 0) {
		if (rc < 0)
			return rc;
		*units = 1;
		np = m->pairs[0].diff != 0;
	} else if ((rc = group_pairs(m, nh, &np, units))) {
		return rc;
	}
	if (np == 1) {
		/* The key of the last run written when it is the same pointer
		 * (vals of one key in one chunk); else the writer compares, on
		 * the prefixes first. */
		bool same = m->wkey == k && m->wklen == kl && k != NULL;

		if ((rc = batch_writer_push_one(m->w, k, kl, kp, v, vl, vp, same,
		                                m->pairs[0].time,
		                                m->pairs[0].diff)))
			return rc;
		m->wkey = k;
		m->wklen = kl;
	} else if (np != 0) {
		/* The key of the last run written: the same pointer (vals of one
		 * key in one chunk) or the same bytes. */
		bool same = m->wkey != NULL && m->wklen == kl &&
		            (m->wkey == k || memcmp(m->wkey, k, kl) == 0);

		if ((rc = batch_writer_push_run(m->w, k, kl, v, vl, same,
		                                m->pairs, np)))
			return rc;
		m->wkey = k;
		m->wklen = kl;
	}
	/* k and v point into the map: they stay valid while the cursors move. */
	m->has_boundary = true;
	m->lkey = k, m->lklen = kl, m->lval = v, m->lvlen = vl;
	for (size_t h = 0; h < nh && rc == 0; h++) {
		batch_cursor *c = m->cur[m->hits[h]];
		rc = bcur_next_val(c);
		if (rc == 0 && !c->vvalid)
			rc = settle(c);
		if (rc == 0 && m->held)
			requeue_top(m, m->hits[h]);
		else if (rc == 0 && bcur_key_valid(c))
			pq_push(m, m->hits[h]);
	}
	return rc;
}

void merger_requeue(merger *m)
{
	m->hn = 0;
	m->live[0] = m->live[1] = false;
	for (size_t i = 0; i < m->n; i++)
		if (bcur_key_valid(m->cur[i]))
			pq_push(m, i);
}

void merger_set_runs(merger *m, bool on)
{
	if (m)
		m->runs = on;
}

uint64_t merger_run_groups(const merger *m)
{
	return m ? m->run_groups : 0;
}

int merger_step(merger *m, uint64_t fuel, bool *done, uint64_t *spent)
{
	uint64_t used = 0;
	int rc = 0;

	if (!m)
		return AH_EINVAL;
	if (!m->w && !m->done)
		return AH_ESTATE;
	while (!m->done && rc == 0 && (fuel == 0 || used < fuel)) {
		uint64_t units = 0;
		/* The run loop while the inputs allow it, else one group
		 * (which may be where the loop stopped). */
		rc = merger_run(m, fuel ? fuel - used : 0, &units);
		used += units;
		if (units || rc)
			continue;
		rc = merge_group(m, &units);
		used += units;
	}
	/* Report exhaustion now rather than on a further empty step. */
	if (rc == 0 && m->hn == 0)
		m->done = true;
	/* (with a stop key, merge_group found the range's end) */
	if (done)
		*done = m->done;
	if (spent)
		*spent = used;
	return rc;
}

/* The Description of a merge's output, also of its partial output: the
 * inputs' span, and the merge's since even when it lies beyond their upper
 * (its times were advanced to it: B3 allows t <= since). */
static batch_desc span_desc(const merger *m)
{
	batch_desc d = { frontier_of(0), frontier_of(0), m->since };
	if (m->n) {
		d.lower = m->inputs[0]->desc.lower;
		d.upper = m->inputs[m->n - 1]->desc.upper;
	}
	return d;
}

int merger_suspend(merger *m, merge_resume *out)
{
	batch_desc d;
	uint64_t id = 0;
	int rc;

	if (!m || !out)
		return AH_EINVAL;
	if (!m->w || !m->own_w || batch_writer_detached(m->w))
		return AH_ESTATE; /* detached: merger_attach first */
	memset(out, 0, sizeof *out);
	if (m->has_boundary && m->lkey != m->bcopy) {
		rc = copy_boundary(m, m->lkey, m->lklen, m->lval, m->lvlen);
		if (rc)
			return rc;
	}
	d = span_desc(m);
	rc = batch_writer_suspend(m->w, &d, &id);
	m->w = NULL;
	if (rc)
		return rc;
	out->has_boundary = m->has_boundary;
	if (m->has_boundary) {
		out->key = m->lkey;
		out->klen = m->lklen;
		out->val = m->lval;
		out->vlen = m->lvlen;
	}
	out->partial_id = id;
	return 0;
}

int merger_finish(merger *m, const batch_desc *d, uint64_t *id)
{
	int rc;

	if (!m || !d || !id)
		return AH_EINVAL;
	if (!m->w || !m->own_w || !m->done || batch_writer_detached(m->w))
		return AH_ESTATE;
	rc = batch_writer_finish(m->w, d, id);
	m->w = NULL;
	return rc;
}

void merger_free(merger *m)
{
	if (!m)
		return;
	if (m->w && m->own_w)
		batch_writer_free(m->w);
	for (size_t i = 0; m->cur && i < m->n; i++)
		if (m->cur[i])
			bcur_close(m->cur[i]);
	free(m->cur);
	free(m->hits);
	free(m->hp);
	if (m->pairs)
		pool_free(m->p, m->pairs, m->pairs_cap * sizeof *m->pairs);
	if (m->bcopy)
		pool_free(m->p, m->bcopy, m->bcopy_cap);
	free(m);
}

uint64_t merger_peak_bytes(const merger *m)
{
	return m ? m->peak : 0;
}
