/*
 * arrangement/builder.c - the batch builder: unsorted updates in, one
 * sorted, consolidated batch out, in bounded pool memory.
 *
 * A run is an array of fixed-size entries (run_sort.h: 48 bytes, cached
 * big-endian 8-byte key and val prefixes, a pointer to the key (the val
 * follows it), lengths, time, diff) plus the key and val bytes packed into
 * pool blocks.  The run's pool bytes (entry array capacity, counted twice
 * while it grows since a realloc may copy, plus its blocks) never exceed
 * the run budget, except that a run always accepts its first update.  A
 * push whose updates all fit grows the array once (reserve), not by
 * doublings.  A full run is sorted in place (run_sort: radix on the key
 * prefix, comparisons for what the prefix leaves tied), then consolidated
 * and written in one pass: each (key, val)'s equal times summed in 128
 * bits (so that the result and AH_ELIMIT do not depend on the sort's order
 * of equal entries), zeros dropped, its surviving times pushed as one
 * batch_writer_push_run (same_key when the key is the last one's); the
 * output is byte for byte what pushing each update alone writes.  The
 * temporary batch written, the run's memory is freed.  At finish a lone run is
 * written straight as the output; several runs are merged (merge.h, since 0:
 * the builder never advances a time) at most BUILDER_FANIN at a time, and
 * the temporary batches dropped.
 *
 * Pool peak: run budget + the writer's staging (one chunk's columns) during
 * a spill; the merger's per-group buffer + staging at finish.
 * It never checks frontiers (txn/ does) and never touches other batches.
 *
 * It must never keep a run in memory past the budget, nor write a batch
 * that is not sorted and consolidated (B1, B2).
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/builder.h"
#include "arrangement/merge.h"
#include "arrangement/run_sort.h"
#include "arrangement/batch_writer_run.h"

#define BUILDER_DEFAULT_BUDGET ((size_t)64 << 20)
#define BUILDER_FANIN 64
#define BLOCK_MAX ((size_t)1 << 20)
#define BLOCK_MIN ((size_t)4096)
#define TD_MAX 64 /* times of one (key, val) pushed as one run */

typedef run_entry entry;

typedef struct block {
	struct block *next;
	size_t size; /* whole allocation, header included */
} block;

struct builder {
	heap_txn *t;
	pool *p;
	size_t budget, block_size;
	entry *ents;
	size_t nents, cap;
	block *blocks;
	uint8_t *pos;      /* free space in blocks (the head) */
	size_t left;
	uint64_t run_bytes; /* entry array + blocks */
	uint64_t bytes, peak;
	uint64_t *runs;    /* ids of the temporary batches (malloc) */
	size_t nruns, runs_cap;
	int err;           /* sticky: a failed builder refuses further work */
	bool run_on;       /* the writer's run mode (write_run); tests turn it off */
	uint64_t *run_pushes; /* counts the updates staged in it, or NULL */
};

static const batch_desc tmp_desc = { { 0 }, { UINT64_MAX }, { 0 } };

static void account(builder *b, int64_t delta)
{
	b->bytes += (uint64_t)delta;
	if (b->bytes > b->peak)
		b->peak = b->bytes;
}

/* ------------------------------------------------------------ run memory */

static void free_run(builder *b)
{
	while (b->blocks) {
		block *nx = b->blocks->next;
		size_t sz = b->blocks->size;
		pool_free(b->p, b->blocks, sz);
		account(b, -(int64_t)sz);
		b->blocks = nx;
	}
	if (b->ents) {
		pool_free(b->p, b->ents, b->cap * sizeof *b->ents);
		account(b, -(int64_t)(b->cap * sizeof *b->ents));
	}
	b->ents = NULL;
	b->nents = b->cap = 0;
	b->pos = NULL;
	b->left = 0;
	b->run_bytes = 0;
}

/* Makes room for one more entry (want: or for that many, if more than a
 * doubling); 1 = done, 0 = the run is full. */
