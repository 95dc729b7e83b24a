/*
 * arrangement/merge_run.c - the merge's run loop: (key, val) groups taken
 * straight from the inputs' columns while the inputs allow it (issue 13,
 * item 1: keys and vals compared as integers, singleton (time, diff)
 * lists read directly, the writer told the group boundaries).
 *
 * It applies while every input not exhausted sits in a version-2 chunk
 * checked whole (a walk's: HEAP_CHUNK_WHOLE) whose keys and vals are fixed
 * width, one key width and one val width over all of them.  Then each
 * input's current (key, val) is two pairs of big-endian integers (bytes
 * 0-8 and 8-16) and a compare of the rest when wider, a step is index
 * arithmetic, and the group's pair is one read of each dictionary.  It
 * consumes a group only when merge_group (merge.c) would write exactly
 * what it writes: every input on the group has one update there, the
 * group is not its chunk's last val (which may continue in the next
 * chunk), the times advanced by since are equal when several inputs hold
 * it, and the sum fits int64.  Anything else, and any range or index that
 * does not check, stops it before the group, and merge_group takes that
 * group (with its errors).  So a merge's output is byte-identical with
 * and without it (tests/unit/arrangement/test_merge_run.c).
 *
 * Its own order check: each group consumed is strictly after the one
 * before; the first group written in a call goes through
 * batch_writer_push_one (which checks against the staged last), the rest
 * through batch_writer_push_next with newkey known.  So the writer's B1
 * check holds for everything written, as without the loop.
 */
#include <string.h>

#include "arrangement/batch_writer_run.h"
#include "arrangement/merge_int.h"

/* Inputs it takes at most (more: merge_group's heap alone). */
#define RUN_MAX_INPUTS 16

/* A (key, val) as the loop compares it: the fields' bytes 0-8 and 8-16
 * as big-endian integers, and where the fields are. */
typedef struct kvp {
	uint64_t k1, k2, v1, v2;
	const uint8_t *k, *val;
} kvp;

/* One input's position in its chunk, as the loop keeps it. */
typedef struct rin {
	kvp p;                  /* the current key and val */
	batch_cursor *c;
	const bchunk *v;
	const uint8_t *kb, *vb; /* the key and val byte columns */
	uint32_t ki, vi, vend;
	uint32_t lim;           /* vi + 1 >= lim: a val the loop leaves */
	bool moved;
	/* v's val_upds, nupds and (time, diff) columns, copied at enter: a
	 * load fewer each per group (the loop never leaves the chunk) */
	const uint32_t *vu;
	uint32_t nupds;
	bcol tm, df;
} rin;

static inline __attribute__((always_inline)) uint64_t second8(const uint8_t *p, uint32_t w)
{
	return w > 8 ? bytes_prefix8(p + 8, w - 8) : 0;
}

/* bytes_cmp of two keys (vals) of width w, from their cached parts. */
static inline __attribute__((always_inline)) int field_cmp(uint64_t a1, uint64_t a2, const uint8_t *a,
                            uint64_t b1, uint64_t b2, const uint8_t *b,
                            uint32_t w)
{
	if (a1 != b1)
		return a1 < b1 ? -1 : 1;
	if (w > 8 && a2 != b2) /* up to 8 bytes the second parts are 0 */
		return a2 < b2 ? -1 : 1;
	return w > 16 ? memcmp(a + 16, b + 16, w - 16) : 0;
}

static inline __attribute__((always_inline)) int key_cmp(const kvp *a, const kvp *b, uint32_t kw)
{
	return field_cmp(a->k1, a->k2, a->k, b->k1, b->k2, b->k, kw);
}

static inline __attribute__((always_inline)) int kvp_cmp(const kvp *a, const kvp *b, uint32_t kw,
                          uint32_t vw)
{
	int c = key_cmp(a, b, kw);
	return c ? c : field_cmp(a->v1, a->v2, a->val, b->v1, b->v2, b->val, vw);
}

