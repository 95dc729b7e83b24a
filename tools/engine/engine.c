/*
 * tools/engine/engine.c - the operators of engine.h over the public API.
 *
 * One step of one node:
 *   1. read: the delta of each input (its chain batches that overlap
 *      [lower, upper), walked with batch cursors, times kept in [lower,
 *      upper)), sorted by (key, val, time) and consolidated; then, per key
 *      of a delta, the state the operator needs (join: the other input;
 *      reduce: the input and the output), through ordinary cursors that
 *      only seek forward, since the deltas are sorted by key;
 *   2. compute: the callbacks emit into the step's output set (an arena:
 *      bytes never move, so every pointer stays valid for the step);
 *   3. append: the output set as one batch [lower, upper) (ah_append, or
 *      the builder in pieces for a large one; ah_advance when empty).
 * A node's cursors are closed before it appends: an append is a mutation
 * of the write txn, which detaches cursors and may move map pages.
 *
 * It must never append an output before reading everything it derives
 * from, never read an input at a time outside [since, upper), and never
 * keep a pointer into the map across its own append.
 */
#include "tools/engine/engine.h"
#include "tools/engine/engine_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- memory */

/* An arena of blocks that never move. */
typedef struct block {
	struct block *next;
	size_t used, cap;
	uint8_t data[];
} block;

typedef struct arena {
	block *head;
} arena;

static void *arena_alloc(arena *a, size_t n)
{
	block *b = a->head;

	if (!b || b->cap - b->used < n) {
		size_t cap = n > (1u << 20) ? n : (1u << 20);
		if (!(b = malloc(sizeof *b + cap)))
			return NULL;
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += (n + 7) & ~(size_t)7;
	if (b->used > b->cap)
		b->used = b->cap;
	return p;
}

/* Forgets everything but the newest block, which is kept for reuse. */
static void arena_reset(arena *a)
{
	if (!a->head)
		return;
	for (block *b = a->head->next, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	a->head->next = NULL;
	a->head->used = 0;
}

static void arena_free(arena *a)
{
	for (block *b = a->head, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	a->head = NULL;
}

/* An update whose bytes live in an arena or in the map. */
typedef struct eu {
	const uint8_t *k, *v;
	uint32_t kl, vl;
	uint64_t t;
	int64_t d;
} eu;

typedef struct uset {
	eu *a;
	size_t n, cap;
	arena ar;
} uset;

static void uset_free(uset *s)
{
	free(s->a);
	arena_free(&s->ar);
	memset(s, 0, sizeof *s);
}

static int uset_push(uset *s, const void *k, size_t kl, const void *v, size_t vl, uint64_t t,
                     int64_t d, int copy)
{
	if (kl > UINT32_MAX || vl > UINT32_MAX)
		return AH_ELIMIT;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 1024;
		eu *a = realloc(s->a, cap * sizeof *a);
		if (!a)
			return AH_ENOMEM;
		s->a = a;
		s->cap = cap;
	}
	if (copy) {
		uint8_t *p = arena_alloc(&s->ar, kl + vl ? kl + vl : 1);
		if (!p)
			return AH_ENOMEM;
		if (kl)
			memcpy(p, k, kl);
		if (vl)
			memcpy(p + kl, v, vl);
		k = p;
		v = p + kl;
	}
	s->a[s->n++] = (eu){ k, v, (uint32_t)kl, (uint32_t)vl, t, d };
	return 0;
}

static int bcmp_(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	size_t n = al < bl ? al : bl;
	int c = n ? memcmp(a, b, n) : 0;

	return c ? c : (al > bl) - (al < bl);
}

static int eu_cmp(const void *x, const void *y)
{
	const eu *a = x, *b = y;
	int c = bcmp_(a->k, a->kl, b->k, b->kl);

	if (!c)
		c = bcmp_(a->v, a->vl, b->v, b->vl);
	if (!c)
		c = (a->t > b->t) - (a->t < b->t);
	return c;
}

/* Sorts by (key, val, time) and sums equal ones, dropping zeros.
 * AH_ELIMIT when a sum leaves int64. */
static int uset_consolidate(uset *s)
{
	size_t w = 0;

	if (s->n > 1)
		qsort(s->a, s->n, sizeof *s->a, eu_cmp);
	for (size_t r = 0; r < s->n;) {
		__int128 sum = 0;
		size_t e = r;
		while (e < s->n && eu_cmp(&s->a[r], &s->a[e]) == 0)
			sum += s->a[e++].d;
		if (sum > INT64_MAX || sum < INT64_MIN)
			return AH_ELIMIT;
		if (sum) {
			s->a[w] = s->a[r];
			s->a[w++].d = (int64_t)sum;
		}
		r = e;
	}
	s->n = w;
	return 0;
}

/* -------------------------------------------------------------- graph */

enum { OP_ARRANGE, OP_REDUCE, OP_JOIN };

typedef struct node {
	int op;
	char out[AH_NAME_MAX + 1];
	char in[2][AH_NAME_MAX + 1];
	void *fn;
	void *user;
} node;

struct eg_graph {
	node *n;
	size_t nn;
	eg_stats st;
	char err[512];
};

struct eg_out {
	eg_graph *g;
	const node *nd;
	uset *out;
	int rc;
	/* what eg_emit stamps: */
	uint64_t t;
	int64_t d;
	/* reduce: the key and the vals emitted for it */
	const void *key;
	size_t klen;
	uset *vals;
};

int eg__fail(eg_graph *g, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g->err, sizeof g->err, fmt, ap);
	va_end(ap);
	return rc;
}

int eg_graph_new(eg_graph **out)
{
	if (!out)
		return AH_EINVAL;
	if (!(*out = calloc(1, sizeof **out)))
		return AH_ENOMEM;
	return 0;
}

void eg_graph_free(eg_graph *g)
{
	if (g) {
		free(g->n);
		free(g);
	}
}

const char *eg_errmsg(const eg_graph *g)
{
	return g ? g->err : "";
}

void eg_stats_get(const eg_graph *g, eg_stats *st)
{
	if (g && st)
		*st = g->st;
}

static int name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n > 0 && n <= AH_NAME_MAX;
}

