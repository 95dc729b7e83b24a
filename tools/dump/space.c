/*
 * tools/dump/space.c - ah-dump's `space`: where every page of the file
 * goes, in lines that add up to the pages used (LMDB's own accounting:
 * the pages of every tree, branch, leaf and overflow, plus the free pages
 * plus the two meta pages = last page + 1, the mdb_audit rule that
 * ah_verify_pages checks), then each table's depth and pages (mdb_stat
 * -a), each arrangement's pages, payload and slack, optionally (--scan)
 * its keys and vals (sqlite3_analyzer), and the readers; and `backup OUT`.
 *
 * Every page count comes from the page check of the run's snapshot
 * (dump->pages, ah_verify_pages), so the lines describe one commit and
 * their sum is exact; the free list's fragmentation and the pages pinned
 * by readers come from ah_space_get over the same snapshot.
 *
 * It must never write the heap, and never print a key or val: --scan counts
 * them and their sizes only.  backup writes only the new file OUT and
 * refuses one that exists (AH_EEXIST).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/common/fmt.h"
#include "tools/dump/dump.h"

static uint64_t pct(uint64_t part, uint64_t whole)
{
	return whole ? (part * 100 + whole / 2) / whole : 0;
}

static const struct ah_tree_stats *tree(const dump *d, const char *name)
{
	for (int i = 0; i < AH_PAGE_TREES; i++)
		if (d->pages.trees[i].name && !strcmp(d->pages.trees[i].name, name))
			return &d->pages.trees[i];
	return NULL;
}

static uint64_t tree_pages(const struct ah_tree_stats *t)
{
	return t ? t->branch_pages + t->leaf_pages + t->overflow_pages : 0;
}

/* ------------------------------------------------------ arrangements */

typedef struct arr_space {
	uint64_t pages;                        /* of its chunks */
	uint64_t keys, vals, key_bytes, val_bytes, key_max, val_max;
} arr_space;

static int add_pages(const ah_chunk_info *c, void *user)
{
	((arr_space *)user)->pages += c->class_pages;
	return 0;
}

/* --scan: every distinct key and (key, val) of NAME, over all batches. */
static int scan_keys(dump *d, const char *name, arr_space *s)
{
	ah_cursor *c;
	int rc = ah_cursor_open(d->txn, name, &c);

	if (rc < 0)
		return rc;
	for (rc = ah_cursor_key_valid(c); rc == 1; rc = ah_cursor_step_key(c)) {
		const void *p;
		size_t len;

		if ((rc = ah_cursor_key(c, &p, &len)) < 0)
			break;
		s->keys++;
		s->key_bytes += len;
		s->key_max = len > s->key_max ? len : s->key_max;
		for (rc = ah_cursor_val_valid(c); rc == 1; rc = ah_cursor_step_val(c)) {
			if ((rc = ah_cursor_val(c, &p, &len)) < 0)
				break;
			s->vals++;
			s->val_bytes += len;
			s->val_max = len > s->val_max ? len : s->val_max;
		}
		if (rc < 0)
			break;
	}
	{
		int crc = ah_cursor_close(c);

		return rc < 0 ? rc : crc;
	}
}

static void arr_json(dump *d, const char *name, const ah_arrangement_info *in,
                     const arr_space *s, uint32_t psize, bool scan)
{
	tj_obj(&d->j);
	tj_kstr(&d->j, "name", name);
	tj_ku64(&d->j, "batches", in->batches);
	tj_ku64(&d->j, "chunks", in->chunks);
	tj_ku64(&d->j, "chunk_pages", s->pages);
	tj_ku64(&d->j, "bytes", in->bytes);
	tj_ku64(&d->j, "chunk_bytes", in->chunk_bytes);
	tj_ku64(&d->j, "slack_bytes", s->pages * psize - in->bytes);
	if (scan) {
		tj_ku64(&d->j, "keys", s->keys);
		tj_ku64(&d->j, "vals", s->vals);
		tj_ku64(&d->j, "key_bytes", s->key_bytes);
		tj_ku64(&d->j, "key_max", s->key_max);
		tj_ku64(&d->j, "val_bytes", s->val_bytes);
		tj_ku64(&d->j, "val_max", s->val_max);
	}
	tj_obj_end(&d->j);
}

/* A name wider than its column (24) gets a line of its own, and its row
 * an empty name column, so that rows keep within DUMP_COLUMNS. */
