/*
 * tools/pg/viewsql.c - the view file's tokenizer and recursive-descent
 * parser (grammar in viewsql.h).  Every error names the line and column of
 * the token where the input left the subset, and what the subset has
 * there; the first error ends the parse (no recovery: the file is small
 * and read once).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/pg/viewsql.h"

enum { T_EOF, T_IDENT, T_PUNCT, T_OTHER };

typedef struct tok {
	int type;
	int quoted;          /* T_IDENT written "..." */
	char text[128];      /* identifier (folded or unquoted) or the punctuation */
	int line, pos;
} tok;

typedef struct parser {
	const char *p, *end;
	int line;
	const char *line_start;
	tok t;               /* the current token */
	char *err;
	size_t errlen;
	int failed;          /* -1 syntax, -2 memory */
} parser;

static int perr(parser *ps, const tok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(parser *ps, const tok *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (ps->failed)
		return -1;
	n = snprintf(ps->err, ps->errlen, "%d:%d: ", t->line, t->pos);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < ps->errlen)
		vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	ps->failed = -1;
	return -1;
}

static int oom(parser *ps)
{
	if (!ps->failed)
		snprintf(ps->err, ps->errlen, "out of memory");
	ps->failed = -2;
	return -2;
}

static const char *show(const tok *t)
{
	static char buf[160];
	if (t->type == T_EOF)
		return "the end of the file";
	snprintf(buf, sizeof buf, "\"%s\"", t->text);
	return buf;
}

static void next(parser *ps)
{
	tok *t = &ps->t;

	for (;;) {
		while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' ||
		                           *ps->p == '\n' || *ps->p == '\f')) {
			if (*ps->p == '\n')
				ps->line++, ps->line_start = ps->p + 1;
			ps->p++;
		}
		if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] == '-') {
			while (ps->p < ps->end && *ps->p != '\n')
				ps->p++;
			continue;
		}
		break;
	}
	memset(t, 0, sizeof *t);
	t->line = ps->line;
	t->pos = (int)(ps->p - ps->line_start) + 1;
	if (ps->p >= ps->end) {
		t->type = T_EOF;
		return;
	}
	char c = *ps->p;
	size_t n = 0;
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
		t->type = T_IDENT;
		while (ps->p < ps->end) {
			c = *ps->p;
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
			      (c >= '0' && c <= '9')))
				break;
			if (n + 1 < sizeof t->text)
				t->text[n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
			else
				t->type = T_OTHER;  /* too long: reported where it is used */
			ps->p++;
		}
		return;
	}
	if (c == '"') {
		t->type = T_IDENT;
		t->quoted = 1;
		ps->p++;
		for (;;) {
			if (ps->p >= ps->end || *ps->p == '\n') {
				t->type = T_OTHER;
				snprintf(t->text, sizeof t->text, "\"");
				return;
			}
			if (*ps->p == '"') {
				if (ps->end - ps->p >= 2 && ps->p[1] == '"')
					ps->p++;
				else
					break;
			}
			if (n + 1 < sizeof t->text)
				t->text[n++] = *ps->p;
			ps->p++;
		}
		ps->p++;
		if (n == 0)
			t->type = T_OTHER;
		return;
	}
	if (strchr("(),.;=*", c)) {
		t->type = T_PUNCT;
		t->text[0] = c;
		ps->p++;
		return;
	}
	/* a number, string, operator ...: a token of its own for the message */
	t->type = T_OTHER;
	while (ps->p < ps->end && n + 1 < 32 && !strchr(" \t\r\n(),;", *ps->p))
		t->text[n++] = *ps->p++;
	if (n == 0)
		t->text[n++] = *ps->p++;
}

static int is_kw(const tok *t, const char *kw)
{
	return t->type == T_IDENT && !t->quoted && !strcmp(t->text, kw);
}

static int is_punct(const tok *t, char c)
{
	return t->type == T_PUNCT && t->text[0] == c;
}

/* Words that end a select item, table or alias (never taken as a name). */
static int reserved(const tok *t)
{
	static const char *kw[] = { "select", "from", "join", "inner", "on", "group", "by", "as",
	                            "where", "left", "right", "full", "outer", "cross", "natural",
	                            "having", "order", "limit", "union", "create", "view",
	                            "distinct", "using", NULL };
	if (t->type != T_IDENT || t->quoted)
		return 0;
	for (int i = 0; kw[i]; i++)
		if (!strcmp(t->text, kw[i]))
			return 1;
	return 0;
}

static int expect_kw(parser *ps, const char *kw, const char *where)
{
	if (!is_kw(&ps->t, kw))
		return perr(ps, &ps->t, "expected %s%s, found %s", kw, where, show(&ps->t));
	next(ps);
	return 0;
}

static char *dup(parser *ps, const char *s)
{
	char *d = strdup(s);
	if (!d)
		oom(ps);
	return d;
}

/* An identifier that is a name (not a reserved word). */
static int name(parser *ps, char **out, const char *what)
{
	if (ps->t.type != T_IDENT || reserved(&ps->t))
		return perr(ps, &ps->t, "expected %s, found %s", what, show(&ps->t));
	if (!(*out = dup(ps, ps->t.text)))
		return -2;
	next(ps);
	return 0;
}

