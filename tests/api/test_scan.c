/*
 * tests/api/test_scan.c - the scan's fast paths against a model and
 * against the general path.
 *
 * A scan steps keys and vals inside a chunk checked whole with inline
 * steps, compares the batches' cached 8-byte prefixes, steps a key held by
 * one batch with no comparison, and sums a val's (time, diff) pairs in
 * place (ah_cursor_accumulate) instead of walking them.  Each of those
 * must give exactly what the general path gives.  A seeded random heap
 * (seed printed) holds many batches over keys that share 8-byte prefixes,
 * the empty key and val, a key whose vals continue over several chunks
 * (KEY_CONT), a (key, val) whose times continue over several chunks
 * (VAL_CONT), and a jumbo key (larger than the largest chunk class).  It
 * is scanned at as_of before, among and after the times, with since 0 and
 * advanced, and after a full merge into one batch, through ah_cursor_open (chunks checked
 * whole: the fast paths) and ah_cursor_open_at (the first chunk of each
 * batch checked page by page: the general path): every key and val in
 * order, every accumulate equal to the model's sum and to the sum of the
 * time walk, the walk's pairs equal to the model's (times advanced),
 * time_next 0 right after an accumulate.  Public header only.
 */
#include "tl_dir.h"
#include "tl_heap.h"
#include "tl_rand.h"

#define NAME "s"
#define WINDOW 100000u /* times of append i: [i * WINDOW, (i + 1) * WINDOW) */
#define NAPPEND 12
#define NRANDOM 1500   /* random updates per append */
#define NPOOLK 160
#define NPOOLV 40
#define WIDE_VALS 700  /* 2 KiB vals of one key: more than a 1 MiB chunk */
#define DEEP_TIMES 80000 /* times of one (key, val): 1.25 MiB of pairs */
#define JUMBO ((1u << 20) + 1000)

typedef struct up {
	const uint8_t *k, *v;
	size_t kl, vl;
	uint64_t t;
	int64_t d;
} up;

typedef struct field {
	uint8_t *p;
	size_t len;
} field;

static field keys[NPOOLK], vals[NPOOLV], wide[WIDE_VALS];
static up *model;
static size_t nmodel, capmodel;
static uint64_t seed;

static int fcmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	size_t n = al < bl ? al : bl;
	int c = n ? memcmp(a, b, n) : 0;

	return c ? c : (al > bl) - (al < bl);
}

static int up_cmp(const void *pa, const void *pb)
{
	const up *a = pa, *b = pb;
	int c = fcmp(a->k, a->kl, b->k, b->kl);

	if (!c)
		c = fcmp(a->v, a->vl, b->v, b->vl);
	return c ? c : (a->t > b->t) - (a->t < b->t);
}

/* Random bytes over a small alphabet (0x00, 'a', 'b', 0xff), after an
 * optional shared 8-byte prefix: ties on the cached prefix are common. */
static field make_field(uint64_t *s, size_t max, const char *prefix)
{
	static const uint8_t alpha[4] = { 0x00, 'a', 'b', 0xff };
	size_t pl = prefix ? strlen(prefix) : 0;
	field f;

	f.len = pl + tl_below(s, max + 1);
	f.p = malloc(f.len + 1);
	cr_assert(f.p);
	memcpy(f.p, prefix ? prefix : "", pl);
	for (size_t i = pl; i < f.len; i++)
		f.p[i] = alpha[tl_below(s, 4)];
	return f;
}

static void make_pools(uint64_t *s)
{
	for (int i = 0; i < NPOOLK; i++)
		keys[i] = make_field(s, i % 3 ? 12 : 5, i % 2 ? "prefix__" : NULL);
	keys[0].len = 0; /* the empty key */
	keys[1].len = 8; /* exactly the prefix */
	keys[2] = (field){ malloc(JUMBO), JUMBO };
	cr_assert(keys[2].p);
	memset(keys[2].p, 'J', JUMBO);
	keys[3] = (field){ (uint8_t *)strdup("wide"), 4 };
	keys[4] = (field){ (uint8_t *)strdup("deep"), 4 };
	for (int i = 0; i < NPOOLV; i++)
		vals[i] = make_field(s, 20, i % 2 ? "vvvvvvvv" : NULL);
	vals[0].len = 0;
	for (int i = 0; i < WIDE_VALS; i++) {
		wide[i] = (field){ malloc(2048), 2048 };
		cr_assert(wide[i].p);
		memset(wide[i].p, 'w', 2048);
		snprintf((char *)wide[i].p + 2030, 18, "%05d", i);
	}
}

static void push(up **u, size_t *n, size_t *cap, up x)
{
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 1024;
		*u = realloc(*u, *cap * sizeof **u);
		cr_assert(*u);
	}
	(*u)[(*n)++] = x;
}

static int64_t rdiff(uint64_t *s)
{
	int64_t d = 1 + (int64_t)tl_below(s, 3);

	return tl_below(s, 4) ? d : -d;
}

/* Append i's updates: random ones, and in appends 0 and 5 the wide key's
 * vals and the deep (key, val)'s times; unique (key, val, time), so
 * nothing consolidates away and the model is exactly what is stored. */
