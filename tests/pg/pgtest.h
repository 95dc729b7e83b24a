/*
 * tests/pg/pgtest.h - a throwaway PostgreSQL cluster per test for the
 * ah-pgsync tests: initdb in a private temp dir (as the postgres user when
 * root), a free loopback port, wal_level=logical; psql for SQL (the suite
 * does not link libpq); build/ah-pgsync run as a child process; and the
 * heap read back through the public API in a canonical text form.
 * Tests are skipped when PostgreSQL or AH_BUILD is missing.  The private
 * directory comes from tests/lib (tl_dir.h); everything here asserts
 * through Criterion (the test's own process only; the engine is a child
 * that only execs).
 */
#ifndef TESTS_PG_PGTEST_H
#define TESTS_PG_PGTEST_H

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arrheap.h"
#include "tl_dir.h"

#define PGT_BIN "/usr/lib/postgresql/15/bin"

typedef struct pgt {
	char dir[128];
	char conn[256];     /* for ah-pgsync -d and psql */
	char sync[512];     /* path of ah-pgsync */
	const char *env;    /* shell words before ah-pgsync (pgt_engine, pgt_verify) */
	int port;
} pgt;

static inline int pgt_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int pgt_sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static inline const char *pgt_as_pg(void)
{
	return geteuid() == 0 ? "runuser -u postgres -- " : "";
}

static inline int pgt_port_free(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
	close(fd);
	return ok;
}

/* The running test's cluster and engines, stopped by pgt_fini also after a
 * failed assertion (Criterion runs .fini then, after the test's stack frame
 * is gone: so the directory is kept here, not a pointer to the test's pgt). */
static char pgt_cur_dir[128];
static pid_t pgt_pids[8];

static inline void pgt_stop_dir(const char *dir);
static inline void pgt_fini(void)
{
	for (int i = 0; i < 8; i++)
		if (pgt_pids[i] > 0)
			kill(pgt_pids[i], SIGKILL);
	if (pgt_cur_dir[0])
		pgt_stop_dir(pgt_cur_dir);
}

/* Starts the cluster with extra server options (-c name=value ...). */
static inline void pgt_start_opts(pgt *c, const char *opts)
{
	c->env = "";
	const char *b = getenv("AH_BUILD");
	if (!b || access(PGT_BIN "/initdb", X_OK) != 0)
		cr_skip_test("needs AH_BUILD and PostgreSQL 15 (make deps)");
	snprintf(c->sync, sizeof c->sync, "%s/ah-pgsync", b);
	tl_dir tmp = tl_tmpdir("pg");
	snprintf(c->dir, sizeof c->dir, "%s", tmp.dir);
	memcpy(pgt_cur_dir, c->dir, sizeof pgt_cur_dir);
	chmod(c->dir, 0755);
	if (geteuid() == 0)
		cr_assert_eq(pgt_sh("chown postgres '%s'", c->dir), 0);
	cr_assert_eq(pgt_sh("%s" PGT_BIN "/initdb -N -A trust -U postgres -D %s/data >/dev/null",
	                    pgt_as_pg(), c->dir), 0);
	for (int tries = 0; tries < 20; tries++) {
		c->port = 55000 + (int)((getpid() * 7 + tries * 13) % 3000);
		if (!pgt_port_free(c->port))
			continue;
		if (pgt_sh("%s" PGT_BIN "/pg_ctl -D %s/data -l %s/pg.log -w -o \"-c listen_addresses="
		           "127.0.0.1 -p %d -c unix_socket_directories=%s -c wal_level=logical "
		           "-c max_replication_slots=8 -c max_wal_senders=8 -c fsync=off %s\" start >/dev/null",
		           pgt_as_pg(), c->dir, c->dir, c->port, c->dir, opts) == 0)
			break;
		c->port = 0;
	}
	cr_assert_neq(c->port, 0, "could not start a cluster");
	snprintf(c->conn, sizeof c->conn, "host=127.0.0.1 port=%d user=postgres dbname=postgres",
	         c->port);
}

