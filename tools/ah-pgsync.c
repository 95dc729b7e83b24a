/*
 * tools/ah-pgsync.c - keeps the tables of a PostgreSQL publication as
 * arrangements in a heap, through logical replication (pgoutput), and
 * resumes from the heap's stored LSN after any stop or crash.
 *
 *   ah-pgsync [-d CONNINFO] [--slot S] [--publication P] HEAP   sync
 *   ah-pgsync verify [-d CONNINFO] HEAP    heap at its frontier == tables
 *   ah-pgsync status HEAP                  stored LSN, identity, tables
 *   ah-pgsync wait HEAP LSN [SECONDS]      until the heap reaches LSN
 *
 * First run: creates slot S with an exported snapshot, COPYs every
 * published table inside it as each arrangement's first batch at the
 * slot's consistent point, then streams.  Later runs start replication at
 * the stored LSN.  A table created after the slot is followed when
 * tools/pg/follow.c proves the stream holds all its rows.  Groups of
 * source transactions are committed to the heap with the LSN
 * (tools/pg/sink.h, over the engine shared with ah-load,
 * tools/common/ingest.h); only then is the LSN confirmed to the server as
 * flushed, never before (with --confirm-after-snapshot DIR, only once a
 * snapshot in DIR holds it too).  ARCHITECTURE.md section 12 has the
 * contract.
 *
 * A thin program over include/arrheap.h and libpq.  Exit status: 0 stopped
 * by SIGTERM/SIGINT after its last commit, 1 an error (one line on stderr
 * naming the cause and the fix), 2 a usage error.
 *
 * It must never confirm a flush position to the server beyond what a
 * committed heap transaction holds (status() sends the sink's committed
 * LSN; with --confirm-after-snapshot DIR, the lesser of it and the pg.lsn
 * of this heap's newest whole snapshot in DIR), and never replace an
 * existing heap on a first run: the copy is built under HEAP.creating.<pid>
 * and published with RENAME_NOREPLACE (or link).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <libgen.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "arrheap.h"
#include "tools/pg/engine.h"
#include "tools/pg/pgoutput.h"
#include "tools/pg/source.h"
#include "tools/pg/views.h"
#include "tools/pg/viewsql.h"

typedef struct engine {
	const char *heap_path;
	/* --views FILE (first run; a restart compares it with pg.views) and
	 * the compiled views (from the file or from pg.views) */
	const char *views_path;
	char *views_file;
	size_t views_flen;
	views *vw;
	int group_ms, group_txns, retry_s;
	pg_src src;
	sink snk;
	po_decoder dec;
	pg_stored st;
	uint64_t start_lsn;
	uint64_t reported;   /* the write position last sent to the server */
	/* --confirm-after-snapshot DIR: confirm only what a snapshot in DIR
	 * holds (snap_lsn, have_snap), never less than the slot's
	 * confirmed_flush_lsn at connect (floor) and never past snk.pos */
	const char *snap_dir;
	uint8_t uuid[16];
	int have_uuid, have_snap, snap_warned;
	uint64_t snap_lsn, floor;
	uint64_t confirmed;  /* the flush position last sent */
	char snap_id[AH_SNAPSHOT_ID_MAX];
	struct timespec last_snap_read;
	struct timespec t0, last_flush, last_status, last_progress;
	uint64_t prog_txns, prog_updates;
	int tty, progress_shown;
	char err[2048];
} engine;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static double ms_since(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a->tv_sec) * 1e3 + (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

static int efail(engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int efail(engine *e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->err, sizeof e->err, fmt, ap);
	va_end(ap);
	return -1;
}

static void usage(FILE *f)
{
	fputs("usage: ah-pgsync [-d CONNINFO] [--slot NAME] [--publication NAME]\n"
	      "                 [--group-ms N] [--group-txns N] [--retry-secs N]\n"
	      "                 [--confirm-after-snapshot DIR] [--views FILE] HEAP\n"
	      "       ah-pgsync verify [-d CONNINFO] HEAP\n"
	      "       ah-pgsync status HEAP\n"
	      "       ah-pgsync wait HEAP LSN [SECONDS]\n"
	      "       ah-pgsync reader HEAP --name R [--views FILE [-d CONNINFO]] [--lease MS]\n"
	      "                 [--interval MS] [--until-lsn X/Y] [--reset]\n"
	      "       ah-pgsync recompute HEAP\n"
	      "       ah-pgsync --help | --version\n"
	      "Keeps the tables of publication NAME (default ah_pgsync) as arrangements in HEAP\n"
	      "through logical replication slot NAME (default ah_pgsync; pgoutput), resuming from\n"
	      "the heap's stored LSN.  Tables need REPLICA IDENTITY FULL.  SIGTERM/SIGINT stop it\n"
	      "after its current commit.  The settings that shape a value's text form (DateStyle,\n"
	      "TimeZone, IntervalStyle, extra_float_digits, bytea_output, lc_monetary, search_path,\n"
	      "client encoding) are fixed whatever PGTZ, PGDATESTYLE, PGCLIENTENCODING, PGOPTIONS\n"
	      "or CONNINFO say, and recorded in the heap: a restart with others is refused.\n"
	      "In a FOR ALL TABLES publication, tables created after the slot are followed; a\n"
	      "change it cannot follow (a table that existed before joining the publication, a\n"
	      "column change) stops it with an error that says how much WAL the slot holds.\n"
	      "verify compares every table with its arrangement at the heap's frontier: one line\n"
	      "per table (equal, or DIFFERENT and what differs), then \"verified\" or a line naming\n"
	      "each differing table; exit 1 if any differs.\n"
	      "Views (--views FILE, first run only: stored in the heap as pg.views, a restart\n"
	      "needs no flag and refuses another file): statements\n"
	      "  CREATE VIEW name AS SELECT col | count(*) | count(col) | sum(col) | min(col)\n"
	      "    | max(col) [AS label], ... FROM [schema.]table [alias] [[INNER] JOIN table\n"
	      "    [alias] ON a.col = b.col]... [GROUP BY col, ...];\n"
	      "kept as arrangement view.NAME in the same commits as the tables (key = GROUP BY\n"
	      "columns, val = the aggregates; without GROUP BY key = the columns, val empty).\n"
	      "sum/min/max take int2, int4, int8, numeric; count any type; GROUP BY and join\n"
	      "columns int2/4/8, oid, text, varchar, name, bool, date, time, timestamp(tz),\n"
	      "uuid, bytea; aggregates need GROUP BY.  verify checks every view too.  With views,\n"
	      "every commit also advances since (logical compaction) of the tables and views to\n"
	      "the heap's LSN, but never past a reader's hold.\n"
	      "reader: a second reader, another process: keeps its own copies of the heap's\n"
	      "views (or of FILE's, named at its first run) as R.view.NAME, behind the engine\n"
	      "at its own pace (every MS, default 200), holding read hold reader.R on each table\n"
	      "it reads (lease MS, default 60000: renewed at every step) and storing its position\n"
	      "as source reader.R; a restart resumes there.  One that stayed away past its lease\n"
	      "while the tables were compacted past it is refused; --reset computes its views anew.\n"
	      "recompute: computes every view again from the tables at the heap's frontier in a\n"
	      "transaction it aborts (it holds the writer lock meanwhile), prints the time, and\n"
	      "compares each with the stored view; exit 1 if one differs.\n"
	      "Confirmation: by default the slot is told flushed what the heap has committed.\n"
	      "With --confirm-after-snapshot DIR (a run option: give it at every run) only up to\n"
	      "the LSN of this heap's newest snapshot in DIR (ah-snapshot push HEAP DIR; re-read\n"
	      "every second), so the slot keeps the WAL a heap restored from DIR needs; before\n"
	      "the first push, nothing past the slot's confirmed_flush_lsn.\n"
	      "The server needs wal_level=logical and a role with REPLICATION; the slot\n"
	      "retains WAL while the engine is stopped (man ah-pgsync).\n", f);
}


/* ---- the heap ---------------------------------------------------------- */

/* Removes HEAP.creating.PID (and its -lock) left by first runs that died
 * (kill -9 in the copy): only those whose PID no process has, so a
 * concurrent first run's copy in progress is never touched. */
static void remove_stale_copies(const char *heap)
{
	char dirbuf[4096], basebuf[4096], prefix[4200], path[8400];
	DIR *d;
	struct dirent *de;

	snprintf(dirbuf, sizeof dirbuf, "%s", heap);
	snprintf(basebuf, sizeof basebuf, "%s", heap);
	const char *dir = dirname(dirbuf), *base = basename(basebuf);
	snprintf(prefix, sizeof prefix, "%s.creating.", base);
	if (!(d = opendir(dir)))
		return;
	while ((de = readdir(d)) != NULL) {
		size_t pl = strlen(prefix);
		char *end;
		if (strncmp(de->d_name, prefix, pl) != 0)
			continue;
		long pid = strtol(de->d_name + pl, &end, 10);
		if (end == de->d_name + pl || pid <= 0 || (*end && strcmp(end, "-lock")))
			continue;
		if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
}

/* A lookup at the frontier: the first key of an arrangement. */
static int first_lookup(ah_heap *h, const char *name, uint64_t as_of)
{
	ah_txn *txn = NULL;
	ah_cursor *c = NULL;
	int64_t sum = 0;
	int rc;

	if ((rc = ah_txn_begin(h, AH_TXN_RDONLY, &txn)) == 0 &&
	    (rc = ah_cursor_open(txn, name, &c)) == 0 && (rc = ah_cursor_rewind_keys(c)) >= 0)
		rc = ah_cursor_key_valid(c) ? ah_cursor_accumulate(c, as_of, &sum) : 0;
	ah_cursor_close(c);
	ah_txn_abort(txn);
	return rc;
}

/* A restart: the views of pg.views, compiled against the stored tables
 * and types; --views must name the same file, and a heap made without
 * views takes none. */
static int load_views(engine *e)
{
	pg_buf rec = { 0 };
	const char *text;
	size_t tlen;
	char err[1024];
	int have, rc = -1;

	if (stored_views(e->snk.ig.heap, &rec, &have, err, sizeof err) != 0) {
		efail(e, "%s", err);
		goto out;
	}
	if (!have) {
		rc = e->views_path ? efail(e, "heap %s was made without views, and views are made only "
		                           "with a new heap: start without --views, or make a new heap "
		                           "(another file and --slot) with --views %s", e->heap_path,
		                           e->views_path) : 0;
		goto out;
	}
	if (views_record_parse((const char *)rec.p, rec.len, e->st.t, e->st.nt, &text, &tlen, err,
	                       sizeof err) != 0) {
		efail(e, "heap %s: %s", e->heap_path, err);
		goto out;
	}
	if (e->views_path && (tlen != e->views_flen || memcmp(text, e->views_file, tlen))) {
		efail(e, "heap %s was made with other views than %s holds now (the heap's are in its "
		      "pg.views record): start without --views, or make a new heap for these views",
		      e->heap_path, e->views_path);
		goto out;
	}
	if (views_compile(text, tlen, e->st.t, e->st.nt, &e->vw, err, sizeof err) != 0) {
		efail(e, "heap %s: its stored views do not compile: %s", e->heap_path, err);
		goto out;
	}
	rc = 0;
out:
	pg_buf_free(&rec);
	return rc;
}

/* Resume: the stored records, and the time to the first answered query
 * (a lookup of the first key of the first arrangement at the frontier). */
static int open_existing(engine *e)
{
	ah_open_opts o = { .size = sizeof o };
	ah_txn *txn = NULL;
	ah_cursor *c = NULL;
	char name[AH_NAME_MAX + 1], l[32];
	int64_t sum = 0;
	int rc;

	if ((rc = ah_open(e->heap_path, &o, &e->snk.ig.heap)) != 0)
		return efail(e, "cannot open heap %s: %s", e->heap_path, ah_strerror(rc));
	if (stored_read(e->snk.ig.heap, &e->st, e->err, sizeof e->err) != 0)
		return -1;
	if (!e->st.have_lsn)
		return efail(e, "heap %s holds no ah-pgsync stream: give a new file name", e->heap_path);
	if (load_views(e) != 0)
		return -1;
	if ((rc = ah_txn_begin(e->snk.ig.heap, AH_TXN_RDONLY, &txn)) == 0 &&
	    (rc = ah_arrangement_next(txn, NULL, name)) == 0 &&
	    (rc = ah_cursor_open(txn, name, &c)) == 0 && (rc = ah_cursor_rewind_keys(c)) >= 0)
		rc = ah_cursor_key_valid(c) ? ah_cursor_accumulate(c, e->st.lsn, &sum) : 0;
	ah_cursor_close(c);
	ah_txn_abort(txn);
	if (rc != 0 && rc != AH_ENOTFOUND)
		return efail(e, "reading heap %s: %s", e->heap_path, ah_strerror(rc));
	lsn_fmt(e->st.lsn, l, sizeof l);
	fprintf(stderr, "ah-pgsync: heap %s at LSN %s, %d tables: first query answered %.1f ms "
	        "after start\n", e->heap_path, l, e->st.nt, ms_since(&e->t0));
	if (e->vw) {
		/* a view is read as stored: nothing is recomputed at a restart */
		if ((rc = first_lookup(e->snk.ig.heap, views_arrangement(e->vw, 0), e->st.lsn)) != 0)
			return efail(e, "reading view %s: %s", views_arrangement(e->vw, 0), ah_strerror(rc));
		fprintf(stderr, "ah-pgsync: %d views; first view query (%s) answered %.1f ms after "
		        "start\n", views_count(e->vw), views_arrangement(e->vw, 0), ms_since(&e->t0));
	}
	e->snk.t = e->st.t;
	e->snk.nt = e->st.nt;
	e->st.t = NULL;
	e->st.nt = 0;
	if (sink_start(&e->snk) != 0)
		return efail(e, "%s", e->snk.err);
	e->snk.views = e->vw ? views_graph(e->vw) : NULL;
	e->snk.pos = e->snk.group_pos = e->st.lsn;
	e->snk.total_txns = e->st.txns;
	e->snk.total_updates = e->st.updates;
	return 0;
}

/* Checks that the heap follows this server's database, slot and
 * publication, and that the slot still has what the heap needs. */
static int check_source(engine *e)
{
	char id[1024], want[300], have[300], l1[32], l2[32];
	pg_slot sl;

	identity_fmt(id, sizeof id, e->src.sysid, e->src.dbname, e->src.slot, e->src.pub);
	if (strcmp(id, e->st.identity) != 0) {
		identity_get(e->st.identity, "system", want, 64);
		identity_get(e->st.identity, "database", want + 64, 200);
		if (strcmp(want, e->src.sysid) || strcmp(want + 64, e->src.dbname))
			return efail(e, "heap %s belongs to database %s of system %s, not %s of system %s: "
			             "give another heap file or --dbname", e->heap_path, want + 64, want,
			             e->src.dbname, e->src.sysid);
		identity_get(e->st.identity, "slot", want, 100);
		identity_get(e->st.identity, "publication", want + 100, 100);
		snprintf(have, sizeof have, "%s", e->src.slot);
		return efail(e, "heap %s follows slot %s and publication %s, not %s and %s: pass "
		             "--slot %s --publication %s", e->heap_path, want, want + 100, have,
		             e->src.pub, want, want + 100);
	}
	if (!e->st.settings[0]) {
		/* made before pg.settings: recorded with the next commit */
		e->snk.settings = e->src.settings;
	} else if (settings_diff(e->st.settings, e->src.settings, want, have, 100)) {
		return efail(e, "heap %s was made with the text setting %s, this connection has %s: "
		             "values would print otherwise and its rows could not be retracted; run "
		             "the ah-pgsync that made it, or make a new heap (delete %s)",
		             e->heap_path, want, have, e->heap_path);
	}
	if (e->st.have_snapshot && e->src.pub_oid != e->st.pub_oid)
		return efail(e, "publication %s was dropped and re-created since heap %s was made "
		             "(OID %" PRIu32 ", now %" PRIu32 "), so the stream may lack changes the "
		             "heap needs: make a new heap and slot", e->src.pub, e->heap_path,
		             e->st.pub_oid, e->src.pub_oid);
	if (src_slot(&e->src, &sl) != 0)
		return efail(e, "%s", e->src.err);
	lsn_fmt(e->snk.pos, l1, sizeof l1);
	if (!sl.exists)
		return efail(e, "replication slot %s does not exist, so the WAL after the heap's LSN %s "
		             "is gone: make a new heap (delete %s) to start over", e->src.slot, l1,
		             e->heap_path);
	if (strcmp(sl.plugin, "pgoutput") || strcmp(sl.database, e->src.dbname))
		return efail(e, "replication slot %s is for plugin %s in database %s, not pgoutput in %s: "
		             "use another --slot", e->src.slot, sl.plugin, sl.database, e->src.dbname);
	if (sl.active_pid)
		return efail(e, "replication slot %s is in use by process %d: stop the other consumer",
		             e->src.slot, sl.active_pid);
	lsn_fmt(sl.confirmed, l2, sizeof l2);
	if (sl.confirmed > e->snk.pos)
		return efail(e, "replication slot %s is at LSN %s, ahead of heap %s at %s: the "
		             "transactions in between are lost to this heap; make a new heap and slot",
		             e->src.slot, l2, e->heap_path, l1);
	if (sl.confirmed > e->floor)
		e->floor = sl.confirmed;
	return 0;
}

static int copy_row(void *ctx, char *line, size_t len);

typedef struct copy_ctx {
	engine *e;
	pg_table *t;
	ah_builder *b;
	pg_field *f;
	uint64_t time, rows;
	int rc;
} copy_ctx;

static int copy_row(void *ctx, char *line, size_t len)
{
	copy_ctx *c = ctx;
	size_t kl;
	ah_update u;

	if (row_copy_split(line, len, c->f, c->t->ncols) != 0) {
		snprintf(c->e->src.err, sizeof c->e->src.err, "COPY of %s: a line with another number "
		         "of columns", c->t->name);
		return -1;
	}
	if (sink_encode(&c->e->snk, c->t, c->f, &kl) != 0)
		return -1;
	u = (ah_update){ c->e->snk.kv.p, kl, c->e->snk.kv.p + kl, c->e->snk.kv.len - kl, c->time, 1 };
	if ((c->rc = ah_builder_push(c->b, &u, 1)) != 0) {
		snprintf(c->e->src.err, sizeof c->e->src.err, "copying %s into the heap: %s",
		         c->t->name, ah_strerror(c->rc));
		return -1;
	}
	c->rows++;
	return 0;
}

/* Fills the new heap at path with the snapshot's tables at time lsn. */
static int fill_heap(engine *e, const char *path, const char *snapshot, uint64_t lsn)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE };
	ah_heap *h = NULL;
	ah_txn *txn = NULL;
	copy_ctx c = { .e = e, .time = lsn };
	pg_buf tabs = { 0 }, vrec = { 0 };
	pg_pub pub;
	char id[1024], l[32], snap[100];
	int rc, status = -1;

	if ((rc = ah_open(path, &o, &h)) != 0 || (rc = ah_txn_begin(h, 0, &txn)) != 0) {
		efail(e, "cannot create heap %s: %s", path, ah_strerror(rc));
		goto out;
	}
	if (src_copy_begin(&e->src, snapshot) != 0 ||
	    src_relid_max(&e->src, &e->st.relid_max) != 0 || src_publication(&e->src, &pub) != 0)
		goto src_err;
	e->st.pub_oid = pub.oid;
	e->st.have_snapshot = 1;
	for (int i = 0; i < e->snk.nt; i++) {
		c.t = &e->snk.t[i];
		c.rows = 0;
		if (!(c.f = calloc((size_t)c.t->ncols, sizeof *c.f))) {
			efail(e, "out of memory");
			goto out;
		}
		if ((rc = ah_arrangement_create(txn, c.t->name)) != 0 ||
		    (rc = ah_builder_begin(txn, c.t->name, 0, lsn + 1, &c.b)) != 0) {
			efail(e, "creating arrangement %s: %s", c.t->name, ah_strerror(rc));
			goto out;
		}
		rc = src_copy(&e->src, c.t, copy_row, &c);
		free(c.f);
		c.f = NULL;
		if (rc != 0) {
			ah_builder_abandon(c.b);
			goto src_err;
		}
		if ((rc = ah_builder_finish(c.b)) != 0) {
			efail(e, "sealing %s: %s", c.t->name, ah_strerror(rc));
			goto out;
		}
		fprintf(stderr, "ah-pgsync: copied %s: %" PRIu64 " rows\n", c.t->name, c.rows);
	}
	if (src_copy_end(&e->src) != 0)
		goto src_err;
	if (e->vw) {
		/* the views' first step, from 0: same txn and upper as the tables */
		eg_graph *g = views_graph(e->vw);
		if ((rc = eg_create(g, txn)) != 0 || (rc = eg_step(g, txn, 0, lsn + 1)) != 0) {
			efail(e, "computing the views: %s (%s)", eg_errmsg(g), ah_strerror(rc));
			goto out;
		}
		if (views_record(e->vw, e->snk.t, e->snk.nt, &vrec) != 0) {
			efail(e, "out of memory");
			goto out;
		}
		if ((rc = ah_source_put(txn, "pg.views", vrec.p, vrec.len)) != 0) {
			efail(e, "recording the views in the heap: %s", ah_strerror(rc));
			goto out;
		}
		fprintf(stderr, "ah-pgsync: computed %d views\n", views_count(e->vw));
	}
	identity_fmt(id, sizeof id, e->src.sysid, e->src.dbname, e->src.slot, e->src.pub);
	snapshot_fmt(snap, sizeof snap, e->st.relid_max, e->st.pub_oid);
	lsn_fmt(lsn, l, sizeof l);
	if (tables_format(e->snk.t, e->snk.nt, &tabs) != 0) {
		efail(e, "out of memory");
		goto out;
	}
	if ((rc = ah_source_put(txn, "pg.identity", id, strlen(id))) != 0 ||
	    (rc = ah_source_put(txn, "pg.settings", e->src.settings, strlen(e->src.settings))) != 0 ||
	    (rc = ah_source_put(txn, "pg.tables", tabs.p, tabs.len)) != 0 ||
	    (rc = ah_source_put(txn, "pg.snapshot", snap, strlen(snap))) != 0 ||
	    (rc = ah_source_put(txn, "pg.lsn", l, strlen(l))) != 0) {
		efail(e, "recording the source in the heap: %s", ah_strerror(rc));
		goto out;
	}
	rc = ah_txn_commit(txn);
	txn = NULL;
	if (rc != 0) {
		efail(e, "committing the first copy: %s", ah_strerror(rc));
		goto out;
	}
	status = 0;
	goto out;
src_err:
	efail(e, "%s", e->src.err);
out:
	free(c.f);
	ah_txn_abort(txn);
	if (h && ah_close(h) != 0 && status == 0)
		status = efail(e, "closing heap %s", path);
	pg_buf_free(&tabs);
	pg_buf_free(&vrec);
	return status;
}