static inline __attribute__((always_inline)) void rin_val(rin *r, uint32_t vw)
{
	r->p.val = r->vb + (size_t)r->vi * vw;
	r->p.v1 = bytes_prefix8(r->p.val, vw);
	r->p.v2 = second8(r->p.val, vw);
}

/* The chunk's last val, or the last key's last val (which may continue
 * in the next chunk), as the bound lim of rin (the vals from lim - 1 on
 * go to merge_group): nvals, or vend for the chunk's last key. */
static inline __attribute__((always_inline)) uint32_t
rin_lim(const bchunk *v, uint32_t ki, uint32_t vend)
{
	return ki + 1 >= v->nkeys && vend < v->nvals ? vend : v->nvals;
}

/* Key ki of r's chunk and its first val: false when its val range does
 * not check (bcur_walk_key's checks). */
static inline __attribute__((always_inline)) bool rin_key(rin *r, uint32_t ki, uint32_t kw, uint32_t vw)
{
	uint32_t lo, hi;

	const uint32_t *kv = r->v->kv;
	lo = kv ? kv[ki] : ki;
	hi = kv ? kv[ki + 1] : ki + 1;
	if (lo >= hi || hi > r->v->nvals)
		return false;
	r->ki = ki;
	r->vi = lo;
	r->vend = hi;
	r->lim = rin_lim(r->v, ki, hi);
	r->p.k = r->kb + (size_t)ki * kw;
	r->p.k1 = bytes_prefix8(r->p.k, kw);
	r->p.k2 = second8(r->p.k, kw);
	rin_val(r, vw);
	return true;
}

/* bcol_at, inline here (the loop reads two per group). */
static inline __attribute__((always_inline)) bool
col_at(const bcol *k, uint32_t u, uint64_t *out)
{
	if (k->full) {
		*out = k->full[u];
		return true;
	}
	uint32_t x = k->idx ? k->idx[u] : 0;
	if (x >= k->nd)
		return false;
	*out = k->dict[x];
	return true;
}

/* The one pair of r's current val, when the loop may take it: not the
 * chunk's last val, a next position inside the chunk, one update, valid
 * dictionary indexes.  false: merge_group's case. */
static inline __attribute__((always_inline)) bool rin_pair(const rin *r, atime *t, int64_t *d)
{
	uint32_t lo, hi;

	if (r->vi + 1 >= r->lim)
		return false;
	lo = r->vu ? r->vu[r->vi] : r->vi;
	hi = r->vu ? r->vu[r->vi + 1] : r->vi + 1;
	if (lo >= hi || hi > r->nupds || hi - lo != 1)
		return false;
	uint64_t dv;
	if (!col_at(&r->tm, lo, t) || !col_at(&r->df, lo, &dv))
		return false;
	*d = (int64_t)dv;
	return true;
}

/* Steps r past its current val (rin_pair held): false when the next
 * key's val range does not check.  *lie is set when the new position is
 * not strictly after the old one (a val not after the key's last, a key
 * not after the last): the loop stops there and merge_group meets it. */
static inline __attribute__((always_inline)) bool
rin_step(rin *r, uint32_t kw, uint32_t vw, bool *lie)
{
	r->moved = true;
	if (++r->vi < r->vend) {
		uint64_t o1 = r->p.v1, o2 = r->p.v2;
		const uint8_t *o = r->p.val;
		rin_val(r, vw);
		*lie |= field_cmp(r->p.v1, r->p.v2, r->p.val, o1, o2, o, vw) <= 0;
		return true;
	}
	uint64_t o1 = r->p.k1, o2 = r->p.k2;
	const uint8_t *o = r->p.k;
	if (!rin_key(r, r->ki + 1, kw, vw))
		return false;
	*lie |= field_cmp(r->p.k1, r->p.k2, r->p.k, o1, o2, o, kw) <= 0;
	return true;
}

/* Where the inputs stand, to tell whether a layout that stopped the loop
 * can have changed (a cursor moved to another chunk or ran out). */
static uint64_t layout_sig(const merger *m)
{
	uint64_t s = m->n;
	for (size_t i = 0; i < m->n; i++)
		s = s * 0x100000001b3ull +
		    (bcur_key_valid(m->cur[i]) ? m->cur[i]->c + 1 : 0);
	return s;
}