static inline void pgt_start(pgt *c)
{
	pgt_start_opts(c, "");
}

static inline void pgt_stop_dir(const char *dir)
{
	pgt_sh("%s" PGT_BIN "/pg_ctl -D %s/data -m immediate stop >/dev/null 2>&1", pgt_as_pg(), dir);
	if (!strncmp(dir, "/tmp/ah-pg-", 11)) /* only a dir tl_tmpdir("pg") made */
		pgt_sh("rm -rf '%s'", dir);
	pgt_cur_dir[0] = 0;
}

static inline void pgt_stop(pgt *c)
{
	pgt_stop_dir(c->dir);
}

/* Runs SQL with psql in database db; returns its trimmed output (malloc). */
static inline char *pgt_sql(pgt *c, const char *db, const char *sql)
{
	char path[256], cmd[512];
	snprintf(path, sizeof path, "%s/q.sql", c->dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(sql, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "psql -X -A -t -q -v ON_ERROR_STOP=1 'host=127.0.0.1 port=%d "
	         "user=postgres dbname=%s' -f %s 2>&1", c->port, db, path);
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	char *out = calloc(1, 1 << 16);
	size_t n = fread(out, 1, (1 << 16) - 1, p);
	int st = pclose(p);
	while (n && out[n - 1] == '\n')
		out[--n] = 0;
	cr_assert_eq(st, 0, "psql failed on: %s\n%s", sql, out);
	return out;
}

static inline void pgt_exec(pgt *c, const char *db, const char *sql)
{
	free(pgt_sql(c, db, sql));
}

/* Runs sh -c cmd in a child that pgt_fini kills if the test fails. */
static inline pid_t pgt_spawn(const char *cmd)
{
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 8; i++)
		if (pgt_pids[i] <= 0) {
			pgt_pids[i] = pid;
			break;
		}
	return pid;
}

/* Starts ah-pgsync on heap with extra args; stderr to dir/NAME.log. */
static inline pid_t pgt_engine(pgt *c, const char *heap, const char *log, const char *args)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s exec %s -d '%s' --group-ms 50 %s %s/%s >/dev/null 2>%s/%s", c->env,
	         c->sync, c->conn, args ? args : "", c->dir, heap, c->dir, log);
	return pgt_spawn(cmd);
}

static inline int pgt_wait_pid(pid_t pid)
{
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	for (int i = 0; i < 8; i++)
		if (pgt_pids[i] == pid)
			pgt_pids[i] = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs ah-pgsync to completion (an expected error); returns its status. */
static inline int pgt_engine_run(pgt *c, const char *heap, const char *log, const char *args)
{
	return pgt_wait_pid(pgt_engine(c, heap, log, args));
}

/* Waits until the first copy is in place (the heap file exists). */
static inline void pgt_wait_heap(pgt *c, const char *heap)
{
	char path[300];
	snprintf(path, sizeof path, "%s/%s", c->dir, heap);
	for (int i = 0; i < 1500 && access(path, F_OK) != 0; i++)
		usleep(20000);
	cr_assert_eq(access(path, F_OK), 0, "no first copy in %s", path);
}

/* An LSN at or past the end of every transaction committed so far (malloc).
 * pg_current_wal_lsn() (the write position) lags commits that returned
 * under synchronous_commit=off, and pg_current_wal_insert_lsn() can point
 * past WAL not yet written (after the header of an empty page).  A marker
 * transaction that writes WAL (a transactional logical message: pgoutput
 * does not send it) committed synchronously flushes all WAL before it, so
 * the flush position after it covers every earlier commit and is
 * reachable.  tools/demo.sh does the same. */
static inline char *pgt_wal_lsn(pgt *c, const char *db)
{
	char *out = pgt_sql(c, db, "SET synchronous_commit = on;\n"
	                    "SELECT pg_logical_emit_message(true, 'ah-pgsync', 'marker') IS NOT NULL;\n"
	                    "SELECT pg_current_wal_flush_lsn();\n");
	char *nl = strrchr(out, '\n');
	cr_assert(nl && !strncmp(out, "t\n", 2), "%s", out);
	memmove(out, nl + 1, strlen(nl + 1) + 1);
	return out;
}

/* Waits until the heap has every transaction committed so far. */
static inline void pgt_catch_up(pgt *c, const char *db, const char *heap)
{
	char *lsn = pgt_wal_lsn(c, db);
	int rc = pgt_sh("%s wait %s/%s %s 60 >/dev/null", c->sync, c->dir, heap, lsn);
	cr_assert_eq(rc, 0, "heap did not catch up with %s", lsn);
	free(lsn);
}

/* The contents of a file in the test dir (malloc, NUL-terminated). */
static inline char *pgt_file(pgt *c, const char *name)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", c->dir, name);
	FILE *f = fopen(path, "r");
	char *s = calloc(1, 1 << 16);
	if (f) {
		size_t n = fread(s, 1, (1 << 16) - 1, f);
		s[n] = 0;
		fclose(f);
	}
	return s;
}

