/*
 * tests/dump/test_ops_space.c - `ah-dump space` adds up and `backup` gives
 * the copy its own UUID.  After storing a 2 MiB key (a jumbo chunk, and a
 * batch record of overflow pages for its fence key) every page used is on
 * one line of the breakdown, in the text and the JSON alike; the per-table
 * lines are the page check's counts; each arrangement's pages are its
 * payload plus its slack; --scan counts keys and vals exactly.
 */
#include <inttypes.h>
#include <sys/stat.h>

#include "tests/dump/ops_util.h"

static char heap[300];

static void setup(void)
{
	du_setup();
	snprintf(heap, sizeof heap, "%s/h", du_tmp.dir);
	ops_heap(heap);
}

/* Adds arrangement "big" holding one key of 2 MiB. */
static void big_key(const char *path)
{
	size_t n = 2 << 20;
	char *k = malloc(n);
	ah_update u = { k, n, "v", 1, 0, 1 };
	ah_heap *h = tl_open_path(path, 0, 0);
	ah_txn *t;

	memset(k, 'k', n);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, "big"), "create");
	du_ok(ah_append(t, "big", 0, 1, &u, 1), "append");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	free(k);
}

static uint64_t number(const char *s)
{
	uint64_t n = 0;

	for (; *s == ' '; s++)
		;
	for (; (*s >= '0' && *s <= '9') || *s == ','; s++)
		if (*s != ',')
			n = n * 10 + (uint64_t)(*s - '0');
	return n;
}

Test(ops_space, breakdown_adds_up_to_the_pages_used, .init = setup,
     .fini = du_teardown, .timeout = 60)
{
	char *out, *j, *line;
	uint64_t used = 0, sum = 0, total = 0;
	int parts = 0;
	bool in_breakdown = false;

	big_key(heap);
	/* the 2 MiB key is stored once, in its jumbo chunk: the batch
	 * record's fence is cut to the shortest separator (empty for the
	 * first chunk), so the batch table has no overflow pages */
	du_json_eq(heap, "space", "sum(t['pages'] for t in d['tables']) + "
	           "d['pages_free'] + d['meta_pages'] == d['pages_used'], "
	           "[t['name'] for t in d['tables']], "
	           "[t['overflow_pages'] for t in d['tables'] if t['name'] == "
	           "'batch'], d['chunk_pages'] >= 513",
	           "True ['arr', 'batch', 'source', 'meta', 'chunks', 'main', "
	           "'free'] [0] True");
	cr_assert_eq(du_dump(heap, "space", true, &out), 0, "%s", out);
	for (line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strncmp(line, "used ", 5)) {
			used = number(line + 5);
			in_breakdown = true;
		} else if (in_breakdown && !strncmp(line, "  total ", 8)) {
			total = number(line + 8);
			cr_assert(strstr(line, "= used"), "%s", line);
		} else if (in_breakdown && !strncmp(line, "  pinned ", 9)) {
			in_breakdown = false;
		} else if (in_breakdown && !strncmp(line, "  ", 2)) {
			sum += number(line + 17);
			parts++;
		}
	}
	free(out);
	cr_assert_eq(parts, 10, "chunks, 7 tables, free pages, meta pages");
	cr_assert_eq(sum, used);
	cr_assert_eq(total, used);
	j = du_json(heap, "space", 0, "d['pages_used']");
	cr_assert_eq(used, strtoull(j, NULL, 10));
	free(j);
}

/* Each table's line is the page check's: depth, branch, leaf, overflow
 * pages and entries, as in the JSON. */
Test(ops_space, per_table_detail, .init = setup, .fini = du_teardown)
{
	char *out, *want;

	want = du_json(heap, "space", 0, "'\\n'.join('%-8s %5d %10s %10s %10s %12s' "
	               "% (t['name'], t['depth'], format(t['branch_pages'], ','), "
	               "format(t['leaf_pages'], ','), format(t['overflow_pages'], ','),"
	               " format(t['entries'], ',')) for t in d['tables'])");
	cr_assert_eq(du_dump(heap, "space", true, &out), 0);
	for (char *l = strtok(want, "\n"); l; l = strtok(NULL, "\n"))
		cr_assert(strstr(out, l), "no line \"%s\" in\n%s", l, out);
	cr_assert(strstr(out, "\ntable    depth     branch       leaf   overflow"
	                 "      entries       size\n"), "%s", out);
	free(out);
	free(want);
	du_json_eq(heap, "space", "[(t['name'], t['entries']) for t in d['tables'] "
	           "if t['name'] in ('arr', 'source')]",
	           "[('arr', 4), ('source', 4)]");
}

Test(ops_space, per_arrangement_payload_slack_and_scan, .init = setup,
     .fini = du_teardown)
{
	char *out, *pages;

	du_json_eq(heap, "space", "[(a['name'], a['chunk_pages'] * d['page_size'] "
	           "== a['bytes'] + a['slack_bytes'], 'keys' in a) for a in "
	           "d['arrangements']]", "[('a', True, False), ('bin', True, False), "
	           "('c', True, False), ('e', True, False)]");
	pages = du_json(heap, "chunks a", 0, "sum(c['class_pages'] for c in "
	                "d['chunks'])");
	{
		char expr[200], *got;

		snprintf(expr, sizeof expr, "[a['chunk_pages'] for a in "
		         "d['arrangements'] if a['name'] == 'a'][0] == %s", pages);
		got = du_json(heap, "space", 0, expr);
		cr_assert_str_eq(got, "True");
		free(got);
	}
	free(pages);
	du_json_eq(heap, "space --scan", "[(a['name'], a['keys'], a['vals'], "
	           "a['key_bytes'], a['key_max'], a['val_bytes'], a['val_max']) for "
	           "a in d['arrangements']]", "[('a', 4, 5, 8, 2, 5, 1), "
	           "('bin', 1, 1, 3, 3, 1, 1), ('c', 1, 1, 1, 1, 1, 1), "
	           "('e', 0, 0, 0, 0, 0, 0)]");
	cr_assert_eq(du_dump(heap, "space --scan", true, &out), 0);
	cr_assert(strstr(out, "\narrangement                     keys        vals"
	                 "    key avg    key max    val avg    val max\n"
	                 "a                                  4           5        "
	                 "2 B        2 B        1 B        1 B\n"), "%s", out);
	free(out);
	ops_expect(heap, "space --bogus", 2, "", "usage: ah-dump HEAP space "
	           "[--scan] [--json] [--hex]\n");
}

