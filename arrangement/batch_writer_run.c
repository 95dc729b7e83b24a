/*
 * arrangement/batch_writer_run.c - the run mode's start and end
 * (batch_writer_run.h): the staged chunk's counts, bounds and buffer
 * ends into a bw_run, and back.
 */
#include "arrangement/batch_writer_run.h"

/* The least nu' >= nu at which col_dict(nd, nu') is not 0 (UINT64_MAX:
 * never): col_dict(nd, x) turns on at most once as x grows, since
 * 8x - a8(x) never decreases. */
static uint64_t col_thr(uint32_t nd, bool over, uint64_t nu)
{
	uint64_t lo = nu, hi;

	if (over || nd == 0 || nd > BCHUNK_DICT_MAX)
		return UINT64_MAX;
	if (col_dict(nd, lo))
		return lo;
	for (hi = lo + 16; !col_dict(nd, hi); hi = 2 * hi)
		lo = hi;
	while (hi - lo > 1) { /* col_dict(lo) is 0, col_dict(hi) is not */
		uint64_t mid = lo + (hi - lo) / 2;
		if (col_dict(nd, mid))
			hi = mid;
		else
			lo = mid;
	}
	return hi;
}

int bw_run_begin(batch_writer *w, uint32_t kw, uint32_t vw, bw_run *r)
{
	/* The form the mode keeps, and the staging's length invariants
	 * (offset arrays carry a leading 0: batch_writer.c), checked so
	 * that the mode's indexes are the ones push_next would use. */
	if (!w->have_last || w->nu == 0 || w->nk == 0 || !w->kfix ||
	    !w->vfix || w->kw != kw || w->vw != vw ||
	    w->ko.len != 4 * ((size_t)w->nk + 1) ||
	    w->kv.len != 4 * ((size_t)w->nk + 1) ||
	    w->vo.len != 4 * ((size_t)w->nv + 1) ||
	    w->vu.len != 4 * ((size_t)w->nv + 1) ||
	    w->tm.len != 8 * (size_t)w->nu || w->df.len != 8 * (size_t)w->nu ||
	    w->ti.len != w->nu || w->di.len != w->nu)
		return 1;
	r->w = w;
	r->nk = r->nk0 = w->nk;
	r->nv = w->nv;
	r->nu = r->nu0 = w->nu;
	r->size_ub = w->size_ub;
	r->max_body = w->max_body;
	/* grow_bound's terms that the mode cannot change: fixed widths,
	 * one update per val (nu == nv stays as it is), one val per key
	 * (nv == nk: a second val leaves the mode) */
	r->gval = vw + 8 + (w->nu == w->nv ? 0 : 8);
	r->gkey = kw + 8 + (w->nv == w->nk ? 0 : 8);
	r->kb = w->kb.p, r->kb_len = w->kb.len;
	r->vb = w->vb.p, r->vb_len = w->vb.len;
	r->kh = w->khash.p, r->kh_len = w->khash.len;
	r->hash = !w->no_filter;
	/* the rooms as counts (bw_run): vals that fit the val bytes, up to
	 * ulim; keys that fit the key bytes and the hashes */
	uint64_t uroom = vw ? (w->vb.cap - w->vb.len) / vw : UINT32_MAX;
	uint64_t ul = w->ulim > w->nu ? w->ulim - w->nu : 0;
	uint64_t kroom = kw ? (w->kb.cap - w->kb.len) / kw : UINT32_MAX;
	if (r->hash && (w->khash.cap - w->khash.len) / 8 < kroom)
		kroom = (w->khash.cap - w->khash.len) / 8;
	if (ul < uroom)
		uroom = ul;
	uroom += w->nu;
	kroom += w->nk;
	r->u_stop = uroom > UINT32_MAX ? UINT32_MAX : (uint32_t)uroom;
	r->k_stop = kroom > UINT32_MAX ? UINT32_MAX : (uint32_t)kroom;
	r->ko = w->ko.p;
	r->kv = w->kv.p;
	r->vo = w->vo.p;
	r->vu = w->vu.p;
	r->tm = w->tm.p;
	r->df = w->df.p;
	r->ti = w->ti.p;
	r->di = w->di.p;
	r->lt = r->ld = 0;
	r->lti = r->ldi = -1;
	r->t_over = w->td.over;
	r->d_over = w->dd.over;
	r->lkp = w->lkp;
	r->lvp = w->lvp;
	r->t_thr = col_thr(w->td.n, w->td.over, w->nu);
	r->d_thr = col_thr(w->dd.n, w->dd.over, w->nu);
	r->t_hi = w->td.n == 1 ? 0 : 9;
	r->d_hi = w->dd.n == 1 ? 0 : 9;
	bw_run_regrow(r);
	return 0;
}