static int grow_entries(builder *b, size_t want)
{
	size_t es = sizeof(entry), ncap = b->cap ? b->cap * 2 : 256;
	uint64_t blocks = b->run_bytes - b->cap * es;
	entry *ne;

	if (want > ncap)
		ncap = want;
	/* While growing, the old and the new array may both be live. */
	if (blocks + (b->cap + ncap) * es > b->budget) {
		uint64_t room = b->budget > blocks + b->cap * es ?
			b->budget - blocks - b->cap * es : 0;
		ncap = room / es;
		if (ncap <= b->cap) {
			if (b->nents)
				return 0;
			ncap = b->cap + 1;
		}
	}
	ne = b->ents ? pool_realloc(b->p, b->ents, b->cap * es, ncap * es) :
		pool_malloc(b->p, ncap * es);
	if (!ne)
		return AH_ENOMEM;
	account(b, (int64_t)((ncap - b->cap) * es));
	b->run_bytes += (ncap - b->cap) * es;
	b->ents = ne;
	b->cap = ncap;
	return 1;
}

/* When all of ups[0..n) fit in this run, as far as their lengths tell,
 * grows the entry array once to hold them, instead of doubling it (and
 * copying) along the way; else leaves the growth to push_one. */
static int reserve(builder *b, const ah_update *ups, size_t n)
{
	size_t es = sizeof(entry), want = b->nents + n;
	uint64_t bytes = b->block_size, blocks = b->run_bytes - b->cap * es;

	if (n <= b->cap - b->nents)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (ups[i].key_len > UINT32_MAX || ups[i].val_len > UINT32_MAX)
			return 0; /* push_one refuses it */
		bytes += ups[i].key_len + ups[i].val_len;
		if (bytes > b->budget)
			return 0;
	}
	bytes = bytes > b->left ? bytes - b->left : 0;
	if (blocks + bytes + (b->cap + want) * (uint64_t)es > b->budget)
		return 0;
	int r = grow_entries(b, want);
	return r < 0 ? r : 0;
}

/* Makes room for need bytes in the head block; 1 = done, 0 = run full. */
static int grow_bytes(builder *b, size_t need)
{
	size_t hdr = sizeof(block), sz = b->block_size;
	block *bl;

	if (need > sz - hdr)
		sz = need + hdr;
	if (b->run_bytes + sz > b->budget && b->nents)
		return 0;
	bl = pool_malloc(b->p, sz);
	if (!bl)
		return AH_ENOMEM;
	account(b, (int64_t)sz);
	b->run_bytes += sz;
	bl->size = sz;
	bl->next = b->blocks;
	b->blocks = bl;
	b->pos = (uint8_t *)bl + hdr;
	b->left = sz - hdr;
	return 1;
}

/* -------------------------------------------------------------- writing */

/* Pushes td[0..nt) for g's (key, val) one update at a time. */
static int push_each(batch_writer *w, const entry *g, const time_diff *td,
                     size_t nt)
{
	int rc = 0;

	for (size_t i = 0; i < nt && rc == 0; i++)
		rc = batch_writer_push(w, g->key, g->klen, g->key + g->klen,
		                       g->vlen, td[i].time, td[i].diff);
	return rc;
}

/* Pushes one (key, val)'s updates g[0..m) (sorted by time), equal times
 * summed in 128 bits and zeros dropped, as one run; *pushed says whether
 * any survived.  Past TD_MAX surviving times they go one at a time (the
 * same bytes: batch_writer_push_run is batch_writer_push repeated). */
static int push_kv(batch_writer *w, const entry *g, size_t m, bool same_key,
                   bool *pushed)
{
	time_diff td[TD_MAX];
	size_t nt = 0;
	bool single = false;
	int rc;

	if (m == 1) { /* the common case: nothing to sum, one pair */
		*pushed = g->diff != 0;
		return *pushed ? batch_writer_push_one(w, g->key, g->klen, g->pfx,
		                                       g->key + g->klen, g->vlen,
		                                       g->vpfx, same_key, g->time,
		                                       g->diff) : 0;
	}
	for (size_t a = 0, c; m > 1 && a < m; a = c) {
		diff_sum s = 0;
		for (c = a; c < m && g[c].time == g[a].time; c++)
			s += g[c].diff;
		if (!diff_fits(s))
			return AH_ELIMIT;
		if (s == 0)
			continue;
		if (nt == TD_MAX) {
			if ((rc = push_each(w, g, td, nt)))
				return rc;
			nt = 0;
			single = true;
		}
		td[nt++] = (time_diff){ g[a].time, (int64_t)s };
	}
	*pushed = single || nt > 0;
	if (single)
		return push_each(w, g, td, nt);
	return nt ? batch_writer_push_run(w, g->key, g->klen, g->key + g->klen,
	                                  g->vlen, same_key, td, nt) : 0;
}

