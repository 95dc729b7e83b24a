/*
 * txn/bgmerge.c - the merge thread of a heap opened with AH_OPEN_BGMERGE
 * (ARCHITECTURE §6 "The merge thread", §10 "Decisions").
 *
 * One thread per heap handle, started by the first commit that leaves a
 * merge in progress, joined by ah_close.  Committing write txns hand it the
 * names of the arrangements that have merges in progress (a queue without
 * duplicates); for each it computes one slice of one merge in a read txn
 * of its own (arrangement/slice.c: output chunks as images in memory,
 * BG_MIN_BYTES to BG_MAX_BYTES of them), then installs it in a short write txn of
 * its own, and puts the name back while merges are left.
 *
 * The turnstile: LMDB's writer mutex is not fair, and an appending thread
 * that commits and begins again at once would keep the merge thread from
 * ever installing.  While the thread waits for (or holds) the writer lock
 * to install, ah_txn_begin of a write txn in this process waits for the
 * install to end: it waits for the install only, never for the compute.
 * A thread that holds a write txn never waits (it would wait for itself).
 *
 * It never touches the heap's writer pool (it has a pool of its own), and
 * never runs in a forked child (the child has no thread; every entry
 * point checked the pid before reaching here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "txn/txn.h"

/* Chunk images of one slice: at least BG_MIN_BYTES, and while a write
 * txn of this process holds the writer lock (the install would wait for
 * it anyway) on up to BG_MAX_BYTES: one install per user commit, sized
 * to what the thread computed meanwhile. */
#define BG_MIN_BYTES (8u << 20)
#define BG_MAX_BYTES (32u << 20)
/* While ah_merge_wait waits, a merge not yet started whose inputs hold
 * merge_par_min() (64 MiB) to BG_WHOLE_MAX is run whole on two threads
 * (slice.c): its install holds the writer lock for the whole merge, 1-2 s
 * at this bound on the machine of BENCHMARKS.md. */
#define BG_WHOLE_MAX ((uint64_t)512 << 20)

struct bgm {
	pthread_mutex_t mu;
	pthread_cond_t work;     /* names queued, stop, or unpaused */
	pthread_cond_t idle;     /* queue empty and no slice in flight */
	pthread_cond_t turn;     /* the install ended */
	pthread_t thr;
	bool started, failed;
	bool stop;               /* read by the compute (atomic) */
	bool busy;               /* a slice in flight */
	bool installing;         /* turnstile closed */
	unsigned paused;         /* ah_set_max_bytes: no txn may be open */
	char (*names)[AH_NAME_MAX + 1];
	unsigned n, cap;
	int err;                 /* first error since the last wait */
	char cur[AH_NAME_MAX + 1]; /* the merge being computed: arrangement */
	uint64_t cur_first;      /* and its first input batch (0: none) */
	ah_merge_stats st;
	pool *p;
	unsigned waiters;        /* callers in ah_merge_wait */
	bool no_whole;           /* merge_parallel did not take a merge: its
	                          * data cannot be split (slice.c) */
};

/* Tests: while held, the thread takes no slice (bgm_test_hold); the
 * bound of a whole merge (bgm_test_whole_max). */
static bool bg_held; /* atomic */
static uint64_t bg_whole_max = BG_WHOLE_MAX; /* atomic */

void bgm_test_hold(bool on)
{
	__atomic_store_n(&bg_held, on, __ATOMIC_RELEASE);
}

void bgm_test_whole_max(uint64_t bytes)
{
	__atomic_store_n(&bg_whole_max, bytes ? bytes : BG_WHOLE_MAX,
	                 __ATOMIC_RELAXED);
}

unsigned bgm_test_waiters(ah_heap *ah)
{
	struct bgm *g = ah->bg;
	unsigned n;

	if (!g)
		return 0;
	pthread_mutex_lock(&g->mu);
	n = g->waiters;
	pthread_mutex_unlock(&g->mu);
	return n;
}

int bgm_create(ah_heap *ah)
{
	struct bgm *g = calloc(1, sizeof *g);

	if (!g)
		return AH_ENOMEM;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->work, NULL);
	pthread_cond_init(&g->idle, NULL);
	pthread_cond_init(&g->turn, NULL);
	ah->bg = g;
	return 0;
}

