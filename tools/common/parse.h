/*
 * tools/common/parse.h - strict text parsing shared by the tools: names,
 * decimal numbers, and one changelog record (the ah-load input format).
 *
 * Changelog record, one per line, fields separated by one TAB:
 *   arrange NAME | update NAME TIME KEY VAL DIFF | advance NAME UPPER |
 *   since NAME SINCE | commit
 * blank lines and lines starting with '#' are no record.  NAME is 1 to 64 of
 * [A-Za-z0-9_.:/-]; TIME/UPPER/SINCE decimal uint64; DIFF decimal int64 with
 * an optional sign; KEY and VAL escaped (tools/common/escape.h).
 *
 * Parsing is syntax only: whether an arrangement exists or a time fits its
 * frontiers is ah-load's business.  The two mistakes of hand-made files
 * are named as such: a line ending in CR (a CRLF file) and spaces where a
 * TAB belongs.  Nothing here allocates or does I/O.
 *
 * It must never accept a record that is not exactly this format: a wrong
 * number of fields, a CR, a space in a word, name or number, a number out of
 * range or a bad escape is an error with a one-line reason.
 */
#ifndef TOOLS_COMMON_PARSE_H
#define TOOLS_COMMON_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* 1 if s is a valid arrangement/source name (1..AH_NAME_MAX of
 * [A-Za-z0-9_.:/-]), else 0. */
int tool_name_valid(const char *s, size_t len);

/* Strict decimal parses of s[0..len): digits only (i64: one optional leading
 * '+' or '-'), no spaces, no empty string, in range.  0 or -1. */
int tool_parse_u64(const char *s, size_t len, uint64_t *out);
int tool_parse_i64(const char *s, size_t len, int64_t *out);

enum tool_rec_kind {
	TOOL_REC_NONE = 0, /* blank line or comment */
	TOOL_REC_ARRANGE,
	TOOL_REC_UPDATE,
	TOOL_REC_ADVANCE,
	TOOL_REC_SINCE,
	TOOL_REC_COMMIT,
};

typedef struct tool_rec {
	enum tool_rec_kind kind;
	const char *name;     /* NUL-terminated, inside the line buffer */
	uint64_t time;        /* update: TIME; advance: UPPER; since: SINCE */
	const void *key;      /* update: decoded bytes inside the line buffer */
	size_t key_len;
	const void *val;
	size_t val_len;
	int64_t diff;
} tool_rec;

/* Parses line[0..len) (without its '\n') in place: fields are cut and
 * decoded inside the buffer, so *rec points into it and lives as long as it.
 * Returns 0, or -1 with a one-line reason in err[0..errlen). */
int tool_rec_parse(char *line, size_t len, tool_rec *rec, char *err,
                   size_t errlen);

#endif /* TOOLS_COMMON_PARSE_H */