static int colref(parser *ps, vs_ref *r)
{
	r->line = ps->t.line;
	r->pos = ps->t.pos;
	if (name(ps, &r->name, "a column ([alias.]column)"))
		return -1;
	if (is_punct(&ps->t, '.')) {
		next(ps);
		r->qual = r->name;
		r->name = NULL;
		if (name(ps, &r->name, "a column name after the dot"))
			return -1;
	}
	if (is_punct(&ps->t, '.') || is_punct(&ps->t, '('))
		return perr(ps, &ps->t, "expected a column ([alias.]column), found %s (the select list "
		            "takes columns and count(*), count(col), sum(col), min(col), max(col); no "
		            "other functions or expressions)", show(&ps->t));
	return 0;
}

static const char *const AGG_NAMES[] = { "", "count", "count", "sum", "min", "max" };

const char *vs_kind_name(vs_kind k)
{
	return AGG_NAMES[k];
}

static int label(parser *ps, char **out)
{
	if (is_kw(&ps->t, "as")) {
		next(ps);
		return name(ps, out, "a label after AS");
	}
	if (ps->t.type == T_IDENT && !reserved(&ps->t))
		return name(ps, out, "a label");
	return 0;
}

static int item(parser *ps, vs_item *it)
{
	tok t = ps->t;

	it->line = t.line;
	it->pos = t.pos;
	if (is_punct(&t, '*'))
		return perr(ps, &t, "SELECT * is not supported: name the columns");
	if (t.type == T_IDENT && !t.quoted && (!strcmp(t.text, "count") || !strcmp(t.text, "sum") ||
	    !strcmp(t.text, "min") || !strcmp(t.text, "max"))) {
		/* a function call only if a parenthesis follows */
		const char *save = ps->p, *save_ls = ps->line_start;
		int save_line = ps->line;
		next(ps);
		if (is_punct(&ps->t, '(')) {
			next(ps);
			it->kind = !strcmp(t.text, "count") ? VS_COUNT : !strcmp(t.text, "sum") ? VS_SUM
			           : !strcmp(t.text, "min") ? VS_MIN : VS_MAX;
			if (it->kind == VS_COUNT && is_punct(&ps->t, '*')) {
				it->kind = VS_COUNT_STAR;
				next(ps);
			} else {
				if (is_kw(&ps->t, "distinct"))
					return perr(ps, &ps->t, "%s(DISTINCT ...) is not supported", t.text);
				if (colref(ps, &it->ref))
					return -1;
			}
			if (!is_punct(&ps->t, ')'))
				return perr(ps, &ps->t, "expected ) after the argument of %s, found %s (the "
				            "argument is one column)", t.text, show(&ps->t));
			next(ps);
			return label(ps, &it->label);
		}
		ps->p = save;
		ps->line_start = save_ls;
		ps->line = save_line;
		ps->t = t;
	}
	it->kind = VS_COL;
	if (t.type != T_IDENT || reserved(&t))
		return perr(ps, &t, "expected a column or count(*), count(col), sum(col), min(col), "
		            "max(col), found %s", show(&t));
	if (colref(ps, &it->ref))
		return -1;
	return label(ps, &it->label);
}

static int from_entry(parser *ps, vs_from *f)
{
	f->line = ps->t.line;
	f->pos = ps->t.pos;
	if (is_punct(&ps->t, '('))
		return perr(ps, &ps->t, "subqueries are not supported: FROM takes [schema.]table");
	if (name(ps, &f->table, "a table ([schema.]table)"))
		return -1;
	if (is_punct(&ps->t, '.')) {
		next(ps);
		f->schema = f->table;
		f->table = NULL;
		if (name(ps, &f->table, "a table name after the dot"))
			return -1;
	}
	return label(ps, &f->alias);
}

static void *grow(parser *ps, void *p, int n, size_t size)
{
	void *q = realloc(p, (size_t)(n + 1) * size);
	if (!q) {
		oom(ps);
		return NULL;
	}
	memset((char *)q + (size_t)n * size, 0, size);
	return q;
}

