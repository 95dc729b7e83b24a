/*
 * tools/dump/salvage.c - `ah-dump HEAP salvage OUT`: copies what survives
 * of a damaged heap into a new one (RocksDB's `ldb repair`, the public-API
 * way), and names everything it left behind.
 *
 *  1. ah_verify over the heap (LMDB's pages first, then every chunk,
 *     batch and spine): an arrangement with a problem is left behind.
 *  2. Every other arrangement is read with a cursor at its frontier and
 *     appended to OUT as one batch [0, upper) at the times the cursor
 *     reports (advanced to since, so every read at as_of >= since answers
 *     the same), with the same upper and since.  A read that fails leaves
 *     it behind too; each arrangement is its own write transaction of OUT,
 *     so one that fails half way leaves nothing of itself.
 *  3. Source positions are copied only when no arrangement and no source
 *     was left behind: a position claims that the data derived from the
 *     source up to it is in the heap, which is false once anything is
 *     missing, and an engine resuming from it would skip that data for
 *     good.  So a partial salvage has no positions (the output says so),
 *     and is for reading what survived, not for resuming an engine.
 *     Read holds are not copied (a hold is a live reader's promise from
 *     this heap's writer; OUT is a new heap, and its readers set theirs
 *     again).
 *  4. OUT is built under OUT.creating.<pid>, verified, and published
 *     complete without replacing anything (renameat2 RENAME_NOREPLACE, or
 *     link), like ah_backup: OUT never holds half a salvage.
 *
 * It reads the damaged heap read-only and never writes it.  Exit 0 when
 * everything was copied, 1 when anything was left behind or on an error.
 *
 * It must never replace an existing OUT or publish one that failed its own
 * ah_verify, and never copy a source position once anything was left behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/common/fmt.h"
#include "tools/dump/dump.h"

#define PIECE 4096

/* What verify said about each arrangement it named (the first problem). */
typedef struct problems {
	struct {
		char *name, *msg;
	} *p;
	size_t n, cap;
	uint64_t heap_level;       /* problems that name no arrangement */
	char first_heap[400];
} problems;

static int on_problem(const ah_problem *pr, void *user)
{
	problems *ps = user;
	char msg[600];

	if (!*pr->arrangement) {
		if (!ps->heap_level++)
			snprintf(ps->first_heap, sizeof ps->first_heap, "%s",
			         pr->message);
		return 0;
	}
	for (size_t i = 0; i < ps->n; i++)
		if (!strcmp(ps->p[i].name, pr->arrangement))
			return 0;
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 8;
		void *np = realloc(ps->p, cap * sizeof *ps->p);

		if (!np)
			return AH_ENOMEM;
		ps->p = np;
		ps->cap = cap;
	}
	if (pr->batch && pr->chunk)
		snprintf(msg, sizeof msg, "batch %" PRIu64 ", chunk %" PRIu64 ": %s",
		         pr->batch, pr->chunk, pr->message);
	else if (pr->batch)
		snprintf(msg, sizeof msg, "batch %" PRIu64 ": %s", pr->batch,
		         pr->message);
	else
		snprintf(msg, sizeof msg, "%s", pr->message);
	ps->p[ps->n].name = strdup(pr->arrangement);
	ps->p[ps->n].msg = strdup(msg);
	if (!ps->p[ps->n].name || !ps->p[ps->n].msg)
		return AH_ENOMEM;
	ps->n++;
	return 0;
}

static const char *problem_of(const problems *ps, const char *name)
{
	for (size_t i = 0; i < ps->n; i++)
		if (!strcmp(ps->p[i].name, name))
			return ps->p[i].msg;
	return NULL;
}

static void problems_free(problems *ps)
{
	for (size_t i = 0; i < ps->n; i++) {
		free(ps->p[i].name);
		free(ps->p[i].msg);
	}
	free(ps->p);
}

/* ------------------------------------------------------ one arrangement */

/* Copies NAME from the run's snapshot into out.  0: copied; 1: left
 * behind (why says it: a read failed); < 0: writing OUT failed (why says
 * it), which ends the salvage. */
