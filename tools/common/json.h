/*
 * tools/common/json.h - a tiny streaming JSON writer for the tools' --json
 * output: objects, arrays, strings, integers, booleans, null, pretty-printed
 * with two-space indents, one document per call sequence.
 *
 * Strings are escaped per RFC 8259: '"', '\\', DEL and control bytes
 * escaped; a well-formed UTF-8 sequence (RFC 3629: no overlong form, no
 * surrogate, nothing past U+10FFFF) is copied as it is, since JSON text is
 * UTF-8; any other byte 0x80-0xff is written as \u0080-\u00ff, so the
 * output is always valid JSON.  That last form cannot be told from the
 * UTF-8 of U+0080-U+00FF once parsed: a path or name that is not UTF-8
 * does not round-trip through JSON text (keys and vals never need to: they
 * are escaped, or hex, before they get here).  Callers keep the nesting
 * right; the writer keeps commas and indentation.  No allocation; errors
 * surface as the stream's ferror.
 *
 * Nothing here may allocate or keep more than the nesting (at most
 * TOOL_JSON_DEPTH levels): every call writes straight to the FILE.
 */
#ifndef TOOLS_COMMON_JSON_H
#define TOOLS_COMMON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL_JSON_DEPTH 16

typedef struct tool_json {
	FILE *f;
	int depth;                     /* open containers */
	bool first[TOOL_JSON_DEPTH];   /* no element yet at this depth */
	char kind[TOOL_JSON_DEPTH];    /* '{' or '[' of each open container */
	bool after_key;                /* a key was written, value follows */
} tool_json;

void tj_init(tool_json *j, FILE *f);
void tj_obj(tool_json *j);      /* { */
void tj_obj_end(tool_json *j);  /* } (and a newline at the top level) */
void tj_arr(tool_json *j);      /* [ */
void tj_arr_end(tool_json *j);  /* ] */
void tj_key(tool_json *j, const char *key);
void tj_strn(tool_json *j, const void *s, size_t len);
void tj_str(tool_json *j, const char *s); /* NULL writes null */
void tj_u64(tool_json *j, uint64_t v);
void tj_i64(tool_json *j, int64_t v);
void tj_bool(tool_json *j, bool v);
/* A number with that many decimals ("%.*f"). */
void tj_f64(tool_json *j, double v, int decimals);
void tj_null(tool_json *j);
/* Closes open containers until depth containers are left (a key left
 * without its value gets null first), so that a document cut short by
 * an error is still valid JSON: tj_unwind(j, 1) leaves the top object
 * open for one more member, tj_unwind(j, 0) ends the document. */
void tj_unwind(tool_json *j, int depth);

/* Shorthands for "key": value. */
void tj_kstr(tool_json *j, const char *key, const char *s);
void tj_ku64(tool_json *j, const char *key, uint64_t v);
void tj_ki64(tool_json *j, const char *key, int64_t v);
void tj_kbool(tool_json *j, const char *key, bool v);

#endif /* TOOLS_COMMON_JSON_H */
