/*
 * heap/chunk_write.c - writing chunks (layout at the top of chunk.c,
 * shared helpers in chunk_int.h): the next free id, reserve (a regular
 * chunk assembled in the handle's write buffer and written with one pwrite
 * at seal; jumbo chunks filled in the map), seal (the block sums, sum0 and
 * the xxh3), chunk images built in memory and put in a write txn later,
 * free, and put_raw (a stored value copied in whole, checked first).
 *
 * It must never seal a chunk whose header disagrees with its LMDB value,
 * never put a raw value that fails its checks (nothing changes then), and
 * never hand LMDB a tree a page check found damaged.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap/chunk_int.h"
#include "heap/fault.h"

#define PIECE ((size_t)1 << 20)

/* Is the map the file's pages (MDB_WRITEMAP: every writable heap)? */
static bool writemap(const heap *h)
{
	unsigned fl;

	return mdb_env_get_flags(h->env, &fl) == 0 && (fl & MDB_WRITEMAP);
}

/* chunk_lookup() for heap_chunk_seal: the header of a chunk assembled in
 * memory is read there (its place in the map is not written yet). */
static int lookup_reserved(heap_txn *t, uint64_t id, MDB_val *v, chdr *c)
{
	MDB_val k = { sizeof id, &id }, w;
	const char *problem;
	int rc;

	if (t->wb_id == 0 || t->wb_id != id)
		return chunk_lookup(t, id, v, c);
	rc = heap_trees_usable(t->h, CHUNKS);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
		                               &k, v)));
	if (rc != 0)
		return rc;
	if (v->mv_size != t->wb_size)
		return CORRUPT("reserved chunk changed size");
	w.mv_size = v->mv_size;
	w.mv_data = t->wb_val;
	if ((problem = chunk_parse(t->h, id, &w, c)) != NULL)
		return CORRUPT(problem);
	return 0;
}

/* The sums of blocks 1.. of a value whose header c describes: they live
 * in block 0 and the header blocks after it (the first sums, of the
 * header blocks, in block 0), so block 0's sum, then the xxh3, come after
 * (the callers). */
static void seal_blocks(uint8_t *val, uint64_t vsize, const chdr *c)
{
	uint32_t bsize = 1u << c->bshift;

	/* from the last: a header block's sum covers the sums after it */
	for (uint32_t i = c->nblocks; i-- > 1;) {
		uint32_t s = block_sum(bsize, val, vsize, i);

		memcpy(val + HDR2 + 4 * (i - 1), &s, 4);
	}
}

/* A regular chunk with several blocks per page makes the heap format 5
 * (heap.h): the transaction that writes the first one marks it. */
static int mark_blocks(heap_txn *t, uint64_t pages)
{
	if (nblocks_of(t->h, pages) <= pages || t->format_mark >= HEAP_FORMAT_BLOCKS)
		return 0;
	return heap_format_mark(t, HEAP_FORMAT_BLOCKS);
}

static int next_id(heap_txn *t)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	uint64_t last = 0;
	int rc;

	TRY(heap_trees_usable(t->h, CHUNKS));
	TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[HEAP_DBI_CHUNKS],
	                                  &cur))));
	rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, MDB_LAST));
	if (rc == 0 && k.mv_size != sizeof last)
		rc = CORRUPT("chunk key is not a u64");
	else if (rc == 0)
		memcpy(&last, k.mv_data, sizeof last);
	else if (rc == MDB_NOTFOUND)
		rc = 0;
	TRY(heap_err(rc));
	if (last == UINT64_MAX) {
		rc = AH_ELIMIT;
		goto out;
	}
	t->next_id = last + 1;
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	return rc;
}

/* What a new chunk of pages needs before its put (reserve, image_put):
 * the trees usable, the next id known, room in the map, and the heap's
 * format marked when the chunk has several blocks per page. */
static int claim(heap_txn *t, uint64_t pages)
{
	int rc;

	TRY(heap_trees_usable(t->h, CHUNKS | FREE));
	if (t->next_id == 0)
		TRY(next_id(t));
	TRY(mark_blocks(t, pages)); /* its record first: pending is the put's */
	TRY(heap_space_need_chunk(t, pages));
out:
	return rc;
}