#define WRITE_AHEAD 16

/* The writer's run mode over e[i..n) for keys of kw and vals of vw bytes
 * (always inline, once per common width pair, so that the widths fold to
 * constants): entries that are a (key, val) alone (nothing to consolidate)
 * of those widths, staged exactly as push_kv's batch_writer_push_one
 * would, while the mode takes them.  *last is the entry the writer staged
 * last; each one pushed is checked strictly after it here (B1, as
 * push_one's order_after_last checks; the key compare skipped when kept,
 * as push_one skips it on same_key).  Returns where it stopped. */
static inline __attribute__((always_inline)) size_t
run_mode(builder *b, bw_run *r, const entry *e, size_t i, size_t n,
         uint32_t kw, uint32_t vw, bool *kept, const entry **last)
{
	const entry *l = *last;

	while (i < n) {
		const entry *g = &e[i];
		bool one = i + 1 == n || !run_key_eq(g, &e[i + 1]) ||
		           !run_val_eq(g, &e[i + 1]);
		if (!one || g->klen != kw || g->vlen != vw)
			break;
		if (i + WRITE_AHEAD < n) {
			const entry *f = &e[i + WRITE_AHEAD];
			__builtin_prefetch(f->key);
			__builtin_prefetch(f->key + f->klen + f->vlen);
		}
		bool pushed = false;
		if (g->diff != 0) {
			int kc = 0, vc;
			if (!*kept) {
				kc = g->pfx != l->pfx ? (g->pfx > l->pfx ? 1 : -1) :
				     kw > 8 ? memcmp(g->key + 8, l->key + 8, kw - 8) : 0;
				if (kc <= 0)
					break; /* push_one's order check and error */
			}
			if (kc == 0) {
				vc = g->vpfx != l->vpfx ? (g->vpfx > l->vpfx ? 1 : -1) :
				     vw > 8 ? memcmp(g->key + kw + 8, l->key + kw + 8,
				                     vw - 8) : 0;
				if (vc <= 0)
					break;
			}
			if (bw_run_push(r, kw, vw, g->key, g->pfx, g->key + kw,
			                g->vpfx, kc != 0, g->time, g->diff))
				break;
			pushed = true;
			l = g;
			if (b->run_pushes)
				++*b->run_pushes;
		}
		i++;
		*kept = (pushed || *kept) && i < n && run_key_eq(g, &e[i]);
	}
	*last = l;
	return i;
}

/* Consolidates the sorted run into w, one (key, val) at a time; kept says
 * that e[i]'s key is the last one pushed (the writer then skips its key
 * compare).  Between pushes through push_kv, the writer's run mode takes
 * what it can (run_mode). */
