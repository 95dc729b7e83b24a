/*
 * tools/ah-load.c - applies a changelog file to a heap, resumably.
 *
 *   ah-load HEAP CHANGELOG [--source NAME]      (CHANGELOG "-": stdin)
 *
 * The changelog format is in tools/common/parse.h.  Each commit group (the
 * records up to and including a `commit`) is one write transaction that also
 * stores, as source NAME's position (default "changelog"), the byte offset
 * just past that `commit` record as decimal text.  So the data and the
 * position are committed together, and a load killed at any moment restarts
 * from the stored offset and ends in the state of an uninterrupted load.
 * Every group also checks that the stored position is still the one it
 * expects, so two loaders on one heap fail instead of interleaving.
 *
 * The staging of updates until `advance` and the group's write transaction
 * are tools/common/ingest.h's; this file holds what is ah-load's: the
 * records, their checks, the byte offsets and the resume.
 *
 * A thin program over include/arrheap.h: it never reaches into the library's
 * internals, and never stores a position that does not end a `commit`
 * record.  On success it prints one line on stdout: what it applied and
 * where the source now stands (or that it already stood at the end).
 * Exit status: 0 done, 1 a bad record or a library error (the uncommitted
 * group is discarded, committed groups stay), 2 a usage error.
 *
 * It must never commit a group while updates are still staged (a `commit`
 * after an `update` with no `advance` is a bad record: the position would
 * count updates the heap lacks), and never resume from a stored position at
 * which the changelog shows no `commit` record ending.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "arrheap.h"
#include "tools/common/escape.h"
#include "tools/common/ingest.h"
#include "tools/common/parse.h"

typedef struct loader {
	const char *log_path;
	const char *log_h;      /* log_path escaped, for messages */
	const char *source;
	FILE *log;
	uint64_t log_size;       /* UINT64_MAX: unknown (a pipe) */
	bool seekable;           /* a regular file (also as stdin) */
	/* the heap, the arrangements' staging and the group's write txn
	 * (ig.txn, open from a group's first record to its commit); ig.gen
	 * counts groups: an arrangement's upper/since are re-read once per
	 * group */
	ingest ig;
	uint64_t committed_pos;  /* what the heap's source position says */
	int have_pos;
	uint64_t offset;         /* byte offset of the next line */
	uint64_t line;           /* number of the current line */
	uint64_t group_records;  /* records since the last commit */
	uint64_t records, commits, updates;
	/* progress */
	int tty;
	int progress_shown;
	struct timespec t0, last_shown;
	const char *last_name;
	uint64_t last_upper;
	char err[600];
} loader;

static int fail(loader *ld, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(loader *ld, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ld->err, sizeof(ld->err), fmt, ap);
	va_end(ap);
	return -1;
}

/* A library error as one line: what, then the txn's detail (which names
 * the frontiers), or the code's message when there is none. */
static int lib_fail(loader *ld, int rc, const char *what, const char *name)
{
	return ingest_error(&ld->ig, rc, what, name, ld->err, sizeof(ld->err));
}

