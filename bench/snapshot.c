/*
 * bench/snapshot.c - what incremental snapshots cost (issue 15 targets):
 * bytes shipped per push against the updates committed since the previous
 * push, and restore speed against the disk's sequential write speed.
 *
 *   ah-bench-snapshot DIR UPDATES PUSHES
 *
 * Commits UPDATES updates (8-byte keys over UPDATES/2 distinct ones,
 * 16-byte vals, one time per commit, 2000 commits; appends spend merge
 * fuel as an engine's do) into DIR/heap, pushes to DIR/snaps after every
 * 1/PUSHES of them, then restores the newest snapshot to DIR/restored and
 * checks it against the heap (frontiers and a full scan).  Prints one line
 * per push and the restore; BENCHMARKS.md, "Snapshots", has the runs.
 * Fixed seed; timings are wall clock on a shared machine.
 *
 * It must never report a push or a restore whose call failed, nor a restore
 * that does not read back equal to the heap it came from.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "arrheap.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int die(const char *what, int rc, const char *msg)
{
	fprintf(stderr, "ah-bench-snapshot: %s: %s%s%s\n", what, ah_strerror(rc),
	        msg && *msg ? ": " : "", msg ? msg : "");
	exit(1);
}

/* XOR-sum of every (key, val, time, diff) and their count. */
static void digest(ah_heap *h, uint64_t *sum, uint64_t *n)
{
	ah_txn *t;
	ah_cursor *c;
	int rc;

	*sum = *n = 0;
	if ((rc = ah_txn_begin(h, AH_TXN_RDONLY, &t)) ||
	    (rc = ah_cursor_open(t, "a", &c)))
		die("scan", rc, NULL);
	for (; ah_cursor_key_valid(c); ah_cursor_step_key(c)) {
		const void *k;
		size_t kl;

		ah_cursor_key(c, &k, &kl);
		for (; ah_cursor_val_valid(c); ah_cursor_step_val(c)) {
			uint64_t tm, kv = 0;
			int64_t d;

			memcpy(&kv, k, kl < 8 ? kl : 8);
			while (ah_cursor_time_next(c, &tm, &d) == 1) {
				*sum ^= (kv * 31 + tm) * 0x9E3779B97F4A7C15ull + (uint64_t)d;
				(*n)++;
			}
		}
	}
	ah_cursor_close(c);
	ah_txn_abort(t);
}

int main(int argc, char **argv)
{
	char heap[4096], snaps[4096], rest[4096];
	ah_open_opts oo = { sizeof oo, AH_OPEN_CREATE, 0, 0, 0 };
	uint64_t n, pushes, commits = 2000, per, seed = 42, done = 0, since = 0;
	uint64_t s1, n1, s2, n2;
	ah_snapshot_info si;
	ah_update *u;
	uint64_t (*kv)[3];
	ah_heap *h, *g;
	ah_txn *t;
	int rc;

	if (argc != 4 || (n = strtoull(argv[2], NULL, 10)) < 2000 ||
	    (pushes = strtoull(argv[3], NULL, 10)) == 0 || commits % pushes) {
		fprintf(stderr, "usage: ah-bench-snapshot DIR UPDATES(>=2000) PUSHES(dividing 2000)\n");
		return 2;
	}
	snprintf(heap, sizeof heap, "%s/heap", argv[1]);
	snprintf(snaps, sizeof snaps, "%s/snaps", argv[1]);
	snprintf(rest, sizeof rest, "%s/restored", argv[1]);
	per = n / commits;
	u = calloc(per, sizeof *u);
	kv = calloc(per, sizeof *kv);
	if (!u || !kv)
		return 1;
	if ((rc = ah_open(heap, &oo, &h)))
		die("open", rc, NULL);
	if ((rc = ah_txn_begin(h, 0, &t)) || (rc = ah_arrangement_create(t, "a")) ||
	    (rc = ah_txn_commit(t)))
		die("create", rc, NULL);
	printf("push  updates_since  raw_bytes_since  bytes_new  ratio  total_bytes  objects_new/objects  manifest  push_s\n");
	for (uint64_t c = 0; c < commits; c++) {
		for (uint64_t i = 0; i < per; i++) {
			kv[i][0] = rnd(&seed) % (n / 2);
			kv[i][1] = rnd(&seed);
			kv[i][2] = rnd(&seed);
			u[i] = (ah_update){ &kv[i][0], 8, &kv[i][1], 16, c,
			                    (rnd(&seed) & 3) ? 1 : -1 };
		}
		if ((rc = ah_txn_begin(h, 0, &t)) ||
		    (rc = ah_append(t, "a", c, c + 1, u, per)) ||
		    (rc = ah_source_put(t, "bench", &c, sizeof c)) ||
		    (rc = ah_txn_commit(t)))
			die("commit", rc, NULL);
		done += per;
		since += per;
		if ((c + 1) % (commits / pushes) == 0) {
			double a = now();

			if ((rc = ah_snapshot_push(h, snaps, &si)))
				die("push", rc, si.message);
			printf("%-5" PRIu64 " %13" PRIu64 " %16" PRIu64 " %10" PRIu64
			       " %6.2f %12" PRIu64 " %9" PRIu64 "/%-9" PRIu64
			       " %8" PRIu64 " %7.3f\n",
			       si.seq, since, since * 40, si.bytes_new,
			       (double)si.bytes_new / (double)(since * 40), si.bytes,
			       si.objects_new, si.objects, si.manifest_bytes, now() - a);
			since = 0;
		}
	}
	{
		char cmd[8300];
		double a;

		snprintf(cmd, sizeof cmd, "rm -f '%s' '%s-lock'", rest, rest);
		if (system(cmd) != 0)
			return 1;
		/* The restore reads the objects from disk, as on a new machine. */
		snprintf(cmd, sizeof cmd, "sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null");
		if (system(cmd) != 0)
			fprintf(stderr, "(page cache not dropped)\n");
		a = now();
		if ((rc = ah_snapshot_restore(snaps, NULL, rest, 0, &si)))
			die("restore", rc, si.message);
		a = now() - a;
		printf("restore %s: %" PRIu64 " objects, %.1f MB in %.3f s = %.0f MB/s "
		       "(objects read cold, verified, fsync'd)\n", si.id, si.objects,
		       (double)si.bytes / 1e6, a, (double)si.bytes / 1e6 / a);
	}
	oo.flags = 0;
	if ((rc = ah_open(rest, &oo, &g)))
		die("open restored", rc, NULL);
	digest(h, &s1, &n1);
	digest(g, &s2, &n2);
	if (s1 != s2 || n1 != n2) {
		fprintf(stderr, "restored heap differs: %" PRIu64 "/%" PRIu64
		        " vs %" PRIu64 "/%" PRIu64 "\n", n1, s1, n2, s2);
		return 1;
	}
	printf("restored heap equals the heap: %" PRIu64 " (key, val, time) entries\n", n1);
	ah_close(g);
	ah_close(h);
	free(u);
	free(kv);
	return 0;
}
