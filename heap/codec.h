/*
 * heap/codec.h - the one byte codec of every on-disk layout: native-endian
 * integers read from and written to unaligned bytes (LMDB values are only
 * 2-byte aligned; the heap's byte-order mark refuses a foreign file), and
 * a bounded reader that turns a short record into a flag instead of a
 * read past its end.
 *
 * Used by every layer (heap/ format and page checks, arrangement/ records
 * and chunks, tools never: they see only the public API).  It must never
 * read or write outside the bytes it is given: a codec_rd that runs out
 * sets bad, yields zeroes, and stays bad.
 */
#ifndef HEAP_CODEC_H
#define HEAP_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t get_u16(const void *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline uint32_t get_u32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline uint64_t get_u64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void put_u16(void *p, uint16_t v)
{
	memcpy(p, &v, sizeof v);
}

static inline void put_u32(void *p, uint32_t v)
{
	memcpy(p, &v, sizeof v);
}

static inline void put_u64(void *p, uint64_t v)
{
	memcpy(p, &v, sizeof v);
}

/* A bounded reader over [p, p + left). */
typedef struct codec_rd {
	const uint8_t *p;
	size_t left;
	bool bad;
} codec_rd;

static inline void rd_bytes(codec_rd *r, void *dst, size_t n)
{
	if (r->bad || r->left < n) {
		r->bad = true;
		if (n)
			memset(dst, 0, n);
		return;
	}
	if (n)
		memcpy(dst, r->p, n);
	r->p += n;
	r->left -= n;
}

static inline uint32_t rd_u32(codec_rd *r)
{
	uint32_t v;
	rd_bytes(r, &v, sizeof v);
	return v;
}

static inline uint64_t rd_u64(codec_rd *r)
{
	uint64_t v;
	rd_bytes(r, &v, sizeof v);
	return v;
}

/* A writer into a buffer its caller sized: advances p. */
static inline void wr_bytes(uint8_t **p, const void *src, size_t n)
{
	if (n)
		memcpy(*p, src, n);
	*p += n;
}

static inline void wr_u32(uint8_t **p, uint32_t v)
{
	wr_bytes(p, &v, sizeof v);
}

static inline void wr_u64(uint8_t **p, uint64_t v)
{
	wr_bytes(p, &v, sizeof v);
}

#endif /* HEAP_CODEC_H */
