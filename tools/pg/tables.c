/*
 * tools/pg/tables.c - LSN text forms, arrangement names for tables and the
 * "pg.tables" record that tells a restarted engine (and `ah-pgsync verify`)
 * which arrangement holds which table with which key.  Pure data handling:
 * no I/O, no heap access.  The stored record is untrusted input.
 *
 * It must never make an invalid arrangement name (schema.table only when it
 * is at most 64 bytes of [A-Za-z0-9_-] and its dot, else rel.<relid>), and
 * never write a schema, table or column name unescaped into pg.tables, where
 * a TAB or LF in a name would split its fields.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/escape.h"
#include "tools/pg/sink.h"

void lsn_fmt(uint64_t lsn, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIX32 "/%" PRIX32, (uint32_t)(lsn >> 32), (uint32_t)lsn);
}

int lsn_parse(const char *s, size_t len, uint64_t *out)
{
	char tmp[40];
	unsigned hi, lo;
	int n = 0;

	if (len == 0 || len >= sizeof tmp)
		return -1;
	memcpy(tmp, s, len);
	tmp[len] = 0;
	if (sscanf(tmp, "%X/%X%n", &hi, &lo, &n) != 2 || (size_t)n != len)
		return -1;
	*out = (uint64_t)hi << 32 | lo;
	return 0;
}

void table_name_for(pg_table *t)
{
	size_t n = strlen(t->nsp) + 1 + strlen(t->rel);
	int ok = n <= AH_NAME_MAX;

	for (const char *s = t->nsp; ok && *s; s++)
		ok = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", *s) != NULL;
	for (const char *s = t->rel; ok && *s; s++)
		ok = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", *s) != NULL;
	if (ok) {
		size_t a = strlen(t->nsp);
		memcpy(t->name, t->nsp, a);
		t->name[a] = '.';
		memcpy(t->name + a + 1, t->rel, strlen(t->rel) + 1);
	} else
		snprintf(t->name, sizeof t->name, "rel.%" PRIu32, t->relid);
}

static int put_escaped(pg_buf *b, const char *s)
{
	size_t n = strlen(s);

	if (pg_buf_reserve(b, TOOL_ESCAPE_MAX(n) + 1) != 0)
		return -1;
	b->len += tool_escape(s, n, (char *)b->p + b->len);
	return 0;
}

int tables_format(const pg_table *t, int nt, pg_buf *out)
{
	char num[32];

	for (int i = 0; i < nt; i++) {
		if (!t[i].in_heap)
			continue;
		snprintf(num, sizeof num, "%" PRIu32 "\t", t[i].relid);
		if (pg_buf_put(out, num, strlen(num)) || pg_buf_put(out, t[i].name, strlen(t[i].name)) ||
		    pg_buf_put(out, "\t", 1) || put_escaped(out, t[i].nsp) ||
		    pg_buf_put(out, "\t", 1) || put_escaped(out, t[i].rel) || pg_buf_put(out, "\t", 1))
			return -1;
		for (int k = 0; k < t[i].nkey; k++) {
			snprintf(num, sizeof num, "%s%d", k ? "," : "", t[i].key[k]);
			if (pg_buf_put(out, num, strlen(num)))
				return -1;
		}
		for (int c = 0; c < t[i].ncols; c++)
			if (pg_buf_put(out, "\t", 1) || put_escaped(out, t[i].cols[c]))
				return -1;
		if (pg_buf_put(out, "\n", 1))
			return -1;
	}
	return 0;
}

static char *unesc(const char *p, size_t len)
{
	char *s = malloc(len + 1);
	size_t n;
	const char *why;

	if (!s)
		return NULL;
	if (tool_unescape(p, len, s, &n, &why) != 0 || memchr(s, 0, n)) {
		free(s);
		return NULL;
	}
	s[n] = 0;
	return s;
}

/* One line: relid, name, nsp, rel, keys, cols... */
static int parse_line(const char *p, size_t len, pg_table *t)
{
	const char *f[4 + 1 + 1600];
	size_t fl[4 + 1 + 1600];
	int n = 0;
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && p[i] != '\t')
			continue;
		if (n >= (int)(sizeof f / sizeof f[0]))
			return -1;
		f[n] = p + start;
		fl[n++] = i - start;
		start = i + 1;
	}
	if (n < 6 || fl[1] == 0 || fl[1] > AH_NAME_MAX)
		return -1;
	t->relid = (uint32_t)strtoul(f[0], NULL, 10);
	memcpy(t->name, f[1], fl[1]);
	t->name[fl[1]] = 0;
	t->nsp = unesc(f[2], fl[2]);
	t->rel = unesc(f[3], fl[3]);
	t->ncols = n - 5;
	t->cols = calloc((size_t)t->ncols, sizeof(char *));
	t->key = calloc((size_t)t->ncols, sizeof(int));
	if (!t->nsp || !t->rel || !t->cols || !t->key)
		return -1;
	for (int c = 0; c < t->ncols; c++)
		if (!(t->cols[c] = unesc(f[5 + c], fl[5 + c])))
			return -1;
	for (size_t i = 0; i < fl[4];) {
		char *end;
		long k = strtol(f[4] + i, &end, 10);
		if (end == f[4] + i || k < 0 || k >= t->ncols || t->nkey >= t->ncols)
			return -1;
		t->key[t->nkey++] = (int)k;
		i = (size_t)(end - f[4]);
		if (i < fl[4] && f[4][i++] != ',')
			return -1;
	}
	return 0;
}

int tables_parse(const char *p, size_t len, pg_table **out, int *nt, char *err, size_t errlen)
{
	pg_table *t = NULL;
	int n = 0, cap = 0;
	size_t start = 0;

	for (size_t i = 0; i < len; i++) {
		if (p[i] != '\n')
			continue;
		if (n == cap) {
			pg_table *q = realloc(t, (size_t)(cap = cap ? cap * 2 : 8) * sizeof *t);
			if (!q)
				goto bad;
			t = q;
		}
		memset(&t[n], 0, sizeof t[n]);
		t[n].in_heap = 1;
		if (parse_line(p + start, i - start, &t[n++]) != 0)
			goto bad;
		start = i + 1;
	}
	if (start != len)
		goto bad;
	*out = t;
	*nt = n;
	return 0;
bad:
	tables_free(t, n);
	snprintf(err, errlen, "the heap's pg.tables record is damaged");
	return -1;
}

void table_clear(pg_table *t)
{
	for (int c = 0; t->cols && c < t->ncols; c++)
		free(t->cols[c]);
	for (int c = 0; t->types && c < t->ncols; c++)
		free(t->types[c]);
	free(t->cols);
	free(t->types);
	free(t->key);
	free(t->nsp);
	free(t->rel);
	memset(t, 0, sizeof *t);  /* t->arr is the sink's engine's */
}

void tables_free(pg_table *t, int nt)
{
	if (!t)
		return;
	for (int i = 0; i < nt; i++)
		table_clear(&t[i]);
	free(t);
}

const char *pg_disp(const char *name)
{
	static char buf[8][TOOL_ESCAPE_MAX(255) + 4];
	static unsigned next;
	char *out = buf[next++ % 8];
	size_t len = strlen(name), n;

	n = tool_escape(name, len > 255 ? 255 : len, out);
	if (len > 255)
		memcpy(out + n, "...", 3), n += 3;
	out[n] = '\0';
	return out;
}
