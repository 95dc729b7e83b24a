/*
 * tools/pg/row.c - the field encoding of ah-pgsync's keys and vals and the
 * COPY text-format reader (see row.h for the byte layout).  No I/O.
 *
 * It must never read past the lengths given, and never encode two different
 * field lists alike nor one list two ways: NULL (varint 0) and the empty
 * string (varint 1) differ, and every length is written in its shortest
 * LEB128.
 */
#include <stdlib.h>
#include <string.h>

#include "tools/common/escape.h"
#include "tools/pg/row.h"

int pg_buf_reserve(pg_buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 4096;
	uint8_t *p;

	if (b->len + more <= b->cap)
		return 0;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

int pg_buf_put(pg_buf *b, const void *p, size_t len)
{
	if (pg_buf_reserve(b, len) != 0)
		return -1;
	if (len)
		memcpy(b->p + b->len, p, len);
	b->len += len;
	return 0;
}

void pg_buf_free(pg_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static size_t put_varint(uint8_t *out, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		out[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	out[n++] = (uint8_t)v;
	return n;
}

int row_put_fields(pg_buf *b, const pg_field *f, const int *cols, int n)
{
	for (int i = 0; i < n; i++) {
		const pg_field *x = &f[cols ? cols[i] : i];
		size_t len = x->null ? 0 : x->len;

		if (pg_buf_reserve(b, len + 10) != 0)
			return -1;
		b->len += put_varint(b->p + b->len, x->null ? 0 : (uint64_t)len + 1);
		if (len)
			memcpy(b->p + b->len, x->p, len);
		b->len += len;
	}
	return 0;
}

int row_next_field(const uint8_t **p, const uint8_t *end, pg_field *f)
{
	const uint8_t *q = *p;
	uint64_t v = 0;
	unsigned shift = 0;

	if (q >= end)
		return 0;
	for (;;) {
		if (q >= end || shift > 56)
			return -1;
		v |= (uint64_t)(*q & 0x7f) << shift;
		if (!(*q++ & 0x80))
			break;
		shift += 7;
	}
	if (v == 0) {
		f->null = 1;
		f->p = NULL;
		f->len = 0;
	} else {
		if (v - 1 > (uint64_t)(end - q))
			return -1;
		f->null = 0;
		f->p = (const char *)q;
		f->len = (size_t)(v - 1);
		q += f->len;
	}
	*p = q;
	return 1;
}

/* Unescapes in[0..len) onto out (which may equal in: decoding never grows). */
static int unescape(char *out, const char *in, size_t len, size_t *out_len)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		char c = in[i];

		if (c != '\\') {
			out[o++] = c;
			continue;
		}
		if (++i >= len)
			return -1;
		c = in[i];
		switch (c) {
		case 'b': out[o++] = '\b'; break;
		case 'f': out[o++] = '\f'; break;
		case 'n': out[o++] = '\n'; break;
		case 'r': out[o++] = '\r'; break;
		case 't': out[o++] = '\t'; break;
		case 'v': out[o++] = '\v'; break;
		case 'x': {
			int v = 0, d, k = 0;
			while (k < 2 && i + 1 < len && (d = tool_hexval(in[i + 1])) >= 0) {
				v = v * 16 + d;
				i++;
				k++;
			}
			if (k == 0)
				out[o++] = 'x';
			else
				out[o++] = (char)v;
			break;
		}
		default:
			if (c >= '0' && c <= '7') {
				int v = c - '0', k = 1;
				while (k < 3 && i + 1 < len && in[i + 1] >= '0' && in[i + 1] <= '7') {
					v = v * 8 + (in[++i] - '0');
					k++;
				}
				out[o++] = (char)v;
			} else {
				out[o++] = c;
			}
		}
	}
	*out_len = o;
	return 0;
}

int row_copy_split(char *line, size_t len, pg_field *f, int ncols)
{
	size_t start = 0;
	int n = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && line[i] != '\t')
			continue;
		if (n >= ncols)
			return -1;
		if (i - start == 2 && line[start] == '\\' && line[start + 1] == 'N') {
			f[n].null = 1;
			f[n].p = NULL;
			f[n].len = 0;
		} else {
			f[n].null = 0;
			f[n].p = line + start;
			if (unescape(line + start, line + start, i - start, &f[n].len) != 0)
				return -1;
		}
		n++;
		start = i + 1;
	}
	return n == ncols ? 0 : -1;
}
