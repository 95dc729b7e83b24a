/*
 * arrangement/batch.c - batch records: the record codec (get, decode with
 * its key filter reference, load, put, set_desc, drop, free) and id
 * allocation.  The checked view of one batch chunk (bchunk_*, shared with
 * the writer and the cursor) is batch_chunk.c; the structural checker
 * (B1-B7 of batch.h) is batch_check.c.  Layouts: batch_int.h.
 * Bytes read from the map are untrusted: every offset is checked before it
 * is dereferenced and damage is AH_ECORRUPT, never an assert or a read out
 * of bounds.  Nothing here writes a chunk body.
 */
#include <stdlib.h>
#include <string.h>

#include "arrangement/batch_int.h"
#include "arrangement/filter.h"
#include "heap/codec.h"

int batch_record_get(heap_txn *t, uint64_t id, const uint8_t **rec,
                     size_t *len)
{
	const void *v;
	if (id == BATCH_ID_COUNTER)
		return AH_EINVAL;
	int rc = heap_get(t, HEAP_T_BATCH, &id, sizeof id, &v, len);
	*rec = v;
	return rc;
}

/* The filter reference at f3 of a version-2 record of len bytes: its
 * block count must be that of its key count, and it (with its blocks when
 * they are inline) must end the record (layout: batch_int.h).  That the
 * key count is the batch's is batch_check's (B6). */
static int filter_decode(batch *b, const uint8_t *rec, size_t len, uint64_t f3)
{
	if (f3 > len || len - f3 < BFILT_REF || memcmp(rec + f3, BFILT_MAGIC, 4) ||
	    rec[f3 + 4] != FILTER_PROBES ||
	    (rec[f3 + 5] != BFILT_HASH_XXH3 && !bfilt_checked(rec[f3 + 5])) ||
	    rec[f3 + 6] || rec[f3 + 7])
		return CORRUPT("batch key filter reference");
	b->filter_hash = rec[f3 + 5];
	b->filter_keys = get_u64(rec + f3 + 8);
	b->filter_blocks = get_u64(rec + f3 + 16);
	b->filter_sum = get_u64(rec + f3 + 24);
	b->filter_chunk = get_u64(rec + f3 + 32);
	uint64_t inl = b->filter_chunk ? 0 : FILTER_BLOCK * b->filter_blocks;
	if (b->filter_blocks != (bfilt_checked(b->filter_hash)
	                         ? filter_blocks_checked(b->filter_keys)
	                         : filter_blocks(b->filter_keys)) ||
	    b->filter_blocks > UINT32_MAX ||
	    len - f3 - BFILT_REF != inl)
		return CORRUPT("batch key filter reference");
	b->filter_off = b->filter_chunk ? 0 : (uint32_t)(f3 + BFILT_REF);
	return 0;
}

/* Decodes rec into a fresh struct batch; the fence bytes are copied when
 * copy is set (write txns: a later put may move the record's page). */
