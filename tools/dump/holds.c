/*
 * tools/dump/holds.c - `ah-dump HEAP holds [NAME]`: every read hold of the
 * heap (or of arrangement NAME), through ah_hold_foreach, one line each:
 * arrangement, hold, frontier, lease, renewed time, state (live, expired:
 * its lease ran out, released: expired and since passed it).
 *
 * The summary lists them too (dump_summary_holds).  Only the public API;
 * it never changes the heap.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tools/dump/dump.h"

static const char *state_of(const ah_hold_info *h)
{
	return h->released ? "released" : h->expired ? "expired" : "live";
}

/* CLOCK_REALTIME ms as "2026-12-01T12:00:00.123Z". */
static void fmt_ms(uint64_t ms, char out[40])
{
	time_t s = (time_t)(ms / 1000u);
	struct tm tm;

	if (gmtime_r(&s, &tm) == NULL ||
	    strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(out, 40, "%" PRIu64 "ms", ms);
	else
		snprintf(out + strlen(out), 40 - strlen(out), ".%03uZ",
		         (unsigned)(ms % 1000u));
}

static void lease_text(const ah_hold_info *h, char out[32])
{
	if (h->lease_ms)
		snprintf(out, 32, "%" PRIu64 "ms", h->lease_ms);
	else
		snprintf(out, 32, "none");
}

static int print_hold(const ah_hold_info *h, void *user)
{
	dump *d = user;
	char when[40], lease[32];

	fmt_ms(h->renewed_ms, when);
	if (d->json) {
		tj_obj(&d->j);
		tj_kstr(&d->j, "arrangement", h->arrangement);
		tj_kstr(&d->j, "name", h->name);
		tj_ku64(&d->j, "frontier", h->frontier);
		tj_ku64(&d->j, "lease_ms", h->lease_ms);
		tj_ku64(&d->j, "renewed_ms", h->renewed_ms);
		tj_kstr(&d->j, "renewed", when);
		tj_kstr(&d->j, "state", state_of(h));
		tj_obj_end(&d->j);
		return 0;
	}
	lease_text(h, lease);
	printf("%s\t%s\t%" PRIu64 "\t%s\t%s\t%s\n", h->arrangement, h->name,
	       h->frontier, lease, when, state_of(h));
	return 0;
}

int cmd_holds(dump *d, int argc, char **argv)
{
	const char *arr = argc == 1 ? argv[0] : NULL;
	int rc;

	if (argc > 1)
		return 2;
	dump_json_list(d, arr, "holds");
	rc = ah_hold_foreach(d->txn, arr, print_hold, d);
	if (rc == AH_ENOTFOUND || rc == AH_EINVAL)
		return dump_fail(d, AH_ENOTFOUND, "%s: unknown arrangement %s",
		                 d->heap_path, arr ? arr : "");
	if (rc < 0)
		return dump_lib_error(d, rc, "list holds");
	if (d->json) {
		tj_arr_end(&d->j);
		tj_obj_end(&d->j);
	}
	return 0;
}

static int summary_hold(const ah_hold_info *h, void *user)
{
	dump *d = user;
	char when[40], lease[32];

	if (d->json)
		return print_hold(h, user);
	fmt_ms(h->renewed_ms, when);
	lease_text(h, lease);
	printf("hold %s/%s: frontier %" PRIu64 ", lease %s, renewed %s, %s\n",
	       h->arrangement, h->name, h->frontier, lease, when, state_of(h));
	return 0;
}

int dump_summary_holds(dump *d)
{
	int rc;

	if (d->json) {
		tj_key(&d->j, "holds");
		tj_arr(&d->j);
	}
	if ((rc = ah_hold_foreach(d->txn, NULL, summary_hold, d)) < 0)
		return dump_lib_error(d, rc, "list holds");
	if (d->json)
		tj_arr_end(&d->j);
	return 0;
}