static int copy_one(dump *d, ah_heap *out, const char *name,
                    ah_arrangement_info *in, char *why, size_t wlen)
{
	ah_update ups[PIECE];
	ah_builder *b = NULL;
	ah_cursor *c = NULL;
	ah_txn *t = NULL;
	size_t n = 0;
	int rc, wrc = 0;

	if ((rc = ah_arrangement_info_get(d->txn, name, in)) < 0) {
		snprintf(why, wlen, "read: %s", ah_txn_errmsg(d->txn));
		return 1;
	}
	if ((wrc = ah_txn_begin(out, 0, &t)) < 0 ||
	    (wrc = ah_arrangement_create(t, name)) < 0)
		goto out_failed;
	if (in->upper == 0) /* nothing sealed: nothing to copy */
		goto commit;
	if ((rc = ah_cursor_open(d->txn, name, &c)) < 0)
		goto read_failed;
	if ((wrc = ah_builder_begin(t, name, 0, in->upper, &b)) < 0)
		goto out_failed;
	for (rc = ah_cursor_key_valid(c); rc == 1; rc = ah_cursor_step_key(c)) {
		const void *k;
		size_t kl;

		if ((rc = ah_cursor_key(c, &k, &kl)) < 0)
			break;
		for (rc = ah_cursor_val_valid(c); rc == 1; rc = ah_cursor_step_val(c)) {
			const void *v;
			size_t vl;
			uint64_t tm;
			int64_t diff;

			if ((rc = ah_cursor_val(c, &v, &vl)) < 0)
				break;
			while ((rc = ah_cursor_time_next(c, &tm, &diff)) == 1) {
				/* Advanced to since; since = upper leaves no time
				 * below upper, and upper - 1 < since reads the same. */
				ups[n++] = (ah_update){ k, kl, v, vl,
				                        tm < in->upper ? tm : in->upper - 1,
				                        diff };
				if (n == PIECE) {
					if ((wrc = ah_builder_push(b, ups, n)) < 0)
						goto out_failed;
					n = 0;
				}
			}
			if (rc < 0)
				break;
		}
		if (rc < 0)
			break;
	}
	if (rc < 0 || (rc = ah_cursor_close(c)) < 0) {
		c = NULL;
		goto read_failed;
	}
	c = NULL;
	if ((n && (wrc = ah_builder_push(b, ups, n)) < 0))
		goto out_failed;
	wrc = ah_builder_finish(b);
	b = NULL;
	if (wrc < 0 || (in->since && (wrc = ah_set_since(t, name, in->since)) < 0))
		goto out_failed;
commit:
	if ((wrc = ah_txn_commit(t)) < 0) {
		snprintf(why, wlen, "commit: %s", ah_strerror(wrc));
		return wrc;
	}
	return 0;
read_failed:
	snprintf(why, wlen, "read: %s", *ah_txn_errmsg(d->txn) ?
	         ah_txn_errmsg(d->txn) : ah_strerror(rc));
	ah_cursor_close(c);
	ah_builder_abandon(b);
	ah_txn_abort(t);
	return 1;
out_failed:
	snprintf(why, wlen, "%s", t && *ah_txn_errmsg(t) ? ah_txn_errmsg(t)
	                                               : ah_strerror(wrc));
	ah_cursor_close(c);
	ah_builder_abandon(b);
	ah_txn_abort(t);
	return wrc;
}

/* ---------------------------------------------------------- sources */

typedef struct pos {
	char name[AH_NAME_MAX + 1];
	void *bytes;
	size_t len;
	char why[300];             /* "" when read */
} pos;

typedef struct pos_list {
	pos *p;
	size_t n, cap;
	bool listing_failed;
	char why[300];
} pos_list;

/* Reads every source position of the snapshot (a copy of each). */
static int read_sources(dump *d, pos_list *l)
{
	char name[AH_NAME_MAX + 1];
	const void *v;
	size_t len;
	int rc;

	for (rc = ah_source_next(d->txn, NULL, name); rc == 0;
	     rc = ah_source_next(d->txn, name, name)) {
		pos *p;

		if (l->n == l->cap) {
			size_t cap = l->cap ? 2 * l->cap : 8;
			void *np = realloc(l->p, cap * sizeof *l->p);

			if (!np)
				return AH_ENOMEM;
			l->p = np;
			l->cap = cap;
		}
		p = &l->p[l->n++];
		memset(p, 0, sizeof *p);
		strcpy(p->name, name);
		if ((rc = ah_source_get(d->txn, name, &v, &len)) < 0) {
			snprintf(p->why, sizeof p->why, "read: %s", ah_strerror(rc));
			continue;
		}
		if (!(p->bytes = malloc(len ? len : 1)))
			return AH_ENOMEM;
		memcpy(p->bytes, v, len);
		p->len = len;
	}
	if (rc != AH_ENOTFOUND) {
		l->listing_failed = true;
		snprintf(l->why, sizeof l->why, "the source table could not be "
		         "listed to its end: %s", ah_strerror(rc));
	}
	return 0;
}

