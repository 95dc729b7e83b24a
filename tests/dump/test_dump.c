/*
 * tests/dump/test_dump.c - ah-dump end to end: every command on an empty
 * heap, on the shared cases heaps and on a heap of known contents (human
 * and --json output, JSON fields with exact values), and backup.  Runs the
 * built tool (AH_BUILD), like an operator would.
 */
#include <inttypes.h>
#include <dirent.h>

#include "dump_util.h"

static const char *const every[] = {
	"", "arrangements", "verify", "space",
};

/* ah-dump HEAP ARGS (human, then --json into a file of its own): both
 * exit 0; the JSON file's path is appended to files. */
static void both_forms(const char *heap, const char *args, char *files,
                       size_t cap)
{
	static int seq;
	char cmd[2048], js[300], *out;
	int rc;

	cr_assert_eq(du_dump(heap, args, true, &out), 0, "%s %s: %s", heap, args,
	             out);
	free(out);
	snprintf(js, sizeof js, "%s/j%d.json", du_tmp.dir, seq++);
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s --json > '%s'", tl_build(),
	         heap, args, js);
	rc = tl_sh(cmd, true, &out);
	cr_assert_eq(rc, 0, "%s: %s", cmd, out);
	free(out);
	cr_assert_lt(strlen(files) + strlen(js) + 4, cap);
	strcat(strcat(strcat(files, " '"), js), "'");
}

/* Every command on heap; arr is an arrangement of it (or NULL).  All JSON
 * documents are parsed by one python3 run. */
static void every_command(const char *heap, const char *arr)
{
	static char files[1 << 16];
	char args[256], cmd[sizeof files + 256], *out;
	const char *per[] = { "batches", "chunks", "read", "keys", "keys %s --limit 1",
	                      "keys %s --count" };

	files[0] = 0;
	for (size_t i = 0; i < sizeof every / sizeof *every; i++)
		both_forms(heap, every[i], files, sizeof files);
	for (size_t i = 0; arr && i < sizeof per / sizeof *per; i++) {
		if (strchr(per[i], '%'))
			snprintf(args, sizeof args, per[i], arr);
		else
			snprintf(args, sizeof args, "%s %s", per[i], arr);
		both_forms(heap, args, files, sizeof files);
	}
	snprintf(cmd, sizeof cmd, "python3 -S -E -c 'import json, sys\n"
	         "for f in sys.argv[1:]: json.load(open(f))'%s", files);
	cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s: %s", heap, out);
	free(out);
}

Test(dump, empty_heap, .init = du_setup, .fini = du_teardown)
{
	char heap[256], args[300], *out;

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	du_ok(ah_close(tl_open_path(heap, 0, 0)), "close");
	every_command(heap, NULL);
	du_json_eq(heap, "", "d['arrangements'], d['sources'], d['format_version'], "
	           "d['page_size'], d['readers_used'], len(d['uuid'])",
	           "[] [] 2 4096 1 36");
	du_json_eq(heap, "arrangements", "d", "{'arrangements': []}");
	du_json_eq(heap, "verify", "d['ok'], d['problems'], d['chunks'], d['batches']",
	           "True [] 0 0");
	du_json_eq(heap, "space", "d['chunks'], d['chunk_pages'], d['arrangements'], "
	           "d['oldest_reader'], [r['self'] for r in d['readers']]",
	           "0 0 [] None [True]");
	for (int i = 0; i < 5; i++) {
		const char *c[] = { "batches a", "chunks a", "read a", "keys a", "get a k" };

		cr_assert_eq(du_dump(heap, c[i], true, &out), 1, "%s", c[i]);
		cr_assert(strstr(out, "unknown arrangement a\n") &&
		          strchr(out, '\n') == out + strlen(out) - 1, "%s: %s", c[i], out);
		free(out);
	}
	snprintf(args, sizeof args, "backup '%s/b'", du_tmp.dir);
	cr_assert_eq(du_dump(heap, args, true, &out), 0, "%s", out);
	free(out);
	cr_assert_eq(du_dump(heap, args, true, &out), 1, "again: %s", out);
	cr_assert(strstr(out, "file exists"), "%s", out);
	free(out);
	snprintf(heap, sizeof heap, "%s/b", du_tmp.dir);
	du_json_eq(heap, "verify", "d['ok']", "True");
}

