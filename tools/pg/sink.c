/*
 * tools/pg/sink.c - buffers source transactions per table and commits
 * groups of them to the heap (see sink.h), through the shared engine
 * (tools/common/ingest.h).  The one place that writes the heap while
 * streaming: one write transaction per group holds every table's batch,
 * the advanced uppers and the new "pg.lsn", or nothing.  What is here is
 * PostgreSQL's: row encoding, TRUNCATE, the skip of resent transactions,
 * the pg.* records and the tables followed since this run.  It must never
 * commit pg.lsn past a transaction whose rows are not in the same commit,
 * nor drop a transaction sink_commit took.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/engine/engine.h"
#include "tools/pg/sink.h"

static int oom(sink *s)
{
	snprintf(s->err, sizeof s->err, "out of memory");
	return -1;
}

pg_table *sink_table(sink *s, uint32_t relid)
{
	for (int i = 0; i < s->nt; i++)
		if (s->t[i].relid == relid)
			return &s->t[i];
	return NULL;
}

int sink_encode(sink *s, const pg_table *t, const pg_field *f, size_t *klen)
{
	s->kv.len = 0;
	if (t->nkey > 0) {
		if (row_put_fields(&s->kv, f, t->key, t->nkey) != 0)
			return oom(s);
		*klen = s->kv.len;
		if (row_put_fields(&s->kv, f, NULL, t->ncols) != 0)
			return oom(s);
	} else {
		if (row_put_fields(&s->kv, f, NULL, t->ncols) != 0)
			return oom(s);
		*klen = s->kv.len;
	}
	return 0;
}

int sink_start(sink *s)
{
	for (int i = 0; i < s->nt; i++)
		if (!s->t[i].arr && !(s->t[i].arr = ingest_add(&s->ig, s->t[i].name)))
			return oom(s);
	return 0;
}

/* Stages one change of the open source txn; its time comes with the
 * commit (ingest_src_commit). */
static int push(sink *s, pg_table *t, const void *k, size_t kl, const void *v, size_t vl,
                int64_t diff)
{
	return ingest_stage(&s->ig, t->arr, k, kl, v, vl, 0, diff) ? oom(s) : 0;
}

void sink_begin(sink *s)
{
	ingest_src_begin(&s->ig);
}

int sink_row(sink *s, pg_table *t, const pg_field *f, int64_t diff)
{
	size_t kl;

	if (sink_encode(s, t, f, &kl) != 0)
		return -1;
	if (s->kv.len > UINT32_MAX) {
		snprintf(s->err, sizeof s->err, "a row of %s is larger than 4 GiB", t->name);
		return -1;
	}
	return push(s, t, s->kv.p, kl, s->kv.p + kl, s->kv.len - kl, diff);
}

/* ---- TRUNCATE: the table's current rows, from the heap and pending ---- */

typedef struct kvref {
	const uint8_t *k, *v;
	size_t kl, vl;
	int64_t diff;
	size_t off;   /* heap rows: offset in the copy until it stops moving */
} kvref;

static int cmp_bytes(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	return c ? c : (al > bl) - (al < bl);
}

static int cmp_kv(const void *x, const void *y)
{
	const kvref *a = x, *b = y;
	int c = cmp_bytes(a->k, a->kl, b->k, b->kl);
	return c ? c : cmp_bytes(a->v, a->vl, b->v, b->vl);
}

/* Appends the heap's (key, val, count) at its frontier to copy/refs.  Every
 * cursor call is checked (a step returns 1 on a key or val, 0 at the end,
 * < 0 an error): a damaged heap fails the TRUNCATE, never makes it retract
 * part of the table. */
static int heap_rows(sink *s, pg_table *t, pg_buf *copy, kvref **refs, size_t *n, size_t *cap)
{
	ah_txn *txn = NULL;
	ah_cursor *c = NULL;
	int rc;

	if (s->pos == 0 || !t->in_heap)
		return 0;
	if ((rc = ah_txn_begin(s->ig.heap, AH_TXN_RDONLY, &txn)) != 0 ||
	    (rc = ah_cursor_open(txn, t->name, &c)) != 0 ||
	    (rc = ah_cursor_rewind_keys(c)) < 0)  /* positions it: an error shows here */
		goto out;
	while (ah_cursor_key_valid(c)) {
		while (ah_cursor_val_valid(c)) {
			const void *k, *v;
			size_t kl, vl;
			int64_t sum;
			if ((rc = ah_cursor_key(c, &k, &kl)) || (rc = ah_cursor_val(c, &v, &vl)) ||
			    (rc = ah_cursor_accumulate(c, s->pos, &sum)))
				goto out;
			if (sum != 0) {
				if (*n == *cap) {
					kvref *q = realloc(*refs, (*cap = *cap ? *cap * 2 : 1024) * sizeof *q);
					if (!q) {
						rc = AH_ENOMEM;
						goto out;
					}
					*refs = q;
				}
				/* offsets now, pointers once copy stops moving */
				(*refs)[*n] = (kvref){ NULL, NULL, kl, vl, sum, copy->len };
				(*n)++;
				if (pg_buf_put(copy, k, kl) || pg_buf_put(copy, v, vl)) {
					rc = AH_ENOMEM;
					goto out;
				}
			}
			if ((rc = ah_cursor_step_val(c)) < 0)
				goto out;
		}
		if ((rc = ah_cursor_step_key(c)) < 0)
			goto out;
	}
	rc = 0;
out:
	ah_cursor_close(c);
	ah_txn_abort(txn);
	if (rc)
		snprintf(s->err, sizeof s->err, "reading %s for TRUNCATE: %s", t->name, ah_strerror(rc));
	return rc ? -1 : 0;
}

