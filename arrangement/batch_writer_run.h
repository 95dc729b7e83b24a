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
	uint32_t nk, nv, nu, ulim;
	uint64_t size_ub, max_body;
	uint64_t gval, gkey;    /* the bound's growth for a val, a new key */
	uint8_t *kb, *vb, *kh;  /* kb, vb, khash: bases, lengths, capacities */
	size_t kb_len, vb_len, kh_len, kb_cap, vb_cap, kh_cap;
	bool hash;              /* the writer hashes keys for the filter */
	uint8_t *ko, *kv, *vo, *vu, *tm, *df, *ti, *di; /* bases */
	/* the last time and diff found in the dictionaries, and entries */
	uint64_t lt, ld;
	int lti, ldi;
	bool t_over, d_over;
	/* col_grow per update of the times and the diffs: 8 below nu
	 * t_thr (d_thr), t_hi (d_hi) from there (the dictionaries do not
	 * change in the mode, and col_dict only turns on as nu grows) */
	uint64_t t_thr, d_thr, t_hi, d_hi;
	uint64_t added, keys;   /* updates and keys staged in the mode */
	uint64_t lkp, lvp;      /* the writer's lkp and lvp, at the end */
} bw_run;

/* Starts the mode on w for keys of kw and vals of vw bytes: 0, or 1 when
 * the staged chunk is not in a form the mode keeps (empty, not fixed
 * width, several updates per val).  batch_writer_run.c. */
int bw_run_begin(batch_writer *w, uint32_t kw, uint32_t vw, bw_run *r);
/* Writes the mode's counts back to the writer; r is spent. */
void bw_run_end(bw_run *r);

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

	if (diff == 0 || (!newkey && r->nv == r->nk) || r->nu >= r->ulim)
		return 1;
	if (r->t_over)
		ti = -1;
	else if (time == r->lt && r->lti >= 0)
		ti = r->lti;
	else if ((ti = dict_find(&w->td, time)) < 0)
		return 1;
	if (r->d_over)
		di = -1;
	else if ((uint64_t)diff == r->ld && r->ldi >= 0)
		di = r->ldi;
	else if ((di = dict_find(&w->dd, (uint64_t)diff)) < 0)
		return 1;
	uint64_t g = r->gval + (r->nu >= r->t_thr ? r->t_hi : 8) +
	             (r->nu >= r->d_thr ? r->d_hi : 8);
	if (newkey)
		g += r->gkey;
	if (r->size_ub + g > r->max_body || r->vb_len + vw > r->vb_cap ||
	    (newkey && (r->kb_len + kw > r->kb_cap ||
	                (r->hash && r->kh_len + 8 > r->kh_cap))))
		return 1;
	r->lt = time, r->lti = ti;
	r->ld = (uint64_t)diff, r->ldi = di;
	if (newkey) {
		memcpy(r->kb + r->kb_len, key, kw);
		r->kb_len += kw;
		put_u32(r->ko + 4 * (size_t)(r->nk + 1), (uint32_t)r->kb_len);
		put_u32(r->kv + 4 * (size_t)(r->nk + 1), r->nv);
		r->nk++;
		r->lkp = kp;
		if (r->hash) {
			put_u64(r->kh + r->kh_len, filter_hash(key, kw));
			r->kh_len += 8;
		}
		r->keys++;
	}
	memcpy(r->vb + r->vb_len, val, vw);
	r->vb_len += vw;
	put_u32(r->vo + 4 * (size_t)(r->nv + 1), (uint32_t)r->vb_len);
	put_u32(r->vu + 4 * (size_t)(r->nv + 1), r->nu);
	r->nv++;
	r->lvp = vp;
	put_u32(r->kv + 4 * (size_t)r->nk, r->nv);
	put_u64(r->tm + 8 * (size_t)r->nu, time);
	put_u64(r->df + 8 * (size_t)r->nu, (uint64_t)diff);
	r->ti[r->nu] = ti >= 0 ? (uint8_t)ti : 0;
	r->di[r->nu] = di >= 0 ? (uint8_t)di : 0;
	r->nu++;
	put_u32(r->vu + 4 * (size_t)r->nv, r->nu);
	r->size_ub += g;
	r->added++;
	return 0;
}

#endif /* AH_ARRANGEMENT_BATCH_WRITER_RUN_H */
