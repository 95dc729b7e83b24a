/*
 * arrangement/batch_check.c - batch_check, the structural checker of one
 * batch (B1-B7 of batch.h): every chunk opened whole and its view's header
 * checked (bchunk_open_view), offsets monotone and inside their columns,
 * keys, vals and times in order, the fences, the key filter's blocks and
 * every key in them, and the record's counts against its chunks.
 *
 * It reads no byte that was not checked, writes nothing, and says what is
 * wrong in msg (batch, chunk and invariant) besides AH_ECORRUPT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_chunk_int.h"
#include "arrangement/filter.h"

/* The last (key, val, time) seen by the checker, across chunks. */
typedef struct check_state {
	const batch *b;
	char *msg;
	size_t msglen;
	bool any;
	const uint8_t *key, *val;
	size_t klen, vlen;
	atime time;
	uint64_t keys, vals, updates, bytes, chunk_bytes;
	uint64_t *filter; /* the key filter's blocks (aligned copy), or NULL */
} check_state;

static int check_fail(check_state *s, uint32_t ci, const char *what)
{
	if (s->msg && s->msglen)
		snprintf(s->msg, s->msglen, "batch %llu chunk %llu (#%u): %s",
		         (unsigned long long)s->b->id,
		         (unsigned long long)s->b->chunk_ids[ci], ci, what);
	return CORRUPT(what);
}

static bool time_ok(const batch_desc *d, atime t)
{
	/* B3; a batch compacted past its upper holds times advanced by since,
	 * which may lie beyond its upper (times <= since) */
	return time_beyond(t, d->lower) &&
	       (time_before(t, d->upper) || time_le(t, frontier_time(d->since)));
}

/* Checks val j's updates: B1 (times increasing), B2, B3. */
static const char *check_upds(check_state *s, bchunk *c, uint32_t j,
                              bool cont)
{
	uint32_t lo, hi;
	if (bchunk_val_upds(c, j, &lo, &hi))
		return "bad update range";
	for (uint32_t u = lo; u < hi; u++) {
		atime t;
		int64_t d;
		if (!bchunk_upd(c, u, &t, &d))
			return "dictionary index out of range";
		if ((u > lo || cont) && !time_lt(s->time, t))
			return "times out of order";
		if (d == 0)
			return "zero diff";
		if (!time_ok(&s->b->desc, t))
			return "time outside the description";
		s->time = t;
	}
	return NULL;
}

static const char *check_key(check_state *s, bchunk *c, uint32_t i)
{
	const uint8_t *k, *v;
	size_t kl, vl;
	uint32_t lo, hi;
	bool kcont = i == 0 && (c->flags & BCHUNK_KEY_CONT);
	bool vcont = i == 0 && (c->flags & BCHUNK_VAL_CONT);

	if (bchunk_key(c, i, &k, &kl) || bchunk_key_vals(c, i, &lo, &hi))
		return "bad key offsets";
	int kc = s->any ? bytes_cmp(k, kl, s->key, s->klen) : 1;
	if (kcont ? kc != 0 : kc <= 0)
		return kcont ? "continued key differs" : "keys out of order";
	if (!kcont && s->filter &&
	    !batch_filter_may_hold(s->b, s->filter, filter_hash(k, kl)))
		return "key missing from the batch's key filter (B6)";
	s->keys += !kcont;
	s->key = k;
	s->klen = kl;
	for (uint32_t j = lo; j < hi; j++) {
		bool cont = j == lo && vcont;
		const char *e;
		if (bchunk_val(c, j, &v, &vl))
			return "bad val offsets";
		int vc = (j > lo || kcont) ? bytes_cmp(v, vl, s->val, s->vlen) : 1;
		if (cont ? vc != 0 : vc <= 0)
			return cont ? "continued val differs" : "vals out of order";
		s->vals += !cont;
		s->val = v;
		s->vlen = vl;
		if ((e = check_upds(s, c, j, cont)))
			return e;
	}
	s->any = true;
	return NULL;
}

