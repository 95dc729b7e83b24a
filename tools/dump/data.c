/*
 * tools/dump/data.c - ah-dump's commands over one arrangement's contents:
 * arrangements, batches, chunks, read, keys, get.
 *
 * Keys and vals print in the canonical escape (tools/common/escape.h), in
 * the human form and as JSON strings alike, so that what `keys` prints can
 * be passed back to `get` and `--prefix` as it is.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/escape.h"
#include "tools/common/fmt.h"
#include "tools/dump/dump.h"

/* Looks NAME up; an unknown arrangement is one line and exit 1. */
static int arrangement(dump *d, const char *name, ah_arrangement_info *info)
{
	int rc = ah_arrangement_info_get(d->txn, name, info);

	if (rc == AH_ENOTFOUND || rc == AH_EINVAL) {
		fprintf(stderr, "ah-dump: %s: unknown arrangement %s\n",
		        d->heap_path, name);
		return 1;
	}
	return rc < 0 ? dump_lib_error(d, rc, name) : 0;
}

int cmd_arrangements(dump *d, int argc, char **argv)
{
	char name[AH_NAME_MAX + 1];
	int rc;

	(void)argv;
	if (argc != 0)
		return 2;
	dump_json_list(d, NULL, "arrangements");
	for (rc = ah_arrangement_next(d->txn, NULL, name); rc == 0;
	     rc = ah_arrangement_next(d->txn, name, name))
		if (d->json)
			tj_str(&d->j, name);
		else
			printf("%s\n", name);
	if (rc != AH_ENOTFOUND)
		return dump_lib_error(d, rc, "list arrangements");
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	return 0;
}

/* ------------------------------------------------------------ batches */

static int print_batch(const ah_batch_info *b, void *user)
{
	dump *d = user;
	char u[TOOL_FMT_LEN], k[TOOL_FMT_LEN], v[TOOL_FMT_LEN], c[TOOL_FMT_LEN],
		by[TOOL_FMT_LEN];

	if (d->json) {
		tj_obj(&d->j);
		tj_ku64(&d->j, "id", b->id);
		tj_ku64(&d->j, "lower", b->lower);
		tj_ku64(&d->j, "upper", b->upper);
		tj_ku64(&d->j, "since", b->since);
		tj_ku64(&d->j, "updates", b->updates);
		tj_ku64(&d->j, "keys", b->keys);
		tj_ku64(&d->j, "vals", b->vals);
		tj_ku64(&d->j, "chunks", b->chunks);
		tj_ku64(&d->j, "bytes", b->bytes);
		tj_ku64(&d->j, "chunk_bytes", b->chunk_bytes);
		tj_kbool(&d->j, "partial", b->partial);
		tj_obj_end(&d->j);
		return 0;
	}
	printf("%8" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
	       " %13s %11s %11s %7s %10s%s\n", b->id, b->lower, b->upper,
	       b->since, tool_fmt_count(u, b->updates), tool_fmt_count(k, b->keys),
	       tool_fmt_count(v, b->vals), tool_fmt_count(c, b->chunks),
	       tool_fmt_bytes(by, b->bytes), b->partial ? " *" : "");
	return 0;
}

int cmd_batches(dump *d, int argc, char **argv)
{
	ah_arrangement_info info;
	int rc;

	if (argc != 1)
		return 2;
	if ((rc = arrangement(d, argv[0], &info)))
		return rc;
	dump_json_list(d, argv[0], "batches");
	if (!d->json) {
		printf("%8s %10s %10s %10s %13s %11s %11s %7s %10s\n", "id", "lower",
		       "upper", "since", "updates", "keys", "vals", "chunks",
		       "bytes");
	}
	if ((rc = ah_batch_foreach(d->txn, argv[0], print_batch, d)))
		return dump_lib_error(d, rc, argv[0]);
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	} else if (info.merging) {
		printf("* output so far of a merge in progress (not yet in the "
		       "chain)\n");
	}
	return 0;
}

/* ------------------------------------------------------------- chunks */

static int print_chunk(const ah_chunk_info *c, void *user)
{
	dump *d = user;
	char by[TOOL_FMT_LEN], cl[16], x[20];

	snprintf(x, sizeof x, "%016" PRIx64, c->xxh3);
	if (d->json) {
		tj_obj(&d->j);
		tj_ku64(&d->j, "id", c->id);
		tj_ku64(&d->j, "batch", c->batch);
		tj_ku64(&d->j, "class_pages", c->class_pages);
		tj_ku64(&d->j, "bytes", c->bytes);
		tj_ku64(&d->j, "stored_bytes", c->stored_bytes);
		tj_ku64(&d->j, "file_offset", c->file_offset);
		tj_kstr(&d->j, "xxh3", x);
		tj_obj_end(&d->j);
		return 0;
	}
	snprintf(cl, sizeof cl, "%" PRIu32 "p", c->class_pages);
	printf("%10" PRIu64 " %8" PRIu64 " %6s %10s %14" PRIu64 "  %s\n", c->id,
	       c->batch, cl, tool_fmt_bytes(by, c->bytes), c->file_offset, x);
	return 0;
}

