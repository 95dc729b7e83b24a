/*
 * tools/dump/space.c - ah-dump's `space` (where the file's pages go: per
 * arrangement, chunks, B-trees, LMDB's free list and its fragmentation,
 * and which reader holds old pages back) and `backup OUT`.
 */
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#include "tools/common/fmt.h"
#include "tools/dump/dump.h"

static uint64_t pct(uint64_t part, uint64_t whole)
{
	return whole ? (part * 100 + whole / 2) / whole : 0;
}

static int space_arrangements(dump *d, uint64_t used_bytes)
{
	char name[AH_NAME_MAX + 1], c[TOOL_FMT_LEN], u[TOOL_FMT_LEN],
		r[TOOL_FMT_LEN];
	ah_arrangement_info in;
	int rc;

	if (d->json) {
		tj_key(&d->j, "arrangements");
		tj_arr(&d->j);
	} else {
		printf("\n%-32s %8s %10s %10s %10s %5s\n", "arrangement", "batches",
		       "chunks", "used", "reserved", "pages");
	}
	for (rc = ah_arrangement_next(d->txn, NULL, name); rc == 0;
	     rc = ah_arrangement_next(d->txn, name, name)) {
		if ((rc = ah_arrangement_info_get(d->txn, name, &in)) < 0)
			return dump_lib_error(d, rc, name);
		if (d->json) {
			tj_obj(&d->j);
			tj_kstr(&d->j, "name", name);
			tj_ku64(&d->j, "batches", in.batches);
			tj_ku64(&d->j, "chunks", in.chunks);
			tj_ku64(&d->j, "bytes", in.bytes);
			tj_ku64(&d->j, "chunk_bytes", in.chunk_bytes);
			tj_obj_end(&d->j);
			continue;
		}
		printf("%-32s %8" PRIu64 " %10s %10s %10s %4" PRIu64 "%%\n", name,
		       in.batches, tool_fmt_count(c, in.chunks),
		       tool_fmt_bytes(u, in.bytes), tool_fmt_bytes(r, in.chunk_bytes),
		       pct(in.chunk_bytes, used_bytes));
	}
	if (rc != AH_ENOTFOUND)
		return dump_lib_error(d, rc, "list arrangements");
	if (d->json)
		tj_arr_end(&d->j);
	return 0;
}

static int print_reader(const ah_reader_info *r, void *user)
{
	dump *d = user;

	if (d->json) {
		tj_obj(&d->j);
		tj_ki64(&d->j, "pid", r->pid);
		tj_ku64(&d->j, "thread", r->thread);
		tj_ku64(&d->j, "txn_id", r->txn_id);
		tj_ku64(&d->j, "age", r->age);
		tj_kbool(&d->j, "self", r->self);
		tj_obj_end(&d->j);
		return 0;
	}
	printf("%10" PRId64 " %16" PRIx64 " %12" PRIu64 " %12" PRIu64 "%s\n",
	       r->pid, r->thread, r->txn_id, r->age,
	       r->self ? "  (this ah-dump)" : r->txn_id ? "" : "  (idle)");
	return 0;
}

static void pages_line(const char *label, uint64_t pages, uint32_t psize,
                       const char *tail)
{
	char n[TOOL_FMT_LEN], b[TOOL_FMT_LEN];

	printf("  %-12s %14s pages %10s%s\n", label, tool_fmt_count(n, pages),
	       tool_fmt_bytes(b, pages * psize), tail);
}