static int write_run(builder *b, batch_writer *w)
{
	const entry *e = b->ents, *last = NULL;
	size_t n = b->nents;
	bool kept = false, pushed;

	for (size_t i = 0, j; i < n; i = j) {
		int rc;
		/* The sorted entries point at their bytes in arrival order, so
		 * each key and val is a cache miss: asked for WRITE_AHEAD
		 * entries early (a prefetch never faults, wherever it points). */
		if (i + WRITE_AHEAD < n) {
			const entry *f = &e[i + WRITE_AHEAD];
			__builtin_prefetch(f->key);
			__builtin_prefetch(f->key + f->klen + f->vlen);
		}
		for (j = i + 1; j < n && run_key_eq(&e[i], &e[j]) &&
		                run_val_eq(&e[i], &e[j]); j++)
			;
		if ((rc = push_kv(w, &e[i], j - i, kept, &pushed)))
			return rc;
		if (pushed)
			last = &e[i];
		kept = (pushed || kept) && j < n && run_key_eq(&e[i], &e[j]);
		bw_run fresh, r;
		if (!b->run_on || !last || j == n ||
		    bw_run_begin(w, last->klen, last->vlen, &fresh))
			continue;
		r = fresh; /* a copy whose address no call sees (batch_writer_run.h) */
		if (last->klen == 8 && last->vlen == 16)
			j = run_mode(b, &r, e, j, n, 8, 16, &kept, &last);
		else
			j = run_mode(b, &r, e, j, n, last->klen, last->vlen, &kept,
			             &last);
		bw_run_end(&r); /* e[j], if any, next through push_kv */
	}
	return 0;
}

/* Sorts and writes the current run as one batch with Description d. */
static int write_batch(builder *b, const batch_desc *d, uint64_t *id)
{
	batch_writer *w = NULL;
	int rc;

	*id = 0;
	run_sort(b->ents, b->nents);
	rc = batch_writer_new(b->t, b->p, &w);
	if (rc)
		return rc;
	rc = write_run(b, w);
	if (rc) {
		batch_writer_free(w);
		return rc;
	}
	return batch_writer_finish(w, d, id);
}

static int add_run(builder *b, uint64_t id)
{
	if (b->nruns == b->runs_cap) {
		size_t ncap = b->runs_cap ? b->runs_cap * 2 : 16;
		uint64_t *nr = realloc(b->runs, ncap * sizeof *nr);
		if (!nr)
			return AH_ENOMEM;
		b->runs = nr;
		b->runs_cap = ncap;
	}
	b->runs[b->nruns++] = id;
	return 0;
}

static int spill(builder *b)
{
	uint64_t id = 0;
	int rc = write_batch(b, &tmp_desc, &id);
	if (rc == 0 && id)
		rc = add_run(b, id);
	free_run(b);
	return rc;
}

/* Merges runs ids[0..n) into one batch with Description d and drops them. */
static int merge_runs(builder *b, const uint64_t *ids, size_t n,
                      const batch_desc *d, uint64_t *id)
{
	batch **in = calloc(n, sizeof *in);
	merger *m = NULL;
	bool done = false;
	uint64_t spent;
	int rc = 0;

	*id = 0;
	if (!in)
		return AH_ENOMEM;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = batch_load(b->t, ids[i], &in[i]);
	if (rc == 0)
		rc = merger_open(b->t, b->p, in, n, frontier_of(0), NULL, &m);
	if (rc == 0) {
		merger_set_runs(m, b->run_on);
		rc = merger_step(m, 0, &done, &spent);
	}
	if (rc == 0)
		rc = merger_finish(m, d, id);
	if (m) {
		uint64_t mp = b->bytes + merger_peak_bytes(m);
		if (mp > b->peak)
			b->peak = mp;
	}
	merger_free(m);
	for (size_t i = 0; i < n; i++)
		batch_free(in[i]);
	free(in);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = batch_drop(b->t, ids[i]);
	return rc;
}

int builder_new(heap_txn *t, pool *p, size_t run_budget, builder **out)
{
	builder *b;

	if (!t || !p || !out)
		return AH_EINVAL;
	b = calloc(1, sizeof *b);
	if (!b)
		return AH_ENOMEM;
	b->t = t;
	b->p = p;
	b->budget = run_budget ? run_budget : BUILDER_DEFAULT_BUDGET;
	b->run_on = true;
	b->block_size = b->budget / 64;
	if (b->block_size > BLOCK_MAX)
		b->block_size = BLOCK_MAX;
	if (b->block_size < BLOCK_MIN)
		b->block_size = BLOCK_MIN;
	*out = b;
	return 0;
}

/* memcpy, with the short fields of most updates (up to 16 bytes) copied
 * inline by two overlapping moves. */
