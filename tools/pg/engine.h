/*
 * tools/pg/engine.h - the pieces of ah-pgsync shared by its commands: the
 * heap's identity and table records, read back and checked.  The commands
 * themselves are in tools/ah-pgsync.c (sync) and tools/pg/verify.c
 * (verify, status, wait).
 */
#ifndef TOOLS_PG_ENGINE_H
#define TOOLS_PG_ENGINE_H

#include "arrheap.h"
#include "tools/pg/sink.h"

/* What a heap records about its source (sources pg.identity, pg.tables,
 * pg.lsn, pg.stats, pg.settings).  have_lsn = 0: the heap has never been
 * filled. */
typedef struct pg_stored {
	int have_lsn;
	uint64_t lsn;
	uint64_t txns, updates;  /* pg.stats */
	char identity[1024];
	char settings[512];  /* pg.settings; "" in heaps made before it existed */
	pg_table *t;
	int nt;
} pg_stored;

int stored_read(ah_heap *h, pg_stored *st, char *err, size_t errlen);
void identity_fmt(char *buf, size_t len, const char *sysid, const char *db, const char *slot,
                  const char *pub);
/* The value of "key=" in an identity text, copied to buf ("" if absent). */
void identity_get(const char *id, const char *key, char *buf, size_t len);
/* Compares the heap's text settings with a connection's ("name=value"
 * lines): 0 if equal, else 1 with "name=heap's" and "name=this" (the first
 * difference) in a and b. */
int settings_diff(const char *heap, const char *conn, char *a, char *b, size_t len);

/* Applies one decoded pgoutput message to the sink: Begin, Commit,
 * Relation (checked against the stored table), Insert, Update, Delete,
 * Truncate.  *committed is set to 1 when a Commit was applied or skipped. */
struct po_msg;
int apply_msg(sink *s, const struct po_msg *m, int *committed);

int cmd_verify(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_wait(int argc, char **argv);

#endif /* TOOLS_PG_ENGINE_H */
