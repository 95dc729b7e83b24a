/*
 * tools/ah-dump.c - prints what a heap holds, read only.
 *
 *   ah-dump HEAP                       summary: arrangements and sources
 *   ah-dump HEAP arrangements          arrangement names, one per line
 *   ah-dump HEAP read NAME [--as-of T] the accumulated collection as of T
 *
 * Every command runs in one read transaction of a heap opened with
 * AH_OPEN_RDONLY, so it sees one commit and never blocks a writer.  Commands
 * live in a table (name, usage, handler): adding one is adding a row.
 * Keys and vals print in the canonical escape of tools/common/escape.h.
 *
 * A thin program over include/arrheap.h.  Bad input (a missing file, a
 * directory, a file that is no heap) is a one-line error and exit 1; a usage
 * error exits 2.  Never crashes on what it reads.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arrheap.h"
#include "tools/common/escape.h"
#include "tools/common/parse.h"

typedef struct dump {
	const char *heap_path;
	ah_heap *heap;
	ah_txn *txn;
	char *buf;       /* escape output */
	size_t buf_cap;
} dump;

typedef struct command {
	const char *name;
	const char *usage;
	const char *help;
	int (*run)(dump *d, int argc, char **argv); /* 0, 1 failure, 2 usage */
} command;

static int cmd_summary(dump *d, int argc, char **argv);
static int cmd_arrangements(dump *d, int argc, char **argv);
static int cmd_read(dump *d, int argc, char **argv);

static const command commands[] = {
	{ "", "", "summary: every arrangement's frontiers and size, every "
	  "source's position", cmd_summary },
	{ "arrangements", "arrangements", "arrangement names, one per line",
	  cmd_arrangements },
	{ "read", "read NAME [--as-of T]", "KEY<TAB>VAL<TAB>DIFF per (key, val) "
	  "with a non-zero sum as of T\n      (default: upper - 1), sorted by key "
	  "then val, bytes escaped",
	  cmd_read },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: ah-dump HEAP [COMMAND [ARGS]]\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  ah-dump HEAP %s\n      %s\n", commands[i].usage,
		        commands[i].help);
}

/* One line for a library error: the txn's detail (it names the frontiers)
 * or, when there is none, the code's message. */
static int lib_error(dump *d, int rc, const char *what)
{
	const char *detail = d->txn ? ah_txn_errmsg(d->txn) : "";

	fprintf(stderr, "ah-dump: %s: %s: %s\n", d->heap_path, what,
	        *detail ? detail : ah_strerror(rc));
	return 1;
}

static int put_escaped(dump *d, const void *p, size_t len)
{
	size_t need = TOOL_ESCAPE_MAX(len);

	if (need > d->buf_cap) {
		char *b = realloc(d->buf, need);

		if (!b) {
			fprintf(stderr, "ah-dump: out of memory\n");
			return -1;
		}
		d->buf = b;
		d->buf_cap = need;
	}
	fwrite(d->buf, 1, tool_escape(p, len, d->buf), stdout);
	return 0;
}

static int cmd_read(dump *d, int argc, char **argv)
{
	const char *name = NULL;
	uint64_t as_of = 0;
	int have_as_of = 0, rc, status = 1;
	ah_arrangement_info info;
	ah_cursor *c = NULL;
	char what[128];

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--as-of") && i + 1 < argc) {
			i++;
			if (tool_parse_u64(argv[i], strlen(argv[i]), &as_of) < 0) {
				fprintf(stderr, "ah-dump: bad --as-of \"%s\": a decimal "
				        "uint64\n", argv[i]);
				return 2;
			}
			have_as_of = 1;
		} else if (!name && argv[i][0] != '-') {
			name = argv[i];
		} else {
			return 2;
		}
	}
	if (!name)
		return 2;
	rc = ah_arrangement_info_get(d->txn, name, &info);
	if (rc == AH_ENOTFOUND || rc == AH_EINVAL) {
		fprintf(stderr, "ah-dump: %s: unknown arrangement %s\n", d->heap_path,
		        name);
		return 1;
	}
	if (rc < 0)
		return lib_error(d, rc, name);
	/* upper = 0: nothing sealed; as_of 0 then fails as "not complete". */
	if (!have_as_of)
		as_of = info.upper ? info.upper - 1 : 0;
	snprintf(what, sizeof(what), "read %s as of %" PRIu64, name, as_of);
	rc = ah_check_as_of(d->txn, name, as_of);
	if (rc < 0)
		return lib_error(d, rc, what);
	rc = ah_cursor_open(d->txn, name, &c);
	if (rc < 0)
		return lib_error(d, rc, what);
	for (; ah_cursor_key_valid(c); rc = ah_cursor_step_key(c)) {
		const void *k, *v;
		size_t kl, vl;
		int64_t sum;

		if (rc < 0 || (rc = ah_cursor_key(c, &k, &kl)) < 0)
			goto out;
		for (; ah_cursor_val_valid(c); rc = ah_cursor_step_val(c)) {
			if (rc < 0 || (rc = ah_cursor_val(c, &v, &vl)) < 0 ||
			    (rc = ah_cursor_accumulate(c, as_of, &sum)) < 0)
				goto out;
			if (sum == 0)
				continue;
			if (put_escaped(d, k, kl) < 0)
				goto out_quiet;
			putchar('\t');
			if (put_escaped(d, v, vl) < 0)
				goto out_quiet;
			printf("\t%" PRId64 "\n", sum);
		}
		if (rc < 0)
			goto out;
	}
