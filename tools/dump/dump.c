/*
 * tools/dump/dump.c - what ah-dump's commands share (declared in dump.h):
 * opening the heap in one snapshot behind the page check and the signal
 * guard, closing it, failures (one line on stderr, or the JSON document's
 * "error" member), the byte forms of keys and vals (escape or hex), JSON
 * list openings and option parsing.  tools/ah-dump.c is only the program
 * (arguments, the command table, main).
 *
 * It must never let a damaged heap reach a command unchecked (every
 * command but verify and salvage runs after ah_verify_pages found the
 * trees sound), never end the run by a signal without its one line (or
 * JSON error), and never write the heap: the write commands do, in
 * tools/dump/write.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
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

/* Rewrites every byte of m that is not printable ASCII as the escape
 * writes it (\n, \t, \xHH; in place, cut to cap), so that a message stays
 * one line whatever it names. */
static void line_safe(char *m, size_t cap)
{
	char t[2048];
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)m; *p &&
	     o + 5 < sizeof t; p++)
		if (*p >= 0x20 && *p <= 0x7e)
			t[o++] = (char)*p;
		else if (*p == '\n' || *p == '\t')
			o += (size_t)snprintf(t + o, sizeof t - o, "\\%c",
			                      *p == '\n' ? 'n' : 't');
		else
			o += (size_t)snprintf(t + o, sizeof t - o, "\\x%02x", *p);
	t[o] = 0;
	snprintf(m, cap, "%s", t);
}

/* One line s[0..len) (no newline), wrapped at spaces to DUMP_COLUMNS. */
static void wrap_line(const char *s, size_t len)
{
	size_t indent = 0;

	while (indent + len > DUMP_COLUMNS) {
		size_t room = DUMP_COLUMNS - indent, cut = 0;

		for (size_t i = 1; i <= room && i < len; i++)
			if (s[i] == ' ')
				cut = i;
		for (size_t i = room + 1; !cut && i < len; i++)
			if (s[i] == ' ')
				cut = i;   /* a word longer than the line: after it */
		if (!cut)
			break;
		printf("%*s%.*s\n", (int)indent, "", (int)cut, s);
		while (cut < len && s[cut] == ' ')
			cut++;
		s += cut;
		len -= cut;
		indent = 4;
	}
	printf("%*s%.*s\n", (int)indent, "", (int)len, s);
}

void dump_line(const char *fmt, ...)
{
	char *m = NULL, *p;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&m, fmt, ap);
	va_end(ap);
	if (n < 0) {
		va_start(ap, fmt);
		vprintf(fmt, ap);   /* no memory: unwrapped rather than nothing */
		va_end(ap);
		return;
	}
	for (p = m; *p;) {
		char *nl = strchr(p, '\n');
		size_t l = nl ? (size_t)(nl - p) : strlen(p);

		wrap_line(p, l);
		p += l + (nl != NULL);
	}
	free(m);
}

int dump_fail(dump *d, int code, const char *fmt, ...)
{
	int exit_status = code == DUMP_USAGE ? 2 : 1;
	char msg[sizeof d->err];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	line_safe(msg, sizeof msg);
	if (!d->json)
		fprintf(stderr, "ah-dump: %s\n", msg);
	if (!d->err_code) {
		d->err_code = code;
		d->err_exit = exit_status;
		snprintf(d->err, sizeof d->err, "%s", msg);
	}
	return exit_status;
}

int dump_lib_error(dump *d, int rc, const char *what)
{
	const char *detail = d->txn ? ah_txn_errmsg(d->txn) : "";

	return dump_fail(d, rc, "%s: %s: %s", d->heap_path, what,
	                 *detail ? detail : ah_strerror(rc));
}

void dump_json_error(dump *d, int exit_status)
{
	const char *name = d->err_code == DUMP_USAGE ? "usage"
	                                             : ah_err_name(d->err_code);

	if (d->j.depth == 0)
		tj_obj(&d->j);
	else
		tj_unwind(&d->j, 1);
	tj_key(&d->j, "error");
	tj_obj(&d->j);
	tj_kstr(&d->j, "code", name ? name : "AH_EIO");
	tj_kstr(&d->j, "message", d->err[0] ? d->err : "failed");
	tj_ku64(&d->j, "exit", (uint64_t)exit_status);
	tj_obj_end(&d->j);
	tj_unwind(&d->j, 0);
}

