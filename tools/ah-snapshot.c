/*
 * tools/ah-snapshot.c - incremental snapshots of a heap in a directory
 * that rclone can ship to an object store, and restores from them.
 *
 *   ah-snapshot push HEAP DIR
 *   ah-snapshot restore DIR HEAP [--at ID] [--new-uuid]
 *   ah-snapshot list DIR [--json]
 *   ah-snapshot prune DIR --keep N
 *
 * A thin program over include/arrheap.h's snapshot calls (layout and
 * guarantees there and in ARCHITECTURE.md §9).  Exit status: 0 done, 1 the
 * library refused (the message says what and which file), 2 a usage error.
 *
 * It must never write into HEAP (push opens it read-only, so it runs beside
 * the writer), never print a snapshot as pushed or restored unless the
 * library call returned 0, and never print a source position unescaped.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arrheap.h"
#include "tools/common/escape.h"
#include "tools/common/fmt.h"
#include "tools/common/json.h"
#include "tools/common/parse.h"

static const char usage_text[] =
	"usage: ah-snapshot push HEAP DIR\n"
	"       ah-snapshot restore DIR HEAP [--at ID] [--new-uuid]\n"
	"       ah-snapshot list DIR [--json]\n"
	"       ah-snapshot prune DIR --keep N\n"
	"       ah-snapshot --help | --version\n";

static const char help_text[] =
	"\n"
	"Snapshots a heap into DIR, a directory of plain files whose names never\n"
	"change once written (so `rclone sync DIR remote:bucket/path` ships it to\n"
	"any object store), and builds heaps from them anywhere.\n"
	"\n"
	"  push HEAP DIR     writes a snapshot of HEAP's latest commit while its\n"
	"                    writer runs (HEAP is opened read-only).  Only chunks\n"
	"                    sealed since the previous push are written (objects/),\n"
	"                    then a manifest (manifests/ID) naming every object\n"
	"                    with its checksum, the frontiers, batches and source\n"
	"                    positions.  The manifest is published last: a push\n"
	"                    killed at any moment leaves every earlier snapshot\n"
	"                    whole.  Prints: pushed ID, bytes new and total.\n"
	"  restore DIR HEAP  builds a new heap at HEAP (which must not exist) from\n"
	"                    the newest snapshot, or --at ID.  Every object is\n"
	"                    checked against the manifest first; the heap is\n"
	"                    verified whole before it appears at HEAP, so a failed\n"
	"                    or killed restore leaves nothing there.  The heap keeps\n"
	"                    the snapshot's UUID (it carries on the lost heap: its\n"
	"                    sources resume from the stored positions, and its\n"
	"                    pushes to DIR continue the same IDs); --new-uuid gives\n"
	"                    it one of its own (a copy beside a live original).\n"
	"  list DIR          one line per snapshot: ID, heap UUID, time (UTC), commit, bytes\n"
	"                    new and total, source positions as NAME=POS (bytes\n"
	"                    outside ! .. ~, '=' and backslash as \\xHH); --json\n"
	"                    for a program (each position also as position_hex).\n"
	"  prune DIR --keep N  keeps the N newest snapshots of each heap and deletes\n"
	"                    the rest, and every object no kept snapshot names.\n"
	"                    Waits for running pushes.\n"
	"\n"
	"IDs are UUID8-SEQ: the heap UUID's first 8 hex digits and the snapshot's\n"
	"number.  Shipping, after each push, objects before manifests (so the\n"
	"store never holds a manifest without its objects):\n"
	"  rclone copy DIR/objects REMOTE/objects\n"
	"  rclone sync DIR/manifests REMOTE/manifests\n"
	"  rclone sync DIR/objects REMOTE/objects   (removes pruned objects)\n"
	"(tools/ship-snapshots.sh DIR REMOTE runs these three).\n"
	"Restore elsewhere: `rclone copy REMOTE DIR2`, then\n"
	"`ah-snapshot restore DIR2 HEAP` (README, \"Snapshots\").\n"
	"\n"
	"Exit status: 0 done, 1 refused or failed (the message names the file),\n"
	"2 usage error.\n";

static int usage(const char *why)
{
	if (why)
		fprintf(stderr, "ah-snapshot: %s\n", why);
	fputs(usage_text, stderr);
	return 2;
}

static int failed(const char *what, int rc, const ah_snapshot_info *si)
{
	fprintf(stderr, "ah-snapshot: %s: %s (%s)\n", what,
	        si && si->message[0] ? si->message : ah_strerror(rc),
	        ah_err_name(rc) ? ah_err_name(rc) : "?");
	return 1;
}

/* For the list's NAME=POS fields: every byte outside ! .. ~, and '=' and
 * backslash, as \xHH, so spaces and '=' inside a name or position cannot
 * be mistaken for the separators. */
static void print_field(FILE *f, const void *p, size_t len)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < len; i++)
		if (s[i] < '!' || s[i] > '~' || s[i] == '=' || s[i] == '\\')
			fprintf(f, "\\x%02x", s[i]);
		else
			fputc(s[i], f);
}

