/*
 * tools/pg/source.c - libpq connections, catalog queries, the snapshot COPY
 * and the replication stream of ah-pgsync (see source.h).  It never writes
 * the heap and never parses pgoutput: it hands the bytes on.
 *
 * It must never leave a connection with text settings other than
 * TEXT_SETTINGS (each is set, then read back, and a difference fails the
 * connect), and never put a catalog name into SQL unquoted: table and column
 * names go through PQescapeIdentifier, lookups take parameters.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "tools/pg/source.h"

/* The settings that shape a value's text form (the type output functions
 * run in the backend for COPY, in the walsender for pgoutput), fixed on
 * both connections whatever the environment, the conninfo, or the role's
 * and database's defaults say: lc_monetary for money, search_path for the
 * reg* types; the client encoding is the server encoding.  If a value
 * changes here, heaps made before are refused at restart (pg.settings). */
static const char *const TEXT_SETTINGS[][2] = {
	{ "DateStyle", "ISO, MDY" },
	{ "TimeZone", "UTC" },
	{ "IntervalStyle", "postgres" },
	{ "extra_float_digits", "3" },
	{ "bytea_output", "hex" },
	{ "lc_monetary", "C" },
	{ "search_path", "pg_catalog" },
};
#define NSETTINGS (sizeof TEXT_SETTINGS / sizeof TEXT_SETTINGS[0])

static int fail(pg_src *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(pg_src *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->err, sizeof s->err, fmt, ap);
	va_end(ap);
	return -1;
}

/* libpq's message, first line, without "ERROR:  " and newline. */
static const char *first_line(const char *m, char *buf, size_t len)
{
	size_t n;

	if (!strncmp(m, "ERROR:  ", 8))
		m += 8;
	if (!strncmp(m, "FATAL:  ", 8))
		m += 8;
	n = strcspn(m, "\n");
	if (n >= len)
		n = len - 1;
	memcpy(buf, m, n);
	buf[n] = 0;
	return buf;
}

static int pq_fail(pg_src *s, PGconn *c, const char *what)
{
	char line[600];
	const char *m = first_line(PQerrorMessage(c), line, sizeof line);

	if (strstr(m, "permission denied") || strstr(m, "must be superuser") ||
	    strstr(m, "must have replication"))
		return fail(s, "%s: %s: grant the role REPLICATION and SELECT on the published tables",
		            what, m);
	if (strstr(m, "wal_level"))
		return fail(s, "%s: %s: set wal_level = logical in postgresql.conf and restart the server",
		            what, m);
	return fail(s, "%s: %s", what, m);
}

/* "-c name=value ..." for the startup packet (spaces escaped). */
static void options_for(char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (size_t i = 0; i < NSETTINGS && n + 1 < len; i++) {
		n += (size_t)snprintf(buf + n, len - n, "%s-c %s=", i ? " " : "", TEXT_SETTINGS[i][0]);
		for (const char *v = TEXT_SETTINGS[i][1]; *v && n + 2 < len; v++) {
			if (*v == ' ')
				buf[n++] = '\\';
			buf[n++] = *v;
		}
		buf[n] = 0;
	}
}

/* Sets the text settings on connection c and reads them back: out gets
 * "name=value" lines, the client encoding last.  Fails naming a setting
 * the server did not take. */