/* First run: slot with exported snapshot, COPY, heap made under a
 * temporary name and renamed into place once the copy is committed. */
/* Moves the finished heap to its name without ever replacing a file
 * there (another first run that published first): renameat2
 * RENAME_NOREPLACE, or link + unlink where that flag is missing.  0, or
 * -1 with errno (EEXIST: something is there). */
static int publish(const char *tmp, const char *path)
{
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -1;
	if (link(tmp, path) != 0)
		return -1;
	unlink(tmp);
	return 0;
}

static int first_run(engine *e)
{
	char snapshot[128], tmp[4096], tmp_lock[4200], l[32];
	ah_open_opts o = { .size = sizeof o };
	pg_slot sl;
	uint64_t lsn;
	int rc;

	if (src_slot(&e->src, &sl) != 0)
		return efail(e, "%s", e->src.err);
	if (sl.exists)
		return efail(e, "replication slot %s already exists but heap %s does not: if a first "
		             "copy was interrupted, drop it (SELECT pg_drop_replication_slot('%s')); "
		             "else give the heap that follows it, or another --slot",
		             e->src.slot, e->heap_path, e->src.slot);
	if (src_tables(&e->src, &e->snk.t, &e->snk.nt) != 0)
		return efail(e, "%s", e->src.err);
	if (e->views_path) {
		/* checked before the slot exists: a refused view leaves nothing */
		char err[1024];
		if (src_column_types(&e->src, e->snk.t, e->snk.nt) != 0)
			return efail(e, "%s", e->src.err);
		if (views_compile(e->views_file, e->views_flen, e->snk.t, e->snk.nt, &e->vw, err,
		                  sizeof err) != 0)
			return efail(e, "views %s:%s", e->views_path, err);
	}
	remove_stale_copies(e->heap_path);
	/* This process's own temporary name: a concurrent first run of the
	 * same heap never deletes our copy in progress, nor we its. */
	snprintf(tmp, sizeof tmp, "%s.creating.%d", e->heap_path, (int)getpid());
	snprintf(tmp_lock, sizeof tmp_lock, "%s-lock", tmp);
	unlink(tmp);
	unlink(tmp_lock);
	if (src_create_slot(&e->src, &lsn, snapshot, sizeof snapshot) != 0)
		return efail(e, "%s", e->src.err);
	lsn_fmt(lsn, l, sizeof l);
	fprintf(stderr, "ah-pgsync: created slot %s at LSN %s; copying %d tables\n", e->src.slot, l,
	        e->snk.nt);
	if (fill_heap(e, tmp, snapshot, lsn) != 0) {
		unlink(tmp);
		unlink(tmp_lock);
		return -1;
	}
	if (publish(tmp, e->heap_path) != 0) {
		int err = errno;

		unlink(tmp);
		unlink(tmp_lock);
		if (err == EEXIST)
			return efail(e, "heap %s appeared while this first copy ran (another "
			             "first run?): it is left as it is; drop this run's slot "
			             "(SELECT pg_drop_replication_slot('%s'))",
			             e->heap_path, e->src.slot);
		return efail(e, "cannot rename %s to %s: %s", tmp, e->heap_path, strerror(err));
	}
	unlink(tmp_lock);
	if ((rc = ah_open(e->heap_path, &o, &e->snk.ig.heap)) != 0)
		return efail(e, "cannot open heap %s: %s", e->heap_path, ah_strerror(rc));
	if (sink_start(&e->snk) != 0)
		return efail(e, "%s", e->snk.err);
	e->snk.views = e->vw ? views_graph(e->vw) : NULL;
	e->snk.pos = e->snk.group_pos = lsn;
	e->floor = lsn;  /* the new slot's confirmed_flush_lsn */
	identity_fmt(e->st.identity, sizeof e->st.identity, e->src.sysid, e->src.dbname,
	             e->src.slot, e->src.pub);
	snprintf(e->st.settings, sizeof e->st.settings, "%s", e->src.settings);
	return 0;
}

