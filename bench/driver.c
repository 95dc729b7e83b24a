/*
 * bench/driver.c - ah-bench: runs every system on every size, each
 * measurement in a fresh process, and writes the table, results.json and
 * the data of the start-up plot.
 *
 *   ah-bench [--sizes N,N,...] [--runs R] [--out DIR] [--data DIR]
 *            [--bin DIR] [--keep] [--max-rebuild-s S] [--systems A,B]
 *   ah-bench gen N LOG        only writes the log of N updates
 *
 * Per size: generate the flat log of N updates (bench/common.c); then
 * arrheap, arrheap-bg (arrheap with the merge thread in every process, in
 * a directory of its own), rocksdb and lmdb (and rebuild, R runs, right
 * after arrheap): load once (ingest),
 * one discarded warm-up start, R warm starts, a warm scan, R cold starts
 * (each after evicting the system's files from the page cache, confirmed
 * with mincore), a cold scan; then rocksdb's reopen after kill -9, and
 * arrheap's full merge (after which its heap is removed unless --keep).
 * Start-up figures are medians of R runs with min
 * and max (--max-rebuild-s S: the rebuild stops after 3 runs once its runs
 * took S seconds, for the largest sizes on a slow machine; the row's "runs"
 * says how many).  The answers of all systems are compared run by run.
 *
 * The driver only measures: it asserts nothing about speed.  It links no
 * system library (bench/common.c only).
 *
 * It must never count the warm-up start among the R runs (its open time is
 * reported apart, as first_open_after_load_ms), nor time a cold start before
 * its system's files were evicted (fsync, POSIX_FADV_DONTNEED, then mincore
 * counts what stayed resident).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include "bench/bench.h"
#include "bench/driver.h"

static drv_opts O = { .runs = 5, .out = "build/bench", .data = NULL,
                      .bin = "build/bench" };

/* ---------------------------------------------------------- children */

/* Runs BIN ARGS..., with "T0" in args replaced by the clock just before
 * fork; parses "name value" lines into f.  Returns the exit status (or
 * 128 + signal). */
/* Ctrl-C or a kill: the measured child is killed, the data directory goes
 * (unless --keep), and the results already written stay marked
 * "complete": false. */
static volatile sig_atomic_t stop_signal;
static volatile pid_t current_child;
static char cur_dir[4096]; /* the size being measured: its data directory */
static void stop_now(void);

static void on_signal(int sig)
{
	stop_signal = sig;
	if (current_child > 0)
		kill(current_child, SIGKILL);
}

static int run_child(const char *bin, figs *f, const char *const *args)
{
	char path[4096], t0[32];
	const char *argv[16];
	int fd[2], st, n = 0, t0_at = -1;

	snprintf(path, sizeof path, "%s/%s", O.bin, bin);
	argv[n++] = path;
	for (; *args && n < 15; args++, n++) {
		if (strcmp(*args, "T0") == 0)
			t0_at = n;
		argv[n] = *args;
	}
	argv[n] = NULL;
	if (pipe(fd) != 0)
		bench_die("pipe: %s", strerror(errno));
	fflush(NULL);
	uint64_t now = bench_now_ns();
	snprintf(t0, sizeof t0, "%llu", (unsigned long long)now);
	if (t0_at >= 0)
		argv[t0_at] = t0;
	if (stop_signal)
		stop_now();
	pid_t pid = fork();
	if (pid < 0)
		bench_die("fork: %s", strerror(errno));
	current_child = pid;
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	close(fd[1]);
	FILE *in = fdopen(fd[0], "r");
	char line[256], name[128];
	double v;
	while (in && fgets(line, sizeof line, in))
		if (sscanf(line, "%127s %lf", name, &v) == 2)
			figs_set(f, name, v);
	if (in)
		fclose(in);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	current_child = 0;
	if (stop_signal)
		stop_now();
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void must(int rc, const char *what)
{
	if (rc != 0)
		bench_die("%s failed (status %d)", what, rc);
}

/* A progress line on stderr, stamped with the seconds since the driver
 * started (where a run's time goes). */
static uint64_t started_ns;

__attribute__((format(printf, 1, 2)))
static void progress(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[%7.1f s] ", (double)(bench_now_ns() - started_ns) / 1e9);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* ---------------------------------------------------------- eviction */

static void evict_file(const char *path, uint64_t *resident, uint64_t *pages)
{
	int fd = open(path, O_RDONLY);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) != 0)
		bench_die("%s: %s", path, strerror(errno));
	if (fsync(fd) != 0)
		bench_die("fsync %s: %s", path, strerror(errno));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	*pages += ((uint64_t)st.st_blocks * 512 + 4095) / 4096;
	if (st.st_size > 0) {
		size_t len = (size_t)st.st_size;
		size_t np = (len + 4095) / 4096;
		void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		unsigned char *vec = malloc(np);
		if (m == MAP_FAILED || !vec || mincore(m, len, vec) != 0)
			bench_die("mincore %s: %s", path, strerror(errno));
		for (size_t i = 0; i < np; i++)
			*resident += vec[i] & 1;
		free(vec);
		munmap(m, len);
	}
	close(fd);
}

