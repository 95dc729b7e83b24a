/*
 * txn/manifest.c - a snapshot's manifest: the text that names everything a
 * restore needs (include/arrheap.h "snapshots"; layout in ARCHITECTURE.md
 * §2, "Snapshot manifest").  Encoding and strict parsing only: no files.
 *
 * One line per item, fields separated by one space, bytes in lowercase
 * hex, so the file is readable, greppable and diffable, and its last line
 * is a checksum over every byte before it:
 *
 *   arrheap-snapshot 1
 *   id 3f2a9c1e-000007
 *   uuid 3f2a9c1e-5b7d-4c1a-9e0f-0123456789ab
 *   seq 7
 *   parent 3f2a9c1e-000006          ("-" for the first)
 *   format 2                        (the heap's format version)
 *   page-size 4096
 *   time-ns 1764583200000000000
 *   txn 1234                        (the commit it shows)
 *   arrangement NAMEHEX upper U since S batches N updates N
 *   batch ID lower L upper U since S updates N chunks C partial 0|1
 *                                   (the arrangement's, for readers)
 *   record arr|batch|source|hold KEYHEX VALHEX
 *   object ID XXH3 BYTES XXH128     (ID decimal, checksums hex; id order)
 *   objects N / bytes N / objects-new N / bytes-new N
 *   end XXH3                        (XXH3-64 of every byte before "end")
 *
 * It must never accept a manifest it did not check whole: any line out of
 * place, any unknown word or a checksum mismatch is AH_ECORRUPT, another
 * version AH_EFORMAT, so a restore never starts from a half-read list.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "txn/snapshot.h"

/* ------------------------------------------------------------- buffer */

void sb_free(sbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

static bool sb_grow(sbuf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->oom)
		return false;
	if (b->len + more + 1 <= b->cap)
		return true;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more + 1)
		cap *= 2;
	if ((p = realloc(b->p, cap)) == NULL) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !sb_grow(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void sb_hex(sbuf *b, const void *p, size_t len)
{
	static const char d[] = "0123456789abcdef";
	const uint8_t *s = p;

	if (len == 0) {
		sb_printf(b, "-");
		return;
	}
	if (!sb_grow(b, 2 * len))
		return;
	for (size_t i = 0; i < len; i++) {
		b->p[b->len++] = d[s[i] >> 4];
		b->p[b->len++] = d[s[i] & 15];
	}
	b->p[b->len] = '\0';
}

/* ------------------------------------------------------------ writing */

void mf_uuid_text(const uint8_t u[16], char out[37])
{
	snprintf(out, 37,
	         "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
	         "%02x%02x%02x%02x%02x%02x",
	         u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
	         u[10], u[11], u[12], u[13], u[14], u[15]);
}

void mf_id(const uint8_t uuid[16], uint64_t seq, char out[AH_SNAPSHOT_ID_MAX])
{
	snprintf(out, AH_SNAPSHOT_ID_MAX, "%02x%02x%02x%02x-%06" PRIu64,
	         uuid[0], uuid[1], uuid[2], uuid[3], seq);
}

void mf_head(sbuf *b, const ah_snapshot_info *si, const char *parent,
             uint32_t format, uint32_t psize)
{
	char u[37];

	mf_uuid_text(si->uuid, u);
	sb_printf(b,
	          "arrheap-snapshot %d\nid %s\nuuid %s\nseq %" PRIu64
	          "\nparent %s\nformat %u\npage-size %u\ntime-ns %" PRId64
	          "\ntxn %" PRIu64 "\n",
	          MF_VERSION, si->id, u, si->seq,
	          parent && *parent ? parent : "-", format, psize,
	          si->time_ns, si->txn_id);
}

void mf_end(sbuf *b)
{
	uint64_t h = XXH3_64bits(b->p, b->len);

	sb_printf(b, "end %016" PRIx64 "\n", h);
}

/* ------------------------------------------------------------ parsing */

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decodes hex word w (len chars; "-" is empty) into the blob. */
static bool unhex(manifest *m, const char *w, size_t len, uint8_t **out,
                  size_t *olen)
{
	uint8_t *o = m->blob + m->blob_used;

	if (len == 1 && w[0] == '-') {
		*out = o;
		*olen = 0;
		o[0] = 0;
		m->blob_used += 1;
		return true;
	}
	if (len == 0 || len % 2 != 0)
		return false;
	for (size_t i = 0; i < len; i += 2) {
		int a = hexval(w[i]), c = hexval(w[i + 1]);

		if (a < 0 || c < 0)
			return false;
		o[i / 2] = (uint8_t)(a << 4 | c);
	}
	o[len / 2] = 0; /* names are used as C strings */
	*out = o;
	*olen = len / 2;
	m->blob_used += len / 2 + 1;
	return true;
}

static bool num(const char *w, size_t len, uint64_t *v)
{
	uint64_t x = 0;

	if (len == 0 || len > 20 || (len > 1 && w[0] == '0'))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (w[i] < '0' || w[i] > '9')
			return false;
		if (x > (UINT64_MAX - (uint64_t)(w[i] - '0')) / 10)
			return false;
		x = x * 10 + (uint64_t)(w[i] - '0');
	}
	*v = x;
	return true;
}

