/*
 * tools/dump/data.c - ah-dump's commands over one arrangement's contents:
 * arrangements, batches, chunks, read, keys, get (their options are
 * tools/dump/args.c's).
 *
 * Keys and vals print in the canonical escape (tools/common/escape.h), or
 * in hex with --hex, in the human form and as JSON strings alike, and the
 * KEY, --from, --to, --prefix and --val arguments are read the same way,
 * so that what one command prints can be passed back to another as it is.
 *
 * Reads need a readable time (since <= as_of < upper): without one the
 * answer is an error naming why (nothing sealed, or compacted up to the
 * upper), never an empty success; a key that `get` does not find is an
 * error too (AH_ENOTFOUND), not an empty answer.
 *
 * It must never print a key or val but through dump_bytes (the escape, or
 * hex with --hex), and never write the heap: it reads the run's snapshot
 * only.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/common/fmt.h"
#include "tools/dump/dump.h"

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
		by[TOOL_FMT_LEN], row[96], rest[160];
	int n;

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
		tj_ku64(&d->j, "format", b->format);
		tj_ku64(&d->j, "filter_keys", b->filter_keys);
		tj_ku64(&d->j, "filter_bytes", b->filter_bytes);
		tj_obj_end(&d->j);
		return 0;
	}
	/* Times up to 2^64 - 1 do not fit their columns, nor a row with a
	 * marker (* and v1) past DUMP_COLUMNS: then the counts go on a
	 * second line, under their own columns, within DUMP_COLUMNS. */
	n = snprintf(row, sizeof row, "%8" PRIu64 " %10" PRIu64 " %10" PRIu64
	             " %10" PRIu64, b->id, b->lower, b->upper, b->since);
	n += snprintf(rest, sizeof rest, " %13s %11s %11s %7s %10s%s%s",
	              tool_fmt_count(u, b->updates), tool_fmt_count(k, b->keys),
	              tool_fmt_count(v, b->vals), tool_fmt_count(c, b->chunks),
	              tool_fmt_bytes(by, b->bytes), b->partial ? " *" : "",
	              b->format < 2 ? " v1" : "");
	if (n > DUMP_COLUMNS)
		printf("%s\n%41s%s\n", row, "", rest);
	else
		printf("%s%s\n", row, rest);
	return 0;
}

/* [0]: partial outputs, [1]: batches that may hold version-1 chunks */
static int count_partial(const ah_batch_info *b, void *user)
{
	((uint64_t *)user)[0] += b->partial;
	((uint64_t *)user)[1] += b->format < 2;
	return 0;
}