/* Evicts PATH (a file, or every file of a directory); returns the pages
 * still resident afterwards, and the allocated pages in *pages. */
static uint64_t evict(const char *path, uint64_t *pages)
{
	struct stat st;
	uint64_t res = 0;

	*pages = 0;
	sync();
	if (stat(path, &st) != 0)
		bench_die("%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		evict_file(path, &res, pages);
		return res;
	}
	DIR *d = opendir(path);
	struct dirent *e;
	char p[4096];
	while (d && (e = readdir(d)) != NULL) {
		snprintf(p, sizeof p, "%s/%s", path, e->d_name);
		if (e->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode))
			evict_file(p, &res, pages);
	}
	if (d)
		closedir(d);
	return res;
}

/* ---------------------------------------------------------- systems */

typedef struct sysdef {
	const char *name;     /* "arrheap", "arrheap-bg", "rocksdb", "lmdb-kv" */
	const char *bin;
	const char *files;    /* under the system's data dir */
	const char *sub;      /* the system's data dir under the size's, or NULL */
	int bgmerge;          /* AH_BENCH_BGMERGE=1 for all its processes */
} sysdef;

/* arrheap-bg is arrheap with the merge thread (AH_OPEN_BGMERGE) in every
 * process: the same program and workload, in a directory of its own. */
static const sysdef SYS[] = {
	{ "arrheap", "ah-bench-arrheap", "heap", NULL, 0 },
	{ "arrheap-bg", "ah-bench-arrheap", "heap", "bgmerge", 1 },
	{ "rocksdb", "ah-bench-rocksdb", "rocks", NULL, 0 },
	{ "lmdb-kv", "ah-bench-lmdb", "lmdb.mdb", NULL, 0 },
};

static void gen_log(const char *path, uint64_t n)
{
	bench_rec *r = malloc(BENCH_APPEND * sizeof *r);
	FILE *f = fopen(path, "wb");

	if (!r || !f)
		bench_die("%s: %s", path, strerror(errno));
	for (uint64_t j = 0; j < n;) {
		size_t k = 0;
		if (stop_signal) {
			fclose(f);
			stop_now();
		}
		for (; k < BENCH_APPEND && j < n; k++, j++)
			bench_gen(BENCH_SEED, n, j, &r[k]);
		if (fwrite(r, sizeof *r, k, f) != k)
			bench_die("write %s: %s", path, strerror(errno));
	}
	if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
		bench_die("write %s: %s", path, strerror(errno));
	free(r);
}

