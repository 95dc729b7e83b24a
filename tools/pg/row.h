/*
 * tools/pg/row.h - how ah-pgsync turns a PostgreSQL row into an
 * arrangement's key and val, and how it reads COPY's text format.
 *
 * A row is a list of fields, each the column's text form (the type's output
 * function, as both COPY TO and pgoutput's 't' tuple data give it) or NULL.
 * Encoding of a field list (the key: the primary key's columns in index
 * order; the val: every column in table order; tables without a primary key
 * take the whole row as key and an empty val):
 *
 *   field := varint(0)                      NULL
 *          | varint(len + 1) byte[len]      the text form, len bytes
 *   varint := LEB128, 7 bits a byte, low group first, high bit = more
 *
 * So equal rows always encode to equal bytes and any byte (tab, newline,
 * NUL-free UTF-8 or not) survives.  Pure functions over caller buffers and
 * a growable byte buffer: no I/O, never reads past the lengths given.
 *
 * Nothing here may change the encoding: every stored key and val is in it,
 * so a change would make a restarted engine's retractions miss the rows they
 * retract.
 */
#ifndef TOOLS_PG_ROW_H
#define TOOLS_PG_ROW_H

#include <stddef.h>
#include <stdint.h>

typedef struct pg_field {
	const char *p;  /* the text form (not NUL-terminated) */
	size_t len;
	int null;       /* 1: SQL NULL (p, len unused) */
} pg_field;

/* A growable byte buffer (malloc). */
typedef struct pg_buf {
	uint8_t *p;
	size_t len, cap;
} pg_buf;

int pg_buf_reserve(pg_buf *b, size_t more);  /* 0 or -1 (out of memory) */
int pg_buf_put(pg_buf *b, const void *p, size_t len);
void pg_buf_free(pg_buf *b);

/* Appends the encodings of fields f[cols[i]] for i < n (cols NULL: f[0..n))
 * to b.  Returns 0 or -1 (out of memory). */
int row_put_fields(pg_buf *b, const pg_field *f, const int *cols, int n);

/* Reads the next field of an encoding at *p (before end): returns 1 and
 * fills *f (pointing into the input) and advances *p, 0 at end, -1 on a
 * malformed encoding. */
int row_next_field(const uint8_t **p, const uint8_t *end, pg_field *f);

/* Splits one COPY text-format line (without its newline) into exactly
 * ncols fields, unescaping in place (\N is NULL; \b \f \n \r \t \v \\,
 * \ooo octal and \xHH as COPY FROM reads them).  Returns 0, or -1 when the
 * line has another number of fields or a bad escape. */
int row_copy_split(char *line, size_t len, pg_field *f, int ncols);

#endif /* TOOLS_PG_ROW_H */