static void print_escaped(FILE *f, const void *p, size_t len)
{
	char *out = malloc(TOOL_ESCAPE_MAX(len) + 1);

	if (out == NULL)
		return;
	fwrite(out, 1, tool_escape(p, len, out), f);
	free(out);
}

static void when(int64_t ns, char out[32])
{
	time_t s = (time_t)(ns / 1000000000);
	struct tm tm;

	if (gmtime_r(&s, &tm) == NULL ||
	    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, 32, "?");
}

static int cmd_push(const char *heap, const char *dir)
{
	ah_open_opts oo = { sizeof oo, AH_OPEN_RDONLY, 0, 0, 0 };
	ah_snapshot_info si;
	ah_heap *h;
	char a[32], b[32];
	int rc;

	if ((rc = ah_open(heap, &oo, &h)) != 0) {
		fprintf(stderr, "ah-snapshot: opening %s: %s\n", heap, ah_strerror(rc));
		return 1;
	}
	rc = ah_snapshot_push(h, dir, &si);
	ah_close(h);
	if (rc != 0)
		return failed("push", rc, &si);
	printf("pushed %s: commit %" PRIu64 ", %" PRIu64 " arrangements, %" PRIu64
	       " objects new of %" PRIu64 ", %s new of %s, manifest %s\n",
	       si.id, si.txn_id, si.arrangements, si.objects_new, si.objects,
	       tool_fmt_bytes(a, si.bytes_new), tool_fmt_bytes(b, si.bytes),
	       tool_fmt_bytes((char[32]){ 0 }, si.manifest_bytes));
	return 0;
}

static int cmd_restore(const char *dir, const char *heap, const char *at,
                       bool new_uuid)
{
	ah_snapshot_info si;
	char b[32];
	int rc = ah_snapshot_restore(dir, at, heap,
	                             new_uuid ? AH_RESTORE_NEW_UUID : 0, &si);

	if (rc != 0)
		return failed("restore", rc, &si);
	printf("restored %s to ", si.id);
	print_escaped(stdout, heap, strlen(heap));
	printf(": commit %" PRIu64 ", %" PRIu64 " objects, %s%s\n", si.txn_id,
	       si.objects, tool_fmt_bytes(b, si.bytes),
	       new_uuid ? ", new UUID" : "");
	return 0;
}

typedef struct lister {
	bool json;
	tool_json j;
	uint64_t n;
} lister;

static void uuid_text(const uint8_t *x, char u[40])
{
	snprintf(u, 40,
	         "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	         x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9],
	         x[10], x[11], x[12], x[13], x[14], x[15]);
}

static int list_one(const ah_snapshot_info *s, void *user)
{
	lister *l = user;
	char t[32], a[32], b[32], u[40];

	l->n++;
	if (l->json) {
		tj_obj(&l->j);
		tj_key(&l->j, "id");
		tj_str(&l->j, s->id);
		if (s->status != 0) {
			tj_key(&l->j, "damaged");
			tj_bool(&l->j, s->status == AH_ECORRUPT);
			tj_key(&l->j, "error");
			tj_str(&l->j, ah_err_name(s->status));
			tj_obj_end(&l->j);
			return 0;
		}
		uuid_text(s->uuid, u);
		when(s->time_ns, t);
		tj_key(&l->j, "uuid");
		tj_str(&l->j, u);
		tj_key(&l->j, "seq");
		tj_u64(&l->j, s->seq);
		tj_key(&l->j, "time");
		tj_str(&l->j, t);
		tj_key(&l->j, "time_ns");
		tj_i64(&l->j, s->time_ns);
		tj_key(&l->j, "commit");
		tj_u64(&l->j, s->txn_id);
		tj_key(&l->j, "arrangements");
		tj_u64(&l->j, s->arrangements);
		tj_key(&l->j, "objects");
		tj_u64(&l->j, s->objects);
		tj_key(&l->j, "bytes");
		tj_u64(&l->j, s->bytes);
		tj_key(&l->j, "objects_new");
		tj_u64(&l->j, s->objects_new);
		tj_key(&l->j, "bytes_new");
		tj_u64(&l->j, s->bytes_new);
		tj_key(&l->j, "manifest_bytes");
		tj_u64(&l->j, s->manifest_bytes);
		/* Positions are bytes: the text (UTF-8 passed through, other
		 * bytes as \u00XX) for people, the hex for programs. */
		tj_key(&l->j, "sources");
		tj_arr(&l->j);
		for (size_t i = 0; i < s->nsources; i++) {
			char *hex = malloc(2 * s->sources[i].len + 1);

			tj_obj(&l->j);
			tj_key(&l->j, "name");
			tj_str(&l->j, s->sources[i].name);
			tj_key(&l->j, "position");
			tj_strn(&l->j, s->sources[i].pos, s->sources[i].len);
			tj_key(&l->j, "position_hex");
			if (hex != NULL) {
				hex[tool_hex(s->sources[i].pos, s->sources[i].len, hex)] = '\0';
				tj_str(&l->j, hex);
			} else {
				tj_null(&l->j);
			}
			free(hex);
			tj_obj_end(&l->j);
		}
		tj_arr_end(&l->j);
		tj_obj_end(&l->j);
		return 0;
	}
	if (s->status != 0) {
		printf("%s  unusable manifest: %s\n", s->id,
		       s->status == AH_ECORRUPT ? "damaged" : ah_strerror(s->status));
		return 0;
	}
	when(s->time_ns, t);
	uuid_text(s->uuid, u);
	printf("%s  heap %s  %s  commit %" PRIu64 "  new %s  total %s", s->id,
	       u, t, s->txn_id, tool_fmt_bytes(a, s->bytes_new),
	       tool_fmt_bytes(b, s->bytes));
	for (size_t i = 0; i < s->nsources; i++) {
		printf("  ");
		print_field(stdout, s->sources[i].name, strlen(s->sources[i].name));
		printf("=");
		print_field(stdout, s->sources[i].pos, s->sources[i].len);
	}
	printf("\n");
	return 0;
}

