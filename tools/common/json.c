/*
 * tools/common/json.c - the JSON writer of json.h.  Formatting only: it
 * never allocates and never fails by itself (write errors stay in the
 * FILE for the caller's final ferror check).
 *
 * It must never write a byte of a string as it is unless it is printable
 * ASCII other than '"' and '\\': everything else is escaped, so the document
 * stays valid JSON whatever a heap holds.
 */
#include <inttypes.h>
#include <string.h>

#include "tools/common/json.h"

void tj_init(tool_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->first[0] = true;
	j->after_key = false;
}

static void indent(tool_json *j)
{
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

/* Before any value: the comma and line break an element needs. */
static void pre(tool_json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->depth == 0)
		return;
	if (!j->first[j->depth])
		fputc(',', j->f);
	j->first[j->depth] = false;
	indent(j);
}

static void open_c(tool_json *j, char c)
{
	pre(j);
	fputc(c, j->f);
	if (j->depth + 1 < TOOL_JSON_DEPTH)
		j->depth++;
	j->first[j->depth] = true;
	j->kind[j->depth] = c;
}

static void close_c(tool_json *j, char c)
{
	bool empty = j->first[j->depth];

	if (j->depth > 0)
		j->depth--;
	if (!empty)
		indent(j);
	fputc(c, j->f);
	if (j->depth == 0)
		fputc('\n', j->f);
}

void tj_obj(tool_json *j) { open_c(j, '{'); }
void tj_obj_end(tool_json *j) { close_c(j, '}'); }
void tj_arr(tool_json *j) { open_c(j, '['); }
void tj_arr_end(tool_json *j) { close_c(j, ']'); }

static void put_string(FILE *f, const unsigned char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void tj_key(tool_json *j, const char *key)
{
	pre(j);
	put_string(j->f, (const unsigned char *)key, strlen(key));
	fputs(": ", j->f);
	j->after_key = true;
}

void tj_strn(tool_json *j, const void *s, size_t len)
{
	pre(j);
	put_string(j->f, s, len);
}

void tj_str(tool_json *j, const char *s)
{
	if (!s) {
		tj_null(j);
		return;
	}
	tj_strn(j, s, strlen(s));
}

void tj_u64(tool_json *j, uint64_t v)
{
	pre(j);
	fprintf(j->f, "%" PRIu64, v);
}

void tj_i64(tool_json *j, int64_t v)
{
	pre(j);
	fprintf(j->f, "%" PRId64, v);
}

void tj_bool(tool_json *j, bool v)
{
	pre(j);
	fputs(v ? "true" : "false", j->f);
}

void tj_f64(tool_json *j, double v, int decimals)
{
	pre(j);
	fprintf(j->f, "%.*f", decimals, v);
}

void tj_null(tool_json *j)
{
	pre(j);
	fputs("null", j->f);
}

void tj_unwind(tool_json *j, int depth)
{
	if (j->after_key)
		tj_null(j);
	while (j->depth > depth && j->depth > 0)
		close_c(j, j->kind[j->depth] == '[' ? ']' : '}');
}

void tj_kstr(tool_json *j, const char *key, const char *s)
{
	tj_key(j, key);
	tj_str(j, s);
}

void tj_ku64(tool_json *j, const char *key, uint64_t v)
{
	tj_key(j, key);
	tj_u64(j, v);
}

void tj_ki64(tool_json *j, const char *key, int64_t v)
{
	tj_key(j, key);
	tj_i64(j, v);
}

void tj_kbool(tool_json *j, const char *key, bool v)
{
	tj_key(j, key);
	tj_bool(j, v);
}
