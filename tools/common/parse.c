/*
 * tools/common/parse.c - strict parsing of names, numbers and changelog
 * records (format in parse.h).  Syntax only: no heap access, no allocation.
 *
 * It must never accept a near miss: a sign on a uint64, a second sign, a
 * space in a number, an overflow, a name outside the set or a bad escape is
 * an error, never a guess.  A bad field is quoted in the message as at most
 * 40 bytes, every non-printable one shown as '?'.
 */
#include "tools/common/parse.h"

#include <stdio.h>
#include <string.h>

#include "arrheap.h"
#include "tools/common/escape.h"

#define MAX_FIELDS 6

int tool_name_valid(const char *s, size_t len)
{
	if (len < 1 || len > AH_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == ':' || c == '/' || c == '-'))
			return 0;
	}
	return 1;
}

int tool_parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		unsigned d = (unsigned char)s[i] - '0';

		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int tool_parse_i64(const char *s, size_t len, int64_t *out)
{
	int neg = 0;
	uint64_t mag;

	if (len > 0 && (s[0] == '+' || s[0] == '-')) {
		neg = s[0] == '-';
		s++;
		len--;
	}
	if (tool_parse_u64(s, len, &mag) < 0)
		return -1;
	if (neg) {
		if (mag > (uint64_t)INT64_MAX + 1)
			return -1;
		*out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
	} else {
		if (mag > (uint64_t)INT64_MAX)
			return -1;
		*out = (int64_t)mag;
	}
	return 0;
}

struct kind_def {
	const char *word;
	enum tool_rec_kind kind;
	int nfields; /* including the word */
};

static const struct kind_def kinds[] = {
	{ "arrange", TOOL_REC_ARRANGE, 2 },
	{ "update", TOOL_REC_UPDATE, 6 },
	{ "advance", TOOL_REC_ADVANCE, 3 },
	{ "since", TOOL_REC_SINCE, 3 },
	{ "commit", TOOL_REC_COMMIT, 1 },
};

/* The hint for a field with spaces in it: the separator is one TAB. */
static const char *space_hint(const char *f, size_t flen)
{
	return memchr(f, ' ', flen) ? " (fields are separated by one TAB, not "
	                              "spaces)" : "";
}

/* Shows at most 40 bytes of a bad field, so a binary line stays one line. */
static int field_err(char *err, size_t errlen, const char *what,
                     const char *f, size_t flen)
{
	char shown[41];
	size_t n = 0;

	for (size_t i = 0; i < flen && n < 40; i++)
		shown[n++] = f[i] >= 0x20 && f[i] < 0x7f ? f[i] : '?';
	shown[n] = '\0';
	snprintf(err, errlen, "%s \"%s%s\"%s", what, shown,
	         flen > 40 ? "..." : "", space_hint(f, flen));
	return -1;
}

static int decode(char *f, size_t flen, const void **out, size_t *out_len,
                  const char *what, char *err, size_t errlen)
{
	const char *reason;

	if (tool_unescape(f, flen, f, out_len, &reason) < 0) {
		snprintf(err, errlen, "%s in %s", reason, what);
		return -1;
	}
	*out = f;
	return 0;
}

int tool_rec_parse(char *line, size_t len, tool_rec *rec, char *err,
                   size_t errlen)
{
	char *f[MAX_FIELDS];
	size_t fl[MAX_FIELDS];
	int n = 0;
	const struct kind_def *k = NULL;
	size_t start = 0;

	memset(rec, 0, sizeof(*rec));
	if (len == 0 || line[0] == '#')
		return 0;
	/* No field may end in a raw CR (DIFF, NAME and the words cannot hold
	 * one): a CRLF file, named as such rather than as its symptom. */
	if (line[len - 1] == '\r') {
		snprintf(err, errlen, "line ends with CR: a CRLF (DOS) file? Lines "
		         "end with LF alone (convert with dos2unix or sed 's/\\r$//')");
		return -1;
	}
	for (size_t i = 0; i <= len; i++) {
		if (i < len && line[i] != '\t')
			continue;
		if (n == MAX_FIELDS) {
			snprintf(err, errlen, "too many fields");
			return -1;
		}
		f[n] = line + start;
		fl[n++] = i - start;
		start = i + 1;
	}
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strlen(kinds[i].word) == fl[0] &&
		    memcmp(kinds[i].word, f[0], fl[0]) == 0)
			k = &kinds[i];
	if (!k)
		return field_err(err, errlen, "unknown record", f[0], fl[0]);
	if (n != k->nfields) {
		snprintf(err, errlen, "%s takes %d fields, not %d%s", k->word,
		         k->nfields, n, space_hint(line, len));
		return -1;
	}
	rec->kind = k->kind;
	if (k->kind == TOOL_REC_COMMIT)
		return 0;
	if (!tool_name_valid(f[1], fl[1]))
		return field_err(err, errlen, "bad name", f[1], fl[1]);
	f[1][fl[1]] = '\0';
	rec->name = f[1];
	if (k->kind == TOOL_REC_ARRANGE)
		return 0;
	if (tool_parse_u64(f[2], fl[2], &rec->time) < 0)
		return field_err(err, errlen,
		                 k->kind == TOOL_REC_UPDATE ? "bad TIME (decimal uint64)"
		                 : k->kind == TOOL_REC_ADVANCE ? "bad UPPER (decimal uint64)"
		                                               : "bad SINCE (decimal uint64)",
		                 f[2], fl[2]);
	if (k->kind != TOOL_REC_UPDATE)
		return 0;
	if (tool_parse_i64(f[5], fl[5], &rec->diff) < 0)
		return field_err(err, errlen, "bad DIFF (decimal int64)", f[5], fl[5]);
	if (decode(f[3], fl[3], &rec->key, &rec->key_len, "KEY", err, errlen) < 0 ||
	    decode(f[4], fl[4], &rec->val, &rec->val_len, "VAL", err, errlen) < 0)
		return -1;
	return 0;
}
