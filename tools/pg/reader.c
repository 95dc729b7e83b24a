/*
 * tools/pg/reader.c - views kept apart from the engine, over the same heap:
 *   reader:    a second reader (ARCHITECTURE.md section 12, "Second
 *              readers"): a separate process that maintains its own copies
 *              of views (named R.view.NAME) from the heap's tables at its
 *              own pace, behind the writer, with a durable read hold
 *              "reader.R" on every table it reads (tools/engine/reader.c)
 *              and its position stored as source "reader.R", so that a
 *              kill at any moment resumes where its views are;
 *   recompute: what an engine without persisted derived state pays at
 *              every restart: every view computed again from the tables at
 *              the heap's frontier (into arrangements of an aborted write
 *              transaction, so nothing is written), compared with the
 *              stored views.
 * The views a reader keeps are the heap's own (pg.views) unless its first
 * run names a view file (--views FILE; the column types then come from
 * the database, as for the engine's first run); they are stored as source
 * "reader.R.views" (the pg.views format) in the transaction that creates
 * the reader's arrangements, and a restart with another file is refused.
 *
 * It must never write anything but its own arrangements, hold and records,
 * never store a position its views have not reached (eg_reader_step does
 * both in one transaction), and recompute must never commit.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
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

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double ms_since(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a->tv_sec) * 1e3 + (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

static int read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	size_t n = 0, cap = 0, got;

	if (!f) {
		snprintf(err, errlen, "cannot read views file %s: %s", path, strerror(errno));
		return -1;
	}
	do {
		if (n + 4096 > cap) {
			char *q = realloc(p, cap = 2 * cap + 4096);
			if (!q) {
				free(p);
				fclose(f);
				snprintf(err, errlen, "out of memory");
				return -1;
			}
			p = q;
		}
		got = fread(p + n, 1, cap - n, f);
		n += got;
	} while (got > 0);
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(p);
		snprintf(err, errlen, "cannot read views file %s", path);
		return -1;
	}
	*out = p;
	*len = n;
	return 0;
}

/* The source record holding reader R's views: "reader.R.views". */
static void rec_name(char *buf, size_t len, const char *r)
{
	snprintf(buf, len, "reader.%s.views", r);
}

