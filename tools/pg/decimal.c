/*
 * tools/pg/decimal.c - numeric order and exact sums over PostgreSQL's
 * text forms of int2, int4, int8 and numeric (see decimal.h).
 *
 * A sum is kept as an integer N = sum * 10^scale.  While N fits, it is a
 * signed 128-bit integer (the common case: pgbench balances); the first
 * add that would overflow moves it to two base-1e9 magnitudes, positive
 * and negative parts, subtracted only when formatted, so no add ever
 * needs a signed bignum.  A larger scale arriving multiplies what is
 * there by 10^(new - old): exactness never depends on the order of adds.
 */
#include <stdlib.h>
#include <string.h>

#include "tools/pg/decimal.h"

#define BASE 1000000000u

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

int dec_parse(const char *p, size_t len, dec_num *o)
{
	size_t i = 0;

	memset(o, 0, sizeof *o);
	if (len == 3 && !memcmp(p, "NaN", 3))
		return o->kind = 1, 0;
	if (len == 8 && !memcmp(p, "Infinity", 8))
		return o->kind = 2, 0;
	if (len == 9 && !memcmp(p, "-Infinity", 9))
		return o->kind = 3, 0;
	if (i < len && p[i] == '-')
		o->neg = 1, i++;
	size_t s = i;
	while (i < len && is_digit(p[i]))
		i++;
	if (i == s)
		return -1;
	o->ip = p + s;
	o->il = i - s;
	if (i < len && p[i] == '.') {
		s = ++i;
		while (i < len && is_digit(p[i]))
			i++;
		if (i == s)
			return -1;
		o->fp = p + s;
		o->fl = i - s;
	}
	if (i != len)
		return -1;
	while (o->il > 0 && o->ip[0] == '0')
		o->ip++, o->il--;
	return 0;
}

static int is_zero(const dec_num *a)
{
	for (size_t i = 0; i < a->fl; i++)
		if (a->fp[i] != '0')
			return 0;
	return a->il == 0;
}

/* |a| vs |b|, finite. */
static int cmp_mag(const dec_num *a, const dec_num *b)
{
	if (a->il != b->il)
		return a->il < b->il ? -1 : 1;
	int c = memcmp(a->ip, b->ip, a->il);
	if (c)
		return c;
	for (size_t i = 0; i < a->fl || i < b->fl; i++) {
		char x = i < a->fl ? a->fp[i] : '0', y = i < b->fl ? b->fp[i] : '0';
		if (x != y)
			return x < y ? -1 : 1;
	}
	return 0;
}

int dec_cmp(const dec_num *a, const dec_num *b)
{
	/* rank: -Infinity 0, finite 1, Infinity 2, NaN 3 */
	static const int rank[4] = { 1, 3, 2, 0 };
	int ra = rank[a->kind], rb = rank[b->kind];

	if (ra != rb)
		return ra < rb ? -1 : 1;
	if (ra != 1)
		return 0;
	int na = a->neg && !is_zero(a), nb = b->neg && !is_zero(b);
	if (na != nb)
		return na ? -1 : 1;
	int c = cmp_mag(a, b);
	return na ? -c : c;
}

/* ---- sums ---- */

void dec_sum_init(dec_sum *s)
{
	memset(s, 0, sizeof *s);
}

void dec_sum_free(dec_sum *s)
{
	free(s->pos);
	free(s->neg);
	dec_sum_init(s);
}

static int grow(dec_sum *s, size_t n)
{
	if (n <= s->cap)
		return 0;
	size_t cap = s->cap ? s->cap : 8;
	while (cap < n)
		cap *= 2;
	uint32_t *p = realloc(s->pos, cap * sizeof *p), *q;
	if (!p)
		return -2;
	s->pos = p;
	if (!(q = realloc(s->neg, cap * sizeof *q)))
		return -2;
	s->neg = q;
	memset(s->pos + s->cap, 0, (cap - s->cap) * sizeof *p);
	memset(s->neg + s->cap, 0, (cap - s->cap) * sizeof *q);
	s->cap = cap;
	return 0;
}