static int write_sources(ah_heap *out, const pos_list *l, char *why,
                         size_t wlen)
{
	ah_txn *t;
	int rc = ah_txn_begin(out, 0, &t);

	for (size_t i = 0; i < l->n && rc == 0; i++)
		rc = ah_source_put(t, l->p[i].name, l->p[i].bytes, l->p[i].len);
	if (rc == 0)
		rc = ah_txn_commit(t);
	else
		ah_txn_abort(t);
	if (rc < 0)
		snprintf(why, wlen, "storing the source positions: %s",
		         ah_strerror(rc));
	return rc;
}

/* ------------------------------------------------------------- OUT */

/* OUT.creating.<pid>: the name the library's own creators use, so a
 * salvage killed half way is swept by the next creator beside it. */
static int temp_name(const char *out, char *tmp, size_t cap)
{
	char lock[PATH_MAX + 8];

	if ((size_t)snprintf(tmp, cap, "%s.creating.%d", out, (int)getpid()) >= cap)
		return -1;
	snprintf(lock, sizeof lock, "%s-lock", tmp);
	unlink(tmp);  /* a dead process's, whose pid this one reuses */
	unlink(lock);
	return 0;
}

static void remove_temp(const char *tmp)
{
	char lock[PATH_MAX + 8];

	snprintf(lock, sizeof lock, "%s-lock", tmp);
	unlink(tmp);
	unlink(lock);
}

/* Moves the closed heap tmp to out without replacing anything and syncs
 * the directory.  0, or an errno value. */
static int publish(const char *tmp, const char *out)
{
	char dir[PATH_MAX], lock[PATH_MAX + 8], *slash;
	int err = 0, fd;

	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_NOREPLACE) != 0) {
		err = errno;
		if (err == EINVAL || err == ENOSYS)
			err = link(tmp, out) == 0 ? (unlink(tmp), 0) : errno;
		if (err)
			return err;
	}
	snprintf(lock, sizeof lock, "%s-lock", tmp);
	unlink(lock);
	snprintf(dir, sizeof dir, "%s", out);
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = 0;
	else if (slash)
		*slash = 0;
	else
		strcpy(dir, ".");
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		if (fsync(fd) != 0)
			err = errno;
		close(fd);
	}
	return err;
}

static int verify_out(ah_heap *out, uint64_t *problems_found)
{
	ah_verify_stats st;
	ah_txn *t;
	int rc = ah_txn_begin(out, AH_TXN_RDONLY, &t);

	if (rc == 0)
		rc = ah_verify(t, NULL, NULL, &st);
	ah_txn_abort(t);
	*problems_found = rc == 0 ? st.problems : 0;
	return rc;
}

/* ------------------------------------------------------------ report */

typedef struct report {
	uint64_t arrangements, salvaged, sources, copied;
	bool positions;            /* copied */
	char left[1024];           /* names left behind, for the last line */
} report;

static void left_behind(report *r, const char *kind, const char *name)
{
	size_t o = strlen(r->left);

	if (o + strlen(name) + 20 < sizeof r->left)
		snprintf(r->left + o, sizeof r->left - o, "%s%s %s", o ? ", " : "",
		         kind, name);
	else if (o + 5 < sizeof r->left && !strstr(r->left, "..."))
		strcat(r->left, ", ...");
}

static void say_arrangement(dump *d, const char *name,
                            const ah_arrangement_info *in, const char *why)
{
	char u[TOOL_FMT_LEN];

	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "name", name);
		tj_kbool(&d->j, "salvaged", why == NULL);
		if (why) {
			tj_kstr(&d->j, "reason", why);
		} else {
			tj_ku64(&d->j, "upper", in->upper);
			tj_ku64(&d->j, "since", in->since);
			tj_ku64(&d->j, "updates", in->updates);
		}
		tj_obj_end(&d->j);
	} else if (why) {
		printf("left behind %s: %s\n", name, why);
	} else {
		printf("salvaged %s: upper %" PRIu64 ", since %" PRIu64 ", %s update%s "
		       "stored\n", name, in->upper, in->since,
		       tool_fmt_count(u, in->updates), in->updates == 1 ? "" : "s");
	}
}