/* Loads every shared case whose changelog loads, runs every command on it. */
Test(dump, cases_heaps, .init = du_setup, .fini = du_teardown, .timeout = 120)
{
	char path[512], heap[512], cmd[2048], *out, *names;
	struct dirent *e;
	int ncases = 0;
	DIR *d;

	snprintf(path, sizeof path, "%s/tests/cases", tl_src());
	d = opendir(path);
	cr_assert_not_null(d, "%s", path);
	while ((e = readdir(d))) {
		FILE *f;
		char want[8] = "";

		snprintf(cmd, sizeof cmd, "%s/%s/load.expect", path, e->d_name);
		if (!(f = fopen(cmd, "r")))
			continue;
		cr_assert_not_null(fgets(want, sizeof want, f));
		fclose(f);
		if (strncmp(want, "ok", 2) != 0)
			continue;
		snprintf(heap, sizeof heap, "%s/%s.heap", du_tmp.dir, e->d_name);
		snprintf(cmd, sizeof cmd, "'%s/ah-load' '%s' '%s/%s/changelog'",
		         tl_build(), heap, path, e->d_name);
		cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s: %s", cmd, out);
		free(out);
		cr_assert_eq(du_dump(heap, "arrangements", false, &names), 0);
		for (char *n = strtok(names, "\n"); n; n = strtok(NULL, "\n"))
			every_command(heap, n);
		free(names);
		du_json_eq(heap, "verify", "d['ok'], d['problems']", "True []");
		ncases++;
	}
	closedir(d);
	cr_assert_geq(ncases, 5, "cases found: %d", ncases);
}

/* Arrangement a: 3 updates over keys k1, k2 in [0, 2); since 1.  Arrangement
 * b: one update with a binary key.  Source s at "pos-7", t at 00 ff. */
static void known_heap(const char *path)
{
	ah_heap *h = tl_open_path(path, 0, 0);
	ah_txn *t;
	ah_update a[] = {
		{ "k1", 2, "x", 1, 0, 2 }, { "k1", 2, "y", 1, 1, -1 },
		{ "k2", 2, "x", 1, 1, 5 },
	};
	ah_update b = { "\x00\xff\t", 3, "v", 1, 7, 1 };

	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "a"), "create a");
	du_ok(ah_arrangement_create(t, "b"), "create b");
	du_ok(ah_append(t, "a", 0, 2, a, 3), "append a");
	du_ok(ah_set_since(t, "a", 1), "since a");
	du_ok(ah_append(t, "b", 0, 10, &b, 1), "append b");
	du_ok(ah_source_put(t, "s", "pos-7", 5), "source s");
	du_ok(ah_source_put(t, "t", "\x00\xff", 2), "source t");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
}

Test(dump, known_heap_fields, .init = du_setup, .fini = du_teardown)
{
	char heap[256], *out;

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	known_heap(heap);
	every_command(heap, "a");
	du_json_eq(heap, "", "[(x['name'], x['upper'], x['since'], x['batches'], "
	           "x['merging'], x['updates'], x['keys'], x['chunks']) for x in "
	           "d['arrangements']]",
	           "[('a', 2, 1, 1, 0, 3, 2, 1), ('b', 10, 0, 1, 0, 1, 1, 1)]");
	du_json_eq(heap, "", "d['sources']", "[{'name': 's', 'position': 'pos-7', "
	           "'position_hex': '706f732d37'}, {'name': 't', 'position': None, "
	           "'position_hex': '00ff'}]");
	du_json_eq(heap, "batches a", "[(x['lower'], x['upper'], x['since'], "
	           "x['updates'], x['keys'], x['vals'], x['chunks'], x['partial'], "
	           "x['bytes'] > 0, x['chunk_bytes']) for x in d['batches']]",
	           "[(0, 2, 0, 3, 2, 3, 1, False, True, 4080)]");
	du_json_eq(heap, "chunks a", "[(x['class_pages'], x['stored_bytes'], "
	           "x['file_offset'] % 4096, len(x['xxh3']), x['block_bytes'], "
	           "sorted(x)) for x in d['chunks']]", "[(1, 4080, 16, 16, 1024, "
	           "['batch', 'block_bytes', 'bytes', 'class_pages', 'file_offset', "
	           "'id', 'stored_bytes', 'xxh3'])]");
	du_json_eq(heap, "read a", "d", "{'arrangement': 'a', 'as_of': 1, 'rows': "
	           "[{'key': 'k1', 'val': 'x', 'diff': 2}, {'key': 'k1', 'val': 'y', "
	           "'diff': -1}, {'key': 'k2', 'val': 'x', 'diff': 5}]}");
	du_json_eq(heap, "get a k1", "d['vals']", "[{'val': 'x', 'diff': 2}, "
	           "{'val': 'y', 'diff': -1}]");
	du_json_eq(heap, "keys a --limit 1", "d['keys'], d['truncated']",
	           "['k1'] True");
	du_json_eq(heap, "keys a --prefix k2", "d['keys'], d['truncated']",
	           "['k2'] False");
	du_json_eq(heap, "keys b", "d['keys']", "['\\\\x00\\\\xff\\\\t']");
	du_json_eq(heap, "verify", "d['ok'], d['arrangements'], d['batches'], "
	           "d['chunks'], d['chunk_bytes']", "True 2 2 2 8160");
	cr_assert_eq(du_dump(heap, "get b '\\x00\\xff\\t'", true, &out), 0);
	cr_assert_str_eq(out, "v\t1\n");
	free(out);
	cr_assert_eq(du_dump(heap, "read a --as-of 0", true, &out), 1);
	cr_assert(strstr(out, "compacted"), "%s", out);
	free(out);
	cr_assert_eq(du_dump(heap, "", true, &out), 0);
	cr_assert(strncmp(out, "arrangement a: upper 2, since 1, batches 1, updates "
	                  "3, keys 2, bytes ", 67) == 0, "%s", out);
	cr_assert(strstr(out, "\nsource s: position pos-7\nsource t: position "
	                 "hex:00ff\n"), "%s", out);
	free(out);
	cr_assert_eq(du_dump(heap, "keys a --limit x", true, &out), 2, "%s", out);
	free(out);
}