int sink_truncate(sink *s, pg_table *t)
{
	const ingest_arr *a = t->arr;
	pg_buf copy = { 0 };
	kvref *r = NULL;
	size_t n = 0, cap = 0, nh;
	int rc = -1;

	if (heap_rows(s, t, &copy, &r, &n, &cap) != 0)
		goto out;
	nh = n;
	if (cap < n + a->n) {
		kvref *q = realloc(r, (n + a->n + 1) * sizeof *q);
		if (!q) {
			oom(s);
			goto out;
		}
		r = q;
	}
	for (size_t i = 0; i < nh; i++) {
		r[i].k = copy.p + r[i].off;
		r[i].v = r[i].k + r[i].kl;
	}
	for (size_t i = 0; i < a->n; i++) {
		ah_update u;
		ingest_updates(a, i, 1, &u);
		r[n++] = (kvref){ u.key, u.val, u.key_len, u.val_len, u.diff, 0 };
	}
	qsort(r, n, sizeof *r, cmp_kv);
	/* The retractions go after the pending entries they were computed
	 * from; the staged bytes may move, so gather them in out first. */
	pg_buf out = { 0 };
	kvref *res = NULL;
	size_t nres = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i;
		int64_t sum = 0;
		while (j < n && cmp_kv(&r[i], &r[j]) == 0)
			sum += r[j++].diff;
		if (sum != 0) {
			kvref *q = realloc(res, (nres + 1) * sizeof *q);
			if (!q || pg_buf_put(&out, r[i].k, r[i].kl) || pg_buf_put(&out, r[i].v, r[i].vl)) {
				free(q ? q : res);
				pg_buf_free(&out);
				oom(s);
				goto out;
			}
			res = q;
			res[nres++] = (kvref){ NULL, NULL, r[i].kl, r[i].vl, -sum, 0 };
		}
		i = j;
	}
	rc = 0;
	for (size_t i = 0, off = 0; i < nres && rc == 0; i++) {
		rc = push(s, t, out.p + off, res[i].kl, out.p + off + res[i].kl, res[i].vl, res[i].diff);
		off += res[i].kl + res[i].vl;
	}
	free(res);
	pg_buf_free(&out);
out:
	free(r);
	pg_buf_free(&copy);
	return rc;
}

int sink_commit(sink *s, uint64_t end_lsn, int *skipped)
{
	uint64_t n;

	*skipped = end_lsn <= s->group_pos;
	if (*skipped) {
		sink_rollback(s);
		s->skipped++;
		return 0;
	}
	n = ingest_src_commit(&s->ig, end_lsn);
	s->group_updates += n;
	s->updates += n;
	s->group_pos = end_lsn;
	s->group_txns++;
	s->txns++;
	return 0;
}

/* Only the open transaction is dropped: once sink_commit ran, group_pos
 * counts the transaction as received, so its updates must reach the heap
 * with the next flush (a rollback here would commit pg.lsn past rows the
 * heap never got, and the slot would be confirmed past them). */
void sink_rollback(sink *s)
{
	ingest_src_rollback(&s->ig);
}

void sink_idle(sink *s, uint64_t wal_end)
{
	if (!s->ig.in_src && wal_end > s->group_pos)
		s->group_pos = wal_end;
}

int sink_add_table(sink *s, pg_table *t)
{
	pg_table *q;
	ingest_arr *a;

	for (int i = 0; i < s->nt; i++)
		if (!strcmp(s->t[i].name, t->name)) {
			snprintf(s->err, sizeof s->err, "table %s.%s (relid %" PRIu32 ") has the "
			         "arrangement name %s of table %s.%s (relid %" PRIu32 ") that the heap "
			         "follows: it was dropped and re-created, or renamed (ah-pgsync does not "
			         "follow DDL): make a new heap and slot", pg_disp(t->nsp),
			         pg_disp(t->rel), t->relid, t->name, pg_disp(s->t[i].nsp),
			         pg_disp(s->t[i].rel), s->t[i].relid);
			s->stuck = 1;
			return -1;
		}
	if (!(q = realloc(s->t, (size_t)(s->nt + 1) * sizeof *q)))
		return oom(s);
	s->t = q;
	if (!(a = ingest_add(&s->ig, t->name)))
		return oom(s);
	q[s->nt] = *t;
	q[s->nt].in_heap = 0;
	q[s->nt].arr = a;
	s->nt++;
	memset(t, 0, sizeof *t);
	return 0;
}

