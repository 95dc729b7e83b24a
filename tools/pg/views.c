/*
 * tools/pg/views.c - resolves a view file against the heap's tables,
 * checks its types, and compiles each view into operator nodes (see
 * views.h for the arrangements and the plan).  The node callbacks decode
 * row.h fields, project them by index lists fixed at compile time, and
 * (reduce) compute the aggregates with tools/pg/decimal.h.
 *
 * Nothing here does I/O or touches the heap outside the engine's steps;
 * every refusal is one line naming the view, the place in the file and
 * the fix, before anything is written.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/escape.h"
#include "tools/pg/decimal.h"
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "tools/pg/views.h"
#include "tools/pg/viewsql.h"

typedef struct vcol {
	int tab, col;  /* FROM index, column index */
} vcol;

/* A map or join node's projection: source fields f[0..nsrc) (a table's
 * row, or a join's va ++ vb), key = f[kidx], val = f[vidx]. */
typedef struct proj {
	char out[AH_NAME_MAX + 1];
	int row_in_key;      /* map over a table without primary key */
	int nsrc, nleft;
	int *kidx, nk, *vidx, nv;
	int drop_null;       /* a NULL key field emits nothing (join keys) */
	pg_field *f;
	pg_buf buf;
} proj;

typedef struct agg {
	vs_kind kind;
	int in;              /* field of the reduce's val, -1 for count(*) */
} agg;

typedef struct red {
	char out[AH_NAME_MAX + 1];
	int nin, nagg;
	agg *a;
	pg_field *f;
	pg_buf buf, tmp;
	/* per aggregate, per call */
	int64_t *cnt;
	int *has;
	pg_field *best;
	dec_num *bestn;
	dec_sum *sum;
	/* 1: the second level of a two-level GROUP BY: every input val is a
	 * first-level result (one field per aggregate: a count, a sum, a min
	 * or a max, or NULL), combined times its count */
	int combine;
} red;

typedef struct view1 {
	char arr[AH_NAME_MAX + 1];  /* view.NAME */
	char *sql;
	int ncols;
	int *kitems, nk, *vitems, nv;  /* verify: result columns to key, val */
} view1;

struct views {
	eg_graph *g;
	char *text;
	size_t tlen;
	view1 *v;
	int nv;
	proj **p;
	int np;
	red **r;
	int nr;
	/* the columns used, for the record: heap table index, column */
	vcol *used;
	int nused;
	char prefix[21];  /* of every arrangement name ("view."): with a 40-byte view name and ".NN" it fits AH_NAME_MAX */
};

/* ---- callbacks ---------------------------------------------------------- */

static int decode(const void *p, size_t len, pg_field *f, int want, eg_out *o)
{
	const uint8_t *q = p, *end = q + len;
	int n = 0, r;

	while ((r = row_next_field(&q, end, n < want ? &f[n] : &(pg_field){ 0 })) == 1)
		n++;
	if (r < 0 || n != want)
		return eg_fail(o, r < 0 ? "a malformed row encoding" : "a row with another number of "
		               "fields than the view was compiled for");
	return 0;
}

static int project(proj *c, eg_out *o)
{
	size_t kl;

	if (c->drop_null)
		for (int i = 0; i < c->nk; i++)
			if (c->f[c->kidx[i]].null)
				return 0;
	c->buf.len = 0;
	if (row_put_fields(&c->buf, c->f, c->kidx, c->nk))
		return AH_ENOMEM;
	kl = c->buf.len;
	if (row_put_fields(&c->buf, c->f, c->vidx, c->nv))
		return AH_ENOMEM;
	return eg_emit(o, c->buf.p, kl, c->buf.p + kl, c->buf.len - kl);
}

static int map_fn(void *u, const void *k, size_t kl, const void *v, size_t vl, eg_out *o)
{
	proj *c = u;
	int rc = c->row_in_key ? decode(k, kl, c->f, c->nsrc, o) : decode(v, vl, c->f, c->nsrc, o);

	return rc ? rc : project(c, o);
}

static int join_fn(void *u, const void *k, size_t kl, const void *va, size_t la, const void *vb,
                   size_t lb, eg_out *o)
{
	proj *c = u;
	int rc;

	(void)k;
	(void)kl;
	if ((rc = decode(va, la, c->f, c->nleft, o)) ||
	    (rc = decode(vb, lb, c->f + c->nleft, c->nsrc - c->nleft, o)))
		return rc;
	return project(c, o);
}

static int put_text(pg_buf *b, const void *p, size_t len)
{
	pg_field f = { p, len, 0 };
	return row_put_fields(b, &f, NULL, 1);
}

static int put_null(pg_buf *b)
{
	pg_field f = { NULL, 0, 1 };
	return row_put_fields(b, &f, NULL, 1);
}

/* One group's aggregates (SQL: count(*) counts rows, count(col) non-NULL
 * values; sum, min and max of no non-NULL value are NULL). */