/* R start runs of one system; warm or cold (evicting FILES first). */
static void starts(const sysdef *s, const char *dir, uint64_t n, int cold,
                   row *w, figs *answers)
{
	char ns[32], rs[32], fpath[4096];
	figs f[DRV_MAX_RUNS];

	snprintf(ns, sizeof ns, "%llu", (unsigned long long)n);
	snprintf(fpath, sizeof fpath, "%s/%s", dir, s->files);
	for (int r = 0; r < O.runs; r++) {
		uint64_t pages = 0, res = 0;
		figs_clear(&f[r]);
		if (cold)
			res = evict(fpath, &pages);
		snprintf(rs, sizeof rs, "%d", r);
		const char *a[] = { "start", dir, ns, rs, "T0", NULL };
		must(run_child(s->bin, &f[r], a), s->bin);
		if (cold) {
			figs_set(&f[r], "resident_pages_after_evict", (double)res);
			figs_set(&f[r], "evicted_pages", (double)pages);
		}
		drv_check_answer(answers, s->name, r, &f[r]);
		progress("  %s-%s n=%llu run %d: first answer %.3f ms\n",
		        s->name, cold ? "cold" : "warm", (unsigned long long)n, r,
		        figs_get(&f[r], "first_answer_ms"));
	}
	row_from_runs(w, f, O.runs);
}

static void scan(const sysdef *s, const char *dir, uint64_t n, int cold, row *w,
                 figs *answers)
{
	char ns[32], fpath[4096];
	figs f;
	uint64_t pages;

	figs_clear(&f);
	snprintf(ns, sizeof ns, "%llu", (unsigned long long)n);
	snprintf(fpath, sizeof fpath, "%s/%s", dir, s->files);
	if (cold)
		evict(fpath, &pages);
	const char *a[] = { "scan", dir, ns, NULL };
	must(run_child(s->bin, &f, a), s->bin);
	row_set(w, "scan_ms", figs_get(&f, "scan_ms"));
	drv_check_scan(answers, s->name, &f);
	progress("  %s scan (%s): %.0f ms\n", s->name, cold ? "cold" : "warm",
	         figs_get(&f, "scan_ms"));
}

static void rm_rf(const char *path);

