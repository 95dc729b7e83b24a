/*
 * tools/pg/verify.c - the read-only commands of ah-pgsync:
 *   verify: every table equals its arrangement at the heap's frontier,
 *           compared as multisets of (key, val) through two 64-bit sums of
 *           XXH3 hashes (order-free, so neither side is sorted) plus counts;
 *           every table is compared and reported, the differing ones named
 *           with what differs (row counts, or contents);
 *   status: the stored LSN, identity and arrangements;
 *   wait:   polls the stored LSN until it reaches a target.
 * They open the heap read-only, so they may run beside the engine.
 *
 * It must never call a table equal unless both hash sums and the row counts
 * agree, never stop at the first difference, and never write the heap or the
 * database: the heap is opened read-only and the tables are read by COPY TO
 * in one REPEATABLE READ transaction.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "tools/pg/engine.h"
#include "tools/pg/source.h"
#include "tools/pg/views.h"

typedef struct digest {
	uint64_t a, b;
	int64_t rows;
} digest;

static void digest_add(digest *d, const void *k, size_t kl, const void *v, size_t vl, int64_t m)
{
	uint64_t ha = XXH3_64bits_withSeed(v, vl, XXH3_64bits_withSeed(k, kl, 0x9e3779b97f4a7c15u));
	uint64_t hb = XXH3_64bits_withSeed(v, vl, XXH3_64bits_withSeed(k, kl, 0x2545f4914f6cdd1du) ^ kl);

	d->a += ha * (uint64_t)m;
	d->b += hb * (uint64_t)m;
	d->rows += m;
}

static int open_ro(const char *path, ah_heap **h)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	int rc = ah_open(path, &o, h);

	if (rc)
		fprintf(stderr, "ah-pgsync: cannot open heap %s: %s\n", path, ah_strerror(rc));
	return rc;
}

/* Every cursor call is checked (a step returns 1 on a key or val, 0 at the
 * end, < 0 an error): a damaged heap is an error, never a short digest. */
static int heap_digest(ah_txn *txn, const char *name, uint64_t as_of, digest *d)
{
	ah_cursor *c = NULL;
	int rc;

	if ((rc = ah_cursor_open(txn, name, &c)) ||
	    (rc = ah_cursor_rewind_keys(c)) < 0)  /* positions it: an error shows here */
		goto out;
	while (ah_cursor_key_valid(c)) {
		while (ah_cursor_val_valid(c)) {
			const void *k, *v;
			size_t kl, vl;
			int64_t sum;
			if ((rc = ah_cursor_key(c, &k, &kl)) || (rc = ah_cursor_val(c, &v, &vl)) ||
			    (rc = ah_cursor_accumulate(c, as_of, &sum)))
				goto out;
			if (sum)
				digest_add(d, k, kl, v, vl, sum);
			if ((rc = ah_cursor_step_val(c)) < 0)
				goto out;
		}
		if ((rc = ah_cursor_step_key(c)) < 0)
			goto out;
	}
	rc = 0;
out:
	ah_cursor_close(c);
	return rc;
}

/* One read snapshot of the heap for every digest, and the LSN it is at:
 * with views every commit compacts to its LSN, so digests taken in later
 * snapshots at an earlier LSN would find it compacted away. */
static int heap_snapshot(ah_heap *h, ah_txn **txn, uint64_t *lsn)
{
	const void *p;
	size_t len;
	int rc = ah_txn_begin(h, AH_TXN_RDONLY, txn);

	if (rc == 0 && (rc = ah_source_get(*txn, "pg.lsn", &p, &len)) == 0 &&
	    lsn_parse(p, len, lsn) != 0)
		rc = AH_ECORRUPT;
	return rc;
}

typedef struct vctx {
	sink s;
	pg_table *t;
	pg_field *f;
	digest d;
} vctx;

static int verify_row(void *ctx, char *line, size_t len)
{
	vctx *v = ctx;
	size_t kl;

	if (row_copy_split(line, len, v->f, v->t->ncols) != 0 || sink_encode(&v->s, v->t, v->f, &kl))
		return -1;
	digest_add(&v->d, v->s.kv.p, kl, v->s.kv.p + kl, v->s.kv.len - kl, 1);
	return 0;
}

typedef struct qctx {
	const views *vw;
	int i, n;
	pg_field *f;
	pg_buf kv;
	digest d;
} qctx;

static int query_row(void *ctx, char *line, size_t len)
{
	qctx *q = ctx;
	size_t kl;

	if (row_copy_split(line, len, q->f, q->n) != 0 || views_encode(q->vw, q->i, q->f, &q->kv, &kl))
		return -1;
	digest_add(&q->d, q->kv.p, kl, q->kv.p + kl, q->kv.len - kl, 1);
	return 0;
}

