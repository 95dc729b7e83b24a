/*
 * tools/common/ingest.c - the staging and group-commit engine shared by
 * ah-load and ah-pgsync (see ingest.h for the contract: who owns what,
 * when staged updates leave the staging, the errors).
 *
 * Plain malloc'd memory for the staging; the heap is written only inside
 * the group's write transaction, and committed only by ingest_commit, with
 * the source positions.  It must never drop a staged update that a
 * committed source transaction staged, except when the group holding it
 * commits: that is what lets ah-pgsync keep a lost connection's complete
 * transactions and ah-load resume exactly.
 */
#include "tools/common/ingest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the name index ---- */

static size_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return (size_t)h;
}

ingest_arr *ingest_find(const ingest *g, const char *name)
{
	if (g->cap == 0)
		return NULL;
	for (size_t i = hash_name(name) & (g->cap - 1);; i = (i + 1) & (g->cap - 1)) {
		if (!g->slots[i])
			return NULL;
		if (!strcmp(g->slots[i]->name, name))
			return g->slots[i];
	}
}

static void place(ingest_arr **slots, size_t cap, ingest_arr *a)
{
	size_t i = hash_name(a->name) & (cap - 1);

	while (slots[i])
		i = (i + 1) & (cap - 1);
	slots[i] = a;
}