/* ---- streaming ---------------------------------------------------------- */

static void progress(engine *e, int final)
{
	double el = ms_since(&e->last_progress);
	char l[32];

	if (!e->tty || (!final && el < 1000.0) || (final && !e->progress_shown))
		return;
	if (!final) {
		uint64_t lag = e->src.wal_end > e->snk.pos ? e->src.wal_end - e->snk.pos : 0;
		lsn_fmt(e->snk.pos, l, sizeof l);
		fprintf(stderr, "\rLSN %s, lag %.1f KiB, %.0f txn/s, %.0f updates/s\033[K", l,
		        (double)lag / 1024.0, (double)(e->snk.txns - e->prog_txns) * 1e3 / el,
		        (double)(e->snk.updates - e->prog_updates) * 1e3 / el);
		e->prog_txns = e->snk.txns;
		e->prog_updates = e->snk.updates;
		clock_gettime(CLOCK_MONOTONIC, &e->last_progress);
		e->progress_shown = 1;
	} else {
		fputc('\n', stderr);
	}
}

/* ---- --confirm-after-snapshot --------------------------------------------- */

typedef struct snap_pick {
	const uint8_t *uuid;
	uint64_t seq, lsn;
	int found;
	char id[AH_SNAPSHOT_ID_MAX];
} snap_pick;

