/*
 * tools/dump/heap.c - ah-dump's whole-heap commands: the summary, source
 * and verify (space and backup are in space.c).
 *
 * The summary starts with one "arrangement NAME: ..." line per arrangement
 * and one "source NAME: position P" line per source (scripts and tests grep
 * these; a position of several lines of text follows its line, indented,
 * and a long one is cut: `source NAME` prints any position whole), then
 * the heap's own figures as aligned "label  value" lines.
 *
 * It must never print stored bytes that may not be printable as they are,
 * except in `source NAME` without --hex, whose point is a position's exact
 * bytes: the summary shows positions escaped or in hex, and verify's
 * arrangement names are escaped (names from ah_arrangement_next and
 * ah_source_next are valid names, checked by the library).  It never
 * writes the heap.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tools/common/escape.h"
#include "tools/common/fmt.h"
#include "tools/dump/dump.h"

/* ------------------------------------------------------------ summary */

/* Text: printable ASCII, TAB and LF (a position of several lines, as
 * ah-pgsync's pg.tables). */
static bool is_text(const unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n') || p[i] >= 0x7f)
			return false;
	return len > 0;
}

/* What the summary shows of a position: at most this much. */
#define SHOW_BYTES 200
#define SHOW_LINES 8
#define SHOW_HEX 64

/* The summary's line for source NAME and, for text of several lines, the
 * lines after it; a cut position says how to see all of it. */
static int human_position(dump *d, const char *name, const unsigned char *p,
                          size_t len)
{
	char n[TOOL_FMT_LEN], more[512];
	const char *e;

	snprintf(more, sizeof more, " (%s bytes; ah-dump %s source %s prints "
	         "it whole)", tool_fmt_count(n, len), d->heap_path, name);
	if (!is_text(p, len)) {
		size_t show = len > SHOW_HEX ? SHOW_HEX : len;

		printf("source %s: position hex:", name);
		for (size_t i = 0; i < show; i++)
			printf("%02x", p[i]);
		printf("%s\n", show < len ? more : "");
		return 0;
	}
	if (!memchr(p, '\n', len)) {
		size_t show = len > SHOW_BYTES ? SHOW_BYTES : len;

		if (!(e = dump_escape(d, p, show)))
			return 1;
		printf("source %s: position %s%s\n", name, e,
		       show < len ? more : "");
		return 0;
	}
	{
		size_t lines = 0, shown = 0, off = 0;

		for (size_t i = 0; i < len; i++)
			lines += p[i] == '\n' || i + 1 == len;
		printf("source %s: position, %zu line%s of text:\n", name, lines,
		       lines == 1 ? "" : "s");
		while (off < len && shown < SHOW_LINES && off < SHOW_BYTES * 4) {
			const unsigned char *nl = memchr(p + off, '\n', len - off);
			size_t l = nl ? (size_t)(nl - (p + off)) : len - off;

			if (!(e = dump_escape(d, p + off, l > SHOW_BYTES ? SHOW_BYTES : l)))
				return 1;
			printf("    %s%s\n", e, l > SHOW_BYTES ? "..." : "");
			off += l + (nl != NULL);
			shown++;
		}
		if (shown < lines)
			printf("    ... %zu more line%s%s\n", lines - shown,
			       lines - shown == 1 ? "" : "s", more);
	}
	return 0;
}

static void json_position(dump *d, const unsigned char *p, size_t len)
{
	char *hx = malloc(2 * len + 1);

	tj_key(&d->j, "position");
	if (is_text(p, len))
		tj_strn(&d->j, p, len);
	else
		tj_null(&d->j);
	if (hx)
		hx[tool_hex(p, len, hx)] = 0;
	tj_kstr(&d->j, "position_hex", hx ? hx : "");
	free(hx);
}

