/*
 * tools/pg/decimal.h - the arithmetic of ah-pgsync's view aggregates over
 * the text forms the heap stores: PostgreSQL's output of int2, int4, int8
 * and numeric ("-12", "3.1400", "NaN", "Infinity", "-Infinity").
 *
 *   dec_cmp   numeric order, as PostgreSQL's cmp_numerics: -Infinity <
 *             every finite value < Infinity < NaN, NaN equal to NaN, and
 *             1.5 equal to 1.50 (the scale does not count).
 *   dec_sum   sum(col) * count over (text, count) pairs: exact (a 128-bit
 *             integer while the scaled sum fits, base-1e9 limbs beyond),
 *             result scale = the largest input scale, as PostgreSQL's
 *             numeric add keeps it; NaN anywhere, or both infinities,
 *             give NaN; one infinity gives it.
 *
 * Pure functions over caller buffers: no I/O, never reads past the lengths
 * given.  A text that is not such a number is -1 (the caller names the
 * column): the heap's text forms come from PostgreSQL, so that means a
 * view compiled against the wrong type, never a value to guess at.
 */
#ifndef TOOLS_PG_DECIMAL_H
#define TOOLS_PG_DECIMAL_H

#include <stddef.h>
#include <stdint.h>

#include "tools/pg/row.h"

/* A parsed text form; digits point into the text. */
typedef struct dec_num {
	int kind;          /* 0 finite, 1 NaN, 2 Infinity, 3 -Infinity */
	int neg;           /* finite: 1 if below zero */
	const char *ip;    /* integer digits, leading zeros stripped */
	size_t il;
	const char *fp;    /* fraction digits (the scale is fl) */
	size_t fl;
} dec_num;

/* 0, or -1 if p[0..len) is not a number's text form. */
int dec_parse(const char *p, size_t len, dec_num *out);
/* <0, 0, >0 as a < b in numeric order (see the top). */
int dec_cmp(const dec_num *a, const dec_num *b);

/* A running sum.  Zero it (dec_sum_init), add, format, free. */
typedef struct dec_sum {
	int nan, pinf, ninf;
	int any;           /* a value was added */
	size_t scale;      /* the largest scale added */
	__int128 small;    /* the sum * 10^scale while it fits */
	int big;           /* 1: the sum is in pos - neg below (small is 0) */
	uint32_t *pos, *neg;  /* magnitudes, base 1e9, low limb first */
	size_t npos, nneg, cap;
} dec_sum;

void dec_sum_init(dec_sum *s);
/* s += value * count.  0, -1 (not a number) or -2 (out of memory). */
int dec_sum_add(dec_sum *s, const char *p, size_t len, int64_t count);
/* Appends the sum's text form (PostgreSQL's numeric output) to b: "NaN",
 * "Infinity", "-Infinity", or digits with exactly `scale` fraction digits.
 * 0 or -1 (out of memory).  A sum of nothing is "0". */
int dec_sum_fmt(const dec_sum *s, pg_buf *b);
void dec_sum_free(dec_sum *s);

#endif /* TOOLS_PG_DECIMAL_H */