/* The newest whole snapshot of this heap (its UUID) whose pg.lsn parses,
 * as stored.c reads pg.lsn: ah_snapshot_foreach walks by UUID then SEQ,
 * so the last match is the newest.  A damaged manifest (status != 0, no
 * UUID) is passed over: an older whole one still restores. */
static int snap_one(const ah_snapshot_info *si, void *user)
{
	snap_pick *p = user;
	uint64_t lsn;

	if (si->status != 0 || memcmp(si->uuid, p->uuid, 16) != 0 || (p->found && si->seq < p->seq))
		return 0;
	for (size_t i = 0; i < si->nsources; i++)
		if (!strcmp(si->sources[i].name, "pg.lsn") &&
		    lsn_parse(si->sources[i].pos, si->sources[i].len, &lsn) == 0) {
			p->found = 1;
			p->seq = si->seq;
			p->lsn = lsn;
			snprintf(p->id, sizeof p->id, "%s", si->id);
		}
	return 0;
}

/* Re-reads DIR (at most once a second unless force).  A DIR that cannot be
 * read keeps the last snapshot found (prune never deletes the newest) and
 * says so once. */
static void snap_refresh(engine *e, int force)
{
	snap_pick p = { .uuid = e->uuid };
	char l[32];
	int rc;

	if (!e->snap_dir || !e->have_uuid || (!force && ms_since(&e->last_snap_read) < 1000.0))
		return;
	clock_gettime(CLOCK_MONOTONIC, &e->last_snap_read);
	rc = ah_snapshot_foreach(e->snap_dir, snap_one, &p);
	if (rc != 0 && rc != AH_ENOTFOUND) {
		if (!e->snap_warned)
			fprintf(stderr, "%sah-pgsync: reading snapshots in %s: %s; confirming up to "
			        "the last snapshot found\n", e->progress_shown ? "\n" : "",
			        e->snap_dir, ah_strerror(rc));
		e->snap_warned = 1;
		return;
	}
	e->snap_warned = 0;
	if (!p.found || (e->have_snap && p.lsn <= e->snap_lsn))
		return;
	e->have_snap = 1;
	e->snap_lsn = p.lsn;
	snprintf(e->snap_id, sizeof e->snap_id, "%s", p.id);
	if (force) {
		lsn_fmt(p.lsn, l, sizeof l);
		fprintf(stderr, "ah-pgsync: newest snapshot of this heap in %s: %s at LSN %s\n",
		        e->snap_dir, p.id, l);
	}
}