static void measure_system(const sysdef *s, const char *sizedir,
                           const char *log, uint64_t n, figs *answers)
{
	char ns[32], subdir[4096];
	const char *dir = sizedir;
	figs load, f;
	row *warm = rows_add(s->name, "-warm", n), *cold;

	snprintf(ns, sizeof ns, "%llu", (unsigned long long)n);
	if (s->sub) {
		if (snprintf(subdir, sizeof subdir, "%s/%s", sizedir, s->sub) >=
		    (int)sizeof subdir)
			bench_die("data directory name too long: %s", sizedir);
		rm_rf(subdir);
		if (mkdir(subdir, 0755) != 0)
			bench_die("mkdir %s: %s", subdir, strerror(errno));
		dir = subdir;
	}
	if (s->bgmerge)
		setenv("AH_BENCH_BGMERGE", "1", 1);
	figs_clear(&load);
	progress("%s: loading %llu updates\n", s->name, (unsigned long long)n);
	const char *a[] = { "load", dir, log, ns, NULL };
	must(run_child(s->bin, &load, a), s->bin);
	progress("  ingest %.0f updates/s\n", figs_get(&load, "ingest_ups"));

	figs_clear(&f);
	const char *st[] = { "start", dir, ns, "0", "T0", NULL };
	must(run_child(s->bin, &f, st), s->bin); /* warm-up, not counted */
	row_set(warm, "first_open_after_load_ms", figs_get(&f, "open_ms"));
	starts(s, dir, n, 0, warm, answers);
	scan(s, dir, n, 0, warm, answers);

	cold = rows_add(s->name, "-cold", n);
	row_set(cold, "first_open_after_load_ms", figs_get(&f, "open_ms"));
	starts(s, dir, n, 1, cold, answers);
	scan(s, dir, n, 1, cold, answers);

	for (row *w = warm; w; w = w == warm ? cold : NULL) {
		row_copy_load(w, &load, n);
		if (strncmp(s->name, "arrheap", 7) == 0)
			row_set(w, "page_reads_estimate",
			        drv_page_reads_estimate(dir, &load));
	}
	if (strcmp(s->name, "rocksdb") == 0) {
		const char *k[] = { "kill", dir, ns, NULL };
		figs_clear(&f);
		int rc = run_child(s->bin, &f, k);
		if (rc != 128 + 9)
			bench_die("rocksdb kill: status %d", rc);
		figs_clear(&f);
		must(run_child(s->bin, &f, st), s->bin);
		progress("  rocksdb reopen after kill -9: %.0f ms\n", figs_get(&f, "open_ms"));
		row_set(warm, "reopen_after_kill_ms", figs_get(&f, "open_ms"));
		row_set(cold, "reopen_after_kill_ms", figs_get(&f, "open_ms"));
	}
	if (strcmp(s->name, "arrheap") == 0) {
		const char *m[] = { "merge", dir, ns, NULL };
		figs_clear(&f);
		must(run_child(s->bin, &f, m), s->bin);
		progress("  arrheap full merge: %.1f MB/s\n", figs_get(&f, "merge_mbps"));
		for (row *w = warm; w; w = w == warm ? cold : NULL) {
			row_set(w, "merge_mbps", figs_get(&f, "merge_mbps"));
			row_set(w, "merge_ups", figs_get(&f, "merge_ups"));
			row_set(w, "file_bytes_after_merge",
			        figs_get(&f, "file_bytes_after_merge"));
			row_set(w, "bytes_after_merge", figs_get(&f, "after_chunk_bytes"));
			row_set(w, "live_bytes_after_merge", figs_get(&f, "after_live_bytes"));
		}
	}
	unsetenv("AH_BENCH_BGMERGE");
	/* arrheap-bg comes next: the first heap goes first, for the space */
	if (!O.keep && strcmp(s->name, "arrheap") == 0)
		for (int lock = 0; lock < 2; lock++) {
			char heap[4096];
			if (snprintf(heap, sizeof heap, "%s/%s%s", dir, s->files,
			             lock ? "-lock" : "") >= (int)sizeof heap)
				bench_die("data directory name too long: %s", dir);
			rm_rf(heap);
		}
	if (!O.keep && s->sub)
		rm_rf(dir);
}

static void measure_rebuild(const char *log, uint64_t n, figs *answers)
{
	char ns[32], rs[32];
	figs f[DRV_MAX_RUNS];
	row *w = rows_add("rebuild", "", n);

	snprintf(ns, sizeof ns, "%llu", (unsigned long long)n);
	uint64_t t0 = bench_now_ns();
	int runs = 0;

	for (int r = 0; r < O.runs; r++, runs++) {
		/* --max-rebuild-s: at least 3 runs, then stop once over budget */
		if (O.max_rebuild_s && r >= 3 &&
		    bench_now_ns() - t0 > (uint64_t)O.max_rebuild_s * 1000000000ull)
			break;
		figs_clear(&f[r]);
		snprintf(rs, sizeof rs, "%d", r);
		const char *a[] = { "rebuild", log, ns, rs, "T0", NULL };
		must(run_child("ah-bench-arrheap", &f[r], a), "rebuild");
		drv_check_answer(answers, "rebuild", r, &f[r]);
		drv_check_scan(answers, "rebuild", &f[r]);
		progress("  rebuild n=%llu run %d: first answer %.1f ms\n",
		        (unsigned long long)n, r, figs_get(&f[r], "first_answer_ms"));
	}
	row_from_runs(w, f, runs);
	row_set(w, "ingest_ups", figs_median(f, runs, "ingest_ups", NULL, NULL));
	row_set(w, "scan_ms", figs_median(f, runs, "scan_ms", NULL, NULL));
	row_set(w, "peak_rss_steady_bytes",
	        figs_median(f, runs, "peak_rss_steady_bytes", NULL, NULL));
	row_set(w, "build_heap_bytes", figs_get(&f[0], "build_heap_bytes"));
	row_set(w, "file_bytes", figs_get(&f[0], "file_bytes"));
	row_set(w, "raw_bytes", (double)n * 40);
}