static double secs_since(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void progress(loader *ld, int final)
{
	struct timespec now;
	double el;

	clock_gettime(CLOCK_MONOTONIC, &now);
	el = secs_since(&ld->t0, &now);
	if (!final && (el < 1.0 || secs_since(&ld->last_shown, &now) < 0.25))
		return;
	if (final && !ld->progress_shown)
		return;
	ld->last_shown = now;
	ld->progress_shown = 1;
	fprintf(stderr, "\r%" PRIu64 " records, %.0f records/s, %.1f MiB",
	        ld->records, el > 0 ? (double)ld->records / el : 0.0,
	        (double)ld->offset / 1048576.0);
	if (ld->log_size != UINT64_MAX)
		fprintf(stderr, " of %.1f MiB", (double)ld->log_size / 1048576.0);
	if (ld->last_name)
		fprintf(stderr, ", %s upper %" PRIu64, ld->last_name, ld->last_upper);
	fputs("\033[K", stderr);
	if (final)
		fputc('\n', stderr);
}

/* Starts the group's write txn and checks that the stored position is still
 * the one this load last committed (or read at start). */
static int group_begin(loader *ld)
{
	const void *pos;
	size_t len;
	uint64_t stored;
	int rc;

	if (ld->ig.txn)
		return 0;
	rc = ingest_begin(&ld->ig);
	if (rc < 0)
		return lib_fail(ld, rc, "begin transaction", NULL);
	rc = ah_source_get(ld->ig.txn, ld->source, &pos, &len);
	if (rc == AH_ENOTFOUND && !ld->have_pos)
		return 0;
	if (rc < 0 && rc != AH_ENOTFOUND)
		return lib_fail(ld, rc, "read position of source", ld->source);
	if (rc == AH_ENOTFOUND || tool_parse_u64(pos, len, &stored) < 0 ||
	    stored != ld->committed_pos)
		return fail(ld, "the position of source %s changed under this load "
		            "(another writer?)", ld->source);
	return 0;
}

/* Finds NAME's state, refreshing upper/since from the txn once per txn. */
static int arr_lookup(loader *ld, const char *name, int create, ingest_arr **out)
{
	ingest_arr *a = ingest_find(&ld->ig, name);
	ah_arrangement_info info;
	int rc;

	if (a && a->gen == ld->ig.gen) {
		*out = a;
		return 0;
	}
	rc = ah_arrangement_info_get(ld->ig.txn, name, &info);
	if (rc == AH_ENOTFOUND && create) {
		rc = ah_arrangement_create(ld->ig.txn, name);
		if (rc < 0)
			return lib_fail(ld, rc, "create arrangement", name);
		memset(&info, 0, sizeof(info));
	} else if (rc == AH_ENOTFOUND) {
		return fail(ld, "unknown arrangement %s", name);
	} else if (rc < 0) {
		return lib_fail(ld, rc, "arrangement", name);
	}
	if (!a && !(a = ingest_add(&ld->ig, name)))
		return fail(ld, "out of memory");
	a->gen = ld->ig.gen;
	a->upper = info.upper;
	a->since = info.since;
	*out = a;
	return 0;
}

/* Appends the staged updates as the batch [upper, UPPER) to the group and
 * forgets them: a failed group ends the load, so they are never needed
 * again. */
static int do_advance(loader *ld, ingest_arr *a, uint64_t upper)
{
	int rc;

	if (upper < a->upper)
		return fail(ld, "upper before current upper: %s upper is %" PRIu64
		            ", advance to %" PRIu64, a->name, a->upper, upper);
	if (a->n > 0 && a->max_time >= upper)
		return fail(ld, "staged time %" PRIu64 " not before new upper %" PRIu64
		            " of %s", a->max_time, upper, a->name);
	rc = ingest_append(&ld->ig, a, a->upper, upper);
	if (rc < 0)
		return lib_fail(ld, rc, "advance", a->name);
	ld->updates += a->n;
	ingest_clear(a);
	ld->last_name = a->name;
	ld->last_upper = upper;
	return 0;
}

static int do_commit(loader *ld)
{
	char pos[24];
	ingest_arr *a;
	ingest_pos p = { ld->source, pos, 0 };
	size_t failed;
	int rc, len;

	if ((a = ingest_first_staged(&ld->ig)))
		return fail(ld, "commit with unsealed updates (%zu staged for %s)",
		            a->n, a->name);
	if (group_begin(ld) < 0)
		return -1;
	len = snprintf(pos, sizeof(pos), "%" PRIu64, ld->offset);
	p.len = (size_t)len;
	rc = ingest_commit(&ld->ig, &p, 1, &failed);
	if (rc < 0 && failed == 0)
		return lib_fail(ld, rc, "store position of source", ld->source);
	if (rc < 0)
		return fail(ld, "commit: %s", ah_strerror(rc));
	ld->committed_pos = ld->offset;
	ld->have_pos = 1;
	ld->group_records = 0;
	ld->commits++;
	return 0;
}

static int apply(loader *ld, const tool_rec *r)
{
	ingest_arr *a = NULL;

	if (r->kind == TOOL_REC_COMMIT)
		return do_commit(ld);
	if (group_begin(ld) < 0 ||
	    arr_lookup(ld, r->name, r->kind == TOOL_REC_ARRANGE, &a) < 0)
		return -1;
	switch (r->kind) {
	case TOOL_REC_UPDATE:
		if (r->time < a->upper)
			return fail(ld, "time before upper: time %" PRIu64 " < %s upper %"
			            PRIu64, r->time, a->name, a->upper);
		if (ingest_stage(&ld->ig, a, r->key, r->key_len, r->val, r->val_len,
		                 r->time, r->diff) < 0)
			return fail(ld, "out of memory");
		return 0;
	case TOOL_REC_ADVANCE:
		return do_advance(ld, a, r->time);
	case TOOL_REC_SINCE: {
		int rc;

		if (r->time > a->upper)
			return fail(ld, "since beyond upper: since %" PRIu64 " > %s upper %"
			            PRIu64, r->time, a->name, a->upper);
		if (r->time < a->since)
			return fail(ld, "since before current since: %" PRIu64 " < %s since %"
			            PRIu64, r->time, a->name, a->since);
		rc = ah_set_since(ld->ig.txn, a->name, r->time);
		if (rc < 0)
			return lib_fail(ld, rc, "since", a->name);
		a->since = r->time;
		return 0;
	}
	default:
		return 0; /* arrange: arr_lookup created it */
	}
}

/* Whether tail[0..n), the bytes before a stored position, end a `commit`
 * record: "commit\n" at a line start, or "commit" at a line start that was
 * the end of the file when it was loaded (next is the byte after the
 * position: EOF, or '\n' when the file has grown since). */
static int ends_commit(const char *tail, size_t n, int next)
{
	if (n >= 7 && !memcmp(tail + n - 7, "commit\n", 7))
		return n == 7 || tail[n - 8] == '\n';
	if ((next == EOF || next == '\n') && n >= 6 &&
	    !memcmp(tail + n - 6, "commit", 6))
		return n == 6 || tail[n - 7] == '\n';
	return 0;
}

/* Reads the changelog from its start up to byte pos (a file: rewound
 * first; a pipe: read through), counting the lines before it so that
 * errors after a resume still name the right line, and keeping the last
 * bytes before it and the byte after it (EOF or pushed back).  Returns 0,
 * or 1 when the changelog ends before pos, -1 on a read error. */
static int skip_to(loader *ld, uint64_t pos, char tail[8], size_t *tlen,
                   int *next)
{
	char buf[1 << 16];
	uint64_t done = 0, n = 0;

	if (ld->seekable && fseeko(ld->log, 0, SEEK_SET) < 0)
		return -1;
	*tlen = 0;
	while (done < pos) {
		size_t want = pos - done < sizeof(buf) ? (size_t)(pos - done) : sizeof(buf);
		size_t got = fread(buf, 1, want, ld->log);

		if (got == 0)
			return ferror(ld->log) ? -1 : 1;
		for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + got - p))); p++)
			n++;
		if (got >= 8) {
			memcpy(tail, buf + got - 8, 8);
			*tlen = 8;
		} else {
			size_t keep = *tlen + got > 8 ? 8 - got : *tlen;

			memmove(tail, tail + *tlen - keep, keep);
			memcpy(tail + keep, buf, got);
			*tlen = keep + got;
		}
		done += got;
	}
	*next = getc(ld->log);
	if (*next != EOF)
		ungetc(*next, ld->log);
	ld->line = n;
	return 0;
}