/* The flush position to confirm: what the heap holds, and with
 * --confirm-after-snapshot no more than the newest snapshot in DIR holds
 * (nothing past the slot's own confirmed_flush_lsn before the first). */
static uint64_t confirm_pos(engine *e)
{
	uint64_t c = e->snk.pos;

	if (e->snap_dir) {
		uint64_t s = e->have_snap && e->snap_lsn > e->floor ? e->snap_lsn : e->floor;
		if (s < c)
			c = s;
	}
	return c;
}

/* Standby status update, as PostgreSQL's own subscriber sends it: write =
 * what the engine has received (complete transactions, idle positions),
 * flush = apply = what the heap holds (confirm_pos: with
 * --confirm-after-snapshot, what a snapshot in DIR holds).  The slot
 * advances by flush only, so nothing the heap lacks is ever confirmed. */
static int status(engine *e)
{
	snap_refresh(e, 0);
	if (!e->src.repl || src_status(&e->src, e->snk.group_pos, confirm_pos(e)) != 0)
		return -2;
	e->confirmed = confirm_pos(e);
	e->reported = e->snk.group_pos;
	clock_gettime(CLOCK_MONOTONIC, &e->last_status);
	return 0;
}

/* Commits the group, then (only then) confirms its LSN to the server. */
static int flush(engine *e)
{
	if (sink_flush(&e->snk) != 0)
		return efail(e, "%s", e->snk.err);
	clock_gettime(CLOCK_MONOTONIC, &e->last_flush);
	return e->src.repl ? status(e) : 0;
}