static char *grow(dump *d, size_t need)
{
	if (need > d->buf_cap) {
		char *b = realloc(d->buf, need);

		if (!b) {
			dump_fail(d, AH_ENOMEM, "out of memory");
			return NULL;
		}
		d->buf = b;
		d->buf_cap = need;
	}
	return d->buf;
}

const char *dump_escape(dump *d, const void *p, size_t len)
{
	if (!grow(d, TOOL_ESCAPE_MAX(len) + 1))
		return NULL;
	d->buf[tool_escape(p, len, d->buf)] = '\0';
	return d->buf;
}

const char *dump_bytes(dump *d, const void *p, size_t len)
{
	if (!d->hex)
		return dump_escape(d, p, len);
	if (!grow(d, 2 * len + 1))
		return NULL;
	d->buf[tool_hex(p, len, d->buf)] = '\0';
	return d->buf;
}

int dump_arg_bytes(dump *d, const char *what, const char *s, void **out,
                   size_t *len)
{
	const char *reason;
	int rc;

	*len = 0;
	if (!(*out = malloc(strlen(s) + 1))) {
		dump_fail(d, AH_ENOMEM, "out of memory");
		return 1;
	}
	rc = d->hex ? tool_unhex(s, strlen(s), *out, len, &reason)
	            : tool_unescape(s, strlen(s), *out, len, &reason);
	if (rc < 0) {
		free(*out);
		*out = NULL;
		return dump_fail(d, DUMP_USAGE, "bad %s \"%s\": %s", what, s,
		                 reason);
	}
	return 0;
}

int dump_renew(dump *d)
{
	ah_txn_abort(d->txn);
	d->txn = NULL;
	return ah_txn_begin(d->heap, AH_TXN_RDONLY, &d->txn);
}

int dump_parse_u64(dump *d, const char *opt, const char *s, uint64_t *out)
{
	if (tool_parse_u64(s, strlen(s), out) == 0)
		return 0;
	dump_fail(d, DUMP_USAGE, "bad %s \"%s\": a decimal uint64", opt, s);
	return -1;
}

int dump_arrangement(dump *d, const char *name, ah_arrangement_info *info)
{
	ah_arrangement_info in;
	int rc = ah_arrangement_info_get(d->txn, name, info ? info : &in);

	if (rc == AH_ENOTFOUND || rc == AH_EINVAL)
		return dump_fail(d, AH_ENOTFOUND, "%s: unknown arrangement %s",
		                 d->heap_path, dump_escape(d, name, strlen(name)));
	return rc < 0 ? dump_lib_error(d, rc, name) : 0;
}

