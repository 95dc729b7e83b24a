/*
 * tests/api/test_model.c - model-based test of arrangements: random
 * sequences of append, advance, since, maintenance, commit/abort and reopen
 * over several arrangements, checked after every step against a plain
 * in-memory reference at every valid as_of time.  Fixed seeds, printed;
 * AH_TORTURE=1 runs far more steps.  A small merge quantum makes merges
 * suspend and resume across transactions.
 */
#include <unistd.h>

#include "tl_dir.h"
#include "tl_heap.h"

#define NARR 3
#define NKEY 12
#define NVAL 4

typedef struct mupd {
	int k, v;
	uint64_t t;
	int64_t d;
} mupd;

/* base: sums of the updates at times < since (folded, as compaction may);
 * u: the updates at times >= since. */
typedef struct marr {
	uint64_t upper, since;
	int64_t base[NKEY][NVAL];
	mupd *u;
	size_t n, cap;
} marr;

static void fold(marr *a)
{
	size_t j = 0;
	for (size_t i = 0; i < a->n; i++) {
		if (a->u[i].t < a->since)
			a->base[a->u[i].k][a->u[i].v] += a->u[i].d;
		else
			a->u[j++] = a->u[i];
	}
	a->n = j;
}

typedef struct model {
	marr a[NARR];
} model;

static const char *names[NARR] = { "a", "b/c", "d:e" };

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void model_copy(model *dst, const model *src)
{
	for (int i = 0; i < NARR; i++) {
		free(dst->a[i].u);
		dst->a[i] = src->a[i];
		dst->a[i].u = malloc((src->a[i].cap + 1) * sizeof(mupd));
		if (src->a[i].n)
			memcpy(dst->a[i].u, src->a[i].u, src->a[i].n * sizeof(mupd));
	}
}

static void key_of(int k, char *buf) { sprintf(buf, "key%03d", k); }
static void val_of(int v, char *buf)
{
	/* vals of different lengths, one empty */
	static const char *vs[NVAL] = { "", "v", "v\x01", "\xff\xfe" };
	strcpy(buf, vs[v]);
}

/* Index of a val string, -1 if unknown. */
static int val_index(const void *v, size_t vl)
{
	char vb[16];
	for (int i = 0; i < NVAL; i++) {
		val_of(i, vb);
		if (strlen(vb) == vl && memcmp(vb, v, vl) == 0)
			return i;
	}
	return -1;
}

#define WINDOW_MAX 64

/* Compares every arrangement at every as_of in [since, upper) with the
 * model, numerically: one cursor pass per arrangement. */
static void check(ah_txn *t, const model *m, uint64_t seed, long step)
{
	static int64_t want[WINDOW_MAX][NKEY][NVAL];
	for (int i = 0; i < NARR; i++) {
		const marr *a = &m->a[i];
		ah_arrangement_info in;
		cr_assert_eq(ah_arrangement_info_get(t, names[i], &in), 0);
		cr_assert_eq(in.upper, a->upper, "seed %" PRIu64 " step %ld: upper", seed, step);
		cr_assert_eq(in.since, a->since, "seed %" PRIu64 " step %ld: since", seed, step);
		if (a->since > 0)
			cr_assert_eq(ah_check_as_of(t, names[i], a->since - 1), AH_ECOMPACTED);
		cr_assert_eq(ah_check_as_of(t, names[i], a->upper), AH_ENOTREADY);
		uint64_t w = a->upper - a->since;
		cr_assert_leq(w, WINDOW_MAX, "test window too wide");
		size_t want_nonzero = 0, got_nonzero = 0;
		for (uint64_t j = 0; j < w; j++) {
			memcpy(want[j], a->base, sizeof a->base);
			for (size_t u = 0; u < a->n; u++)
				if (a->u[u].t <= a->since + j)
					want[j][a->u[u].k][a->u[u].v] += a->u[u].d;
			for (int k = 0; k < NKEY; k++)
				for (int v = 0; v < NVAL; v++)
					want_nonzero += want[j][k][v] != 0;
		}
		ah_cursor *c;
		cr_assert_eq(ah_cursor_open(t, names[i], &c), 0);
		for (int rc = 0; rc >= 0 && ah_cursor_key_valid(c); rc = ah_cursor_step_key(c)) {
			const void *kp;
			size_t kl;
			cr_assert_eq(ah_cursor_key(c, &kp, &kl), 0);
			int k = kl == 6 && memcmp(kp, "key", 3) == 0 ? atoi((const char *)kp + 3) : -1;
			cr_assert(k >= 0 && k < NKEY, "seed %" PRIu64 " step %ld: stray key", seed, step);
			for (int rv = 0; rv >= 0 && ah_cursor_val_valid(c); rv = ah_cursor_step_val(c)) {
				const void *vp;
				size_t vl;
				cr_assert_eq(ah_cursor_val(c, &vp, &vl), 0);
				int v = val_index(vp, vl);
				cr_assert(v >= 0, "seed %" PRIu64 " step %ld: stray val", seed, step);
				for (uint64_t j = 0; j < w; j++) {
					int64_t sum;
					cr_assert_eq(ah_cursor_accumulate(c, a->since + j, &sum), 0);
					cr_assert_eq(sum, want[j][k][v],
					             "seed %" PRIu64 " step %ld: %s key%03d val %d as_of %" PRIu64
					             ": got %" PRId64 " want %" PRId64, seed, step, names[i], k, v,
					             a->since + j, sum, want[j][k][v]);
					got_nonzero += sum != 0;
				}
			}
		}
		ah_cursor_close(c);
		cr_assert_eq(got_nonzero, want_nonzero, "seed %" PRIu64 " step %ld: %s misses entries",
		             seed, step, names[i]);
	}
}