static int add(eg_graph *g, int op, const char *out, const char *a, const char *b, void *fn,
               void *user)
{
	if (!g || !fn || !name_ok(out) || !name_ok(a) || (op == OP_JOIN && !name_ok(b)))
		return g ? eg__fail(g, AH_EINVAL, "bad node: a name is empty or over %d bytes, or no function",
		                AH_NAME_MAX)
		         : AH_EINVAL;
	for (size_t i = 0; i < g->nn; i++)
		if (!strcmp(g->n[i].out, out))
			return eg__fail(g, AH_EINVAL, "node %s: output already made by another node", out);
	for (size_t i = 0; i < g->nn; i++)
		if (!strcmp(g->n[i].in[0], out) || !strcmp(g->n[i].in[1], out))
			return eg__fail(g, AH_EINVAL,
			                "node %s: an earlier node (%s) reads it: add nodes after their inputs",
			                out, g->n[i].out);
	if (!strcmp(out, a) || (b && !strcmp(out, b)))
		return eg__fail(g, AH_EINVAL, "node %s: reads its own output", out);
	node *n = realloc(g->n, (g->nn + 1) * sizeof *n);
	if (!n)
		return AH_ENOMEM;
	g->n = n;
	n = &g->n[g->nn++];
	memset(n, 0, sizeof *n);
	n->op = op;
	strcpy(n->out, out);
	strcpy(n->in[0], a);
	if (b)
		strcpy(n->in[1], b);
	n->fn = fn;
	n->user = user;
	return 0;
}

int eg_arrange_by(eg_graph *g, const char *out, const char *in, eg_map_fn fn, void *user)
{
	return add(g, OP_ARRANGE, out, in, NULL, (void *)fn, user);
}

int eg_reduce(eg_graph *g, const char *out, const char *in, eg_reduce_fn fn, void *user)
{
	return add(g, OP_REDUCE, out, in, NULL, (void *)fn, user);
}

int eg_join(eg_graph *g, const char *out, const char *a, const char *b, eg_join_fn fn,
            void *user)
{
	return add(g, OP_JOIN, out, a, b, (void *)fn, user);
}

size_t eg_node_count(const eg_graph *g)
{
	return g ? g->nn : 0;
}

const char *eg_node_output(const eg_graph *g, size_t i)
{
	return g && i < g->nn ? g->n[i].out : NULL;
}

static int is_output(const eg_graph *g, const char *name)
{
	for (size_t i = 0; i < g->nn; i++)
		if (!strcmp(g->n[i].out, name))
			return 1;
	return 0;
}

/* The i-th base input, or NULL: walks the inputs in order, skipping
 * outputs and repeats. */
static const char *base_at(const eg_graph *g, size_t want, size_t *count)
{
	size_t n = 0;

	for (size_t i = 0; i < g->nn; i++)
		for (int s = 0; s < (g->n[i].op == OP_JOIN ? 2 : 1); s++) {
			const char *in = g->n[i].in[s];
			int seen = is_output(g, in);
			for (size_t j = 0; j < i && !seen; j++)
				for (int q = 0; q < (g->n[j].op == OP_JOIN ? 2 : 1); q++)
					seen |= !strcmp(g->n[j].in[q], in);
			if (!seen && s == 1 && !strcmp(g->n[i].in[0], in))
				seen = 1;
			if (seen)
				continue;
			if (n++ == want)
				return in;
		}
	if (count)
		*count = n;
	return NULL;
}

size_t eg_base_count(const eg_graph *g)
{
	size_t n = 0;

	if (g)
		base_at(g, SIZE_MAX, &n);
	return n;
}

const char *eg_base_input(const eg_graph *g, size_t i)
{
	return g ? base_at(g, i, NULL) : NULL;
}

