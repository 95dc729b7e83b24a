/*
 * tools/pg/pgoutput.c - the pgoutput v1 message decoder (see pgoutput.h).
 * Integers on the wire are big-endian; strings are NUL-terminated.  Every
 * read is checked against the message's end.
 *
 * It must never read past the message's end, and never guess at what it does
 * not know: an unknown message type or column kind, or a count or length
 * that runs past the end, is an error.
 */
#include <stdlib.h>
#include <string.h>

#include "tools/pg/pgoutput.h"

typedef struct rd {
	const uint8_t *p, *end;
	int bad;
} rd;

static uint64_t get_n(rd *r, int n)
{
	uint64_t v = 0;

	if (r->bad || r->end - r->p < n) {
		r->bad = 1;
		return 0;
	}
	for (int i = 0; i < n; i++)
		v = v << 8 | *r->p++;
	return v;
}

static const char *get_str(rd *r)
{
	const uint8_t *z;

	if (r->bad || !(z = memchr(r->p, 0, (size_t)(r->end - r->p)))) {
		r->bad = 1;
		return "";
	}
	const char *s = (const char *)r->p;
	r->p = z + 1;
	return s;
}

static int grow(void **p, int *cap, int need, size_t elem)
{
	void *q;
	int n = *cap ? *cap : 16;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*p, (size_t)n * elem);
	if (!q)
		return -2;
	*p = q;
	*cap = n;
	return 0;
}

static int get_tuple(rd *r, po_tuple *t)
{
	int n = (int)get_n(r, 2);
	int cap = t->cap;

	if (r->bad)
		return -1;
	if (grow((void **)&t->f, &cap, n, sizeof *t->f) ||
	    grow((void **)&t->kind, &t->cap, n, 1))
		return -2;
	t->ncols = n;
	for (int i = 0; i < n; i++) {
		char k = (char)get_n(r, 1);

		t->kind[i] = k;
		t->f[i].null = (k != 't');
		t->f[i].p = NULL;
		t->f[i].len = 0;
		if (k == 't') {
			uint64_t len = get_n(r, 4);
			if (r->bad || len > (uint64_t)(r->end - r->p))
				return -1;
			t->f[i].p = (const char *)r->p;
			t->f[i].len = (size_t)len;
			r->p += len;
		} else if (k != 'n' && k != 'u') {
			return -1;
		}
	}
	return r->bad ? -1 : 0;
}

static int relation(po_decoder *d, rd *r)
{
	po_msg *m = &d->m;

	m->relid = (uint32_t)get_n(r, 4);
	m->nspname = get_str(r);
	m->relname = get_str(r);
	m->replident = (char)get_n(r, 1);
	m->ncols = (int)get_n(r, 2);
	if (r->bad)
		return -1;
	if (grow((void **)&m->colnames, &d->names_cap, m->ncols, sizeof(char *)))
		return -2;
	for (int i = 0; i < m->ncols; i++) {
		get_n(r, 1); /* flags: part of the replica identity */
		m->colnames[i] = get_str(r);
		get_n(r, 8); /* type oid, typmod */
	}
	return r->bad ? -1 : 0;
}

static int change(po_decoder *d, rd *r, char type)
{
	po_msg *m = &d->m;
	int rc;
	char k;

	m->relid = (uint32_t)get_n(r, 4);
	m->old_kind = 0;
	m->old_t.ncols = m->new_t.ncols = 0;
	k = (char)get_n(r, 1);
	if (type != 'I' && (k == 'K' || k == 'O')) {
		m->old_kind = k;
		if ((rc = get_tuple(r, &m->old_t)) != 0)
			return rc;
		if (type == 'U')
			k = (char)get_n(r, 1);
	}
	if (type == 'D')
		return m->old_kind && !r->bad ? 0 : -1;
	if (k != 'N')
		return -1;
	return get_tuple(r, &m->new_t);
}

static int truncate_msg(po_decoder *d, rd *r)
{
	po_msg *m = &d->m;

	m->nrels = (int)get_n(r, 4);
	get_n(r, 1); /* options: CASCADE, RESTART IDENTITY */
	if (r->bad || m->nrels < 0 || (size_t)m->nrels * 4 > (size_t)(r->end - r->p))
		return -1;
	if (grow((void **)&m->relids, &d->relids_cap, m->nrels, sizeof(uint32_t)))
		return -2;
	for (int i = 0; i < m->nrels; i++)
		m->relids[i] = (uint32_t)get_n(r, 4);
	return r->bad ? -1 : 0;
}

int po_decode(po_decoder *d, const uint8_t *msg, size_t len, const char **why)
{
	rd r = { msg, msg + len, 0 };
	po_msg *m = &d->m;
	int rc = 0;

	*why = "malformed pgoutput message";
	if (len < 1)
		return -1;
	m->type = (char)*r.p++;
	switch (m->type) {
	case 'B':
		m->final_lsn = get_n(&r, 8);
		get_n(&r, 12); /* commit timestamp, xid */
		rc = r.bad ? -1 : 0;
		break;
	case 'C':
		get_n(&r, 1);
		m->commit_lsn = get_n(&r, 8);
		m->end_lsn = get_n(&r, 8);
		get_n(&r, 8);
		rc = r.bad ? -1 : 0;
		break;
	case 'R':
		rc = relation(d, &r);
		break;
	case 'I': case 'U': case 'D':
		rc = change(d, &r, m->type);
		break;
	case 'T':
		rc = truncate_msg(d, &r);
		break;
	case 'O': case 'Y': case 'M':
		m->type = 0;
		break;
	default:
		*why = "unknown pgoutput message type (streamed transactions are not supported)";
		return -1;
	}
	return rc;
}

void po_free(po_decoder *d)
{
	free(d->m.old_t.f);
	free(d->m.old_t.kind);
	free(d->m.new_t.f);
	free(d->m.new_t.kind);
	free(d->m.colnames);
	free(d->m.relids);
	memset(d, 0, sizeof *d);
}