/* Reads the stored position, then positions the reader just past it after
 * checking that the changelog has a commit record ending there. */
static int resume(loader *ld)
{
	ah_txn *txn;
	const void *pos;
	size_t len, tlen;
	char tail[8];
	int rc, next;

	rc = ah_txn_begin(ld->ig.heap, AH_TXN_RDONLY, &txn);
	if (rc < 0)
		return fail(ld, "begin read transaction: %s", ah_strerror(rc));
	rc = ah_source_get(txn, ld->source, &pos, &len);
	if (rc == 0 && tool_parse_u64(pos, len, &ld->committed_pos) < 0)
		rc = 1;
	ah_txn_abort(txn);
	if (rc == AH_ENOTFOUND)
		return 0;
	if (rc == 1)
		return fail(ld, "the position of source %s is not a decimal byte "
		            "offset: not a heap loaded by ah-load", ld->source);
	if (rc < 0)
		return fail(ld, "read position of source %s: %s", ld->source,
		            ah_strerror(rc));
	ld->have_pos = 1;
	if (ld->log_size != UINT64_MAX && ld->committed_pos > ld->log_size)
		rc = 1;
	else if ((rc = skip_to(ld, ld->committed_pos, tail, &tlen, &next)) < 0)
		return fail(ld, "read: %s", strerror(errno));
	if (rc == 1)
		return fail(ld, "changelog is shorter than the stored position %" PRIu64
		            ": not the file this heap was loaded from",
		            ld->committed_pos);
	/* The bytes before the position must end a `commit` line. */
	if (!ends_commit(tail, tlen, next))
		return fail(ld, "no commit record ends at the stored position %" PRIu64
		            ": not the file this heap was loaded from",
		            ld->committed_pos);
	ld->offset = ld->committed_pos;
	return 0;
}

