/*
 * tests/ship/test_ship.c - snapshots shipped for real (issue 15 item 4):
 * an S3 endpoint on loopback (s3rver, from tests/ship/node_modules, which
 * `make test` installs with npm ci), rclone's S3 backend configured from
 * environment variables only, and the README's recipe run step by step:
 * ah-load, ah-snapshot push, rclone sync (tmp/ and lock excluded), more
 * loading, a second push whose sync uploads only the new objects and the
 * manifest, the machine lost (DIR and heap deleted), rclone copy into a
 * fresh DIR2 and ah-snapshot restore, whose heap reads exactly as the
 * original did (rows, batches, source position).  Then one object in the
 * bucket overwritten with one byte altered: a restore from the bucket
 * fails with exit 1 and leaves nothing.  The server is killed in the
 * .fini (and dies with the test's process: PR_SET_PDEATHSIG).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tl_dir.h"
#include "tl_rand.h"
#include "tl_run.h"

extern char **environ;

#define SHIP_SEED 15004u
#define REMOTE "ahship"         /* RCLONE_CONFIG_AHSHIP_* */
#define BUCKET REMOTE ":ahship-bucket"
#define SNAPS BUCKET "/snaps"
#define EXCLUDES "--exclude '/tmp/**' --exclude /lock"

static tl_dir tmp;
static pid_t server = -1;
static int port;

/* ------------------------------------------------------------ the server */

