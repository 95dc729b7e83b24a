/*
 * tools/pg/pgoutput.h - decodes the messages of PostgreSQL's pgoutput
 * logical decoding plugin, protocol version 1 (PostgreSQL documentation,
 * "Logical Replication Message Formats"): Begin, Commit, Relation, Insert,
 * Update, Delete, Truncate; Origin, Type and Message are recognised and
 * ignored.
 *
 * Every pointer in a decoded message points into the message bytes it was
 * decoded from (or into the decoder's arrays): valid until the next decode
 * or until those bytes are freed.  Message bytes are untrusted: a short or
 * malformed message is an error, never a read past its end.
 *
 * It must never copy a field: a decoded message lives exactly as long as the
 * bytes it came from, so what a caller keeps it copies (the sink encodes
 * rows into its staging) before the next receive frees them.
 */
#ifndef TOOLS_PG_PGOUTPUT_H
#define TOOLS_PG_PGOUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "tools/pg/row.h"

typedef struct po_tuple {
	int ncols;
	pg_field *f;    /* text forms; f[i].null for 'n' */
	char *kind;     /* per column 'n', 'u' (unchanged TOAST value), 't' */
	int cap;
} po_tuple;

typedef struct po_msg {
	char type;            /* 'B' 'C' 'R' 'I' 'U' 'D' 'T', 0 = ignored */
	uint64_t final_lsn;   /* B: the commit record's LSN */
	uint64_t commit_lsn;  /* C */
	uint64_t end_lsn;     /* C: the LSN just past the commit record */
	uint32_t relid;       /* R I U D */
	/* R */
	const char *nspname, *relname;
	char replident;       /* 'd' default, 'n' nothing, 'f' full, 'i' index */
	int ncols;
	const char **colnames;
	/* U D: 'O' whole old row, 'K' old key only, 0 none */
	char old_kind;
	po_tuple old_t, new_t;
	/* T */
	int nrels;
	uint32_t *relids;
} po_msg;

typedef struct po_decoder {
	po_msg m;
	int names_cap;
	int relids_cap;
} po_decoder;

/* Decodes msg[0..len) into d->m.  Returns 0, or -1 with a static reason
 * in *why (malformed or unknown message), or -2 out of memory. */
int po_decode(po_decoder *d, const uint8_t *msg, size_t len, const char **why);
void po_free(po_decoder *d);

#endif /* TOOLS_PG_PGOUTPUT_H */