int eg_create(eg_graph *g, ah_txn *txn)
{
	if (!g || !txn)
		return AH_EINVAL;
	for (size_t i = 0; i < g->nn; i++) {
		ah_arrangement_info ai;
		int rc = ah_arrangement_info_get(txn, g->n[i].out, &ai);
		if (rc == AH_ENOTFOUND)
			rc = ah_arrangement_create(txn, g->n[i].out);
		if (rc)
			return eg__fail(g, rc, "node %s: cannot create its arrangement: %s", g->n[i].out,
			            ah_txn_errmsg(txn)[0] ? ah_txn_errmsg(txn) : ah_strerror(rc));
	}
	return 0;
}

/* ------------------------------------------------------------ emitting */

int eg_emit(eg_out *o, const void *key, size_t key_len, const void *val, size_t val_len)
{
	int rc;

	if (!o || o->vals || (key_len && !key) || (val_len && !val))
		return AH_EINVAL;
	if ((rc = uset_push(o->out, key, key_len, val, val_len, o->t, o->d, 1)) == 0)
		o->g->st.emitted++;
	return rc;
}

int eg_emit_val(eg_out *o, const void *val, size_t val_len, int64_t count)
{
	if (!o || !o->vals || (val_len && !val))
		return AH_EINVAL;
	return uset_push(o->vals, NULL, 0, val, val_len, 0, count, 1);
}

int eg_fail(eg_out *o, const char *msg)
{
	if (!o)
		return AH_EINVAL;
	eg__fail(o->g, AH_EINVAL, "node %s: %s", o->nd->out, msg ? msg : "failed");
	return AH_EINVAL;
}

/* ------------------------------------------------------------- reading */

typedef struct delta_ctx {
	uint64_t *ids;
	size_t n, cap;
	uint64_t lower, upper;
	int nomem;
} delta_ctx;

static int pick_batch(const ah_batch_info *b, void *user)
{
	delta_ctx *dc = user;

	if (b->partial || b->upper <= dc->lower || b->lower >= dc->upper || b->updates == 0)
		return 0;
	if (dc->n == dc->cap) {
		size_t cap = dc->cap ? 2 * dc->cap : 16;
		uint64_t *ids = realloc(dc->ids, cap * sizeof *ids);
		if (!ids) {
			dc->nomem = 1;
			return 1;
		}
		dc->ids = ids;
		dc->cap = cap;
	}
	dc->ids[dc->n++] = b->id;
	return 0;
}

/* The updates of NAME with times in [lower, upper), copied into *d,
 * sorted and consolidated. */
static int read_delta(eg_graph *g, ah_txn *txn, const char *name, uint64_t lower,
                      uint64_t upper, uset *d)
{
	delta_ctx dc = { .lower = lower, .upper = upper };
	int rc = ah_batch_foreach(txn, name, pick_batch, &dc);

	if (rc < 0 || dc.nomem) {
		free(dc.ids);
		return rc < 0 ? eg__fail(g, rc, "%s: cannot list its batches: %s", name, ah_strerror(rc))
		              : eg__fail(g, AH_ENOMEM, "%s: out of memory", name);
	}
	for (size_t i = 0; i < dc.n && rc == 0; i++) {
		ah_cursor *c = NULL;
		if ((rc = ah_cursor_open_batch(txn, name, dc.ids[i], &c)) != 0)
			break;
		while (rc == 0 && ah_cursor_key_valid(c)) {
			const void *k;
			size_t kl;
			if ((rc = ah_cursor_key(c, &k, &kl)) != 0)
				break;
			while (rc == 0 && ah_cursor_val_valid(c)) {
				const void *v;
				size_t vl;
				uint64_t t;
				int64_t df;
				int r;
				if ((rc = ah_cursor_val(c, &v, &vl)) != 0)
					break;
				while ((r = ah_cursor_time_next(c, &t, &df)) == 1)
					if (t >= lower && t < upper) {
						if ((rc = uset_push(d, k, kl, v, vl, t, df, 1)) != 0)
							break;
						g->st.delta_updates++;
					}
				if (r < 0)
					rc = r;
				else if (rc == 0 && (r = ah_cursor_step_val(c)) < 0)
					rc = r;
			}
			if (rc == 0 && (rc = ah_cursor_step_key(c)) > 0)
				rc = 0;
		}
		int crc = ah_cursor_close(c);
		if (rc == 0)
			rc = crc;
	}
	free(dc.ids);
	if (rc < 0)
		return eg__fail(g, rc, "%s: cannot read its updates: %s", name, ah_strerror(rc));
	if ((rc = uset_consolidate(d)) != 0)
		return eg__fail(g, rc, "%s: a delta's diff leaves int64", name);
	return 0;
}

/* A cursor that visits keys in increasing order (state reads). */
typedef struct scan {
	ah_cursor *c;
	const char *name;
	int open;
} scan;

/* Appends to *s every (val, time, diff) of KEY in the cursor's
 * arrangement with time < before (pointers into the map, key as given).
 * Positions the cursor at the first key >= KEY. */
