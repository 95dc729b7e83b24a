/*
 * bench/driver.h - the driver's figures, result rows and reports (shared
 * by bench/driver.c, which runs the systems, and bench/report.c, which
 * turns the rows into the table, results.json and the plot's data).
 *
 * A figure is a named double; NAN means "not measured for this row" and is
 * written as null.  Nothing here runs a system or judges a result.
 *
 * It must never drop a figure or a row silently: the tables are fixed-size
 * (DRV_MAX_FIGS, DRV_MAX_ROWS) and a full one ends the run through
 * bench_die.
 */
#ifndef BENCH_DRIVER_H
#define BENCH_DRIVER_H

#include <stdint.h>
#include <stdio.h>

#define DRV_MAX_RUNS 15
#define DRV_MAX_FIGS 64
#define DRV_MAX_ROWS 64

typedef struct figs {
	int n;
	char name[DRV_MAX_FIGS][48];
	double v[DRV_MAX_FIGS];
} figs;

typedef struct row {
	char system[32];
	uint64_t updates;
	figs f;
} row;

typedef struct drv_opts {
	int runs;
	int keep;
	int max_rebuild_s; /* 0: always --runs rebuild runs */
	const char *out, *data, *bin;
	const char *systems; /* NULL: all */
	int complete;        /* every size measured (results.json "complete") */
	char machine[512];
	char load_before[128];
} drv_opts;

void figs_clear(figs *f);
void figs_set(figs *f, const char *name, double v);
double figs_get(const figs *f, const char *name); /* NAN when absent */
/* median over runs (and min, max when the pointers are not NULL) */
double figs_median(const figs *f, int runs, const char *name, double *min,
                   double *max);

row *rows_add(const char *sys, const char *suffix, uint64_t n);
void row_set(row *w, const char *name, double v);
/* the start-up figures of R runs: medians, min and max */
void row_from_runs(row *w, const figs *f, int runs);
/* the load child's figures: ingest, file and raw bytes, steady RSS */
void row_copy_load(row *w, const figs *load, uint64_t n);

/* cross-system checks of the answers (warnings on stderr, counted) */
void drv_check_answer(figs *answers, const char *sys, int run, const figs *f);
void drv_check_scan(figs *answers, const char *sys, const figs *f);
/* dependent page reads of a cold arrheap open + point query, from the
 * LMDB tree depths (mdb_stat) and the spine's batch count */
double drv_page_reads_estimate(const char *dir, const figs *load);

void drv_machine(drv_opts *o);
void drv_write_outputs(const drv_opts *o);
void drv_print_table(FILE *out);

#endif /* BENCH_DRIVER_H */
