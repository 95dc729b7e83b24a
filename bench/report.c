/*
 * bench/report.c - figures, rows and the reports of ah-bench: the markdown
 * table (stdout and OUT/table.md), OUT/results.json, OUT/startup.dat (the
 * gnuplot data of bench/startup.gp), and the cross-system answer checks.
 *
 * It formats what bench/driver.c measured; it never runs a system and
 * never judges a figure.
 *
 * It must never hide a disagreement: an answer that differs from an earlier
 * system's is a warning on stderr, counted in results.json's
 * answer_mismatches, never dropped and never fatal.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/driver.h"

static row ROWS[DRV_MAX_ROWS];
static int NROWS;
static int MISMATCHES;

/* the systems in the order of the issue; the plot has one line each */
static const char *const NAMES[] = {
	"arrheap-warm", "arrheap-cold", "rebuild", "rocksdb-warm",
	"rocksdb-cold", "lmdb-kv-warm", "lmdb-kv-cold",
};
#define NNAMES (sizeof NAMES / sizeof NAMES[0])

void figs_clear(figs *f)
{
	f->n = 0;
}

void figs_set(figs *f, const char *name, double v)
{
	for (int i = 0; i < f->n; i++)
		if (strcmp(f->name[i], name) == 0) {
			f->v[i] = v;
			return;
		}
	if (f->n == DRV_MAX_FIGS)
		bench_die("too many figures");
	snprintf(f->name[f->n], sizeof f->name[0], "%s", name);
	f->v[f->n++] = v;
}