/* What differs, for a table whose digests differ. */
static void describe(char *buf, size_t len, const digest *table, const digest *heap)
{
	int64_t d = heap->rows - table->rows;

	if (d == 0)
		snprintf(buf, len, "same number of rows, other contents");
	else
		snprintf(buf, len, "the heap has %" PRId64 " row%s %s", d < 0 ? -d : d,
		         d == 1 || d == -1 ? "" : "s", d < 0 ? "fewer" : "more");
}

/* Compares every table, also past a difference: one line per table, then a
 * summary naming each differing table; exit 1 if any differs. */
int cmd_verify(int argc, char **argv)
{
	pg_src src = { .conninfo = "" };
	const char *path = NULL;
	ah_heap *h = NULL;
	pg_stored st = { 0 };
	vctx v = { 0 };
	pg_buf names = { 0 }, names_v = { 0 };
	views *vw = NULL;
	ah_txn *snap = NULL;
	char err[1024], l[32], what[100];
	int64_t total = 0;
	int status = 1, rc, ndiff = 0, have_views = 0;

	for (int i = 1; i < argc; i++) {
		if ((!strcmp(argv[i], "-d") || !strcmp(argv[i], "--dbname")) && i + 1 < argc)
			src.conninfo = argv[++i];
		else if (!path && argv[i][0] != '-')
			path = argv[i];
		else
			return fputs("usage: ah-pgsync verify [-d CONNINFO] HEAP\n", stderr), 2;
	}
	if (!path)
		return fputs("usage: ah-pgsync verify [-d CONNINFO] HEAP\n", stderr), 2;
	if (open_ro(path, &h))
		return 1;
	if (stored_read(h, &st, err, sizeof err) || !st.have_lsn) {
		fprintf(stderr, "ah-pgsync verify: %s\n", st.have_lsn ? err : "the heap is empty");
		goto out;
	}
	if (src_connect_sql(&src) || src_copy_begin(&src, NULL)) {
		fprintf(stderr, "ah-pgsync verify: %s\n", src.err);
		goto out;
	}
	if (st.settings[0] && settings_diff(st.settings, src.settings, err, err + 512, 512)) {
		fprintf(stderr, "ah-pgsync verify: heap %s was made with the text setting %s, this "
		        "connection has %s: the comparison would be meaningless\n", path, err, err + 512);
		goto out;
	}
	if ((rc = heap_snapshot(h, &snap, &st.lsn)) != 0) {
		fprintf(stderr, "ah-pgsync verify: reading heap %s: %s\n", path, ah_strerror(rc));
		goto out;
	}
	lsn_fmt(st.lsn, l, sizeof l);
	for (int i = 0; i < st.nt; i++) {
		digest hd = { 0 };
		v.t = &st.t[i];
		memset(&v.d, 0, sizeof v.d);
		if (!(v.f = calloc((size_t)v.t->ncols, sizeof *v.f))) {
			fprintf(stderr, "ah-pgsync verify: out of memory\n");
			goto out;
		}
		rc = src_copy(&src, v.t, verify_row, &v);
		free(v.f);
		if (rc) {
			fprintf(stderr, "ah-pgsync verify: %s\n", src.err);
			goto out;
		}
		if ((rc = heap_digest(snap, v.t->name, st.lsn, &hd))) {
			fprintf(stderr, "ah-pgsync verify: reading %s: %s\n", v.t->name, ah_strerror(rc));
			goto out;
		}
		int same = hd.a == v.d.a && hd.b == v.d.b && hd.rows == v.d.rows;
		if (!same) {
			describe(what, sizeof what, &v.d, &hd);
			if ((ndiff++ && pg_buf_put(&names, ", ", 2)) ||
			    pg_buf_put(&names, v.t->name, strlen(v.t->name))) {
				fprintf(stderr, "ah-pgsync verify: out of memory\n");
				goto out;
			}
		}
		printf("%s: table %" PRId64 " rows, heap %" PRId64 " rows at LSN %s: %s%s%s\n",
		       v.t->name, v.d.rows, hd.rows, l, same ? "equal" : "DIFFERENT (",
		       same ? "" : what, same ? "" : ")");
		total += v.d.rows;
	}
	/* the views: each one's SELECT in the same snapshot, against its
	 * arrangement at the frontier, as multisets of (key, val) */
	if (stored_views(h, &names_v, &have_views, err, sizeof err) != 0) {
		fprintf(stderr, "ah-pgsync verify: %s\n", err);
		goto out;
	}
	if (have_views) {
		const char *text;
		size_t tlen;
		if (views_record_parse((const char *)names_v.p, names_v.len, st.t, st.nt, &text, &tlen,
		                       err, sizeof err) ||
		    views_compile(text, tlen, st.t, st.nt, &vw, err, sizeof err)) {
			fprintf(stderr, "ah-pgsync verify: heap %s: %s\n", path, err);
			goto out;
		}
	}
	for (int i = 0; i < views_count(vw); i++) {
		digest hd = { 0 };
		const char *sql = views_sql(vw, i), *name = views_arrangement(vw, i);
		qctx q = { .vw = vw, .i = i };
		q.n = views_columns(vw, i);
		if (!(q.f = calloc((size_t)q.n + 1, sizeof *q.f))) {
			fprintf(stderr, "ah-pgsync verify: out of memory\n");
			goto out;
		}
		rc = src_copy_query(&src, sql, query_row, &q);
		free(q.f);
		pg_buf_free(&q.kv);
		if (rc) {
			fprintf(stderr, "ah-pgsync verify: view %s: %s\n", name, src.err);
			goto out;
		}
		if ((rc = heap_digest(snap, name, st.lsn, &hd))) {
			fprintf(stderr, "ah-pgsync verify: reading %s: %s\n", name, ah_strerror(rc));
			goto out;
		}
		int same = hd.a == q.d.a && hd.b == q.d.b && hd.rows == q.d.rows;
		if (!same) {
			describe(what, sizeof what, &q.d, &hd);
			if ((ndiff++ && pg_buf_put(&names, ", ", 2)) || pg_buf_put(&names, name, strlen(name))) {
				fprintf(stderr, "ah-pgsync verify: out of memory\n");
				goto out;
			}
		}
		printf("%s: query %" PRId64 " rows, heap %" PRId64 " rows at LSN %s: %s%s%s\n", name,
		       q.d.rows, hd.rows, l, same ? "equal" : "DIFFERENT (", same ? "" : what,
		       same ? "" : ")");
	}
	src_copy_end(&src);
	if (ndiff) {
		printf("DIFFERENT: %d of %d tables%s differ from the database at LSN %s: %.*s\n",
		       ndiff, st.nt + views_count(vw), views_count(vw) ? " and views" : "", l,
		       (int)names.len, (const char *)names.p);
		goto out;
	}
	printf("verified: %d tables, %" PRId64 " rows%s equal to the database at LSN %s\n", st.nt,
	       total, views_count(vw) ? (views_count(vw) == 1 ? " and 1 view" : " and the views") : "", l);
	status = 0;
out:
	ah_txn_abort(snap);
	views_free(vw);
	pg_buf_free(&names_v);
	pg_buf_free(&names);
	pg_buf_free(&v.s.kv);
	src_close(&src);
	tables_free(st.t, st.nt);
	if (h)
		ah_close(h);
	return status;
}