int cmd_batches(dump *d, int argc, char **argv)
{
	ah_arrangement_info info;
	uint64_t counts[2] = { 0, 0 }, partials;
	int rc;

	if (argc != 1)
		return 2;
	if ((rc = dump_arrangement(d, argv[0], &info)))
		return rc;
	dump_json_list(d, argv[0], "batches");
	if (!d->json) {
		printf("%8s %10s %10s %10s %13s %11s %11s %7s %10s\n", "id", "lower",
		       "upper", "since", "updates", "keys", "vals", "chunks",
		       "bytes");
	}
	if ((rc = ah_batch_foreach(d->txn, argv[0], count_partial, counts)) ||
	    (rc = ah_batch_foreach(d->txn, argv[0], print_batch, d)))
		return dump_lib_error(d, rc, argv[0]);
	partials = counts[0];
	if (!d->json && counts[1])
		printf("v1: %" PRIu64 " batch%s of version-1 chunks (written before "
		       "format 4; a merge rewrites them)\n", counts[1],
		       counts[1] == 1 ? "" : "es");
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	} else if (info.merging) {
		/* A merge is listed once it has written output; one that has
		 * not run yet (waiting for fuel) has no row. */
		if (partials)
			printf("* output so far of a merge in progress (not yet in the "
			       "chain)\n");
		printf("merges in progress: %" PRIu64 ", %" PRIu64 " with output so "
		       "far (marked *)\n", info.merging, partials);
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
		tj_ku64(&d->j, "block_bytes", c->block_bytes);
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
	int rc;

	if (argc != 1)
		return 2;
	if ((rc = dump_arrangement(d, argv[0], NULL)))
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

/* The default as_of is upper - 1; an arrangement with no readable time
 * (nothing sealed, or compacted up to its upper) says which, whatever the
 * command; an --as-of outside [since, upper) gets the library's message. */
static int resolve_as_of(dump *d, const char *cmd, dump_args *a, char *what,
                         size_t wlen)
{
	ah_arrangement_info info;
	int rc;

	if ((rc = dump_arrangement(d, a->name, &info)))
		return rc;
	if (!a->have_as_of && info.upper == 0)
		return dump_fail(d, AH_ENOTREADY, "%s: %s %s: no readable time yet: "
		                 "nothing is sealed (upper 0); reads need since <= T "
		                 "< upper", d->heap_path, cmd, a->name);
	if (!a->have_as_of && info.since == info.upper)
		return dump_fail(d, AH_ENOTREADY, "%s: %s %s: no readable time: "
		                 "since = upper = %" PRIu64 " (compacted up to its "
		                 "upper); it is readable at %" PRIu64 " once its upper "
		                 "passes that", d->heap_path, cmd, a->name,
		                 info.upper, info.since);
	if (!a->have_as_of)
		a->as_of = info.upper - 1;
	snprintf(what, wlen, "%s %s as of %" PRIu64, cmd, a->name, a->as_of);
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

/* What a scan of vals prints and counts. */
typedef struct scan {
	const dump_args *a;
	uint64_t rows;     /* printed (or counted) */
	bool quiet;        /* count only (a's --count, or a first pass) */
	bool cut;          /* --limit stopped it (before key cut_key) */
	const void *cut_key;
	size_t cut_len;
} scan;

/* Prints (or counts) the current key's vals with a non-zero sum as of
 * as_of; key (printed form) NULL prints VAL<TAB>DIFF. */
static int print_vals(dump *d, ah_cursor *c, const char *key, scan *s)
{
	const void *v;
	size_t vl;
	int64_t sum;
	int rc = 0;

	for (; ah_cursor_val_valid(c); rc = ah_cursor_step_val(c)) {
		const char *ve;

		if (rc < 0 || (rc = ah_cursor_val(c, &v, &vl)) < 0 ||
		    (rc = ah_cursor_accumulate(c, s->a->as_of, &sum)) < 0)
			return rc;
		if (sum == 0)
			continue;
		s->rows++;
		if (s->quiet)
			continue;
		if (!(ve = dump_bytes(d, v, vl)))
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

static void json_head(dump *d, const dump_args *a, bool key, const char *list)
{
	tj_obj(&d->j);
	tj_kstr(&d->j, "arrangement", a->name);
	if (key)
		tj_kstr(&d->j, "key", dump_bytes(d, a->key, a->key_len));
	tj_ku64(&d->j, "as_of", a->as_of);
	if (list) {
		tj_key(&d->j, list);
		tj_arr(&d->j);
	}
}

/* The end of a listing: the count, or the list closed with truncated. */
static int list_end(dump *d, const scan *s, bool always_truncated)
{
	int rc = 0;

	if (s->a->count) {
		if (d->json)
			tj_ku64(&d->j, "count", s->rows);
		else
			printf("%" PRIu64 "\n", s->rows);
	} else if (d->json) {
		tj_arr_end(&d->j);
		if (always_truncated || s->a->have_limit)
			tj_kbool(&d->j, "truncated", s->cut);
	}
	if (s->cut)
		rc = dump_limit_note(d, s->cut_key, s->cut_len);
	if (d->json)
		tj_obj_end(&d->j);
	return rc;
}

int cmd_read(dump *d, int argc, char **argv)
{
	dump_args a;
	scan s = { &a, 0, false, false, NULL, 0 };
	ah_cursor *c = NULL;
	const void *start;
	size_t slen;
	char what[128];
	bool stopped = false;
	int rc;

	if ((rc = dump_args_parse(d, argc, argv, DA_AS_OF | DA_RANGE, &a)) ||
	    (rc = resolve_as_of(d, "read", &a, what, sizeof what)))
		goto out;
	s.quiet = a.count;
	dump_range_start(&a, &start, &slen);
	if ((rc = ah_cursor_open_at(d->txn, a.name, start, slen, &c)) < 0)
		goto fail;
	if (d->json)
		json_head(d, &a, false, a.count ? NULL : "rows");
	for (; ah_cursor_key_valid(c); rc = ah_cursor_step_key(c)) {
		const void *k;
		size_t kl;
		char *key;
		const char *ke;

		if (rc < 0 || (rc = ah_cursor_key(c, &k, &kl)) < 0)
			break;
		if ((stopped = dump_range_past(&a, k, kl)))
			break;
		/* --limit cuts between keys only, so that --from the next key
		 * resumes exactly where this listing stopped; a key with no
		 * row to print is passed over, not named. */
		if (a.have_limit && s.rows >= a.limit) {
			scan probe = { &a, 0, true, false, NULL, 0 };

			if ((rc = print_vals(d, c, NULL, &probe)) < 0)
				break;
			if (probe.rows == 0)
				continue;
			s.cut = stopped = true;
			s.cut_key = k;
			s.cut_len = kl;
			break;
		}
		if (!(ke = dump_bytes(d, k, kl)) || !(key = strdup(ke))) {
			rc = AH_ENOMEM;
			break;
		}
		rc = print_vals(d, c, key, &s);
		free(key);
		if (rc < 0)
			break;
	}
	if (!stopped)
		rc = cursor_end(c, rc);
	if (rc < 0)
		goto fail;
	rc = list_end(d, &s, false) < 0 ? AH_ENOMEM : 0;
	if (rc == 0)
		goto out;
fail:
	rc = dump_lib_error(d, rc, what);
out:
	if (c && ah_cursor_close(c) < 0 && rc == 0)
		rc = dump_lib_error(d, AH_ECORRUPT, what);
	dump_args_free(&a);
	return rc;
}

int cmd_get(dump *d, int argc, char **argv)
{
	dump_args a;
	scan probe = { &a, 0, true, false, NULL, 0 };
	scan s = { &a, 0, false, false, NULL, 0 };
	ah_cursor *c = NULL;
	char what[128];
	const void *k;
	size_t kl;
	bool found = false;
	int rc;

	if ((rc = dump_args_parse(d, argc, argv, DA_KEY | DA_AS_OF, &a)) ||
	    (rc = resolve_as_of(d, "get", &a, what, sizeof what)))
		goto out;
	if ((rc = ah_cursor_open_at(d->txn, a.name, a.key, a.key_len, &c)) < 0)
		goto fail;
	if (ah_cursor_key_valid(c)) {
		if ((rc = ah_cursor_key(c, &k, &kl)) < 0)
			goto fail;
		found = !dump_bytes_cmp(k, kl, a.key, a.key_len);
	} else if ((rc = cursor_end(c, 0)) < 0) {
		goto fail;
	}
	if (!found) {
		rc = dump_fail(d, AH_ENOTFOUND, "%s: %s: no key %s", d->heap_path,
		               what, a.key_s);
		goto out;
	}
	/* Counted first: a key whose vals all sum to zero is not found
	 * either, and then no document is begun. */
	if ((rc = print_vals(d, c, NULL, &probe)) < 0 ||
	    (rc = ah_cursor_rewind_vals(c)) < 0)
		goto fail;
	if (probe.rows == 0) {
		rc = dump_fail(d, AH_ENOTFOUND, "%s: %s: key %s has no val with a "
		               "non-zero sum (ah-dump %s history %s %s lists its "
		               "updates)", d->heap_path, what, a.key_s, d->heap_path,
		               a.name, a.key_s);
		goto out;
	}
	if (d->json)
		json_head(d, &a, true, "vals");
	if ((rc = print_vals(d, c, NULL, &s)) < 0)
		goto fail;
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
	dump_args_free(&a);
	return rc;
}

int cmd_keys(dump *d, int argc, char **argv)
{
	dump_args a;
	scan s = { &a, 0, false, false, NULL, 0 };
	ah_cursor *c = NULL;
	const void *start, *k;
	size_t slen, kl;
	bool stopped = false;
	int rc;

	if ((rc = dump_args_parse(d, argc, argv, DA_RANGE, &a)) ||
	    (rc = dump_arrangement(d, a.name, NULL)))
		goto out;
	dump_range_start(&a, &start, &slen);
	if ((rc = ah_cursor_open_at(d->txn, a.name, start, slen, &c)) < 0)
		goto fail;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "arrangement", a.name);
		if (!a.count) {
			tj_key(&d->j, "keys");
			tj_arr(&d->j);
		}
	}
	for (; ah_cursor_key_valid(c); rc = ah_cursor_step_key(c)) {
		const char *ke;

		if (rc < 0 || (rc = ah_cursor_key(c, &k, &kl)) < 0)
			goto fail;
		if ((stopped = dump_range_past(&a, k, kl)))
			break;
		if (a.have_limit && s.rows == a.limit) {
			s.cut = stopped = true;
			s.cut_key = k;
			s.cut_len = kl;
			break;
		}
		s.rows++;
		if (a.count)
			continue;
		if (!(ke = dump_bytes(d, k, kl))) {
			rc = AH_ENOMEM;
			goto fail;
		}
		if (d->json)
			tj_str(&d->j, ke);
		else
			printf("%s\n", ke);
	}
	if (!stopped)
		rc = cursor_end(c, rc);
	if (rc < 0)
		goto fail;
	rc = list_end(d, &s, true) < 0 ? AH_ENOMEM : 0;
	if (rc == 0)
		goto out;
fail:
	rc = dump_lib_error(d, rc, a.name);
out:
	ah_cursor_close(c);
	dump_args_free(&a);
	return rc;
}