/* Every line of the human output fits 100 columns; --help documents every
 * command. */
Test(dump, human_layout, .init = du_setup, .fini = du_teardown)
{
	const char *cmds[] = { "", "arrangements", "batches a", "chunks a", "read a",
	                       "keys a", "get a k1", "verify", "space", "--help" };
	char heap[256], *out;

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	known_heap(heap);
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		cr_assert_eq(du_dump(heap, cmds[i], true, &out), 0, "%s", cmds[i]);
		for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
			cr_assert_leq(strlen(l), 100, "%s: %s", cmds[i], l);
		free(out);
	}
	cr_assert_eq(du_dump(heap, "--help", true, &out), 0);
	for (const char *w = "batches NAME\0chunks NAME\0keys NAME [RANGE] "
	     "[--limit N | --count]\0get NAME KEY [--as-of T]\0verify\0space\0"
	     "backup OUT\0"
	     "class_pages\0file_offset\0oldest_reader\0"; *w; w += strlen(w) + 1)
		cr_assert(strstr(out, w), "--help lacks %s", w);
	free(out);
}

/* backup: a valid heap with the same contents, chunk checksums and
 * sources; the copy is compacted, so offsets may differ. */
Test(dump, backup_equals_source, .init = du_setup, .fini = du_teardown)
{
	char heap[256], copy[256], args[300], *a, *b;
	const char *expr = "[(x['id'], x['batch'], x['class_pages'], x['bytes'], "
	                   "x['xxh3']) for x in d['chunks']]";
	const char *cmds[] = { "read a", "read b", "batches a", "arrangements" };

	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	snprintf(copy, sizeof copy, "%s/copy", du_tmp.dir);
	known_heap(heap);
	snprintf(args, sizeof args, "backup '%s' --same-uuid", copy);
	cr_assert_eq(du_dump(heap, args, true, &a), 0, "%s", a);
	free(a);
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		cr_assert_eq(du_dump(heap, cmds[i], true, &a), 0);
		cr_assert_eq(du_dump(copy, cmds[i], true, &b), 0);
		cr_assert_str_eq(a, b, "%s", cmds[i]);
		free(a);
		free(b);
	}
	a = du_json(heap, "chunks a", 0, expr);
	b = du_json(copy, "chunks a", 0, expr);
	cr_assert_str_eq(a, b);
	free(a);
	free(b);
	a = du_json(heap, "", 0, "d['sources'], d['uuid']");
	b = du_json(copy, "", 0, "d['sources'], d['uuid']");
	cr_assert_str_eq(a, b);
	free(a);
	free(b);
	du_json_eq(copy, "verify", "d['ok'], d['chunks']", "True 2");
}