int cmd_chunks(dump *d, int argc, char **argv)
{
	ah_arrangement_info info;
	int rc;

	if (argc != 1)
		return 2;
	if ((rc = arrangement(d, argv[0], &info)))
		return rc;
	dump_json_list(d, argv[0], "chunks");
	if (!d->json) {
		printf("%10s %8s %6s %10s %14s  %s\n", "id", "batch", "class",
		       "used", "file offset", "xxh3");
	}
	if ((rc = ah_chunk_foreach(d->txn, argv[0], print_chunk, d)))
		return dump_lib_error(d, rc, argv[0]);
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	return 0;
}

/* ------------------------------------------------------ read, keys, get */

/* Options NAME [KEY] [--as-of T] [--prefix P] [--limit N]; which of them a
 * command takes is given by the flags. */
typedef struct args {
	const char *name, *key, *prefix;
	uint64_t as_of, limit;
	bool have_as_of;
} args;

enum { A_KEY = 1, A_AS_OF = 2, A_PREFIX = 4, A_LIMIT = 8 };

static int parse_args(int argc, char **argv, unsigned which, args *a)
{
	memset(a, 0, sizeof *a);
	for (int i = 0; i < argc; i++) {
		const char *o = argv[i];
		bool val = i + 1 < argc;

		if ((which & A_AS_OF) && !strcmp(o, "--as-of") && val) {
			if (dump_parse_u64(o, argv[++i], &a->as_of) < 0)
				return 2;
			a->have_as_of = true;
		} else if ((which & A_LIMIT) && !strcmp(o, "--limit") && val) {
			if (dump_parse_u64(o, argv[++i], &a->limit) < 0)
				return 2;
		} else if ((which & A_PREFIX) && !strcmp(o, "--prefix") && val) {
			a->prefix = argv[++i];
		} else if (!a->name && o[0] != '-') {
			a->name = o;
		} else if ((which & A_KEY) && !a->key && a->name) {
			a->key = o;
		} else {
			return 2;
		}
	}
	return a->name && (!(which & A_KEY) || a->key) ? 0 : 2;
}

/* Decodes a KEY or --prefix argument into *out (malloc'd). */
static int unescape_arg(const char *what, const char *s, void **out,
                        size_t *len)
{
	const char *reason;

	*out = malloc(strlen(s) + 1);
	if (!*out) {
		fprintf(stderr, "ah-dump: out of memory\n");
		return 1;
	}
	if (tool_unescape(s, strlen(s), *out, len, &reason) < 0) {
		fprintf(stderr, "ah-dump: bad %s \"%s\": %s\n", what, s, reason);
		free(*out);
		*out = NULL;
		return 2;
	}
	return 0;
}

/* The default as_of is upper - 1 (upper 0: nothing sealed, and as_of 0 then
 * fails as "not complete"); checks it against [since, upper). */
static int resolve_as_of(dump *d, args *a, char *what, size_t wlen)
{
	ah_arrangement_info info;
	int rc;

	if ((rc = arrangement(d, a->name, &info)))
		return rc;
	if (!a->have_as_of)
		a->as_of = info.upper ? info.upper - 1 : 0;
	snprintf(what, wlen, "read %s as of %" PRIu64, a->name, a->as_of);
	rc = ah_check_as_of(d->txn, a->name, a->as_of);
	return rc < 0 ? dump_lib_error(d, rc, what) : 0;
}

/* ah_cursor_key_valid is 0 past the end and after an error alike (a chunk
 * that fails its checks when the cursor first reads it): a step, a no-op
 * at the end, says which, so a damaged arrangement is never printed as an
 * empty one. */
static int cursor_end(ah_cursor *c, int rc)
{
	return rc < 0 ? rc : ah_cursor_step_key(c);
}

/* Prints the current key's vals with a non-zero sum as of as_of. */
static int print_vals(dump *d, ah_cursor *c, const char *key, uint64_t as_of)
{
	const void *v;
	size_t vl;
	int64_t sum;
	int rc = 0;

	for (; ah_cursor_val_valid(c); rc = ah_cursor_step_val(c)) {
		const char *ve;

		if (rc < 0 || (rc = ah_cursor_val(c, &v, &vl)) < 0 ||
		    (rc = ah_cursor_accumulate(c, as_of, &sum)) < 0)
			return rc;
		if (sum == 0)
			continue;
		if (!(ve = dump_escape(d, v, vl)))
			return AH_ENOMEM;
		if (d->json) {
			tj_obj(&d->j);
			if (key)
				tj_kstr(&d->j, "key", key);
			tj_kstr(&d->j, "val", ve);
			tj_ki64(&d->j, "diff", sum);
			tj_obj_end(&d->j);
		} else if (key) {
			printf("%s\t%s\t%" PRId64 "\n", key, ve, sum);
		} else {
			printf("%s\t%" PRId64 "\n", ve, sum);
		}
	}
	return rc;
}