static int summary_arrangements(dump *d)
{
	char name[AH_NAME_MAX + 1], by[TOOL_FMT_LEN], u[TOOL_FMT_LEN],
		k[TOOL_FMT_LEN];
	ah_arrangement_info in;
	int rc;

	if (d->json) {
		tj_key(&d->j, "arrangements");
		tj_arr(&d->j);
	}
	for (rc = ah_arrangement_next(d->txn, NULL, name); rc == 0;
	     rc = ah_arrangement_next(d->txn, name, name)) {
		if ((rc = ah_arrangement_info_get(d->txn, name, &in)) < 0)
			return dump_lib_error(d, rc, name);
		if (!d->json) {
			char en[TOOL_ESCAPE_MAX(AH_NAME_MAX) + 1];

			en[tool_escape(name, strlen(name), en)] = 0;
			dump_line("arrangement %s: upper %" PRIu64 ", since %" PRIu64
			       ", batches %" PRIu64 ", updates %s, keys %s, bytes %s\n",
			       en, in.upper, in.since, in.batches,
			       tool_fmt_count(u, in.updates), tool_fmt_count(k, in.keys),
			       tool_fmt_bytes(by, in.bytes));
			continue;
		}
		tj_obj(&d->j);
		tj_kstr(&d->j, "name", name);
		tj_ku64(&d->j, "upper", in.upper);
		tj_ku64(&d->j, "since", in.since);
		tj_ku64(&d->j, "batches", in.batches);
		tj_ku64(&d->j, "merging", in.merging);
		tj_ku64(&d->j, "updates", in.updates);
		tj_ku64(&d->j, "keys", in.keys);
		tj_ku64(&d->j, "chunks", in.chunks);
		tj_ku64(&d->j, "bytes", in.bytes);
		tj_ku64(&d->j, "chunk_bytes", in.chunk_bytes);
		tj_obj_end(&d->j);
	}
	if (rc != AH_ENOTFOUND)
		return dump_lib_error(d, rc, "list arrangements");
	if (d->json)
		tj_arr_end(&d->j);
	return 0;
}

static int summary_sources(dump *d)
{
	char name[AH_NAME_MAX + 1];
	const void *pos;
	size_t len;
	int rc;

	if (d->json) {
		tj_key(&d->j, "sources");
		tj_arr(&d->j);
	}
	for (rc = ah_source_next(d->txn, NULL, name); rc == 0;
	     rc = ah_source_next(d->txn, name, name)) {
		if ((rc = ah_source_get(d->txn, name, &pos, &len)) < 0)
			return dump_lib_error(d, rc, name);
		if (!d->json) {
			char en[TOOL_ESCAPE_MAX(AH_NAME_MAX) + 1];

			en[tool_escape(name, strlen(name), en)] = 0;
			if (human_position(d, en, pos, len))
				return 1;
			continue;
		}
		tj_obj(&d->j);
		tj_kstr(&d->j, "name", name);
		json_position(d, pos, len);
		tj_obj_end(&d->j);
	}
	if (rc != AH_ENOTFOUND)
		return dump_lib_error(d, rc, "list sources");
	if (d->json)
		tj_arr_end(&d->j);
	return 0;
}

/* The whole position of one source: its bytes exactly (nothing added), or
 * with --hex in hex and a newline. */
int cmd_source(dump *d, int argc, char **argv)
{
	const void *pos;
	size_t len;
	int rc;

	if (argc != 1)
		return 2;
	rc = ah_source_get(d->txn, argv[0], &pos, &len);
	if (rc == AH_ENOTFOUND || rc == AH_EINVAL)
		return dump_fail(d, AH_ENOTFOUND, "%s: unknown source %s",
		                 d->heap_path, argv[0]);
	if (rc < 0)
		return dump_lib_error(d, rc, argv[0]);
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "source", argv[0]);
		tj_ku64(&d->j, "bytes", len);
		json_position(d, pos, len);
		tj_obj_end(&d->j);
	} else if (d->hex) {
		for (size_t i = 0; i < len; i++)
			printf("%02x", ((const unsigned char *)pos)[i]);
		printf("\n");
	} else if (len && fwrite(pos, 1, len, stdout) != len) {
		return dump_fail(d, AH_EIO, "write error");
	}
	return 0;
}

static void uuid_text(const uint8_t u[16], char out[37])
{
	char *p = out;

	for (int i = 0; i < 16; i++) {
		p += sprintf(p, "%02x", u[i]);
		if (i == 3 || i == 5 || i == 7 || i == 9)
			*p++ = '-';
	}
	*p = 0;
}

static void summary_heap(dump *d, const ah_heap_stat *st)
{
	char uuid[37], a[TOOL_FMT_LEN], b[TOOL_FMT_LEN], c[TOOL_FMT_LEN];

	uuid_text(st->uuid, uuid);
	if (d->json) {
		tj_kstr(&d->j, "heap", d->path);
		tj_ku64(&d->j, "format_version", st->format_version);
		tj_kstr(&d->j, "uuid", uuid);
		tj_ku64(&d->j, "page_size", st->page_size);
		tj_ku64(&d->j, "file_bytes", st->file_bytes);
		tj_ku64(&d->j, "file_alloc_bytes", st->file_alloc_bytes);
		tj_ku64(&d->j, "map_bytes", st->map_bytes);
		tj_ku64(&d->j, "pages_used", st->pages_used);
		tj_ku64(&d->j, "pages_free", st->pages_free);
		tj_ku64(&d->j, "last_txn_id", st->last_txn_id);
		tj_ku64(&d->j, "readers_used", st->readers_used);
		tj_ku64(&d->j, "readers_max", st->readers_max);
		return;
	}
	printf("\n%-14s %s\n", "heap", d->heap_path);
	printf("%-14s %" PRIu32 "\n", "format", st->format_version);
	printf("%-14s %s\n", "uuid", uuid);
	printf("%-14s %s apparent, %s allocated\n", "file size",
	       tool_fmt_bytes(a, st->file_bytes), tool_fmt_bytes(b, st->file_alloc_bytes));
	printf("%-14s %s\n", "map size", tool_fmt_bytes(a, st->map_bytes));
	printf("%-14s %s used, %s free (%s pages)\n", "pages",
	       tool_fmt_count(a, st->pages_used), tool_fmt_count(b, st->pages_free),
	       tool_fmt_bytes(c, st->page_size));
	printf("%-14s %" PRIu64 "\n", "last commit", st->last_txn_id);
	printf("%-14s %" PRIu32 " of %" PRIu32 " slots in use\n", "readers",
	       st->readers_used, st->readers_max);
}