/* A reader name: [a-z0-9_], 1..13 bytes (R.view.NAME.N fits AH_NAME_MAX). */
static int reader_name_ok(const char *r)
{
	size_t n = strlen(r);

	return n >= 1 && n <= 13 && strspn(r, "abcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

/* Compiles reader R's views: the stored record, else the file (types from
 * the database), else the heap's pg.views; *fresh = 1 when nothing was
 * stored yet (the record goes into *rec for the first step's
 * transaction). */
static int reader_views(ah_heap *h, pg_stored *st, const char *r, const char *file,
                        const char *conninfo, views **vw, pg_buf *rec, int *fresh, char *err,
                        size_t errlen)
{
	char name[AH_NAME_MAX + 32], prefix[24];
	ah_txn *txn = NULL;
	const void *p;
	size_t len, tlen;
	const char *text;
	char *ftext = NULL;
	size_t flen = 0;
	pg_buf stored = { 0 };
	int have = 0, rc = -1;

	rec_name(name, sizeof name, r);
	snprintf(prefix, sizeof prefix, "%s.view.", r);
	*fresh = 0;
	if (file && read_file(file, &ftext, &flen, err, errlen))
		return -1;
	if ((rc = ah_txn_begin(h, AH_TXN_RDONLY, &txn)) == 0) {
		rc = ah_source_get(txn, name, &p, &len);
		if (rc == 0)
			rc = pg_buf_put(&stored, p, len) ? AH_ENOMEM : 0;
		else if (rc == AH_ENOTFOUND)
			rc = 1;
	}
	ah_txn_abort(txn);
	if (rc < 0) {
		snprintf(err, errlen, "reading the heap's %s: %s", name, ah_strerror(rc));
		goto out;
	}
	if (rc == 0) {
		/* a restart: the stored views, and --views must name the same file */
		if (views_record_parse((const char *)stored.p, stored.len, st->t, st->nt, &text, &tlen,
		                       err, errlen))
			goto fail;
		if (file && (tlen != flen || memcmp(text, ftext, flen))) {
			snprintf(err, errlen, "reader %s was started with other views than %s holds now: "
			         "start it without --views, or give it another --name", r, file);
			goto fail;
		}
		rc = views_compile_as(text, tlen, st->t, st->nt, prefix, vw, err, errlen) ? -1 : 0;
		goto out;
	}
	*fresh = 1;
	if (file) {
		pg_src src = { .conninfo = conninfo ? conninfo : "" };
		if (src_connect_sql(&src) || src_column_types(&src, st->t, st->nt)) {
			snprintf(err, errlen, "reading the column types: %.900s", src.err);
			src_close(&src);
			goto fail;
		}
		src_close(&src);
		text = ftext;
		tlen = flen;
	} else {
		if (stored_views(h, &stored, &have, err, errlen))
			goto fail;
		if (!have) {
			snprintf(err, errlen, "the heap has no views: give the reader its own with "
			         "--views FILE");
			goto fail;
		}
		if (views_record_parse((const char *)stored.p, stored.len, st->t, st->nt, &text, &tlen,
		                       err, errlen))
			goto fail;
	}
	if (views_compile_as(text, tlen, st->t, st->nt, prefix, vw, err, errlen) ||
	    views_record(*vw, st->t, st->nt, rec)) {
		if (!err[0])
			snprintf(err, errlen, "out of memory");
		goto fail;
	}
	rc = 0;
	goto out;
fail:
	rc = -1;
out:
	free(ftext);
	pg_buf_free(&stored);
	return rc;
}

/* Creates the reader's arrangements and stores its views, in one
 * transaction (before its first step); with reset, its arrangements are
 * dropped first, so the first step computes them anew from position 0
 * (its holds are set again there; the stored views stay). */
static int reader_create(ah_heap *h, views *vw, const char *r, const pg_buf *rec, int reset,
                         char *err, size_t errlen)
{
	char name[AH_NAME_MAX + 32];
	ah_txn *t = NULL;
	int rc;

	rec_name(name, sizeof name, r);
	if ((rc = ah_txn_begin(h, 0, &t)) != 0) {
		snprintf(err, errlen, "cannot begin a write transaction: %s", ah_strerror(rc));
		return -1;
	}
	for (size_t i = 0; reset && i < eg_node_count(views_graph(vw)); i++) {
		const char *o = eg_node_output(views_graph(vw), i);
		rc = ah_arrangement_drop(t, o);
		if (rc != 0 && rc != AH_ENOTFOUND) {
			snprintf(err, errlen, "dropping %s: %s", o, ah_strerror(rc));
			ah_txn_abort(t);
			return -1;
		}
	}
	if ((rc = eg_create(views_graph(vw), t)) != 0) {
		snprintf(err, errlen, "%s", eg_errmsg(views_graph(vw)));
		ah_txn_abort(t);
		return -1;
	}
	if (rec && (rc = ah_source_put(t, name, rec->p, rec->len)) != 0) {
		snprintf(err, errlen, "storing %s: %s", name, ah_strerror(rc));
		ah_txn_abort(t);
		return -1;
	}
	if ((rc = ah_txn_commit(t)) != 0) {
		snprintf(err, errlen, "commit: %s", ah_strerror(rc));
		return -1;
	}
	return 0;
}

static const char reader_usage[] =
	"usage: ah-pgsync reader HEAP --name R [--views FILE [-d CONNINFO]] [--lease MS]\n"
	"                        [--interval MS] [--until-lsn X/Y] [--reset]\n";

int cmd_reader(int argc, char **argv)
{
	const char *path = NULL, *r = NULL, *file = NULL, *conninfo = NULL;
	uint64_t lease = 60000, interval = 200, until = 0;
	int have_until = 0, fresh = 0, status = 1, reset = 0;
	ah_heap *h = NULL;
	pg_stored st = { 0 };
	views *vw = NULL;
	pg_buf rec = { 0 };
	char err[1024] = "", hold[AH_NAME_MAX + 1], l[32], lw[32];
	struct timespec t0, last;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--name") && i + 1 < argc)
			r = argv[++i];
		else if (!strcmp(argv[i], "--reset"))
			reset = 1;
		else if (!strcmp(argv[i], "--views") && i + 1 < argc)
			file = argv[++i];
		else if ((!strcmp(argv[i], "-d") || !strcmp(argv[i], "--dbname")) && i + 1 < argc)
			conninfo = argv[++i];
		else if (!strcmp(argv[i], "--lease") && i + 1 < argc)
			lease = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--interval") && i + 1 < argc)
			interval = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--until-lsn") && i + 1 < argc) {
			if (lsn_parse(argv[i + 1], strlen(argv[i + 1]), &until) != 0)
				return fprintf(stderr, "ah-pgsync reader: --until-lsn %s is not an LSN X/Y\n",
				               argv[i + 1]), 2;
			have_until = 1;
			i++;
		} else if (!path && argv[i][0] != '-')
			path = argv[i];
		else
			return fputs(reader_usage, stderr), 2;
	}
	if (!path || !r)
		return fputs(reader_usage, stderr), 2;
	if (!reader_name_ok(r))
		return fprintf(stderr, "ah-pgsync reader: --name %s: a reader name is 1 to 13 of "
		               "[a-z0-9_]\n", r), 2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	ah_open_opts o = { .size = sizeof o };
	int rc = ah_open(path, &o, &h);
	if (rc) {
		fprintf(stderr, "ah-pgsync reader: cannot open heap %s: %s\n", path, ah_strerror(rc));
		return 1;
	}
	if (stored_read(h, &st, err, sizeof err) || !st.have_lsn) {
		fprintf(stderr, "ah-pgsync reader: %s\n", st.have_lsn ? err : "the heap is empty");
		goto out;
	}
	if (reader_views(h, &st, r, file, conninfo, &vw, &rec, &fresh, err, sizeof err) != 0) {
		fprintf(stderr, "ah-pgsync reader %s: %s\n", r, err);
		goto out;
	}
	if ((fresh || reset) && reader_create(h, vw, r, fresh ? &rec : NULL, reset, err, sizeof err) != 0) {
		fprintf(stderr, "ah-pgsync reader %s: %s\n", r, err);
		goto out;
	}
	snprintf(hold, sizeof hold, "reader.%s", r);
	eg_graph *g = views_graph(vw);
	uint64_t pos = 0, steps = 0;
	int moved;
	last = t0;
	for (;;) {
		if ((rc = eg_reader_step(g, h, hold, lease, &pos, &moved)) != 0) {
			fprintf(stderr, "ah-pgsync reader %s: %s%s\n", r, eg_errmsg(g),
			        rc == AH_ECOMPACTED ? ": start it again with --reset" : "");
			goto out;
		}
		steps += moved;
		if (steps == 1 && moved) {
			lsn_fmt(pos - 1, l, sizeof l);
			fprintf(stderr, "ah-pgsync reader %s: %d views %s at LSN %s, %.1f ms after start\n",
			        r, views_count(vw), fresh || reset ? "computed" : "caught up", l,
			        ms_since(&t0));
		}
		if (have_until && pos > until)
			break;
		if (stop)
			break;
		if (ms_since(&last) >= 5000) {
			pg_stored now = { 0 };
			char e2[256];
			if (stored_read(h, &now, e2, sizeof e2) == 0 && now.have_lsn) {
				lsn_fmt(pos ? pos - 1 : 0, l, sizeof l);
				lsn_fmt(now.lsn, lw, sizeof lw);
				fprintf(stderr, "ah-pgsync reader %s: at LSN %s, the writer at %s\n", r, l, lw);
			}
			tables_free(now.t, now.nt);
			clock_gettime(CLOCK_MONOTONIC, &last);
		}
		if (!moved)
			usleep((useconds_t)(interval * 1000));
	}
	lsn_fmt(pos ? pos - 1 : 0, l, sizeof l);
	fprintf(stderr, "ah-pgsync reader %s: stopped at LSN %s after %" PRIu64 " steps\n", r, l,
	        steps);
	status = 0;
out:
	views_free(vw);
	pg_buf_free(&rec);
	tables_free(st.t, st.nt);
	if (h && ah_close(h) != 0)
		status = 1;
	return status;
}

