/*
 * bench/common.c - the workload generator, the flat log, timing and the
 * child side of the driver protocol (see bench/bench.h).
 *
 * The update stream is a pure function of (seed, n, j): update j belongs to
 * append j / BENCH_APPEND and carries that append's index as its time.  An
 * update is a retraction with probability 1/10 (never in the first append):
 * it retracts the content of an earlier insertion from an earlier append,
 * so every system sees the same (key, val, time) triples and no retraction
 * shares a time with what it retracts.  Keys are uniform over n/4 values,
 * scrambled by a bijection so they spread over the key space.
 *
 * Never linked with a system library: each system program adds its own.
 *
 * It must never make the workload depend on anything but its arguments
 * (seed, n, j; for queries run and q): no clock, no global state, so every
 * system and every run sees the same updates and the same query keys.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t h2(uint64_t seed, uint64_t salt, uint64_t j)
{
	return mix(mix(seed ^ (salt * 0x632be59bd9b4e019ull)) ^ j);
}

static void be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t nkeys(uint64_t n)
{
	return n / 4 ? n / 4 : 1;
}

static void key_of(uint64_t seed, uint64_t idx, uint8_t key[8])
{
	/* mix is a bijection on 64 bits: distinct idx give distinct keys */
	be64(key, mix(idx ^ seed));
}

static int is_retraction(uint64_t seed, uint64_t j)
{
	return j >= BENCH_APPEND && h2(seed, 1, j) % 10 == 0;
}

/* the insertion content of slot i (key, val) */
static void content(uint64_t seed, uint64_t n, uint64_t i, bench_rec *r)
{
	uint64_t a = h2(seed, 3, i), b = h2(seed, 4, i);

	key_of(seed, h2(seed, 2, i) % nkeys(n), r->key);
	memcpy(r->val, &a, 8);
	memcpy(r->val + 8, &b, 8);
}

void bench_gen(uint64_t seed, uint64_t n, uint64_t j, bench_rec *r)
{
	uint64_t append = j / BENCH_APPEND;

	r->time = append;
	if (!is_retraction(seed, j)) {
		content(seed, n, j, r);
		r->diff = 1;
		return;
	}
	uint64_t i = h2(seed, 5, j) % (append * BENCH_APPEND);
	for (uint64_t k = 6; is_retraction(seed, i); k++)
		i = h2(seed, k, j) % (append * BENCH_APPEND);
	content(seed, n, i, r);
	r->diff = -1;
}

void bench_query_key(uint64_t seed, uint64_t n, uint64_t run, uint64_t q,
                     uint8_t key[8])
{
	/* the key of some insertion: it exists in every system */
	uint64_t i = h2(seed, 100 + run, q) % n;
	bench_rec r;

	while (is_retraction(seed, i))
		i = mix(i) % n;
	content(seed, n, i, &r);
	memcpy(key, r.key, 8);
}

uint64_t bench_appends(uint64_t n)
{
	return (n + BENCH_APPEND - 1) / BENCH_APPEND;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bench_maxrss(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_maxrss * 1024;
}

void bench_faults(uint64_t *major, uint64_t *minor)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*major = (uint64_t)ru.ru_majflt;
	*minor = (uint64_t)ru.ru_minflt;
}

uint64_t bench_alloc_bytes(const char *path)
{
	struct stat st;
	uint64_t sum = 0;

	if (stat(path, &st) != 0)
		return 0;
	if (!S_ISDIR(st.st_mode))
		return (uint64_t)st.st_blocks * 512;
	DIR *d = opendir(path);
	struct dirent *e;
	char p[4096];

	while (d && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof p, "%s/%s", path, e->d_name);
		sum += bench_alloc_bytes(p);
	}
	if (d)
		closedir(d);
	return sum;
}

void bench_madv_random(const char *path)
{
	char real[4096], line[4600];
	unsigned long lo, hi;
	int at, n = 0;

	if (!getenv("BENCH_MADV_RANDOM") || !realpath(path, real))
		return;
	FILE *f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) >= 2 &&
		    strcmp(line + at, real) == 0 &&
		    madvise((void *)lo, hi - lo, MADV_RANDOM) == 0)
			n++;
	}
	if (f)
		fclose(f);
	bench_put("madv_random_maps", n);
}

void bench_put(const char *name, double v)
{
	printf("%s %.6f\n", name, v);
	fflush(stdout);
}

void bench_die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ah-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

void bench_log_open(bench_log *l, const char *path)
{
	l->fd = open(path, O_RDONLY);
	if (l->fd < 0)
		bench_die("%s: %s", path, strerror(errno));
	l->n = 0;
}

size_t bench_log_read(bench_log *l, bench_rec *buf, size_t max)
{
	size_t want = max * sizeof *buf, got = 0;

	while (got < want) {
		ssize_t r = read(l->fd, (char *)buf + got, want - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			bench_die("read log: %s", strerror(errno));
		if (r == 0)
			break;
		got += (size_t)r;
	}
	l->n += got / sizeof *buf;
	return got / sizeof *buf;
}

void bench_log_close(bench_log *l)
{
	close(l->fd);
}

static int kv_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 24); /* key then val: the first 24 bytes */
}

