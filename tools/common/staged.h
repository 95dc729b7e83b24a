/*
 * tools/common/staged.h - ah-load's per-arrangement state: the frontiers it
 * last read from the heap and the updates staged (copied) until `advance`
 * seals them into one batch.
 *
 * A small open-addressing table by name.  Entries are allocated one by one
 * and never move, so a tool_arr pointer stays valid until the table is freed.
 * Staged keys and vals are copied into one growing byte buffer per
 * arrangement and turned into ah_update arrays on demand (the buffer may
 * move while staging, so updates hold offsets, not pointers).
 * Knows the public header's ah_update and nothing else of the library.
 */
#ifndef TOOLS_COMMON_STAGED_H
#define TOOLS_COMMON_STAGED_H

#include <stddef.h>
#include <stdint.h>

#include "arrheap.h"

typedef struct tool_staged {
	size_t off;       /* key at bytes + off, val right after it */
	uint32_t key_len;
	uint32_t val_len;
	uint64_t time;
	int64_t diff;
} tool_staged;

typedef struct tool_arr {
	char name[AH_NAME_MAX + 1];
	unsigned gen;      /* the loader's txn generation of upper/since */
	uint64_t upper;
	uint64_t since;
	uint64_t max_time; /* largest staged time (valid when n > 0) */
	tool_staged *ups;
	size_t n, cap;
	unsigned char *bytes;
	size_t blen, bcap;
} tool_arr;

typedef struct tool_arr_table {
	tool_arr **slots;
	size_t cap;        /* power of two, or 0 */
	size_t count;
} tool_arr_table;

tool_arr *tool_arr_find(const tool_arr_table *t, const char *name);
/* Adds a new zeroed entry (name must be valid and absent); NULL on ENOMEM. */
tool_arr *tool_arr_add(tool_arr_table *t, const char *name);
/* The first entry with staged updates, or NULL. */
tool_arr *tool_arr_first_staged(const tool_arr_table *t);
void tool_arr_table_free(tool_arr_table *t);

/* Copies one update in; 0 or -1 (out of memory, or a key/val over 4 GiB). */
int tool_arr_stage(tool_arr *a, const void *key, size_t key_len,
                   const void *val, size_t val_len, uint64_t time, int64_t diff);
/* Fills out[0..n) with staged updates [from, from + n), pointing into the
 * arrangement's buffer: valid until the next stage or clear. */
void tool_arr_updates(const tool_arr *a, size_t from, size_t n, ah_update *out);
/* Forgets the staged updates (keeps the memory). */
void tool_arr_clear(tool_arr *a);

#endif /* TOOLS_COMMON_STAGED_H */
