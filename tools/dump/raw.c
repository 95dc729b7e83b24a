/*
 * tools/dump/raw.c - ah-dump's views of the raw (key, val, time, diff)
 * updates, batch by batch, as they are stored: `history NAME KEY` (every
 * update of one key, per batch of the trace, oldest first) and `updates
 * NAME --batch ID` (every update of one batch), the first thing to look at
 * when a differential-dataflow answer is wrong (RocksDB's sst_dump scan
 * with sequence numbers).
 *
 * Both read through ah_cursor_open_batch, which reports times as stored:
 * a time below the arrangement's since is one a read advances to since
 * (the batch was not merged since then).  Neither sums anything: `get` and
 * `read` give the answers.
 *
 * It must never print a key or val but through dump_bytes, nor a time other
 * than the stored one: nothing here advances, sums or consolidates.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/dump/dump.h"

/* Prints (key, val) = the cursor's current position's (time, diff) pairs:
 * BATCH<TAB>VAL<TAB>TIME<TAB>DIFF (history: batch set, key NULL) or
 * KEY<TAB>VAL<TAB>TIME<TAB>DIFF (updates), or JSON objects.  Counts in *n
 * (updates' --limit cuts between keys, with *cut). */
typedef struct out {
	uint64_t batch;      /* history: the batch printed */
	const char *key;     /* updates: the current key, printed form */
	uint64_t n;
	bool count, cut;
} out;

static int print_times(dump *d, ah_cursor *c, out *o)
{
	const void *v;
	size_t vl;
	uint64_t tm;
	int64_t diff;
	char *ve = NULL;
	int rc;

	if ((rc = ah_cursor_val(c, &v, &vl)) < 0)
		return rc;
	while ((rc = ah_cursor_time_next(c, &tm, &diff)) == 1) {
		o->n++;
		if (o->count)
			continue;
		if (!ve) {
			const char *p = dump_bytes(d, v, vl);

			if (!p || !(ve = strdup(p))) {
				rc = AH_ENOMEM;
				break;
			}
		}
		if (d->json) {
			tj_obj(&d->j);
			if (o->key)
				tj_kstr(&d->j, "key", o->key);
			tj_kstr(&d->j, "val", ve);
			tj_ku64(&d->j, "time", tm);
			tj_ki64(&d->j, "diff", diff);
			tj_obj_end(&d->j);
		} else if (o->key) {
			printf("%s\t%s\t%" PRIu64 "\t%" PRId64 "\n", o->key, ve, tm, diff);
		} else {
			printf("%" PRIu64 "\t%s\t%" PRIu64 "\t%" PRId64 "\n", o->batch, ve,
			       tm, diff);
		}
	}
	free(ve);
	return rc < 0 ? rc : 0;
}

/* ------------------------------------------------------------ history */

typedef struct ids {
	uint64_t *id;
	ah_batch_info *info;
	size_t n, cap;
} ids;

static int collect(const ah_batch_info *b, void *user)
{
	ids *l = user;

	if (b->partial)
		return 0; /* a merge's output so far repeats its inputs */
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		ah_batch_info *in = realloc(l->info, cap * sizeof *in);

		if (!in)
			return AH_ENOMEM;
		l->info = in;
		l->cap = cap;
	}
	l->info[l->n++] = *b;
	return 0;
}

/* One batch's updates of a->key (and --val): 0, or an AH_E* code. */
static int history_batch(dump *d, const dump_args *a, const ah_batch_info *b,
                         out *o)
{
	ah_cursor *c = NULL;
	const void *k;
	size_t kl;
	bool open = false;
	int rc;

	if ((rc = ah_cursor_open_batch(d->txn, a->name, b->id, &c)) < 0)
		return rc;
	rc = ah_cursor_seek_key(c, a->key, a->key_len);
	if (rc == 1 && (rc = ah_cursor_key(c, &k, &kl)) == 0 &&
	    !dump_bytes_cmp(k, kl, a->key, a->key_len)) {
		rc = a->have_val ? ah_cursor_seek_val(c, a->val, a->val_len)
		                 : ah_cursor_val_valid(c);
		for (; rc == 1; rc = a->have_val ? 0 : ah_cursor_step_val(c)) {
			const void *v;
			size_t vl;

			if ((rc = ah_cursor_val(c, &v, &vl)) < 0)
				break;
			if (a->have_val && dump_bytes_cmp(v, vl, a->val, a->val_len))
				break;
			if (d->json && !open) {
				tj_obj(&d->j);
				tj_ku64(&d->j, "batch", b->id);
				tj_ku64(&d->j, "lower", b->lower);
				tj_ku64(&d->j, "upper", b->upper);
				tj_ku64(&d->j, "since", b->since);
				tj_key(&d->j, "updates");
				tj_arr(&d->j);
				open = true;
			}
			if ((rc = print_times(d, c, o)) < 0)
				break;
		}
	}
	if (open) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	{
		int crc = ah_cursor_close(c);

		return rc < 0 ? rc : crc;
	}
}

