/*
 * tools/common/escape.c - the byte escape codec (see escape.h for the text
 * form) and plain hex.  Shared by the tools and the tests; knows nothing of the heap.
 *
 * It must never write past the sizes escape.h gives (TOOL_ESCAPE_MAX(len) to
 * escape, 2 * len to hex, len to unescape, len / 2 to unhex), and never
 * emit from tool_escape a byte outside printable ASCII: escaped text is
 * always safe to print.
 */
#include "tools/common/escape.h"

#include <stdint.h>

static const char hexdig[] = "0123456789abcdef";

size_t tool_escape(const void *in, size_t len, char *out)
{
	const uint8_t *p = in;
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		uint8_t c = p[i];

		if (c == '\\') {
			out[o++] = '\\';
			out[o++] = '\\';
		} else if (c == '\t') {
			out[o++] = '\\';
			out[o++] = 't';
		} else if (c == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else if (c >= 0x20 && c <= 0x7e) {
			out[o++] = (char)c;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hexdig[c >> 4];
			out[o++] = hexdig[c & 15];
		}
	}
	return o;
}

size_t tool_hex(const void *in, size_t len, char *out)
{
	const uint8_t *p = in;

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = hexdig[p[i] >> 4];
		out[2 * i + 1] = hexdig[p[i] & 15];
	}
	return 2 * len;
}

int tool_unhex(const char *in, size_t len, void *out, size_t *out_len,
               const char **reason)
{
	uint8_t *q = out;

	if (len % 2) {
		*reason = "odd number of hex digits";
		return -1;
	}
	for (size_t i = 0; i < len; i += 2) {
		int hi = tool_hexval(in[i]), lo = tool_hexval(in[i + 1]);

		if (hi < 0 || lo < 0) {
			*reason = "not a hex digit";
			return -1;
		}
		q[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	*out_len = len / 2;
	return 0;
}

int tool_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int tool_unescape(const char *in, size_t len, void *out, size_t *out_len,
                  const char **reason)
{
	uint8_t *q = out;
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		if (in[i] != '\\') {
			q[o++] = (uint8_t)in[i];
			continue;
		}
		if (++i == len) {
			*reason = "trailing backslash";
			return -1;
		}
		switch (in[i]) {
		case '\\': q[o++] = '\\'; break;
		case 't': q[o++] = '\t'; break;
		case 'n': q[o++] = '\n'; break;
		case 'x': {
			int hi = i + 1 < len ? tool_hexval(in[i + 1]) : -1;
			int lo = i + 2 < len ? tool_hexval(in[i + 2]) : -1;

			if (hi < 0 || lo < 0) {
				*reason = "bad \\x escape";
				return -1;
			}
			q[o++] = (uint8_t)(hi << 4 | lo);
			i += 2;
			break;
		}
		default:
			*reason = "bad escape (only \\\\ \\t \\n \\xHH are allowed)";
			return -1;
		}
	}
	*out_len = o;
	return 0;
}