static const char *long_name(const char *name)
{
	if (strlen(name) <= 24)
		return name;
	printf("%s\n", name);
	return "";
}

static void arr_human(const char *name, const ah_arrangement_info *in,
                      const arr_space *s, uint32_t psize, uint64_t used)
{
	char c[TOOL_FMT_LEN], p[TOOL_FMT_LEN], u[TOOL_FMT_LEN], sl[TOOL_FMT_LEN];

	name = long_name(name);
	printf("%-24s %7" PRIu64 " %9s %10s %11s %11s %4" PRIu64 "%%\n", name,
	       in->batches, tool_fmt_count(c, in->chunks),
	       tool_fmt_count(p, s->pages), tool_fmt_bytes(u, in->bytes),
	       tool_fmt_bytes(sl, s->pages * psize - in->bytes),
	       pct(s->pages, used));
}

/* --scan: the keys and vals table. */
static void arr_scan_human(const char *name, const arr_space *s)
{
	char k[TOOL_FMT_LEN], v[TOOL_FMT_LEN], ka[TOOL_FMT_LEN], km[TOOL_FMT_LEN],
		va[TOOL_FMT_LEN], vm[TOOL_FMT_LEN];

	name = long_name(name);
	printf("%-24s %11s %11s %10s %10s %10s %10s\n", name,
	       tool_fmt_count(k, s->keys), tool_fmt_count(v, s->vals),
	       tool_fmt_bytes(ka, s->keys ? s->key_bytes / s->keys : 0),
	       tool_fmt_bytes(km, s->key_max),
	       tool_fmt_bytes(va, s->vals ? s->val_bytes / s->vals : 0),
	       tool_fmt_bytes(vm, s->val_max));
}

static int space_arrangements(dump *d, uint32_t psize, bool scan)
{
	char name[AH_NAME_MAX + 1];
	ah_arrangement_info in;
	int rc;

	for (int pass = 0; pass < (scan && !d->json ? 2 : 1); pass++) {
		if (d->json) {
			tj_key(&d->j, "arrangements");
			tj_arr(&d->j);
		} else if (pass == 0) {
			printf("\n%-24s %7s %9s %10s %11s %11s %5s\n", "arrangement",
			       "batches", "chunks", "pages", "payload", "slack", "share");
		} else {
			printf("\n%-24s %11s %11s %10s %10s %10s %10s\n", "arrangement",
			       "keys", "vals", "key avg", "key max", "val avg",
			       "val max");
		}
		for (rc = ah_arrangement_next(d->txn, NULL, name); rc == 0;
		     rc = ah_arrangement_next(d->txn, name, name)) {
			arr_space s = { 0 };

			if ((rc = ah_arrangement_info_get(d->txn, name, &in)) < 0 ||
			    (rc = ah_chunk_foreach(d->txn, name, add_pages, &s)) < 0 ||
			    ((d->json || pass == 1) && scan &&
			     (rc = scan_keys(d, name, &s)) < 0))
				return dump_lib_error(d, rc, name);
			if (d->json)
				arr_json(d, name, &in, &s, psize, scan);
			else if (pass == 0)
				arr_human(name, &in, &s, psize, d->pages.pages);
			else
				arr_scan_human(name, &s);
		}
		if (rc != AH_ENOTFOUND)
			return dump_lib_error(d, rc, "list arrangements");
		if (d->json)
			tj_arr_end(&d->j);
	}
	return 0;
}

/* ------------------------------------------------------------ pages */

/* What each tree's pages hold, in the order the breakdown lists them. */
static const struct {
	const char *tree, *label, *what;
} parts[] = {
	{ "chunks", "chunk index", "the chunks table's B-tree" },
	{ "batch", "batch records", "spine batches, fence keys" },
	{ "arr", "arrangements", "arrangement records" },
	{ "source", "sources", "source positions" },
	{ "meta", "heap meta", "meta record, names digest" },
	{ "main", "LMDB catalog", "the named tables" },
	{ "free", "free list", "LMDB's records of free pages" },
};
#define NPARTS (sizeof parts / sizeof *parts)

static void line(const char *label, uint64_t pages, uint32_t psize,
                 const char *tail)
{
	char n[TOOL_FMT_LEN], b[TOOL_FMT_LEN];

	printf("  %-14s %14s pages %10s  %s\n", label, tool_fmt_count(n, pages),
	       tool_fmt_bytes(b, pages * psize), tail);
}

