/*
 * arrangement/batch_writer_run.h - the batch writer's run mode, for the
 * merge's run loop (merge_run.c) and the writer's files only: a run of
 * single-update (key, val)s of one key width and one val width, pushed
 * in order with newkey told, staged through pointers and counts held in
 * a bw_run (the caller's local, so that they stay in registers) instead
 * of the writer's struct.
 *
 * bw_run_push stages exactly what batch_writer_push_next would (the same
 * bytes, the same size bound per update, the same dictionary indexes,
 * the same key hashes), and only in push_next's common case: every
 * column keeps its form (fixed-width keys and vals, one update per val,
 * one val per key unless a key already has two), the dictionaries hold
 * the time and diff, the bound leaves room, the staging buffers have
 * room.  Anything else is 1, with nothing staged: the caller ends the
 * mode (bw_run_end), pushes through batch_writer_push_next and may begin
 * again.  Between bw_run_begin and bw_run_end nothing else may touch the
 * writer.
 */
#ifndef AH_ARRANGEMENT_BATCH_WRITER_RUN_H
#define AH_ARRANGEMENT_BATCH_WRITER_RUN_H

#include "arrangement/batch_writer_int.h"
#include "arrangement/filter.h"

typedef struct bw_run {
	batch_writer *w;
	uint32_t nk, nv, nu;
	uint32_t nk0, nu0;      /* at bw_run_begin */
	/* the staging's room, as counts: a push needs nu < u_stop (the
	 * val bytes' capacity and ulim) and, for a new key, nk < k_stop
	 * (the key bytes' and key hashes' capacities).  Exactly the byte
	 * checks push_staged makes, since in the mode every push adds vw
	 * val bytes and every new key kw key bytes and 8 hash bytes. */
	uint32_t u_stop, k_stop;
	uint64_t size_ub, max_body;
	uint64_t g, gkey;       /* the bound's growth for a val, a new key */
	uint64_t g_next;        /* nu at which g next changes */
	uint8_t *kb, *vb, *kh;  /* kb, vb, khash: bases and lengths */
	size_t kb_len, vb_len, kh_len;
	bool hash;              /* the writer hashes keys for the filter */
	uint8_t *ko, *kv, *vo, *vu, *tm, *df, *ti, *di; /* bases */
	/* the last time and diff found in the dictionaries, and entries */
	uint64_t lt, ld;
	int lti, ldi;
	bool t_over, d_over;
	/* col_grow per update of the times and the diffs: 8 below nu
	 * t_thr (d_thr), t_hi (d_hi) from there (the dictionaries do not
	 * change in the mode, and col_dict only turns on as nu grows);
	 * gval the rest of a val's growth */
	uint64_t t_thr, d_thr, t_hi, d_hi, gval;
	uint64_t lkp, lvp;      /* the writer's lkp and lvp, at the end */
} bw_run;

/* g and g_next for r->nu (at begin, and when nu reaches g_next). */
static inline void bw_run_regrow(bw_run *r)
{
	bool t = r->nu >= r->t_thr, d = r->nu >= r->d_thr;
	uint64_t tn = t ? UINT64_MAX : r->t_thr, dn = d ? UINT64_MAX : r->d_thr;

	r->g = r->gval + (t ? r->t_hi : 8) + (d ? r->d_hi : 8);
	r->g_next = tn < dn ? tn : dn;
}

/* Starts the mode on w for keys of kw and vals of vw bytes: 0, or 1 when
 * the staged chunk is not in a form the mode keeps (empty, not fixed
 * width, several updates per val).  batch_writer_run.c. */
int bw_run_begin(batch_writer *w, uint32_t kw, uint32_t vw, bw_run *r);
/* Writes the mode's counts back to the writer; r is spent.  Inline, as
 * bw_run_push is, so that a caller's bw_run never has its address taken
 * by a call: the compiler then knows that the staging stores (through
 * byte pointers, which may alias anything else) leave it alone, and
 * keeps its fields in registers instead of reloading them after each
 * store.  (bw_run_begin fills a separate bw_run the caller copies.) */
