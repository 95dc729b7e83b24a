/*
 * txn/snapshot.h - private to txn/snapshot.c and txn/manifest.c: the
 * manifest in memory, and the text buffer it is written with.
 */
#ifndef AH_TXN_SNAPSHOT_H
#define AH_TXN_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arrheap.h"

#define MF_VERSION 1

/* Table tags of "record" lines; the same numbers as heap.h's HEAP_T_*. */
enum { MF_T_ARR = 0, MF_T_BATCH = 1, MF_T_SOURCE = 2, MF_T_HOLD = 3 };

typedef struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;          /* an append failed: the text is unusable */
} sbuf;

void sb_free(sbuf *b);
void sb_printf(sbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void sb_hex(sbuf *b, const void *p, size_t len); /* "-" when len is 0 */

typedef struct mf_object {
	uint64_t id, xxh3, bytes;  /* chunk id, its header xxh3, value size */
	uint64_t h128_hi, h128_lo; /* XXH3-128 of the object's bytes */
} mf_object;

typedef struct mf_record {
	int tb;                    /* MF_T_* */
	uint8_t *key, *val;        /* into manifest.blob, NUL-terminated */
	size_t klen, vlen;
} mf_record;

typedef struct manifest {
	ah_snapshot_info info;     /* id, uuid, seq, time, txn, counts */
	char parent[AH_SNAPSHOT_ID_MAX]; /* "" for the first */
	uint32_t format, psize;
	mf_object *obj;            /* by id */
	size_t nobj;
	mf_record *rec;
	size_t nrec;
	ah_snapshot_source *src;   /* into blob */
	size_t nsrc;
	uint8_t *blob;             /* decoded bytes */
	size_t blob_used;
} manifest;

void mf_uuid_text(const uint8_t u[16], char out[37]);
void mf_id(const uint8_t uuid[16], uint64_t seq, char out[AH_SNAPSHOT_ID_MAX]);
bool mf_id_valid(const char *id);
/* The lines from "arrheap-snapshot" to "txn". */
void mf_head(sbuf *b, const ah_snapshot_info *si, const char *parent,
             uint32_t format, uint32_t psize);
/* Appends the "end" line over everything in b. */
void mf_end(sbuf *b);
/* Parses and checks a whole manifest.  0, AH_ECORRUPT, AH_EFORMAT or
 * AH_ENOMEM; m is to be mf_free'd in every case. */
int mf_parse(const char *text, size_t len, manifest *m);
void mf_free(manifest *m);

#endif