/* Polls until the SQL query returns "t" (up to secs seconds). */
static inline void pgt_poll(pgt *c, const char *db, const char *sql, int secs)
{
	for (int i = 0; i < secs * 10; i++) {
		char *r = pgt_sql(c, db, sql);
		int ok = !strcmp(r, "t");
		free(r);
		if (ok)
			return;
		usleep(100000);
	}
	cr_assert_fail("still not true after %d s: %s", secs, sql);
}

/* Waits until the file name in the test dir contains needle. */
static inline void pgt_wait_log(pgt *c, const char *name, const char *needle, int secs)
{
	for (int i = 0; i < secs * 20; i++) {
		char *s = pgt_file(c, name);
		int ok = strstr(s, needle) != NULL;
		free(s);
		if (ok)
			return;
		usleep(50000);
	}
	cr_assert_fail("no \"%s\" in %s after %d s:\n%s", needle, name, secs, pgt_file(c, name));
}

static inline int pgt_verify(pgt *c, const char *db, const char *heap)
{
	return pgt_sh("%s %s verify -d 'host=127.0.0.1 port=%d user=postgres dbname=%s' %s/%s "
	              ">%s/verify.log 2>&1", c->env, c->sync, c->port, db, c->dir, heap, c->dir);
}

/* One field of the row encoding (tools/pg/row.h) as text: NULL, or the
 * text form with \t \n \\ escaped. */
static inline int pgt_field(const uint8_t **p, const uint8_t *end, char **o)
{
	uint64_t v = 0;
	unsigned sh = 0;
	if (*p >= end)
		return 0;
	while (*p < end) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << sh;
		sh += 7;
		if (!(b & 0x80))
			break;
	}
	if (v == 0) {
		*o += sprintf(*o, "NULL");
		return 1;
	}
	for (uint64_t i = 0; i + 1 < v && *p < end; i++) {
		char ch = (char)*(*p)++;
		*o += ch == '\t' ? sprintf(*o, "\\t") : ch == '\n' ? sprintf(*o, "\\n")
		      : ch == '\\' ? sprintf(*o, "\\\\") : sprintf(*o, "%c", ch);
	}
	return 1;
}

static inline void pgt_fields(const void *p, size_t len, char **o)
{
	const uint8_t *q = p, *end = q + len;
	for (int n = 0; q < end; n++) {
		if (n)
			*(*o)++ = ',';
		pgt_field(&q, end, o);
	}
	**o = 0;
}

/* An arrangement at the heap's frontier: "key|val|count\n" lines in the
 * arrangement's order (malloc). */