/* The inputs' positions into the loop's form: 1 when it applies, 0 when
 * not (the layout), *nl the inputs not exhausted. */
static int enter(merger *m, rin *in, size_t *nl, uint32_t *kw, uint32_t *vw)
{
	size_t n = 0;

	for (size_t i = 0; i < m->n; i++) {
		batch_cursor *c = m->cur[i];
		const bchunk *v = &c->cv;

		if (!bcur_key_valid(c))
			continue;
		if (!bcur_val_valid(c) || !v->hv.all || v->ko || v->vo ||
		    (n && (v->kw != *kw || v->vw != *vw)))
			return 0;
		*kw = v->kw;
		*vw = v->vw;
		in[n].c = c;
		in[n].v = v;
		in[n].kb = v->body + v->kb_lo;
		in[n].vb = v->body + v->vb_lo;
		in[n].ki = c->ki;
		in[n].vi = c->vi;
		in[n].vend = c->vend;
		in[n].lim = rin_lim(v, c->ki, c->vend);
		in[n].p.k = c->key;
		in[n].p.k1 = bytes_prefix8(c->key, *kw);
		in[n].p.k2 = second8(c->key, *kw);
		in[n].moved = false;
		in[n].vu = v->vu;
		in[n].nupds = v->nupds;
		in[n].tm = v->tm;
		in[n].df = v->df;
		rin_val(&in[n], *vw);
		n++;
	}
	*nl = n;
	return n > 0;
}

/* The cursors at the loop's positions (the same fields bcur_next_val and
 * settle leave), and the heap rebuilt from them. */
static int leave(merger *m, rin *in, size_t nl)
{
	bool any = false;

	for (size_t i = 0; i < nl; i++) {
		batch_cursor *c = in[i].c;
		int rc;

		if (!in[i].moved)
			continue;
		any = true;
		/* a new key as bcur_next_key leaves it; vals of the same key
		 * as bcur_next_val (the key's start, kc and kk, kept) */
		if (in[i].ki != c->ki && (rc = bcur_walk_key(c, in[i].ki)))
			return rc;
		if (in[i].vi != c->vi) {
			c->vi = in[i].vi;
			if ((rc = bcur_walk_val(c)))
				return rc;
		}
	}
	if (any)
		merger_requeue(m);
	return 0;
}

/* What a call of the loop leaves (run_groups keeps it in locals). */
typedef struct run_state {
	uint64_t used, groups;
	const uint8_t *lk, *lv; /* the last group consumed */
	const uint8_t *wk;      /* the last key written */
	bool consumed, wrote;
} run_state;

/* The loop over groups, for key width kw and val width vw: inline in
 * merger_run once per common width pair (and for two inputs of those),
 * so that the compares and steps on them fold to constant-width loads.  What it carries from group to
 * group is in locals (the writer's run mode in a bw_run whose address
 * only inline code sees), so that the staging's byte stores, which may
 * alias any memory, do not make the compiler reload it. */