int heap_chunk_reserve(heap_txn *t, size_t body_bytes, uint64_t *id,
                       void **body, size_t *body_cap)
{
	struct hdr2 hd = { 0 };
	MDB_val k, v;
	uint64_t pages, nid, off = 0;
	uint8_t *val;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (id == NULL || body == NULL)
		return AH_EINVAL;
	if ((pages = chunk_pages_for(t->h, body_bytes)) == 0)
		return AH_ELIMIT;
	TRY(claim(t, pages));
	nid = t->next_id;
	k.mv_size = sizeof nid;
	k.mv_data = &nid;
	v.mv_size = pages * t->h->psize - VALUE_PAD;
	v.mv_data = NULL;
	TRY(heap_err(HEAP_MDB(mdb_put(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v,
	                          MDB_RESERVE | MDB_APPEND))));
	heap_space_placed(t, &v, pages);
	heap_fault_order();
	if ((uintptr_t)v.mv_data % 16 != 0) {
		rc = CORRUPT("reserved chunk not 16-byte aligned");
		goto out;
	}
	/* A regular chunk is assembled in memory and written with one pwrite
	 * at seal: filling fresh map pages costs a page fault each, several
	 * times a pwrite of the same page (the map and pwrite share the page
	 * cache, so readers of the map see it).  Jumbo chunks, and a second
	 * chunk reserved before the first is sealed, are filled in the map. */
	val = v.mv_data;
	if (pages <= LARGEST && t->wb_id == 0 && writemap(t->h) &&
	    chunk_file_offset(t->h, &v, &off) == 0) {
		uint8_t *buf = heap_wb_buffer(t->h);

		if (buf != NULL) {
			val = buf + VALUE_PAD;
			t->wb_id = nid;
			t->wb_val = val;
			t->wb_size = v.mv_size;
			t->wb_off = off;
		}
	}
	memcpy(hd.magic, magic2, 4);
	hd.class_pages = (uint32_t)pages;
	hd.nblocks = nblocks_of(t->h, pages);
	hd.id = nid;
	memcpy(val, &hd, sizeof hd);
	/* the block sums and the padding before the body: no stale bytes of
	 * the write buffer's last chunk (the same body, the same value) */
	memset(val + HDR2, 0, body_off(hd.nblocks) - HDR2);
	t->next_id++;
	if (nid < t->new_lo)
		t->new_lo = nid;
	*id = nid;
	*body = (char *)val + body_off(hd.nblocks);
	if (body_cap != NULL)
		*body_cap = v.mv_size - body_off(hd.nblocks);
out:
	return heap_txn_fail(t, rc);
}

