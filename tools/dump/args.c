/*
 * tools/dump/args.c - the options of ah-dump's commands over keys (data.c,
 * raw.c): NAME [KEY], --as-of, the key range --from/--to/--prefix,
 * --limit, --count, --val, --batch; the range tests and the note a cut
 * listing ends with.
 *
 * KEY, --from, --to, --prefix and --val are read in the form keys print
 * in (the escape, or hex with --hex), so what one command prints can be
 * passed back to another.  The key order is arrheap's: unsigned bytes, a
 * prefix first.  Parsing only: nothing here reads the heap.
 *
 * It must never accept an option the command did not ask for (which), an
 * extra positional argument, --count with --limit, or a KEY or bound that
 * does not decode: each is a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/escape.h"
#include "tools/dump/dump.h"

static int bytes_opt(dump *d, const char *opt, const char *s, void **out,
                     size_t *len, bool *have)
{
	free(*out);
	*have = true;
	return dump_arg_bytes(d, opt, s, out, len);
}

int dump_args_parse(dump *d, int argc, char **argv, unsigned which,
                    dump_args *a)
{
	bool have_prefix = false, have_batch = false;
	int rc = 0;

	memset(a, 0, sizeof *a);
	for (int i = 0; i < argc && rc == 0; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool range = (which & DA_RANGE) != 0;

		if ((which & DA_AS_OF) && !strcmp(o, "--as-of") && v) {
			rc = dump_parse_u64(d, o, argv[++i], &a->as_of) < 0 ? 2 : 0;
			a->have_as_of = true;
		} else if ((which & DA_BATCH) && !strcmp(o, "--batch") && v) {
			rc = dump_parse_u64(d, o, argv[++i], &a->batch) < 0 ? 2 : 0;
			have_batch = true;
		} else if (range && !strcmp(o, "--limit") && v) {
			rc = dump_parse_u64(d, o, argv[++i], &a->limit) < 0 ? 2 : 0;
			a->have_limit = true;
		} else if (range && !strcmp(o, "--count")) {
			a->count = true;
		} else if (range && !strcmp(o, "--from") && v) {
			rc = bytes_opt(d, o, argv[++i], &a->from, &a->from_len,
			               &a->have_from);
		} else if (range && !strcmp(o, "--to") && v) {
			rc = bytes_opt(d, o, argv[++i], &a->to, &a->to_len, &a->have_to);
		} else if (range && !strcmp(o, "--prefix") && v) {
			rc = bytes_opt(d, o, argv[++i], &a->prefix, &a->prefix_len,
			               &have_prefix);
		} else if ((which & DA_VAL) && !strcmp(o, "--val") && v) {
			a->val_s = argv[++i];
			rc = bytes_opt(d, o, a->val_s, &a->val, &a->val_len,
			               &a->have_val);
		} else if (!a->name && o[0] != '-') {
			a->name = o;
		} else if ((which & DA_KEY) && !a->key_s && a->name) {
			a->key_s = o;
		} else {
			return 2;
		}
	}
	if (rc)
		return rc;
	if (!a->name || ((which & DA_KEY) && !a->key_s) ||
	    ((which & DA_BATCH) && !have_batch))
		return 2;
	if (a->count && a->have_limit)
		return dump_fail(d, DUMP_USAGE, "--count and --limit do not go "
		                 "together");
	if (a->key_s)
		return dump_arg_bytes(d, "KEY", a->key_s, &a->key, &a->key_len);
	return 0;
}

void dump_args_free(dump_args *a)
{
	free(a->key);
	free(a->from);
	free(a->to);
	free(a->prefix);
	free(a->val);
	memset(a, 0, sizeof *a);
}

int dump_bytes_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (alen == 0 || blen == 0)
		c = 0;
	return c ? c : alen < blen ? -1 : alen > blen;
}

void dump_range_start(const dump_args *a, const void **k, size_t *len)
{
	*k = a->from;
	*len = a->from_len;
	if (a->prefix_len && (!a->have_from || dump_bytes_cmp(a->prefix,
	                      a->prefix_len, a->from, a->from_len) > 0)) {
		*k = a->prefix;
		*len = a->prefix_len;
	}
}

bool dump_range_past(const dump_args *a, const void *k, size_t len)
{
	if (a->have_to && dump_bytes_cmp(k, len, a->to, a->to_len) >= 0)
		return true;
	return a->prefix_len && (len < a->prefix_len ||
	                         memcmp(k, a->prefix, a->prefix_len) != 0);
}

/* Writes s single-quoted for sh: ' becomes '\'' (end the quote, a
 * quoted quote, open again). */
static void sh_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++)
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	fputc('\'', f);
}

int dump_limit_note(dump *d, const void *k, size_t len)
{
	const unsigned char *p = k;
	bool printable = true;
	const char *ke = dump_bytes(d, k, len);

	if (!ke)
		return AH_ENOMEM;
	if (d->json) {
		tj_kstr(&d->j, "next_key", ke);
		return 0;
	}
	for (size_t i = 0; i < len; i++)
		printable &= p[i] >= 0x20 && p[i] <= 0x7e;
	fprintf(stderr, "ah-dump: --limit reached (at the end of a key); more "
	        "follow from key %s (--from ", ke);
	sh_quote(stderr, ke);
	if (!printable && !d->hex) {
		char *h = malloc(2 * len + 1);

		if (!h)
			return AH_ENOMEM;
		h[tool_hex(k, len, h)] = 0;
		fprintf(stderr, ", or with --hex: --from %s", h);
		free(h);
	}
	fputs(")\n", stderr);
	return 0;
}