static void run(uint64_t seed, long steps, uint64_t quantum)
{
	cr_log_info("model test seed %" PRIu64 ", %ld steps, quantum %" PRIu64, seed, steps, quantum);
	rng_state = seed;
	setenv("AH_DEBUG", "1", 1); /* spine_check after every mutation */
	tl_dir d = tl_tmpdir("api");
	ah_heap *h = tl_open_path(d.path, AH_OPEN_NOSYNC, quantum);
	model committed = { 0 }, cur = { 0 };
	ah_txn *t;
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (int i = 0; i < NARR; i++)
		cr_assert_eq(ah_arrangement_create(t, names[i]), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (long step = 0; step < steps; step++) {
		int ai = (int)(rnd() % NARR);
		marr *a = &cur.a[ai];
		unsigned op = (unsigned)(rnd() % 100);
		int rc = 0;
		if (op < 45) { /* append */
			uint64_t nu = a->upper + 1 + rnd() % 3;
			size_t n = rnd() % 8;
			ah_update ups[8];
			char kb[8][16], vb[8][16];
			for (size_t j = 0; j < n; j++) {
				mupd u = { (int)(rnd() % NKEY), (int)(rnd() % NVAL),
				           a->upper + rnd() % (nu - a->upper), (int64_t)(rnd() % 5) - 2 };
				key_of(u.k, kb[j]);
				val_of(u.v, vb[j]);
				ups[j] = (ah_update){ kb[j], strlen(kb[j]), vb[j], strlen(vb[j]), u.t, u.d };
				if (a->n == a->cap) {
					a->cap = a->cap * 2 + 16;
					a->u = realloc(a->u, a->cap * sizeof(mupd));
				}
				a->u[a->n++] = u;
			}
			rc = ah_append(t, names[ai], a->upper, nu, ups, n);
			a->upper = nu;
		} else if (op < 60) {
			uint64_t nu = a->upper + rnd() % 3;
			rc = ah_advance(t, names[ai], a->upper, nu);
			a->upper = nu;
		} else if (op < 75) { /* since: keep [since, upper) small */
			uint64_t lo = a->since, hi = a->upper;
			uint64_t s = lo + (hi > lo ? rnd() % (hi - lo + 1) : 0);
			if (hi > 6 && s < hi - 6)
				s = hi - 6;
			rc = ah_set_since(t, names[ai], s);
			a->since = s;
			fold(a);
		} else if (op < 85) {
			int idle = -1;
			rc = ah_maintain(t, names[ai], rnd() % 2 ? 0 : 1 + rnd() % 40, &idle);
			cr_assert(idle == 0 || idle == 1);
		} else if (op < 93) {
			cr_assert_eq(ah_txn_commit(t), 0);
			model_copy(&committed, &cur);
			cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		} else if (op < 97) {
			ah_txn_abort(t);
			model_copy(&cur, &committed);
			cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		} else {
			cr_assert_eq(ah_txn_commit(t), 0);
			model_copy(&committed, &cur);
			cr_assert_eq(ah_close(h), 0);
			h = tl_open_path(d.path, AH_OPEN_NOSYNC, quantum);
			cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		}
		cr_assert_eq(rc, 0, "seed %" PRIu64 " step %ld op %u: %s (%s)", seed, step, op,
		             ah_err_name(rc), ah_txn_errmsg(t));
		if (a->upper - a->since > 32) { /* keep every as_of checkable */
			a->since = a->upper - 6;
			fold(a);
			rc = ah_set_since(t, names[ai], a->since);
			cr_assert_eq(rc, 0, "seed %" PRIu64 " step %ld: since", seed, step);
		}
		check(t, &cur, seed, step);
	}
	cr_assert_eq(ah_txn_commit(t), 0);
	/* Maintenance to the end compacts everything into at most one batch. */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (int i = 0; i < NARR; i++) {
		int idle = 0;
		cr_assert_eq(ah_maintain(t, names[i], 0, &idle), 0);
		cr_assert_eq(idle, 1);
		ah_arrangement_info in;
		cr_assert_eq(ah_arrangement_info_get(t, names[i], &in), 0);
		cr_assert_leq(in.batches, 1);
		cr_assert_eq(in.merging, 0);
	}
	check(t, &cur, seed, steps);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_close(h), 0);
	for (int i = 0; i < NARR; i++) {
		free(cur.a[i].u);
		free(committed.a[i].u);
	}
	tl_rmdir(&d);
}

Test(api_model, random_ops_default_quantum, .timeout = 600)
{
	run(20261130, getenv("AH_TORTURE") ? 200000 : 10000, 0);
}

Test(api_model, random_ops_tiny_quantum, .timeout = 600)
{
	/* quantum 4: merges suspend and resume across appends and commits */
	run(7, getenv("AH_TORTURE") ? 200000 : 10000, 4);
}