static int fix_settings(pg_src *s, PGconn *c, const char *which, char *out, size_t len)
{
	const char *enc = PQparameterStatus(c, "server_encoding");
	char q[600], line[600];
	size_t n = 0, qn;
	PGresult *r;

	if (!enc || PQsetClientEncoding(c, enc) != 0)
		return fail(s, "setting the client encoding of the %s connection to the server encoding "
		            "%s failed: %s", which, enc ? enc : "(unknown)",
		            first_line(PQerrorMessage(c), line, sizeof line));
	for (size_t i = 0; i < NSETTINGS; i++) {
		char *v = PQescapeLiteral(c, TEXT_SETTINGS[i][1], strlen(TEXT_SETTINGS[i][1]));
		if (!v)
			return fail(s, "out of memory");
		snprintf(q, sizeof q, "SET %s = %s", TEXT_SETTINGS[i][0], v);
		PQfreemem(v);
		r = PQexec(c, q);
		int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
		if (!ok) {
			snprintf(q, sizeof q, "setting %s on the %s connection", TEXT_SETTINGS[i][0], which);
			return pq_fail(s, c, q);
		}
	}
	qn = (size_t)snprintf(q, sizeof q, "SELECT ");
	for (size_t i = 0; i < NSETTINGS; i++)
		qn += (size_t)snprintf(q + qn, sizeof q - qn, "current_setting('%s'), ", TEXT_SETTINGS[i][0]);
	snprintf(q + qn, sizeof q - qn, "current_setting('client_encoding')");
	r = PQexec(c, q);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
	    PQnfields(r) != (int)NSETTINGS + 1) {
		PQclear(r);
		snprintf(q, sizeof q, "reading the settings of the %s connection", which);
		return pq_fail(s, c, q);
	}
	for (size_t i = 0; i <= NSETTINGS; i++) {
		const char *name = i < NSETTINGS ? TEXT_SETTINGS[i][0] : "client_encoding";
		const char *want = i < NSETTINGS ? TEXT_SETTINGS[i][1] : enc;
		const char *have = PQgetvalue(r, 0, (int)i);
		if (strcmp(have, want) != 0) {
			fail(s, "the server keeps %s = '%s' on the %s connection, not '%s' as set: "
			     "ah-pgsync needs it so that every value has one text form", name, have,
			     which, want);
			PQclear(r);
			return -1;
		}
		n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s=%s\n", name, have);
	}
	PQclear(r);
	return n < len ? 0 : fail(s, "the text settings do not fit %zu bytes", len);
}

static PGconn *open_conn(pg_src *s, int replication)
{
	char opts[400], line[600];
	/* The expanded dbname comes first, so the keywords after it override
	 * what the conninfo (and PGOPTIONS, PGCLIENTENCODING) says. */
	const char *keys[] = { "dbname", "options", "client_encoding", "fallback_application_name",
	                       replication ? "replication" : NULL, NULL };
	const char *vals[] = { s->conninfo, opts, "UTF8", "ah-pgsync", "database", NULL };
	PGconn *c;

	options_for(opts, sizeof opts);
	/* libpq sends these as startup parameters, applied after the options
	 * and overridden by no keyword; an invalid one would refuse the
	 * connection.  fix_settings sets everything again anyway. */
	unsetenv("PGTZ");
	unsetenv("PGDATESTYLE");
	c = PQconnectdbParams(keys, vals, 1);
	if (c && PQstatus(c) == CONNECTION_OK)
		return c;
	const char *m = first_line(c ? PQerrorMessage(c) : "out of memory", line, sizeof line);
	if (strstr(m, "replication") && (strstr(m, "pg_hba") || strstr(m, "permission") ||
	                                 strstr(m, "must be")))
		fail(s, "the server refuses a replication connection (%s): grant the role "
		     "REPLICATION and allow replication connections in pg_hba.conf", m);
	else if (strstr(m, "does not exist"))
		fail(s, "cannot connect: %s: check --dbname", m);
	else
		fail(s, "cannot connect to the server (%s): is it running, and is --dbname right?", m);
	PQfinish(c);
	return NULL;
}

