/*
 * tests/views/test_decimal.c - the view aggregates' arithmetic
 * (tools/pg/decimal.h): numeric order with NaN and infinities, exact sums
 * with PostgreSQL's result scale, counts as multipliers, and sums past
 * 128 bits, each against the value PostgreSQL 15 prints.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "tools/pg/decimal.h"

static int cmp(const char *a, const char *b)
{
	dec_num x, y;
	cr_assert_eq(dec_parse(a, strlen(a), &x), 0, "%s", a);
	cr_assert_eq(dec_parse(b, strlen(b), &y), 0, "%s", b);
	int c = dec_cmp(&x, &y);
	return c < 0 ? -1 : c > 0;
}

Test(decimal, order)
{
	cr_assert_eq(cmp("1", "2"), -1);
	cr_assert_eq(cmp("20", "4"), 1);
	cr_assert_eq(cmp("-20", "4"), -1);
	cr_assert_eq(cmp("-20", "-4"), -1);
	cr_assert_eq(cmp("1.5", "1.50"), 0);
	cr_assert_eq(cmp("0.00", "-0"), 0);
	cr_assert_eq(cmp("007", "7"), 0);
	cr_assert_eq(cmp("1.05", "1.5"), -1);
	cr_assert_eq(cmp("-1.05", "-1.5"), 1);
	cr_assert_eq(cmp("NaN", "Infinity"), 1);
	cr_assert_eq(cmp("NaN", "NaN"), 0);
	cr_assert_eq(cmp("Infinity", "99999999999999999999999"), 1);
	cr_assert_eq(cmp("-Infinity", "-99999999999999999999999"), -1);
	cr_assert_eq(cmp("-Infinity", "Infinity"), -1);
}

Test(decimal, bad_text_refused)
{
	dec_num x;
	const char *bad[] = { "", "-", "1.", ".5", "1e5", "abc", "1 ", "--1", "nan", "+1", "1.2.3" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		cr_assert_eq(dec_parse(bad[i], strlen(bad[i]), &x), -1, "%s", bad[i]);
}

typedef struct vc { const char *v; int64_t n; } vc;

static char *sum(const vc *in, size_t n)
{
	static char out[4096];
	dec_sum s;
	pg_buf b = { 0 };
	dec_sum_init(&s);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(dec_sum_add(&s, in[i].v, strlen(in[i].v), in[i].n), 0, "%s", in[i].v);
	cr_assert_eq(dec_sum_fmt(&s, &b), 0);
	cr_assert_lt(b.len, sizeof out);
	memcpy(out, b.p, b.len);
	out[b.len] = 0;
	pg_buf_free(&b);
	dec_sum_free(&s);
	return out;
}

#define SUM(...) sum((const vc[]){ __VA_ARGS__ }, sizeof((const vc[]){ __VA_ARGS__ }) / sizeof(vc))

Test(decimal, sums_keep_the_largest_scale)
{
	/* SELECT sum(x) FROM (VALUES (1.5::numeric), (2.25), (-1)) v(x) -> 2.75 */
	cr_assert_str_eq(SUM({ "1.5", 1 }, { "2.25", 1 }, { "-1", 1 }), "2.75");
	cr_assert_str_eq(SUM({ "1.50", 1 }, { "-1.5", 1 }), "0.00");
	cr_assert_str_eq(SUM({ "0.001", 3 }), "0.003");
	cr_assert_str_eq(SUM({ "-0.5", 1 }), "-0.5");
	cr_assert_str_eq(SUM({ "-0.25", 1 }, { "0.2", 1 }), "-0.05");
	cr_assert_str_eq(SUM({ "7", 1 }), "7");
	cr_assert_str_eq(SUM({ "100", -1 }, { "30", 2 }), "-40");
	cr_assert_str_eq(SUM({ "5", 0 }), "0");
}

Test(decimal, nan_and_infinities)
{
	cr_assert_str_eq(SUM({ "1", 1 }, { "NaN", 1 }), "NaN");
	cr_assert_str_eq(SUM({ "Infinity", 1 }, { "1", 1 }), "Infinity");
	cr_assert_str_eq(SUM({ "-Infinity", 2 }), "-Infinity");
	cr_assert_str_eq(SUM({ "Infinity", 1 }, { "-Infinity", 1 }), "NaN");
}

Test(decimal, past_128_bits)
{
	/* (2^63 - 1)^2 * 4 =
	 * 340282366920938463389587631136930004996 (past 2^127) */
	cr_assert_str_eq(SUM({ "9223372036854775807", INT64_MAX }, { "9223372036854775807", INT64_MAX },
	                     { "9223372036854775807", INT64_MAX }, { "9223372036854775807", INT64_MAX }),
	                 "340282366920938463389587631136930004996");
	cr_assert_str_eq(SUM({ "123456789012345678901234567890123456789.123", 1 }, { "0.877", 1 }),
	                 "123456789012345678901234567890123456790.000");
	cr_assert_str_eq(SUM({ "-123456789012345678901234567890123456789", 1 },
	                     { "123456789012345678901234567890123456788", 1 }), "-1");
	/* the scale grows after the sum went big */
	cr_assert_str_eq(SUM({ "99999999999999999999999999999999999999", 5 }, { "0.5", 2 }),
	                 "499999999999999999999999999999999999996.0");
	cr_assert_str_eq(SUM({ "-9223372036854775808", INT64_MIN }), "85070591730234615865843651857942052864");
	/* small overflows while rescaling */
	cr_assert_str_eq(SUM({ "10000000000000000000000000000000000000", 1 }, { "0.0000000001", 1 }),
	                 "10000000000000000000000000000000000000.0000000001");
}
