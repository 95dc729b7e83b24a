/*
 * tools/common/fmt.c - the number formats of fmt.h.  No allocation, no I/O.
 *
 * It must never write more than TOOL_FMT_LEN bytes: the longest count, 20
 * digits and 6 commas, takes 27 with its NUL.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tools/common/fmt.h"

char *tool_fmt_count(char *buf, uint64_t n)
{
	char digits[24];
	int len = snprintf(digits, sizeof digits, "%" PRIu64, n), o = 0;

	for (int i = 0; i < len; i++) {
		if (i > 0 && (len - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = '\0';
	return buf;
}

char *tool_fmt_bytes(char *buf, uint64_t n)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	uint64_t scale = 1024;
	int u = 0;

	if (n < 1024) {
		snprintf(buf, TOOL_FMT_LEN, "%" PRIu64 " B", n);
		return buf;
	}
	while (u < 4 && n >= scale * 1024 - scale / 20) {
		scale *= 1024;
		u++;
	}
	/* tenths, rounded to nearest */
	uint64_t tenths = (n / scale) * 10 + ((n % scale) * 10 + scale / 2) / scale;
	snprintf(buf, TOOL_FMT_LEN, "%" PRIu64 ".%" PRIu64 " %s", tenths / 10,
	         tenths % 10, units[u]);
	return buf;
}