Test(ops_space, backup_gets_its_own_uuid, .init = setup, .fini = du_teardown)
{
	char args[400], copy[300], want[600], *u0, *u1, *u2;
	struct stat st;

	snprintf(copy, sizeof copy, "%s/copy", du_tmp.dir);
	snprintf(args, sizeof args, "backup '%s'", copy);
	{
		char cmd[800], *o, *e;

		snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s", tl_build(), heap,
		         args);
		cr_assert_eq(ops_run(cmd, &o, &e), 0, "%s", e);
		cr_assert_eq(stat(copy, &st), 0);
		snprintf(want, sizeof want, "backup %s: ", copy);
		cr_assert(!strncmp(o, want, strlen(want)), "%s", o);
		snprintf(want, sizeof want, " (%" PRIu64 " bytes), with a UUID of its "
		         "own (--same-uuid keeps the heap's)\n", (uint64_t)st.st_size);
		cr_assert(strstr(o, want), "%s", o);
		cr_assert_str_eq(e, "");
		free(o);
		free(e);
	}
	u0 = du_json(heap, "", 0, "d['uuid']");
	u1 = du_json(copy, "", 0, "d['uuid']");
	cr_assert_str_neq(u0, u1);
	cr_assert_eq(u1[14], '4', "version 4: %s", u1);
	snprintf(copy, sizeof copy, "%s/same", du_tmp.dir);
	snprintf(args, sizeof args, "backup '%s' --same-uuid", copy);
	{
		char *got = du_json(heap, args, 0, "d['new_uuid'], d['bytes'] > 0");

		cr_assert_str_eq(got, "False True");
		free(got);
	}
	u2 = du_json(copy, "", 0, "d['uuid']");
	cr_assert_str_eq(u0, u2);
	free(u0);
	free(u1);
	free(u2);
	snprintf(args, sizeof args, "backup '%s/third'", du_tmp.dir);
	du_json_eq(heap, args, "d['new_uuid']", "True");
	snprintf(args, sizeof args, "backup '%s/x' --bogus", du_tmp.dir);
	ops_expect(heap, args, 2, "", "usage: ah-dump HEAP backup OUT [--same-uuid] "
	           "[--json] [--hex]\n");
	snprintf(args, sizeof args, "backup '%s'", copy);
	snprintf(want, sizeof want, "ah-dump: backup %s: file exists\n", copy);
	ops_expect(heap, args, 1, "", want);
	du_json_eq(copy, "verify", "d['ok']", "True");
}

/* Human output keeps within 100 columns with a 64-byte arrangement name
 * and times up to 2^64 - 1: the summary line wraps at a space (continued
 * indented by four), a batches row whose times overflow their columns puts
 * its counts on a second line under their columns, and a name wider than
 * space's name column gets a line of its own. */
Test(ops_space, within_100_columns, .init = du_setup, .fini = du_teardown)
{
	static const char name[] = "n123456789012345678901234567890123456789012345"
	                           "678901234567890123";
	char p[300], args[400], cmd[1000], *out;
	ah_update u = { "k", 1, "v", 1, UINT64_MAX - 1, 1 };
	const char *cmds[] = { "", "batches %s", "space", "space --scan",
	                       "since %s 18446744073709551614", "maintain %s",
	                       "chunks %s", "read %s", "arrangements" };
	ah_heap *h;
	ah_txn *t;

	cr_assert_eq(strlen(name), 64);
	snprintf(p, sizeof p, "%s/h", du_tmp.dir);
	h = tl_open_path(p, 0, 0);
	du_ok(ah_txn_begin(h, 0, &t), "begin");
	du_ok(ah_arrangement_create(t, name), "create");
	du_ok(ah_append(t, name, 0, UINT64_MAX, &u, 1), "append");
	du_ok(ah_txn_commit(t), "commit");
	du_ok(ah_close(h), "close");
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		snprintf(args, sizeof args, cmds[i], name);
		snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' %s | awk 'length > 100'",
		         tl_build(), p, args);
		cr_assert_eq(tl_sh(cmd, true, &out), 0, "%s", cmd);
		cr_assert_str_eq(out, "", "%s: lines over 100 columns:\n%s", args, out);
		free(out);
	}
	snprintf(cmd, sizeof cmd, "'%s/ah-dump' '%s' | head -2", tl_build(), p);
	cr_assert_eq(tl_sh(cmd, true, &out), 0);
	cr_assert_str_eq(out, "arrangement n1234567890123456789012345678901234567"
	                 "89012345678901234567890123: upper\n    18446744073709551615"
	                 ", since 18446744073709551614, batches 1, updates 1, keys 1, "
	                 "bytes 104 B\n");
	free(out);
}
