/*
 * tools/dump/write.c - ah-dump's commands that change a heap: since,
 * advance, maintain, drop; and dump_write, the one write transaction each
 * of them runs in.
 *
 * Each command is one write transaction of the public API, with the API's
 * rules and messages: since never goes back and never passes the upper,
 * the upper only advances (ah_set_since, ah_advance: AH_EFRONTIER and the
 * transaction's one-line message), maintain is ah_maintain, drop is
 * ah_arrangement_drop.  Nothing is printed before the commit returned.
 *
 * The writer lock is LMDB's: a second writer waits for the first.  So a
 * write command started while an engine (ah-pgsync, ah-load) writes the
 * heap waits; after a second it says so once on stderr, naming the
 * processes that have the heap open (from /proc/PID/maps), and goes on
 * waiting until the lock is free (^C gives up: nothing is written).  The
 * transaction is begun and committed in a thread of its own, because the
 * lock belongs to the thread that took it, while the main thread watches
 * the clock.
 *
 * It must never commit a transaction whose command failed (a non-zero status
 * from fn aborts it), never print a result before its commit returned, and
 * never write a source position.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "tools/common/fmt.h"
#include "tools/dump/dump.h"

/* ---------------------------------------------------- the writer lock */

/* "pid N (comm), ..." of the other processes that map the heap file, at
 * most five; "" when none is found (or /proc cannot be read). */
static void heap_users(const char *path, char *out, size_t cap)
{
	struct stat st;
	struct dirent *e;
	size_t o = 0;
	int n = 0;
	DIR *proc;

	out[0] = 0;
	if (stat(path, &st) != 0 || !(proc = opendir("/proc")))
		return;
	while ((e = readdir(proc)) && n < 5) {
		char file[300], line[4096], comm[64] = "?";
		long pid = strtol(e->d_name, NULL, 10);
		bool uses = false;
		FILE *f;

		if (pid <= 0 || pid == (long)getpid())
			continue;
		snprintf(file, sizeof file, "/proc/%ld/maps", pid);
		if (!(f = fopen(file, "r")))
			continue;
		while (!uses && fgets(line, sizeof line, f)) {
			unsigned maj, min;
			unsigned long ino;

			uses = sscanf(line, "%*s %*s %*s %x:%x %lu", &maj, &min,
			              &ino) == 3 && ino == (unsigned long)st.st_ino &&
			       maj == major(st.st_dev) && min == minor(st.st_dev);
		}
		fclose(f);
		if (!uses)
			continue;
		snprintf(file, sizeof file, "/proc/%ld/comm", pid);
		if ((f = fopen(file, "r"))) {
			if (fgets(comm, sizeof comm, f))
				comm[strcspn(comm, "\n")] = 0;
			fclose(f);
		}
		o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, "%spid %ld (%s)",
		                      n++ ? ", " : "", pid, comm);
	}
	closedir(proc);
}

typedef struct writer {
	dump *d;
	int (*fn)(dump *d, ah_txn *t, void *arg);
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool locked, done;
	int status;
} writer;