/* ------------------------------------------------------------ recompute */

/* An order-free digest of NAME as of as_of: (key, val, count) hashed. */
static int digest(ah_txn *t, const char *name, uint64_t as_of, uint64_t *sum, int64_t *rows)
{
	ah_cursor *c = NULL;
	int rc = ah_cursor_open(t, name, &c);

	*sum = 0;
	*rows = 0;
	while (rc == 0 && ah_cursor_key_valid(c)) {
		const void *k, *v;
		size_t kl, vl;
		int64_t n;
		if ((rc = ah_cursor_key(c, &k, &kl)) != 0)
			break;
		while (rc == 0 && ah_cursor_val_valid(c)) {
			if ((rc = ah_cursor_val(c, &v, &vl)) != 0 ||
			    (rc = ah_cursor_accumulate(c, as_of, &n)) != 0)
				break;
			if (n) {
				uint64_t hk = XXH3_64bits_withSeed(k, kl, kl);
				*sum += XXH3_64bits_withSeed(v, vl, hk) * (uint64_t)n;
				*rows += n;
			}
			if ((rc = ah_cursor_step_val(c)) > 0)
				rc = 0;
		}
		if (rc == 0 && (rc = ah_cursor_step_key(c)) > 0)
			rc = 0;
	}
	int crc = ah_cursor_close(c);
	return rc ? rc : crc;
}