static inline char *pgt_read(pgt *c, const char *heap, const char *name)
{
	char path[256];
	ah_heap *h;
	ah_txn *t;
	ah_cursor *cur;
	ah_arrangement_info in;
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	char *out = calloc(1, 1 << 20), *w = out;
	snprintf(path, sizeof path, "%s/%s", c->dir, heap);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, name, &in), 0, "no arrangement %s", name);
	cr_assert_eq(ah_cursor_open(t, name, &cur), 0);
	cr_assert_geq(ah_cursor_rewind_keys(cur), 0);
	while (ah_cursor_key_valid(cur)) {
		while (ah_cursor_val_valid(cur)) {
			const void *k, *v;
			size_t kl, vl;
			int64_t sum;
			cr_assert_eq(ah_cursor_key(cur, &k, &kl), 0);
			cr_assert_eq(ah_cursor_val(cur, &v, &vl), 0);
			cr_assert_eq(ah_cursor_accumulate(cur, in.upper - 1, &sum), 0);
			if (sum) {
				pgt_fields(k, kl, &w);
				*w++ = '|';
				pgt_fields(v, vl, &w);
				w += sprintf(w, "|%" PRId64 "\n", sum);
			}
			cr_assert_geq(ah_cursor_step_val(cur), 0);
		}
		cr_assert_geq(ah_cursor_step_key(cur), 0);
	}
	ah_cursor_close(cur);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	return out;
}

/* The number of rows (sum of counts) of an arrangement at its frontier. */
static inline int64_t pgt_rows(pgt *c, const char *heap, const char *name)
{
	char path[256];
	ah_heap *h;
	ah_txn *t;
	ah_cursor *cur;
	ah_arrangement_info in;
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	int64_t rows = 0, sum;
	snprintf(path, sizeof path, "%s/%s", c->dir, heap);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_arrangement_info_get(t, name, &in), 0, "no arrangement %s", name);
	cr_assert_eq(ah_cursor_open(t, name, &cur), 0);
	cr_assert_geq(ah_cursor_rewind_keys(cur), 0);
	while (ah_cursor_key_valid(cur)) {
		while (ah_cursor_val_valid(cur)) {
			cr_assert_eq(ah_cursor_accumulate(cur, in.upper - 1, &sum), 0);
			rows += sum;
			cr_assert_geq(ah_cursor_step_val(cur), 0);
		}
		cr_assert_geq(ah_cursor_step_key(cur), 0);
	}
	ah_cursor_close(cur);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	return rows;
}

/* The id of the heap's last commit: equal before and after = untouched.
 * (The files are sparse and huge: no cmp.) */
static inline uint64_t pgt_last_txn(pgt *c, const char *heap)
{
	char path[256];
	ah_heap *h;
	ah_heap_stat st;
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	snprintf(path, sizeof path, "%s/%s", c->dir, heap);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_heap_stat_get(h, &st), 0);
	cr_assert_eq(ah_close(h), 0);
	return st.last_txn_id;
}

/* The time of the only update of the key whose text form is key. */
static inline uint64_t pgt_time_of(pgt *c, const char *heap, const char *name, const char *key)
{
	char path[256], text[4096], *w;
	ah_heap *h;
	ah_txn *t;
	ah_cursor *cur;
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_RDONLY };
	uint64_t time = 0;
	int64_t diff;
	snprintf(path, sizeof path, "%s/%s", c->dir, heap);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	cr_assert_eq(ah_cursor_open(t, name, &cur), 0);
	cr_assert_geq(ah_cursor_rewind_keys(cur), 0);
	while (ah_cursor_key_valid(cur)) {
		const void *k;
		size_t kl;
		cr_assert_eq(ah_cursor_key(cur, &k, &kl), 0);
		w = text;
		pgt_fields(k, kl, &w);
		if (strcmp(text, key) == 0) {
			cr_assert_eq(ah_cursor_time_next(cur, &time, &diff), 1);
			break;
		}
		cr_assert_geq(ah_cursor_step_key(cur), 0);
	}
	ah_cursor_close(cur);
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
	return time;
}

#endif /* TESTS_PG_PGTEST_H */