static inline __attribute__((always_inline)) void bw_run_end(const bw_run *r)
{
	batch_writer *w = r->w;

	w->kb.len = r->kb_len;
	w->vb.len = r->vb_len;
	w->khash.len = r->kh_len;
	w->nk = r->nk;
	w->nv = r->nv;
	w->nu = r->nu;
	w->ko.len = w->kv.len = 4 * ((size_t)r->nk + 1);
	w->vo.len = w->vu.len = 4 * ((size_t)r->nv + 1);
	w->tm.len = w->df.len = 8 * (size_t)r->nu;
	w->ti.len = w->di.len = r->nu;
	w->size_ub = r->size_ub;
	w->updates += r->nu - r->nu0;
	w->vals += r->nu - r->nu0;
	w->keys += r->nk - r->nk0;
	w->lkp = r->lkp;
	w->lvp = r->lvp;
}

/* Stages one update (see above; kw and vw: the widths the mode began
 * with, passed so that they fold to constants): 0, or 1 with nothing
 * staged. */
static inline __attribute__((always_inline)) int
bw_run_push(bw_run *r, uint32_t kw, uint32_t vw, const uint8_t *key,
            uint64_t kp, const uint8_t *val, uint64_t vp, bool newkey,
            uint64_t time, int64_t diff)
{
	batch_writer *w = r->w;
	int ti, di;

	if (diff == 0 || (!newkey && r->nv == r->nk) || r->nu >= r->u_stop ||
	    (newkey && r->nk >= r->k_stop))
		return 1;
	/* an index of a full column is staged as 0, as push_staged does */
	if (r->t_over)
		ti = 0;
	else if (time == r->lt && r->lti >= 0)
		ti = r->lti;
	else if ((ti = dict_find(&w->td, time)) < 0)
		return 1;
	else
		r->lt = time, r->lti = ti;
	if (r->d_over)
		di = 0;
	else if ((uint64_t)diff == r->ld && r->ldi >= 0)
		di = r->ldi;
	else if ((di = dict_find(&w->dd, (uint64_t)diff)) < 0)
		return 1;
	else
		r->ld = (uint64_t)diff, r->ldi = di;
	if (r->nu >= r->g_next)
		bw_run_regrow(r);
	uint64_t g = newkey ? r->g + r->gkey : r->g;
	if (r->size_ub + g > r->max_body)
		return 1;
	if (newkey) {
		/* a zero-width column may have no buffer: no memcpy from or
		 * to NULL, even of 0 bytes (C11 7.24.1) */
		if (kw)
			memcpy(r->kb + r->kb_len, key, kw);
		r->kb_len += kw;
		put_u32(r->ko + 4 * (size_t)(r->nk + 1), (uint32_t)r->kb_len);
		r->nk++;
		r->lkp = kp;
		if (r->hash) {
			put_u64(r->kh + r->kh_len, filter_hash(key, kw));
			r->kh_len += 8;
		}
	}
	if (vw)
		memcpy(r->vb + r->vb_len, val, vw);
	r->vb_len += vw;
	put_u32(r->vo + 4 * (size_t)(r->nv + 1), (uint32_t)r->vb_len);
	r->nv++;
	r->lvp = vp;
	/* key_vals[nk] and val_upds[nv]: the ends of the last key's vals
	 * and the last val's updates (push_staged also stores them before
	 * the counts move; the same slots, overwritten) */
	put_u32(r->kv + 4 * (size_t)r->nk, r->nv);
	put_u64(r->tm + 8 * (size_t)r->nu, time);
	put_u64(r->df + 8 * (size_t)r->nu, (uint64_t)diff);
	r->ti[r->nu] = (uint8_t)ti;
	r->di[r->nu] = (uint8_t)di;
	r->nu++;
	put_u32(r->vu + 4 * (size_t)r->nv, r->nu);
	r->size_ub += g;
	return 0;
}

#endif /* AH_ARRANGEMENT_BATCH_WRITER_RUN_H */