/* Under g->mu: queues name unless queued already. */
static int enqueue(struct bgm *g, const char *name)
{
	for (unsigned i = 0; i < g->n; i++)
		if (strcmp(g->names[i], name) == 0)
			return 0;
	if (g->n == g->cap) {
		unsigned ncap = g->cap ? 2 * g->cap : 8;
		char (*nn)[AH_NAME_MAX + 1] = realloc(g->names, ncap * sizeof *nn);

		if (!nn)
			return AH_ENOMEM;
		g->names = nn;
		g->cap = ncap;
	}
	snprintf(g->names[g->n++], AH_NAME_MAX + 1, "%s", name);
	return 0;
}

/* The install: turnstile closed, a write txn of the thread's own. */
static int install(ah_heap *ah, struct bgm *g, arr_slice *s, bool *installed)
{
	heap_txn *wt = NULL;
	int rc;

	pthread_mutex_lock(&g->mu);
	g->installing = true;
	pthread_mutex_unlock(&g->mu);
	rc = heap_txn_begin(ah->h, false, &wt);
	if (rc == 0)
		rc = arr_slice_install(wt, g->p, s, ah->merge_quantum, installed);
	if (rc == 0)
		rc = heap_txn_commit(wt);
	else if (wt)
		heap_txn_abort(wt);
	if (rc)
		*installed = false;
	pthread_mutex_lock(&g->mu);
	g->installing = false;
	pthread_cond_broadcast(&g->turn);
	pthread_mutex_unlock(&g->mu);
	return rc;
}

static bool writer_busy(void *user)
{
	return heap_writer_active(((ah_heap *)user)->h);
}

/* A caller waits (its core is idle), and no merge was refused. */
static bool whole_ok(void *user)
{
	struct bgm *g = ((ah_heap *)user)->bg;
	bool on;

	pthread_mutex_lock(&g->mu);
	on = g->waiters > 0 && !g->no_whole;
	pthread_mutex_unlock(&g->mu);
	return on;
}

/* The slice's merge (first input batch id; 0 once installed or dropped)
 * of the arrangement in g->cur. */
static void set_current(struct bgm *g, const char *name, uint64_t first)
{
	pthread_mutex_lock(&g->mu);
	snprintf(g->cur, sizeof g->cur, "%s", name ? name : "");
	g->cur_first = first;
	pthread_mutex_unlock(&g->mu);
}

static void picked(void *user, uint64_t first)
{
	struct bgm *g = ((ah_heap *)user)->bg;

	pthread_mutex_lock(&g->mu);
	g->cur_first = first;
	pthread_mutex_unlock(&g->mu);
}

uint64_t bgm_current(ah_heap *ah, const char *name)
{
	struct bgm *g = ah->bg;
	uint64_t first = 0;

	if (!g)
		return 0;
	pthread_mutex_lock(&g->mu);
	if (strcmp(g->cur, name) == 0)
		first = g->cur_first;
	pthread_mutex_unlock(&g->mu);
	return first;
}

/* One slice of NAME; *more when it may have work left. */
static int one_slice(ah_heap *ah, struct bgm *g, const char *name, bool *more)
{
	heap_txn *rt = NULL;
	arr_slice *s = NULL;
	bool installed = false;
	int rc;

	*more = false;
	TRY(heap_txn_begin(ah->h, true, &rt));
	arr_slice_bound b = { BG_MIN_BYTES, BG_MAX_BYTES, writer_busy, picked,
	                      whole_ok,
	                      __atomic_load_n(&bg_whole_max, __ATOMIC_RELAXED),
	                      ah };
	set_current(g, name, 0);
	TRY(arr_slice_compute(rt, g->p, name, &b, ah->merge_quantum, &g->stop,
	                      &s));
	if (!s)
		goto out;
	rc = install(ah, g, s, &installed);
	*more = rc == 0;
	pthread_mutex_lock(&g->mu);
	if (arr_slice_refused(s))
		g->no_whole = true; /* sliced from now on */
	else if (installed)
		g->st.installed++;
	else if (rc == 0)
		g->st.discarded++;
	pthread_mutex_unlock(&g->mu);
out:
	set_current(g, NULL, 0);
	arr_slice_free(s);
	heap_txn_abort(rt);
	pool_reset(g->p);
	return rc;
}