size_t bench_consolidate(bench_rec *recs, size_t n)
{
	size_t out = 0;

	qsort(recs, n, sizeof *recs, kv_cmp);
	for (size_t i = 0; i < n; i++) {
		if (out && kv_cmp(&recs[out - 1], &recs[i]) == 0) {
			recs[out - 1].diff += recs[i].diff;
			if (recs[out - 1].diff == 0)
				out--;
			continue;
		}
		recs[out++] = recs[i];
	}
	return out;
}

static uint64_t arg_u64(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);

	if (errno || *end || end == s)
		bench_die("bad number: %s", s);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void bench_timed_gets(const bench_sys *s, void *db, uint64_t n, uint64_t run)
{
	uint8_t key[8];
	uint64_t *lat = malloc(BENCH_GETS * sizeof *lat);
	int64_t check = 0;

	if (!lat)
		bench_die("out of memory");
	for (uint64_t q = 0; q < BENCH_GETS; q++) {
		bench_query_key(BENCH_SEED, n, run, q + 1, key);
		uint64_t g = bench_now_ns();
		check += s->get(db, key);
		lat[q] = bench_now_ns() - g;
	}
	qsort(lat, BENCH_GETS, sizeof *lat, cmp_u64);
	bench_put("get_p50_us", (double)lat[BENCH_GETS / 2] / 1e3);
	bench_put("get_p99_us", (double)lat[BENCH_GETS * 99 / 100] / 1e3);
	bench_put("gets_check", (double)check);
	free(lat);
}

/* start: the restart of an engine, from exec to the first answer, then the
 * steady point queries.  The driver took T0 just before fork. */
static int child_start(const bench_sys *s, const char *dir, uint64_t n,
                       uint64_t run, uint64_t t0)
{
	uint8_t key[8];
	uint64_t f0, m0, f1, m1, f2, m2;
	bench_faults(&f0, &m0); /* one getrusage: the timed windows see one */
	uint64_t a = bench_now_ns();
	void *db = s->open(dir, n);
	uint64_t b = bench_now_ns();
	bench_faults(&f1, &m1);

	bench_query_key(BENCH_SEED, n, run, 0, key);
	int64_t ans = s->get(db, key);
	uint64_t c = bench_now_ns();
	bench_faults(&f2, &m2);

	bench_put("open_ms", (double)(b - a) / 1e6);
	bench_put("first_answer_ms", (double)(c - t0) / 1e6);
	bench_put("query_ms", (double)(c - b) / 1e6);
	bench_put("exec_to_open_ms", (double)(a - t0) / 1e6);
	bench_put("answer", (double)ans);
	bench_put("majflt_open", (double)(f1 - f0));
	bench_put("majflt_query", (double)(f2 - f1));
	/* minor faults: pages mapped from the page cache (or fresh memory),
	 * 1.3-2.7 us each on this VM, most of a warm first answer */
	bench_put("minflt_open", (double)(m1 - m0));
	bench_put("minflt_query", (double)(m2 - m1));
	bench_put("peak_rss_restart_bytes", (double)bench_maxrss());

	bench_timed_gets(s, db, n, run);
	s->close(db);
	return 0;
}

static int child_scan(const bench_sys *s, const char *dir, uint64_t n)
{
	uint64_t groups = 0;
	int64_t sum = 0;
	void *db = s->open(dir, n);
	uint64_t a = bench_now_ns();

	s->scan(db, &groups, &sum);
	uint64_t b = bench_now_ns();
	bench_put("scan_ms", (double)(b - a) / 1e6);
	bench_put("scan_groups", (double)groups);
	bench_put("scan_sum", (double)sum);
	s->close(db);
	return 0;
}

int bench_child_main(const bench_sys *s, int argc, char **argv)
{
	if (argc >= 5 && strcmp(argv[1], "load") == 0) {
		s->load(argv[2], argv[3], arg_u64(argv[4]));
		return 0;
	}
	if (argc >= 6 && strcmp(argv[1], "start") == 0)
		return child_start(s, argv[2], arg_u64(argv[3]), arg_u64(argv[4]),
		                   arg_u64(argv[5]));
	if (argc >= 4 && strcmp(argv[1], "scan") == 0)
		return child_scan(s, argv[2], arg_u64(argv[3]));
	if (s->extra && argc >= 2)
		return s->extra(argc, argv);
	fprintf(stderr, "usage: %s load DIR LOG N | start DIR N RUN T0_NS | "
	        "scan DIR N\n(run by ah-bench, see bench/driver.c)\n", argv[0]);
	return 2;
}

uint64_t bench_arg_u64(const char *s)
{
	return arg_u64(s);
}