static bool hexnum(const char *w, size_t len, uint64_t *v)
{
	uint64_t x = 0;

	if (len != 16)
		return false;
	for (size_t i = 0; i < len; i++) {
		int d = hexval(w[i]);

		if (d < 0)
			return false;
		x = x << 4 | (uint64_t)d;
	}
	*v = x;
	return true;
}

static bool parse_uuid(const char *w, size_t len, uint8_t u[16])
{
	size_t j = 0;

	if (len != 36)
		return false;
	for (size_t i = 0; i < 36;) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (w[i++] != '-')
				return false;
			continue;
		}
		int a = hexval(w[i]), c = hexval(w[i + 1]);

		if (a < 0 || c < 0)
			return false;
		u[j++] = (uint8_t)(a << 4 | c);
		i += 2;
	}
	return true;
}

static bool id_ok(const char *w, size_t len)
{
	if (len != 15 || w[8] != '-')
		return false;
	for (size_t i = 0; i < 15; i++)
		if (i != 8 && (i < 8 ? hexval(w[i]) : (w[i] >= '0' && w[i] <= '9' ? 0 : -1)) < 0)
			return false;
	return true;
}

bool mf_id_valid(const char *id)
{
	return id != NULL && strlen(id) == 15 && id_ok(id, 15);
}

void mf_free(manifest *m)
{
	free(m->blob);
	free(m->obj);
	free(m->rec);
	free(m->src);
	memset(m, 0, sizeof *m);
}

#define NWORDS 16

static int grow(void **p, size_t *cap, size_t n, size_t each)
{
	void *q;

	if (n < *cap)
		return 0;
	*cap = *cap ? *cap * 2 : 64;
	if ((q = realloc(*p, *cap * each)) == NULL)
		return AH_ENOMEM;
	*p = q;
	return 0;
}