static void space_json(dump *d, const ah_space_info *s, uint64_t file_bytes)
{
	tj_ku64(&d->j, "page_size", s->page_size);
	tj_ku64(&d->j, "file_bytes", file_bytes);
	tj_ku64(&d->j, "pages_used", s->pages_used);
	tj_ku64(&d->j, "chunk_pages", s->chunk_pages);
	tj_ku64(&d->j, "chunks", s->chunks);
	tj_ku64(&d->j, "tree_pages", s->tree_pages);
	tj_ku64(&d->j, "pages_free", s->pages_free);
	tj_ku64(&d->j, "pages_pinned", s->pages_pinned);
	tj_ku64(&d->j, "free_runs", s->free_runs);
	tj_ku64(&d->j, "free_largest_run", s->free_largest_run);
	tj_ku64(&d->j, "last_txn_id", s->last_txn_id);
	tj_key(&d->j, "oldest_reader");
	if (!s->oldest_reader_pid) {
		tj_null(&d->j);
		return;
	}
	tj_obj(&d->j);
	tj_ki64(&d->j, "pid", s->oldest_reader_pid);
	tj_ku64(&d->j, "txn_id", s->oldest_reader_txn);
	tj_ku64(&d->j, "age", s->oldest_reader_age);
	tj_obj_end(&d->j);
}

static void space_human(const ah_space_info *s)
{
	char a[TOOL_FMT_LEN], b[TOOL_FMT_LEN], tail[160];
	uint32_t ps = s->page_size;

	printf("%-14s %s pages of %s = %s, %s commits\n", "used",
	       tool_fmt_count(a, s->pages_used), tool_fmt_bytes(b, ps),
	       tool_fmt_bytes(tail, s->pages_used * ps),
	       tool_fmt_count(tail + 64, s->last_txn_id));
	snprintf(tail, sizeof tail, "  in %s chunks", tool_fmt_count(a, s->chunks));
	pages_line("chunks", s->chunk_pages, ps, tail);
	pages_line("B-trees", s->tree_pages, ps, "  tables, indexes, free list");
	pages_line("metas", 2, ps, "");
	snprintf(tail, sizeof tail, "  %s runs, largest %s pages",
	         tool_fmt_count(a, s->free_runs),
	         tool_fmt_count(b, s->free_largest_run));
	pages_line("free", s->pages_free, ps, tail);
	if (s->oldest_reader_pid)
		snprintf(tail, sizeof tail, "  held by pid %" PRId64 ", %" PRIu64
		         " commits behind", s->oldest_reader_pid, s->oldest_reader_age);
	else
		snprintf(tail, sizeof tail, "  no other reader holds pages");
	pages_line("pinned", s->pages_pinned, ps, tail);
}

int cmd_space(dump *d, int argc, char **argv)
{
	ah_space_info s;
	ah_heap_stat st;
	int rc;

	(void)argv;
	if (argc != 0)
		return 2;
	if ((rc = ah_space_get(d->txn, &s)) < 0)
		return dump_lib_error(d, rc, "space");
	if ((rc = ah_heap_stat_get(d->heap, &st)) < 0)
		return dump_lib_error(d, rc, "heap statistics");
	if (d->json) {
		tj_obj(&d->j);
		space_json(d, &s, st.file_bytes);
	} else {
		space_human(&s);
	}
	if ((rc = space_arrangements(d, s.pages_used * s.page_size)))
		return rc;
	if (d->json) {
		tj_key(&d->j, "readers");
		tj_arr(&d->j);
	} else {
		printf("\n%10s %16s %12s %12s\n", "reader pid", "thread", "snapshot",
		       "age");
	}
	if ((rc = ah_reader_foreach(d->heap, print_reader, d)) < 0)
		return dump_lib_error(d, rc, "readers");
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	return 0;
}

int cmd_backup(dump *d, int argc, char **argv)
{
	char b[TOOL_FMT_LEN];
	struct stat st;
	int rc;

	if (argc != 1)
		return 2;
	if ((rc = ah_backup(d->heap, argv[0])) < 0) {
		fprintf(stderr, "ah-dump: backup %s: %s\n", argv[0],
		        rc == AH_EEXIST ? "file exists" : ah_strerror(rc));
		return 1;
	}
	if (stat(argv[0], &st) < 0)
		st.st_size = 0;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "backup", argv[0]);
		tj_ku64(&d->j, "bytes", (uint64_t)st.st_size);
		tj_obj_end(&d->j);
	} else {
		printf("backup %s: %s (%" PRIu64 " bytes)\n", argv[0],
		       tool_fmt_bytes(b, (uint64_t)st.st_size), (uint64_t)st.st_size);
	}
	return 0;
}