double figs_get(const figs *f, const char *name)
{
	for (int i = 0; i < f->n; i++)
		if (strcmp(f->name[i], name) == 0)
			return f->v[i];
	return NAN;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double figs_median(const figs *f, int runs, const char *name, double *min,
                   double *max)
{
	double v[DRV_MAX_RUNS];
	int k = 0;

	for (int r = 0; r < runs; r++)
		if (!isnan(figs_get(&f[r], name)))
			v[k++] = figs_get(&f[r], name);
	if (k == 0)
		return NAN;
	qsort(v, (size_t)k, sizeof v[0], cmp_d);
	if (min)
		*min = v[0];
	if (max)
		*max = v[k - 1];
	return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

row *rows_add(const char *sys, const char *suffix, uint64_t n)
{
	if (NROWS == DRV_MAX_ROWS)
		bench_die("too many rows");
	row *w = &ROWS[NROWS++];
	snprintf(w->system, sizeof w->system, "%s%s", sys, suffix);
	w->updates = n;
	figs_clear(&w->f);
	return w;
}

void row_set(row *w, const char *name, double v)
{
	figs_set(&w->f, name, v);
}

void row_from_runs(row *w, const figs *f, int runs)
{
	static const char *const mm[] = { "open_ms", "first_answer_ms" };
	static const char *const med[][2] = {
		{ "query_ms", "query_ms" },
		{ "exec_to_open_ms", "exec_to_open_ms" },
		{ "get_p50_us", "get_p50_us" },
		{ "get_p99_us", "get_p99_us" },
		{ "peak_rss_restart_bytes", "peak_rss_restart_bytes" },
		{ "majflt_open", "page_reads_open_measured" },
		{ "majflt_query", "page_reads_query_measured" },
		{ "minflt_open", "page_faults_open" },
		{ "minflt_query", "page_faults_query" },
		{ "evicted_pages", "evicted_pages" },
	};
	char name[64];
	double lo, hi;

	for (size_t i = 0; i < 2; i++) {
		row_set(w, mm[i], figs_median(f, runs, mm[i], &lo, &hi));
		snprintf(name, sizeof name, "%s_min", mm[i]);
		row_set(w, name, lo);
		snprintf(name, sizeof name, "%s_max", mm[i]);
		row_set(w, name, hi);
	}
	for (size_t i = 0; i < sizeof med / sizeof med[0]; i++)
		if (!isnan(figs_median(f, runs, med[i][0], NULL, NULL)))
			row_set(w, med[i][1], figs_median(f, runs, med[i][0], NULL, NULL));
	if (!isnan(figs_median(f, runs, "resident_pages_after_evict", &lo, &hi)))
		row_set(w, "resident_pages_after_evict", hi);
	row_set(w, "runs", runs);
}

void row_copy_load(row *w, const figs *load, uint64_t n)
{
	static const char *const copy[] = {
		"ingest_ups", "peak_rss_steady_bytes", "file_bytes", "batches",
		"chunks", "maintain_s", "chunk_bytes", "live_bytes", "free_bytes",
	};
	for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++)
		if (!isnan(figs_get(load, copy[i])))
			row_set(w, copy[i], figs_get(load, copy[i]));
	row_set(w, "raw_bytes", (double)n * 40);
}

static void check_eq(figs *answers, const char *key, const char *sys, double v)
{
	double want = figs_get(answers, key);

	if (isnan(v))
		return;
	if (isnan(want)) {
		figs_set(answers, key, v);
	} else if (want != v) {
		MISMATCHES++;
		fprintf(stderr, "ah-bench: WARNING %s: %s = %.0f, earlier systems %.0f\n",
		        sys, key, v, want);
	}
}

void drv_check_answer(figs *answers, const char *sys, int run, const figs *f)
{
	char key[48];

	snprintf(key, sizeof key, "answer_%d", run);
	check_eq(answers, key, sys, figs_get(f, "answer"));
	snprintf(key, sizeof key, "gets_%d", run);
	check_eq(answers, key, sys, figs_get(f, "gets_check"));
}

void drv_check_scan(figs *answers, const char *sys, const figs *f)
{
	check_eq(answers, "scan_groups", sys, figs_get(f, "scan_groups"));
	check_eq(answers, "scan_sum", sys, figs_get(f, "scan_sum"));
}

/* "Tree depth" of each database printed by mdb_stat -n -a */
static int depth_of(const char *out, const char *db)
{
	char hdr[80];
	const char *p;
	int d = 0;

	snprintf(hdr, sizeof hdr, "Status of %s\n", db);
	p = strstr(out, hdr);
	if (p && (p = strstr(p, "Tree depth:")) != NULL)
		d = atoi(p + 11);
	return d;
}

/* Cold open: 2 LMDB metas, the main DB to the named DBs, the meta record,
 * the arrangement record (frontier).  Query, per batch of the spine: the
 * batch record (tree descent, its overflow page), the chunk id in the
 * chunks tree, and in the chunk about 8 pages: the header, the binary
 * search over key offsets and key bytes (about 2 pages once the fences
 * chose the chunk), key_vals, val_offs, vals, val_upds, times, diffs. */
double drv_page_reads_estimate(const char *dir, const figs *load)
{
	char cmd[4200], out[8192];
	size_t got = 0, r;

	snprintf(cmd, sizeof cmd, "mdb_stat -n -a '%s/heap' 2>/dev/null", dir);
	FILE *p = popen(cmd, "r");
	if (!p)
		return NAN;
	while (got < sizeof out - 1 && (r = fread(out + got, 1, sizeof out - 1 - got, p)) > 0)
		got += r;
	out[got] = 0;
	pclose(p);
	int dm = depth_of(out, "Main DB"), dmeta = depth_of(out, "meta"),
	    darr = depth_of(out, "arr"), dbatch = depth_of(out, "batch"),
	    dchunk = depth_of(out, "chunks");
	double batches = figs_get(load, "batches");
	if (!dm || isnan(batches))
		return NAN;
	return 2 + dm + dmeta + darr + batches * (dbatch + 1 + dchunk + 8);
}

void drv_machine(drv_opts *o)
{
	char model[256] = "unknown cpu", line[512];
	long mem_kb = 0;
	struct utsname u;
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
			snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
			model[strcspn(model, "\n")] = 0;
			break;
		}
	if (f)
		fclose(f);
	f = fopen("/proc/meminfo", "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "MemTotal: %ld kB", &mem_kb) == 1)
			break;
	if (f)
		fclose(f);
	uname(&u);
	snprintf(o->machine, sizeof o->machine, "%s, %ld cores, %.1f GiB RAM, Linux %s",
	         model, sysconf(_SC_NPROCESSORS_ONLN), (double)mem_kb / 1048576,
	         u.release);
	f = fopen("/proc/loadavg", "r");
	if (f && fgets(o->load_before, sizeof o->load_before, f))
		o->load_before[strcspn(o->load_before, "\n")] = 0;
	if (f)
		fclose(f);
}

static void json_num(FILE *f, double v)
{
	if (isnan(v))
		fputs("null", f);
	else if (v == floor(v) && fabs(v) < 1e15)
		fprintf(f, "%.0f", v);
	else
		fprintf(f, "%.6g", v);
}

/* the figures first, then the extras in the order they were set */
static const char *const MAIN_FIGS[] = {
	"open_ms", "first_answer_ms", "scan_ms", "ingest_ups", "merge_mbps",
	"get_p50_us", "get_p99_us", "file_bytes", "raw_bytes",
	"peak_rss_restart_bytes", "peak_rss_steady_bytes",
};
#define NMAIN (sizeof MAIN_FIGS / sizeof MAIN_FIGS[0])

static int is_main(const char *name)
{
	for (size_t i = 0; i < NMAIN; i++)
		if (strcmp(name, MAIN_FIGS[i]) == 0)
			return 1;
	return 0;
}

static void write_json(const drv_opts *o, const char *path)
{
	FILE *f = fopen(path, "w");
	char load[128] = "";
	FILE *l = fopen("/proc/loadavg", "r");

	if (l && fgets(load, sizeof load, l))
		load[strcspn(load, "\n")] = 0;
	if (l)
		fclose(l);
	if (!f)
		bench_die("cannot write %s", path);
	fprintf(f, "{\"machine\": \"%s\", \"loadavg_start\": \"%s\", "
	        "\"loadavg_now\": \"%s\", \"runs\": %d, \"answer_mismatches\": %d, "
	        "\"complete\": %s,\n \"results\": [", o->machine, o->load_before, load,
	        o->runs, MISMATCHES, o->complete ? "true" : "false");
	for (int i = 0; i < NROWS; i++) {
		const row *w = &ROWS[i];
		fprintf(f, "%s\n  {\"system\": \"%s\", \"updates\": %llu", i ? "," : "",
		        w->system, (unsigned long long)w->updates);
		for (size_t k = 0; k < NMAIN; k++) {
			fprintf(f, ", \"%s\": ", MAIN_FIGS[k]);
			json_num(f, figs_get(&w->f, MAIN_FIGS[k]));
		}
		fputs(", \"space_amplification\": ", f);
		json_num(f, figs_get(&w->f, "file_bytes") / figs_get(&w->f, "raw_bytes"));
		fputs(", \"bytes_per_update\": ", f);
		json_num(f, figs_get(&w->f, "file_bytes") / (double)w->updates);
		for (int k = 0; k < w->f.n; k++) {
			if (is_main(w->f.name[k]))
				continue;
			fprintf(f, ", \"%s\": ", w->f.name[k]);
			json_num(f, w->f.v[k]);
		}
		fputc('}', f);
	}
	fputs("\n]}\n", f);
	fclose(f);
}

static void write_dat(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		bench_die("cannot write %s", path);
	for (size_t s = 0; s < NNAMES; s++) {
		fprintf(f, "# %s: updates first_answer_ms min max\n", NAMES[s]);
		for (int i = 0; i < NROWS; i++)
			if (strcmp(ROWS[i].system, NAMES[s]) == 0)
				fprintf(f, "%llu %.6g %.6g %.6g\n",
				        (unsigned long long)ROWS[i].updates,
				        figs_get(&ROWS[i].f, "first_answer_ms"),
				        figs_get(&ROWS[i].f, "first_answer_ms_min"),
				        figs_get(&ROWS[i].f, "first_answer_ms_max"));
		fputs("\n\n", f);
	}
	fclose(f);
}

static void fmt(char *buf, size_t len, double v, const char *unit)
{
	if (isnan(v))
		snprintf(buf, len, "-");
	else if (strcmp(unit, "B") == 0)
		snprintf(buf, len, v >= 1e9 ? "%.2f GB" : "%.1f MB",
		         v >= 1e9 ? v / 1e9 : v / 1e6);
	else if (strcmp(unit, "ups") == 0)
		snprintf(buf, len, "%.0f k", v / 1e3);
	else if (v >= 100)
		snprintf(buf, len, "%.0f", v);
	else if (v >= 1)
		snprintf(buf, len, "%.2f", v);
	else
		snprintf(buf, len, "%.3f", v);
}

static void range(char *buf, size_t len, const figs *f, const char *name)
{
	char a[32], b[32], c[32], mn[64], mx[64];

	snprintf(mn, sizeof mn, "%s_min", name);
	snprintf(mx, sizeof mx, "%s_max", name);
	fmt(a, sizeof a, figs_get(f, name), "");
	fmt(b, sizeof b, figs_get(f, mn), "");
	fmt(c, sizeof c, figs_get(f, mx), "");
	if (isnan(figs_get(f, mn)))
		snprintf(buf, len, "%s", a);
	else
		snprintf(buf, len, "%s (%s–%s)", a, b, c);
}

void drv_print_table(FILE *out)
{
	fputs("| system | updates | open_ms med (min–max) | first_answer_ms med (min–max) "
	      "| scan_ms | ingest_ups | merge_mbps | get_p50_us | get_p99_us "
	      "| file_bytes | raw_bytes | amp | rss restart | rss steady |\n"
	      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", out);
	for (int i = 0; i < NROWS; i++) {
		const figs *f = &ROWS[i].f;
		char o[128], fa[128], c[8][32];
		range(o, sizeof o, f, "open_ms");
		range(fa, sizeof fa, f, "first_answer_ms");
		fmt(c[0], 32, figs_get(f, "scan_ms"), "");
		fmt(c[1], 32, figs_get(f, "ingest_ups"), "ups");
		fmt(c[2], 32, figs_get(f, "merge_mbps"), "");
		fmt(c[3], 32, figs_get(f, "get_p50_us"), "");
		fmt(c[4], 32, figs_get(f, "get_p99_us"), "");
		fmt(c[5], 32, figs_get(f, "file_bytes"), "B");
		fmt(c[6], 32, figs_get(f, "raw_bytes"), "B");
		char amp[16], r1[32], r2[32];
		snprintf(amp, sizeof amp, "%.2f",
		         figs_get(f, "file_bytes") / figs_get(f, "raw_bytes"));
		fmt(r1, 32, figs_get(f, "peak_rss_restart_bytes"), "B");
		fmt(r2, 32, figs_get(f, "peak_rss_steady_bytes"), "B");
		fprintf(out, "| %s | %gM | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		        ROWS[i].system, (double)ROWS[i].updates / 1e6,
		        o, fa, c[0], c[1], c[2], c[3], c[4], c[5], c[6], amp, r1, r2);
	}
}

void drv_write_outputs(const drv_opts *o)
{
	char path[4200];

	snprintf(path, sizeof path, "%s/results.json", o->out);
	write_json(o, path);
	snprintf(path, sizeof path, "%s/startup.dat", o->out);
	write_dat(path);
	snprintf(path, sizeof path, "%s/table.md", o->out);
	FILE *f = fopen(path, "w");
	if (f) {
		drv_print_table(f);
		fclose(f);
	}
}
