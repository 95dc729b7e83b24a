/*
 * tools/pg/follow.c - whether ah-pgsync can follow a table that is new to
 * the stream: a Relation message for a relation the heap does not hold.
 *
 * The stream holds all of a table's rows only if every change since the
 * table's first row was both published and logically decoded.  That is
 * certain when, together:
 *
 *   1. the publication is FOR ALL TABLES and is the one the first copy
 *      used (same OID): such a publication covers every ordinary logged
 *      table from its creation on; with FOR TABLE or TABLES IN SCHEMA a
 *      table can join later (ALTER PUBLICATION, SET SCHEMA) after rows
 *      that were never sent;
 *   2. its OID is above every pg_class OID the first copy's exported
 *      snapshot saw (pg.snapshot relid_max): the table did not exist at the
 *      slot's consistent point, so the transaction that created it commits
 *      after it, and it and every later change are decoded (a table that
 *      existed, was not copied and became published later is refused);
 *   3. it is an ordinary permanent table that was never rewritten
 *      (relfilenode = OID): in particular never SET LOGGED, whose rows
 *      written while unlogged are not in the WAL (a TRUNCATE, VACUUM FULL,
 *      CLUSTER or rewriting ALTER TABLE before ah-pgsync first saw the
 *      table is refused too: safe, if cautious);
 *   4. the catalog still describes it as the message does (names, columns).
 *
 * Anything else is refused with one line naming the cause and the fix: a
 * refusal never loses rows, a wrong yes would.  A relid that wrapped
 * around below relid_max is refused as well.  Queries run on the SQL
 * connection; nothing here writes the heap.
 *
 * It must never answer yes on a doubt: a check it cannot make (a heap
 * without pg.snapshot, a relation dropped meanwhile, a failed query) is a
 * refusal or an error, never a follow.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tools/pg/engine.h"
#include "tools/pg/pgoutput.h"
#include "tools/pg/source.h"

static int refuse(char *err, size_t len, const char *name, const char *why)
{
	snprintf(err, len, "table %s is new to the stream but %s: make a new heap and slot to "
	         "include it", name, why);
	return -1;
}

int follow_table(pg_src *src, const pg_stored *st, const po_msg *m, pg_table *t, char *err,
                 size_t len)
{
	const char *nsp = *m->nspname ? m->nspname : "pg_catalog";
	char name[300], why[400];
	pg_pub pub;
	pg_rel rel;

	memset(t, 0, sizeof *t);
	snprintf(name, sizeof name, "%s.%s", pg_disp(nsp), pg_disp(m->relname));
	if (!st->have_snapshot)
		return refuse(err, len, name, "the heap (made by an older ah-pgsync) does not record "
		              "what its first copy saw, so whether its earlier rows are in the stream "
		              "is unknown");
	if (src_publication(src, &pub) != 0) {
		snprintf(err, len, "%s", src->err);
		return -2;
	}
	if (pub.oid != st->pub_oid) {
		snprintf(why, sizeof why, "publication %s was dropped and re-created since the heap "
		         "was made, so whether its earlier rows are in the stream is unknown", src->pub);
		return refuse(err, len, name, why);
	}
	if (!pub.all_tables) {
		snprintf(why, sizeof why, "it joined publication %s after the heap was made, and that "
		         "publication is not FOR ALL TABLES, so its earlier rows are missing", src->pub);
		return refuse(err, len, name, why);
	}
	if (m->relid <= st->relid_max) {
		snprintf(why, sizeof why, "it existed before the slot (relid %" PRIu32 " <= %" PRIu32
		         ", the largest the first copy saw) and joined the publication later, so its "
		         "earlier rows are missing", m->relid, st->relid_max);
		return refuse(err, len, name, why);
	}
	if (src_relation(src, m->relid, t, &rel) != 0) {
		snprintf(err, len, "%s", src->err);
		table_clear(t);
		return -2;
	}
	if (!rel.exists)
		return refuse(err, len, name, "it was dropped before ah-pgsync could read its key and "
		              "check its history");
	if (rel.kind != 'r' || rel.persistence != 'p' || rel.relfilenode != m->relid) {
		table_clear(t);
		return refuse(err, len, name, "it is not a permanent ordinary table that was never "
		              "rewritten (rows written while a table was unlogged are not in the WAL, "
		              "and a TRUNCATE, VACUUM FULL or rewriting ALTER TABLE before ah-pgsync saw "
		              "it hides whether it was)");
	}
	int same = t->ncols == m->ncols && !strcmp(t->nsp, nsp) && !strcmp(t->rel, m->relname);
	for (int i = 0; same && i < m->ncols; i++)
		same = !strcmp(t->cols[i], m->colnames[i]);
	if (!same) {
		table_clear(t);
		snprintf(err, len, "table %s was renamed or its columns changed since the change "
		         "being applied (ah-pgsync does not follow DDL): make a new heap and slot", name);
		return -1;
	}
	return 0;
}