static void *bg_main(void *arg)
{
	ah_heap *ah = arg;
	struct bgm *g = ah->bg;
	char name[AH_NAME_MAX + 1];

	pthread_mutex_lock(&g->mu);
	for (;;) {
		while (!g->stop && (g->n == 0 || g->paused)) {
			g->busy = false;
			pthread_cond_broadcast(&g->idle);
			pthread_cond_wait(&g->work, &g->mu);
		}
		if (g->stop)
			break;
		memcpy(name, g->names[0], sizeof name);
		memmove(g->names, g->names + 1, (g->n - 1) * sizeof *g->names);
		g->n--;
		g->busy = true;
		pthread_mutex_unlock(&g->mu);
		while (__atomic_load_n(&bg_held, __ATOMIC_ACQUIRE) &&
		       !__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE))
			usleep(1000);
		bool more = false;
		int rc = one_slice(ah, g, name, &more);
		pthread_mutex_lock(&g->mu);
		if (rc && !__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) {
			g->st.errors++;
			if (!g->err)
				g->err = rc;
		}
		if (more && enqueue(g, name) && !g->err)
			g->err = AH_ENOMEM;
	}
	g->busy = false;
	pthread_cond_broadcast(&g->idle);
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

bool bgm_active(const ah_heap *ah)
{
	struct bgm *g = ah->bg;
	bool on;

	if (!g)
		return false;
	pthread_mutex_lock(&g->mu);
	on = !g->failed;
	pthread_mutex_unlock(&g->mu);
	return on;
}

/* Under g->mu: the thread, started once. */
static void start(ah_heap *ah, struct bgm *g)
{
	if (g->started || g->failed)
		return;
	if (!g->p && pool_create(&g->p) != 0) {
		g->failed = true;
		return;
	}
	__atomic_store_n(&g->stop, false, __ATOMIC_RELEASE);
	if (pthread_create(&g->thr, NULL, bg_main, ah) != 0)
		g->failed = true;
	else
		g->started = true;
}

void bgm_notify(ah_heap *ah, const char (*names)[AH_NAME_MAX + 1],
                unsigned n)
{
	struct bgm *g = ah->bg;

	if (!g || n == 0)
		return;
	pthread_mutex_lock(&g->mu);
	start(ah, g);
	for (unsigned i = 0; i < n && g->started; i++)
		if (enqueue(g, names[i]) && !g->err)
			g->err = AH_ENOMEM;
	pthread_cond_signal(&g->work);
	pthread_mutex_unlock(&g->mu);
}

void bgm_turnstile(ah_heap *ah)
{
	struct bgm *g = ah->bg;

	if (!g || heap_writer_is_self(ah->h))
		return;
	pthread_mutex_lock(&g->mu);
	while (g->installing)
		pthread_cond_wait(&g->turn, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

void bgm_pause(ah_heap *ah, bool on)
{
	struct bgm *g = ah->bg;

	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	if (on) {
		g->paused++;
		while (g->busy)
			pthread_cond_wait(&g->idle, &g->mu);
	} else if (--g->paused == 0) {
		pthread_cond_signal(&g->work);
	}
	pthread_mutex_unlock(&g->mu);
}

void bgm_stop(ah_heap *ah)
{
	struct bgm *g = ah->bg;

	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	bool started = g->started;
	__atomic_store_n(&g->stop, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&g->work);
	pthread_mutex_unlock(&g->mu);
	if (started)
		pthread_join(g->thr, NULL);
	pthread_mutex_lock(&g->mu);
	g->started = false;
	g->n = 0;
	pthread_mutex_unlock(&g->mu);
}

void bgm_destroy(ah_heap *ah)
{
	struct bgm *g = ah->bg;

	if (!g)
		return;
	bgm_stop(ah);
	if (g->p)
		pool_destroy(g->p);
	free(g->names);
	pthread_cond_destroy(&g->work);
	pthread_cond_destroy(&g->idle);
	pthread_cond_destroy(&g->turn);
	pthread_mutex_destroy(&g->mu);
	free(g);
	ah->bg = NULL;
}

int ah_merge_wait(ah_heap *ah, ah_merge_stats *st)
{
	struct bgm *g;
	int rc;

	if (!ah)
		return AH_EINVAL;
	if ((rc = heap_check_pid(ah->h)))
		return rc;
	if (heap_writer_is_self(ah->h))
		return AH_ESTATE;
	if (!(g = ah->bg)) {
		if (st)
			memset(st, 0, sizeof *st);
		return 0;
	}
	pthread_mutex_lock(&g->mu);
	g->waiters++;
	while (g->started && !g->paused && (g->n > 0 || g->busy))
		pthread_cond_wait(&g->idle, &g->mu);
	g->waiters--;
	rc = g->err;
	g->err = 0;
	if (st)
		*st = g->st;
	pthread_mutex_unlock(&g->mu);
	return rc;
}
