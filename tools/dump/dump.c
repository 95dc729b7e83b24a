/*
 * tools/dump/dump.c - what ah-dump's commands share (declared in dump.h):
 * opening the heap read-only in one snapshot behind the page check and
 * the signal guard, closing it, one-line error reports, the escape of
 * keys and vals, JSON list openings and option parsing.  tools/ah-dump.c
 * is only the program (arguments, the command table, main).
 *
 * Read only: it must never open the heap for writing, never let a damaged
 * heap reach a command unchecked (every command but verify runs after
 * ah_verify_pages found the trees sound), and never end the run by a
 * signal without its one line on stderr.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/common/escape.h"
#include "tools/common/parse.h"
#include "tools/dump/dump.h"

void dump_json_list(dump *d, const char *arrangement, const char *key)
{
	if (!d->json)
		return;
	tj_obj(&d->j);
	if (arrangement)
		tj_kstr(&d->j, "arrangement", arrangement);
	tj_key(&d->j, key);
	tj_arr(&d->j);
}

int dump_lib_error(dump *d, int rc, const char *what)
{
	const char *detail = d->txn ? ah_txn_errmsg(d->txn) : "";

	fprintf(stderr, "ah-dump: %s: %s: %s\n", d->heap_path, what,
	        *detail ? detail : ah_strerror(rc));
	return 1;
}

const char *dump_escape(dump *d, const void *p, size_t len)
{
	size_t need = TOOL_ESCAPE_MAX(len) + 1;

	if (need > d->buf_cap) {
		char *b = realloc(d->buf, need);

		if (!b) {
			fprintf(stderr, "ah-dump: out of memory\n");
			return NULL;
		}
		d->buf = b;
		d->buf_cap = need;
	}
	d->buf[tool_escape(p, len, d->buf)] = '\0';
	return d->buf;
}

int dump_renew(dump *d)
{
	ah_txn_abort(d->txn);
	d->txn = NULL;
	return ah_txn_begin(d->heap, AH_TXN_RDONLY, &d->txn);
}

int dump_parse_u64(const char *opt, const char *s, uint64_t *out)
{
	if (tool_parse_u64(s, strlen(s), out) == 0)
		return 0;
	fprintf(stderr, "ah-dump: bad %s \"%s\": a decimal uint64\n", opt, s);
	return -1;
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

/* LMDB trusts its tree pages: a damaged one can make it read past the end
 * of the file (SIGBUS) or of the map (SIGSEGV), or fail one of its own
 * assertions (SIGABRT).  Every command first checks the pages
 * (check_pages), so this is the last line of defence, for damage the check
 * cannot see or that appears after it: for a read-only tool the right
 * answer is still one line and exit 1, so such a signal ends the run with a
 * prepared message. */
static const int fault_sigs[] = { SIGBUS, SIGSEGV, SIGABRT };
static const char *const fault_names[] = { "SIGBUS", "SIGSEGV", "SIGABRT" };
#define NFAULTS (sizeof fault_sigs / sizeof *fault_sigs)
static char fault_msg[NFAULTS][600];
static size_t fault_len[NFAULTS];

static void on_fault(int sig)
{
	for (size_t i = 0; i < NFAULTS; i++)
		if (sig == fault_sigs[i] &&
		    write(STDERR_FILENO, fault_msg[i], fault_len[i]) < 0)
			_exit(1);
	_exit(1);
}

static void guard_faults(const char *path)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_fault;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < NFAULTS; i++) {
		int n = snprintf(fault_msg[i], sizeof fault_msg[i], "ah-dump: %s: "
		                 "%s (LMDB stopped on a damaged page: %s)\n", path,
		                 ah_strerror(AH_ECORRUPT), fault_names[i]);

		fault_len[i] = n > 0 && (size_t)n < sizeof fault_msg[i] ? (size_t)n
		                                                         : 0;
		sigaction(fault_sigs[i], &sa, NULL);
	}
}

static int first_problem(const ah_problem *p, void *user)
{
	char *msg = user;

	if (!*msg)
		snprintf(msg, 400, "%s", p->message);
	return 0;
}

/* Every command but verify (which reports each problem) reads LMDB's trees
 * only after ah_verify_pages found them sound: a damaged heap is one line
 * and exit 1, never a wrong answer, a hang or a fault. */
static int check_pages(dump *d)
{
	char msg[400] = "";
	ah_page_stats ps;
	int rc = ah_verify_pages(d->txn, first_problem, msg, &ps);

	for (int tries = 0; rc == AH_EBUSY && tries < 3; tries++)
		if ((rc = dump_renew(d)) == 0)
			rc = ah_verify_pages(d->txn, first_problem, msg, &ps);
	if (rc < 0)
		return dump_lib_error(d, rc, "check LMDB pages");
	if (ps.problems == 0)
		return 0;
	fprintf(stderr, "ah-dump: %s: %s: %s (ah-dump %s verify lists every "
	        "problem)\n", d->heap_path, ah_strerror(AH_ECORRUPT), msg,
	        d->heap_path);
	return 1;
}

int dump_open(dump *d, bool check)
{
	ah_open_opts opts = { .size = sizeof(opts), .flags = AH_OPEN_RDONLY };
	int rc;

	if (check_path(d->heap_path) < 0)
		return 1;
	guard_faults(d->heap_path);
	rc = ah_open(d->heap_path, &opts, &d->heap);
	if (rc < 0) {
		fprintf(stderr, "ah-dump: %s: %s\n", d->heap_path, ah_strerror(rc));
		return 1;
	}
	tj_init(&d->j, stdout);
	rc = ah_txn_begin(d->heap, AH_TXN_RDONLY, &d->txn);
	if (rc < 0)
		return dump_lib_error(d, rc, "begin read transaction");
	return check ? check_pages(d) : 0;
}

int dump_close(dump *d, int status)
{
	ah_txn_abort(d->txn);
	d->txn = NULL;
	if (d->heap && ah_close(d->heap) < 0 && status == 0) {
		fprintf(stderr, "ah-dump: %s: close failed\n", d->heap_path);
		status = 1;
	}
	d->heap = NULL;
	free(d->buf);
	d->buf = NULL;
	d->buf_cap = 0;
	return status;
}
