/*
 * tests/unit/heap/test_heap_image.c - chunk images (heap.h:
 * heap_chunk_image_new/seal/put, the merge thread's chunks built outside
 * any txn): an image stored by put reads back, verifies whole and page by
 * page, and holds exactly the bytes of the same body written through
 * heap_chunk_reserve/seal (the same class, sums and checksum), for every
 * size class and a jumbo chunk; and every bad argument is an error that
 * changes nothing (the txn stays usable).
 */
#include "heap_test.h"

static uint64_t via_reserve(heap_txn *t, size_t n, uint64_t seed)
{
	uint64_t id;
	void *body;
	size_t cap;

	cr_assert_eq(heap_chunk_reserve(t, n, &id, &body, &cap), 0);
	ht_fill(body, n, seed, 0);
	cr_assert_eq(heap_chunk_seal(t, id, body, n), 0);
	return id;
}

static uint64_t via_image(heap *h, heap_txn *t, size_t n, uint64_t seed)
{
	void *img, *body;
	size_t bytes, cap;
	uint64_t id = 0;

	cr_assert_eq(heap_chunk_image_new(h, n, &img, &bytes, &body, &cap), 0);
	cr_assert_geq(cap, n);
	ht_fill(body, n, seed, 0);
	cr_assert_eq(heap_chunk_image_seal(h, img, bytes, n), 0);
	cr_assert_eq(heap_chunk_image_put(t, img, bytes, &id), 0);
	free(img);
	return id;
}

/* The stored values differ only in the id and what covers it (sum0 at
 * 8..12, xxh3 at 0..8, id at 24..32). */
static void same_but_id(heap_txn *t, uint64_t a, uint64_t b)
{
	heap_chunk_view va, vb;

	cr_assert_eq(heap_chunk_open(t, a, HEAP_CHUNK_WHOLE, &va), 0);
	cr_assert_eq(heap_chunk_open(t, b, HEAP_CHUNK_WHOLE, &vb), 0);
	cr_assert_eq(va.value_bytes, vb.value_bytes);
	cr_assert_eq(va.body_used, vb.body_used);
	cr_assert_eq(memcmp(va.value + 12, vb.value + 12, 12), 0);
	cr_assert_eq(memcmp(va.value + 32, vb.value + 32,
	                    va.value_bytes - 32), 0);
}

Test(heap_image, images_equal_reserved_chunks, .timeout = 60)
{
	const size_t sizes[] = { 0, 100, 4000, 5000, 60000, 300000, 1000000,
	                         3u << 20 };
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 256 * MiB, 0);
	tl_dir d = tl_tmpdir("heapimg");
	heap *h;
	heap_txn *t;
	uint64_t a[8], b[8];

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	for (int i = 0; i < 8; i++) {
		a[i] = via_reserve(t, sizes[i], 40 + i);
		b[i] = via_image(h, t, sizes[i], 40 + i);
		cr_assert_eq(b[i], a[i] + 1, "image ids follow the reserved ones");
	}
	cr_assert_eq(heap_txn_commit(t), 0);
	cr_assert_eq(heap_txn_begin(h, true, &t), 0);
	for (int i = 0; i < 8; i++) {
		heap_chunk_view v;
		const void *body;
		size_t used;

		cr_assert_eq(heap_chunk_verify(t, b[i]), 0, "size %zu", sizes[i]);
		cr_assert_eq(heap_chunk_open(t, b[i], HEAP_CHUNK_PAGES, &v), 0);
		cr_assert_eq(heap_chunk_touch(&v, v.body, v.body_used ? v.body_used : 1),
		             0);
		cr_assert_eq(heap_chunk_get(t, b[i], &body, &used), 0);
		cr_assert_eq(used, sizes[i]);
		cr_assert(ht_same(body, used, 40 + i, 0));
		same_but_id(t, a[i], b[i]);
	}
	heap_txn_abort(t);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}

Test(heap_image, bad_images_are_refused, .timeout = 60)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 64 * MiB, 0);
	tl_dir d = tl_tmpdir("heapimg");
	void *img, *body;
	size_t bytes, cap;
	uint64_t id = 0;
	heap *h;
	heap_txn *t, *rt;

	cr_assert_eq(heap_open(d.path, &o, &h), 0);
	cr_assert_eq(heap_chunk_image_new(h, 5000, &img, &bytes, &body, &cap), 0);
	cr_assert_eq(heap_chunk_image_seal(h, img, bytes, cap + 1), AH_EINVAL);
	cr_assert_eq(heap_chunk_image_seal(h, img, bytes - 4096, 10), AH_EINVAL);
	cr_assert_eq(heap_chunk_image_seal(h, img, bytes, 10), 0);
	cr_assert_eq(heap_txn_begin(h, true, &rt), 0);
	cr_assert_eq(heap_chunk_image_put(rt, img, bytes, &id), AH_EREADONLY);
	heap_txn_abort(rt);
	cr_assert_eq(heap_txn_begin(h, false, &t), 0);
	cr_assert_eq(heap_chunk_image_put(t, NULL, bytes, &id), AH_EINVAL);
	cr_assert_eq(heap_chunk_image_put(t, (char *)img + 8, bytes, &id), AH_EINVAL);
	cr_assert_eq(heap_chunk_image_put(t, img, bytes - 1, &id), AH_EINVAL);
	/* nothing changed: the txn is usable, and a good image goes in */
	cr_assert_eq(heap_chunk_image_put(t, img, bytes, &id), 0);
	cr_assert_eq(id, 1);
	/* an image whose magic was damaged is refused as corrupt */
	memset((char *)img + 12, 'x', 4);
	cr_assert_eq(heap_chunk_image_put(t, img, bytes, &id), AH_ECORRUPT);
	heap_txn_abort(t); /* poisoned: nothing of it is kept */
	free(img);
	cr_assert_eq(heap_chunk_image_new(h, (size_t)5 << 30, &img, &bytes, &body,
	                                  &cap), AH_ELIMIT);
	cr_assert_eq(heap_close(h), 0);
	tl_rmdir(&d);
}
