/*
 * tests/engine/test_engine.c - the operators of tools/engine against a
 * direct computation.  Three base collections A, B, C get random updates at
 * random times (several distinct times per commit); a graph derives
 *   by_val = arrange_by(A): (k, v) -> (v, k)
 *   red    = reduce(by_val): per key, "n= s= min= max=" (count 1), plus
 *            "even" (count 2) when n is even
 *   jn     = join(A, B) on k: (va, k vb)
 *   red_jn = reduce(jn): per key, "c=N"           (a reduce over a join)
 *   jn_red = join(red, C) on the digit: (d, redval | cv) (a join over a reduce)
 * and every output, as of EVERY time below the final upper, must equal what
 * the model computes from the inputs accumulated at that time.  Modes: the
 * views stepped in each input commit's own transaction (the writer), or
 * stepped afterwards in uneven pieces while the inputs are ahead (a second
 * reader).  A crash test kills a maintaining process at random moments and
 * resumes.  Seeds are fixed and logged.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/tl_dir.h"
#include "tests/lib/tl_heap.h"
#include "tests/lib/tl_rand.h"
#include "tools/engine/engine.h"

#define NK 6      /* keys of A and B: 'a'..'f' */
#define NV 10     /* vals of A, keys of C: '0'..'9' */
#define STEP 10   /* times per commit */
#define MAXU 4096

typedef struct mup {
	int coll;  /* 0 A, 1 B, 2 C */
	unsigned char k, v;
	uint64_t t;
	int64_t d;
} mup;

typedef struct model {
	mup u[MAXU];
	size_t n;
} model;

/* ------------------------------------------------------------ callbacks */

static int by_val(void *u, const void *k, size_t kl, const void *v, size_t vl, eg_out *o)
{
	(void)u;
	return eg_emit(o, v, vl, k, kl);
}

static void red_text(char *buf, size_t len, int64_t n, int64_t s, int mn, int mx)
{
	snprintf(buf, len, "n=%" PRId64 " s=%" PRId64 " min=%c max=%c", n, s, mn, mx);
}

static int red_fn(void *u, const void *k, size_t kl, const eg_valcount *in, size_t n, eg_out *o)
{
	int64_t cnt = 0, sum = 0;
	char buf[64];
	(void)u, (void)k, (void)kl;
	for (size_t i = 0; i < n; i++) {
		cnt += in[i].count;
		sum += in[i].count * (((const char *)in[i].val)[0] - 'a');
	}
	red_text(buf, sizeof buf, cnt, sum, ((const char *)in[0].val)[0],
	         ((const char *)in[n - 1].val)[0]);
	int rc = eg_emit_val(o, buf, strlen(buf), 1);
	if (rc == 0 && cnt % 2 == 0)
		rc = eg_emit_val(o, "even", 4, 2);
	return rc;
}

static int jn_fn(void *u, const void *k, size_t kl, const void *va, size_t la, const void *vb,
                 size_t lb, eg_out *o)
{
	char v[2] = { ((const char *)k)[0], ((const char *)vb)[0] };
	(void)u, (void)kl, (void)lb;
	return eg_emit(o, va, la, v, 2);
}

static int cnt_fn(void *u, const void *k, size_t kl, const eg_valcount *in, size_t n, eg_out *o)
{
	int64_t c = 0;
	char buf[32];
	(void)u, (void)k, (void)kl;
	for (size_t i = 0; i < n; i++)
		c += in[i].count;
	snprintf(buf, sizeof buf, "c=%" PRId64, c);
	return eg_emit_val(o, buf, strlen(buf), 1);
}

static int jr_fn(void *u, const void *k, size_t kl, const void *va, size_t la, const void *vb,
                 size_t lb, eg_out *o)
{
	char v[96];
	(void)u;
	snprintf(v, sizeof v, "%.*s|%.*s", (int)la, (const char *)va, (int)lb, (const char *)vb);
	return eg_emit(o, k, kl, v, strlen(v));
}

static const char *OUTS[] = { "by_val", "red", "jn", "red_jn", "jn_red" };