static inline void copy_field(uint8_t *dst, const uint8_t *src, size_t n)
{
	uint64_t x, y;
	uint32_t p, q;

	if (n >= 8 && n <= 16) {
		memcpy(&x, src, 8);
		memcpy(&y, src + n - 8, 8);
		memcpy(dst, &x, 8);
		memcpy(dst + n - 8, &y, 8);
	} else if (n >= 4 && n < 8) {
		memcpy(&p, src, 4);
		memcpy(&q, src + n - 4, 4);
		memcpy(dst, &p, 4);
		memcpy(dst + n - 4, &q, 4);
	} else if (n) {
		memcpy(dst, src, n);
	}
}

static int push_one(builder *b, const ah_update *u)
{
	size_t need = u->key_len + u->val_len;
	entry *e;
	int r;

	if ((u->key_len && !u->key) || (u->val_len && !u->val))
		return AH_EINVAL;
	if (u->key_len > UINT32_MAX || u->val_len > UINT32_MAX)
		return AH_ELIMIT;
	for (;;) {
		r = b->nents < b->cap ? 1 : grow_entries(b, 0);
		if (r == 1 && need > b->left)
			r = grow_bytes(b, need);
		if (r < 0)
			return r;
		if (r == 1)
			break;
		r = spill(b);
		if (r)
			return r;
	}
	e = &b->ents[b->nents++];
	/* No block yet only when every field so far was empty. */
	e->key = b->pos ? b->pos : (const uint8_t *)"";
	e->klen = (uint32_t)u->key_len;
	e->vlen = (uint32_t)u->val_len;
	if (need) {
		copy_field(b->pos, u->key, u->key_len);
		copy_field(b->pos + u->key_len, u->val, u->val_len);
		b->pos += need;
		b->left -= need;
	}
	e->pfx = bytes_prefix8(e->key, e->klen);
	e->vpfx = bytes_prefix8(e->key + e->klen, e->vlen);
	e->time = u->time;
	e->diff = u->diff;
	return 0;
}

int builder_push(builder *b, const ah_update *ups, size_t n)
{
	int rc = 0;

	if (!b || (n && !ups))
		return AH_EINVAL;
	if (b->err)
		return b->err;
	rc = reserve(b, ups, n);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = push_one(b, &ups[i]);
	if (rc && rc != AH_EINVAL)
		b->err = rc;
	return rc;
}

int builder_finish(builder *b, const batch_desc *d, uint64_t *id)
{
	int rc = 0;

	if (!b || !d || !id) {
		builder_free(b);
		return AH_EINVAL;
	}
	*id = 0;
	rc = b->err;
	if (rc == 0 && b->nruns == 0) {
		rc = write_batch(b, d, id);
		goto out;
	}
	if (rc == 0 && b->nents)
		rc = spill(b);
	free_run(b);
	/* Bound the merge's fan-in: each group costs one compare per input. */
	while (rc == 0 && b->nruns > BUILDER_FANIN) {
		uint64_t mid;
		rc = merge_runs(b, b->runs, BUILDER_FANIN, &tmp_desc, &mid);
		memmove(b->runs, b->runs + BUILDER_FANIN,
		        (b->nruns - BUILDER_FANIN) * sizeof *b->runs);
		b->nruns -= BUILDER_FANIN;
		if (rc == 0 && mid)
			rc = add_run(b, mid);
	}
	if (rc == 0 && b->nruns == 1) {
		rc = batch_set_desc(b->t, b->runs[0], d);
		if (rc == 0)
			*id = b->runs[0];
	} else if (rc == 0 && b->nruns > 1) {
		rc = merge_runs(b, b->runs, b->nruns, d, id);
	}
out:
	builder_free(b);
	return rc;
}

void builder_free(builder *b)
{
	if (!b)
		return;
	free_run(b);
	free(b->runs);
	free(b);
}

uint64_t builder_peak_bytes(const builder *b)
{
	return b ? b->peak : 0;
}

void builder_set_runs(builder *b, bool on, uint64_t *pushes)
{
	if (b) {
		b->run_on = on;
		b->run_pushes = pushes;
	}
}