static int scan_key(eg_graph *g, ah_txn *txn, scan *sc, const uint8_t *key, size_t kl,
                    uint64_t before, uset *s)
{
	int rc;
	const void *k;
	size_t l;

	if (!sc->open) {
		if ((rc = ah_cursor_open_at(txn, sc->name, key, kl, &sc->c)) != 0)
			return eg__fail(g, rc, "%s: cannot open a cursor: %s", sc->name, ah_strerror(rc));
		sc->open = 1;
	} else if ((rc = ah_cursor_seek_key(sc->c, key, kl)) < 0)
		goto bad;
	if (!ah_cursor_key_valid(sc->c))
		return 0;
	if ((rc = ah_cursor_key(sc->c, &k, &l)) != 0)
		goto bad;
	if (bcmp_(k, l, key, kl) != 0)
		return 0;
	if ((rc = ah_cursor_rewind_vals(sc->c)) < 0)
		goto bad;
	while (ah_cursor_val_valid(sc->c)) {
		const void *v;
		size_t vl;
		uint64_t t;
		int64_t d;
		if ((rc = ah_cursor_val(sc->c, &v, &vl)) != 0)
			goto bad;
		if ((rc = ah_cursor_times_rewind(sc->c)) < 0)
			goto bad;
		while ((rc = ah_cursor_time_next(sc->c, &t, &d)) == 1)
			if (t < before) {
				if ((rc = uset_push(s, key, kl, v, vl, t, d, 0)) != 0)
					return eg__fail(g, rc, "out of memory");
				g->st.state_updates++;
			}
		if (rc < 0 || (rc = ah_cursor_step_val(sc->c)) < 0)
			goto bad;
	}
	return 0;
bad:
	return eg__fail(g, rc, "%s: cannot read: %s", sc->name, ah_strerror(rc));
}

static int scan_close(eg_graph *g, scan *sc)
{
	int rc = sc->open ? ah_cursor_close(sc->c) : 0;

	sc->open = 0;
	sc->c = NULL;
	return rc ? eg__fail(g, rc, "%s: cursor: %s", sc->name, ah_strerror(rc)) : 0;
}

/* ----------------------------------------------------------- appending */

static int append(eg_graph *g, ah_txn *txn, const node *nd, uset *out, uint64_t lower,
                  uint64_t upper)
{
	enum { PIECE = 4096 };
	ah_update u[PIECE];
	int rc;

	if ((rc = uset_consolidate(out)) != 0)
		return eg__fail(g, rc, "node %s: an output diff leaves int64", nd->out);
	g->st.appended += out->n;
	if (out->n == 0)
		rc = ah_advance(txn, nd->out, lower, upper);
	else if (out->n <= PIECE) {
		for (size_t i = 0; i < out->n; i++)
			u[i] = (ah_update){ out->a[i].k, out->a[i].kl, out->a[i].v, out->a[i].vl,
				            out->a[i].t, out->a[i].d };
		rc = ah_append(txn, nd->out, lower, upper, u, out->n);
	} else {
		ah_builder *b = NULL;
		if ((rc = ah_builder_begin(txn, nd->out, lower, upper, &b)) == 0) {
			for (size_t i = 0; i < out->n && rc == 0; i += PIECE) {
				size_t m = out->n - i < PIECE ? out->n - i : PIECE;
				for (size_t j = 0; j < m; j++) {
					const eu *e = &out->a[i + j];
					u[j] = (ah_update){ e->k, e->kl, e->v, e->vl, e->t, e->d };
				}
				rc = ah_builder_push(b, u, m);
			}
			if (rc)
				ah_builder_abandon(b);
			else
				rc = ah_builder_finish(b);
		}
	}
	if (rc)
		return eg__fail(g, rc, "node %s: append: %s", nd->out,
		            ah_txn_errmsg(txn)[0] ? ah_txn_errmsg(txn) : ah_strerror(rc));
	return 0;
}

/* ------------------------------------------------------------ operators */

static int step_arrange(eg_graph *g, ah_txn *txn, const node *nd, uint64_t lower,
                        uint64_t upper, uset *out)
{
	uset d = { 0 };
	int rc = read_delta(g, txn, nd->in[0], lower, upper, &d);
	eg_out o = { .g = g, .nd = nd, .out = out };

	for (size_t i = 0; rc == 0 && i < d.n; i++) {
		o.t = d.a[i].t;
		o.d = d.a[i].d;
		rc = ((eg_map_fn)nd->fn)(nd->user, d.a[i].k, d.a[i].kl, d.a[i].v, d.a[i].vl, &o);
		if (rc && !g->err[0])
			eg__fail(g, rc, "node %s: its function failed: %s", nd->out, ah_strerror(rc));
	}
	uset_free(&d);
	return rc;
}

static int time_cmp(const void *x, const void *y)
{
	const eu *a = x, *b = y;

	return (a->t > b->t) - (a->t < b->t);
}

/* One side of a join at one key: its distinct vals with their counts so
 * far, the live (count != 0) ones listed for pairing, and its updates at
 * times in [lower, upper) in time order (the events of the sweep). */
typedef struct jside {
	uset all;        /* the key's updates with time < upper (map pointers) */
	const uint8_t **v;
	uint32_t *vl;
	int64_t *cnt;
	size_t *at;      /* index in live[], or SIZE_MAX */
	size_t *live;
	size_t nv, nlive, cap;
	eu *ev;          /* events: kl holds the val's index */
	size_t nev, cev, p;
} jside;