static void say_source(dump *d, const char *name, const char *why)
{
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "name", name);
		tj_kbool(&d->j, "copied", why == NULL);
		if (why)
			tj_kstr(&d->j, "reason", why);
		tj_obj_end(&d->j);
	} else {
		printf("source %s: %s\n", name, why ? why : "position copied");
	}
}

/* ------------------------------------------------------------ command */

typedef struct run {
	dump *d;
	const char *out;
	char *out_h;       /* out escaped, for the human lines and messages */
	char tmp[PATH_MAX];
	ah_heap *oh;
	problems ps;
	pos_list srcs;
	report r;
} run;

static int fatal(run *s, int rc, const char *what)
{
	if (s->oh)
		ah_close(s->oh);
	s->oh = NULL;
	remove_temp(s->tmp);
	return dump_fail(s->d, rc, "salvage %s: %s (nothing written)", s->out_h,
	                 what);
}

static int salvage_arrangements(run *s)
{
	dump *d = s->d;
	char name[AH_NAME_MAX + 1], why[600];
	int rc;

	if (d->json) {
		tj_key(&d->j, "arrangements");
		tj_arr(&d->j);
	}
	for (rc = ah_arrangement_next(d->txn, NULL, name); rc == 0;
	     rc = ah_arrangement_next(d->txn, name, name)) {
		ah_arrangement_info in = { 0 };
		const char *bad = problem_of(&s->ps, name);
		int c;

		s->r.arrangements++;
		if (bad) {
			snprintf(why, sizeof why, "verify: %s", bad);
			c = 1;
		} else if ((c = copy_one(d, s->oh, name, &in, why, sizeof why)) < 0) {
			char what[700];

			snprintf(what, sizeof what, "writing %s: %s", name, why);
			return fatal(s, c, what);
		}
		say_arrangement(d, name, &in, c ? why : NULL);
		if (c)
			left_behind(&s->r, "arrangement", name);
		else
			s->r.salvaged++;
	}
	if (rc != AH_ENOTFOUND) {
		/* A damaged table: the names after this one are lost. */
		snprintf(why, sizeof why, "the arrangement table could not be "
		         "listed past %s: %s", s->r.arrangements ? name : "its start",
		         ah_strerror(rc));
		left_behind(&s->r, "arrangements after", s->r.arrangements ? name
		                                                            : "none");
		if (d->json) {
			tj_obj(&d->j);
			tj_kstr(&d->j, "name", "");
			tj_kbool(&d->j, "salvaged", false);
			tj_kstr(&d->j, "reason", why);
			tj_obj_end(&d->j);
		} else {
			printf("left behind: %s\n", why);
		}
	}
	if (d->json)
		tj_arr_end(&d->j);
	return 0;
}

static int salvage_sources(run *s)
{
	dump *d = s->d;
	bool all = s->r.salvaged == s->r.arrangements && !s->r.left[0];
	char why[400];
	int rc;

	if ((rc = read_sources(d, &s->srcs)) < 0)
		return fatal(s, rc, "out of memory");
	for (size_t i = 0; i < s->srcs.n; i++)
		if (s->srcs.p[i].why[0])
			all = false;
	if (s->srcs.listing_failed)
		all = false;
	if (all && (rc = write_sources(s->oh, &s->srcs, why, sizeof why)) < 0)
		return fatal(s, rc, why);
	s->r.positions = all;
	if (d->json) {
		tj_key(&d->j, "sources");
		tj_arr(&d->j);
	}
	for (size_t i = 0; i < s->srcs.n; i++) {
		const pos *p = &s->srcs.p[i];

		s->r.sources++;
		if (all) {
			s->r.copied++;
			say_source(d, p->name, NULL);
			continue;
		}
		say_source(d, p->name, p->why[0] ? p->why
		           : "position not copied: it would claim data of what was "
		             "left behind");
		left_behind(&s->r, "source", p->name);
	}
	if (s->srcs.listing_failed) {
		if (!d->json)
			printf("left behind: %s\n", s->srcs.why);
		left_behind(&s->r, "sources", "not listed");
	}
	if (d->json)
		tj_arr_end(&d->j);
	return 0;
}