/* pos or neg = it * mul + add: grows. */
static int mag_muladd(dec_sum *s, int neg, uint64_t mul, uint64_t add)
{
	unsigned __int128 carry = add;
	size_t *n = neg ? &s->nneg : &s->npos;

	for (size_t i = 0; i < *n; i++) {
		uint32_t *m = neg ? s->neg : s->pos;
		carry += (unsigned __int128)m[i] * mul;
		m[i] = (uint32_t)(carry % BASE);
		carry /= BASE;
	}
	while (carry) {
		if (grow(s, *n + 1))
			return -2;
		uint32_t *m = neg ? s->neg : s->pos;
		m[(*n)++] = (uint32_t)(carry % BASE);
		carry /= BASE;
	}
	return 0;
}

/* dst += src[0..ns) * mul. */
static int mag_add_mul(dec_sum *s, int neg, const uint32_t *src, size_t ns, uint64_t mul)
{
	size_t *n = neg ? &s->nneg : &s->npos;
	unsigned __int128 carry = 0;

	if (grow(s, (ns > *n ? ns : *n) + 4))
		return -2;
	uint32_t *d = neg ? s->neg : s->pos;
	size_t i;
	for (i = 0; i < ns || carry; i++) {
		carry += d[i] + (i < ns ? (unsigned __int128)src[i] * mul : 0);
		d[i] = (uint32_t)(carry % BASE);
		carry /= BASE;
		if (i + 1 >= s->cap && carry && grow(s, s->cap + 4))
			return -2;
		d = neg ? s->neg : s->pos;
	}
	if (i > *n)
		*n = i;
	while (*n && d[*n - 1] == 0)
		(*n)--;
	return 0;
}

/* Moves small into pos/neg. */
static int to_big(dec_sum *s)
{
	unsigned __int128 m = s->small < 0 ? -(unsigned __int128)s->small : (unsigned __int128)s->small;
	int neg = s->small < 0;
	size_t *n = neg ? &s->nneg : &s->npos;

	s->big = 1;
	s->small = 0;
	while (m) {
		if (grow(s, *n + 1))
			return -2;
		(neg ? s->neg : s->pos)[(*n)++] = (uint32_t)(m % BASE);
		m /= BASE;
	}
	return 0;
}

/* Multiplies the sum by 10^(scale - s->scale); small only when the caller
 * checked that it fits (else it moved the sum to big first). */
static int rescale(dec_sum *s, size_t scale)
{
	while (s->scale < scale) {
		size_t k = scale - s->scale > 9 ? 9 : scale - s->scale;
		uint64_t p = 1;
		for (size_t i = 0; i < k; i++)
			p *= 10;
		if (!s->big)
			s->small *= (__int128)p;
		else if (mag_muladd(s, 0, p, 0) || mag_muladd(s, 1, p, 0))
			return -2;
		s->scale += k;
	}
	return 0;
}

int dec_sum_add(dec_sum *s, const char *p, size_t len, int64_t count)
{
	dec_num v;
	int rc;

	if (dec_parse(p, len, &v) != 0)
		return -1;
	s->any = 1;
	if (count == 0)
		return 0;
	if (v.kind == 1)
		return s->nan = 1, 0;
	if (v.kind >= 2) {
		int pos = (v.kind == 2) == (count > 0);
		return (pos ? (s->pinf = 1) : (s->ninf = 1)), 0;
	}
	if (v.fl > s->scale) {
		if (!s->big) {
			__int128 t = s->small;
			int over = 0;
			for (size_t i = s->scale; i < v.fl && !over; i++)
				over = __builtin_mul_overflow(t, (__int128)10, &t);
			if (over && to_big(s))
				return -2;
		}
		if ((rc = rescale(s, v.fl)) != 0)
			return rc;
	}
	uint64_t mul = count < 0 ? (uint64_t)(-(count + 1)) + 1 : (uint64_t)count;
	int neg = v.neg != (count < 0);
	size_t nd = v.il + s->scale;
	if (!s->big && nd <= 36) {
		__int128 m = 0, t;
		for (size_t i = 0; i < v.il; i++)
			m = m * 10 + (v.ip[i] - '0');
		for (size_t i = 0; i < s->scale; i++)
			m = m * 10 + (i < v.fl ? v.fp[i] - '0' : 0);
		if (!__builtin_mul_overflow(m, (__int128)mul, &t) &&
		    !(neg ? __builtin_sub_overflow(s->small, t, &t) :
		            __builtin_add_overflow(s->small, t, &t))) {
			s->small = t;
			return 0;
		}
	}
	if (!s->big && to_big(s))
		return -2;
	/* the value's magnitude at scale s->scale, base 1e9 */
	size_t nl = nd / 9 + 2;
	uint32_t *m = calloc(nl, sizeof *m);
	size_t mn = 0;
	if (!m)
		return -2;
	for (size_t i = 0; i < nd; i++) {
		/* m = m * 10 + digit */
		uint64_t carry = (uint64_t)(i < v.il ? v.ip[i] - '0'
		                            : (i - v.il < v.fl ? v.fp[i - v.il] - '0' : 0));
		for (size_t j = 0; j < mn; j++) {
			uint64_t x = (uint64_t)m[j] * 10 + carry;
			m[j] = (uint32_t)(x % BASE);
			carry = x / BASE;
		}
		if (carry)
			m[mn++] = (uint32_t)carry;
	}
	rc = mag_add_mul(s, neg, m, mn, mul);
	free(m);
	return rc;
}