static void rm_rf(const char *path)
{
	char cmd[4200];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "ah-bench: could not remove %s\n", path);
}

static void stop_now(void)
{
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	if (!O.keep && cur_dir[0]) {
		rm_rf(cur_dir);
		rmdir(O.data);
	}
	drv_write_outputs(&O);
	fprintf(stderr, "ah-bench: interrupted (signal %d); results so far in %s, "
	        "marked \"complete\": false\n", (int)stop_signal, O.out);
	exit(128 + stop_signal);
}

/* --systems: a comma-separated subset of arrheap, arrheap-bg, rebuild,
 * rocksdb, lmdb-kv */
static int selected(const char *name)
{
	const char *p = O.systems;
	size_t len = strlen(name);

	if (!p)
		return 1;
	for (; (p = strstr(p, name)) != NULL; p += len)
		if ((p == O.systems || p[-1] == ',') && (p[len] == ',' || !p[len]))
			return 1;
	return 0;
}

static void measure_size(uint64_t n)
{
	char dir[4096], log[4200];
	figs answers;

	figs_clear(&answers);
	snprintf(dir, sizeof dir, "%s/%llu", O.data, (unsigned long long)n);
	snprintf(cur_dir, sizeof cur_dir, "%s", dir);
	rm_rf(dir);
	if (mkdir(dir, 0755) != 0)
		bench_die("mkdir %s: %s", dir, strerror(errno));
	snprintf(log, sizeof log, "%s/log.bin", dir);
	progress("== %llu updates: generating %s\n", (unsigned long long)n, log);
	gen_log(log, n);
	/* arrheap first, then the rebuild it is compared with */
	for (size_t i = 0; i < sizeof SYS / sizeof SYS[0]; i++) {
		if (selected(SYS[i].name)) {
			measure_system(&SYS[i], dir, log, n, &answers);
			drv_write_outputs(&O);
		}
		if (i == 0 && selected("rebuild")) {
			measure_rebuild(log, n, &answers);
			drv_write_outputs(&O);
		}
	}
	if (!O.keep)
		rm_rf(dir);
}

/* Free bytes a size needs at once under the data directory: the recorded
 * 100M run held ~287 bytes per update (log 40, heap after its full merge
 * 131, RocksDB 31, lmdb-kv 85), plus a margin. */
#define BYTES_PER_UPDATE 320ull
#define MAX_SIZE 1000000000ull /* 10^9 updates: 320 GB of data */

static const char *const SYSTEM_NAMES[] = { "arrheap", "arrheap-bg",
	                                    "rebuild", "rocksdb", "lmdb-kv" };

static void bad(const char *what, const char *v)
{
	fprintf(stderr, "ah-bench: %s: %s\n", what, v ? v : "(missing)");
	exit(2);
}

static uint64_t size_arg(const char *tok)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(tok, &end, 10);
	if (!*tok || *tok == '-' || *tok == '+' || errno || *end || v == 0 ||
	    v > MAX_SIZE)
		bad("--sizes wants positive counts of updates up to 10^9, got",
		    tok);
	return v;
}

static void check_systems(const char *list)
{
	char *s = strdup(list), *tok, *save = NULL;
	int n = 0;

	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++) {
		size_t i;
		for (i = 0; i < sizeof SYSTEM_NAMES / sizeof SYSTEM_NAMES[0]; i++)
			if (strcmp(tok, SYSTEM_NAMES[i]) == 0)
				break;
		if (i == sizeof SYSTEM_NAMES / sizeof SYSTEM_NAMES[0])
			bad("--systems: unknown system (arrheap, arrheap-bg, rebuild, "
			    "rocksdb, lmdb-kv)",
			    tok);
	}
	free(s);
	if (n == 0)
		bad("--systems: no system named", list);
}