int cmd_history(dump *d, int argc, char **argv)
{
	dump_args a;
	ah_arrangement_info info;
	ids l = { 0 };
	out o = { 0 };
	char what[160];
	int rc;

	if ((rc = dump_args_parse(d, argc, argv, DA_KEY | DA_VAL, &a)) ||
	    (rc = dump_arrangement(d, a.name, &info)))
		goto out;
	snprintf(what, sizeof what, "history %s", a.name);
	if ((rc = ah_batch_foreach(d->txn, a.name, collect, &l)) < 0) {
		rc = dump_lib_error(d, rc, what);
		goto out;
	}
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "arrangement", a.name);
		tj_kstr(&d->j, "key", dump_bytes(d, a.key, a.key_len));
		if (a.have_val)
			tj_kstr(&d->j, "val", dump_bytes(d, a.val, a.val_len));
		tj_ku64(&d->j, "upper", info.upper);
		tj_ku64(&d->j, "since", info.since);
		tj_key(&d->j, "batches");
		tj_arr(&d->j);
	}
	for (size_t i = 0; i < l.n; i++) {
		o.batch = l.info[i].id;
		if ((rc = history_batch(d, &a, &l.info[i], &o)) < 0) {
			rc = dump_lib_error(d, rc, what);
			goto out;
		}
	}
	if (o.n == 0) {
		rc = dump_fail(d, AH_ENOTFOUND, "%s: %s: no update of key %s%s%s in "
		               "any batch", d->heap_path, what, a.key_s,
		               a.have_val ? " with val " : "", a.have_val ? a.val_s
		                                                          : "");
		goto out;
	}
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	rc = 0;
out:
	free(l.info);
	dump_args_free(&a);
	return rc;
}

/* ------------------------------------------------------------ updates */

static int find_batch(const ah_batch_info *b, void *user)
{
	ah_batch_info *want = user;

	if (b->id != want->id)
		return 0;
	*want = *b;
	return 1;
}

int cmd_updates(dump *d, int argc, char **argv)
{
	dump_args a;
	ah_batch_info b = { 0 };
	ah_cursor *c = NULL;
	out o = { 0 };
	const void *start, *k;
	size_t slen, kl;
	char what[160];
	bool stopped = false;
	int rc;

	if ((rc = dump_args_parse(d, argc, argv, DA_BATCH | DA_RANGE, &a)) ||
	    (rc = dump_arrangement(d, a.name, NULL)))
		goto out;
	snprintf(what, sizeof what, "updates %s --batch %" PRIu64, a.name,
	         a.batch);
	b.id = a.batch;
	if ((rc = ah_batch_foreach(d->txn, a.name, find_batch, &b)) < 0) {
		rc = dump_lib_error(d, rc, what);
		goto out;
	}
	if (rc == 0) {
		rc = dump_fail(d, AH_ENOTFOUND, "%s: %s: %s has no batch %" PRIu64
		               " (ah-dump %s batches %s lists them)", d->heap_path,
		               what, a.name, a.batch, d->heap_path, a.name);
		goto out;
	}
	o.count = a.count;
	dump_range_start(&a, &start, &slen);
	if ((rc = ah_cursor_open_batch(d->txn, a.name, a.batch, &c)) < 0 ||
	    (slen && (rc = ah_cursor_seek_key(c, start, slen)) < 0))
		goto fail;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "arrangement", a.name);
		tj_ku64(&d->j, "batch", b.id);
		tj_ku64(&d->j, "lower", b.lower);
		tj_ku64(&d->j, "upper", b.upper);
		tj_ku64(&d->j, "since", b.since);
		tj_kbool(&d->j, "partial", b.partial);
		if (!a.count) {
			tj_key(&d->j, "updates");
			tj_arr(&d->j);
		}
	}
	for (rc = ah_cursor_key_valid(c); rc == 1 && !o.cut;
	     rc = ah_cursor_step_key(c)) {
		if ((rc = ah_cursor_key(c, &k, &kl)) < 0)
			break;
		if ((stopped = dump_range_past(&a, k, kl)))
			break;
		/* --limit cuts between keys only (--from the next key resumes
		 * exactly there). */
		if (a.have_limit && o.n >= a.limit) {
			o.cut = stopped = true;
			break;
		}
		if (!dump_bytes(d, k, kl) || !(o.key = strdup(d->buf))) {
			rc = AH_ENOMEM;
			break;
		}
		for (rc = ah_cursor_val_valid(c); rc == 1 && !o.cut;
		     rc = ah_cursor_step_val(c))
			if ((rc = print_times(d, c, &o)) < 0)
				break;
		free((char *)o.key);
		o.key = NULL;
		if (rc < 0)
			break;
		if (o.cut) {
			stopped = true;
			break;
		}
	}
	if (rc < 0)
		goto fail;
	if (a.count) {
		if (d->json)
			tj_ku64(&d->j, "count", o.n);
		else
			printf("%" PRIu64 "\n", o.n);
	} else if (d->json) {
		tj_arr_end(&d->j);
		if (a.have_limit)
			tj_kbool(&d->j, "truncated", o.cut);
	}
	if (o.cut && ah_cursor_key_valid(c) &&
	    (rc = ah_cursor_key(c, &k, &kl)) == 0)
		rc = dump_limit_note(d, k, kl);
	if (rc < 0)
		goto fail;
	(void)stopped;
	if (d->json)
		tj_obj_end(&d->j);
	rc = 0;
	goto out;
fail:
	rc = dump_lib_error(d, rc, what);
out:
	ah_cursor_close(c);
	dump_args_free(&a);
	return rc;
}