static void space_human(dump *d, const ah_space_info *s)
{
	const ah_page_stats *ps = &d->pages;
	const struct ah_tree_stats *ch = tree(d, "chunks");
	char a[TOOL_FMT_LEN], b[TOOL_FMT_LEN], c[TOOL_FMT_LEN], tail[200];
	uint32_t psz = s->page_size;
	uint64_t sum = 0;

	printf("%-14s %s pages of %s = %s, commit %s\n", "used",
	       tool_fmt_count(a, ps->pages), tool_fmt_bytes(b, psz),
	       tool_fmt_bytes(c, ps->pages * psz), tool_fmt_count(tail, ps->txn_id));
	snprintf(tail, sizeof tail, "in %s chunks (overflow pages)",
	         tool_fmt_count(a, ch ? ch->entries : 0));
	line("chunks", ch ? ch->overflow_pages : 0, psz, tail);
	sum += ch ? ch->overflow_pages : 0;
	for (size_t i = 0; i < NPARTS; i++) {
		const struct ah_tree_stats *t = tree(d, parts[i].tree);
		uint64_t n = tree_pages(t);

		if (!strcmp(parts[i].tree, "chunks"))
			n = t ? t->branch_pages + t->leaf_pages : 0;
		if (t && t->overflow_pages && strcmp(parts[i].tree, "chunks"))
			snprintf(tail, sizeof tail, "%s (%s overflow)", parts[i].what,
			         tool_fmt_count(a, t->overflow_pages));
		else
			snprintf(tail, sizeof tail, "%s", parts[i].what);
		line(parts[i].label, n, psz, tail);
		sum += n;
	}
	snprintf(tail, sizeof tail, "%s runs, largest %s pages",
	         tool_fmt_count(a, s->free_runs),
	         tool_fmt_count(b, s->free_largest_run));
	line("free pages", ps->pages_free, psz, tail);
	line("meta pages", 2, psz, "LMDB's two roots");
	sum += ps->pages_free + 2;
	printf("  %-14s %14s pages %10s  %s\n", "total", tool_fmt_count(a, sum),
	       tool_fmt_bytes(b, sum * psz),
	       sum == ps->pages ? "= used" : "!= used: run verify");
	if (s->oldest_reader_pid)
		snprintf(tail, sizeof tail, "of the free pages, held by pid %" PRId64
		         ", %" PRIu64 " commits behind", s->oldest_reader_pid,
		         s->oldest_reader_age);
	else
		snprintf(tail, sizeof tail, "of the free pages: no other reader "
		         "holds any");
	line("pinned", s->pages_pinned, psz, tail);

	printf("\n%-8s %5s %10s %10s %10s %12s %10s\n", "table", "depth",
	       "branch", "leaf", "overflow", "entries", "size");
	for (int i = 0; i < AH_PAGE_TREES; i++) {
		const struct ah_tree_stats *t = &ps->trees[i];
		char br[TOOL_FMT_LEN], lf[TOOL_FMT_LEN], ov[TOOL_FMT_LEN],
			en[TOOL_FMT_LEN], sz[TOOL_FMT_LEN];

		printf("%-8s %5" PRIu32 " %10s %10s %10s %12s %10s%s\n", t->name,
		       t->depth, tool_fmt_count(br, t->branch_pages),
		       tool_fmt_count(lf, t->leaf_pages),
		       tool_fmt_count(ov, t->overflow_pages),
		       tool_fmt_count(en, t->entries),
		       tool_fmt_bytes(sz, tree_pages(t) * psz),
		       t->damaged ? "  DAMAGED" : "");
	}
}