static size_t gen_append(uint64_t *s, int i, up **u)
{
	size_t n = 0, cap = 0;
	uint64_t t0 = (uint64_t)i * WINDOW;

	*u = NULL;
	for (int j = 0; j < NRANDOM; j++) {
		field k = keys[tl_below(s, NPOOLK)], v = vals[tl_below(s, NPOOLV)];
		push(u, &n, &cap, (up){ k.p, v.p, k.len, v.len,
		                        t0 + tl_below(s, WINDOW), rdiff(s) });
	}
	if (i == 0 || i == 5) {
		for (int j = 0; j < WIDE_VALS; j++)
			push(u, &n, &cap, (up){ keys[3].p, wide[j].p, 4, 2048,
			                        t0 + tl_below(s, WINDOW), rdiff(s) });
		for (uint64_t j = 0; j < DEEP_TIMES; j++)
			push(u, &n, &cap, (up){ keys[4].p, vals[7].p, 4, vals[7].len,
			                        t0 + j, rdiff(s) });
	}
	qsort(*u, n, sizeof **u, up_cmp);
	size_t o = 0;
	for (size_t j = 0; j < n; j++)
		if (o == 0 || up_cmp(&(*u)[o - 1], &(*u)[j]) != 0)
			(*u)[o++] = (*u)[j];
	return o;
}

static void build(ah_heap *h)
{
	ah_txn *t;
	uint64_t s = seed;

	make_pools(&s);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, NAME), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	for (int i = 0; i < NAPPEND; i++) {
		up *u;
		size_t n = gen_append(&s, i, &u);
		ah_update *a = malloc(n * sizeof *a);
		cr_assert(a);
		for (size_t j = 0; j < n; j++) {
			a[j] = (ah_update){ u[j].k, u[j].kl, u[j].v, u[j].vl,
			                    u[j].t, u[j].d };
			push(&model, &nmodel, &capmodel, u[j]);
		}
		cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
		int rc = ah_append(t, NAME, (uint64_t)i * WINDOW,
		                   (uint64_t)(i + 1) * WINDOW, a, n);
		cr_assert_eq(rc, 0, "seed %" PRIu64 " append %d: %s", seed, i,
		             ah_strerror(rc));
		cr_assert_eq(ah_txn_commit(t), 0);
		free(a);
		free(u);
	}
	qsort(model, nmodel, sizeof *model, up_cmp);
}

static bool same_kv(const up *a, const up *b)
{
	return fcmp(a->k, a->kl, b->k, b->kl) == 0 &&
	       fcmp(a->v, a->vl, b->v, b->vl) == 0;
}

/* The model's (key, val) starting at model[*i]: its sum as of as_of, its
 * pairs' count and the sum of their advanced times; *i moves past it. */
static int64_t model_pair(size_t *i, uint64_t since, uint64_t as_of,
                          size_t *npairs, uint64_t *tsum)
{
	size_t j = *i;
	int64_t sum = 0;

	*tsum = 0;
	for (; j < nmodel && same_kv(&model[*i], &model[j]); j++) {
		uint64_t t = model[j].t < since ? since : model[j].t;
		*tsum += t;
		if (t <= as_of)
			sum += model[j].d;
	}
	*npairs = j - *i;
	*i = j;
	return sum;
}

/* What a full merge at since stores: times advanced to since, equal
 * (key, val, time) summed, zero sums gone. */
static void model_consolidate(uint64_t since)
{
	size_t o = 0;

	for (size_t j = 0; j < nmodel; j++)
		if (model[j].t < since)
			model[j].t = since;
	qsort(model, nmodel, sizeof *model, up_cmp);
	for (size_t j = 0; j < nmodel; j++) {
		if (o > 0 && up_cmp(&model[o - 1], &model[j]) == 0)
			model[o - 1].d += model[j].d;
		else
			model[o++] = model[j];
	}
	nmodel = 0;
	for (size_t j = 0; j < o; j++)
		if (model[j].d != 0)
			model[nmodel++] = model[j];
}