out:
	if (rc < 0)
		lib_error(d, rc, what);
	else
		status = 0;
out_quiet:
	ah_cursor_close(c);
	return status;
}

static int cmd_arrangements(dump *d, int argc, char **argv)
{
	char name[AH_NAME_MAX + 1];
	int rc;

	(void)argv;
	if (argc != 0)
		return 2;
	for (rc = ah_arrangement_next(d->txn, NULL, name); rc == 0;
	     rc = ah_arrangement_next(d->txn, name, name))
		printf("%s\n", name);
	return rc == AH_ENOTFOUND ? 0 : lib_error(d, rc, "list arrangements");
}

static void print_position(const unsigned char *p, size_t len)
{
	int printable = len > 0;

	for (size_t i = 0; i < len; i++)
		printable &= p[i] >= 0x20 && p[i] < 0x7f;
	if (printable) {
		fwrite(p, 1, len, stdout);
		return;
	}
	fputs("hex:", stdout);
	for (size_t i = 0; i < len; i++)
		printf("%02x", p[i]);
}

static int cmd_summary(dump *d, int argc, char **argv)
{
	char name[AH_NAME_MAX + 1];
	ah_arrangement_info info;
	const void *pos;
	size_t len;
	int rc;

	(void)argv;
	if (argc != 0)
		return 2;
	for (rc = ah_arrangement_next(d->txn, NULL, name); rc == 0;
	     rc = ah_arrangement_next(d->txn, name, name)) {
		if ((rc = ah_arrangement_info_get(d->txn, name, &info)) < 0)
			return lib_error(d, rc, name);
		printf("arrangement %s: upper %" PRIu64 ", since %" PRIu64
		       ", batches %" PRIu64 ", updates %" PRIu64 "\n", name,
		       info.upper, info.since, info.batches, info.updates);
	}
	if (rc != AH_ENOTFOUND)
		return lib_error(d, rc, "list arrangements");
	for (rc = ah_source_next(d->txn, NULL, name); rc == 0;
	     rc = ah_source_next(d->txn, name, name)) {
		if ((rc = ah_source_get(d->txn, name, &pos, &len)) < 0)
			return lib_error(d, rc, name);
		printf("source %s: position ", name);
		print_position(pos, len);
		putchar('\n');
	}
	return rc == AH_ENOTFOUND ? 0 : lib_error(d, rc, "list sources");
}

/* A clear message for the common mistakes before LMDB sees the path. */
static int check_path(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "ah-dump: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "ah-dump: %s: %s\n", path, S_ISDIR(st.st_mode) ?
		        "is a directory, not a heap file" : "not a regular file");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	ah_open_opts opts = { .size = sizeof(opts), .flags = AH_OPEN_RDONLY };
	dump d = { 0 };
	const command *cmd = NULL;
	const char *cname;
	int status = 1, rc;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	d.heap_path = argv[1];
	cname = argc > 2 ? argv[2] : "";
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, cname))
			cmd = &commands[i];
	if (!cmd) {
		fprintf(stderr, "ah-dump: unknown command \"%s\"\n", cname);
		usage(stderr);
		return 2;
	}
	if (check_path(d.heap_path) < 0)
		return 1;
	rc = ah_open(d.heap_path, &opts, &d.heap);
	if (rc < 0) {
		fprintf(stderr, "ah-dump: %s: %s\n", d.heap_path, ah_strerror(rc));
		return 1;
	}
	rc = ah_txn_begin(d.heap, AH_TXN_RDONLY, &d.txn);
	if (rc < 0) {
		lib_error(&d, rc, "begin read transaction");
		goto out;
	}
	status = cmd->run(&d, argc > 2 ? argc - 3 : 0, argv + 3);
	if (status == 2) {
		fprintf(stderr, "usage: ah-dump HEAP %s\n", cmd->usage);
		goto out;
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "ah-dump: write error: %s\n", strerror(errno));
		status = 1;
	}
out:
	ah_txn_abort(d.txn);
	if (ah_close(d.heap) < 0 && status == 0) {
		fprintf(stderr, "ah-dump: %s: close failed\n", d.heap_path);
		status = 1;
	}
	free(d.buf);
	return status;
}