int chunk_write_at(heap *h, const uint8_t *val, size_t size, uint64_t off)
{
	size_t done = 0;
	ssize_t n;

	while (done < size) {
		n = pwrite(h->fd, val + done, size - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 && errno == ENOSPC ? AH_EFULL : AH_EIO;
		done += (size_t)n;
	}
	/* Start writeback now, and every so many bytes a device flush
	 * (flush.c), so that the commit's sync waits for less. */
	if (!(h->flags & AH_OPEN_NOSYNC)) {
		(void)sync_file_range(h->fd, (off_t)off, (off_t)size,
		                      SYNC_FILE_RANGE_WRITE);
		heap_flush_note(h, size);
	}
	return 0;
}

void chunk_finish(uint8_t *val, size_t size, const chdr *c)
{
	uint64_t body_used, sum;
	uint32_t s;
	char *p, *end;

	memcpy(&body_used, val + offsetof(struct hdr2, body_used),
	       sizeof body_used);
	/* Fresh map pages fill fastest in pieces (see background notes). */
	end = (char *)val + size;
	for (p = (char *)val + c->body_off + body_used; p < end; p += PIECE)
		memset(p, 0, (size_t)(end - p) < PIECE ? (size_t)(end - p)
		                                       : PIECE);
	seal_blocks(val, size, c);
	s = block_sum(1u << c->bshift, val, size, 0);
	memcpy(val + offsetof(struct hdr2, sum0), &s, 4);
	if (c->nblocks == 0) { /* jumbo: no page sums, xxh3 covers it all */
		sum = xxh3(val + 8, size - 8);
	} else {
		MDB_val w = { size, val };
		chdr cc = *c;

		cc.body_used = body_used;
		sum = checksum(&w, &cc);
	}
	memcpy(val, &sum, sizeof sum);
}

int heap_chunk_seal(heap_txn *t, uint64_t id, void *body, size_t body_used)
{
	MDB_val v;
	chdr c;
	uint8_t *val;
	bool buffered;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	TRY(lookup_reserved(t, id, &v, &c));
	val = v.mv_data;
	buffered = t->wb_id != 0 && t->wb_id == id;
	if (buffered)
		val = t->wb_val;
	if (c.format != 2 || body != val + c.body_off ||
	    body_used > v.mv_size - c.body_off)
		return AH_EINVAL;
	memcpy(val + offsetof(struct hdr2, body_used), &body_used,
	       sizeof(uint64_t));
	if (buffered) {
		/* finished and written by the writeback thread */
		t->wb_id = 0;
		rc = heap_wb_post(t, id, val, v.mv_size, t->wb_off, &c);
	} else {
		chunk_finish(val, v.mv_size, &c);
	}
out:
	return heap_txn_fail(t, rc);
}

/* ------------------------------------------------------- chunk images */

int heap_chunk_image_new(const heap *h, size_t body_bytes, void **img,
                         size_t *img_bytes, void **body, size_t *body_cap)
{
	struct hdr2 hd = { 0 };
	uint64_t pages = chunk_pages_for(h, body_bytes);
	size_t vsize;

	if (pages == 0)
		return AH_ELIMIT;
	vsize = (size_t)(pages * h->psize - VALUE_PAD);
	if (posix_memalign(img, 16, vsize) != 0)
		return AH_ENOMEM;
	memcpy(hd.magic, magic2, 4);
	hd.class_pages = (uint32_t)pages;
	hd.nblocks = nblocks_of(h, pages);
	memcpy(*img, &hd, sizeof hd);
	memset((char *)*img + HDR2, 0, body_off(hd.nblocks) - HDR2);
	*img_bytes = vsize;
	*body = (char *)*img + body_off(hd.nblocks);
	if (body_cap != NULL)
		*body_cap = vsize - body_off(hd.nblocks);
	return 0;
}

int heap_chunk_image_seal(const heap *h, void *img, size_t img_bytes,
                          size_t body_used)
{
	uint8_t *val = img;
	uint64_t pages = (img_bytes + VALUE_PAD) / h->psize;
	MDB_val w = { img_bytes, img };
	chdr c;

	if ((img_bytes + VALUE_PAD) % h->psize != 0 || !valid_class(pages) ||
	    (uintptr_t)img % 16 != 0)
		return AH_EINVAL;
	/* the image's own header (heap_chunk_image_new): its id is set at
	 * put, so parse with the id it holds */
	uint64_t own;
	memcpy(&own, val + offsetof(struct hdr2, id), sizeof own);
	if (chunk_parse(h, own, &w, &c) != NULL || c.format != 2 ||
	    body_used > img_bytes - c.body_off)
		return AH_EINVAL;
	memcpy(val + offsetof(struct hdr2, body_used), &body_used,
	       sizeof(uint64_t));
	memset(val + c.body_off + body_used, 0, img_bytes - c.body_off - body_used);
	/* Blocks 1..: their sums do not depend on the id; sum0 and xxh3 do
	 * (heap_chunk_image_put). */
	seal_blocks(val, img_bytes, &c);
	return 0;
}

int heap_chunk_image_put(heap_txn *t, void *img, size_t img_bytes,
                         uint64_t *id)
{
	uint8_t *val = img;
	uint64_t pages, nid, off = 0, sum;
	MDB_val k, v;
	chdr c;
	uint32_t s0;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (img == NULL || id == NULL || (uintptr_t)img % 16 != 0 ||
	    (img_bytes + VALUE_PAD) % t->h->psize != 0)
		return AH_EINVAL;
	pages = (img_bytes + VALUE_PAD) / t->h->psize;
	TRY(claim(t, pages));
	nid = t->next_id;
	k.mv_size = sizeof nid;
	k.mv_data = &nid;
	v.mv_size = img_bytes;
	v.mv_data = NULL;
	TRY(heap_err(HEAP_MDB(mdb_put(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v,
	                          MDB_RESERVE | MDB_APPEND))));
	heap_space_placed(t, &v, pages);
	heap_fault_order();
	t->next_id++;
	if (nid < t->new_lo)
		t->new_lo = nid;
	memcpy(val + offsetof(struct hdr2, id), &nid, sizeof nid);
	{
		MDB_val w = { img_bytes, val };
		const char *problem = chunk_parse(t->h, nid, &w, &c);

		if (problem != NULL) { /* not an image of heap_chunk_image_new */
			rc = CORRUPT(problem);
			goto out;
		}
		s0 = block_sum(1u << c.bshift, val, img_bytes, 0);
		memcpy(val + offsetof(struct hdr2, sum0), &s0, 4);
		sum = c.nblocks ? checksum(&w, &c)
		                : xxh3(val + 8, img_bytes - 8);
	}
	memcpy(val, &sum, sizeof sum);
	if (writemap(t->h) && chunk_file_offset(t->h, &v, &off) == 0)
		rc = chunk_write_at(t->h, val, img_bytes, off);
	else
		memcpy(v.mv_data, val, img_bytes);
	if (rc == 0)
		*id = nid;
out:
	return heap_txn_fail(t, rc);
}

int heap_chunk_free(heap_txn *t, uint64_t id)
{
	MDB_val k = { sizeof id, &id }, v;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	/* LMDB may hand the freed pages to the next put of this txn */
	if ((rc = heap_wb_settle(t, id)) != 0)
		return rc;
	rc = heap_trees_usable(t->h, CHUNKS | FREE);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_get(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v)));
	/* LMDB frees the pages its page header names, and asserts on a
	 * P_DIRTY it did not set: a header left by a lost write must stop
	 * here (chunk_page_check), never reach mdb_del. */
	if (rc == 0) {
		const char *problem = chunk_page_check(t, id, &v, true);
		if (problem != NULL)
			rc = CORRUPT(problem);
	}
	if (rc == 0) /* the free list grows by one u64 per freed page */
		rc = heap_space_need(t, v.mv_size / t->h->psize / 500 + 1);
	if (rc == 0)
		rc = heap_err(HEAP_MDB(mdb_del(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k,
		                      NULL)));
	return heap_txn_fail(t, rc);
}