static void jside_free(jside *j)
{
	uset_free(&j->all);
	free(j->v);
	free(j->vl);
	free(j->cnt);
	free(j->at);
	free(j->live);
	free(j->ev);
}

static int jside_add(jside *j, size_t i, int64_t d)
{
	int64_t c;

	if (__builtin_add_overflow(j->cnt[i], d, &c))
		return AH_ELIMIT;
	if (j->cnt[i] == 0 && c != 0) {
		j->at[i] = j->nlive;
		j->live[j->nlive++] = i;
	} else if (j->cnt[i] != 0 && c == 0) {
		size_t w = j->at[i], last = j->live[--j->nlive];
		j->live[w] = last;
		j->at[last] = w;
		j->at[i] = SIZE_MAX;
	}
	j->cnt[i] = c;
	return 0;
}

/* Builds a side from its updates at the key (j->all, in val order as the
 * cursor walks them): counts before lower, events from lower on. */
static int jside_build(jside *j, uint64_t lower)
{
	uset *a = &j->all;
	size_t need = a->n + 1;

	if (need > j->cap) {
		const uint8_t **v = realloc(j->v, need * sizeof *v);
		uint32_t *vl = v ? realloc(j->vl, need * sizeof *vl) : NULL;
		int64_t *cnt = vl ? realloc(j->cnt, need * sizeof *cnt) : NULL;
		size_t *at = cnt ? realloc(j->at, need * sizeof *at) : NULL;
		size_t *live = at ? realloc(j->live, need * sizeof *live) : NULL;
		eu *ev = live ? realloc(j->ev, need * sizeof *ev) : NULL;
		if (v)
			j->v = v;
		if (vl)
			j->vl = vl;
		if (cnt)
			j->cnt = cnt;
		if (at)
			j->at = at;
		if (live)
			j->live = live;
		if (!ev)
			return AH_ENOMEM;
		j->ev = ev;
		j->cap = need;
	}
	j->nv = j->nlive = j->nev = j->p = 0;
	for (size_t i = 0; i < a->n; i++) {
		eu e = a->a[i];
		if (i == 0 || ((e.v != a->a[i - 1].v || e.vl != a->a[i - 1].vl) &&
		               bcmp_(e.v, e.vl, a->a[i - 1].v, a->a[i - 1].vl) != 0)) {
			j->v[j->nv] = e.v;
			j->vl[j->nv] = e.vl;
			j->cnt[j->nv] = 0;
			j->at[j->nv++] = SIZE_MAX;
		}
		if (e.t < lower) {
			int rc = jside_add(j, j->nv - 1, e.d);
			if (rc)
				return rc;
		} else {
			e.kl = (uint32_t)(j->nv - 1);
			j->ev[j->nev++] = e;
		}
	}
	if (j->nev > 1)
		qsort(j->ev, j->nev, sizeof *j->ev, time_cmp);
	return 0;
}

/* Emits fn(k, a-val ia, b-val ib) at t with diff d. */
static int pair(eg_graph *g, const node *nd, eg_out *o, const uint8_t *k, size_t kl,
                const jside *a, size_t ia, const jside *b, size_t ib, uint64_t t, int64_t d)
{
	int rc;

	o->t = t;
	o->d = d;
	rc = ((eg_join_fn)nd->fn)(nd->user, k, kl, a->v[ia], a->vl[ia], b->v[ib], b->vl[ib], o);
	if (rc && !g->err[0])
		eg__fail(g, rc, "node %s: its function failed: %s", nd->out, ah_strerror(rc));
	return rc;
}

/* The join's output at one key for [lower, upper), by a sweep over the
 * key's event times in order:  out(t) - out(<t) = dA(t) x B(<=t) +
 * A(<t) x dB(t).  So at each time B's events are applied first, A's events
 * pair with B's live vals, B's events with A's live vals as they were
 * before t, and then A's events are applied.  The work is the events times
 * the other side's live vals: linear in the step's length, however many
 * updates of both sides it holds. */