/* A clear message for the common mistakes before LMDB sees the path. */
static int check_path(dump *d)
{
	struct stat st;

	if (stat(d->path, &st) < 0)
		return dump_fail(d, errno == ENOENT ? AH_ENOTFOUND : AH_EIO,
		                 "%s: %s", d->heap_path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return dump_fail(d, AH_EINVAL, "%s: %s", d->heap_path,
		                 S_ISDIR(st.st_mode) ? "is a directory, not a heap "
		                 "file" : "not a regular file");
	return 0;
}

/* LMDB trusts its tree pages: a damaged one can make it read past the end
 * of the file (SIGBUS) or of the map (SIGSEGV), or fail one of its own
 * assertions (SIGABRT).  Every command first checks the pages
 * (check_pages), so this is the last line of defence, for damage the check
 * cannot see or that appears after it: the right answer is still one line
 * (with --json: an error object on stdout, after whatever part of the
 * document was already written) and exit 1, so such a signal ends the run
 * with a prepared message.  A write transaction it interrupts is never
 * committed. */
static const int fault_sigs[] = { SIGBUS, SIGSEGV, SIGABRT };
static const char *const fault_names[] = { "SIGBUS", "SIGSEGV", "SIGABRT" };
#define NFAULTS (sizeof fault_sigs / sizeof *fault_sigs)
static char fault_msg[NFAULTS][1200];
static size_t fault_len[NFAULTS];
static int fault_fd = STDERR_FILENO;

static void on_fault(int sig)
{
	for (size_t i = 0; i < NFAULTS; i++)
		if (sig == fault_sigs[i] &&
		    write(fault_fd, fault_msg[i], fault_len[i]) < 0)
			_exit(1);
	_exit(1);
}

/* s as the inside of a JSON string: what json.c writes, into a buffer. */
static void json_inside(const char *s, char *out, size_t cap)
{
	size_t o = 0;

	for (; *s && o + 7 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			o += (size_t)snprintf(out + o, cap - o, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
		else
			out[o++] = (char)c;
	}
	out[o] = 0;
}

static void guard_faults(dump *d)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_fault;
	sigemptyset(&sa.sa_mask);
	fault_fd = d->json ? STDOUT_FILENO : STDERR_FILENO;
	for (size_t i = 0; i < NFAULTS; i++) {
		char line[600], quoted[sizeof fault_msg[i] - 100];
		int n;

		snprintf(line, sizeof line, "%s: %s (LMDB stopped on a damaged "
		         "page: %s)", d->heap_path, ah_strerror(AH_ECORRUPT),
		         fault_names[i]);
		json_inside(line, quoted, sizeof quoted);
		if (d->json)
			n = snprintf(fault_msg[i], sizeof fault_msg[i], "{\n  \"error\": "
			             "{\n    \"code\": \"AH_ECORRUPT\",\n    "
			             "\"message\": \"%s\",\n    \"exit\": 1\n  }\n}\n",
			             quoted);
		else
			n = snprintf(fault_msg[i], sizeof fault_msg[i], "ah-dump: %s\n",
			             line);
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

/* Every command but verify and salvage (which report each problem) reads
 * LMDB's trees only after ah_verify_pages found them sound: a damaged heap
 * is one line and exit 1, never a wrong answer, a hang or a fault. */
static int check_pages(dump *d)
{
	char msg[400] = "";
	int rc = ah_verify_pages(d->txn, first_problem, msg, &d->pages);

	for (int tries = 0; rc == AH_EBUSY && tries < 3; tries++)
		if ((rc = dump_renew(d)) == 0)
			rc = ah_verify_pages(d->txn, first_problem, msg, &d->pages);
	if (rc < 0)
		return dump_lib_error(d, rc, "check LMDB pages");
	d->checked = true;
	if (d->pages.problems == 0)
		return 0;
	return dump_fail(d, AH_ECORRUPT, "%s: %s: %s (ah-dump %s verify lists "
	                 "every problem)", d->heap_path, ah_strerror(AH_ECORRUPT),
	                 msg, d->heap_path);
}

int dump_open(dump *d, bool check, bool write)
{
	ah_open_opts opts = { .size = sizeof(opts),
	                      .flags = write ? 0 : AH_OPEN_RDONLY };
	int rc;

	if (check_path(d))
		return 1;
	guard_faults(d);
	rc = ah_open(d->path, &opts, &d->heap);
	if (rc < 0)
		return dump_fail(d, rc, "%s: %s", d->heap_path, ah_strerror(rc));
	rc = ah_txn_begin(d->heap, AH_TXN_RDONLY, &d->txn);
	if (rc < 0)
		return dump_lib_error(d, rc, "begin read transaction");
	return check ? check_pages(d) : 0;
}

int dump_close(dump *d, int status)
{
	ah_txn_abort(d->txn);
	d->txn = NULL;
	if (d->heap && ah_close(d->heap) < 0 && status == 0)
		status = dump_fail(d, AH_EIO, "%s: close failed", d->heap_path);
	d->heap = NULL;
	free(d->buf);
	d->buf = NULL;
	d->buf_cap = 0;
	return status;
}