static void summary(run *s, uint64_t heap_problems)
{
	dump *d = s->d;
	bool complete = !s->r.left[0];

	if (d->json) {
		tj_ku64(&d->j, "heap_problems", heap_problems);
		tj_kbool(&d->j, "positions_copied", s->r.positions);
		tj_kbool(&d->j, "complete", complete);
		tj_kstr(&d->j, "salvage", s->out);
		tj_obj_end(&d->j);
		return;
	}
	if (heap_problems)
		printf("heap problems that name no arrangement: %" PRIu64 " (the "
		       "first: %s); nothing of them is carried over\n", heap_problems,
		       s->ps.first_heap);
	if (complete) {
		printf("salvage %s: complete: %" PRIu64 " arrangement%s and %" PRIu64
		       " source position%s copied; verified\n", s->out_h,
		       s->r.arrangements, s->r.arrangements == 1 ? "" : "s",
		       s->r.sources, s->r.sources == 1 ? "" : "s");
		return;
	}
	printf("salvage %s: partial: %" PRIu64 " of %" PRIu64 " arrangements, %"
	       PRIu64 " of %" PRIu64 " source positions; left behind: %s\n",
	       s->out_h, s->r.salvaged, s->r.arrangements, s->r.copied, s->r.sources,
	       s->r.left);
	printf("salvage %s: no source positions: do not resume an engine on it "
	       "(it would start its sources over into arrangements that already "
	       "hold their data); read what survived, rebuild the rest from the "
	       "sources\n", s->out_h);
}

int cmd_salvage(dump *d, int argc, char **argv)
{
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE };
	run s = { .d = d };
	uint64_t out_problems = 0;
	struct stat st;
	int rc, err;

	if (argc != 1 || argv[0][0] == '-')
		return 2;
	s.out = argv[0];
	if (!dump_escape(d, s.out, strlen(s.out)) || !(s.out_h = strdup(d->buf)))
		return 1;
	if (stat(s.out, &st) == 0) {
		rc = dump_fail(d, AH_EEXIST, "salvage %s: file exists", s.out_h);
		free(s.out_h);
		return rc;
	}
	if (temp_name(s.out, s.tmp, sizeof s.tmp) < 0) {
		rc = dump_fail(d, AH_EINVAL, "salvage %s: path too long", s.out_h);
		free(s.out_h);
		return rc;
	}
	rc = ah_verify(d->txn, on_problem, &s.ps, NULL);
	for (int tries = 0; rc == AH_EBUSY && tries < 3; tries++) {
		problems_free(&s.ps);
		memset(&s.ps, 0, sizeof s.ps);
		if ((rc = dump_renew(d)) == 0)
			rc = ah_verify(d->txn, on_problem, &s.ps, NULL);
	}
	if (rc < 0) {
		problems_free(&s.ps);
		return dump_lib_error(d, rc, "salvage: verify");
	}
	if ((rc = ah_open(s.tmp, &o, &s.oh)) < 0) {
		rc = dump_fail(d, rc, "salvage %s: %s", s.out_h, rc == AH_ENOTFOUND ?
		               "no such directory" : ah_strerror(rc));
		goto out;
	}
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "heap", d->path);
	}
	if ((rc = salvage_arrangements(&s)) || (rc = salvage_sources(&s)))
		goto out;
	if ((rc = verify_out(s.oh, &out_problems)) < 0 || out_problems) {
		rc = fatal(&s, rc < 0 ? rc : AH_ECORRUPT, "the new heap does not "
		           "verify");
		goto out;
	}
	rc = ah_close(s.oh);
	s.oh = NULL;
	if (rc < 0 || (err = publish(s.tmp, s.out)) != 0) {
		rc = fatal(&s, rc < 0 ? rc : err == EEXIST ? AH_EEXIST : AH_EIO,
		           rc < 0 ? "close failed" : strerror(err));
		goto out;
	}
	summary(&s, s.ps.heap_level);
	rc = s.r.left[0] ? 1 : 0;
out:
	if (s.oh) {
		ah_close(s.oh);
		remove_temp(s.tmp);
	}
	problems_free(&s.ps);
	for (size_t i = 0; i < s.srcs.n; i++)
		free(s.srcs.p[i].bytes);
	free(s.srcs.p);
	free(s.out_h);
	return rc;
}