static int reduce_fn(void *u, const void *key, size_t key_len, const eg_valcount *in, size_t n,
                     eg_out *o)
{
	red *r = u;
	int64_t total = 0;
	int rc = 0;
	char num[32];

	(void)key;
	(void)key_len;
	for (int a = 0; a < r->nagg; a++) {
		r->cnt[a] = 0;
		r->has[a] = 0;
		dec_sum_init(&r->sum[a]);
	}
	for (size_t j = 0; j < n; j++) {
		if (in[j].count <= 0) {
			rc = eg_fail(o, "a group holds a row with a negative count: the input "
			             "arrangement contradicts itself");
			goto out;
		}
		if (!r->combine)
			total += in[j].count;
		if ((rc = decode(in[j].val, in[j].len, r->f, r->nin, o)))
			goto out;
		for (int a = 0; a < r->nagg; a++) {
			const pg_field *f = r->combine ? &r->f[a] : r->a[a].in >= 0 ? &r->f[r->a[a].in] : NULL;
			dec_num d;
			if (!f || f->null)
				continue;
			if (r->combine && (r->a[a].kind == VS_COUNT || r->a[a].kind == VS_COUNT_STAR)) {
				/* a first-level count, times how many groups gave it */
				int64_t c = 0, m;
				for (size_t q = 0; q < f->len; q++) {
					if (f->p[q] < '0' || f->p[q] > '9' ||
					    __builtin_mul_overflow(c, 10, &c) ||
					    __builtin_add_overflow(c, f->p[q] - '0', &c)) {
						rc = eg_fail(o, "a first-level count is not a count");
						goto out;
					}
				}
				/* each count its own sum: two count(*) items must not
				 * add into one total */
				if (__builtin_mul_overflow(c, in[j].count, &m) ||
				    __builtin_add_overflow(r->cnt[a], m, &r->cnt[a])) {
					rc = eg_fail(o, "a count leaves int64");
					goto out;
				}
				continue;
			}
			switch (r->a[a].kind) {
			case VS_COUNT:
				r->cnt[a] += in[j].count;
				break;
			case VS_SUM:
				if ((rc = dec_sum_add(&r->sum[a], f->p, f->len, in[j].count)) != 0) {
					rc = rc == -2 ? AH_ENOMEM : eg_fail(o, "sum over a value that is not a "
					                                    "number's text form");
					goto out;
				}
				r->has[a] = 1;
				break;
			case VS_MIN:
			case VS_MAX:
				if (dec_parse(f->p, f->len, &d) != 0) {
					rc = eg_fail(o, "min or max over a value that is not a number's text form");
					goto out;
				}
				if (!r->has[a] || (r->a[a].kind == VS_MIN ? dec_cmp(&d, &r->bestn[a]) < 0
				                                         : dec_cmp(&d, &r->bestn[a]) > 0)) {
					r->best[a] = *f;
					r->bestn[a] = d;
				}
				r->has[a] = 1;
				break;
			default:
				break;
			}
		}
	}
	r->buf.len = 0;
	for (int a = 0; a < r->nagg && rc == 0; a++) {
		switch (r->a[a].kind) {
		case VS_COUNT_STAR:
		case VS_COUNT:
			snprintf(num, sizeof num, "%" PRId64,
			         r->a[a].kind == VS_COUNT || r->combine ? r->cnt[a] : total);
			rc = put_text(&r->buf, num, strlen(num));
			break;
		case VS_SUM:
			r->tmp.len = 0;
			rc = !r->has[a] ? put_null(&r->buf)
			     : dec_sum_fmt(&r->sum[a], &r->tmp) ? -1 : put_text(&r->buf, r->tmp.p, r->tmp.len);
			break;
		default:
			rc = r->has[a] ? put_text(&r->buf, r->best[a].p, r->best[a].len) : put_null(&r->buf);
			break;
		}
		if (rc)
			rc = AH_ENOMEM;
	}
	if (rc == 0)
		rc = eg_emit_val(o, r->buf.p, r->buf.len, 1);
out:
	for (int a = 0; a < r->nagg; a++)
		dec_sum_free(&r->sum[a]);
	return rc;
}

/* The first level of a two-level GROUP BY: the group key plus a bucket
 * (a hash of the aggregate inputs, as one more key field), so that each
 * first-level reduce sees a 1/GROUP_BUCKETS share of a large group. */
#define GROUP_BUCKETS 64

static int bucket_fn(void *u, const void *k, size_t kl, const void *v, size_t vl, eg_out *o)
{
	red *r = u;
	char b[4];
	int n = snprintf(b, sizeof b, "%u", (unsigned)(XXH3_64bits(v, vl) % GROUP_BUCKETS));

	r->tmp.len = 0;
	if (pg_buf_put(&r->tmp, k, kl) || put_text(&r->tmp, b, (size_t)n))
		return AH_ENOMEM;
	return eg_emit(o, r->tmp.p, r->tmp.len, v, vl);
}

/* The second level: the group key again (the bucket field dropped). */
static int unbucket_fn(void *u, const void *k, size_t kl, const void *v, size_t vl, eg_out *o)
{
	const uint8_t *q = k, *end = q + kl, *last = q;
	pg_field f;
	int r;

	(void)u;
	while ((r = row_next_field(&q, end, &f)) == 1 && q < end)
		last = q;
	if (r != 1)
		return eg_fail(o, "a bucketed group key without its bucket");
	return eg_emit(o, k, (size_t)(last - (const uint8_t *)k), v, vl);
}

/* ---- compilation -------------------------------------------------------- */

typedef struct cc {
	views *vs;
	const pg_table *t;
	int nt;
	const vs_view *pv;
	int *ti;             /* FROM index -> heap table index */
	char *err;
	size_t errlen;
	int seq;             /* intermediate arrangements made */
} cc;