static int cmd_list(const char *dir, bool json)
{
	lister l = { .json = json };
	int rc;

	if (json) {
		tj_init(&l.j, stdout);
		tj_obj(&l.j);
		tj_key(&l.j, "snapshots");
		tj_arr(&l.j);
	}
	rc = ah_snapshot_foreach(dir, list_one, &l);
	if (json) {
		tj_arr_end(&l.j);
		if (rc != 0) {
			tj_key(&l.j, "error");
			tj_str(&l.j, ah_strerror(rc));
		}
		tj_obj_end(&l.j);
	}
	if (rc != 0)
		return failed("list", rc, NULL);
	if (!json && l.n == 0)
		printf("no snapshots in %s\n", dir);
	return 0;
}

static int cmd_prune(const char *dir, unsigned keep)
{
	ah_prune_info pi;
	char b[32];
	int rc = ah_snapshot_prune(dir, keep, &pi);

	if (rc != 0) {
		fprintf(stderr, "ah-snapshot: prune: %s (%s)\n",
		        pi.message[0] ? pi.message : ah_strerror(rc),
		        ah_err_name(rc) ? ah_err_name(rc) : "?");
		return 1;
	}
	printf("pruned: %" PRIu64 " snapshots removed, %" PRIu64
	       " kept; %" PRIu64 " objects removed (%s)\n",
	       pi.snapshots_removed, pi.snapshots_kept, pi.objects_removed,
	       tool_fmt_bytes(b, pi.bytes_removed));
	return 0;
}

int main(int argc, char **argv)
{
	const char *pos[3] = { 0 }, *at = NULL, *keep_s = NULL;
	bool json = false, new_uuid = false;
	int npos = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage_text, stdout);
			fputs(help_text, stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("ah-snapshot (arrheap) %s, library %s\n",
			       AH_VERSION_STRING, ah_version(NULL, NULL, NULL));
			return 0;
		} else if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--new-uuid")) {
			new_uuid = true;
		} else if (!strcmp(a, "--at") || !strcmp(a, "--keep")) {
			if (i + 1 >= argc)
				return usage(!strcmp(a, "--at") ? "--at needs an ID"
				                                : "--keep needs a number");
			*(a[2] == 'a' ? &at : &keep_s) = argv[++i];
		} else if (a[0] == '-' && a[1] != '\0') {
			fprintf(stderr, "ah-snapshot: unknown option %s\n", a);
			return usage(NULL);
		} else if (npos < 3) {
			pos[npos++] = a;
		} else {
			return usage("too many arguments");
		}
	}
	if (npos == 0)
		return usage(NULL);
	if (!strcmp(pos[0], "push")) {
		if (npos != 3 || at || keep_s || json || new_uuid)
			return usage("push takes HEAP DIR and no options");
		return cmd_push(pos[1], pos[2]);
	}
	if (!strcmp(pos[0], "restore")) {
		if (npos != 3 || keep_s || json)
			return usage("restore takes DIR HEAP [--at ID] [--new-uuid]");
		return cmd_restore(pos[1], pos[2], at, new_uuid);
	}
	if (!strcmp(pos[0], "list")) {
		if (npos != 2 || at || keep_s || new_uuid)
			return usage("list takes DIR [--json]");
		return cmd_list(pos[1], json);
	}
	if (!strcmp(pos[0], "prune")) {
		uint64_t keep;

		if (npos != 2 || at || json || new_uuid)
			return usage("prune takes DIR --keep N");
		if (!keep_s || tool_parse_u64(keep_s, strlen(keep_s), &keep) != 0 ||
		    keep == 0 || keep > 1000000)
			return usage("prune needs --keep N, N from 1 to 1000000");
		return cmd_prune(pos[1], (unsigned)keep);
	}
	fprintf(stderr, "ah-snapshot: unknown command %s\n", pos[0]);
	return usage(NULL);
}