/* A Relation message for a table the heap does not hold: follow it if
 * tools/pg/follow.c can prove that the stream holds all its rows, else stop
 * (stuck: a restart meets the same message). */
static int follow(engine *e)
{
	const po_msg *m = &e->dec.m;
	pg_table t;
	int rc = follow_table(&e->src, &e->st, m, &t, e->err, sizeof e->err);

	if (rc == -2) {
		/* the SQL connection failed: reconnect, the message comes again */
		snprintf(e->src.err, sizeof e->src.err, "%.1000s", e->err);
		sink_rollback(&e->snk);
		return -2;
	}
	if (rc != 0) {
		e->snk.stuck = 1;
		return -1;
	}
	if (sink_add_table(&e->snk, &t) != 0) {
		table_clear(&t);
		return efail(e, "%s", e->snk.err);
	}
	fprintf(stderr, "%sah-pgsync: following table %s.%s (relid %" PRIu32 "), created after the "
	        "slot, as arrangement %s\n", e->progress_shown ? "\n" : "",
	        pg_disp(e->snk.t[e->snk.nt - 1].nsp), pg_disp(e->snk.t[e->snk.nt - 1].rel), m->relid,
	        e->snk.t[e->snk.nt - 1].name);
	return 0;
}

/* Streams until a stop request (returns 0) or an error: -1 fatal, -2 the
 * connection was lost (the caller reconnects). */