static void space_json(dump *d, const ah_space_info *s, uint64_t file_bytes)
{
	const ah_page_stats *ps = &d->pages;
	const struct ah_tree_stats *ch = tree(d, "chunks");
	uint64_t trees = 0;

	for (int i = 0; i < AH_PAGE_TREES; i++)
		trees += ps->trees[i].branch_pages + ps->trees[i].leaf_pages;
	tj_ku64(&d->j, "page_size", s->page_size);
	tj_ku64(&d->j, "file_bytes", file_bytes);
	tj_ku64(&d->j, "snapshot_txn_id", ps->txn_id);
	tj_ku64(&d->j, "pages_used", ps->pages);
	tj_ku64(&d->j, "chunk_pages", ch ? ch->overflow_pages : 0);
	tj_ku64(&d->j, "chunks", ch ? ch->entries : 0);
	tj_ku64(&d->j, "tree_pages", trees);
	tj_ku64(&d->j, "pages_free", ps->pages_free);
	tj_ku64(&d->j, "meta_pages", 2);
	tj_ku64(&d->j, "pages_pinned", s->pages_pinned);
	tj_ku64(&d->j, "free_runs", s->free_runs);
	tj_ku64(&d->j, "free_largest_run", s->free_largest_run);
	tj_ku64(&d->j, "last_txn_id", s->last_txn_id);
	tj_key(&d->j, "oldest_reader");
	if (!s->oldest_reader_pid) {
		tj_null(&d->j);
	} else {
		tj_obj(&d->j);
		tj_ki64(&d->j, "pid", s->oldest_reader_pid);
		tj_ku64(&d->j, "txn_id", s->oldest_reader_txn);
		tj_ku64(&d->j, "age", s->oldest_reader_age);
		tj_obj_end(&d->j);
	}
	tj_key(&d->j, "tables");
	tj_arr(&d->j);
	for (int i = 0; i < AH_PAGE_TREES; i++) {
		const struct ah_tree_stats *t = &ps->trees[i];

		tj_obj(&d->j);
		tj_kstr(&d->j, "name", t->name);
		tj_ku64(&d->j, "depth", t->depth);
		tj_ku64(&d->j, "branch_pages", t->branch_pages);
		tj_ku64(&d->j, "leaf_pages", t->leaf_pages);
		tj_ku64(&d->j, "overflow_pages", t->overflow_pages);
		tj_ku64(&d->j, "entries", t->entries);
		tj_ku64(&d->j, "pages", tree_pages(t));
		tj_obj_end(&d->j);
	}
	tj_arr_end(&d->j);
}

/* ----------------------------------------------------------- readers */

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

int cmd_space(dump *d, int argc, char **argv)
{
	ah_space_info s;
	ah_heap_stat st;
	bool scan = false;
	int rc;

	for (int i = 0; i < argc; i++)
		if (!strcmp(argv[i], "--scan"))
			scan = true;
		else
			return 2;
	if ((rc = ah_space_get(d->txn, &s)) < 0)
		return dump_lib_error(d, rc, "space");
	if ((rc = ah_heap_stat_get(d->heap, &st)) < 0)
		return dump_lib_error(d, rc, "heap statistics");
	if (d->json) {
		tj_obj(&d->j);
		space_json(d, &s, st.file_bytes);
	} else {
		space_human(d, &s);
	}
	if ((rc = space_arrangements(d, s.page_size, scan)))
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

/* ------------------------------------------------------------- backup */

/* The copy gets a UUID of its own unless --same-uuid: a copy that lives on
 * beside its heap is another heap (ARCHITECTURE.md section 10). */
int cmd_backup(dump *d, int argc, char **argv)
{
	ah_backup_opts bo = { .size = sizeof bo, .flags = AH_BACKUP_NEW_UUID };
	const char *out = NULL;
	char b[TOOL_FMT_LEN];
	struct stat st;
	int rc;

	for (int i = 0; i < argc; i++)
		if (!strcmp(argv[i], "--same-uuid"))
			bo.flags = 0;
		else if (!out && argv[i][0] != '-')
			out = argv[i];
		else
			return 2;
	if (!out)
		return 2;
	if ((rc = ah_backup_v2(d->heap, out, &bo)) < 0)
		return dump_fail(d, rc, "backup %s: %s",
		                 dump_escape(d, out, strlen(out)),
		                 rc == AH_EEXIST ? "file exists" : ah_strerror(rc));
	if (stat(out, &st) < 0)
		st.st_size = 0;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "backup", out);
		tj_ku64(&d->j, "bytes", (uint64_t)st.st_size);
		tj_kbool(&d->j, "new_uuid", bo.flags != 0);
		tj_obj_end(&d->j);
	} else {
		printf("backup %s: %s (%" PRIu64 " bytes), %s\n",
		       dump_escape(d, out, strlen(out)),
		       tool_fmt_bytes(b, (uint64_t)st.st_size), (uint64_t)st.st_size,
		       bo.flags ? "with a UUID of its own (--same-uuid keeps the "
		                  "heap's)" : "with the heap's UUID");
	}
	return 0;
}