int heap_chunk_put_raw(heap_txn *t, uint64_t id, const void *value,
                       size_t len, bool checksums)
{
	MDB_val k = { sizeof id, &id }, v = { len, (void *)value };
	const char *problem;
	uint64_t off = 0, pages;
	chdr c;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	if (value == NULL || id == 0 || (uintptr_t)value % 16 != 0)
		return AH_EINVAL;
	/* Checked before anything changes: a bad value poisons nothing. */
	if ((problem = chunk_parse(t->h, id, &v, &c)) != NULL ||
	    (checksums && (problem = chunk_check_all(&v, &c)) != NULL))
		return CORRUPT(problem);
	TRY(heap_trees_usable(t->h, CHUNKS | FREE));
	/* LMDB's overflow pages for it: header and value, rounded up */
	pages = (len + VALUE_PAD + t->h->psize - 1) / t->h->psize;
	TRY(heap_space_need_chunk(t, pages));
	v.mv_data = NULL;
	rc = HEAP_MDB(mdb_put(t->txn, t->h->dbi[HEAP_DBI_CHUNKS], &k, &v,
	                      MDB_RESERVE | MDB_NOOVERWRITE));
	if (rc == MDB_KEYEXIST) {
		rc = AH_EEXIST; /* nothing changed */
		goto out;
	}
	TRY(heap_err(rc));
	heap_space_placed(t, &v, pages);
	heap_fault_order();
	if (id < t->new_lo)
		t->new_lo = id;
	/* Written like a sealed buffered chunk: one pwrite to its place,
	 * not a page fault per fresh map page. */
	if (writemap(t->h) && chunk_file_offset(t->h, &v, &off) == 0) {
		rc = chunk_write_at(t->h, value, len, off);
	} else {
		memcpy(v.mv_data, value, len);
	}
	if (rc == 0 && t->next_id != 0 && id >= t->next_id)
		t->next_id = id + 1;
out:
	return rc == AH_EEXIST ? rc : heap_txn_fail(t, rc);
}