static int run(loader *ld)
{
	char *buf = NULL;
	size_t cap = 0;
	ssize_t got;
	tool_rec rec;
	int rc = 0;

	while ((got = getline(&buf, &cap, ld->log)) > 0) {
		size_t len = (size_t)got;

		ld->line++;
		ld->offset += len;
		if (buf[len - 1] == '\n')
			len--;
		if (tool_rec_parse(buf, len, &rec, ld->err, sizeof(ld->err)) < 0 ||
		    (rec.kind != TOOL_REC_NONE && apply(ld, &rec) < 0)) {
			rc = -1;
			break;
		}
		if (rec.kind != TOOL_REC_NONE) {
			ld->records++;
			if (rec.kind != TOOL_REC_COMMIT)
				ld->group_records++;
		}
		if (ld->tty && (ld->records & 1023) == 0)
			progress(ld, 0);
	}
	if (rc == 0 && ferror(ld->log))
		rc = fail(ld, "read: %s", strerror(errno));
	free(buf);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ah-load HEAP CHANGELOG [--source NAME]\n"
	        "       ah-load --help | --version\n"
	        "Applies CHANGELOG (\"-\": standard input) to HEAP (created if absent),\n"
	        "one transaction per commit record, storing the byte offset after\n"
	        "each as source NAME's position (default \"changelog\"); resumes from\n"
	        "it, so a rerun applies only what is new.  On success prints one\n"
	        "line: \"applied N commits (R records, U updates); source NAME at\n"
	        "offset X\" or \"nothing to apply: source NAME already at offset X\".\n"
	        "\n"
	        "CHANGELOG: one record per line, fields separated by one TAB (LF line\n"
	        "ends); blank lines and lines starting with # are ignored.\n"
	        "  arrange NAME                    create NAME if absent\n"
	        "  update  NAME TIME KEY VAL DIFF  stage an update; TIME >= upper\n"
	        "  advance NAME UPPER              seal staged updates as [upper, UPPER)\n"
	        "  since   NAME SINCE              logical compaction, since <= SINCE <= upper\n"
	        "  commit                          commit atomically and durably\n"
	        "NAME: 1-64 of [A-Za-z0-9_.:/-]; TIME, UPPER, SINCE: decimal u64; DIFF:\n"
	        "decimal i64; KEY, VAL: bytes with escapes \\\\ \\t \\n \\xHH.\n"
	        "A line ending in CR (a CRLF file) or fields separated by spaces are\n"
	        "named as such.\n"
	        "Exit: 0 done, 1 bad record (CHANGELOG:LINE: reason; nothing after the\n"
	        "last commit is applied), 2 usage.  man ah-load has the details.\n");
}

static int open_log(loader *ld)
{
	struct stat st;

	ld->log = strcmp(ld->log_path, "-") ? fopen(ld->log_path, "r") : stdin;
	if (!ld->log)
		return fail(ld, "%s", strerror(errno));
	if (fstat(fileno(ld->log), &st) < 0)
		return fail(ld, "%s", strerror(errno));
	if (S_ISDIR(st.st_mode))
		return fail(ld, "is a directory");
	ld->seekable = S_ISREG(st.st_mode) &&
	               lseek(fileno(ld->log), 0, SEEK_CUR) == 0;
	ld->log_size = ld->seekable ? (uint64_t)st.st_size : UINT64_MAX;
	setvbuf(ld->log, NULL, _IOFBF, 1 << 20);
	return 0;
}

/* The one line of a successful load, on stdout. */
static void report(const loader *ld, uint64_t started_at)
{
	if (ld->commits == 0 && ld->have_pos) {
		printf("nothing to apply: source %s already at offset %" PRIu64 "\n",
		       ld->source, ld->committed_pos);
		return;
	}
	if (ld->commits == 0) {
		printf("nothing to apply: %s holds no commit record\n",
		       ld->log_h);
		return;
	}
	if (started_at)
		printf("resumed at offset %" PRIu64 "; ", started_at);
	printf("applied %" PRIu64 " commit%s (%" PRIu64 " record%s, %" PRIu64
	       " update%s); source %s at offset %" PRIu64 "\n", ld->commits,
	       ld->commits == 1 ? "" : "s", ld->records, ld->records == 1 ? "" : "s",
	       ld->updates, ld->updates == 1 ? "" : "s", ld->source,
	       ld->committed_pos);
}