static int put_digits_scaled(pg_buf *b, int neg, const char *d, size_t n, size_t scale)
{
	/* d[0..n): the integer N without leading zeros (n 0: zero) */
	size_t total = n > scale ? n : scale + 1;
	if (neg && n && pg_buf_put(b, "-", 1))
		return -1;
	for (size_t i = 0; i < total; i++) {
		char c = i + n < total ? '0' : d[i + n - total];
		if ((i == total - scale && scale && pg_buf_put(b, ".", 1)) || pg_buf_put(b, &c, 1))
			return -1;
	}
	return 0;
}

int dec_sum_fmt(const dec_sum *s, pg_buf *b)
{
	if (s->nan || (s->pinf && s->ninf))
		return pg_buf_put(b, "NaN", 3);
	if (s->pinf)
		return pg_buf_put(b, "Infinity", 8);
	if (s->ninf)
		return pg_buf_put(b, "-Infinity", 9);
	if (!s->big) {
		char d[48];
		size_t n = 0;
		unsigned __int128 m = s->small < 0 ? -(unsigned __int128)s->small
		                                   : (unsigned __int128)s->small;
		char tmp[48];
		while (m)
			tmp[n++] = (char)('0' + (int)(m % 10)), m /= 10;
		for (size_t i = 0; i < n; i++)
			d[i] = tmp[n - 1 - i];
		return put_digits_scaled(b, s->small < 0, d, n, s->scale);
	}
	/* pos - neg */
	size_t n = s->npos > s->nneg ? s->npos : s->nneg;
	int c = 0;
	for (size_t i = n; i-- > 0 && !c;) {
		uint32_t x = i < s->npos ? s->pos[i] : 0, y = i < s->nneg ? s->neg[i] : 0;
		c = x < y ? -1 : x > y;
	}
	const uint32_t *a = c >= 0 ? s->pos : s->neg, *bb = c >= 0 ? s->neg : s->pos;
	size_t na = c >= 0 ? s->npos : s->nneg, nb = c >= 0 ? s->nneg : s->npos;
	uint32_t *r = calloc(n + 1, sizeof *r);
	char *d = malloc(n * 9 + 1);
	int rc = -1;
	if (!r || !d)
		goto out;
	int64_t borrow = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t x = (int64_t)(i < na ? a[i] : 0) - (i < nb ? bb[i] : 0) - borrow;
		borrow = x < 0;
		r[i] = (uint32_t)(x < 0 ? x + BASE : x);
	}
	size_t dn = 0;
	for (size_t i = n; i-- > 0;)
		for (int j = 8; j >= 0; j--) {
			uint32_t x = r[i];
			for (int k = 0; k < j; k++)
				x /= 10;
			d[dn++] = (char)('0' + x % 10);
		}
	size_t z = 0;
	while (z < dn && d[z] == '0')
		z++;
	memmove(d, d + z, dn - z);
	dn -= z;
	rc = put_digits_scaled(b, c < 0, d, dn, s->scale);
out:
	free(r);
	free(d);
	return rc;
}
