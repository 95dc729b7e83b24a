/*
 * tests/unit/tools/test_escape.c - the tools' byte escape codec
 * (tools/common/escape.h) and strict number/name parsing
 * (tools/common/parse.h): round trips for every byte value, the canonical
 * form, and every kind of bad escape rejected.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "tools/common/escape.h"
#include "tools/common/parse.h"

Test(escape, every_byte_round_trips)
{
	for (int b = 0; b < 256; b++) {
		uint8_t in[3] = { 'a', (uint8_t)b, 'z' };
		char text[TOOL_ESCAPE_MAX(3)];
		uint8_t back[sizeof(text)];
		size_t tl = tool_escape(in, 3, text), bl = 0;
		const char *reason = NULL;

		cr_assert(tool_unescape(text, tl, back, &bl, &reason) == 0,
		          "byte %d: %s", b, reason);
		cr_assert_eq(bl, 3, "byte %d", b);
		cr_assert(memcmp(back, in, 3) == 0, "byte %d", b);
	}
}

Test(escape, all_bytes_in_one_string)
{
	uint8_t in[256], back[256 * 4];
	char text[TOOL_ESCAPE_MAX(256)];
	const char *reason;
	size_t tl, bl;

	for (int b = 0; b < 256; b++)
		in[b] = (uint8_t)b;
	tl = tool_escape(in, 256, text);
	/* 94 printable bytes other than the backslash as 1 byte, \\ \t \n as 2,
	 * the other 159 as 4. */
	cr_assert_eq(tl, 94 + 3 * 2 + 159 * 4);
	cr_assert_eq(tool_unescape(text, tl, back, &bl, &reason), 0);
	cr_assert_eq(bl, 256);
	cr_assert(memcmp(back, in, 256) == 0);
}

Test(escape, canonical_form)
{
	const char in[] = "a\\b\tc\nd\x00\x7f\xff\x1f ~";
	char text[64];
	size_t tl = tool_escape(in, sizeof(in) - 1, text);

	cr_assert_eq(tl, strlen("a\\\\b\\tc\\nd\\x00\\x7f\\xff\\x1f ~"));
	cr_assert(memcmp(text, "a\\\\b\\tc\\nd\\x00\\x7f\\xff\\x1f ~", tl) == 0,
	          "%.*s", (int)tl, text);
	cr_assert_eq(tool_escape("", 0, text), 0);
}

Test(escape, upper_case_hex_accepted)
{
	uint8_t out[8];
	size_t n;
	const char *reason;

	cr_assert_eq(tool_unescape("\\xAb\\xFF\\x0a", 12, out, &n, &reason), 0);
	cr_assert_eq(n, 3);
	cr_assert_eq(out[0], 0xab);
	cr_assert_eq(out[1], 0xff);
	cr_assert_eq(out[2], 0x0a);
}

static void bad(const char *text, const char *want_reason)
{
	uint8_t out[64];
	size_t n = 12345;
	const char *reason = NULL;

	cr_assert_eq(tool_unescape(text, strlen(text), out, &n, &reason), -1,
	             "\"%s\" accepted", text);
	cr_assert_not_null(reason);
	cr_assert(strstr(reason, want_reason) != NULL, "\"%s\": reason \"%s\"",
	          text, reason);
	cr_assert_eq(n, 12345, "out_len set on failure");
}

Test(escape, bad_escapes_rejected)
{
	bad("\\x4", "bad \\x escape");
	bad("k\\x4", "bad \\x escape");
	bad("\\xg1", "bad \\x escape");
	bad("\\x1g", "bad \\x escape");
	bad("\\x", "bad \\x escape");
	bad("\\q", "bad escape");
	bad("\\r", "bad escape");
	bad("\\0", "bad escape");
	bad("\\X41", "bad escape");
	bad("abc\\", "trailing backslash");
	bad("\\", "trailing backslash");
}

Test(escape, unescape_in_place)
{
	char buf[] = "a\\x41\\\\\\tz";
	size_t n;
	const char *reason;

	cr_assert_eq(tool_unescape(buf, strlen(buf), buf, &n, &reason), 0);
	cr_assert_eq(n, 5);
	cr_assert(memcmp(buf, "aA\\\tz", 5) == 0);
}

