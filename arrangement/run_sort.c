/*
 * arrangement/run_sort.c - sorting a builder run in place (run_sort.h).
 *
 * run_sort is an MSD radix sort on the key prefix (McIlroy, Bostic and
 * McIlroy, "Engineering Radix Sort", 1993: the American flag sort), one
 * byte per level, permuting in place by cycles.  Each level first skips
 * the bytes every entry of the range shares (one OR pass), so keys that
 * are small big-endian integers or share a long prefix cost no empty
 * levels.  A range shorter than RADIX_MIN, or whose 8 prefix bytes are all
 * equal (keys that tie beyond the prefix, equal keys with different vals,
 * equal (key, val, time)), is finished by the introsort on run_entry_cmp,
 * which settles everything the prefix does not.  Recursion depth is at
 * most 8 radix levels plus the introsort's 2 log2 n.
 *
 * It must never allocate, nor order two entries other than run_entry_cmp
 * does (B1).
 */
#include "arrangement/run_sort.h"

/* Below this many entries a radix level costs more than it saves. */
#define RADIX_MIN 64
#define INSERTION_MAX 16

/* ------------------------------------------------------------ introsort */

static void swap_ent(run_entry *a, run_entry *b)
{
	run_entry x = *a;
	*a = *b;
	*b = x;
}

static void insertion_sort(run_entry *a, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		run_entry x = a[i];
		size_t j = i;
		while (j > 0 && run_entry_cmp(&a[j - 1], &x) > 0) {
			a[j] = a[j - 1];
			j--;
		}
		a[j] = x;
	}
}

static void sift_down(run_entry *a, size_t i, size_t n)
{
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			return;
		if (c + 1 < n && run_entry_cmp(&a[c], &a[c + 1]) < 0)
			c++;
		if (run_entry_cmp(&a[i], &a[c]) >= 0)
			return;
		swap_ent(&a[i], &a[c]);
		i = c;
	}
}

static void heap_sort(run_entry *a, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_down(a, i, n);
	for (size_t i = n; i-- > 1;) {
		swap_ent(&a[0], &a[i]);
		sift_down(a, 0, i);
	}
}

/* Introsort: quicksort (median of three, Hoare partition), insertion sort
 * for short ranges, heapsort when the recursion goes too deep. */
static void intro_sort(run_entry *a, size_t n, int depth)
{
	while (n > INSERTION_MAX) {
		size_t i = 0, j = n - 1, mid = n / 2;
		run_entry piv;
		if (depth-- == 0) {
			heap_sort(a, n);
			return;
		}
		if (run_entry_cmp(&a[mid], &a[0]) < 0)
			swap_ent(&a[mid], &a[0]);
		if (run_entry_cmp(&a[j], &a[mid]) < 0) {
			swap_ent(&a[j], &a[mid]);
			if (run_entry_cmp(&a[mid], &a[0]) < 0)
				swap_ent(&a[mid], &a[0]);
		}
		piv = a[mid];
		for (;;) {
			while (run_entry_cmp(&a[i], &piv) < 0)
				i++;
			while (run_entry_cmp(&piv, &a[j]) < 0)
				j--;
			if (i >= j)
				break;
			swap_ent(&a[i], &a[j]);
			i++;
			j--;
		}
		/* [0, j] <= piv <= [j+1, n): recurse on the smaller side. */
		if (j + 1 < n - j - 1) {
			intro_sort(a, j + 1, depth);
			a += j + 1;
			n -= j + 1;
		} else {
			intro_sort(a + j + 1, n - j - 1, depth);
			n = j + 1;
		}
	}
	insertion_sort(a, n);
}

void run_sort_compare(run_entry *a, size_t n)
{
	int depth = 0;
	for (size_t x = n; x; x >>= 1)
		depth += 2;
	intro_sort(a, n, depth);
}

/* ---------------------------------------------------------------- radix */

static inline unsigned digit(const run_entry *e, unsigned shift)
{
	return (unsigned)(e->pfx >> shift) & 0xff;
}

/* Permutes a[0..n) into the 256 buckets of digit(shift); end[d] is the
 * end of bucket d. */
static void flag_permute(run_entry *a, size_t n, unsigned shift,
                         size_t end[256])
{
	size_t head[256], pos = 0;

	memset(end, 0, 256 * sizeof *end);
	for (size_t i = 0; i < n; i++)
		end[digit(&a[i], shift)]++;
	for (unsigned d = 0; d < 256; d++) {
		head[d] = pos;
		pos += end[d];
		end[d] = pos;
	}
	for (unsigned d = 0; d < 256; d++) {
		while (head[d] < end[d]) {
			run_entry x = a[head[d]];
			unsigned xd = digit(&x, shift);
			/* Follow the cycle until an entry of bucket d comes back. */
			while (xd != d) {
				run_entry y = a[head[xd]];
				a[head[xd]++] = x;
				x = y;
				xd = digit(&x, shift);
			}
			a[head[d]++] = x;
		}
	}
}

static void radix_sort(run_entry *a, size_t n)
{
	size_t end[256], lo = 0;
	uint64_t p0 = a[0].pfx, x = 0;
	unsigned shift;

	for (size_t i = 1; i < n; i++)
		x |= a[i].pfx ^ p0;
	if (x == 0) {
		run_sort_compare(a, n); /* ties beyond the prefix */
		return;
	}
	/* The byte of the highest bit that differs: the ones above it are
	 * common to the whole range. */
	shift = (unsigned)(63 - __builtin_clzll(x)) & ~7u;
	flag_permute(a, n, shift, end);
	for (unsigned d = 0; d < 256; lo = end[d++]) {
		size_t m = end[d] - lo;
		if (m >= RADIX_MIN)
			radix_sort(a + lo, m);
		else if (m > INSERTION_MAX)
			run_sort_compare(a + lo, m);
		else if (m > 1)
			insertion_sort(a + lo, m);
	}
}

void run_sort(run_entry *a, size_t n)
{
	if (n >= RADIX_MIN)
		radix_sort(a, n);
	else if (n > 1)
		run_sort_compare(a, n);
}