int cmd_status(int argc, char **argv)
{
	ah_heap *h = NULL;
	ah_txn *txn = NULL;
	pg_stored st;
	char err[1024], l[32];

	if (argc != 2)
		return fputs("usage: ah-pgsync status HEAP\n", stderr), 2;
	if (open_ro(argv[1], &h))
		return 1;
	if (stored_read(h, &st, err, sizeof err) || !st.have_lsn) {
		fprintf(stderr, "ah-pgsync status: %s\n", st.have_lsn ? err : "the heap is empty");
		ah_close(h);
		return 1;
	}
	lsn_fmt(st.lsn, l, sizeof l);
	printf("lsn %s\ntxns %" PRIu64 "\nupdates %" PRIu64 "\n%s", l, st.txns, st.updates,
	       st.identity);
	ah_txn_begin(h, AH_TXN_RDONLY, &txn);
	for (int i = 0; txn && i < st.nt; i++) {
		ah_arrangement_info in;
		if (ah_arrangement_info_get(txn, st.t[i].name, &in) == 0)
			printf("table %s.%s: arrangement %s, upper %" PRIu64 ", %" PRIu64 " updates in %"
			       PRIu64 " batches\n", pg_disp(st.t[i].nsp), pg_disp(st.t[i].rel),
			       st.t[i].name, in.upper,
			       in.updates, in.batches);
	}
	ah_txn_abort(txn);
	tables_free(st.t, st.nt);
	ah_close(h);
	return 0;
}

int cmd_wait(int argc, char **argv)
{
	ah_heap *h = NULL;
	uint64_t target;
	double secs = argc > 3 ? atof(argv[3]) : 60;
	struct timespec t0, t;
	char err[1024], l[32];

	if (argc < 3 || argc > 4 || lsn_parse(argv[2], strlen(argv[2]), &target))
		return fputs("usage: ah-pgsync wait HEAP LSN [SECONDS]\n", stderr), 2;
	if (open_ro(argv[1], &h))
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		pg_stored st;
		int rc = stored_read(h, &st, err, sizeof err);
		tables_free(st.t, st.nt);
		if (rc == 0 && st.have_lsn && st.lsn >= target) {
			lsn_fmt(st.lsn, l, sizeof l);
			printf("%s\n", l);
			ah_close(h);
			return 0;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 > secs) {
			fprintf(stderr, "ah-pgsync wait: the heap did not reach LSN %s in %.0f s\n",
			        argv[2], secs);
			ah_close(h);
			return 1;
		}
		usleep(50000);
	}
}