static int join_sweep(eg_graph *g, const node *nd, const uint8_t *k, size_t kl, jside *a,
                      jside *b, uset *out)
{
	eg_out o = { .g = g, .nd = nd, .out = out };
	int rc = 0;

	while (rc == 0 && (a->p < a->nev || b->p < b->nev)) {
		uint64_t t = a->p == a->nev ? b->ev[b->p].t
		           : b->p == b->nev ? a->ev[a->p].t
		           : a->ev[a->p].t < b->ev[b->p].t ? a->ev[a->p].t : b->ev[b->p].t;
		size_t b0 = b->p, a0 = a->p;
		while (rc == 0 && b->p < b->nev && b->ev[b->p].t == t) {
			rc = jside_add(b, b->ev[b->p].kl, b->ev[b->p].d);
			b->p++;
		}
		for (size_t i = a0; rc == 0 && i < a->nev && a->ev[i].t == t; i++)
			for (size_t q = 0; rc == 0 && q < b->nlive; q++) {
				size_t ib = b->live[q];
				int64_t d;
				if (__builtin_mul_overflow(a->ev[i].d, b->cnt[ib], &d))
					rc = AH_ELIMIT;
				else
					rc = pair(g, nd, &o, k, kl, a, a->ev[i].kl, b, ib, t, d);
			}
		for (size_t i = b0; rc == 0 && i < b->p; i++)
			for (size_t q = 0; rc == 0 && q < a->nlive; q++) {
				size_t ia = a->live[q];
				int64_t d;
				if (__builtin_mul_overflow(a->cnt[ia], b->ev[i].d, &d))
					rc = AH_ELIMIT;
				else
					rc = pair(g, nd, &o, k, kl, a, ia, b, b->ev[i].kl, t, d);
			}
		while (rc == 0 && a->p < a->nev && a->ev[a->p].t == t) {
			rc = jside_add(a, a->ev[a->p].kl, a->ev[a->p].d);
			a->p++;
		}
	}
	if (rc == AH_ELIMIT && !g->err[0])
		eg__fail(g, rc, "node %s: a product or sum of diffs leaves int64", nd->out);
	return rc;
}

static int step_join(eg_graph *g, ah_txn *txn, const node *nd, uint64_t lower, uint64_t upper,
                     uset *out)
{
	uset da = { 0 }, db = { 0 };
	scan sa = { .name = nd->in[0] }, sb = { .name = nd->in[1] };
	jside ja = { 0 }, jb = { 0 };
	int rc = read_delta(g, txn, nd->in[0], lower, upper, &da);
	size_t i = 0, j = 0;

	if (rc == 0)
		rc = read_delta(g, txn, nd->in[1], lower, upper, &db);
	/* every key with new updates on either side, in order */
	while (rc == 0 && (i < da.n || j < db.n)) {
		const eu *ka = i < da.n ? &da.a[i] : NULL, *kb = j < db.n ? &db.a[j] : NULL;
		int c = !ka ? 1 : !kb ? -1 : bcmp_(ka->k, ka->kl, kb->k, kb->kl);
		const uint8_t *k = c <= 0 ? ka->k : kb->k;
		size_t kl = c <= 0 ? ka->kl : kb->kl;
		ja.all.n = jb.all.n = 0;
		if ((rc = scan_key(g, txn, &sa, k, kl, upper, &ja.all)) != 0 ||
		    (rc = scan_key(g, txn, &sb, k, kl, upper, &jb.all)) != 0)
			break;
		if ((rc = jside_build(&ja, lower)) != 0 || (rc = jside_build(&jb, lower)) != 0) {
			eg__fail(g, rc, "node %s: %s", nd->out,
			         rc == AH_ELIMIT ? "a count leaves int64" : "out of memory");
			break;
		}
		if ((rc = join_sweep(g, nd, k, kl, &ja, &jb, out)) != 0)
			break;
		while (i < da.n && bcmp_(da.a[i].k, da.a[i].kl, k, kl) == 0)
			i++;
		while (j < db.n && bcmp_(db.a[j].k, db.a[j].kl, k, kl) == 0)
			j++;
	}
	int c1 = scan_close(g, &sa), c2 = scan_close(g, &sb);
	jside_free(&ja);
	jside_free(&jb);
	uset_free(&da);
	uset_free(&db);
	return rc ? rc : c1 ? c1 : c2;
}

/* A val's history for reduce: its count before the key's first delta time
 * and its later (time, diff)s. */
typedef struct vh {
	const uint8_t *v;
	uint32_t vl;
	int64_t count;
} vh;

static int vals_cmp(const void *x, const void *y)
{
	const eu *a = x, *b = y;
	int c = bcmp_(a->v, a->vl, b->v, b->vl);

	return c ? c : (a->t > b->t) - (a->t < b->t);
}


/* Sorted, consolidated (val, count) list from s (times ignored). */
static int vals_fold(uset *s)
{
	size_t w = 0;

	if (s->n > 1)
		qsort(s->a, s->n, sizeof *s->a, vals_cmp);
	for (size_t r = 0; r < s->n;) {
		__int128 sum = 0;
		size_t e = r;
		while (e < s->n && bcmp_(s->a[e].v, s->a[e].vl, s->a[r].v, s->a[r].vl) == 0)
			sum += s->a[e++].d;
		if (sum > INT64_MAX || sum < INT64_MIN)
			return AH_ELIMIT;
		if (sum) {
			s->a[w] = s->a[r];
			s->a[w].t = 0;
			s->a[w++].d = (int64_t)sum;
		}
		r = e;
	}
	s->n = w;
	return 0;
}

typedef struct reduce_scratch {
	uset in, cur, nw;  /* input history; output now; output the function says */
	vh *acc;           /* the input's distinct vals and their counts */
	size_t nacc, cacc;
	eg_valcount *list;
	size_t clist;
	uint64_t *times;
	size_t ctimes;
} reduce_scratch;

static int grow(void **p, size_t *cap, size_t need, size_t sz)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * sz);
	if (!q)
		return AH_ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

