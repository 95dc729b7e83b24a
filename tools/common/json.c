/*
 * tools/common/json.c - the JSON writer of json.h.  Formatting only: it
 * never allocates and never fails by itself (write errors stay in the
 * FILE for the caller's final ferror check).
 *
 * It must never write a byte of a string as it is unless it is printable
 * ASCII other than '"' and '\\', or part of a well-formed UTF-8 sequence:
 * everything else is escaped, so the document stays valid JSON (and valid
 * UTF-8) whatever a heap holds.
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

/* The length of the well-formed UTF-8 sequence at s[0..len) (RFC 3629:
 * no overlong form, no surrogate, nothing past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s, size_t len)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t n;

	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;       /* overlong below U+0800 */
	else if (c == 0xed)
		hi = 0x9f;       /* U+D800..U+DFFF: surrogates */
	else if (c == 0xf0)
		lo = 0x90;       /* overlong below U+10000 */
	else if (c == 0xf4)
		hi = 0x8f;       /* past U+10FFFF */
	if (len < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

static void put_string(FILE *f, const unsigned char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = s[i];
		size_t n;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else if (c < 0x80)
			fputc(c, f);
		else if ((n = utf8_len(s + i, len - i)) > 0) {
			fwrite(s + i, 1, n, f);   /* JSON text is UTF-8 */
			i += n - 1;
		} else {
			fprintf(f, "\\u%04x", c); /* not UTF-8: the byte as U+00XX */
		}
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
