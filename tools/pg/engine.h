/*
 * tools/pg/engine.h - the pieces of ah-pgsync shared by its commands: the
 * heap's identity and table records, read back and checked.  The commands
 * themselves are in tools/ah-pgsync.c (sync) and tools/pg/verify.c
 * (verify, status, wait).
 *
 * Nothing declared here may write the heap: stored_read and the read-only
 * commands take read transactions, follow_table only queries the catalog,
 * and apply_msg stages into the sink; the writes are the sink's (sink_flush)
 * and the first copy's (tools/ah-pgsync.c).
 */
#ifndef TOOLS_PG_ENGINE_H
#define TOOLS_PG_ENGINE_H

#include "arrheap.h"
#include "tools/pg/sink.h"

/* What a heap records about its source (sources pg.identity, pg.tables,
 * pg.lsn, pg.stats, pg.settings, pg.snapshot).  have_lsn = 0: the heap has never been
 * filled. */
typedef struct pg_stored {
	int have_lsn;
	uint64_t lsn;
	uint64_t txns, updates;  /* pg.stats */
	char identity[1024];
	char settings[512];  /* pg.settings; "" in heaps made before it existed */
	/* pg.snapshot: what the first copy's snapshot saw (have_snapshot 0 in
	 * heaps made before it existed) */
	int have_snapshot;
	uint32_t relid_max;  /* the largest pg_class OID */
	uint32_t pub_oid;    /* the publication's OID */
	pg_table *t;
	int nt;
} pg_stored;

int stored_read(ah_heap *h, pg_stored *st, char *err, size_t errlen);
/* The pg.views record's bytes into out (*have 0: the heap has no views).
 * 0, or -1 with a line in err. */
int stored_views(ah_heap *h, pg_buf *out, int *have, char *err, size_t errlen);
void identity_fmt(char *buf, size_t len, const char *sysid, const char *db, const char *slot,
                  const char *pub);
/* The value of "key=" in an identity text, copied to buf ("" if absent). */
void identity_get(const char *id, const char *key, char *buf, size_t len);
/* Compares the heap's text settings with a connection's ("name=value"
 * lines): 0 if equal, else 1 with "name=heap's" and "name=this" (the first
 * difference) in a and b. */
int settings_diff(const char *heap, const char *conn, char *a, char *b, size_t len);

/* The pg.snapshot record's text. */
void snapshot_fmt(char *buf, size_t len, uint32_t relid_max, uint32_t pub_oid);

/* Decides whether a table new to the stream (Relation message m for a
 * relid the sink does not hold) can be followed; if so fills *t (names,
 * columns, key, arrangement name) and returns 0; else -1 (refused) or -2
 * (a catalog query failed: the connection) with one line in err.  The rule is in tools/pg/follow.c and ARCHITECTURE.md section 12. */
struct pg_src;
struct po_msg;
int follow_table(struct pg_src *src, const pg_stored *st, const struct po_msg *m, pg_table *t,
                 char *err, size_t len);

/* Applies one decoded pgoutput message to the sink: Begin, Commit,
 * Relation (checked against the stored table), Insert, Update, Delete,
 * Truncate.  *committed is set to 1 when a Commit was applied or skipped. */
int apply_msg(sink *s, const struct po_msg *m, int *committed);

int cmd_verify(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_wait(int argc, char **argv);
/* tools/pg/reader.c: a second reader's views; every view recomputed. */
int cmd_reader(int argc, char **argv);
int cmd_recompute(int argc, char **argv);

#endif /* TOOLS_PG_ENGINE_H */