/* Checks the current (key, val) of c against the model at *i. */
static void check_val(ah_cursor *c, size_t *i, uint64_t since, uint64_t as_of,
                      const char *how)
{
	const void *k, *v;
	size_t kl, vl, want_n, n = 0;
	uint64_t want_ts, ts = 0, tm;
	int64_t got, again, walk = 0, d;

	cr_assert_lt(*i, nmodel, "seed %" PRIu64 " %s: more vals than the model",
	             seed, how);
	cr_assert_eq(ah_cursor_key(c, &k, &kl), 0);
	cr_assert_eq(ah_cursor_val(c, &v, &vl), 0);
	const up *m = &model[*i];
	cr_assert(fcmp(k, kl, m->k, m->kl) == 0 && fcmp(v, vl, m->v, m->vl) == 0,
	          "seed %" PRIu64 " %s as_of %" PRIu64 ": (key, val) #%zu differs",
	          seed, how, as_of, *i);
	int64_t want = model_pair(i, since, as_of, &want_n, &want_ts);
	cr_assert_eq(ah_cursor_accumulate(c, as_of, &got), 0);
	cr_assert_eq(ah_cursor_time_next(c, &tm, &d), 0,
	             "time_next after accumulate must say 0");
	cr_assert_eq(ah_cursor_times_rewind(c), 0);
	while (ah_cursor_time_next(c, &tm, &d) == 1) {
		n++;
		ts += tm;
		walk += tm <= as_of ? d : 0;
	}
	cr_assert_eq(ah_cursor_accumulate(c, as_of, &again), 0);
	cr_assert(got == want && walk == want && again == want,
	          "seed %" PRIu64 " %s as_of %" PRIu64 " since %" PRIu64
	          ": accumulate %" PRId64 ", walk %" PRId64 ", again %" PRId64
	          ", model %" PRId64, seed, how, as_of, since, got, walk, again,
	          want);
	cr_assert(n == want_n && ts == want_ts,
	          "seed %" PRIu64 " %s: %zu pairs (times %" PRIu64 "), model %zu (%"
	          PRIu64 ")", seed, how, n, ts, want_n, want_ts);
}

/* A whole scan at as_of through a fresh cursor (at: ah_cursor_open_at the
 * empty key, whose first chunks are checked page by page). */
static void scan(ah_heap *h, uint64_t since, uint64_t as_of, bool at)
{
	const char *how = at ? "open_at" : "open";
	ah_txn *t;
	ah_cursor *c;
	size_t i = 0;
	int rk, rv;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(at ? ah_cursor_open_at(t, NAME, "", 0, &c)
	                : ah_cursor_open(t, NAME, &c), 0);
	for (rk = ah_cursor_key_valid(c); rk == 1; rk = ah_cursor_step_key(c))
		for (rv = ah_cursor_val_valid(c); rv == 1; rv = ah_cursor_step_val(c))
			check_val(c, &i, since, as_of, how);
	cr_assert_eq(rk, 0, "seed %" PRIu64 " %s: %s", seed, how, ah_strerror(rk));
	cr_assert_eq(i, nmodel, "seed %" PRIu64 " %s as_of %" PRIu64
	             ": scan ended at update %zu of %zu", seed, how, as_of, i,
	             nmodel);
	cr_assert_eq(ah_cursor_close(c), 0);
	ah_txn_abort(t);
}

static void scan_all(ah_heap *h, uint64_t since)
{
	uint64_t upper = (uint64_t)NAPPEND * WINDOW;
	uint64_t as_of[] = { since, since + 1, upper / 2, 5 * WINDOW + 123,
	                     upper - 1 };

	for (size_t j = 0; j < sizeof as_of / sizeof *as_of; j++) {
		if (as_of[j] < since)
			continue;
		scan(h, since, as_of[j], false);
		scan(h, since, as_of[j], true);
	}
}

static uint64_t batches(ah_heap *h)
{
	ah_txn *t;
	ah_arrangement_info in;

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, NAME, &in), 0);
	ah_txn_abort(t);
	return in.batches;
}

static int count_chunk(const ah_chunk_info *ci, void *user)
{
	uint64_t *n = user;

	n[0]++;
	n[1] += ci->class_pages > 256; /* jumbo: beyond the largest class */
	return 0;
}

/* The shapes the test is about are there: several chunks per batch (the
 * wide key and the deep (key, val) are each larger than a chunk, so they
 * continue: KEY_CONT, VAL_CONT) and a jumbo chunk. */
static void assert_shapes(ah_heap *h, uint64_t nb)
{
	ah_txn *t;
	uint64_t n[2] = { 0, 0 };

	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_chunk_foreach(t, NAME, count_chunk, n), 0);
	ah_txn_abort(t);
	cr_assert_gt(n[0], nb + 2, "%" PRIu64 " chunks in %" PRIu64 " batches",
	             n[0], nb);
	cr_assert_geq(n[1], 1, "no jumbo chunk");
}

Test(api_scan, fast_paths_match_model_and_walk, .timeout = 600)
{
	tl_dir d = tl_tmpdir("scan");
	ah_heap *h = tl_open(d.dir, "heap", AH_OPEN_NOSYNC, 0);
	ah_txn *t;

	seed = tl_seed("api_scan/fast_paths_match_model_and_walk", 20261201);
	build(h);
	uint64_t nb = batches(h);
	cr_log_info("seed %" PRIu64 ": %zu updates in %" PRIu64 " batches",
	            seed, nmodel, nb);
	cr_assert_geq(nb, 3, "the test needs several batches, has %" PRIu64, nb);
	assert_shapes(h, nb);
	scan_all(h, 0);
	/* times below since are reported advanced to it */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_set_since(t, NAME, 5 * WINDOW + 77), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	scan_all(h, 5 * WINDOW + 77);
	/* one merged batch: the single-batch paths over consolidated data */
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_maintain(t, NAME, 0, NULL), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(batches(h), 1);
	assert_shapes(h, 1);
	model_consolidate(5 * WINDOW + 77);
	scan_all(h, 5 * WINDOW + 77);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}