static inline __attribute__((always_inline)) int
run_groups(merger *m, rin *in, size_t nl, uint32_t kw, uint32_t vw,
           uint64_t fuel, run_state *st)
{
	size_t hits[RUN_MAX_INPUTS];
	uint64_t used = 0, groups = 0, wk1 = 0, wk2 = 0;
	const uint8_t *lk = NULL, *lv = NULL, *wk = NULL;
	bool wrote = false, inrun = false, lie = false;
	/* past_stop's fields, in locals: the staging's stores may alias m */
	const uint8_t *stop = m->stop;
	const size_t stoplen = m->stoplen;
	const uint64_t stop_kp = m->stop_kp;
	bw_run br = { 0 }; /* set before use: the compiler cannot tell */
	int rc = 0;

	while ((fuel == 0 || used < fuel) && !lie) {
		size_t b = 0, nh = 1;
		atime t;
		int64_t d;

		hits[0] = 0;
		for (size_t i = 1; i < nl; i++) {
			int c = kvp_cmp(&in[i].p, &in[b].p, kw, vw);
			if (c < 0) {
				b = i;
				hits[0] = i;
				nh = 1;
			} else if (c == 0) {
				hits[nh++] = i;
			}
		}
		if (stop != NULL && in[b].p.k1 >= stop_kp &&
		    bytes_cmp(in[b].p.k, kw, stop, stoplen) >= 0)
			break; /* past_stop: the range ends, merge_group says so */
		if (!rin_pair(&in[b], &t, &d))
			break;
		t = time_advance_by(t, m->since);
		if (nh > 1) {
			bool ok = true;
			for (size_t h = 1; h < nh && ok; h++) {
				atime th;
				int64_t dh;
				ok = rin_pair(&in[hits[h]], &th, &dh) &&
				     time_advance_by(th, m->since) == t &&
				     !__builtin_add_overflow(d, dh, &d);
			}
			if (!ok)
				break; /* several times, or a split: merge_group */
		}
		const kvp *r = &in[b].p;
		if (d != 0) {
			bool newkey = !wrote ||
			              field_cmp(r->k1, r->k2, r->k, wk1, wk2, wk, kw) != 0;

			rc = inrun ? bw_run_push(&br, kw, vw, r->k, r->k1, r->val,
			                         r->v1, newkey, t, d) : 1;
			if (rc == 1) {
				/* the writer's own path, then its run mode again */
				if (inrun)
					bw_run_end(&br);
				inrun = false;
				if (!wrote)
					rc = batch_writer_push_one(m->w, r->k, kw, r->k1,
					                           r->val, vw, r->v1,
					                           false, t, d);
				else
					rc = batch_writer_push_next(m->w, r->k, kw,
					                            r->k1, r->val, vw,
					                            r->v1, newkey, t, d);
				if (rc)
					break;
				bw_run fresh; /* begun apart: br's address kept in */
				if (bw_run_begin(m->w, kw, vw, &fresh) == 0) {
					br = fresh;
					inrun = true;
				}
			}
			wk1 = r->k1, wk2 = r->k2, wk = r->k;
			wrote = true;
		}
		lk = r->k, lv = r->val;
		used += nh;
		groups++;
		for (size_t h = 0; h < nh; h++)
			if (!rin_step(&in[hits[h]], kw, vw, &lie)) {
				rc = CORRUPT("batch chunk key_vals");
				break;
			}
		if (rc)
			break;
	}
	if (inrun)
		bw_run_end(&br);
	st->used = used;
	st->groups = groups;
	st->consumed = lk != NULL;
	st->lk = lk, st->lv = lv;
	st->wrote = wrote;
	st->wk = wk;
	return rc;
}

int merger_run(merger *m, uint64_t fuel, uint64_t *units)
{
	rin in[RUN_MAX_INPUTS];
	size_t nl = 0;
	uint32_t kw = 0, vw = 0;
	run_state st;
	int rc;

	*units = 0;
	if (!m->runs || m->held || !m->w || m->n > RUN_MAX_INPUTS)
		return 0;
	uint64_t sig = layout_sig(m);
	if (m->run_stuck && sig == m->run_sig)
		return 0;
	if (!enter(m, in, &nl, &kw, &vw)) {
		m->run_stuck = true;
		m->run_sig = sig;
		return 0;
	}
	m->run_stuck = false;
	memset(&st, 0, sizeof st);
	if (kw == 8 && vw == 16 && nl == 2)
		rc = run_groups(m, in, 2, 8, 16, fuel, &st);
	else if (kw == 8 && vw == 16)
		rc = run_groups(m, in, nl, 8, 16, fuel, &st);
	else
		rc = run_groups(m, in, nl, kw, vw, fuel, &st);
	if (st.consumed) {
		m->has_boundary = true;
		m->lkey = st.lk, m->lklen = kw;
		m->lval = st.lv, m->lvlen = vw;
	}
	if (st.wrote) {
		m->wkey = st.wk;
		m->wklen = kw;
	}
	*units = st.used;
	m->run_groups += st.groups;
	int lrc = leave(m, in, nl);
	return rc ? rc : lrc;
}
