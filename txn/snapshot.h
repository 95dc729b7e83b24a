/*
 * txn/snapshot.h - private to the snapshot files (txn/snapshot.c: push;
 * snapshot_restore.c; snapshot_prune.c: foreach and prune; snapshot_io.c:
 * the directory's files) and txn/manifest.c: the manifest in memory, the
 * text buffer it is written with, and the file helpers the snapshot files
 * share.  It must never be included outside txn/.
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

/* snapshot_io.c: what push, restore, foreach and prune share.  Errors are
 * AH_E* (snap_errno_rc translates errno); paths are PATH_MAX buffers. */
void snap_say(ah_snapshot_info *si, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
#define SAY snap_say /* the message of si, printf-style */
int snap_errno_rc(int e);
/* out = DIR/a[/b]; AH_EINVAL when longer than PATH_MAX. */
int snap_join(char *out, const char *dir, const char *a, const char *b);
int snap_sync_dir(const char *path);
/* Exactly len bytes of fd; AH_ECORRUPT when the file is shorter. */
int snap_read_all(int fd, void *p, size_t len);
int snap_write_durable(const char *tmp, const void *v, size_t len);
int snap_lock_dir(const char *dir, int how, bool need, int *rc);
void snap_sweep_tmp(const char *dir, bool all);
/* An object's file name: ID-XXH3, 16 hex digits each. */
void snap_object_name(uint64_t id, uint64_t xxh3, char out[40]);
typedef struct snap_name {
	char id[AH_SNAPSHOT_ID_MAX];
	uint64_t seq;
} snap_name;
int snap_list_manifests(const char *dir, snap_name **out, size_t *n);
/* DIR/manifests/id, parsed and checked (mf_parse), into m (to be
 * mf_free'd in every case). */
int snap_load_manifest(const char *dir, const char *id, manifest *m);
/* The words of "record" lines, by MF_T_*. */
extern const char *const snap_table_word[4];

#endif