/* The test's graph, or NULL (no Criterion: forked children use it). */
static eg_graph *graph_try(void)
{
	eg_graph *g = NULL;
	if (eg_graph_new(&g) || eg_arrange_by(g, "by_val", "A", by_val, NULL) ||
	    eg_reduce(g, "red", "by_val", red_fn, NULL) || eg_join(g, "jn", "A", "B", jn_fn, NULL) ||
	    eg_reduce(g, "red_jn", "jn", cnt_fn, NULL) || eg_join(g, "jn_red", "red", "C", jr_fn, NULL)) {
		eg_graph_free(g);
		return NULL;
	}
	return g;
}

static eg_graph *graph(void)
{
	eg_graph *g = graph_try();
	cr_assert_not_null(g);
	return g;
}

/* ---------------------------------------------------------------- model */

/* Accumulated counts of each collection at time t. */
static void acc(const model *m, uint64_t t, int64_t a[NK][NV], int64_t b[NK][NV],
                int64_t c[NV][NV])
{
	memset(a, 0, sizeof(int64_t) * NK * NV);
	memset(b, 0, sizeof(int64_t) * NK * NV);
	memset(c, 0, sizeof(int64_t) * NV * NV);
	for (size_t i = 0; i < m->n; i++) {
		const mup *u = &m->u[i];
		if (u->t > t)
			continue;
		if (u->coll == 0)
			a[u->k - 'a'][u->v - '0'] += u->d;
		else if (u->coll == 1)
			b[u->k - 'a'][u->v - '0'] += u->d;
		else
			c[u->k - '0'][u->v - '0'] += u->d;
	}
}

/* A small sorted multiset of (key, val) -> count, as text like tl_dump_as_of. */
typedef struct kv {
	char k[8], v[96];
	size_t kl, vl;
	int64_t c;
} kv;

typedef struct kvs {
	kv e[1024];
	size_t n;
} kvs;

static void kvs_add(kvs *s, const void *k, size_t kl, const void *v, size_t vl, int64_t c)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->e[i].kl == kl && s->e[i].vl == vl && !memcmp(s->e[i].k, k, kl) &&
		    !memcmp(s->e[i].v, v, vl)) {
			s->e[i].c += c;
			return;
		}
	cr_assert_lt(s->n, 1024);
	kv *e = &s->e[s->n++];
	memcpy(e->k, k, kl);
	memcpy(e->v, v, vl);
	e->kl = kl;
	e->vl = vl;
	e->c = c;
}

static int bcmp2(const char *a, size_t al, const char *b, size_t bl)
{
	size_t n = al < bl ? al : bl;
	int c = memcmp(a, b, n);
	return c ? c : (al > bl) - (al < bl);
}

static int kv_cmp(const void *x, const void *y)
{
	const kv *a = x, *b = y;
	int c = bcmp2(a->k, a->kl, b->k, b->kl);
	return c ? c : bcmp2(a->v, a->vl, b->v, b->vl);
}

static void kvs_text(kvs *s, tl_buf *b)
{
	qsort(s->e, s->n, sizeof s->e[0], kv_cmp);
	for (size_t i = 0; i < s->n; i++)
		if (s->e[i].c) {
			tl_put_bytes(b, s->e[i].k, s->e[i].kl);
			tl_put(b, " ");
			tl_put_bytes(b, s->e[i].v, s->e[i].vl);
			tl_put(b, " %" PRId64 "\n", s->e[i].c);
		}
}

/* red's output for one digit key from by_val's counts (vals 'a'..'f'). */
static void red_model(const int64_t cnt[NK], kvs *out, char d)
{
	int64_t n = 0, s = 0;
	int mn = 0, mx = 0;
	for (int k = 0; k < NK; k++)
		if (cnt[k]) {
			n += cnt[k];
			s += cnt[k] * k;
			if (!mn)
				mn = 'a' + k;
			mx = 'a' + k;
		}
	if (!mn)
		return;
	char buf[64];
	red_text(buf, sizeof buf, n, s, mn, mx);
	kvs_add(out, &d, 1, buf, strlen(buf), 1);
	if (n % 2 == 0)
		kvs_add(out, &d, 1, "even", 4, 2);
}