int src_connect(pg_src *s)
{
	PGresult *r = NULL;
	char other[sizeof s->settings];
	pg_pub pub;
	int rc = -1;

	/* positions of an earlier connection say nothing about this one */
	s->wal_end = 0;
	s->reply_requested = 0;

	if (!(s->repl = open_conn(s, 1)) || !(s->sql = open_conn(s, 0)) ||
	    fix_settings(s, s->repl, "replication", other, sizeof other) != 0 ||
	    fix_settings(s, s->sql, "SQL", s->settings, sizeof s->settings) != 0)
		goto out;
	if (strcmp(other, s->settings) != 0) {
		fail(s, "the replication and SQL connections have other text settings");
		goto out;
	}
	r = PQexec(s->repl, "IDENTIFY_SYSTEM");
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQnfields(r) < 4 || PQntuples(r) != 1) {
		pq_fail(s, s->repl, "IDENTIFY_SYSTEM");
		goto out;
	}
	snprintf(s->sysid, sizeof s->sysid, "%s", PQgetvalue(r, 0, 0));
	snprintf(s->dbname, sizeof s->dbname, "%s", PQgetvalue(r, 0, 3));
	PQclear(r);
	r = NULL;
	if (src_publication(s, &pub) != 0)
		goto out;
	s->pub_oid = pub.oid;
	if (!pub.ins || !pub.upd || !pub.del || !pub.trunc) {
		fail(s, "publication %s does not publish %s, so the heap would keep rows the tables "
		     "no longer have: ALTER PUBLICATION %s SET (publish = 'insert, update, delete, "
		     "truncate')", s->pub, !pub.ins ? "inserts" : !pub.upd ? "updates" :
		     !pub.del ? "deletes" : "truncates", s->pub);
		goto out;
	}
	if (pub.filtered[0]) {
		fail(s, "publication %s has a row filter or a column list on table %s, so its stream "
		     "lacks changes the heap needs: ALTER PUBLICATION %s SET TABLE ... without WHERE "
		     "and columns, or use another publication", s->pub, pub.filtered, s->pub);
		goto out;
	}
	rc = 0;
out:
	PQclear(r);
	if (rc)
		src_close(s);
	return rc;
}

int src_connect_sql(pg_src *s)
{
	if (!(s->sql = open_conn(s, 0)) ||
	    fix_settings(s, s->sql, "SQL", s->settings, sizeof s->settings) != 0) {
		src_close(s);
		return -1;
	}
	return 0;
}

void src_close(pg_src *s)
{
	PQfreemem(s->msg);
	s->msg = NULL;
	PQfinish(s->repl);
	PQfinish(s->sql);
	s->repl = s->sql = NULL;
}

static int parse_lsn_str(const char *v, uint64_t *out)
{
	return lsn_parse(v, strlen(v), out);
}

int src_slot(pg_src *s, pg_slot *o)
{
	const char *pv[1] = { s->slot };
	PGresult *r = PQexecParams(s->sql,
		"SELECT coalesce(plugin, ''), coalesce(database::text, ''), coalesce(active_pid, 0), "
		"coalesce(confirmed_flush_lsn, '0/0'), coalesce(restart_lsn, '0/0') "
		"FROM pg_replication_slots WHERE slot_name = $1", 1, NULL, pv, NULL, NULL, 0);
	int rc = 0;

	memset(o, 0, sizeof *o);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		rc = pq_fail(s, s->sql, "looking up the replication slot");
	} else if (PQntuples(r) == 1) {
		o->exists = 1;
		snprintf(o->plugin, sizeof o->plugin, "%s", PQgetvalue(r, 0, 0));
		snprintf(o->database, sizeof o->database, "%s", PQgetvalue(r, 0, 1));
		o->active_pid = atoi(PQgetvalue(r, 0, 2));
		if (parse_lsn_str(PQgetvalue(r, 0, 3), &o->confirmed) ||
		    parse_lsn_str(PQgetvalue(r, 0, 4), &o->restart))
			rc = fail(s, "bad LSN in pg_replication_slots");
	}
	PQclear(r);
	return rc;
}

int src_create_slot(pg_src *s, uint64_t *consistent, char *snapshot, size_t len)
{
	char q[300];
	PGresult *r;
	int rc = 0;

	snprintf(q, sizeof q, "CREATE_REPLICATION_SLOT \"%s\" LOGICAL pgoutput EXPORT_SNAPSHOT",
	         s->slot);
	r = PQexec(s->repl, q);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) < 3)
		rc = pq_fail(s, s->repl, "creating the replication slot");
	else if (parse_lsn_str(PQgetvalue(r, 0, 1), consistent))
		rc = fail(s, "creating the replication slot: bad consistent point");
	else
		snprintf(snapshot, len, "%s", PQgetvalue(r, 0, 2));
	PQclear(r);
	return rc;
}