int mf_parse(const char *text, size_t len, manifest *m)
{
	const char *p = text, *end = text + len, *w[NWORDS];
	size_t wl[NWORDS], nw, cap_obj = 0, cap_rec = 0, cap_src = 0;
	uint64_t v, lineno = 0, have = 0;
	bool ended = false;
	int rc;

	memset(m, 0, sizeof *m);
	if ((m->blob = malloc(len + 64)) == NULL)
		return AH_ENOMEM;
	/* The checksum first: nothing of a damaged text is believed. */
	{
		const char *last;
		uint64_t want;

		if (len < 22 || text[len - 1] != '\n')
			return AH_ECORRUPT;
		last = text + len - 22; /* "end " + 16 hex + "\n" = 21; + '\n' */
		if (last[0] != '\n' || memcmp(last + 1, "end ", 4) != 0 ||
		    !hexnum(last + 5, 16, &want) ||
		    XXH3_64bits(text, (size_t)(last + 1 - text)) != want)
			return AH_ECORRUPT;
		end = last + 1;
	}
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		if (nl == NULL)
			return AH_ECORRUPT;
		lineno++;
		nw = 0;
		for (const char *q = p; q < nl && nw < NWORDS;) {
			const char *sp = memchr(q, ' ', (size_t)(nl - q));

			if (sp == NULL)
				sp = nl;
			if (sp == q)
				return AH_ECORRUPT; /* two spaces, or a space at the end */
			w[nw] = q;
			wl[nw++] = (size_t)(sp - q);
			q = sp < nl ? sp + 1 : nl;
			if (sp < nl && q == nl)
				return AH_ECORRUPT;
		}
		if (nw == 0 || nw == NWORDS)
			return AH_ECORRUPT;
#define IS(s) (wl[0] == sizeof(s) - 1 && memcmp(w[0], s, wl[0]) == 0)
		if (lineno == 1) {
			if (!IS("arrheap-snapshot") || nw != 2)
				return AH_ECORRUPT;
			if (!num(w[1], wl[1], &v))
				return AH_ECORRUPT;
			if (v != MF_VERSION)
				return AH_EFORMAT;
		} else if (IS("id") && nw == 2 && id_ok(w[1], wl[1]) &&
		           !(have & 1)) {
			memcpy(m->info.id, w[1], 15);
			m->info.id[15] = '\0';
			have |= 1;
		} else if (IS("uuid") && nw == 2 && !(have & 2)) {
			if (!parse_uuid(w[1], wl[1], m->info.uuid))
				return AH_ECORRUPT;
			have |= 2;
		} else if (IS("seq") && nw == 2 && !(have & 4)) {
			if (!num(w[1], wl[1], &m->info.seq) || m->info.seq == 0)
				return AH_ECORRUPT;
			have |= 4;
		} else if (IS("parent") && nw == 2 && !(have & 8)) {
			if (wl[1] == 1 && w[1][0] == '-')
				m->parent[0] = '\0';
			else if (id_ok(w[1], wl[1])) {
				memcpy(m->parent, w[1], 15);
				m->parent[15] = '\0';
			} else
				return AH_ECORRUPT;
			have |= 8;
		} else if (IS("format") && nw == 2 && !(have & 16)) {
			if (!num(w[1], wl[1], &v) || v > UINT32_MAX)
				return AH_ECORRUPT;
			m->format = (uint32_t)v;
			have |= 16;
		} else if (IS("page-size") && nw == 2 && !(have & 32)) {
			if (!num(w[1], wl[1], &v) || v > UINT32_MAX)
				return AH_ECORRUPT;
			m->psize = (uint32_t)v;
			have |= 32;
		} else if (IS("time-ns") && nw == 2 && !(have & 64)) {
			if (!num(w[1], wl[1], &v) || v > INT64_MAX)
				return AH_ECORRUPT;
			m->info.time_ns = (int64_t)v;
			have |= 64;
		} else if (IS("txn") && nw == 2 && !(have & 128)) {
			if (!num(w[1], wl[1], &m->info.txn_id))
				return AH_ECORRUPT;
			have |= 128;
		} else if (IS("arrangement") && nw == 10) {
			m->info.arrangements++;
		} else if (IS("batch") && nw == 14) {
			/* for readers: the batch records carry the same */
		} else if (IS("record") && nw == 4) {
			mf_record *r;
			int tb;

			if (wl[1] == 3 && memcmp(w[1], "arr", 3) == 0)
				tb = MF_T_ARR;
			else if (wl[1] == 5 && memcmp(w[1], "batch", 5) == 0)
				tb = MF_T_BATCH;
			else if (wl[1] == 6 && memcmp(w[1], "source", 6) == 0)
				tb = MF_T_SOURCE;
			else if (wl[1] == 4 && memcmp(w[1], "hold", 4) == 0)
				tb = MF_T_HOLD;
			else
				return AH_ECORRUPT;
			if ((rc = grow((void **)&m->rec, &cap_rec, m->nrec,
			               sizeof *m->rec)) != 0)
				return rc;
			r = &m->rec[m->nrec++];
			r->tb = tb;
			if (!unhex(m, w[2], wl[2], &r->key, &r->klen) ||
			    !unhex(m, w[3], wl[3], &r->val, &r->vlen) ||
			    r->klen == 0)
				return AH_ECORRUPT;
			if (tb == MF_T_SOURCE) {
				if ((rc = grow((void **)&m->src, &cap_src,
				               m->nsrc, sizeof *m->src)) != 0)
					return rc;
				m->src[m->nsrc].name = (const char *)r->key;
				m->src[m->nsrc].pos = r->val;
				m->src[m->nsrc++].len = r->vlen;
			}
		} else if (IS("object") && nw == 5) {
			mf_object *o;
			uint64_t hi, lo;

			if ((rc = grow((void **)&m->obj, &cap_obj, m->nobj,
			               sizeof *m->obj)) != 0)
				return rc;
			o = &m->obj[m->nobj];
			if (!num(w[1], wl[1], &o->id) || o->id == 0 ||
			    !hexnum(w[2], wl[2], &o->xxh3) ||
			    !num(w[3], wl[3], &o->bytes) || o->bytes == 0 ||
			    wl[4] != 32 || !hexnum(w[4], 16, &hi) ||
			    !hexnum(w[4] + 16, 16, &lo))
				return AH_ECORRUPT;
			o->h128_hi = hi;
			o->h128_lo = lo;
			if (m->nobj > 0 && m->obj[m->nobj - 1].id >= o->id)
				return AH_ECORRUPT; /* id order, each once */
			m->nobj++;
		} else if (IS("objects") && nw == 2 && num(w[1], wl[1], &v)) {
			m->info.objects = v;
			have |= 256;
		} else if (IS("bytes") && nw == 2 && num(w[1], wl[1], &v)) {
			m->info.bytes = v;
			have |= 512;
		} else if (IS("objects-new") && nw == 2 && num(w[1], wl[1], &v)) {
			m->info.objects_new = v;
		} else if (IS("bytes-new") && nw == 2 && num(w[1], wl[1], &v)) {
			m->info.bytes_new = v;
			ended = true; /* the last line before "end" */
		} else {
			return AH_ECORRUPT;
		}
#undef IS
		p = nl + 1;
		if (ended && p != end)
			return AH_ECORRUPT;
	}
	if (!ended || (have & 1023) != 1023)
		return AH_ECORRUPT;
	{
		/* The counts agree with the list, and the id with the uuid. */
		uint64_t bytes = 0;
		char id[AH_SNAPSHOT_ID_MAX];

		for (size_t i = 0; i < m->nobj; i++)
			bytes += m->obj[i].bytes;
		mf_id(m->info.uuid, m->info.seq, id);
		if (m->info.objects != m->nobj || m->info.bytes != bytes ||
		    strcmp(id, m->info.id) != 0 ||
		    m->info.objects_new > m->nobj || m->info.bytes_new > bytes)
			return AH_ECORRUPT;
	}
	m->info.manifest_bytes = len;
	m->info.nsources = m->nsrc;
	m->info.sources = m->src;
	return 0;
}