int cmd_recompute(int argc, char **argv)
{
	ah_heap *h = NULL;
	ah_txn *t = NULL;
	pg_stored st = { 0 };
	pg_buf rec = { 0 };
	views *vw = NULL, *mine = NULL;
	const char *text;
	size_t tlen;
	char err[1024], l[32];
	int have = 0, status = 1, ndiff = 0, rc;
	struct timespec t0;

	if (argc != 2)
		return fputs("usage: ah-pgsync recompute HEAP\n", stderr), 2;
	ah_open_opts o = { .size = sizeof o };
	if ((rc = ah_open(argv[1], &o, &h)) != 0) {
		fprintf(stderr, "ah-pgsync recompute: cannot open heap %s: %s\n", argv[1],
		        ah_strerror(rc));
		return 1;
	}
	if (stored_read(h, &st, err, sizeof err) || !st.have_lsn ||
	    stored_views(h, &rec, &have, err, sizeof err)) {
		fprintf(stderr, "ah-pgsync recompute: %s\n", st.have_lsn ? err : "the heap is empty");
		goto out;
	}
	if (!have) {
		fprintf(stderr, "ah-pgsync recompute: heap %s has no views\n", argv[1]);
		goto out;
	}
	if (views_record_parse((const char *)rec.p, rec.len, st.t, st.nt, &text, &tlen, err,
	                       sizeof err) ||
	    views_compile(text, tlen, st.t, st.nt, &vw, err, sizeof err) ||
	    views_compile_as(text, tlen, st.t, st.nt, "recompute.", &mine, err, sizeof err)) {
		fprintf(stderr, "ah-pgsync recompute: heap %s: %s\n", argv[1], err);
		goto out;
	}
	/* timed: what a restart without stored views does before its first
	 * answer (make the arrangements, compute every view from the tables) */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	eg_graph *g = views_graph(mine);
	if ((rc = ah_txn_begin(h, 0, &t)) != 0 || (rc = eg_create(g, t)) != 0 ||
	    (rc = eg_step(g, t, 0, st.lsn + 1)) != 0) {
		fprintf(stderr, "ah-pgsync recompute: %s\n",
		        eg_errmsg(g)[0] ? eg_errmsg(g) : ah_strerror(rc));
		goto out;
	}
	double ms = ms_since(&t0);
	eg_stats es;
	eg_stats_get(g, &es);
	lsn_fmt(st.lsn, l, sizeof l);
	printf("recomputed %d views from the tables at LSN %s in %.1f ms (%" PRIu64
	       " input updates read, %" PRIu64 " view updates made)\n",
	       views_count(vw), l, ms, es.delta_updates + es.state_updates, es.appended);
	for (int i = 0; i < views_count(vw); i++) {
		uint64_t a, b;
		int64_t ra, rb;
		if ((rc = digest(t, views_arrangement(vw, i), st.lsn, &a, &ra)) != 0 ||
		    (rc = digest(t, views_arrangement(mine, i), st.lsn, &b, &rb)) != 0) {
			fprintf(stderr, "ah-pgsync recompute: reading %s: %s\n", views_arrangement(vw, i),
			        ah_strerror(rc));
			goto out;
		}
		ndiff += a != b || ra != rb;
		printf("%s: stored %" PRId64 " rows, recomputed %" PRId64 " rows: %s\n",
		       views_arrangement(vw, i), ra, rb, a == b && ra == rb ? "equal" : "DIFFERENT");
	}
	printf("%s\n", ndiff ? "DIFFERENT: a stored view differs from its recomputation"
	                     : "every stored view equals its recomputation");
	status = ndiff ? 1 : 0;
out:
	ah_txn_abort(t);  /* never committed: nothing of the recomputation stays */
	views_free(vw);
	views_free(mine);
	pg_buf_free(&rec);
	tables_free(st.t, st.nt);
	if (h && ah_close(h) != 0)
		status = 1;
	return status;
}