static int table_columns(pg_src *s, pg_table *t, const char *oid)
{
	const char *pv[1] = { oid };
	PGresult *r = PQexecParams(s->sql,
		"SELECT attname FROM pg_attribute WHERE attrelid = $1::oid AND attnum > 0 "
		"AND NOT attisdropped AND attgenerated = '' ORDER BY attnum", 1, NULL, pv, NULL, NULL, 0);
	PGresult *k = NULL;
	int rc = -1;

	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		pq_fail(s, s->sql, "reading the columns");
		goto out;
	}
	t->ncols = PQntuples(r);
	if (t->ncols == 0) {
		fail(s, "table %s.%s has no columns", t->nsp, t->rel);
		goto out;
	}
	t->cols = calloc((size_t)t->ncols, sizeof(char *));
	t->key = calloc((size_t)t->ncols, sizeof(int));
	if (!t->cols || !t->key)
		goto oom;
	for (int i = 0; i < t->ncols; i++)
		if (!(t->cols[i] = strdup(PQgetvalue(r, i, 0))))
			goto oom;
	k = PQexecParams(s->sql,
		"SELECT a.attname FROM pg_index i, unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord), "
		"pg_attribute a WHERE i.indrelid = $1::oid AND i.indisprimary AND a.attrelid = i.indrelid "
		"AND a.attnum = k.attnum ORDER BY k.ord", 1, NULL, pv, NULL, NULL, 0);
	if (PQresultStatus(k) != PGRES_TUPLES_OK) {
		pq_fail(s, s->sql, "reading the primary key");
		goto out;
	}
	for (int i = 0; i < PQntuples(k) && i < t->ncols; i++)
		for (int c = 0; c < t->ncols; c++)
			if (!strcmp(t->cols[c], PQgetvalue(k, i, 0)))
				t->key[t->nkey++] = c;
	rc = 0;
	goto out;
oom:
	fail(s, "out of memory");
out:
	PQclear(r);
	PQclear(k);
	return rc;
}

int src_tables(pg_src *s, pg_table **out, int *nt)
{
	const char *pv[1] = { s->pub };
	PGresult *r = PQexecParams(s->sql,
		"SELECT c.oid, n.nspname, c.relname, c.relreplident FROM pg_publication_tables p "
		"JOIN pg_namespace n ON n.nspname = p.schemaname "
		"JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename "
		"WHERE p.pubname = $1 ORDER BY 2, 3", 1, NULL, pv, NULL, NULL, 0);
	pg_table *t = NULL;
	int n = 0, rc = -1;

	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		pq_fail(s, s->sql, "listing the publication's tables");
		goto out;
	}
	if (PQntuples(r) == 0) {
		fail(s, "publication \"%s\" has no tables: ALTER PUBLICATION %s ADD TABLE ...", s->pub, s->pub);
		goto out;
	}
	if (!(t = calloc((size_t)PQntuples(r), sizeof *t))) {
		fail(s, "out of memory");
		goto out;
	}
	for (n = 0; n < PQntuples(r);) {
		pg_table *x = &t[n++];
		x->relid = (uint32_t)strtoul(PQgetvalue(r, n - 1, 0), NULL, 10);
		x->nsp = strdup(PQgetvalue(r, n - 1, 1));
		x->rel = strdup(PQgetvalue(r, n - 1, 2));
		if (!x->nsp || !x->rel) {
			fail(s, "out of memory");
			goto out;
		}
		if (PQgetvalue(r, n - 1, 3)[0] != 'f') {
			fail(s, "table %s.%s lacks REPLICA IDENTITY FULL, so its updates and deletes "
			     "would not carry the old row: ALTER TABLE %s.%s REPLICA IDENTITY FULL",
			     x->nsp, x->rel, x->nsp, x->rel);
			goto out;
		}
		if (table_columns(s, x, PQgetvalue(r, n - 1, 0)) != 0)
			goto out;
		table_name_for(x);
		x->in_heap = 1;  /* in the first copy */
	}
	rc = 0;
out:
	PQclear(r);
	if (rc) {
		tables_free(t, n);
		t = NULL;
		n = 0;
	}
	*out = t;
	*nt = n;
	return rc;
}