static int check_chunk(check_state *s, heap_txn *t, uint32_t ci,
                       bool checksums)
{
	const batch *b = s->b;
	bchunk c;
	const char *e = NULL;

	/* Checked whole: the structure pass must not read unchecked bytes. */
	int rc = heap_chunk_open(t, b->chunk_ids[ci], HEAP_CHUNK_WHOLE, &c.hv);
	if (rc == AH_ENOTFOUND)
		return check_fail(s, ci, "chunk missing");
	if (rc || (checksums && heap_chunk_verify(t, b->chunk_ids[ci])))
		return check_fail(s, ci, heap_chunk_verify(t, b->chunk_ids[ci]) ?
		                  "checksum mismatch" : "bad chunk header");
	if (!batch_chunk_sum_ok(b, ci, &c.hv))
		return check_fail(s, ci, "not the chunk its batch record names: "
		                  "its XXH3 is not the record's (B8)");
	if (bchunk_open_view(&c, c.hv.body, c.hv.body_used, true) ||
	    c.used != c.hv.body_used)
		return check_fail(s, ci, "bad batch chunk header (B4)");
	if ((b->rec_flags & BREC_COLS) && c.version != BCHUNK_VERSION_COLS)
		return check_fail(s, ci, "version-1 chunk in a batch of version-2 chunks");
	if (ci == 0 && (c.flags & BCHUNK_CONT))
		return check_fail(s, ci, "first chunk flagged as continuation");
	/* B4: offsets monotone and inside their columns (a dropped column
	 * has nothing to check: its fields are inside by the header check) */
	for (uint32_t i = 0; i < c.nkeys; i++)
		if ((c.ko && c.ko[i] > c.ko[i + 1]) || (c.kv && c.kv[i] >= c.kv[i + 1]))
			return check_fail(s, ci, "key offsets not monotone (B4)");
	for (uint32_t j = 0; j < c.nvals; j++)
		if ((c.vo && c.vo[j] > c.vo[j + 1]) || (c.vu && c.vu[j] >= c.vu[j + 1]))
			return check_fail(s, ci, "val offsets not monotone (B4)");
	if ((c.ko && (c.ko[0] != c.kb_lo || c.ko[c.nkeys] > c.kb_hi)) ||
	    (c.vo && (c.vo[0] != c.vb_lo || c.vo[c.nvals] > c.vb_hi)))
		return check_fail(s, ci, "byte column bounds (B4)");
	/* B7: fence i is a prefix of chunk i's first key that is greater
	 * than chunk i-1's last (all of it when the key continues) */
	const uint8_t *k0;
	size_t k0len, fl = b->fence_len[ci];
	if (bchunk_key(&c, 0, &k0, &k0len) || fl > k0len ||
	    memcmp(k0, b->fence[ci], fl) ||
	    ((c.flags & BCHUNK_KEY_CONT) && fl != k0len) ||
	    (ci > 0 && !(c.flags & BCHUNK_KEY_CONT) &&
	     bytes_cmp(b->fence[ci], fl, s->key, s->klen) <= 0))
		return check_fail(s, ci, "fence key is not a separator before the "
		                  "first key (B7)");
	for (uint32_t i = 0; i < c.nkeys && !e; i++)
		e = check_key(s, &c, i);
	if (e)
		return check_fail(s, ci, e);
	s->updates += c.nupds;
	s->bytes += c.used;
	s->chunk_bytes += c.hv.value_bytes;
	return 0;
}

/* B6: the filter's blocks, checked against the record's checksum, copied
 * (aligned) for the walk to probe every key. */
static int check_filter_load(check_state *s, heap_txn *t)
{
	const batch *b = s->b;
	const uint8_t *p;
	int rc;

	if (!b->filter_blocks)
		return 0;
	if (b->filter_keys != b->keys) {
		rc = CORRUPT("batch key filter key count");
		goto fail;
	}
	if ((rc = batch_filter_blocks(t, b, &p)))
		goto fail;
	if (!(s->filter = malloc(FILTER_BLOCK * b->filter_blocks)))
		return AH_ENOMEM;
	memcpy(s->filter, p, FILTER_BLOCK * b->filter_blocks);
	uint64_t bad = batch_filter_first_bad(b, s->filter);
	if (bad == b->filter_blocks)
		return 0;
	rc = AH_ECORRUPT;
	if (s->msg && s->msglen)
		snprintf(s->msg, s->msglen, "batch %llu: key filter (B6): block "
		         "%llu fails its check", (unsigned long long)b->id,
		         (unsigned long long)bad);
	return rc;
fail:
	if (s->msg && s->msglen)
		snprintf(s->msg, s->msglen, "batch %llu: key filter (B6): %s",
		         (unsigned long long)b->id,
		         b->filter_keys != b->keys ? "key count differs from the "
		         "batch's" : "damaged (checksum or chunk)");
	return rc;
}

static int check_counts(check_state *s)
{
	const batch *b = s->b;
	char *msg = s->msg;
	size_t msglen = s->msglen;

	if (s->updates == b->updates && s->keys == b->keys && s->vals == b->vals &&
	    s->bytes == b->bytes && s->chunk_bytes == b->chunk_bytes)
		return 0;
	if (msg && msglen)
		snprintf(msg, msglen,
		         "batch %llu: counts differ from its chunks (B5): "
		         "updates %llu/%llu keys %llu/%llu vals %llu/%llu "
		         "bytes %llu/%llu chunk_bytes %llu/%llu",
		         (unsigned long long)b->id,
		         (unsigned long long)b->updates,
		         (unsigned long long)s->updates,
		         (unsigned long long)b->keys,
		         (unsigned long long)s->keys,
		         (unsigned long long)b->vals,
		         (unsigned long long)s->vals,
		         (unsigned long long)b->bytes,
		         (unsigned long long)s->bytes,
		         (unsigned long long)b->chunk_bytes,
		         (unsigned long long)s->chunk_bytes);
	return CORRUPT("batch record counts differ from its chunks");
}

int batch_check(heap_txn *t, const batch *b, bool checksums, char *msg,
                size_t msglen)
{
	check_state s;
	int rc = 0;

	if (!t || !b)
		return AH_EINVAL;
	memset(&s, 0, sizeof s);
	s.b = b;
	s.msg = msg;
	s.msglen = msglen;
	if (msg && msglen)
		msg[0] = '\0';
	if (b->time_width != 8 || !frontier_le(b->desc.lower, b->desc.upper)) {
		if (msg && msglen)
			snprintf(msg, msglen, "batch %llu: bad record header",
			         (unsigned long long)b->id);
		return CORRUPT("batch record header");
	}
	/* B5 before B6: counts that differ say more than a filter that
	 * disagrees with them */
	bool counts_ok = b->filter_keys == b->keys;
	if (counts_ok && (rc = check_filter_load(&s, t)))
		return rc;
	for (uint32_t ci = 0; ci < b->nchunks && !rc; ci++)
		rc = check_chunk(&s, t, ci, checksums);
	if (!rc)
		rc = check_counts(&s);
	if (!rc && !counts_ok && b->filter_blocks)
		rc = check_filter_load(&s, t);
	free(s.filter);
	return rc;
}