/* Emits new - cur (both sorted, consolidated val lists) at time t and makes
 * cur equal to new. */
static int reduce_diff(eg_graph *g, const uint8_t *k, size_t kl, uset *cur, uset *nw,
                       uint64_t t, uset *out)
{
	size_t i = 0, j = 0;
	int rc = 0;

	while (rc == 0 && (i < cur->n || j < nw->n)) {
		int c = i == cur->n ? 1 : j == nw->n ? -1
		                                     : bcmp_(cur->a[i].v, cur->a[i].vl, nw->a[j].v,
		                                             nw->a[j].vl);
		const eu *e = c <= 0 ? &cur->a[i] : &nw->a[j];
		__int128 d = c < 0 ? -(__int128)cur->a[i].d
		           : c > 0 ? (__int128)nw->a[j].d
		                   : (__int128)nw->a[j].d - cur->a[i].d;
		if (d > INT64_MAX || d < INT64_MIN)
			return AH_ELIMIT;
		if (d) {
			rc = uset_push(out, k, kl, e->v, e->vl, t, (int64_t)d, 1);
			g->st.emitted++;
		}
		i += c <= 0;
		j += c >= 0;
	}
	if (rc)
		return rc;
	/* cur = new (the new list's bytes live in nw's arena, kept per key) */
	uset tmp = *cur;
	*cur = *nw;
	*nw = tmp;
	nw->n = 0;
	return 0;
}

static int reduce_key(eg_graph *g, const node *nd, const uint8_t *k, size_t kl,
                      const uint64_t *times, size_t nt, reduce_scratch *r, uset *out)
{
	uset *in = &r->in;
	size_t p = 0, w = 0;
	int rc;

	/* The input's distinct vals: scan_key walks them in val order, each
	 * once, so equal vals are adjacent.  Updates before the first delta
	 * time go straight into the counts; the later ones (few: the delta
	 * and what follows it) are kept, marked with their val's index. */
	if ((rc = grow((void **)&r->acc, &r->cacc, in->n + 1, sizeof *r->acc)) != 0 ||
	    (rc = grow((void **)&r->list, &r->clist, in->n + 1, sizeof *r->list)) != 0)
		return rc;
	r->nacc = 0;
	for (size_t i = 0; i < in->n; i++) {
		eu e = in->a[i];
		if (i == 0 || ((e.v != in->a[i - 1].v || e.vl != in->a[i - 1].vl) &&
		               bcmp_(e.v, e.vl, in->a[i - 1].v, in->a[i - 1].vl) != 0))
			r->acc[r->nacc++] = (vh){ e.v, e.vl, 0 };
		vh *a = &r->acc[r->nacc - 1];
		if (e.t < times[0]) {
			if (__builtin_add_overflow(a->count, e.d, &a->count))
				return eg__fail(g, AH_ELIMIT, "node %s: a count leaves int64", nd->out);
		} else {
			e.kl = (uint32_t)(r->nacc - 1);
			in->a[w++] = e;
		}
	}
	in->n = w;
	if (in->n > 1)
		qsort(in->a, in->n, sizeof *in->a, time_cmp);
	for (size_t ti = 0; ti < nt; ti++) {
		uint64_t t = times[ti];
		while (p < in->n && in->a[p].t <= t) {
			vh *a = &r->acc[in->a[p].kl];
			if (__builtin_add_overflow(a->count, in->a[p].d, &a->count))
				return eg__fail(g, AH_ELIMIT, "node %s: a count leaves int64", nd->out);
			p++;
		}
		size_t n = 0;
		for (size_t i = 0; i < r->nacc; i++)
			if (r->acc[i].count)
				r->list[n++] = (eg_valcount){ r->acc[i].v, r->acc[i].vl, r->acc[i].count };
		r->nw.n = 0;
		if (n) {
			eg_out o = { .g = g, .nd = nd, .out = out, .key = k, .klen = kl, .vals = &r->nw };
			rc = ((eg_reduce_fn)nd->fn)(nd->user, k, kl, r->list, n, &o);
			if (rc) {
				if (!g->err[0])
					eg__fail(g, rc, "node %s: its function failed: %s", nd->out,
					         ah_strerror(rc));
				return rc;
			}
			if ((rc = vals_fold(&r->nw)) != 0)
				return eg__fail(g, rc, "node %s: an output count leaves int64", nd->out);
		}
		if ((rc = reduce_diff(g, k, kl, &r->cur, &r->nw, t, out)) != 0)
			return eg__fail(g, rc, "node %s: cannot emit: %s", nd->out, ah_strerror(rc));
	}
	return 0;
}

static int u64_cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return (a > b) - (a < b);
}

static void scratch_free(reduce_scratch *r)
{
	uset_free(&r->in);
	uset_free(&r->cur);
	uset_free(&r->nw);
	free(r->acc);
	free(r->list);
	free(r->times);
}

