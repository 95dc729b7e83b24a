/*
 * tools/common/staged.c - ah-load's arrangement table and staged updates
 * (see staged.h).  Plain malloc'd memory; never touches the heap file.
 */
#include "tools/common/staged.h"

#include <stdlib.h>
#include <string.h>

static size_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return (size_t)h;
}

tool_arr *tool_arr_find(const tool_arr_table *t, const char *name)
{
	if (t->cap == 0)
		return NULL;
	for (size_t i = hash_name(name) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		if (!t->slots[i])
			return NULL;
		if (!strcmp(t->slots[i]->name, name))
			return t->slots[i];
	}
}

static void place(tool_arr **slots, size_t cap, tool_arr *a)
{
	size_t i = hash_name(a->name) & (cap - 1);

	while (slots[i])
		i = (i + 1) & (cap - 1);
	slots[i] = a;
}

tool_arr *tool_arr_add(tool_arr_table *t, const char *name)
{
	tool_arr *a;

	if ((t->count + 1) * 2 > t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		tool_arr **slots = calloc(cap, sizeof(*slots));

		if (!slots)
			return NULL;
		for (size_t i = 0; i < t->cap; i++)
			if (t->slots[i])
				place(slots, cap, t->slots[i]);
		free(t->slots);
		t->slots = slots;
		t->cap = cap;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	strncpy(a->name, name, AH_NAME_MAX);
	place(t->slots, t->cap, a);
	t->count++;
	return a;
}

tool_arr *tool_arr_first_staged(const tool_arr_table *t)
{
	for (size_t i = 0; i < t->cap; i++)
		if (t->slots[i] && t->slots[i]->n > 0)
			return t->slots[i];
	return NULL;
}

void tool_arr_table_free(tool_arr_table *t)
{
	for (size_t i = 0; i < t->cap; i++) {
		if (!t->slots[i])
			continue;
		free(t->slots[i]->ups);
		free(t->slots[i]->bytes);
		free(t->slots[i]);
	}
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

/* Returns p grown to hold need > *cap elements (*cap updated), or NULL with
 * p untouched. */
static void *reserve(void *p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 256;
	void *q;

	while (c < need)
		c *= 2;
	q = realloc(p, c * elem);
	if (q)
		*cap = c;
	return q;
}

int tool_arr_stage(tool_arr *a, const void *key, size_t key_len,
                   const void *val, size_t val_len, uint64_t time, int64_t diff)
{
	tool_staged *s, *ups;
	unsigned char *bytes;

	if (key_len > UINT32_MAX || val_len > UINT32_MAX)
		return -1;
	if (a->n == a->cap) {
		if (!(ups = reserve(a->ups, &a->cap, a->n + 1, sizeof(*ups))))
			return -1;
		a->ups = ups;
	}
	if (a->blen + key_len + val_len > a->bcap) {
		bytes = reserve(a->bytes, &a->bcap, a->blen + key_len + val_len, 1);
		if (!bytes)
			return -1;
		a->bytes = bytes;
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

void tool_arr_updates(const tool_arr *a, size_t from, size_t n, ah_update *out)
{
	for (size_t i = 0; i < n; i++) {
		const tool_staged *s = &a->ups[from + i];

		/* bytes is NULL while every staged key and val is empty. */
		out[i].key = a->bytes ? a->bytes + s->off : NULL;
		out[i].key_len = s->key_len;
		out[i].val = a->bytes ? a->bytes + s->off + s->key_len : NULL;
		out[i].val_len = s->val_len;
		out[i].time = s->time;
		out[i].diff = s->diff;
	}
}

void tool_arr_clear(tool_arr *a)
{
	a->n = 0;
	a->blen = 0;
}