static int stream(engine *e)
{
	const uint8_t *data;
	const char *why;
	size_t len;
	int r, committed;

	for (;;) {
		if (stop_requested && !e->snk.ig.in_src)
			return flush(e) == -1 ? -1 : 0;
		r = src_recv(&e->src, 100, &data, &len);
		if (r < 0) {
			/* the open transaction only: the complete ones are kept */
			sink_rollback(&e->snk);
			return -2;
		}
		if (r == 1) {
			int d = po_decode(&e->dec, data, len, &why);
			if (d != 0) {
				e->snk.stuck = d == -1;  /* the server sends it again */
				return efail(e, "%s", d == -2 ? "out of memory" : why);
			}
			if (e->dec.m.type == 'R' && !sink_table(&e->snk, e->dec.m.relid) &&
			    (d = follow(e)) != 0)
				return d;
			if (apply_msg(&e->snk, &e->dec.m, &committed) != 0)
				return efail(e, "%s", e->snk.err);
		} else if (r == 2) {
			sink_idle(&e->snk, e->src.wal_end);
			if ((e->src.reply_requested || e->snk.group_pos > e->reported) && status(e) != 0)
				return -2;
		}
		if (!e->snk.ig.in_src && e->snk.group_pos > e->snk.pos &&
		    ((int)e->snk.group_txns >= e->group_txns || ms_since(&e->last_flush) >= e->group_ms)) {
			if ((r = flush(e)) != 0)
				return r;
		}
		if (e->snap_dir && ms_since(&e->last_snap_read) >= 1000.0) {
			/* a new snapshot in DIR: confirm it now */
			snap_refresh(e, 0);
			if (confirm_pos(e) > e->confirmed && status(e) != 0)
				return -2;
			/* A fast shutdown of the server ends the sessions, then waits
			 * for each walsender to see all it sent confirmed, which this
			 * mode may not do for long: once the server has closed the
			 * SQL connection, close the stream too (and reconnect). */
			if (!src_sql_alive(&e->src)) {
				sink_rollback(&e->snk);
				return -2;
			}
		}
		if (ms_since(&e->last_status) >= 10000 && status(e) != 0)
			return -2;
		progress(e, 0);
	}
}

static int connect_and_check(engine *e)
{
	if (src_connect(&e->src) != 0)
		return efail(e, "%s", e->src.err);
	if (check_source(e) != 0)
		return -1;
	if (src_start(&e->src, e->snk.pos) != 0)
		return efail(e, "%s", e->src.err);
	return 0;
}

/* After a lost connection: commit what was complete, then retry. */
static int reconnect(engine *e)
{
	struct timespec t;
	char l[32];

	fprintf(stderr, "%sah-pgsync: %s; reconnecting\n", e->progress_shown ? "\n" : "", e->src.err);
	src_close(&e->src);
	if (flush(e) == -1)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &t);
	while (!stop_requested) {
		if (connect_and_check(e) == 0) {
			lsn_fmt(e->snk.pos, l, sizeof l);
			fprintf(stderr, "ah-pgsync: reconnected, streaming from LSN %s\n", l);
			return 0;
		}
		src_close(&e->src);
		if (ms_since(&t) > e->retry_s * 1000.0)
			return -1;
		usleep(500000);
	}
	return 1;
}

/* The stream holds a change the heap cannot follow, so every restart stops
 * there, and the idle slot keeps the WAL from its restart_lsn on: say how
 * much, and how to release it. */
static void wal_note(engine *e)
{
	size_t n = strlen(e->err);
	uint64_t b;

	if (!e->src.sql || src_wal_held(&e->src, &b) != 0)
		return;
	snprintf(e->err + n, sizeof e->err - n, "; until then slot %s holds %.1f MB of WAL on the "
	         "server (SELECT pg_drop_replication_slot('%s') releases it, and this heap cannot "
	         "resume after that)", e->src.slot, (double)b / (1024.0 * 1024.0), e->src.slot);
}

static int run(engine *e)
{
	struct stat sb;
	char l1[32], l2[32];
	int rc;

	if (stat(e->heap_path, &sb) == 0) {
		if (open_existing(e) != 0 || connect_and_check(e) != 0)
			return 1;
	} else {
		if (errno != ENOENT)
			return efail(e, "cannot use heap %s: %s", e->heap_path, strerror(errno)), 1;
		if (src_connect(&e->src) != 0)
			return efail(e, "%s", e->src.err), 1;
		if (first_run(e) != 0)
			return 1;
		if (src_start(&e->src, e->snk.pos) != 0)
			return efail(e, "%s", e->src.err), 1;
	}
	e->start_lsn = e->snk.pos;
	if (e->snap_dir) {
		ah_heap_stat hs;
		if ((rc = ah_heap_stat_get(e->snk.ig.heap, &hs)) != 0)
			return efail(e, "reading heap %s: %s", e->heap_path, ah_strerror(rc)), 1;
		memcpy(e->uuid, hs.uuid, sizeof e->uuid);
		e->have_uuid = 1;
		snap_refresh(e, 1);
		lsn_fmt(e->floor, l1, sizeof l1);
		if (!e->have_snap)
			fprintf(stderr, "ah-pgsync: no snapshot of this heap in %s yet: confirming "
			        "nothing past LSN %s (the slot's confirmed_flush_lsn) until one is "
			        "pushed\n", e->snap_dir, l1);
	}
	clock_gettime(CLOCK_MONOTONIC, &e->last_flush);
	e->last_status = e->last_progress = e->last_flush;
	while ((rc = stream(e)) == -2)
		if ((rc = reconnect(e)) != 0)
			break;
	if (rc < 0) {
		/* Keep the complete transactions already received: drop only the
		 * open one (sink_rollback never drops a committed one). */
		sink_rollback(&e->snk);
		if (sink_flush(&e->snk) == 0)
			status(e);
		if (e->snk.stuck)
			wal_note(e);
	}
	progress(e, 1);
	lsn_fmt(e->start_lsn, l1, sizeof l1);
	lsn_fmt(e->snk.pos, l2, sizeof l2);
	fprintf(stderr, "ah-pgsync: %s at LSN %s: %" PRIu64 " transactions applied (%" PRIu64
	        " already in the heap, skipped), %" PRIu64 " updates; streamed %" PRIu64
	        " bytes, WAL %" PRIu64 " bytes since LSN %s\n", rc ? "stopped by an error" : "stopped",
	        l2, e->snk.txns, e->snk.skipped, e->snk.updates, e->src.bytes,
	        e->snk.pos - e->start_lsn, l1);
	if (e->snk.views) {
		eg_stats vs;
		eg_stats_get(e->snk.views, &vs);
		fprintf(stderr, "ah-pgsync: views: %" PRIu64 " steps in %.1f ms (%.2f us per table "
		        "update), %" PRIu64 " input updates read, %" PRIu64 " view updates appended\n",
		        vs.steps, e->snk.views_ms,
		        e->snk.updates ? e->snk.views_ms * 1e3 / (double)e->snk.updates : 0.0,
		        vs.delta_updates + vs.state_updates, vs.appended);
	}
	return rc < 0 ? 1 : 0;
}