/* The expected text of output o at time t. */
static void expect(const model *m, int o, uint64_t t, tl_buf *b)
{
	static int64_t a[NK][NV], bb[NK][NV], c[NV][NV];
	static kvs s, red;
	acc(m, t, a, bb, c);
	s.n = red.n = 0;
	for (int d = 0; d < NV; d++) {
		int64_t col[NK];
		for (int k = 0; k < NK; k++)
			col[k] = a[k][d];
		red_model(col, &red, '0' + d);
	}
	switch (o) {
	case 0:
		for (int k = 0; k < NK; k++)
			for (int v = 0; v < NV; v++) {
				char kk = 'a' + k, vv = '0' + v;
				if (a[k][v])
					kvs_add(&s, &vv, 1, &kk, 1, a[k][v]);
			}
		break;
	case 1:
		s = red;
		break;
	case 2:
	case 3: {
		static kvs jn;
		jn.n = 0;
		for (int k = 0; k < NK; k++)
			for (int va = 0; va < NV; va++)
				for (int vb = 0; vb < NV; vb++)
					if (a[k][va] * bb[k][vb] != 0) {
						char kk = '0' + va, v[2] = { 'a' + k, '0' + vb };
						kvs_add(&jn, &kk, 1, v, 2, a[k][va] * bb[k][vb]);
					}
		if (o == 2) {
			s = jn;
			break;
		}
		for (int d = 0; d < NV; d++) {
			int64_t n = 0;
			int any = 0;
			for (size_t i = 0; i < jn.n; i++)
				if (jn.e[i].k[0] == '0' + d && jn.e[i].c) {
					n += jn.e[i].c;
					any = 1;
				}
			if (any) {
				char buf[32], kk = '0' + d;
				snprintf(buf, sizeof buf, "c=%" PRId64, n);
				kvs_add(&s, &kk, 1, buf, strlen(buf), 1);
			}
		}
		break;
	}
	case 4:
		for (size_t i = 0; i < red.n; i++)
			for (int cv = 0; cv < NV; cv++)
				if (red.e[i].c * c[red.e[i].k[0] - '0'][cv] != 0) {
					char v[128];
					snprintf(v, sizeof v, "%.*s|%c", (int)red.e[i].vl, red.e[i].v, '0' + cv);
					kvs_add(&s, red.e[i].k, 1, v, strlen(v),
					        red.e[i].c * c[red.e[i].k[0] - '0'][cv]);
				}
		break;
	}
	kvs_text(&s, b);
}

/* ---------------------------------------------------------------- input */

/* The updates of commit i (deterministic in seed and i), added to m: times
 * in [i*STEP, (i+1)*STEP), 1..3 distinct; retractions only of what the
 * model holds at that time, so counts stay >= 0 and reduce sees real
 * multisets. */
static void gen_commit(model *m, uint64_t seed, unsigned i)
{
	uint64_t s = seed ^ (0x9e37u * (i + 1));
	int nt = 1 + (int)tl_below(&s, 3);
	uint64_t times[3];
	for (int j = 0; j < nt; j++)
		times[j] = (uint64_t)i * STEP + tl_below(&s, STEP);
	int n = 3 + (int)tl_below(&s, 8);
	for (int j = 0; j < n && m->n < MAXU; j++) {
		mup u;
		u.coll = (int)tl_below(&s, 3);
		u.k = u.coll == 2 ? '0' + (unsigned char)tl_below(&s, NV)
		                  : 'a' + (unsigned char)tl_below(&s, NK);
		u.v = '0' + (unsigned char)tl_below(&s, NV);
		u.t = times[tl_below(&s, (uint64_t)nt)];
		u.d = tl_below(&s, 4) == 0 ? 2 : 1;
		if (tl_below(&s, 3) == 0) {
			/* retract one copy if the model holds one at every later
			 * time of this commit (its own later updates included) */
			int64_t have = 0;
			for (size_t q = 0; q < m->n; q++)
				if (m->u[q].coll == u.coll && m->u[q].k == u.k && m->u[q].v == u.v &&
				    m->u[q].t <= u.t)
					have += m->u[q].d;
			for (size_t q = 0; q < m->n; q++)
				if (m->u[q].coll == u.coll && m->u[q].k == u.k && m->u[q].v == u.v &&
				    m->u[q].t > u.t && m->u[q].d < 0)
					have += m->u[q].d;
			if (have <= 0)
				continue;
			u.d = -1;
		}
		m->u[m->n++] = u;
	}
}