int src_publication(pg_src *s, pg_pub *o)
{
	const char *pv[1] = { s->pub };
	PGresult *r = PQexecParams(s->sql,
		"SELECT p.oid::text, p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, "
		"p.pubtruncate, (SELECT n.nspname || '.' || c.relname FROM pg_publication_rel x "
		"JOIN pg_class c ON c.oid = x.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
		"WHERE x.prpubid = p.oid AND (x.prqual IS NOT NULL OR x.prattrs IS NOT NULL) "
		"ORDER BY 1 LIMIT 1) FROM pg_publication p WHERE p.pubname = $1", 1, NULL, pv, NULL,
		NULL, 0);
	int rc = -1;

	memset(o, 0, sizeof *o);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		pq_fail(s, s->sql, "looking up the publication");
	} else if (PQntuples(r) != 1) {
		fail(s, "publication \"%s\" does not exist in database %s: CREATE PUBLICATION %s "
		     "FOR ALL TABLES (or FOR TABLE ...), or pass --publication", s->pub, s->dbname, s->pub);
	} else {
		o->oid = (uint32_t)strtoul(PQgetvalue(r, 0, 0), NULL, 10);
		o->all_tables = PQgetvalue(r, 0, 1)[0] == 't';
		o->ins = PQgetvalue(r, 0, 2)[0] == 't';
		o->upd = PQgetvalue(r, 0, 3)[0] == 't';
		o->del = PQgetvalue(r, 0, 4)[0] == 't';
		o->trunc = PQgetvalue(r, 0, 5)[0] == 't';
		snprintf(o->filtered, sizeof o->filtered, "%s", PQgetvalue(r, 0, 6));
		rc = 0;
	}
	PQclear(r);
	return rc;
}

int src_relation(pg_src *s, uint32_t relid, pg_table *t, pg_rel *o)
{
	char oid[16];
	const char *pv[1] = { oid };
	PGresult *r;
	int rc = -1;

	snprintf(oid, sizeof oid, "%" PRIu32, relid);
	memset(o, 0, sizeof *o);
	r = PQexecParams(s->sql, "SELECT n.nspname, c.relname, c.relfilenode::text, c.relpersistence, "
	                 "c.relkind, c.relreplident FROM pg_class c JOIN pg_namespace n ON "
	                 "n.oid = c.relnamespace WHERE c.oid = $1::oid", 1, NULL, pv, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		pq_fail(s, s->sql, "looking up a table");
		goto out;
	}
	rc = 0;
	if (PQntuples(r) != 1)
		goto out;
	o->exists = 1;
	o->relfilenode = (uint32_t)strtoul(PQgetvalue(r, 0, 2), NULL, 10);
	o->persistence = PQgetvalue(r, 0, 3)[0];
	o->kind = PQgetvalue(r, 0, 4)[0];
	o->replident = PQgetvalue(r, 0, 5)[0];
	memset(t, 0, sizeof *t);
	t->relid = relid;
	if (!(t->nsp = strdup(PQgetvalue(r, 0, 0))) || !(t->rel = strdup(PQgetvalue(r, 0, 1))))
		rc = fail(s, "out of memory");
	else
		rc = table_columns(s, t, oid);
	if (rc == 0)
		table_name_for(t);
out:
	PQclear(r);
	return rc;
}

int src_relid_max(pg_src *s, uint32_t *out)
{
	PGresult *r = PQexec(s->sql, "SELECT max(oid)::text FROM pg_class");
	int rc = 0;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		rc = pq_fail(s, s->sql, "reading pg_class in the snapshot");
	else
		*out = (uint32_t)strtoul(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return rc;
}

int src_wal_held(pg_src *s, uint64_t *bytes)
{
	const char *pv[1] = { s->slot };
	PGresult *r = PQexecParams(s->sql, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)"
	                           "::bigint FROM pg_replication_slots WHERE slot_name = $1", 1, NULL,
	                           pv, NULL, NULL, 0);
	int rc = 0;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQgetisnull(r, 0, 0))
		rc = -1;
	else
		*bytes = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return rc;
}

static int exec_ok(pg_src *s, const char *q, const char *what)
{
	PGresult *r = PQexec(s->sql, q);
	int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pq_fail(s, s->sql, what);

	PQclear(r);
	return rc;
}