static void json_head(dump *d, const args *a, const char *list)
{
	tj_obj(&d->j);
	tj_kstr(&d->j, "arrangement", a->name);
	if (a->key)
		tj_kstr(&d->j, "key", a->key);
	tj_ku64(&d->j, "as_of", a->as_of);
	tj_key(&d->j, list);
	tj_arr(&d->j);
}

int cmd_read(dump *d, int argc, char **argv)
{
	args a;
	ah_cursor *c = NULL;
	char what[128];
	int rc;

	if ((rc = parse_args(argc, argv, A_AS_OF, &a)) ||
	    (rc = resolve_as_of(d, &a, what, sizeof what)))
		return rc;
	if ((rc = ah_cursor_open(d->txn, a.name, &c)) < 0)
		return dump_lib_error(d, rc, what);
	if (d->json)
		json_head(d, &a, "rows");
	for (; ah_cursor_key_valid(c); rc = ah_cursor_step_key(c)) {
		const void *k;
		size_t kl;
		char *key;
		const char *ke;

		if (rc < 0 || (rc = ah_cursor_key(c, &k, &kl)) < 0)
			break;
		if (!(ke = dump_escape(d, k, kl)) || !(key = strdup(ke))) {
			rc = AH_ENOMEM;
			break;
		}
		rc = print_vals(d, c, key, a.as_of);
		free(key);
		if (rc < 0)
			break;
	}
	{
		int crc = ah_cursor_close(c);

		if (rc >= 0)
			rc = crc;
	}
	if (rc < 0)
		return dump_lib_error(d, rc, what);
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	return 0;
}

int cmd_get(dump *d, int argc, char **argv)
{
	args a;
	ah_cursor *c = NULL;
	char what[128];
	void *key = NULL;
	size_t klen;
	const void *k;
	size_t kl;
	int rc;

	if ((rc = parse_args(argc, argv, A_KEY | A_AS_OF, &a)) ||
	    (rc = unescape_arg("KEY", a.key, &key, &klen)) ||
	    (rc = resolve_as_of(d, &a, what, sizeof what)))
		goto out;
	if ((rc = ah_cursor_open_at(d->txn, a.name, key, klen, &c)) < 0)
		goto fail;
	if (d->json)
		json_head(d, &a, "vals");
	if (ah_cursor_key_valid(c)) {
		if ((rc = ah_cursor_key(c, &k, &kl)) < 0)
			goto fail;
		if (kl == klen && (klen == 0 || !memcmp(k, key, klen)) &&
		    (rc = print_vals(d, c, NULL, a.as_of)) < 0)
			goto fail;
	}
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	rc = 0;
	goto out;
fail:
	rc = dump_lib_error(d, rc, what);
out:
	ah_cursor_close(c);
	free(key);
	return rc;
}

int cmd_keys(dump *d, int argc, char **argv)
{
	args a;
	ah_arrangement_info info;
	ah_cursor *c = NULL;
	void *pre = NULL;
	size_t plen = 0;
	uint64_t n = 0;
	bool more = false;
	const void *k;
	size_t kl;
	int rc;

	if ((rc = parse_args(argc, argv, A_PREFIX | A_LIMIT, &a)) ||
	    (a.prefix && (rc = unescape_arg("--prefix", a.prefix, &pre, &plen))) ||
	    (rc = arrangement(d, a.name, &info)))
		goto out;
	if ((rc = ah_cursor_open_at(d->txn, a.name, pre, plen, &c)) < 0)
		goto fail;
	dump_json_list(d, a.name, "keys");
	for (; ah_cursor_key_valid(c); rc = ah_cursor_step_key(c)) {
		const char *ke;

		if (rc < 0 || (rc = ah_cursor_key(c, &k, &kl)) < 0)
			goto fail;
		if (kl < plen || (plen && memcmp(k, pre, plen) != 0))
			break;
		if (a.limit && n == a.limit) {
			more = true;
			break;
		}
		if (!(ke = dump_escape(d, k, kl))) {
			rc = AH_ENOMEM;
			goto fail;
		}
		n++;
		if (d->json)
			tj_str(&d->j, ke);
		else
			printf("%s\n", ke);
	}
	if (!more)
		rc = cursor_end(c, rc);
	if (rc < 0)
		goto fail;
	if (d->json) {
		tj_arr_end(&d->j);
		tj_kbool(&d->j, "truncated", more);
		tj_obj_end(&d->j);
	}
	rc = 0;
	goto out;
fail:
	rc = dump_lib_error(d, rc, a.name);
out:
	ah_cursor_close(c);
	free(pre);
	return rc;
}