static const char *COLL[] = { "A", "B", "C" };

/* Appends model updates with times in [lo, hi) to A, B, C. */
static int append_inputs(ah_txn *t, const model *m, uint64_t lo, uint64_t hi)
{
	for (int c = 0; c < 3; c++) {
		ah_update u[MAXU];
		char kb[MAXU], vb[MAXU];
		size_t n = 0;
		for (size_t i = 0; i < m->n; i++)
			if (m->u[i].coll == c && m->u[i].t >= lo && m->u[i].t < hi) {
				kb[n] = (char)m->u[i].k;
				vb[n] = (char)m->u[i].v;
				u[n] = (ah_update){ &kb[n], 1, &vb[n], 1, m->u[i].t, m->u[i].d };
				n++;
			}
		int rc = n ? ah_append(t, COLL[c], lo, hi, u, n) : ah_advance(t, COLL[c], lo, hi);
		if (rc)
			return rc;
	}
	return 0;
}

static void create_all(ah_heap *h, eg_graph *g)
{
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (int c = 0; c < 3; c++)
		cr_assert_eq(ah_arrangement_create(t, COLL[c]), 0);
	cr_assert_eq(eg_create(g, t), 0, "%s", eg_errmsg(g));
	cr_assert_eq(ah_txn_commit(t), 0);
}

static void check_all(ah_heap *h, const model *m, uint64_t upper, uint64_t seed)
{
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	for (int o = 0; o < 5; o++) {
		ah_arrangement_info ai;
		cr_assert_eq(ah_arrangement_info_get(t, OUTS[o], &ai), 0);
		cr_assert_eq(ai.upper, upper, "%s upper %" PRIu64, OUTS[o], ai.upper);
		for (uint64_t at = 0; at < upper; at++) {
			tl_buf got = { 0 }, want = { 0 };
			tl_dump_as_of(t, OUTS[o], at, &got);
			expect(m, o, at, &want);
			cr_assert_str_eq(got.p ? got.p : "", want.p ? want.p : "",
			                 "seed %" PRIu64 ": %s as of %" PRIu64, seed, OUTS[o], at);
			free(got.p);
			free(want.p);
		}
	}
	ah_txn_abort(t);
}

#define COMMITS 24

Test(engine, model_in_the_writers_txn)
{
	for (uint64_t seed = 1; seed <= 6; seed++) {
		tl_seed("engine/model_in_the_writers_txn", seed);
		tl_dir d = tl_tmpdir("engine");
		ah_heap *h = tl_open_path(d.path, 0, 0);
		eg_graph *g = graph();
		static model m;
		m.n = 0;
		create_all(h, g);
		for (unsigned i = 0; i < COMMITS; i++) {
			ah_txn *t;
			uint64_t lo = i ? (uint64_t)i * STEP : 0, hi = (uint64_t)(i + 1) * STEP;
			gen_commit(&m, seed, i);
			cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
			cr_assert_eq(append_inputs(t, &m, lo, hi), 0, "%s", ah_txn_errmsg(t));
			cr_assert_eq(eg_step(g, t, lo, hi), 0, "seed %" PRIu64 ": %s", seed, eg_errmsg(g));
			cr_assert_eq(ah_txn_commit(t), 0);
		}
		check_all(h, &m, COMMITS * STEP, seed);
		eg_stats st;
		eg_stats_get(g, &st);
		cr_assert_eq(st.steps, COMMITS);
		eg_graph_free(g);
		cr_assert_eq(ah_close(h), 0);
		tl_rmdir(&d);
	}
}

