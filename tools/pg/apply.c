/*
 * tools/pg/apply.c - turns decoded pgoutput messages into the sink's
 * updates: insert (key, row, +1), delete (key, old row, -1), update both,
 * TRUNCATE the retraction of every current row.  Refuses what the heap
 * cannot follow (a changed column list, a missing old row; a table new to
 * the stream is decided before, by follow.c) with a message that names the
 * fix, and marks the sink stuck: the stream holds the same change after a
 * restart.  It never writes the heap (sink_flush does) and never lets a
 * change it refused reach the sink's staging.
 *
 * It must never retract a row the message does not carry: an update or
 * delete without the whole old row (REPLICA IDENTITY other than FULL) is
 * refused, never applied by key alone.
 */
#include <stdio.h>
#include <string.h>

#include "tools/pg/engine.h"
#include "tools/pg/pgoutput.h"

static int relation(sink *s, const po_msg *m)
{
	pg_table *t = sink_table(s, m->relid);
	const char *nsp = *m->nspname ? m->nspname : "pg_catalog";

	s->stuck = 1;
	if (!t) {
		snprintf(s->err, sizeof s->err, "table %s.%s joined the publication after the heap was "
		         "made, so its earlier rows are missing: make a new heap (and slot) to include it",
		         pg_disp(nsp), pg_disp(m->relname));
		return -1;
	}
	int same = m->ncols == t->ncols && !strcmp(nsp, t->nsp) && !strcmp(m->relname, t->rel);
	for (int i = 0; same && i < m->ncols; i++)
		same = !strcmp(m->colnames[i], t->cols[i]);
	if (!same) {
		snprintf(s->err, sizeof s->err, "table %s.%s was renamed or its columns changed since the "
		         "heap was made (ah-pgsync does not follow DDL): make a new heap and slot",
		         pg_disp(t->nsp), pg_disp(t->rel));
		return -1;
	}
	if (m->replident != 'f') {
		snprintf(s->err, sizeof s->err, "table %s.%s lacks REPLICA IDENTITY FULL, so its updates "
		         "and deletes do not carry the old row: ALTER TABLE %s.%s REPLICA IDENTITY FULL",
		         pg_disp(t->nsp), pg_disp(t->rel), pg_disp(t->nsp), pg_disp(t->rel));
		return -1;
	}
	s->stuck = 0;
	return 0;
}

static pg_table *table_of(sink *s, const po_msg *m, const po_tuple *tp)
{
	pg_table *t = sink_table(s, m->relid);

	s->stuck = !t || tp->ncols != t->ncols;
	if (!t)
		snprintf(s->err, sizeof s->err, "a change of unknown relation %u before its Relation "
		         "message", m->relid);
	else if (tp->ncols != t->ncols)
		snprintf(s->err, sizeof s->err, "a change of %s has %d columns, not %d: its columns "
		         "changed since the heap was made: make a new heap and slot",
		         t->name, tp->ncols, t->ncols);
	else
		return t;
	return NULL;
}

static int need_old(sink *s, const po_msg *m)
{
	pg_table *t = sink_table(s, m->relid);

	if (m->old_kind == 'O')
		return 0;
	s->stuck = 1;
	snprintf(s->err, sizeof s->err, "an update or delete of %s came without the old row: "
	         "ALTER TABLE %s.%s REPLICA IDENTITY FULL", t ? t->name : "a table",
	         t ? t->nsp : "?", t ? t->rel : "?");
	return -1;
}

int apply_msg(sink *s, const po_msg *m, int *committed)
{
	pg_table *t;
	int skipped;

	*committed = 0;
	switch (m->type) {
	case 'B':
		sink_begin(s);  /* drops an open one: the server abandoned it */
		return 0;
	case 'C':
		*committed = 1;
		return sink_commit(s, m->end_lsn, &skipped);
	case 'R':
		return relation(s, m);
	case 'I':
		if (!(t = table_of(s, m, &m->new_t)))
			return -1;
		return sink_row(s, t, m->new_t.f, +1);
	case 'U':
		if (need_old(s, m) || !(t = table_of(s, m, &m->new_t)) || !table_of(s, m, &m->old_t))
			return -1;
		/* An unchanged TOAST value ('u') is only in the old row. */
		for (int i = 0; i < t->ncols; i++)
			if (m->new_t.kind[i] == 'u')
				m->new_t.f[i] = m->old_t.f[i];
		if (sink_row(s, t, m->old_t.f, -1) != 0)
			return -1;
		return sink_row(s, t, m->new_t.f, +1);
	case 'D':
		if (need_old(s, m) || !(t = table_of(s, m, &m->old_t)))
			return -1;
		return sink_row(s, t, m->old_t.f, -1);
	case 'T':
		for (int i = 0; i < m->nrels; i++) {
			if (!(t = sink_table(s, m->relids[i]))) {
				s->stuck = 1;
				snprintf(s->err, sizeof s->err, "TRUNCATE of unknown relation %u", m->relids[i]);
				return -1;
			}
			if (sink_truncate(s, t) != 0)
				return -1;
		}
		return 0;
	default:
		return 0;
	}
}