static int step_reduce(eg_graph *g, ah_txn *txn, const node *nd, uint64_t lower,
                       uint64_t upper, uset *out)
{
	uset d = { 0 };
	scan si = { .name = nd->in[0] }, so = { .name = nd->out };
	reduce_scratch r = { 0 };
	int rc = read_delta(g, txn, nd->in[0], lower, upper, &d);

	for (size_t i = 0; rc == 0 && i < d.n;) {
		size_t e = i, nt = 0;
		const uint8_t *k = d.a[i].k;
		size_t kl = d.a[i].kl;
		while (e < d.n && bcmp_(d.a[e].k, d.a[e].kl, k, kl) == 0)
			e++;
		/* the key's distinct delta times, in order */
		if ((rc = grow((void **)&r.times, &r.ctimes, e - i, sizeof *r.times)) != 0)
			break;
		for (size_t j = i; j < e; j++)
			r.times[nt++] = d.a[j].t;
		qsort(r.times, nt, sizeof *r.times, u64_cmp);
		size_t w = 0;
		for (size_t j = 0; j < nt; j++)
			if (w == 0 || r.times[w - 1] != r.times[j])
				r.times[w++] = r.times[j];
		nt = w;
		/* the input's whole history at the key (delta included), and the
		 * output's accumulation before lower */
		arena_reset(&r.cur.ar);
		arena_reset(&r.nw.ar);
		r.in.n = r.cur.n = r.nw.n = 0;
		if ((rc = scan_key(g, txn, &si, k, kl, upper, &r.in)) != 0)
			break;
		if (lower > 0) {
			if ((rc = scan_key(g, txn, &so, k, kl, lower, &r.cur)) != 0)
				break;
			if ((rc = vals_fold(&r.cur)) != 0) {
				rc = eg__fail(g, rc, "node %s: a stored count leaves int64", nd->out);
				break;
			}
		}
		rc = reduce_key(g, nd, k, kl, r.times, nt, &r, out);
		i = e;
	}
	int c1 = scan_close(g, &si), c2 = scan_close(g, &so);
	scratch_free(&r);
	uset_free(&d);
	return rc ? rc : c1 ? c1 : c2;
}

/* ---------------------------------------------------------------- step */

static int check_frontiers(eg_graph *g, ah_txn *txn, const node *nd, uint64_t lower,
                           uint64_t upper)
{
	for (int s = 0; s < (nd->op == OP_JOIN ? 2 : 1); s++) {
		ah_arrangement_info ai;
		int rc = ah_arrangement_info_get(txn, nd->in[s], &ai);
		if (rc)
			return eg__fail(g, rc, "node %s: input %s: %s", nd->out, nd->in[s], ah_strerror(rc));
		if (ai.upper < upper)
			return eg__fail(g, AH_EUPPER,
			            "node %s: input %s is at upper %llu, before the step's upper %llu",
			            nd->out, nd->in[s], (unsigned long long)ai.upper,
			            (unsigned long long)upper);
		if (lower > 0 && ai.since >= lower)
			return eg__fail(g, AH_ECOMPACTED,
			            "node %s: input %s is compacted to since %llu, not before the "
			            "step's lower %llu: its delta's times are not exact",
			            nd->out, nd->in[s], (unsigned long long)ai.since,
			            (unsigned long long)lower);
	}
	ah_arrangement_info ao;
	int rc = ah_arrangement_info_get(txn, nd->out, &ao);
	if (rc)
		return eg__fail(g, rc, "node %s: its arrangement: %s", nd->out, ah_strerror(rc));
	if (ao.upper != lower)
		return eg__fail(g, AH_EUPPER, "node %s: its upper is %llu, not the step's lower %llu",
		            nd->out, (unsigned long long)ao.upper, (unsigned long long)lower);
	if (nd->op == OP_REDUCE && lower > 0 && ao.since >= lower)
		return eg__fail(g, AH_ECOMPACTED, "node %s: compacted to since %llu, not before %llu",
		            nd->out, (unsigned long long)ao.since, (unsigned long long)lower);
	return 0;
}

int eg_step(eg_graph *g, ah_txn *txn, uint64_t lower, uint64_t upper)
{
	if (!g)
		return AH_EINVAL;
	g->err[0] = 0;
	if (!txn)
		return eg__fail(g, AH_EINVAL, "step without a transaction");
	if (lower >= upper)
		return eg__fail(g, AH_EINVAL, "step [%llu, %llu) is empty", (unsigned long long)lower,
		            (unsigned long long)upper);
	for (size_t i = 0; i < g->nn; i++) {
		const node *nd = &g->n[i];
		uset out = { 0 };
		int rc = check_frontiers(g, txn, nd, lower, upper);
		if (rc == 0)
			rc = nd->op == OP_ARRANGE ? step_arrange(g, txn, nd, lower, upper, &out)
			   : nd->op == OP_JOIN    ? step_join(g, txn, nd, lower, upper, &out)
			                          : step_reduce(g, txn, nd, lower, upper, &out);
		if (rc == 0)
			rc = append(g, txn, nd, &out, lower, upper);
		uset_free(&out);
		if (rc) {
			if (!g->err[0])
				eg__fail(g, rc, "node %s: %s", nd->out, ah_strerror(rc));
			return rc;
		}
	}
	g->st.steps++;
	return 0;
}