Test(engine, model_second_reader_behind)
{
	for (uint64_t seed = 11; seed <= 16; seed++) {
		tl_seed("engine/model_second_reader_behind", seed);
		tl_dir d = tl_tmpdir("engine");
		ah_heap *h = tl_open_path(d.path, 0, 0);
		eg_graph *g = graph();
		static model m;
		uint64_t s = seed, pos = 0, end = COMMITS * STEP;
		m.n = 0;
		create_all(h, g);
		for (unsigned i = 0; i < COMMITS; i++) {
			ah_txn *t;
			gen_commit(&m, seed, i);
			cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
			cr_assert_eq(append_inputs(t, &m, (uint64_t)i * STEP, (uint64_t)(i + 1) * STEP), 0);
			cr_assert_eq(ah_txn_commit(t), 0);
			/* the reader steps now and then, by uneven pieces (not on
			 * commit boundaries), behind the inputs */
			while (tl_below(&s, 2) && pos < (uint64_t)(i + 1) * STEP) {
				uint64_t to = pos + 1 + tl_below(&s, 2 * STEP);
				if (to > (uint64_t)(i + 1) * STEP)
					to = (uint64_t)(i + 1) * STEP;
				cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
				cr_assert_eq(eg_step(g, t, pos, to), 0, "seed %" PRIu64 ": %s", seed,
				             eg_errmsg(g));
				cr_assert_eq(ah_txn_commit(t), 0);
				pos = to;
			}
		}
		if (pos < end) {
			ah_txn *t;
			cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
			cr_assert_eq(eg_step(g, t, pos, end), 0, "%s", eg_errmsg(g));
			cr_assert_eq(ah_txn_commit(t), 0);
		}
		check_all(h, &m, end, seed);
		eg_graph_free(g);
		cr_assert_eq(ah_close(h), 0);
		tl_rmdir(&d);
	}
}