int src_copy_begin(pg_src *s, const char *snapshot)
{
	char q[200];

	if (exec_ok(s, "BEGIN ISOLATION LEVEL REPEATABLE READ", "starting the snapshot"))
		return -1;
	if (!snapshot)
		return 0;
	snprintf(q, sizeof q, "SET TRANSACTION SNAPSHOT '%s'", snapshot);
	return exec_ok(s, q, "importing the slot's snapshot");
}

int src_copy_end(pg_src *s)
{
	return exec_ok(s, "COMMIT", "ending the snapshot");
}

static int put_id(pg_src *s, pg_buf *q, const char *str)
{
	char *id = PQescapeIdentifier(s->sql, str, strlen(str));
	int rc = !id || pg_buf_put(q, id, strlen(id)) ? -1 : 0;

	PQfreemem(id);
	return rc;
}

static int copy_out(pg_src *s, const char *q, int (*row)(void *, char *, size_t), void *ctx);

int src_copy(pg_src *s, const pg_table *t, int (*row)(void *, char *, size_t), void *ctx)
{
	pg_buf q = { 0 };
	int rc = -1, bad;

	bad = pg_buf_put(&q, "COPY ", 5) || put_id(s, &q, t->nsp) || pg_buf_put(&q, ".", 1) ||
	      put_id(s, &q, t->rel) || pg_buf_put(&q, " (", 2);
	for (int c = 0; c < t->ncols && !bad; c++)
		bad = (c && pg_buf_put(&q, ", ", 2)) || put_id(s, &q, t->cols[c]);
	if (bad || pg_buf_put(&q, ") TO STDOUT", 12))
		goto oom;
	rc = copy_out(s, (char *)q.p, row, ctx);
	goto out;
oom:
	fail(s, "out of memory");
out:
	pg_buf_free(&q);
	return rc;
}

/* Runs a COPY ... TO STDOUT, row() per line. */
static int copy_out(pg_src *s, const char *q, int (*row)(void *, char *, size_t), void *ctx)
{
	PGresult *r = PQexec(s->sql, q);
	char *line;
	int rc = -1, n, bad;

	if (PQresultStatus(r) != PGRES_COPY_OUT) {
		pq_fail(s, s->sql, "COPY");
		goto out;
	}
	while ((n = PQgetCopyData(s->sql, &line, 0)) > 0) {
		bad = row(ctx, line, n > 0 && line[n - 1] == '\n' ? (size_t)n - 1 : (size_t)n);
		PQfreemem(line);
		if (bad)
			goto out;
	}
	PQclear(r);
	r = PQgetResult(s->sql);
	if (n == -2 || PQresultStatus(r) != PGRES_COMMAND_OK) {
		pq_fail(s, s->sql, "COPY");
		goto out;
	}
	rc = 0;
out:
	PQclear(r);
	while ((r = PQgetResult(s->sql)))
		PQclear(r);
	return rc;
}

int src_copy_query(pg_src *s, const char *sql, int (*row)(void *, char *, size_t), void *ctx)
{
	pg_buf q = { 0 };
	int rc;

	if (pg_buf_put(&q, "COPY (", 6) || pg_buf_put(&q, sql, strlen(sql)) ||
	    pg_buf_put(&q, ") TO STDOUT", 12))
		rc = fail(s, "out of memory");
	else
		rc = copy_out(s, (char *)q.p, row, ctx);
	pg_buf_free(&q);
	return rc;
}