static void stop_server(void)
{
	int st, i;

	if (server <= 0)
		return;
	kill(server, SIGTERM);
	for (i = 0; i < 100; i++) {          /* up to 5 s, then SIGKILL */
		if (waitpid(server, &st, WNOHANG) == server) {
			server = -1;
			return;
		}
		usleep(50 * 1000);
	}
	kill(server, SIGKILL);
	waitpid(server, &st, 0);
	server = -1;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 1 << 16);
	size_t n = 0;

	cr_assert_not_null(buf);
	if (f) {
		n = fread(buf, 1, (1 << 16) - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return buf;
}

/* Starts s3rver on 127.0.0.1, port 0 (the kernel picks a free one), and
 * reads the port from its "S3rver listening on 127.0.0.1:PORT" line. */
static void start_server(void)
{
	char script[512], data[128], logp[128];
	struct stat sb;
	int i;

	snprintf(script, sizeof script, "%s/tests/ship/node_modules/s3rver/bin/s3rver.js",
	         tl_src());
	cr_assert_eq(stat(script, &sb), 0, "%s missing: run `make ship-deps` "
	             "(npm ci in tests/ship)", script);
	tl_dir_file(&tmp, "s3data", data, sizeof data);
	tl_dir_file(&tmp, "s3rver.log", logp, sizeof logp);
	cr_assert_eq(mkdir(data, 0700), 0);
	server = fork();
	cr_assert_neq(server, -1, "fork: %s", strerror(errno));
	if (server == 0) {
		int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int nul = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd < 0 || nul < 0)
			_exit(126);
		dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execlp("node", "node", script, "-d", data, "-a", "127.0.0.1", "-p", "0",
		       (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 400; i++) {          /* up to 20 s */
		char *log = slurp(logp), *p = strstr(log, "listening on 127.0.0.1:");
		int st;

		if (p)
			port = atoi(p + strlen("listening on 127.0.0.1:"));
		if (port > 0) {
			free(log);
			return;
		}
		if (waitpid(server, &st, WNOHANG) == server) {
			server = -1;
			cr_assert_fail("s3rver exited (status %d) before listening:\n%s",
			               st, log);
		}
		free(log);
		usleep(50 * 1000);
	}
	cr_assert_fail("s3rver did not say where it listens in 20 s:\n%s", slurp(logp));
}

/* rclone from the environment only: no config file read or written
 * (RCLONE_CONFIG=/dev/null keeps it in memory), and none of the caller's
 * AWS_* variables (AWS_CA_BUNDLE, for one, breaks rclone's plain-http
 * transport: "unable to load custom CA bundle"). */
static void rclone_env(void)
{
	char v[128];
	int again = 1;

	while (again) {
		char **e;

		again = 0;
		for (e = environ; *e; e++)
			if (strncmp(*e, "AWS_", 4) == 0) {
				char name[256];
				size_t n = strcspn(*e, "=");

				snprintf(name, sizeof name, "%.*s", (int)n, *e);
				unsetenv(name);
				again = 1;
				break;
			}
	}
	setenv("RCLONE_CONFIG", "/dev/null", 1);
	setenv("RCLONE_CACHE_DIR", tl_dir_file(&tmp, "rclone-cache", v, sizeof v), 1);
	setenv("RCLONE_CONFIG_AHSHIP_TYPE", "s3", 1);
	setenv("RCLONE_CONFIG_AHSHIP_PROVIDER", "Other", 1);
	snprintf(v, sizeof v, "http://127.0.0.1:%d", port);
	setenv("RCLONE_CONFIG_AHSHIP_ENDPOINT", v, 1);
	setenv("RCLONE_CONFIG_AHSHIP_ACCESS_KEY_ID", "S3RVER", 1);      /* s3rver's */
	setenv("RCLONE_CONFIG_AHSHIP_SECRET_ACCESS_KEY", "S3RVER", 1);
	setenv("RCLONE_CONFIG_AHSHIP_FORCE_PATH_STYLE", "true", 1);
}

static void setup(void)
{
	tmp = tl_tmpdir("ship");
	start_server();
	rclone_env();
}

static void teardown(void)
{
	stop_server();
	tl_dir_cleanup(&tmp);
}

/* ------------------------------------------------------------ helpers */

/* Runs a shell command (printf-style), stderr caught too; asserts its exit
 * status is want; returns what it printed (malloc'd). */
static char *run(int want, const char *fmt, ...)
{
	char cmd[4096], *out;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	rc = tl_sh(cmd, true, &out);
	cr_assert_eq(rc, want, "seed %u: exit %d, want %d: %s\n%s", SHIP_SEED, rc,
	             want, cmd, out);
	return out;
}

/* The README's shipping recipe: objects before manifests, so the bucket
 * never holds a manifest without its objects; then pruned objects go. */
static char *ship(const char *dir)
{
	char *a = run(0, "rclone copy '%s/objects' " SNAPS "/objects -v", dir);
	char *b = run(0, "rclone sync '%s/manifests' " SNAPS "/manifests -v", dir);
	char *c = run(0, "rclone sync '%s/objects' " SNAPS "/objects -v", dir);
	size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
	char *o = malloc(n);

	cr_assert_not_null(o);
	snprintf(o, n, "%s%s%s", a, b, c);
	free(a);
	free(b);
	free(c);
	return o;
}

/* Same, stdout only (for outputs compared byte for byte). */
static char *run_out(const char *fmt, ...)
{
	char cmd[4096], *out;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	rc = tl_sh(cmd, false, &out);
	cr_assert_eq(rc, 0, "seed %u: exit %d: %s\n%s", SHIP_SEED, rc, cmd, out);
	return out;
}

static size_t count_lines(const char *s, const char *needle)
{
	size_t n = 0;

	for (; (s = strstr(s, needle)) != NULL; s++)
		n++;
	return n;
}

/* Appends COMMITS commits of UPDATES updates each to the changelog, over
 * the arrangements NAMES (one letter each), times from *t on. */
static void write_log(const char *path, uint64_t *rs, const char *names,
                      int commits, int updates, uint64_t *t, int create)
{
	FILE *f = fopen(path, "a");
	size_t nn = strlen(names);
	int c, i;

	cr_assert_not_null(f);
	if (create)
		for (i = 0; i < (int)nn; i++)
			fprintf(f, "arrange\t%c\n", names[i]);
	for (c = 0; c < commits; c++) {
		for (i = 0; i < updates; i++) {
			static const int diffs[] = { 1, 1, 2, -1 };

			fprintf(f, "update\t%c\t%" PRIu64 "\tk%05" PRIu64 "\tv%" PRIu64 "\t%d\n",
			        names[tl_below(rs, nn)], *t, tl_below(rs, 800),
			        tl_below(rs, 4), diffs[tl_below(rs, 4)]);
		}
		++*t;
		for (i = 0; i < (int)nn; i++)
			fprintf(f, "advance\t%c\t%" PRIu64 "\n", names[i], *t);
		fputs("commit\n", f);
	}
	cr_assert_eq(fclose(f), 0);
}

/* What a heap shows that a restore must keep: rows, batches (ids, bounds,
 * counts), source position. */
static char *heap_view(const char *heap)
{
	const char *cmds[] = { "read a", "read b", "batches a", "batches b",
	                       "source changelog", "arrangements" };
	size_t cap = 1 << 20, n = 0, i;
	char *all = malloc(cap);

	cr_assert_not_null(all);
	all[0] = 0;
	for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		char *o = run_out("'%s/ah-dump' '%s' %s", tl_build(), heap, cmds[i]);
		size_t l = strlen(o);

		cr_assert_gt(l, 0, "ah-dump %s printed nothing", cmds[i]);
		while (n + l + 64 > cap)
			all = realloc(all, cap *= 2);
		n += (size_t)snprintf(all + n, cap - n, "== %s\n%s", cmds[i], o);
		free(o);
	}
	return all;
}

/* Sorted file list of a local DIR as rclone would ship it (objects/ and
 * manifests/), one relative path a line. */
static char *local_files(const char *dir)
{
	return run_out("cd '%s' && find objects manifests -type f | LC_ALL=C sort", dir);
}

static char *remote_files(void)
{
	return run_out("rclone lsf -R --files-only " SNAPS " | LC_ALL=C sort");
}

/* The lines of b not in a (both sorted), as a string. */
static char *added(const char *a, const char *b)
{
	char pa[128], pb[128], *o;
	FILE *f;

	tl_dir_file(&tmp, "list-a", pa, sizeof pa);
	tl_dir_file(&tmp, "list-b", pb, sizeof pb);
	f = fopen(pa, "w");
	cr_assert_not_null(f);
	fputs(a, f);
	fclose(f);
	f = fopen(pb, "w");
	cr_assert_not_null(f);
	fputs(b, f);
	fclose(f);
	o = run_out("LC_ALL=C comm -13 '%s' '%s'", pa, pb);
	return o;
}

/* "pushed ID: commit C, A arrangements, N objects new of T, ..." */
static void parse_push(const char *out, char *id, unsigned *nnew, unsigned *ntotal)
{
	cr_assert_eq(sscanf(out, "pushed %23[0-9a-f-]: commit %*u, %*u arrangements, "
	                    "%u objects new of %u", id, nnew, ntotal), 3,
	             "push said: %s", out);
}

/* ------------------------------------------------------------ the test */

Test(ship, rclone_s3_round_trip, .init = setup, .fini = teardown, .timeout = 300)
{
	char dir[128], heap[128], logp[128], dir2[128], heap2[128], dir3[128],
	     h3dir[128], heap3[160], id1[24], id2[24], obj[256], objf[300];
	const char *B = tl_build();
	uint64_t rs = tl_seed("ship/rclone_s3_round_trip", SHIP_SEED), t = 0;
	unsigned new1, tot1, new2, tot2;
	char *o, *files1, *files2, *fresh, *want, *got, *line;
	struct timespec t0, t1;
	struct stat sb;
	FILE *f;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	tl_dir_file(&tmp, "snaps", dir, sizeof dir);
	tl_dir_file(&tmp, "heap", heap, sizeof heap);
	tl_dir_file(&tmp, "changelog", logp, sizeof logp);
	tl_dir_file(&tmp, "snaps2", dir2, sizeof dir2);
	tl_dir_file(&tmp, "heap2", heap2, sizeof heap2);
	tl_dir_file(&tmp, "snaps3", dir3, sizeof dir3);
	tl_dir_file(&tmp, "h3", h3dir, sizeof h3dir);
	snprintf(heap3, sizeof heap3, "%s/heap3", h3dir);

	free(run(0, "rclone mkdir " BUCKET));

	/* 1. Load a and b (6 commits, 3,000 updates), push, sync. */
	write_log(logp, &rs, "ab", 6, 500, &t, 1);
	o = run(0, "'%s/ah-load' '%s' '%s'", B, heap, logp);
	cr_assert(strstr(o, "applied 6 commits"), "%s", o);
	free(o);
	o = run(0, "'%s/ah-snapshot' push '%s' '%s'", B, heap, dir);
	parse_push(o, id1, &new1, &tot1);
	cr_assert(new1 == tot1 && tot1 > 0, "first push: %s", o);
	free(o);
	/* A leftover of a killed push, which must not ship. */
	snprintf(objf, sizeof objf, "%s/tmp/leftover", dir);
	f = fopen(objf, "w");
	cr_assert_not_null(f, "DIR/tmp missing after a push");
	fputs("x", f);
	fclose(f);
	snprintf(objf, sizeof objf, "%s/lock", dir);
	cr_assert_eq(stat(objf, &sb), 0,
	             "DIR/lock missing after a push");

	files1 = local_files(dir);
	cr_assert_eq(count_lines(files1, "manifests/"), 1, "%s", files1);
	cr_assert_eq(count_lines(files1, "objects/"), tot1, "%s", files1);
	o = ship(dir);
	cr_assert_eq(count_lines(o, ": Copied (new)"), tot1 + 1, "first sync:\n%s", o);
	free(o);
	o = remote_files();
	cr_assert_str_eq(o, files1, "bucket after the first sync:\n%s", o);
	free(o);

	/* 2. More updates to b only (a's chunks stay: shared objects), push,
	 * sync: only the new objects and the new manifest go up. */
	{
		FILE *g = fopen(logp, "a");
		int c, i;

		cr_assert_not_null(g);
		for (c = 0; c < 4; c++) {
			for (i = 0; i < 500; i++)
				fprintf(g, "update\tb\t%" PRIu64 "\tk%05" PRIu64 "\tv%" PRIu64 "\t1\n",
				        t, tl_below(&rs, 800), tl_below(&rs, 4));
			fprintf(g, "advance\tb\t%" PRIu64 "\ncommit\n", ++t);
		}
		cr_assert_eq(fclose(g), 0);
	}
	o = run(0, "'%s/ah-load' '%s' '%s'", B, heap, logp);
	cr_assert(strstr(o, "applied 4 commits"), "%s", o);
	free(o);
	o = run(0, "'%s/ah-snapshot' push '%s' '%s'", B, heap, dir);
	parse_push(o, id2, &new2, &tot2);
	cr_assert(new2 > 0 && new2 < tot2, "second push shares nothing: %s", o);
	cr_assert_str_neq(id1, id2);
	free(o);
	files2 = local_files(dir);
	fresh = added(files1, files2);
	cr_assert_eq(count_lines(fresh, "manifests/"), 1, "new files:\n%s", fresh);
	cr_assert_eq(count_lines(fresh, "objects/"), new2, "new files:\n%s", fresh);
	o = ship(dir);
	cr_assert_eq(count_lines(o, ": Copied ("), new2 + 1, "second sync:\n%s", o);
	cr_assert_eq(count_lines(o, ": Copied (new)"), new2 + 1, "second sync:\n%s", o);
	cr_assert_eq(count_lines(o, "Deleted"), 0, "second sync:\n%s", o);
	for (line = strtok(fresh, "\n"); line; line = strtok(NULL, "\n")) {
		char needle[300];

		/* rclone names files relative to the directory it ships. */
		const char *base = strrchr(line, '/') ? strrchr(line, '/') + 1 : line;

		snprintf(needle, sizeof needle, "INFO  : %s: Copied (new)", base);
		cr_assert(strstr(o, needle), "sync did not upload %s:\n%s", line, o);
	}
	free(o);
	o = remote_files();
	cr_assert_str_eq(o, files2, "bucket after the second sync:\n%s", o);
	free(o);

	/* The original, as seen before the machine is lost. */
	want = heap_view(heap);

	/* 3. Machine lost; restore elsewhere from the bucket. */
	free(run(0, "rm -rf '%s' '%s'", dir, heap));
	cr_assert_neq(stat(heap, &sb), 0);
	free(run(0, "rclone copy " SNAPS " '%s' -v", dir2));
	o = local_files(dir2);
	cr_assert_str_eq(o, files2, "copied back:\n%s", o);
	free(o);
	o = run(0, "'%s/ah-snapshot' restore '%s' '%s'", B, dir2, heap2);
	cr_assert(strstr(o, id2), "restore did not take the newest (%s): %s", id2, o);
	free(o);
	got = heap_view(heap2);
	cr_assert_str_eq(got, want, "seed %u: restored heap differs:\n%s\n--- "
	                 "original:\n%s", SHIP_SEED, got, want);
	free(got);
	free(want);

	/* 4. One object of the newest snapshot altered in the bucket (same
	 * size, one byte flipped): the restore fails and leaves nothing. */
	o = run_out("grep -m1 '^object ' '%s/manifests/%s'", dir2, id2);
	{
		unsigned long long oid;
		char xx[17];

		cr_assert_eq(sscanf(o, "object %llu %16s", &oid, xx), 2, "%s", o);
		snprintf(obj, sizeof obj, "objects/%016llx-%s", oid, xx);
	}
	free(o);
	tl_dir_file(&tmp, "obj", objf, sizeof objf);
	free(run(0, "rclone cat " SNAPS "/%s > '%s'", obj, objf));
	{
		int fd = open(objf, O_RDWR);
		unsigned char c;
		off_t at;

		cr_assert_geq(fd, 0);
		cr_assert_eq(fstat(fd, &sb), 0);
		cr_assert_gt(sb.st_size, 0, "%s empty", obj);
		at = (off_t)tl_below(&rs, (uint64_t)sb.st_size);
		cr_assert_eq(pread(fd, &c, 1, at), 1);
		c ^= 0x10;
		cr_assert_eq(pwrite(fd, &c, 1, at), 1);
		close(fd);
		cr_log_info("ship: flipped byte %lld of %s", (long long)at, obj);
	}
	free(run(0, "rclone rcat " SNAPS "/%s < '%s'", obj, objf));
	o = run_out("rclone cat " SNAPS "/%s | cmp - '%s' && echo same", obj, objf);
	cr_assert_str_eq(o, "same\n", "the bucket did not take the altered object");
	free(o);
	free(run(0, "rclone copy " SNAPS " '%s'", dir3));
	cr_assert_eq(mkdir(h3dir, 0700), 0);
	o = run(1, "'%s/ah-snapshot' restore '%s' '%s'", B, dir3, heap3);
	cr_assert(strstr(o, strchr(obj, '/') + 1), "restore did not name %s: %s",
	          obj, o);
	free(o);
	cr_assert_neq(stat(heap3, &sb), 0, "a failed restore left %s", heap3);
	o = run_out("ls -A '%s'", h3dir);
	cr_assert_str_eq(o, "", "a failed restore left files: %s", o);
	free(o);

	free(files1);
	free(files2);
	free(fresh);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_log_info("ship: %u + %u objects, took %.1f s", tot1, new2,
	            (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
}