static int view(parser *ps, vs_view *v)
{
	void *q;

	v->line = ps->t.line;
	v->pos = ps->t.pos;
	if (expect_kw(ps, "create", " (each view is CREATE VIEW name AS SELECT ...;)") ||
	    expect_kw(ps, "view", " after CREATE (only CREATE VIEW is supported)"))
		return -1;
	tok nt = ps->t;
	if (name(ps, &v->name, "the view's name"))
		return -1;
	size_t nl = strlen(v->name);
	if (nl > 40 || strspn(v->name, "abcdefghijklmnopqrstuvwxyz0123456789_") != nl)
		return perr(ps, &nt, "view name %s: view names are [a-z0-9_], 1 to 40 characters",
		            show(&nt));
	if (expect_kw(ps, "as", " after the view's name") || expect_kw(ps, "select", " after AS"))
		return -1;
	if (is_kw(&ps->t, "distinct"))
		return perr(ps, &ps->t, "SELECT DISTINCT is not supported (GROUP BY is)");
	for (;;) {
		if (!(q = grow(ps, v->items, v->nitems, sizeof *v->items)))
			return -2;
		v->items = q;
		if (item(ps, &v->items[v->nitems++]))
			return -1;
		if (!is_punct(&ps->t, ','))
			break;
		next(ps);
	}
	if (expect_kw(ps, "from", " after the select list"))
		return -1;
	for (;;) {
		if (!(q = grow(ps, v->from, v->nfrom, sizeof *v->from)))
			return -2;
		v->from = q;
		vs_from *f = &v->from[v->nfrom++];
		if (from_entry(ps, f))
			return -1;
		if (v->nfrom > 1) {
			if (expect_kw(ps, "on", " after the joined table (JOIN t ON a.x = b.y)") ||
			    colref(ps, &f->on_a))
				return -1;
			if (!is_punct(&ps->t, '='))
				return perr(ps, &ps->t, "expected = in the ON condition, found %s (ON takes "
				            "one equality of two columns)", show(&ps->t));
			next(ps);
			if (colref(ps, &f->on_b))
				return -1;
			if (is_kw(&ps->t, "and") || is_kw(&ps->t, "or"))
				return perr(ps, &ps->t, "ON takes one equality of two columns; %s is not "
				            "supported", show(&ps->t));
		}
		if (is_kw(&ps->t, "inner"))
			next(ps);
		else if (is_kw(&ps->t, "left") || is_kw(&ps->t, "right") || is_kw(&ps->t, "full") ||
		         is_kw(&ps->t, "cross") || is_kw(&ps->t, "natural"))
			return perr(ps, &ps->t, "%s JOIN is not supported (only [INNER] JOIN ... ON)",
			            ps->t.text);
		else if (is_punct(&ps->t, ','))
			return perr(ps, &ps->t, "FROM a, b is not supported: write JOIN b ON a.x = b.y");
		else if (!is_kw(&ps->t, "join"))
			break;
		if (expect_kw(ps, "join", " after INNER"))
			return -1;
	}
	if (is_kw(&ps->t, "group")) {
		next(ps);
		if (expect_kw(ps, "by", " after GROUP"))
			return -1;
		for (;;) {
			if (!(q = grow(ps, v->group, v->ngroup, sizeof *v->group)))
				return -2;
			v->group = q;
			if (colref(ps, &v->group[v->ngroup++]))
				return -1;
			if (!is_punct(&ps->t, ','))
				break;
			next(ps);
		}
	}
	if (!is_punct(&ps->t, ';'))
		return perr(ps, &ps->t, "expected ; at the end of view %s, found %s (the subset has no "
		            "WHERE, HAVING, ORDER BY, LIMIT or UNION)", v->name, show(&ps->t));
	next(ps);
	return 0;
}

int vs_parse(const char *text, size_t len, vs_file *out, char *err, size_t errlen)
{
	parser ps = { .p = text, .end = text + len, .line = 1, .line_start = text, .err = err,
	              .errlen = errlen };

	memset(out, 0, sizeof *out);
	if (memchr(text, 0, len)) {
		snprintf(err, errlen, "1:1: the file holds a NUL byte: it is not a text file");
		return -1;
	}
	next(&ps);
	while (ps.t.type != T_EOF && !ps.failed) {
		void *q = grow(&ps, out->v, out->nv, sizeof *out->v);
		if (!q)
			break;
		out->v = q;
		vs_view *v = &out->v[out->nv++];
		if (view(&ps, v))
			break;
		for (int i = 0; i + 1 < out->nv; i++)
			if (!strcmp(out->v[i].name, v->name)) {
				tok at = { .line = v->line, .pos = v->pos };
				perr(&ps, &at, "view %s is defined twice (first on line %d)", v->name,
				     out->v[i].line);
			}
	}
	if (!ps.failed && out->nv == 0) {
		snprintf(err, errlen, "1:1: no views: the file holds CREATE VIEW name AS SELECT ...; "
		         "statements");
		ps.failed = -1;
	}
	if (ps.failed) {
		vs_free(out);
		return ps.failed;
	}
	return 0;
}

static void ref_free(vs_ref *r)
{
	free(r->qual);
	free(r->name);
}

void vs_free(vs_file *f)
{
	for (int i = 0; i < f->nv; i++) {
		vs_view *v = &f->v[i];
		free(v->name);
		for (int k = 0; k < v->nitems; k++) {
			ref_free(&v->items[k].ref);
			free(v->items[k].label);
		}
		for (int k = 0; k < v->nfrom; k++) {
			free(v->from[k].schema);
			free(v->from[k].table);
			free(v->from[k].alias);
			ref_free(&v->from[k].on_a);
			ref_free(&v->from[k].on_b);
		}
		for (int k = 0; k < v->ngroup; k++)
			ref_free(&v->group[k]);
		free(v->items);
		free(v->from);
		free(v->group);
	}
	free(f->v);
	memset(f, 0, sizeof *f);
}