static void note(writer *w, bool *flag)
{
	pthread_mutex_lock(&w->mu);
	*flag = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void *write_thread(void *p)
{
	writer *w = p;
	dump *d = w->d;
	ah_txn *t = NULL;
	int rc = ah_txn_begin(d->heap, 0, &t);

	note(w, &w->locked);
	if (rc < 0) {
		w->status = dump_fail(d, rc, "%s: begin write transaction: %s",
		                      d->heap_path, ah_strerror(rc));
	} else if ((w->status = w->fn(d, t, w->arg)) != 0) {
		ah_txn_abort(t);
	} else if ((rc = ah_txn_commit(t)) < 0) {
		w->status = dump_fail(d, rc, "%s: commit: %s", d->heap_path,
		                      ah_strerror(rc));
	}
	note(w, &w->done);
	return NULL;
}

int dump_write(dump *d, int (*fn)(dump *d, ah_txn *t, void *arg), void *arg)
{
	writer w = { d, fn, arg, PTHREAD_MUTEX_INITIALIZER,
	             PTHREAD_COND_INITIALIZER, false, false, 0 };
	struct timespec at;
	pthread_t th;
	bool said = false;

	ah_txn_abort(d->txn);
	d->txn = NULL;
	if (pthread_create(&th, NULL, write_thread, &w) != 0)
		return dump_fail(d, AH_ENOMEM, "cannot start a thread");
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 1;
	pthread_mutex_lock(&w.mu);
	while (!w.locked && !said)
		if (pthread_cond_timedwait(&w.cv, &w.mu, &at) == ETIMEDOUT &&
		    !w.locked) {
			char users[400];

			heap_users(d->path, users, sizeof users);
			fprintf(stderr, "ah-dump: %s: waiting for the heap's writer "
			        "lock: another process has a write transaction open%s%s%s; "
			        "^C gives up, nothing written\n", d->heap_path,
			        *users ? " (the heap is open in " : "", users,
			        *users ? ")" : "");
			said = true;
		}
	while (!w.done)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	pthread_join(th, NULL);
	return w.status;
}

/* A library error of a write: "HEAP: WHAT: DETAIL" (the txn's message). */
static int write_error(dump *d, ah_txn *t, int rc, const char *what)
{
	const char *detail = ah_txn_errmsg(t);

	return dump_fail(d, rc, "%s: %s: %s", d->heap_path, what,
	                 *detail ? detail : ah_strerror(rc));
}

static int info_of(dump *d, ah_txn *t, const char *name, const char *what,
                   ah_arrangement_info *in)
{
	int rc = ah_arrangement_info_get(t, name, in);

	if (rc == AH_ENOTFOUND || rc == AH_EINVAL)
		return dump_fail(d, AH_ENOTFOUND, "%s: %s: unknown arrangement %s",
		                 d->heap_path, what, dump_escape(d, name, strlen(name)));
	return rc < 0 ? write_error(d, t, rc, what) : 0;
}

/* ------------------------------------------------------ since, advance */

typedef struct frontier_op {
	const char *name;
	uint64_t to;
	bool upper;                /* advance (else since) */
	char what[160];
	ah_arrangement_info before;
} frontier_op;

static int do_frontier(dump *d, ah_txn *t, void *arg)
{
	frontier_op *op = arg;
	int rc;

	if ((rc = info_of(d, t, op->name, op->what, &op->before)))
		return rc;
	rc = op->upper ? ah_advance(t, op->name, op->before.upper, op->to)
	               : ah_set_since(t, op->name, op->to);
	return rc < 0 ? write_error(d, t, rc, op->what) : 0;
}

static int frontier_cmd(dump *d, int argc, char **argv, bool upper)
{
	frontier_op op = { .upper = upper };
	const char *cmd = upper ? "advance" : "since";
	int rc;

	if (argc != 2 || argv[0][0] == '-')
		return 2;
	op.name = argv[0];
	if (dump_parse_u64(d, upper ? "UPPER" : "SINCE", argv[1], &op.to) < 0)
		return 2;
	snprintf(op.what, sizeof op.what, "%s %s %" PRIu64, cmd, op.name, op.to);
	if ((rc = dump_write(d, do_frontier, &op)))
		return rc;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "arrangement", op.name);
		tj_ku64(&d->j, upper ? "upper_before" : "since_before",
		        upper ? op.before.upper : op.before.since);
		tj_ku64(&d->j, upper ? "upper" : "since", op.to);
		tj_ku64(&d->j, upper ? "since" : "upper",
		        upper ? op.before.since : op.before.upper);
		tj_obj_end(&d->j);
	} else if (upper) {
		dump_line("%s: upper %" PRIu64 " -> %" PRIu64 " (no data: an empty "
		       "batch; since %" PRIu64 ")\n", op.name, op.before.upper,
		       op.to, op.before.since);
	} else {
		dump_line("%s: since %" PRIu64 " -> %" PRIu64 " (upper %" PRIu64 ")\n",
		       op.name, op.before.since, op.to, op.before.upper);
	}
	return 0;
}

int cmd_since(dump *d, int argc, char **argv)
{
	return frontier_cmd(d, argc, argv, false);
}

int cmd_advance(dump *d, int argc, char **argv)
{
	return frontier_cmd(d, argc, argv, true);
}

/* ----------------------------------------------------------- maintain */

typedef struct maintain_op {
	const char *name;
	uint64_t fuel;
	int idle;
	char what[160];
	ah_arrangement_info before, after;
} maintain_op;

static int do_maintain(dump *d, ah_txn *t, void *arg)
{
	maintain_op *op = arg;
	int rc;

	if ((rc = info_of(d, t, op->name, op->what, &op->before)))
		return rc;
	if ((rc = ah_maintain(t, op->name, op->fuel, &op->idle)) < 0 ||
	    (rc = ah_arrangement_info_get(t, op->name, &op->after)) < 0)
		return write_error(d, t, rc, op->what);
	return 0;
}