Test(parse, numbers)
{
	uint64_t u;
	int64_t i;

	cr_assert_eq(tool_parse_u64("0", 1, &u), 0);
	cr_assert_eq(u, 0);
	cr_assert_eq(tool_parse_u64("18446744073709551615", 20, &u), 0);
	cr_assert_eq(u, UINT64_MAX);
	cr_assert_eq(tool_parse_u64("18446744073709551616", 20, &u), -1);
	cr_assert_eq(tool_parse_u64("", 0, &u), -1);
	cr_assert_eq(tool_parse_u64("+1", 2, &u), -1);
	cr_assert_eq(tool_parse_u64("1 ", 2, &u), -1);
	cr_assert_eq(tool_parse_i64("-9223372036854775808", 20, &i), 0);
	cr_assert_eq(i, INT64_MIN);
	cr_assert_eq(tool_parse_i64("+9223372036854775807", 20, &i), 0);
	cr_assert_eq(i, INT64_MAX);
	cr_assert_eq(tool_parse_i64("9223372036854775808", 19, &i), -1);
	cr_assert_eq(tool_parse_i64("-9223372036854775809", 20, &i), -1);
	cr_assert_eq(tool_parse_i64("-", 1, &i), -1);
	cr_assert_eq(tool_parse_i64("--1", 3, &i), -1);
	cr_assert_eq(tool_parse_i64("-0", 2, &i), 0);
	cr_assert_eq(i, 0);
}

Test(parse, names)
{
	char n64[65], n65[66];

	memset(n64, 'a', 64);
	n64[64] = '\0';
	memset(n65, 'a', 65);
	n65[65] = '\0';
	cr_assert(tool_name_valid("cust:1", 6));
	cr_assert(tool_name_valid("x/y-z_.9", 8));
	cr_assert(tool_name_valid(n64, 64));
	cr_assert(!tool_name_valid(n65, 65));
	cr_assert(!tool_name_valid("", 0));
	cr_assert(!tool_name_valid("a b", 3));
	cr_assert(!tool_name_valid("a\\", 2));
	cr_assert(!tool_name_valid("\xc3\xa9", 2));
}

Test(parse, records)
{
	char line[] = "update\tx/y\t7\tk\\x00\t\t-3";
	char err[128];
	tool_rec r;

	cr_assert_eq(tool_rec_parse(line, strlen(line), &r, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(r.kind, TOOL_REC_UPDATE);
	cr_assert_str_eq(r.name, "x/y");
	cr_assert_eq(r.time, 7);
	cr_assert_eq(r.key_len, 2);
	cr_assert(memcmp(r.key, "k\0", 2) == 0);
	cr_assert_eq(r.val_len, 0);
	cr_assert_eq(r.diff, -3);

	char c1[] = "commit", c2[] = "# note", c3[] = "";
	cr_assert_eq(tool_rec_parse(c1, 6, &r, err, sizeof(err)), 0);
	cr_assert_eq(r.kind, TOOL_REC_COMMIT);
	cr_assert_eq(tool_rec_parse(c2, 6, &r, err, sizeof(err)), 0);
	cr_assert_eq(r.kind, TOOL_REC_NONE);
	cr_assert_eq(tool_rec_parse(c3, 0, &r, err, sizeof(err)), 0);
	cr_assert_eq(r.kind, TOOL_REC_NONE);

	const char *bads[] = { "commit\tx", "advance\ta", "advance\ta\t1\t2",
		"since\ta\t-1", "update\ta\t1\tk\tv", "update\ta\t1\tk\tv\t1\t",
		"arrange\t", "arrange\ta b", "frobnicate\ta", "update\ta\t1\tk\\q\tv\t1",
		"update\ta\tx\tk\tv\t1", "update\ta\t1\tk\tv\t1.5", " commit",
		"advance\ta\t18446744073709551616" };
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		char b[128];

		strcpy(b, bads[i]);
		err[0] = '\0';
		cr_assert_eq(tool_rec_parse(b, strlen(b), &r, err, sizeof(err)), -1,
		             "accepted \"%s\"", bads[i]);
		cr_assert(err[0] != '\0', "no reason for \"%s\"", bads[i]);
	}
}