static int record_decode(uint64_t id, const uint8_t *rec, size_t len,
                         bool copy, batch **out)
{
	batch *b = NULL;
	uint64_t n, ftab, fbytes, fend;
	bool sums;
	int rc = 0;

	if (len < BREC_HDR || memcmp(rec, BREC_MAGIC, 4) != 0)
		return CORRUPT("batch record");
	uint16_t ver;
	memcpy(&ver, rec + 4, 2);
	if ((ver != BREC_VERSION && ver != BREC_VERSION_FILTER) || rec[6] != 8 ||
	    (rec[7] & ~(BREC_PARTIAL | BREC_COLS | BREC_SUMS)))
		return CORRUPT("batch record");
	n = get_u32(rec + 72);
	sums = rec[7] & BREC_SUMS;
	ftab = BREC_HDR + (sums ? 16 : 8) * n;
	fbytes = ftab + 4 * (n + 1);
	if (fbytes > len)
		return CORRUPT("batch record");
	fend = get_u32(rec + ftab + 4 * n);
	if (fend > len - fbytes)
		return CORRUPT("batch record");
	b = calloc(1, sizeof *b);
	if (!b)
		return AH_ENOMEM;
	b->id = id;
	b->time_width = rec[6];
	b->rec_flags = rec[7];
	b->desc.lower = frontier_of(get_u64(rec + 8));
	b->desc.upper = frontier_of(get_u64(rec + 16));
	b->desc.since = frontier_of(get_u64(rec + 24));
	b->updates = get_u64(rec + 32);
	b->keys = get_u64(rec + 40);
	b->vals = get_u64(rec + 48);
	b->bytes = get_u64(rec + 56);
	b->chunk_bytes = get_u64(rec + 64);
	b->nchunks = (uint32_t)n;
	uint32_t f3 = ver == BREC_VERSION_FILTER ? get_u32(rec + 76) : 0;
	if (ver == BREC_VERSION_FILTER &&
	    (f3 < fbytes + fend || (rc = filter_decode(b, rec, len, f3)))) {
		rc = rc ? rc : CORRUPT("batch key filter reference");
		goto out;
	}
	/* a filter bound to the chunk sums needs them (heap format 7) */
	if (b->filter_hash == BFILT_HASH_SUMS && !sums) {
		rc = CORRUPT("batch key filter reference");
		goto out;
	}
	if (b->filter_hash == BFILT_HASH_BOUND)
		b->filter_bind = b->filter_chunk;
	else if (b->filter_hash == BFILT_HASH_SUMS)
		b->filter_bind = bfilt_bind_sums(b->filter_chunk,
		                                 rec + BREC_HDR + 8 * n, (uint32_t)n);
	/* One block: ids, sums, fence pointers, fence lengths, copied fence
	 * bytes and what follows them (an inline filter). */
	size_t ns = sums ? n : 0;
	size_t sz = n * (sizeof(uint64_t) + sizeof(void *) + sizeof(size_t)) +
	            ns * sizeof(uint64_t) + (copy ? len - fbytes : 0) + 1;
	uint8_t *blk = malloc(sz);
	if (!blk) {
		rc = AH_ENOMEM;
		goto out;
	}
	b->chunk_ids = (uint64_t *)blk;
	b->chunk_sums = sums ? (uint64_t *)(blk + n * sizeof(uint64_t)) : NULL;
	uint8_t *rest = blk + (n + ns) * sizeof(uint64_t);
	b->fence = (const uint8_t **)rest;
	b->fence_len = (size_t *)(rest + n * sizeof(void *));
	const uint8_t *fb = rec + fbytes;
	if (copy) {
		uint8_t *dst = rest + n * (sizeof(void *) + sizeof(size_t));
		memcpy(dst, fb, len - fbytes);
		fb = dst;
	}
	if (b->filter_off)
		b->filter_bytes = fb + (b->filter_off - fbytes);
	for (uint64_t i = 0; i < n; i++) {
		b->chunk_ids[i] = get_u64(rec + BREC_HDR + 8 * i);
		if (sums)
			b->chunk_sums[i] = get_u64(rec + BREC_HDR + 8 * (n + i));
		uint32_t lo = get_u32(rec + ftab + 4 * i);
		uint32_t hi = get_u32(rec + ftab + 4 * (i + 1));
		if (lo > hi || hi > fend) {
			rc = CORRUPT("batch record");
			goto out;
		}
		b->fence[i] = fb + lo;
		b->fence_len[i] = hi - lo;
	}
out:
	if (rc) {
		batch_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

int batch_load(heap_txn *t, uint64_t id, batch **out)
{
	const uint8_t *rec;
	size_t len;
	if (!t || !out)
		return AH_EINVAL;
	int rc = batch_record_get(t, id, &rec, &len);
	if (rc)
		return rc;
	return record_decode(id, rec, len, !heap_txn_rdonly(t), out);
}

int batch_decode(uint64_t id, const uint8_t *rec, size_t len, batch **out)
{
	return record_decode(id, rec, len, false, out);
}

int batch_load_listed(heap_txn *t, uint64_t id, batch **out)
{
	int rc = batch_load(t, id, out);

	return rc == AH_ENOTFOUND ? CORRUPT("a listed batch record is missing") : rc;
}

void batch_free(batch *b)
{
	if (!b)
		return;
	/* refs is 0 for good in a private batch, >= 1 in a shared one until
	 * this caller's own decrement */
	if (__atomic_load_n(&b->refs, __ATOMIC_RELAXED) &&
	    __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return; /* shared (batch_cache.c): not the last reference */
	free(b->chunk_ids); /* the one block of batch_load */
	free(b->own_rec);
	free(b->own_filter);
	free(b->chunk_loc);
	free(b);
}

int batch_record_put(heap_txn *t, const batch *b)
{
	uint64_t n = b->nchunks, fsum = 0;
	for (uint64_t i = 0; i < n; i++)
		fsum += b->fence_len[i];
	bool sums = b->chunk_sums != NULL;
	uint64_t ftab = BREC_HDR + (sums ? 16 : 8) * n, fbytes = ftab + 4 * (n + 1);
	bool inl = b->filter_blocks && !b->filter_chunk;
	uint64_t f3 = b->filter_blocks ? fbytes + fsum : 0;
	uint64_t total = fbytes + fsum + (f3 ? BFILT_REF : 0) +
	                 (inl ? FILTER_BLOCK * b->filter_blocks : 0);
	if (n > UINT32_MAX / 16 || fsum > UINT32_MAX || total > UINT32_MAX ||
	    (b->filter_hash == BFILT_HASH_SUMS && !sums))
		return AH_ELIMIT;
	uint8_t *rec = malloc(total);
	if (!rec)
		return AH_ENOMEM;
	uint16_t ver = f3 ? BREC_VERSION_FILTER : BREC_VERSION;
	uint32_t n32 = (uint32_t)n, off = 0;
	memcpy(rec, BREC_MAGIC, 4);
	memcpy(rec + 4, &ver, 2);
	rec[6] = 8;
	rec[7] = (uint8_t)((b->rec_flags & ~BREC_SUMS) | (sums ? BREC_SUMS : 0));
	put_u64(rec + 8, frontier_time(b->desc.lower));
	put_u64(rec + 16, frontier_time(b->desc.upper));
	put_u64(rec + 24, frontier_time(b->desc.since));
	put_u64(rec + 32, b->updates);
	put_u64(rec + 40, b->keys);
	put_u64(rec + 48, b->vals);
	put_u64(rec + 56, b->bytes);
	put_u64(rec + 64, b->chunk_bytes);
	put_u32(rec + 72, n32);
	put_u32(rec + 76, (uint32_t)f3);
	for (uint64_t i = 0; i < n; i++) {
		memcpy(rec + BREC_HDR + 8 * i, &b->chunk_ids[i], 8);
		if (sums)
			memcpy(rec + BREC_HDR + 8 * (n + i), &b->chunk_sums[i], 8);
		memcpy(rec + ftab + 4 * i, &off, 4);
		if (b->fence_len[i])
			memcpy(rec + fbytes + off, b->fence[i], b->fence_len[i]);
		off += (uint32_t)b->fence_len[i];
	}
	memcpy(rec + ftab + 4 * n, &off, 4);
	if (f3) {
		uint8_t *f = rec + f3;
		memcpy(f, BFILT_MAGIC, 4);
		f[4] = FILTER_PROBES;
		f[5] = b->filter_hash;
		f[6] = f[7] = 0;
		put_u64(f + 8, b->filter_keys);
		put_u64(f + 16, b->filter_blocks);
		put_u64(f + 24, b->filter_sum);
		put_u64(f + 32, b->filter_chunk);
		if (inl)
			memcpy(f + BFILT_REF, b->filter ? (const void *)b->filter
			                                : b->filter_bytes,
			       FILTER_BLOCK * b->filter_blocks);
	}
	/* Chunk sums (and filters bound to them) are format 7, bound filter
	 * blocks 6, checked ones 5 (heap/heap.h): older binaries would refuse
	 * the record. */
	int rc = sums ? heap_format_mark(t, HEAP_FORMAT_CHUNK_SUMS)
	         : !f3 ? 0
	         : b->filter_hash == BFILT_HASH_BOUND
	         ? heap_format_mark(t, HEAP_FORMAT_FILTER_IDS)
	         : b->filter_hash == BFILT_HASH_CHECKED
	         ? heap_format_mark(t, HEAP_FORMAT_BLOCKS) : 0;
	if (!rc)
		rc = heap_put(t, HEAP_T_BATCH, &b->id, sizeof b->id, rec, total);
	free(rec);
	return rc;
}

int batch_set_desc(heap_txn *t, uint64_t id, const batch_desc *d)
{
	const uint8_t *rec;
	size_t len;
	if (!t || !d)
		return AH_EINVAL;
	int rc = batch_record_get(t, id, &rec, &len);
	if (rc)
		return rc;
	if (len < BREC_HDR || memcmp(rec, BREC_MAGIC, 4) != 0)
		return CORRUPT("batch record");
	uint8_t *copy = malloc(len);
	if (!copy)
		return AH_ENOMEM;
	memcpy(copy, rec, len);
	put_u64(copy + 8, frontier_time(d->lower));
	put_u64(copy + 16, frontier_time(d->upper));
	put_u64(copy + 24, frontier_time(d->since));
	rc = heap_put(t, HEAP_T_BATCH, &id, sizeof id, copy, len);
	free(copy);
	return rc;
}

int batch_drop(heap_txn *t, uint64_t id)
{
	batch *b = NULL;
	int rc = batch_load(t, id, &b);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < b->nchunks && !rc; i++) {
		rc = heap_chunk_free(t, b->chunk_ids[i]);
		if (rc == AH_ENOTFOUND)
			rc = CORRUPT("batch: batch_drop");
	}
	if (!rc && b->filter_chunk &&
	    (rc = heap_chunk_free(t, b->filter_chunk)) == AH_ENOTFOUND)
		rc = CORRUPT("batch: batch_drop: filter chunk");
	if (!rc)
		rc = heap_del(t, HEAP_T_BATCH, &id, sizeof id);
	batch_free(b);
	return rc;
}

int batch_new_id(heap_txn *t, uint64_t *id)
{
	uint64_t key = BATCH_ID_COUNTER, next = 1;
	const void *v;
	size_t len;
	if (!t || !id)
		return AH_EINVAL;
	uint64_t last;
	int rc = heap_get(t, HEAP_T_BATCH, &key, sizeof key, &v, &len);
	if (rc == 0) {
		if (len != 8)
			return CORRUPT("batch id counter");
		memcpy(&next, v, 8);
		if (next == 0 || next == BATCH_ID_COUNTER)
			return next ? AH_ELIMIT : CORRUPT("batch id counter");
	} else if (rc != AH_ENOTFOUND) {
		return rc;
	}
	/* The counter outlives every batch it handed out: missing, or not
	 * past the largest id in use, it was damaged, and a fresh id could
	 * overwrite a live batch record. */
	if ((rc = heap_last_below(t, HEAP_T_BATCH, BATCH_ID_COUNTER, &last)))
		return rc;
	if (last >= next)
		return CORRUPT("batch id counter");
	uint64_t after = next + 1;
	rc = heap_put(t, HEAP_T_BATCH, &key, sizeof key, &after, sizeof after);
	if (rc)
		return rc;
	*id = next;
	return 0;
}