/* In one write transaction: every table's batch [pos + 1, group_pos + 1)
 * (a table followed since this run: created, with its first rows from 0,
 * or left out while it has none), the views stepped over those batches,
 * pg.lsn = group_pos, pg.tables when a
 * table was created, pg.stats and (once) pg.settings.  A table created is
 * marked in_heap 2 until the commit says whether it is in the heap. */
int sink_flush(sink *s)
{
	ingest *g = &s->ig;
	ingest_pos p[4];
	char lsn[32], stats[100];
	pg_buf tabs = { 0 };
	size_t np = 0;
	int rc, i = -1, created = 0, views_failed = 0;

	if (g->in_src || s->group_pos == s->pos)
		return 0;
	if ((rc = ingest_begin(g)) != 0)
		goto out;
	for (i = 0; i < s->nt; i++) {
		pg_table *t = &s->t[i];
		if (t->in_heap)
			rc = ingest_append(g, t->arr, s->pos + 1, s->group_pos + 1);
		else if (t->arr->n == 0)
			continue;  /* followed, but no rows yet: not in the heap */
		else if ((rc = ah_arrangement_create(g->txn, t->name)) == 0 &&
		         (rc = ingest_append(g, t->arr, 0, s->group_pos + 1)) == 0) {
			t->in_heap = 2;
			created++;
		}
		if (rc)
			goto out;
	}
	i = -1;
	/* the views derive from the batches just appended: same txn, same upper */
	if (s->views) {
		struct timespec v0, v1;
		clock_gettime(CLOCK_MONOTONIC, &v0);
		if ((rc = eg_step(s->views, g->txn, s->pos + 1, s->group_pos + 1)) != 0) {
			views_failed = 1;
			goto out;
		}
		/* logical compaction behind the views: since may reach the new LSN
		 * (the next step's lower is past it), but no reader's hold */
		for (int k = 0; k < s->nt; k++)
			if (s->t[k].in_heap &&
			    (rc = eg_compact(g->txn, s->t[k].name, s->group_pos, NULL)) != 0) {
				i = k;
				goto out;
			}
		for (size_t k = 0; k < eg_node_count(s->views); k++)
			if ((rc = eg_compact(g->txn, eg_node_output(s->views, k), s->group_pos, NULL)) != 0)
				goto out;
		clock_gettime(CLOCK_MONOTONIC, &v1);
		s->views_ms += (double)(v1.tv_sec - v0.tv_sec) * 1e3 +
		               (double)(v1.tv_nsec - v0.tv_nsec) / 1e6;
	}
	lsn_fmt(s->group_pos, lsn, sizeof lsn);
	p[np++] = (ingest_pos){ "pg.lsn", lsn, strlen(lsn) };
	if (created) {
		/* the new tables go into pg.tables with their first rows */
		if (tables_format(s->t, s->nt, &tabs) != 0) {
			rc = AH_ENOMEM;
			goto out;
		}
		p[np++] = (ingest_pos){ "pg.tables", tabs.p, tabs.len };
	}
	snprintf(stats, sizeof stats, "txns=%" PRIu64 " updates=%" PRIu64 "\n", s->total_txns + s->txns,
	         s->total_updates + s->updates);
	p[np++] = (ingest_pos){ "pg.stats", stats, strlen(stats) };
	if (s->settings)
		p[np++] = (ingest_pos){ "pg.settings", s->settings, strlen(s->settings) };
	if ((rc = ingest_commit(g, p, np, NULL)) != 0)
		goto out;
	s->settings = NULL;
	s->pos = s->group_pos;
	s->group_txns = 0;
	s->group_updates = 0;
	for (i = 0; i < s->nt; i++)
		if (s->t[i].in_heap == 2)
			s->t[i].in_heap = 1;
	pg_buf_free(&tabs);
	return 0;
out:
	for (int k = 0; k < s->nt; k++)
		if (s->t[k].in_heap == 2)
			s->t[k].in_heap = 0;
	pg_buf_free(&tabs);
	if (views_failed)
		snprintf(s->err, sizeof s->err, "maintaining the views: %s (%s)", eg_errmsg(s->views),
		         ah_strerror(rc));
	else
		ingest_error(g, rc, i >= 0 ? "heap commit of" : "heap commit",
		             i >= 0 ? s->t[i].name : NULL, s->err, sizeof s->err);
	ingest_abort(g);
	return -1;
}

void sink_free(sink *s)
{
	ingest_free(&s->ig);
	tables_free(s->t, s->nt);
	s->t = NULL;
	s->nt = 0;
	pg_buf_free(&s->kv);
}