int src_column_types(pg_src *s, pg_table *t, int nt)
{
	for (int i = 0; i < nt; i++) {
		char oid[16];
		const char *pv[1] = { oid };
		snprintf(oid, sizeof oid, "%" PRIu32, t[i].relid);
		PGresult *r = PQexecParams(s->sql,
			"SELECT a.attname, y.typname FROM pg_attribute a JOIN pg_type y ON y.oid = a.atttypid "
			"WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped "
			"AND a.attgenerated = '' ORDER BY a.attnum", 1, NULL, pv, NULL, NULL, 0);
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			PQclear(r);
			return pq_fail(s, s->sql, "reading the column types");
		}
		if (!t[i].types && !(t[i].types = calloc((size_t)t[i].ncols, sizeof(char *)))) {
			PQclear(r);
			return fail(s, "out of memory");
		}
		for (int k = 0; k < PQntuples(r); k++)
			for (int c = 0; c < t[i].ncols; c++)
				if (!strcmp(t[i].cols[c], PQgetvalue(r, k, 0)) && !t[i].types[c] &&
				    !(t[i].types[c] = strdup(PQgetvalue(r, k, 1)))) {
					PQclear(r);
					return fail(s, "out of memory");
				}
		PQclear(r);
	}
	return 0;
}

int src_start(pg_src *s, uint64_t lsn)
{
	char q[400], l[32];
	PGresult *r;
	int rc = 0;

	lsn_fmt(lsn, l, sizeof l);
	snprintf(q, sizeof q, "START_REPLICATION SLOT \"%s\" LOGICAL %s "
	         "(proto_version '1', publication_names '\"%s\"')", s->slot, l, s->pub);
	r = PQexec(s->repl, q);
	if (PQresultStatus(r) != PGRES_COPY_BOTH)
		rc = pq_fail(s, s->repl, "START_REPLICATION");
	PQclear(r);
	return rc;
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

int src_recv(pg_src *s, int timeout_ms, const uint8_t **data, size_t *len)
{
	int n;

	PQfreemem(s->msg);
	s->msg = NULL;
	for (int waited = 0;; waited = 1) {
		n = PQgetCopyData(s->repl, &s->msg, 1);
		if (n != 0)
			break;
		if (waited)
			return 0;
		struct pollfd p = { .fd = PQsocket(s->repl), .events = POLLIN };
		if (poll(&p, 1, timeout_ms) < 0 && errno != EINTR)
			return fail(s, "waiting for the server: %s", strerror(errno));
		if (!PQconsumeInput(s->repl))
			return pq_fail(s, s->repl, "replication stream lost");
	}
	if (n == -1)
		return fail(s, "the server ended the replication stream");
	if (n < 0)
		return pq_fail(s, s->repl, "replication stream lost");
	s->bytes += (uint64_t)n;
	const uint8_t *m = (const uint8_t *)s->msg;
	if (m[0] == 'w' && n >= 25) {
		uint64_t end = be64(m + 9);
		if (end > s->wal_end)
			s->wal_end = end;
		*data = m + 25;
		*len = (size_t)n - 25;
		return 1;
	}
	if (m[0] == 'k' && n >= 18) {
		uint64_t end = be64(m + 1);
		if (end > s->wal_end)
			s->wal_end = end;
		s->reply_requested = m[17];
		return 2;
	}
	return fail(s, "unexpected replication message '%c'", m[0]);
}

int src_sql_alive(pg_src *s)
{
	PGresult *r;

	if (!s->sql)
		return 0;
	if (PQstatus(s->sql) == CONNECTION_OK && PQconsumeInput(s->sql) &&
	    PQstatus(s->sql) == CONNECTION_OK && !PQisBusy(s->sql)) {
		while ((r = PQgetResult(s->sql)))
			PQclear(r);
		return 1;
	}
	if (PQstatus(s->sql) == CONNECTION_OK)
		return 1;  /* busy: a result still to come */
	pq_fail(s, s->sql, "the server closed the SQL connection (shutting down?)");
	return 0;
}

int src_status(pg_src *s, uint64_t written, uint64_t flush)
{
	uint8_t m[34];
	struct timeval tv;

	gettimeofday(&tv, NULL);
	m[0] = 'r';
	put64(m + 1, written);
	put64(m + 9, flush);
	put64(m + 17, flush);
	put64(m + 25, ((uint64_t)tv.tv_sec - 946684800u) * 1000000u + (uint64_t)tv.tv_usec);
	m[33] = 0;
	s->reply_requested = 0;
	if (PQputCopyData(s->repl, (const char *)m, sizeof m) != 1 || PQflush(s->repl) != 0)
		return pq_fail(s, s->repl, "sending the standby status update");
	return 0;
}