int cmd_summary(dump *d, int argc, char **argv)
{
	ah_heap_stat st;
	int rc;

	(void)argv;
	if (argc != 0)
		return 2;
	if ((rc = ah_heap_stat_get(d->heap, &st)) < 0)
		return dump_lib_error(d, rc, "heap statistics");
	if (d->json) {
		tj_obj(&d->j);
		summary_heap(d, &st);
	}
	if ((rc = summary_arrangements(d)) || (rc = summary_sources(d)) ||
	    (rc = dump_summary_holds(d)))
		return rc;
	if (d->json)
		tj_obj_end(&d->j);
	else
		summary_heap(d, &st);
	return 0;
}

/* ------------------------------------------------------------- verify */

/* The arrangement name is escaped (tools/common/escape.h): on a damaged
 * heap it is whatever bytes the table holds. */
static int on_problem(const ah_problem *p, void *user)
{
	dump *d = user;
	const char *arr = dump_escape(d, p->arrangement, strlen(p->arrangement));

	if (!arr)
		return AH_ENOMEM;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "arrangement", arr);
		tj_ku64(&d->j, "batch", p->batch);
		tj_ku64(&d->j, "chunk", p->chunk);
		tj_kstr(&d->j, "message", p->message);
		tj_obj_end(&d->j);
		return 0;
	}
	printf("problem:");
	if (*p->arrangement)
		printf(" arrangement %s", arr);
	if (p->batch)
		printf("%s batch %" PRIu64, *p->arrangement ? "," : "", p->batch);
	if (p->chunk)
		printf("%s chunk %" PRIu64, *p->arrangement || p->batch ? "," : "",
		       p->chunk);
	printf("%s %s\n", *p->arrangement || p->batch || p->chunk ? ":" : "",
	       p->message);
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cmd_verify(dump *d, int argc, char **argv)
{
	ah_verify_stats st;
	char a[TOOL_FMT_LEN], b[TOOL_FMT_LEN], c[TOOL_FMT_LEN], by[TOOL_FMT_LEN];
	double t0 = now(), secs;
	int rc;

	(void)argv;
	if (argc != 0)
		return 2;
	dump_json_list(d, NULL, "problems");
	rc = ah_verify(d->txn, on_problem, d, &st);
	/* AH_EBUSY comes before any problem is reported: retry cleanly. */
	for (int tries = 0; rc == AH_EBUSY && tries < 3; tries++)
		if ((rc = dump_renew(d)) == 0)
			rc = ah_verify(d->txn, on_problem, d, &st);
	if (rc < 0)
		return dump_lib_error(d, rc, "verify");
	secs = now() - t0;
	if (d->json) {
		tj_arr_end(&d->j);
		tj_kbool(&d->j, "ok", st.problems == 0);
		tj_ku64(&d->j, "arrangements", st.arrangements);
		tj_ku64(&d->j, "batches", st.batches);
		tj_ku64(&d->j, "chunks", st.chunks);
		tj_ku64(&d->j, "chunk_bytes", st.chunk_bytes);
		tj_key(&d->j, "seconds");
		tj_f64(&d->j, secs, 3);
		tj_obj_end(&d->j);
	} else {
		printf("%s: %s arrangements, %s batches, %s chunks (%s) in %.2f s, "
		       "%.0f MB/s\n", st.problems ? "FAILED" : "ok",
		       tool_fmt_count(a, st.arrangements), tool_fmt_count(b, st.batches),
		       tool_fmt_count(c, st.chunks), tool_fmt_bytes(by, st.chunk_bytes),
		       secs, secs > 0 ? (double)st.chunk_bytes / 1e6 / secs : 0.0);
		if (st.problems)
			printf("%s problem%s\n", tool_fmt_count(a, st.problems),
			       st.problems == 1 ? "" : "s");
	}
	return st.problems ? 1 : 0;
}