/* s in the canonical escape (tools/common/escape.h), malloc'd; NULL on no
 * memory. */
static char *escaped(const char *s)
{
	char *e = malloc(TOOL_ESCAPE_MAX(strlen(s)) + 1);

	if (e)
		e[tool_escape(s, strlen(s), e)] = 0;
	return e;
}

int main(int argc, char **argv)
{
	loader ld = { .source = "changelog" };
	ah_open_opts opts = { .size = sizeof(opts), .flags = AH_OPEN_CREATE };
	const char *heap_path = NULL;
	char *heap_h = NULL, *log_h = NULL;
	uint64_t started_at;
	int status = 1, rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--version")) {
			printf("ah-load (arrheap) %s, library %s\n", AH_VERSION_STRING,
			       ah_version(NULL, NULL, NULL));
			return 0;
		} else if (!strcmp(argv[i], "--source") && i + 1 < argc) {
			ld.source = argv[++i];
		} else if (!strncmp(argv[i], "--source=", 9)) {
			ld.source = argv[i] + 9;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			char *o = escaped(argv[i]);

			fprintf(stderr, "ah-load: unknown option %s\n", o ? o : "?");
			free(o);
			usage(stderr);
			return 2;
		} else if (!heap_path) {
			heap_path = argv[i];
		} else if (!ld.log_path) {
			ld.log_path = argv[i];
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!heap_path || !ld.log_path) {
		usage(stderr);
		return 2;
	}
	if (!tool_name_valid(ld.source, strlen(ld.source))) {
		char *n = escaped(ld.source);

		fprintf(stderr, "ah-load: bad source name \"%s\" (1 to %d of "
		        "[A-Za-z0-9_.:/-])\n", n ? n : "?", AH_NAME_MAX);
		free(n);
		return 2;
	}
	/* Messages name paths escaped: a newline or a stray byte in one
	 * would break their one line. */
	if (!(heap_h = escaped(heap_path)) || !(log_h = escaped(ld.log_path))) {
		fprintf(stderr, "ah-load: out of memory\n");
		goto out;
	}
	ld.log_h = log_h;
	ld.tty = isatty(STDERR_FILENO);
	clock_gettime(CLOCK_MONOTONIC, &ld.t0);
	if (open_log(&ld) < 0) {
		fprintf(stderr, "ah-load: %s: %s\n", ld.log_h, ld.err);
		goto out;
	}
	/* The library creates a new heap atomically (PATH.creating, renamed). */
	rc = ah_open(heap_path, &opts, &ld.ig.heap);
	if (rc < 0) {
		fprintf(stderr, "ah-load: %s: %s\n", heap_h, ah_strerror(rc));
		goto out;
	}
	if (resume(&ld) < 0) {
		fprintf(stderr, "ah-load: %s: %s\n", ld.log_h, ld.err);
		goto out;
	}
	started_at = ld.have_pos ? ld.committed_pos : 0;
	if (run(&ld) < 0) {
		progress(&ld, 1);
		fprintf(stderr, "%s:%" PRIu64 ": %s\n", ld.log_h, ld.line, ld.err);
		goto out;
	}
	progress(&ld, 1);
	if (ld.group_records > 0)
		fprintf(stderr, "ah-load: %s: warning: %" PRIu64 " record%s after the "
		        "last commit not applied\n", ld.log_h, ld.group_records,
		        ld.group_records == 1 ? "" : "s");
	if (ld.tty) {
		struct timespec now;

		clock_gettime(CLOCK_MONOTONIC, &now);
		fprintf(stderr, "ah-load: %" PRIu64 " records (%" PRIu64 " updates, %"
		        PRIu64 " commits) in %.2f s\n", ld.records, ld.updates,
		        ld.commits, secs_since(&ld.t0, &now));
	}
	report(&ld, started_at);
	status = fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
out:
	ingest_abort(&ld.ig);
	if (ld.ig.heap && ah_close(ld.ig.heap) < 0 && status == 0) {
		fprintf(stderr, "ah-load: %s: close failed\n", heap_h);
		status = 1;
	}
	if (ld.log && ld.log != stdin)
		fclose(ld.log);
	ingest_free(&ld.ig);
	free(heap_h);
	free(log_h);
	return status;
}