static int valid_name(const char *s, int upper_ok)
{
	if (!*s || strlen(s) > 63)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      (upper_ok && *s >= 'A' && *s <= 'Z')))
			return 0;
	return 1;
}

/* 1 if path, or else its parent directory, is a directory. */
static int dir_or_parent(const char *path)
{
	char parent[4096];
	struct stat sb;
	char *slash;

	if (stat(path, &sb) == 0)
		return S_ISDIR(sb.st_mode);
	snprintf(parent, sizeof parent, "%s", path);
	while ((slash = strrchr(parent, '/')) && slash[1] == 0 && slash > parent)
		*slash = 0;  /* trailing slashes */
	if (!(slash = strrchr(parent, '/')))
		return 1;  /* relative, in the working directory */
	slash[slash == parent] = 0;
	return stat(parent, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Reads --views FILE and checks its syntax before anything connects. */
static int read_views(engine *e)
{
	FILE *f = fopen(e->views_path, "rb");
	pg_buf b = { 0 };
	vs_file vf;
	char buf[65536], err[1024];
	size_t n;

	if (!f)
		return efail(e, "cannot read views file %s: %s", e->views_path, strerror(errno));
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		if (pg_buf_put(&b, buf, n)) {
			fclose(f);
			pg_buf_free(&b);
			return efail(e, "out of memory");
		}
	fclose(f);
	if (pg_buf_put(&b, "", 1)) {
		pg_buf_free(&b);
		return efail(e, "out of memory");
	}
	e->views_file = (char *)b.p;
	e->views_flen = b.len - 1;
	if (vs_parse(e->views_file, e->views_flen, &vf, err, sizeof err) != 0)
		return efail(e, "views %s:%s", e->views_path, err);
	vs_free(&vf);
	return 0;
}

int main(int argc, char **argv)
{
	static engine e = { .group_ms = 200, .group_txns = 1000, .retry_s = 60 };
	struct sigaction sa = { .sa_handler = on_signal };
	int st;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--version")) {
			printf("ah-pgsync (arrheap) %s, library %s, libpq %d.%d\n",
			       AH_VERSION_STRING, ah_version(NULL, NULL, NULL),
			       PQlibVersion() / 10000, PQlibVersion() % 10000);
			return 0;
		}
	clock_gettime(CLOCK_MONOTONIC, &e.t0);
	e.src.conninfo = "";
	e.src.slot = e.src.pub = "ah_pgsync";
	if (argc > 1 && !strcmp(argv[1], "verify"))
		return cmd_verify(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "wait"))
		return cmd_wait(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "reader"))
		return cmd_reader(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "recompute"))
		return cmd_recompute(argc - 1, argv + 1);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if ((!strcmp(a, "-d") || !strcmp(a, "--dbname")) && v) {
			e.src.conninfo = argv[++i];
		} else if (!strcmp(a, "--slot") && v) {
			e.src.slot = argv[++i];
		} else if (!strcmp(a, "--publication") && v) {
			e.src.pub = argv[++i];
		} else if (!strcmp(a, "--group-ms") && v) {
			e.group_ms = atoi(argv[++i]);
		} else if (!strcmp(a, "--group-txns") && v) {
			e.group_txns = atoi(argv[++i]);
		} else if (!strcmp(a, "--retry-secs") && v) {
			e.retry_s = atoi(argv[++i]);
		} else if (!strcmp(a, "--confirm-after-snapshot") && v) {
			e.snap_dir = argv[++i];
		} else if (!strcmp(a, "--views") && v) {
			e.views_path = argv[++i];
		} else if (a[0] == '-' || e.heap_path) {
			usage(stderr);
			return 2;
		} else {
			e.heap_path = a;
		}
	}
	if (!e.heap_path || e.group_ms < 0 || e.group_txns < 1 || e.retry_s < 0) {
		usage(stderr);
		return 2;
	}
	if (!valid_name(e.src.slot, 0) || !valid_name(e.src.pub, 1)) {
		fputs("ah-pgsync: slot names are [a-z0-9_], publication names [A-Za-z0-9_], "
		      "1 to 63 characters\n", stderr);
		return 2;
	}
	if (e.snap_dir && !dir_or_parent(e.snap_dir)) {
		fprintf(stderr, "ah-pgsync: --confirm-after-snapshot %s: neither it nor its parent is "
		        "a directory (ah-snapshot push creates it in an existing parent)\n", e.snap_dir);
		return 2;
	}
	if (e.views_path && read_views(&e) != 0) {
		fprintf(stderr, "ah-pgsync: %s\n", e.err);
		free(e.views_file);
		return 1;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	e.tty = isatty(2);
	st = run(&e);
	if (st)
		fprintf(stderr, "ah-pgsync: %s\n", e.err);
	src_close(&e.src);
	po_free(&e.dec);
	if (e.snk.ig.heap && ah_close(e.snk.ig.heap) != 0 && st == 0) {
		fprintf(stderr, "ah-pgsync: closing the heap failed\n");
		st = 1;
	}
	sink_free(&e.snk);
	tables_free(e.st.t, e.st.nt);
	views_free(e.vw);
	free(e.views_file);
	return st;
}