Test(engine, frontier_rules)
{
	tl_dir d = tl_tmpdir("engine");
	ah_heap *h = tl_open_path(d.path, 0, 0);
	eg_graph *g = graph();
	static model m;
	ah_txn *t;
	m.n = 0;
	create_all(h, g);
	gen_commit(&m, 5, 0);
	/* inputs not yet at the step's upper */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(eg_step(g, t, 0, STEP), AH_EUPPER);
	cr_assert_str_eq(eg_errmsg(g),
	                 "node by_val: input A is at upper 0, before the step's upper 10");
	ah_txn_abort(t);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(append_inputs(t, &m, 0, STEP), 0);
	cr_assert_eq(eg_step(g, t, 0, STEP), 0, "%s", eg_errmsg(g));
	cr_assert_eq(ah_txn_commit(t), 0);
	/* a step that does not start at the outputs' upper */
	gen_commit(&m, 5, 1);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(append_inputs(t, &m, STEP, 2 * STEP), 0);
	cr_assert_eq(eg_step(g, t, STEP + 1, 2 * STEP), AH_EUPPER);
	cr_assert_str_eq(eg_errmsg(g), "node by_val: its upper is 10, not the step's lower 11");
	ah_txn_abort(t);
	/* an input compacted to the step's lower: its delta is not exact */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(append_inputs(t, &m, STEP, 2 * STEP), 0);
	cr_assert_eq(ah_set_since(t, "A", STEP), 0);
	cr_assert_eq(eg_step(g, t, STEP, 2 * STEP), AH_ECOMPACTED);
	cr_assert_str_eq(eg_errmsg(g), "node by_val: input A is compacted to since 10, not before "
	                               "the step's lower 10: its delta's times are not exact");
	ah_txn_abort(t);
	/* empty step, bad nodes */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(eg_step(g, t, STEP, STEP), AH_EINVAL);
	cr_assert_str_eq(eg_errmsg(g), "step [10, 10) is empty");
	cr_assert_eq(eg_step(g, NULL, STEP, 2 * STEP), AH_EINVAL);
	cr_assert_str_eq(eg_errmsg(g), "step without a transaction");
	ah_txn_abort(t);
	cr_assert_eq(eg_reduce(g, "red", "A", red_fn, NULL), AH_EINVAL);
	cr_assert_str_eq(eg_errmsg(g), "node red: output already made by another node");
	cr_assert_eq(eg_arrange_by(g, "x", "x", by_val, NULL), AH_EINVAL);
	cr_assert_eq(eg_join(g, "y", "A", NULL, jn_fn, NULL), AH_EINVAL);
	cr_assert_eq(eg_arrange_by(NULL, "x", "A", by_val, NULL), AH_EINVAL);
	cr_assert_eq(eg_arrange_by(g, "B", "A", by_val, NULL), AH_EINVAL);
	cr_assert_str_eq(eg_errmsg(g), "node B: an earlier node (jn) reads it: add nodes after their inputs");
	/* the shape: outputs in order, base inputs once each */
	cr_assert_eq(eg_node_count(g), 5);
	cr_assert_str_eq(eg_node_output(g, 4), "jn_red");
	cr_assert_null(eg_node_output(g, 5));
	cr_assert_eq(eg_base_count(g), 3);
	cr_assert_str_eq(eg_base_input(g, 0), "A");
	cr_assert_str_eq(eg_base_input(g, 1), "B");
	cr_assert_str_eq(eg_base_input(g, 2), "C");
	cr_assert_null(eg_base_input(g, 3));
	eg_graph_free(g);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* A callback's failure stops the step with its message; nothing commits. */
static int refuse(void *u, const void *k, size_t kl, const void *v, size_t vl, eg_out *o)
{
	(void)u, (void)k, (void)kl, (void)v, (void)vl;
	return eg_fail(o, "column bid is not an integer");
}

Test(engine, callback_error_names_the_node)
{
	tl_dir d = tl_tmpdir("engine");
	ah_heap *h = tl_open_path(d.path, 0, 0);
	eg_graph *g = NULL;
	static model m;
	ah_txn *t;
	m.n = 0;
	cr_assert_eq(eg_graph_new(&g), 0);
	cr_assert_eq(eg_arrange_by(g, "bad", "A", refuse, NULL), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (int c = 0; c < 3; c++)
		cr_assert_eq(ah_arrangement_create(t, COLL[c]), 0);
	cr_assert_eq(eg_create(g, t), 0);
	m.u[m.n++] = (mup){ 0, 'a', '1', 3, 1 };
	cr_assert_eq(append_inputs(t, &m, 0, STEP), 0);
	cr_assert_eq(eg_step(g, t, 0, STEP), AH_EINVAL);
	cr_assert_str_eq(eg_errmsg(g), "node bad: column bid is not an integer");
	ah_txn_abort(t);
	eg_graph_free(g);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ---------------------------------------------------------------- crash */

#define CRASH_COMMITS 60

/* The frontier every arrangement of the heap is at; fails if they differ
 * (inputs and views must move together). */
static uint64_t one_frontier(ah_heap *h, int views_only)
{
	static const char *all[] = { "A", "B", "C", "by_val", "red", "jn", "red_jn", "jn_red" };
	ah_txn *t;
	uint64_t up = 0;
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	for (int i = views_only ? 3 : 0; i < 8; i++) {
		ah_arrangement_info ai;
		cr_assert_eq(ah_arrangement_info_get(t, all[i], &ai), 0);
		if (i == (views_only ? 3 : 0))
			up = ai.upper;
		cr_assert_eq(ai.upper, up, "%s at %" PRIu64 ", others at %" PRIu64, all[i], ai.upper, up);
	}
	ah_txn_abort(t);
	return up;
}

/* The writer: commits i = upper / STEP .. CRASH_COMMITS - 1, inputs and
 * views in one transaction each.  Returns an exit status (no Criterion). */
static int writer_child(const char *path, uint64_t seed)
{
	ah_open_opts o = { .size = sizeof o };
	ah_heap *h;
	ah_txn *t;
	eg_graph *g;
	static model m;
	ah_arrangement_info ai;

	if (ah_open(path, &o, &h) || !(g = graph_try()))
		return 2;
	if (ah_txn_begin(h, AH_TXN_RDONLY, &t) || ah_arrangement_info_get(t, "A", &ai))
		return 3;
	ah_txn_abort(t);
	m.n = 0;
	for (unsigned i = 0; i < CRASH_COMMITS; i++) {
		gen_commit(&m, seed, i);
		uint64_t lo = (uint64_t)i * STEP, hi = lo + STEP;
		if (hi <= ai.upper)
			continue;
		if (ah_txn_begin(h, 0, &t) || append_inputs(t, &m, lo, hi) || eg_step(g, t, lo, hi) ||
		    ah_txn_commit(t))
			return 4;
	}
	return 0;
}

Test(engine, kill_during_view_maintenance)
{
	uint64_t seed = tl_seed("engine/kill_during_view_maintenance", 77), s = seed;
	tl_dir d = tl_tmpdir("engine");
	ah_heap *h = tl_open_path(d.path, 0, 0);
	eg_graph *g = graph();
	static model m;
	int kills = 0;

	create_all(h, g);
	cr_assert_eq(ah_close(h), 0);
	for (int round = 0; round < 40; round++) {
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(writer_child(d.path, seed));
		}
		/* 30 rounds killed (every fifth at once), then one runs to the end */
		long us = round >= 30 ? -1 : round % 5 == 0 ? 0 : (long)tl_below(&s, 40000);
		int st;
		if (us >= 0) {
			usleep((useconds_t)us);
			kill(pid, SIGKILL);
		}
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		if (WIFSIGNALED(st))
			kills++;
		else
			cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d: child status %d",
			          round, st);
		h = tl_open_path(d.path, 0, 0);
		uint64_t up = one_frontier(h, 0);
		cr_assert_eq(up % STEP, 0);
		cr_assert_eq(ah_close(h), 0);
		if (up == CRASH_COMMITS * STEP)
			break;
	}
	cr_log_info("engine/kill_during_view_maintenance: %d kills", kills);
	h = tl_open_path(d.path, 0, 0);
	cr_assert_eq(one_frontier(h, 0), CRASH_COMMITS * STEP, "the last rounds run to the end");
	m.n = 0;
	for (unsigned i = 0; i < CRASH_COMMITS; i++)
		gen_commit(&m, seed, i);
	check_all(h, &m, CRASH_COMMITS * STEP, seed);
	eg_graph_free(g);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* The second reader: inputs are all there; it steps the views from their
 * upper in uneven pieces, one transaction each, its position being the
 * views' upper (and a source record written with it). */
static int reader_child(const char *path, uint64_t seed, uint64_t end)
{
	ah_open_opts o = { .size = sizeof o };
	ah_heap *h;
	ah_txn *t;
	eg_graph *g;
	ah_arrangement_info ai;
	uint64_t s = seed ^ (uint64_t)getpid();

	if (ah_open(path, &o, &h) || !(g = graph_try()))
		return 2;
	if (ah_txn_begin(h, AH_TXN_RDONLY, &t) || ah_arrangement_info_get(t, "by_val", &ai))
		return 3;
	ah_txn_abort(t);
	for (uint64_t pos = ai.upper; pos < end;) {
		uint64_t to = pos + 1 + tl_below(&s, 3 * STEP);
		if (to > end)
			to = end;
		if (ah_txn_begin(h, 0, &t) || eg_step(g, t, pos, to) ||
		    ah_source_put(t, "reader", &to, sizeof to) || ah_txn_commit(t))
			return 4;
		pos = to;
	}
	return 0;
}

Test(engine, kill_the_reader_behind)
{
	uint64_t seed = tl_seed("engine/kill_the_reader_behind", 78), s = seed;
	uint64_t end = CRASH_COMMITS * STEP;
	tl_dir d = tl_tmpdir("engine");
	ah_heap *h = tl_open_path(d.path, 0, 0);
	eg_graph *g = graph();
	static model m;
	ah_txn *t;

	create_all(h, g);
	m.n = 0;
	for (unsigned i = 0; i < CRASH_COMMITS; i++) {
		gen_commit(&m, seed, i);
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		cr_assert_eq(append_inputs(t, &m, (uint64_t)i * STEP, (uint64_t)(i + 1) * STEP), 0);
		cr_assert_eq(ah_txn_commit(t), 0);
	}
	cr_assert_eq(ah_close(h), 0);
	for (int round = 0; round < 40; round++) {
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(reader_child(d.path, seed + (uint64_t)round, end));
		}
		long us = round >= 30 ? -1 : round % 5 == 0 ? 0 : (long)tl_below(&s, 40000);
		int st;
		if (us >= 0) {
			usleep((useconds_t)us);
			kill(pid, SIGKILL);
		}
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
		          "round %d: child status %d", round, st);
		h = tl_open_path(d.path, 0, 0);
		uint64_t up = one_frontier(h, 1);
		/* the stored position is the views' upper */
		const void *p;
		size_t len;
		uint64_t pos = 0;
		cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
		if (ah_source_get(t, "reader", &p, &len) == 0) {
			cr_assert_eq(len, sizeof pos);
			memcpy(&pos, p, len);
		}
		ah_txn_abort(t);
		cr_assert_eq(pos, up);
		cr_assert_eq(ah_close(h), 0);
		if (up == end)
			break;
	}
	h = tl_open_path(d.path, 0, 0);
	cr_assert_eq(one_frontier(h, 1), end);
	check_all(h, &m, end, seed);
	eg_graph_free(g);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* ---------------------------------------------------------- I/O faults */

#include <errno.h>

#include "tests/fault/interpose.h"
#include "tests/lib/tl_file.h"

#define FAULT_BASE 10  /* commits before the one under faults */

/* One commit: inputs i and the views' step, in one transaction. */
static int commit_one(ah_heap *h, eg_graph *g, const model *m, unsigned i)
{
	ah_txn *t;
	uint64_t lo = (uint64_t)i * STEP, hi = lo + STEP;
	int rc = ah_txn_begin(h, 0, &t);

	if (rc)
		return rc;
	if ((rc = append_inputs(t, m, lo, hi)) != 0 || (rc = eg_step(g, t, lo, hi)) != 0) {
		ah_txn_abort(t);
		return rc;
	}
	return ah_txn_commit(t);
}

/* The nth write, sync or allocation of the commit fails (EIO or ENOSPC),
 * n = 1, 2, ... until one succeeds: every failure leaves the heap with
 * inputs and views at one frontier, the old one or (a commit whose data
 * was all written when a later sync failed) the new one, equal to the
 * model there; nothing is half done. */
Test(engine, io_fault_sweep_in_a_step, .timeout = 240)
{
	uint64_t seed = tl_seed("engine/io_fault_sweep_in_a_step", 91);
	tl_dir d = tl_tmpdir("engine");
	char base[160];
	ah_open_opts o = tl_opts(0, 64 * TL_MiB, 0);
	ah_heap *h = tl_open_path(d.path, 0, 0);
	eg_graph *g = graph();
	static model m;
	uint64_t n, faults = 0, new_frontier = 0;

	m.n = 0;
	create_all(h, g);
	for (unsigned i = 0; i < FAULT_BASE; i++) {
		gen_commit(&m, seed, i);
		cr_assert_eq(commit_one(h, g, &m, i), 0, "%s", eg_errmsg(g));
	}
	gen_commit(&m, seed, FAULT_BASE);
	cr_assert_eq(ah_close(h), 0);
	snprintf(base, sizeof base, "%s/base", d.dir);
	cr_assert_eq(tl_copy(d.path, base), 0);
	for (n = 1; n < 2000; n++) {
		cr_assert_eq(tl_copy(base, d.path), 0);
		cr_assert_eq(ah_open(d.path, &o, &h), 0);
		uint64_t inj = io_fault_injected();
		io_fault_arm(n, (1u << IO_MSYNC) | (1u << IO_FDATASYNC) | (1u << IO_FSYNC) |
		                (1u << IO_PWRITE) | (1u << IO_FALLOCATE), n % 2 ? EIO : ENOSPC);
		int rc = commit_one(h, g, &m, FAULT_BASE);
		io_fault_arm(0, 0, 0);
		int hit = io_fault_injected() != inj;
		ah_close(h);
		if (rc == 0 && !hit)
			break;
		faults += hit;
		cr_assert(rc == 0 || rc == AH_EIO || rc == AH_EFULL, "n=%" PRIu64 ": %s (%s)", n,
		          ah_err_name(rc), eg_errmsg(g));
		h = tl_open_path(d.path, 0, 0);
		uint64_t up = one_frontier(h, 0);
		cr_assert(up == FAULT_BASE * STEP || up == (FAULT_BASE + 1) * STEP,
		          "n=%" PRIu64 ": frontier %" PRIu64, n, up);
		new_frontier += up == (FAULT_BASE + 1) * STEP;
		check_all(h, &m, up, seed);
		cr_assert_eq(ah_close(h), 0);
	}
	cr_assert_lt(n, 2000, "the commit never succeeded");
	cr_assert_gt(faults, 3, "only %" PRIu64 " faults hit the commit", faults);
	h = tl_open_path(d.path, 0, 0);
	check_all(h, &m, (FAULT_BASE + 1) * STEP, seed);
	cr_assert_eq(ah_close(h), 0);
	cr_log_info("engine/io_fault_sweep_in_a_step: %" PRIu64 " faults, %" PRIu64
	            " found committed after a failed sync", faults, new_frontier);
	eg_graph_free(g);
	tl_rmdir(&d);
}