ingest_arr *ingest_add(ingest *g, const char *name)
{
	ingest_arr *a;

	if ((g->count + 1) * 2 > g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		ingest_arr **slots = calloc(cap, sizeof(*slots));

		if (!slots)
			return NULL;
		for (size_t i = 0; i < g->cap; i++)
			if (g->slots[i])
				place(slots, cap, g->slots[i]);
		free(g->slots);
		g->slots = slots;
		g->cap = cap;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	strncpy(a->name, name, AH_NAME_MAX);
	place(g->slots, g->cap, a);
	g->count++;
	return a;
}

ingest_arr *ingest_first_staged(const ingest *g)
{
	for (size_t i = 0; i < g->cap; i++)
		if (g->slots[i] && g->slots[i]->n > 0)
			return g->slots[i];
	return NULL;
}

/* ---- staging ---- */

/* Returns p grown to hold need > *cap elements (*cap updated), or NULL with
 * p untouched. */
static void *reserve(void *p, size_t *cap, size_t need, size_t elem, size_t first)
{
	size_t c = *cap ? *cap : first;
	void *q;

	while (c < need)
		c *= 2;
	q = realloc(p, c * elem);
	if (q)
		*cap = c;
	return q;
}

int ingest_stage(ingest *g, ingest_arr *a, const void *key, size_t key_len, const void *val,
                 size_t val_len, uint64_t time, int64_t diff)
{
	ingest_update *s, *ups;
	unsigned char *bytes;

	if (key_len > UINT32_MAX || val_len > UINT32_MAX)
		return -1;
	if (a->n == a->cap) {
		if (!(ups = reserve(a->ups, &a->cap, a->n + 1, sizeof(*ups), 256)))
			return -1;
		a->ups = ups;
	}
	if (a->blen + key_len + val_len > a->bcap) {
		bytes = reserve(a->bytes, &a->bcap, a->blen + key_len + val_len, 1, 256);
		if (!bytes)
			return -1;
		a->bytes = bytes;
	}
	/* ingest_append passes up to min(n, INGEST_BUILDER_MIN - 1) updates
	 * at once (INGEST_PIECE <= that when n is larger). */
	if (a->n + 1 < INGEST_BUILDER_MIN && a->n + 1 > g->ubuf_cap) {
		ah_update *u = reserve(g->ubuf, &g->ubuf_cap, a->n + 1, sizeof(*u), 1024);

		if (!u)
			return -1;
		g->ubuf = u;
	}
	s = &a->ups[a->n++];
	s->off = a->blen;
	s->key_len = (uint32_t)key_len;
	s->val_len = (uint32_t)val_len;
	s->time = time;
	s->diff = diff;
	if (key_len)
		memcpy(a->bytes + a->blen, key, key_len);
	if (val_len)
		memcpy(a->bytes + a->blen + key_len, val, val_len);
	a->blen += key_len + val_len;
	if (a->n == 1 || time > a->max_time)
		a->max_time = time;
	return 0;
}

void ingest_updates(const ingest_arr *a, size_t from, size_t n, ah_update *out)
{
	for (size_t i = 0; i < n; i++) {
		const ingest_update *s = &a->ups[from + i];

		/* bytes is NULL while every staged key and val is empty. */
		out[i].key = a->bytes ? a->bytes + s->off : NULL;
		out[i].key_len = s->key_len;
		out[i].val = a->bytes ? a->bytes + s->off + s->key_len : NULL;
		out[i].val_len = s->val_len;
		out[i].time = s->time;
		out[i].diff = s->diff;
	}
}

void ingest_clear(ingest_arr *a)
{
	a->n = a->mark = 0;
	a->blen = a->bytes_mark = 0;
	a->max_time = a->max_mark = 0;
}

/* ---- source transactions ---- */

void ingest_src_begin(ingest *g)
{
	ingest_src_rollback(g);
	for (size_t i = 0; i < g->cap; i++) {
		ingest_arr *a = g->slots[i];

		if (a) {
			a->mark = a->n;
			a->bytes_mark = a->blen;
			a->max_mark = a->max_time;
		}
	}
	g->in_src = 1;
}

uint64_t ingest_src_commit(ingest *g, uint64_t time)
{
	uint64_t n = 0;

	for (size_t i = 0; i < g->cap; i++) {
		ingest_arr *a = g->slots[i];

		if (!a)
			continue;
		for (size_t j = a->mark; j < a->n; j++)
			a->ups[j].time = time;
		if (a->n > a->mark && (a->mark == 0 || time > a->max_mark))
			a->max_time = time;
		else
			a->max_time = a->max_mark;
		n += a->n - a->mark;
		a->mark = a->n;
		a->bytes_mark = a->blen;
		a->max_mark = a->max_time;
	}
	g->in_src = 0;
	return n;
}

void ingest_src_rollback(ingest *g)
{
	if (!g->in_src)
		return;
	for (size_t i = 0; i < g->cap; i++) {
		ingest_arr *a = g->slots[i];

		if (a) {
			a->n = a->mark;
			a->blen = a->bytes_mark;
			a->max_time = a->max_mark;
		}
	}
	g->in_src = 0;
}

/* ---- the group ---- */

int ingest_begin(ingest *g)
{
	ah_txn *t;
	int rc;

	if (g->txn)
		return AH_ESTATE;
	if ((rc = ah_txn_begin(g->heap, 0, &t)) != 0)
		return rc;
	g->txn = t;
	g->gen++;
	return 0;
}

/* The builder, INGEST_PIECE updates at a time: the same checks and the same
 * batch as ah_append, in bounded memory. */
static int append_built(ingest *g, ingest_arr *a, uint64_t lower, uint64_t upper)
{
	ah_builder *b;
	int rc = ah_builder_begin(g->txn, a->name, lower, upper, &b);

	if (rc != 0)
		return rc;
	for (size_t i = 0; i < a->n && rc == 0; i += INGEST_PIECE) {
		size_t m = a->n - i < INGEST_PIECE ? a->n - i : INGEST_PIECE;

		ingest_updates(a, i, m, g->ubuf);
		rc = ah_builder_push(b, g->ubuf, m);
	}
	if (rc != 0) {
		ah_builder_abandon(b);
		return rc;
	}
	return ah_builder_finish(b);
}

int ingest_append(ingest *g, ingest_arr *a, uint64_t lower, uint64_t upper)
{
	int rc;

	if (!g->txn)
		return AH_ESTATE;
	if (a->n == 0) {
		rc = ah_advance(g->txn, a->name, lower, upper);
	} else if (a->n >= INGEST_BUILDER_MIN) {
		rc = append_built(g, a, lower, upper);
	} else {
		ingest_updates(a, 0, a->n, g->ubuf);
		rc = ah_append(g->txn, a->name, lower, upper, g->ubuf, a->n);
	}
	if (rc == 0)
		a->upper = upper;
	return rc;
}

int ingest_commit(ingest *g, const ingest_pos *pos, size_t npos, size_t *failed)
{
	int rc;

	if (failed)
		*failed = npos;
	if (!g->txn || g->in_src)
		return AH_ESTATE;
	for (size_t i = 0; i < npos; i++)
		if ((rc = ah_source_put(g->txn, pos[i].source, pos[i].pos, pos[i].len)) != 0) {
			if (failed)
				*failed = i;
			return rc;
		}
	rc = ah_txn_commit(g->txn);
	g->txn = NULL;
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < g->cap; i++)
		if (g->slots[i])
			ingest_clear(g->slots[i]);
	return 0;
}

void ingest_abort(ingest *g)
{
	ah_txn_abort(g->txn);
	g->txn = NULL;
}

int ingest_error(const ingest *g, int rc, const char *what, const char *name, char *buf,
                 size_t len)
{
	const char *detail = g->txn ? ah_txn_errmsg(g->txn) : "";

	snprintf(buf, len, "%s%s%s: %s", what, name ? " " : "", name ? name : "",
	         *detail ? detail : ah_strerror(rc));
	return -1;
}

void ingest_free(ingest *g)
{
	ingest_abort(g);
	for (size_t i = 0; i < g->cap; i++) {
		if (!g->slots[i])
			continue;
		free(g->slots[i]->ups);
		free(g->slots[i]->bytes);
		free(g->slots[i]);
	}
	free(g->slots);
	free(g->ubuf);
	g->slots = NULL;
	g->cap = g->count = 0;
	g->ubuf = NULL;
	g->ubuf_cap = 0;
}