/* Refuses a size whose data would not fit in the free space under dir. */
static void check_space(const char *dir, uint64_t n)
{
	struct statvfs v;
	uint64_t need = n * BYTES_PER_UPDATE;

	if (statvfs(dir, &v) != 0)
		bench_die("statvfs %s: %s", dir, strerror(errno));
	uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
	if (avail < need)
		bench_die("%llu updates need about %.1f GB free under %s; %.1f GB are",
		          (unsigned long long)n, (double)need / 1e9, dir,
		          (double)avail / 1e9);
}


static void usage(void)
{
	fprintf(stderr, "usage: ah-bench [--sizes N,N,...] [--runs R] [--out DIR] "
	        "[--data DIR] [--bin DIR] [--keep] [--max-rebuild-s S]\n"
	        "       [--systems arrheap,arrheap-bg,rebuild,rocksdb,lmdb-kv]\n       ah-bench gen N LOG\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t sizes[8] = { 1000000, 10000000, 100000000 };
	int nsizes = 3;
	char data[4200];

	if (argc == 4 && strcmp(argv[1], "gen") == 0) { /* for bench/profile.sh */
		gen_log(argv[3], bench_arg_u64(argv[2]));
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(argv[i], "--keep") == 0) {
			O.keep = 1;
			continue;
		}
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			usage();
		if (strncmp(argv[i], "--", 2) != 0)
			bad("not an option", argv[i]);
		if (!v)
			bad("missing value after", argv[i]);
		i++;
		if (strcmp(argv[i - 1], "--sizes") == 0) {
			char *s = strdup(v), *tok, *save = NULL;
			nsizes = 0;
			for (tok = strtok_r(s, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				if (nsizes == 8)
					bad("--sizes takes at most 8 sizes, got", v);
				sizes[nsizes++] = size_arg(tok);
			}
			free(s);
			if (nsizes == 0)
				bad("--sizes names no size", v);
		} else if (strcmp(argv[i - 1], "--runs") == 0) {
			char *end;
			long r = strtol(v, &end, 10);
			if (*end || end == v || r < 1 || r > DRV_MAX_RUNS)
				bad("--runs wants 1 to 15, got", v);
			O.runs = (int)r;
		} else if (strcmp(argv[i - 1], "--systems") == 0) {
			check_systems(v);
			O.systems = v;
		} else if (strcmp(argv[i - 1], "--max-rebuild-s") == 0) {
			char *end;
			long r = strtol(v, &end, 10);
			if (*end || end == v || r < 0 || r > 1000000)
				bad("--max-rebuild-s wants seconds >= 0, got", v);
			O.max_rebuild_s = (int)r;
		} else if (strcmp(argv[i - 1], "--out") == 0) {
			O.out = v;
		} else if (strcmp(argv[i - 1], "--data") == 0) {
			O.data = v;
		} else if (strcmp(argv[i - 1], "--bin") == 0) {
			O.bin = v;
		} else {
			bad("unknown option", argv[i - 1]);
		}
	}
	if (!O.data) {
		snprintf(data, sizeof data, "%s/data", O.out);
		O.data = data;
	}
	if (mkdir(O.out, 0755) != 0 && errno != EEXIST)
		bench_die("mkdir %s: %s", O.out, strerror(errno));
	if (mkdir(O.data, 0755) != 0 && errno != EEXIST)
		bench_die("mkdir %s: %s", O.data, strerror(errno));
	if (access(O.data, W_OK) != 0)
		bench_die("%s: %s", O.data, strerror(errno));
	for (int i = 0; i < nsizes; i++)
		check_space(O.data, sizes[i]);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	drv_machine(&O);
	started_ns = bench_now_ns();
	for (int i = 0; i < nsizes; i++)
		measure_size(sizes[i]);
	O.complete = 1;
	drv_write_outputs(&O);
	drv_print_table(stdout);
	if (!O.keep)
		rmdir(O.data);
	return 0;
}