static void json_info(dump *d, const char *key, const ah_arrangement_info *in)
{
	tj_key(&d->j, key);
	tj_obj(&d->j);
	tj_ku64(&d->j, "batches", in->batches);
	tj_ku64(&d->j, "merging", in->merging);
	tj_ku64(&d->j, "updates", in->updates);
	tj_ku64(&d->j, "chunks", in->chunks);
	tj_ku64(&d->j, "bytes", in->bytes);
	tj_obj_end(&d->j);
}

int cmd_maintain(dump *d, int argc, char **argv)
{
	maintain_op op = { 0 };
	char a[TOOL_FMT_LEN], b[TOOL_FMT_LEN], c[TOOL_FMT_LEN], e[TOOL_FMT_LEN];
	int rc;

	for (int i = 0; i < argc; i++)
		if (!strcmp(argv[i], "--fuel") && i + 1 < argc) {
			if (dump_parse_u64(d, "--fuel", argv[++i], &op.fuel) < 0)
				return 2;
		} else if (!op.name && argv[i][0] != '-') {
			op.name = argv[i];
		} else {
			return 2;
		}
	if (!op.name)
		return 2;
	snprintf(op.what, sizeof op.what, "maintain %s", op.name);
	if ((rc = dump_write(d, do_maintain, &op)))
		return rc;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "arrangement", op.name);
		tj_ku64(&d->j, "fuel", op.fuel);
		tj_kbool(&d->j, "idle", op.idle);
		json_info(d, "before", &op.before);
		json_info(d, "after", &op.after);
		tj_obj_end(&d->j);
		return 0;
	}
	dump_line("%s: batches %" PRIu64 " -> %" PRIu64 ", merges in progress %"
	       PRIu64 " -> %" PRIu64 ", updates %s -> %s, chunks %s -> %s; %s\n",
	       op.name, op.before.batches, op.after.batches, op.before.merging,
	       op.after.merging, tool_fmt_count(a, op.before.updates),
	       tool_fmt_count(b, op.after.updates),
	       tool_fmt_count(c, op.before.chunks),
	       tool_fmt_count(e, op.after.chunks),
	       op.idle ? "idle" : "more merge work left (maintain again)");
	return 0;
}

/* --------------------------------------------------------------- drop */

typedef struct drop_op {
	const char *name;
	char what[160];
	ah_arrangement_info before;
	uint64_t pages;
} drop_op;

static int add_pages(const ah_chunk_info *c, void *user)
{
	*(uint64_t *)user += c->class_pages;
	return 0;
}

static int do_drop(dump *d, ah_txn *t, void *arg)
{
	drop_op *op = arg;
	int rc;

	if ((rc = info_of(d, t, op->name, op->what, &op->before)))
		return rc;
	if ((rc = ah_chunk_foreach(t, op->name, add_pages, &op->pages)) < 0 ||
	    (rc = ah_arrangement_drop(t, op->name)) < 0)
		return write_error(d, t, rc, op->what);
	return 0;
}

int cmd_drop(dump *d, int argc, char **argv)
{
	drop_op op = { 0 };
	char u[TOOL_FMT_LEN], c[TOOL_FMT_LEN], p[TOOL_FMT_LEN];
	int rc;

	if (argc != 1 || argv[0][0] == '-')
		return 2;
	op.name = argv[0];
	snprintf(op.what, sizeof op.what, "drop %s", op.name);
	if ((rc = dump_write(d, do_drop, &op)))
		return rc;
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "dropped", op.name);
		tj_ku64(&d->j, "batches", op.before.batches);
		tj_ku64(&d->j, "updates", op.before.updates);
		tj_ku64(&d->j, "chunks", op.before.chunks);
		tj_ku64(&d->j, "chunk_pages", op.pages);
		tj_obj_end(&d->j);
		return 0;
	}
	dump_line("dropped %s: %" PRIu64 " batch%s, %s update%s, %s chunk%s (%s "
	       "page%s, reusable once no reader's snapshot still sees them)\n",
	       op.name, op.before.batches, op.before.batches == 1 ? "" : "es",
	       tool_fmt_count(u, op.before.updates),
	       op.before.updates == 1 ? "" : "s",
	       tool_fmt_count(c, op.before.chunks),
	       op.before.chunks == 1 ? "" : "s", tool_fmt_count(p, op.pages),
	       op.pages == 1 ? "" : "s");
	return 0;
}