static int cfail(cc *c, int line, int pos, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int cfail(cc *c, int line, int pos, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(c->err, c->errlen, "%d:%d: view %s: ", line, pos, c->pv->name);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < c->errlen)
		vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static const pg_table *ftab(cc *c, int k)
{
	return &c->t[c->ti[k]];
}

static const char *alias_of(const vs_from *f)
{
	return f->alias ? f->alias : f->table;
}

static int resolve_table(cc *c, int k)
{
	const vs_from *f = &c->pv->from[k];
	int found = -1, n = 0;

	for (int i = 0; i < c->nt; i++)
		if (!strcmp(c->t[i].rel, f->table) && (!f->schema || !strcmp(c->t[i].nsp, f->schema))) {
			found = i;
			n++;
		}
	if (n == 0)
		return cfail(c, f->line, f->pos, "table %s%s%s is not one of the heap's tables (the "
		             "publication's at the first run): name a published table, or add it to the "
		             "publication and make a new heap", f->schema ? pg_disp(f->schema) : "",
		             f->schema ? "." : "", pg_disp(f->table));
	if (n > 1)
		return cfail(c, f->line, f->pos, "table name %s is in several schemas: write "
		             "schema.%s", pg_disp(f->table), pg_disp(f->table));
	for (int j = 0; j < k; j++)
		if (!strcmp(alias_of(&c->pv->from[j]), alias_of(f)))
			return cfail(c, f->line, f->pos, "%s names two tables of the FROM list: give "
			             "one an alias", pg_disp(alias_of(f)));
	c->ti[k] = found;
	return 0;
}

static int resolve_ref(cc *c, vs_ref *r, int upto)
{
	int n = 0;

	for (int k = 0; k <= upto; k++) {
		const pg_table *t = ftab(c, k);
		if (r->qual && strcmp(r->qual, alias_of(&c->pv->from[k])))
			continue;
		for (int col = 0; col < t->ncols; col++)
			if (!strcmp(t->cols[col], r->name)) {
				r->tab = k;
				r->col = col;
				n++;
			}
		if (r->qual && n == 0)
			return cfail(c, r->line, r->pos, "column %s.%s does not exist (table %s.%s has %s%s): "
			             "name one of its columns", pg_disp(r->qual), pg_disp(r->name),
			             pg_disp(t->nsp), pg_disp(t->rel), pg_disp(t->cols[0]),
			             t->ncols > 1 ? ", ..." : "");
	}
	if (r->qual && n == 0)
		return cfail(c, r->line, r->pos, "%s is not a table or alias of this view's FROM list%s",
		             pg_disp(r->qual), upto + 1 < c->pv->nfrom ? " before this point" : "");
	if (n == 0)
		return cfail(c, r->line, r->pos, "column %s does not exist in %s: name a column of "
		             "its tables", pg_disp(r->name), c->pv->nfrom > 1 ? "the joined tables" :
		             "the table");
	if (n > 1)
		return cfail(c, r->line, r->pos, "column %s is ambiguous: write alias.%s",
		             pg_disp(r->name), pg_disp(r->name));
	return 0;
}

static const char *type_of(cc *c, const vs_ref *r)
{
	const pg_table *t = ftab(c, r->tab);
	return t->types && t->types[r->col] ? t->types[r->col] : "(unknown)";
}

static int in_list(const char *s, const char *const *l)
{
	for (; *l; l++)
		if (!strcmp(s, *l))
			return 1;
	return 0;
}

static const char *const NUM_TYPES[] = { "int2", "int4", "int8", "numeric", NULL };
static const char *const INT_CLASS[] = { "int2", "int4", "int8", "oid", NULL };
static const char *const TEXT_CLASS[] = { "text", "varchar", "name", NULL };
static const char *const EQ_TYPES[] = { "int2", "int4", "int8", "oid", "text", "varchar", "name",
                                        "bool", "date", "time", "timestamp", "timestamptz",
                                        "uuid", "bytea", NULL };
#define EQ_LIST "int2, int4, int8, oid, text, varchar, name, bool, date, time, timestamp, " \
	"timestamptz, uuid, bytea"

/* Equal values of the type print alike, so text equality is equality. */
static int check_eq_type(cc *c, const vs_ref *r, const char *what)
{
	const char *ty = type_of(c, r);
	if (!in_list(ty, EQ_TYPES))
		return cfail(c, r->line, r->pos, "%s %s has type %s, whose equal values may print "
		             "differently (supported: " EQ_LIST ")", what, pg_disp(r->name), ty);
	return 0;
}

static int same_class(const char *a, const char *b)
{
	return !strcmp(a, b) || (in_list(a, INT_CLASS) && in_list(b, INT_CLASS)) ||
	       (in_list(a, TEXT_CLASS) && in_list(b, TEXT_CLASS));
}

static int same_col(const vs_ref *a, const vs_ref *b)
{
	return a->tab == b->tab && a->col == b->col;
}

/* Adds (tab, col) to a list unless there; returns its index. */
static int add_col(vcol **l, int *n, int tab, int col)
{
	for (int i = 0; i < *n; i++)
		if ((*l)[i].tab == tab && (*l)[i].col == col)
			return i;
	vcol *q = realloc(*l, (size_t)(*n + 1) * sizeof *q);
	if (!q)
		return -2;
	*l = q;
	q[*n] = (vcol){ tab, col };
	return (*n)++;
}

static int find_col(const vcol *l, int n, int tab, int col)
{
	for (int i = 0; i < n; i++)
		if (l[i].tab == tab && l[i].col == col)
			return i;
	return -1;
}

/* A projection node's index lists: positions of key[] and val[] in the
 * source layout src[]. */
static proj *new_proj(views *vs, const vcol *src, int nsrc, const vcol *key, int nk,
                      const vcol *val, int nv)
{
	proj *p = calloc(1, sizeof *p), **q;

	if (!p || !(q = realloc(vs->p, (size_t)(vs->np + 1) * sizeof *q))) {
		free(p);
		return NULL;
	}
	vs->p = q;
	q[vs->np++] = p;
	p->nsrc = nsrc;
	p->nk = nk;
	p->nv = nv;
	if (!(p->f = calloc((size_t)nsrc + 1, sizeof *p->f)) ||
	    !(p->kidx = calloc((size_t)nk + 1, sizeof(int))) ||
	    !(p->vidx = calloc((size_t)nv + 1, sizeof(int))))
		return NULL;
	for (int i = 0; i < nk; i++)
		p->kidx[i] = find_col(src, nsrc, key[i].tab, key[i].col);
	for (int i = 0; i < nv; i++)
		p->vidx[i] = find_col(src, nsrc, val[i].tab, val[i].col);
	return p;
}

/* need(j): the columns of tables <= j (tab < j for the left side: lt) that
 * are used after join j: the view's key and val, and the left columns of
 * later joins; in that order, without repeats. */
static int need(cc *c, const vcol *fk, int nfk, const vcol *fv, int nfv, int j, int tab_lo,
                int tab_hi, vcol **out, int *n)
{
	const vs_view *v = c->pv;

	*out = NULL;
	*n = 0;
	for (int i = 0; i < nfk + nfv; i++) {
		const vcol *x = i < nfk ? &fk[i] : &fv[i - nfk];
		if (x->tab >= tab_lo && x->tab <= tab_hi && add_col(out, n, x->tab, x->col) < 0)
			return -2;
	}
	for (int k = j + 1; k < v->nfrom; k++) {
		const vs_ref *l = &v->from[k].on_a;
		if (l->tab >= tab_lo && l->tab <= tab_hi && add_col(out, n, l->tab, l->col) < 0)
			return -2;
	}
	return 0;
}

static int name_next(cc *c, char *buf)
{
	snprintf(buf, AH_NAME_MAX + 1, "%s%s.%d", c->vs->prefix, c->pv->name, ++c->seq);
	return 0;
}

static int table_layout(const pg_table *t, int k, vcol **out)
{
	if (!(*out = calloc((size_t)t->ncols, sizeof **out)))
		return -2;
	for (int i = 0; i < t->ncols; i++)
		(*out)[i] = (vcol){ k, i };
	return 0;
}

static int put_ident(pg_buf *b, const char *s)
{
	if (pg_buf_put(b, "\"", 1))
		return -1;
	for (; *s; s++)
		if ((*s == '"' && pg_buf_put(b, "\"", 1)) || pg_buf_put(b, s, 1))
			return -1;
	return pg_buf_put(b, "\"", 1);
}

static int put_col(pg_buf *b, const vs_ref *r, const pg_table *t)
{
	char a[16];
	snprintf(a, sizeof a, "\"a%d\".", r->tab);
	return pg_buf_put(b, a, strlen(a)) || put_ident(b, t->cols[r->col]);
}

/* The view's SELECT, every name resolved, quoted and qualified. */
static int deparse(cc *c, char **out)
{
	const vs_view *v = c->pv;
	pg_buf b = { 0 };
	int bad = pg_buf_put(&b, "SELECT ", 7);
	char a[32];

	for (int i = 0; i < v->nitems && !bad; i++) {
		const vs_item *it = &v->items[i];
		bad = i && pg_buf_put(&b, ", ", 2);
		if (it->kind == VS_COUNT_STAR)
			bad = bad || pg_buf_put(&b, "count(*)", 8);
		else if (it->kind != VS_COL)
			bad = bad || pg_buf_put(&b, vs_kind_name(it->kind), strlen(vs_kind_name(it->kind))) ||
			      pg_buf_put(&b, "(", 1) || put_col(&b, &it->ref, ftab(c, it->ref.tab)) ||
			      pg_buf_put(&b, ")", 1);
		else
			bad = bad || put_col(&b, &it->ref, ftab(c, it->ref.tab));
	}
	for (int k = 0; k < v->nfrom && !bad; k++) {
		const pg_table *t = ftab(c, k);
		bad = pg_buf_put(&b, k ? " JOIN " : " FROM ", 6) || put_ident(&b, t->nsp) ||
		      pg_buf_put(&b, ".", 1) || put_ident(&b, t->rel);
		snprintf(a, sizeof a, " AS \"a%d\"", k);
		bad = bad || pg_buf_put(&b, a, strlen(a));
		if (k && !bad)
			bad = pg_buf_put(&b, " ON ", 4) || put_col(&b, &v->from[k].on_a, ftab(c, v->from[k].on_a.tab)) ||
			      pg_buf_put(&b, " = ", 3) || put_col(&b, &v->from[k].on_b, ftab(c, k));
	}
	for (int i = 0; i < v->ngroup && !bad; i++)
		bad = pg_buf_put(&b, i ? ", " : " GROUP BY ", i ? 2 : 10) ||
		      put_col(&b, &v->group[i], ftab(c, v->group[i].tab));
	if (bad || pg_buf_put(&b, "", 1)) {
		pg_buf_free(&b);
		return -2;
	}
	*out = (char *)b.p;
	return 0;
}

static int compile_view(cc *c, view1 *out)
{
	const vs_view *v = c->pv;
	vs_view *mv = (vs_view *)v;  /* resolution fills tab/col in place */
	vcol *fk = NULL, *fv = NULL, *src = NULL, *lv = NULL, *rv = NULL, *nx = NULL;
	int nfk = 0, nfv = 0, nlv = 0, nrv = 0, nnx = 0, naggs = 0, rc = -2;
	char left[AH_NAME_MAX + 1], right[AH_NAME_MAX + 1], outn[AH_NAME_MAX + 1];
	int group = v->ngroup > 0;

	snprintf(out->arr, sizeof out->arr, "%s%s", c->vs->prefix, v->name);
	/* PostgreSQL names an output column by its label, its column, or its
	 * aggregate's name, and refuses a view with two of one name */
	for (int i = 0; i < v->nitems; i++)
		for (int k = 0; k < i; k++) {
			const vs_item *a = &v->items[k], *b = &v->items[i];
			const char *na = a->label ? a->label : a->kind == VS_COL ? a->ref.name
			                                                         : vs_kind_name(a->kind);
			const char *nb = b->label ? b->label : b->kind == VS_COL ? b->ref.name
			                                                         : vs_kind_name(b->kind);
			if (!strcmp(na, nb))
				return cfail(c, b->line, b->pos, "output column %s appears twice: give one an "
				             "AS label (PostgreSQL refuses a view with two columns of one name)",
				             pg_disp(nb));
		}
	out->ncols = v->nitems;
	for (int k = 0; k < v->nfrom; k++)
		if (resolve_table(c, k))
			return -1;
	for (int k = 1; k < v->nfrom; k++) {
		vs_from *f = &mv->from[k];
		if (resolve_ref(c, &f->on_a, k) || resolve_ref(c, &f->on_b, k))
			return -1;
		if (f->on_a.tab == k && f->on_b.tab < k) {
			vs_ref t = f->on_a;
			f->on_a = f->on_b;
			f->on_b = t;
		}
		if (f->on_b.tab != k || f->on_a.tab >= k)
			return cfail(c, f->on_a.line, f->on_a.pos, "the ON condition of JOIN %s must "
			             "compare a column of %s with a column of a table before it",
			             pg_disp(alias_of(f)), pg_disp(alias_of(f)));
		if (check_eq_type(c, &f->on_a, "join column") || check_eq_type(c, &f->on_b, "join column"))
			return -1;
		if (!same_class(type_of(c, &f->on_a), type_of(c, &f->on_b)))
			return cfail(c, f->on_a.line, f->on_a.pos, "join columns %s (%s) and %s (%s) have "
			             "types whose text forms differ for equal values: join columns of one "
			             "type (or both integers, or both text)", pg_disp(f->on_a.name),
			             type_of(c, &f->on_a), pg_disp(f->on_b.name), type_of(c, &f->on_b));
	}
	for (int i = 0; i < v->nitems; i++) {
		vs_item *it = &mv->items[i];
		if (it->kind == VS_COUNT_STAR) {
			naggs++;
			continue;
		}
		if (resolve_ref(c, &it->ref, v->nfrom - 1))
			return -1;
		if (it->kind != VS_COL)
			naggs++;
		if ((it->kind == VS_SUM || it->kind == VS_MIN || it->kind == VS_MAX) &&
		    !in_list(type_of(c, &it->ref), NUM_TYPES))
			return cfail(c, it->line, it->pos, "%s(%s): type %s is not supported (sum, min and "
			             "max take int2, int4, int8 and numeric; count takes any type)",
			             vs_kind_name(it->kind), pg_disp(it->ref.name), type_of(c, &it->ref));
	}
	for (int i = 0; i < v->ngroup; i++) {
		if (resolve_ref(c, &mv->group[i], v->nfrom - 1) ||
		    check_eq_type(c, &v->group[i], "GROUP BY column"))
			return -1;
		int sel = 0;
		for (int k = 0; k < v->nitems; k++)
			sel |= v->items[k].kind == VS_COL && same_col(&v->items[k].ref, &v->group[i]);
		if (!sel)
			return cfail(c, v->group[i].line, v->group[i].pos, "GROUP BY column %s is not in "
			             "the select list: select it (the view's key is its GROUP BY columns)",
			             pg_disp(v->group[i].name));
	}
	if (naggs && !group)
		return cfail(c, v->items[0].line, v->items[0].pos, "aggregates need GROUP BY (without "
		             "it PostgreSQL returns one row even for no rows, which a view does not keep)");
	if (!(out->kitems = calloc((size_t)v->nitems + 1, sizeof(int))) ||
	    !(out->vitems = calloc((size_t)v->nitems + 1, sizeof(int))))
		goto out;
	for (int i = 0; i < v->nitems; i++) {
		const vs_item *it = &v->items[i];
		if (it->kind == VS_COL && group)
			continue;  /* the key is the GROUP BY list: below */
		if (it->kind == VS_COL) {
			/* no GROUP BY: the key is the select list, repeats and all */
			vcol *q = realloc(fk, (size_t)(nfk + 1) * sizeof *q);
			if (!q)
				goto out;
			fk = q;
			fk[nfk++] = (vcol){ it->ref.tab, it->ref.col };
			out->kitems[out->nk++] = i;
		} else {
			out->vitems[out->nv++] = i;
			if (it->kind != VS_COUNT_STAR && add_col(&fv, &nfv, it->ref.tab, it->ref.col) < 0)
				goto out;
		}
	}
	for (int g = 0; g < v->ngroup; g++) {
		int i = 0;
		while (!(v->items[i].kind == VS_COL && same_col(&v->items[i].ref, &v->group[g])))
			i++;
		out->kitems[out->nk++] = i;
		vcol *q = realloc(fk, (size_t)(nfk + 1) * sizeof *q);
		if (!q)
			goto out;
		fk = q;
		fk[nfk++] = (vcol){ v->group[g].tab, v->group[g].col };
	}
	for (int i = 0; i < v->nitems; i++) {
		const vs_item *it = &v->items[i];
		if (it->kind != VS_COL && it->kind != VS_COUNT_STAR && add_col(&c->vs->used, &c->vs->nused,
		    c->ti[it->ref.tab], it->ref.col) < 0)
			goto out;
	}
	for (int k = 1; k < v->nfrom; k++)
		if (add_col(&c->vs->used, &c->vs->nused, c->ti[v->from[k].on_a.tab], v->from[k].on_a.col) < 0 ||
		    add_col(&c->vs->used, &c->vs->nused, c->ti[k], v->from[k].on_b.col) < 0)
			goto out;
	for (int g = 0; g < v->ngroup; g++)
		if (add_col(&c->vs->used, &c->vs->nused, c->ti[v->group[g].tab], v->group[g].col) < 0)
			goto out;
	if (deparse(c, &out->sql))
		goto out;

	/* the plan */
	eg_graph *g = c->vs->g;
	const char *final_name = out->arr;
	char red_in[AH_NAME_MAX + 1];
	if (group) {
		name_next(c, red_in);
		final_name = red_in;
	}
	proj *p;
	if (v->nfrom == 1) {
		if (table_layout(ftab(c, 0), 0, &src))
			goto out;
		if (!(p = new_proj(c->vs, src, ftab(c, 0)->ncols, fk, nfk, fv, nfv)))
			goto out;
		p->row_in_key = ftab(c, 0)->nkey == 0;
		snprintf(p->out, sizeof p->out, "%s", final_name);
		if ((rc = eg_arrange_by(g, final_name, ftab(c, 0)->name, map_fn, p)) != 0)
			goto eg;
	} else {
		/* the first table, keyed by its column of the first ON */
		vcol k1 = { v->from[1].on_a.tab, v->from[1].on_a.col };
		if (table_layout(ftab(c, 0), 0, &src) || need(c, fk, nfk, fv, nfv, 1, 0, 0, &lv, &nlv))
			goto out;
		if (!(p = new_proj(c->vs, src, ftab(c, 0)->ncols, &k1, 1, lv, nlv)))
			goto out;
		p->row_in_key = ftab(c, 0)->nkey == 0;
		p->drop_null = 1;
		name_next(c, left);
		if ((rc = eg_arrange_by(g, left, ftab(c, 0)->name, map_fn, p)) != 0)
			goto eg;
		for (int j = 1; j < v->nfrom; j++) {
			const pg_table *t = ftab(c, j);
			vcol kr = { j, v->from[j].on_b.col };
			free(src);
			src = NULL;
			free(rv);
			rv = NULL;
			if (table_layout(t, j, &src) || need(c, fk, nfk, fv, nfv, j, j, j, &rv, &nrv))
				goto out;
			if (!(p = new_proj(c->vs, src, t->ncols, &kr, 1, rv, nrv)))
				goto out;
			p->row_in_key = t->nkey == 0;
			p->drop_null = 1;
			name_next(c, right);
			if ((rc = eg_arrange_by(g, right, t->name, map_fn, p)) != 0)
				goto eg;
			/* the join: source = lv ++ rv */
			free(src);
			if (!(src = calloc((size_t)(nlv + nrv) + 1, sizeof *src)))
				goto out;
			memcpy(src, lv, (size_t)nlv * sizeof *src);
			memcpy(src + nlv, rv, (size_t)nrv * sizeof *src);
			int last = j == v->nfrom - 1;
			if (last) {
				p = new_proj(c->vs, src, nlv + nrv, fk, nfk, fv, nfv);
				snprintf(outn, sizeof outn, "%s", final_name);
			} else {
				vcol kn = { v->from[j + 1].on_a.tab, v->from[j + 1].on_a.col };
				free(nx);
				nx = NULL;
				if (need(c, fk, nfk, fv, nfv, j + 1, 0, j, &nx, &nnx))
					goto out;
				p = new_proj(c->vs, src, nlv + nrv, &kn, 1, nx, nnx);
				if (p)
					p->drop_null = 1;
				name_next(c, outn);
			}
			if (!p)
				goto out;
			p->nleft = nlv;
			snprintf(p->out, sizeof p->out, "%s", outn);
			if ((rc = eg_join(g, outn, left, right, join_fn, p)) != 0)
				goto eg;
			snprintf(left, sizeof left, "%s", outn);
			free(lv);
			lv = nx;
			nlv = nnx;
			nx = NULL;
			nnx = 0;
		}
	}
	if (group) {
		red *r = calloc(1, sizeof *r), **q;
		if (!r || !(q = realloc(c->vs->r, (size_t)(c->vs->nr + 1) * sizeof *q))) {
			free(r);
			goto out;
		}
		c->vs->r = q;
		q[c->vs->nr++] = r;
		r->nin = nfv;
		r->nagg = naggs;
		size_t na = (size_t)naggs + 1;
		if (!(r->a = calloc(na, sizeof *r->a)) || !(r->f = calloc((size_t)nfv + 1, sizeof *r->f)) ||
		    !(r->cnt = calloc(na, sizeof *r->cnt)) || !(r->has = calloc(na, sizeof *r->has)) ||
		    !(r->best = calloc(na, sizeof *r->best)) || !(r->bestn = calloc(na, sizeof *r->bestn)) ||
		    !(r->sum = calloc(na, sizeof *r->sum)))
			goto out;
		for (int i = 0, a = 0; i < v->nitems; i++) {
			const vs_item *it = &v->items[i];
			if (it->kind == VS_COL)
				continue;
			r->a[a].kind = it->kind;
			r->a[a].in = it->kind == VS_COUNT_STAR ? -1 : find_col(fv, nfv, it->ref.tab, it->ref.col);
			a++;
		}
		/* two levels (Materialize's hierarchical reductions): (group,
		 * bucket) -> the aggregates of that share, then group -> those
		 * combined; a change costs a bucket's share of the group's
		 * distinct inputs plus GROUP_BUCKETS, not the whole group */
		red *r2 = calloc(1, sizeof *r2);
		if (!r2 || !(q = realloc(c->vs->r, (size_t)(c->vs->nr + 1) * sizeof *q))) {
			free(r2);
			goto out;
		}
		c->vs->r = q;
		q[c->vs->nr++] = r2;
		r2->nin = naggs;
		r2->nagg = naggs;
		r2->combine = 1;
		if (!(r2->a = calloc(na, sizeof *r2->a)) || !(r2->f = calloc(na, sizeof *r2->f)) ||
		    !(r2->cnt = calloc(na, sizeof *r2->cnt)) || !(r2->has = calloc(na, sizeof *r2->has)) ||
		    !(r2->best = calloc(na, sizeof *r2->best)) ||
		    !(r2->bestn = calloc(na, sizeof *r2->bestn)) || !(r2->sum = calloc(na, sizeof *r2->sum)))
			goto out;
		for (int a = 0; a < naggs; a++) {
			r2->a[a].kind = r->a[a].kind;
			r2->a[a].in = a;
		}
		char bucketed[AH_NAME_MAX + 1], partial[AH_NAME_MAX + 1], regroup[AH_NAME_MAX + 1];
		name_next(c, bucketed);
		name_next(c, partial);
		name_next(c, regroup);
		snprintf(r->out, sizeof r->out, "%s", partial);
		snprintf(r2->out, sizeof r2->out, "%s", out->arr);
		if ((rc = eg_arrange_by(g, bucketed, red_in, bucket_fn, r)) != 0 ||
		    (rc = eg_reduce(g, partial, bucketed, reduce_fn, r)) != 0 ||
		    (rc = eg_arrange_by(g, regroup, partial, unbucket_fn, NULL)) != 0 ||
		    (rc = eg_reduce(g, out->arr, regroup, reduce_fn, r2)) != 0)
			goto eg;
	}
	rc = 0;
	goto out;
eg:
	snprintf(c->err, c->errlen, "view %s: %s", v->name, eg_errmsg(g));
	rc = rc == AH_ENOMEM ? -2 : -1;
out:
	if (rc == -2)
		snprintf(c->err, c->errlen, "out of memory");
	free(fk);
	free(fv);
	free(src);
	free(lv);
	free(rv);
	free(nx);
	return rc;
}

int views_compile(const char *text, size_t len, const pg_table *t, int nt, views **out,
                  char *err, size_t errlen)
{
	return views_compile_as(text, len, t, nt, "view.", out, err, errlen);
}

int views_compile_as(const char *text, size_t len, const pg_table *t, int nt, const char *prefix,
                     views **out, char *err, size_t errlen)
{
	vs_file f;
	views *vs = NULL;
	int rc;

	*out = NULL;
	if ((rc = vs_parse(text, len, &f, err, errlen)) != 0)
		return rc;
	if (!(vs = calloc(1, sizeof *vs)) || !(vs->text = malloc(len + 1)) ||
	    !(vs->v = calloc((size_t)f.nv, sizeof *vs->v)) || eg_graph_new(&vs->g)) {
		rc = -2;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (strlen(prefix) >= sizeof vs->prefix) {
		rc = -1;
		snprintf(err, errlen, "arrangement name prefix %s is over %zu bytes", prefix,
		         sizeof vs->prefix - 1);
		goto out;
	}
	strcpy(vs->prefix, prefix);
	memcpy(vs->text, text, len);
	vs->text[len] = 0;
	vs->tlen = len;
	for (int i = 0; i < f.nv; i++) {
		int ti[64];
		cc c = { .vs = vs, .t = t, .nt = nt, .pv = &f.v[i], .ti = ti, .err = err, .errlen = errlen };
		if (f.v[i].nfrom > 64) {
			rc = cfail(&c, f.v[i].line, f.v[i].pos, "more than 64 tables: not supported");
			goto out;
		}
		vs->nv++;
		if ((rc = compile_view(&c, &vs->v[i])) != 0)
			goto out;
	}
	rc = 0;
out:
	vs_free(&f);
	if (rc) {
		views_free(vs);
		vs = NULL;
	}
	*out = vs;
	return rc;
}

void views_free(views *vs)
{
	if (!vs)
		return;
	eg_graph_free(vs->g);
	for (int i = 0; i < vs->nv; i++) {
		free(vs->v[i].sql);
		free(vs->v[i].kitems);
		free(vs->v[i].vitems);
	}
	for (int i = 0; i < vs->np; i++) {
		proj *p = vs->p[i];
		free(p->f);
		free(p->kidx);
		free(p->vidx);
		pg_buf_free(&p->buf);
		free(p);
	}
	for (int i = 0; i < vs->nr; i++) {
		red *r = vs->r[i];
		free(r->a);
		free(r->f);
		free(r->cnt);
		free(r->has);
		free(r->best);
		free(r->bestn);
		free(r->sum);
		pg_buf_free(&r->buf);
		pg_buf_free(&r->tmp);
		free(r);
	}
	free(vs->p);
	free(vs->r);
	free(vs->v);
	free(vs->used);
	free(vs->text);
	free(vs);
}

eg_graph *views_graph(views *v)
{
	return v->g;
}

int views_count(const views *v)
{
	return v ? v->nv : 0;
}

const char *views_arrangement(const views *v, int i)
{
	return v->v[i].arr;
}

int views_columns(const views *v, int i)
{
	return v->v[i].ncols;
}

const char *views_sql(const views *v, int i)
{
	return v->v[i].sql;
}

int views_encode(const views *v, int i, const pg_field *f, pg_buf *kv, size_t *klen)
{
	kv->len = 0;
	if (row_put_fields(kv, f, v->v[i].kitems, v->v[i].nk))
		return -1;
	*klen = kv->len;
	return row_put_fields(kv, f, v->v[i].vitems, v->v[i].nv);
}

/* ---- the pg.views record ------------------------------------------------ */

#define REC_MAGIC "ah-pgsync views 2\n"

int views_record(const views *v, const pg_table *t, int nt, pg_buf *out)
{
	char line[64 + TOOL_ESCAPE_MAX(256)];

	out->len = 0;
	if (pg_buf_put(out, REC_MAGIC, strlen(REC_MAGIC)))
		return -1;
	for (int i = 0; i < v->nused; i++) {
		const pg_table *x = &t[v->used[i].tab];
		const char *ty = x->types && x->types[v->used[i].col] ? x->types[v->used[i].col] : "";
		size_t tl = strlen(ty) > 256 ? 256 : strlen(ty);
		int n = snprintf(line, sizeof line, "type\t%" PRIu32 "\t%d\t", x->relid, v->used[i].col);
		n += (int)tool_escape(ty, tl, line + n);
		line[n++] = '\n';
		if (v->used[i].tab >= nt || pg_buf_put(out, line, (size_t)n))
			return -1;
	}
	snprintf(line, sizeof line, "text\t%zu\n", v->tlen);
	return pg_buf_put(out, line, strlen(line)) || pg_buf_put(out, v->text, v->tlen) ? -1 : 0;
}

int views_record_parse(const char *p, size_t len, pg_table *t, int nt, const char **text,
                       size_t *tlen, char *err, size_t errlen)
{
	const char *end = p + len, *q = p;
	size_t ml = strlen(REC_MAGIC);

	if (len >= ml && !memcmp(p, "ah-pgsync views 1\n", ml)) {
		snprintf(err, errlen, "the heap's views were made by an older ah-pgsync, whose plan "
		         "for GROUP BY had one level: make a new heap for them");
		return -1;
	}
	if (len < ml || memcmp(p, REC_MAGIC, ml))
		goto bad;
	q += ml;
	while (q < end) {
		const char *nl = memchr(q, '\n', (size_t)(end - q));
		char line[600];
		if (!nl || (size_t)(nl - q) >= sizeof line)
			goto bad;
		memcpy(line, q, (size_t)(nl - q));
		line[nl - q] = 0;
		q = nl + 1;
		unsigned long long n;
		int used = 0;
		if (sscanf(line, "text\t%llu%n", &n, &used) == 1 && line[used] == 0) {
			if (n != (unsigned long long)(end - q))
				goto bad;
			*text = q;
			*tlen = (size_t)n;
			return 0;
		}
		uint32_t relid;
		int col;
		if (sscanf(line, "type\t%" SCNu32 "\t%d\t%n", &relid, &col, &used) != 2 || used == 0)
			goto bad;
		pg_table *x = NULL;
		for (int i = 0; i < nt; i++)
			if (t[i].relid == relid)
				x = &t[i];
		char ty[300];
		size_t tyl = 0;
		const char *why;
		if (!x || col < 0 || col >= x->ncols || strlen(line + used) >= sizeof ty ||
		    tool_unescape(line + used, strlen(line + used), ty, &tyl, &why) != 0)
			goto bad;
		ty[tyl] = 0;
		if (!x->types && !(x->types = calloc((size_t)x->ncols, sizeof *x->types)))
			goto oom;
		free(x->types[col]);
		if (!(x->types[col] = strdup(ty)))
			goto oom;
	}
bad:
	snprintf(err, errlen, "the heap's pg.views record is damaged");
	return -1;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}
