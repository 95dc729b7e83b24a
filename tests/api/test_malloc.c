/*
 * tests/api/test_malloc.c - "linking arrheap leaves the process's malloc
 * alone" (the header's Caveats, ARCHITECTURE.md section 7): the pool's
 * jemalloc is the library's own copy, so a program's malloc stays the one
 * it linked.
 *
 * A program written from the header alone writes through the pool (40
 * appends, then one merge of all, so the builder and the merge allocate
 * from it), reads everything back, and reports, through dladdr, which
 * object defines the malloc it calls.  It is linked three ways, each as an
 * application would:
 *  - with libarrheap.a as the README says: malloc is the C library's,
 *    whose own accounting (mallinfo2) sees a block the program allocates;
 *  - with libarrheap.so: the same;
 *  - with libarrheap.a and the application's own jemalloc (-ljemalloc):
 *    malloc is that jemalloc, and the two allocators live side by side.
 * The program also defines names the library uses inside (pool_create,
 * heap_open, run_sort): libarrheap.a's only global names are ah_*, as
 * the .so's, so they link and are the program's own.
 * Every program is linked with -rdynamic, so that a malloc defined by the
 * library inside the program would be the one the program calls, and
 * must be neither the program nor libarrheap.  Sanitizer builds (whose
 * malloc is the sanitizer's) check only that, and skip the third way.
 *
 * And "open the heap anew in the child" after a fork() (Caveats) while
 * the library's jemalloc may be starting: a process whose first write is
 * under way on one thread forks on another, at delays swept over the
 * first write, and the child creates and writes a heap of its own.  A
 * jemalloc that initialized at its first call rather than at load left
 * such children waiting forever for its init lock (an outside test:
 * 15 of 200).  Each trial is a fresh process (forked before any write),
 * each child has 10 s.
 * Skipped when AH_SRC or AH_BUILD is not set (the Makefile sets both).
 */
#include <sys/wait.h>
#include <unistd.h>

#include <string.h>

#include "tl_dir.h"
#include "tl_heap.h"

/* A trial per process: its first write on a thread, a fork on main at a
 * delay swept over it, and in the child a heap of its own written. */
static const char fork_prog[] =
"#define _GNU_SOURCE\n"
"#include <arrheap.h>\n"
"#include <pthread.h>\n"
"#include <signal.h>\n"
"#include <stdatomic.h>\n"
"#include <stdio.h>\n"
"#include <stdlib.h>\n"
"#include <string.h>\n"
"#include <sys/wait.h>\n"
"#include <time.h>\n"
"#include <unistd.h>\n"
"static ah_heap *h;\n"
"static atomic_int go;\n"
"static const ah_open_opts oo = { .size = sizeof oo,\n"
"	.flags = AH_OPEN_CREATE | AH_OPEN_NOSYNC, .max_bytes = 16u << 20 };\n"
"static int write_one(ah_heap *x, const char *name)\n"
"{\n"
"	static unsigned char k[200][4];\n"
"	ah_update u[200];\n"
"	ah_txn *t;\n"
"	for (unsigned i = 0; i < 200; i++) {\n"
"		memcpy(k[i], &i, 4);\n"
"		u[i] = (ah_update){ k[i], 4, k[i], 4, 0, 1 };\n"
"	}\n"
"	if (ah_txn_begin(x, 0, &t) || ah_arrangement_create(t, name) ||\n"
"	    ah_append(t, name, 0, 1, u, 200) || ah_txn_commit(t)) return 1;\n"
"	return 0;\n"
"}\n"
"static void *first_write(void *a)\n"
"{\n"
"	atomic_store(&go, 1);\n"
"	return (void *)(long)write_one(h, (const char *)a);\n"
"}\n"
"static double now_us(void)\n"
"{\n"
"	struct timespec ts;\n"
"	clock_gettime(CLOCK_MONOTONIC, &ts);\n"
"	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;\n"
"}\n"
"/* 0 done, 1 the child hung, 2 anything else wrong */\n"
"static int trial(int n, double delay)\n"
"{\n"
"	char p[64];\n"
"	pthread_t w;\n"
"	void *wr;\n"
"	int st = 0;\n"
"	snprintf(p, sizeof p, \"p%d.heap\", n);\n"
"	if (ah_open(p, &oo, &h) || pthread_create(&w, NULL, first_write, \"a\"))\n"
"		return 2;\n"
"	while (!atomic_load(&go)) ;\n"
"	double t0 = now_us();\n"
"	while (now_us() - t0 < delay) ;\n"
"	pid_t pid = fork();\n"
"	if (pid == 0) {\n"
"		ah_heap *c;\n"
"		char q[64];\n"
"		alarm(10);\n"
"		snprintf(q, sizeof q, \"c%d.heap\", n);\n"
"		_exit(ah_open(q, &oo, &c) || write_one(c, \"c\") || ah_close(c) ? 3 : 0);\n"
"	}\n"
"	if (pid < 0 || pthread_join(w, &wr) || wr || waitpid(pid, &st, 0) != pid ||\n"
"	    ah_close(h))\n"
"		return 2;\n"
"	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) return 1;\n"
"	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 2;\n"
"}\n"
"int main(int argc, char **argv)\n"
"{\n"
"	int trials = argc > 1 ? atoi(argv[1]) : 120, hung = 0, bad = 0;\n"
"	for (int n = 0; n < trials; n++) {\n"
"		int st;\n"
"		pid_t pid = fork();\n"
"		if (pid == 0) _exit(trial(n, 1000.0 * n / trials));\n"
"		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) bad++;\n"
"		else if (WEXITSTATUS(st) == 1) hung++;\n"
"		else if (WEXITSTATUS(st)) bad++;\n"
"	}\n"
"	printf(\"trials %d hung %d bad %d\\n\", trials, hung, bad);\n"
"	return hung || bad;\n"
"}\n";

static const char prog[] =
"#define _GNU_SOURCE\n"
"#include <arrheap.h>\n"
"#include <dlfcn.h>\n"
"#include <malloc.h>\n"
"#include <stdio.h>\n"
"#include <stdlib.h>\n"
"#include <string.h>\n"
"#define N 5000\n"
"static ah_update u[N];\n"
"static unsigned char k[N][8];\n"
"/* names the library uses inside: the program's own */\n"
"int pool_create(int x);\n"
"int pool_create(int x) { return x + 1; }\n"
"long heap_open = 5;\n"
"void *run_sort(void *p);\n"
"void *run_sort(void *p) { return p; }\n"
"int main(int argc, char **argv)\n"
"{\n"
"	if (pool_create(6) != 7 || heap_open != 5 || run_sort(u) != u) return 9;\n"
"	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE };\n"
"	ah_heap *h; ah_txn *t; ah_cursor *c; ah_pool_stats ps;\n"
"	long long sum = 0; int64_t x;\n"
"	if (argc != 3 || ah_open(argv[1], &o, &h)) return 10;\n"
"	if (ah_txn_begin(h, 0, &t) || ah_arrangement_create(t, \"a\") ||\n"
"	    ah_txn_commit(t)) return 11;\n"
"	for (unsigned a = 0; a < 40; a++) {\n"
"		for (unsigned i = 0; i < N; i++) {\n"
"			unsigned v = (i * 2654435761u) ^ a;\n"
"			memcpy(k[i], &v, 4); memcpy(k[i] + 4, &a, 4);\n"
"			u[i] = (ah_update){ k[i], 8, k[i], 4, a, 1 };\n"
"		}\n"
"		if (ah_txn_begin(h, 0, &t) ||\n"
"		    ah_append(t, \"a\", a, a + 1, u, N) ||\n"
"		    ah_txn_commit(t)) return 12;\n"
"	}\n"
"	if (ah_txn_begin(h, 0, &t) || ah_maintain(t, \"a\", 0, NULL) ||\n"
"	    ah_txn_commit(t)) return 13;\n"
"	if (ah_pool_stats_get(h, &ps) || ps.peak_active_bytes == 0) return 14;\n"
"	if (ah_txn_begin(h, AH_TXN_RDONLY, &t) || ah_cursor_open(t, \"a\", &c))\n"
"		return 15;\n"
"	for (int kv = ah_cursor_key_valid(c); kv == 1; kv = ah_cursor_step_key(c))\n"
"		for (int vv = ah_cursor_val_valid(c); vv == 1; vv = ah_cursor_step_val(c)) {\n"
"			if (ah_cursor_accumulate(c, 39, &x)) return 16;\n"
"			sum += x;\n"
"		}\n"
"	ah_cursor_close(c); ah_txn_abort(t);\n"
"	if (ah_close(h) || sum != 40LL * N) return 17;\n"
"	Dl_info m, self;\n"
"	if (!dladdr((void *)&malloc, &m) || !dladdr((void *)&main, &self))\n"
"		return 18;\n"
"	printf(\"malloc from %s\\n\", m.dli_fname);\n"
"	if (strcmp(m.dli_fname, self.dli_fname) == 0 ||\n"
"	    strstr(m.dli_fname, \"libarrheap\")) return 19;\n"
"	if (strcmp(argv[2], \"-\") && !strstr(m.dli_fname, argv[2])) return 20;\n"
"	if (strcmp(argv[2], \"libc.so\") == 0) {\n"
"		struct mallinfo2 a = mallinfo2();\n"
"		void *p = malloc(65536);\n"
"		struct mallinfo2 b = mallinfo2();\n"
"		if (!p || b.uordblks < a.uordblks + 65536) return 21;\n"
"		free(p);\n"
"	}\n"
"	return 0;\n"
"}\n";

/* Writes text to d/name. */
static void put_file(const tl_dir *d, const char *name, const char *text)
{
	char path[512];

	snprintf(path, sizeof path, "%s/%s", d->dir, name);
	FILE *o = fopen(path, "w");
	cr_assert_not_null(o);
	cr_assert_eq(fputs(text, o) >= 0, true);
	cr_assert_eq(fclose(o), 0);
}

/* Runs cmd with sh; it must exit 0. */
static void sh_ok(const char *cmd)
{
	int st = system(cmd);

	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d", cmd,
	          WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* Builds prog with the link tail `link` and runs it on a fresh heap,
 * expecting malloc from an object whose name holds `want` ("-": any but
 * the program and the library). */
static void build_and_run(const tl_dir *d, const char *name, const char *link,
                          const char *want)
{
	const char *src = getenv("AH_SRC"), *san = getenv("AH_SAN");
	char cmd[4096];

	snprintf(cmd, sizeof cmd,
	         "cd '%s' && cc -std=c11 -Wall -Wextra -Werror %s -rdynamic "
	         "-I'%s/include' -o %s prog.c %s 2>&1 && ./%s %s.heap %s 2>&1",
	         d->dir, san ? san : "", src, name, link, name, name, want);
	sh_ok(cmd);
}

Test(api_malloc, linking_arrheap_leaves_the_process_malloc_alone,
     .timeout = 240)
{
	const char *src = getenv("AH_SRC"), *build = getenv("AH_BUILD");
	const char *san = getenv("AH_SAN");
	bool sanitized = san && *san;
	char path[512], link[1024];

	if (!src || !build)
		cr_skip_test("AH_SRC/AH_BUILD not set");
	tl_dir d = tl_tmpdir("malloc");
	put_file(&d, "prog.c", prog);

	/* as the README links it */
	snprintf(link, sizeof link, "'%s/libarrheap.a' -llmdb -lpthread -lm",
	         build);
	build_and_run(&d, "static", link, sanitized ? "-" : "libc.so");

	/* the shared library, found through its soname beside the program */
	snprintf(path, sizeof path, "%s/libarrheap.so.0", d.dir);
	char so[512];
	snprintf(so, sizeof so, "%s/libarrheap.so", build);
	cr_assert_eq(symlink(so, path), 0);
	snprintf(link, sizeof link,
	         "-L. -l:libarrheap.so.0 -Wl,-rpath,'%s' -llmdb -lpthread -lm",
	         d.dir);
	build_and_run(&d, "shared", link, sanitized ? "-" : "libc.so");

	/* an application with its own jemalloc as its malloc */
	if (!sanitized) {
		snprintf(link, sizeof link,
		         "'%s/libarrheap.a' -ljemalloc -llmdb -lpthread -lm", build);
		build_and_run(&d, "own_jemalloc", link, "libjemalloc");
	}
	tl_rmdir(&d);
}

Test(api_malloc, fork_during_the_first_write, .timeout = 600)
{
	const char *src = getenv("AH_SRC"), *build = getenv("AH_BUILD");
	const char *san = getenv("AH_SAN");
	char cmd[4096];

	if (!src || !build)
		cr_skip_test("AH_SRC/AH_BUILD not set");
	/* A sanitizer build has no jemalloc, and GCC 12's ASan allocator is
	 * not fork-safe itself: a child forked while another thread holds
	 * its size-class lock waits on it forever (seen: 5 of 120, in
	 * __asan::Allocator::Allocate under builder_new). */
	if (san && *san)
		cr_skip_test("sanitizer allocators are not fork-safe with threads");
	tl_dir d = tl_tmpdir("malloc");
	put_file(&d, "fork.c", fork_prog);
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && cc -std=c11 -Wall -Wextra -Werror %s "
	         "-I'%s/include' -o fork fork.c '%s/libarrheap.a' -llmdb "
	         "-lpthread -lm 2>&1 && ./fork 120 2>&1",
	         d.dir, san ? san : "", src, build);
	sh_ok(cmd);
	tl_rmdir(&d);
}

/* ah_pool_stats_get: all zero before the handle's first write (the pool
 * is made then), a peak after it, nothing active after the commit (the
 * pool is reset after each write transaction). */
Test(api_malloc, pool_stats_zero_until_the_first_write)
{
	tl_dir d = tl_tmpdir("malloc");
	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE };
	ah_pool_stats ps;
	ah_heap *h;
	ah_txn *t;
	uint8_t k[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	ah_update u = { k, 8, k, 8, 0, 1 };

	cr_assert_eq(ah_open(d.path, &o, &h), 0);
	memset(&ps, 0xff, sizeof ps);
	cr_assert_eq(ah_pool_stats_get(h, &ps), 0);
	cr_assert_eq(ps.active_bytes, 0);
	cr_assert_eq(ps.dirty_bytes, 0);
	cr_assert_eq(ps.resident_bytes, 0);
	cr_assert_eq(ps.peak_active_bytes, 0);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	cr_assert_eq(ah_arrangement_create(t, "a"), 0);
	cr_assert_eq(ah_append(t, "a", 0, 1, &u, 1), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
	cr_assert_eq(ah_pool_stats_get(h, &ps), 0);
	cr_assert_gt(ps.peak_active_bytes, 0);
	cr_assert_eq(ps.active_bytes, 0);
	cr_assert_eq(ah_close(h), 0);
	tl_rmdir(&d);
}

/* The Caveats' way to dlopen() libarrheap.so after start-up: with glibc's
 * optional static TLS raised, the library loads and works (a heap made,
 * written and read through dlsym'd functions). */
static const char dl_prog[] =
"#define _GNU_SOURCE\n"
"#include <arrheap.h>\n"
"#include <dlfcn.h>\n"
"#include <stdio.h>\n"
"int main(int argc, char **argv)\n"
"{\n"
"	if (argc != 3) return 1;\n"
"	void *l = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);\n"
"	if (!l) { printf(\"dlopen: %s\\n\", dlerror()); return 2; }\n"
"	int (*op)(const char *, const ah_open_opts *, ah_heap **) =\n"
"		(int (*)(const char *, const ah_open_opts *, ah_heap **))dlsym(l, \"ah_open\");\n"
"	int (*beg)(ah_heap *, unsigned, ah_txn **) =\n"
"		(int (*)(ah_heap *, unsigned, ah_txn **))dlsym(l, \"ah_txn_begin\");\n"
"	int (*cr)(ah_txn *, const char *) =\n"
"		(int (*)(ah_txn *, const char *))dlsym(l, \"ah_arrangement_create\");\n"
"	int (*ap)(ah_txn *, const char *, uint64_t, uint64_t, const ah_update *, size_t) =\n"
"		(int (*)(ah_txn *, const char *, uint64_t, uint64_t, const ah_update *, size_t))dlsym(l, \"ah_append\");\n"
"	int (*cm)(ah_txn *) = (int (*)(ah_txn *))dlsym(l, \"ah_txn_commit\");\n"
"	int (*ps)(ah_heap *, ah_pool_stats *) =\n"
"		(int (*)(ah_heap *, ah_pool_stats *))dlsym(l, \"ah_pool_stats_get\");\n"
"	int (*cl)(ah_heap *) = (int (*)(ah_heap *))dlsym(l, \"ah_close\");\n"
"	if (!op || !beg || !cr || !ap || !cm || !ps || !cl) return 3;\n"
"	ah_open_opts o = { .size = sizeof o, .flags = AH_OPEN_CREATE };\n"
"	ah_heap *h; ah_txn *t; ah_pool_stats st;\n"
"	unsigned char k[8] = { 8, 7, 6, 5, 4, 3, 2, 1 };\n"
"	ah_update u = { k, 8, k, 8, 0, 1 };\n"
"	if (op(argv[2], &o, &h) || beg(h, 0, &t) || cr(t, \"a\") ||\n"
"	    ap(t, \"a\", 0, 1, &u, 1) || cm(t) || ps(h, &st) ||\n"
"	    st.peak_active_bytes == 0 || cl(h)) return 4;\n"
"	return 0;\n"
"}\n";

Test(api_malloc, dlopen_with_more_static_tls, .timeout = 120)
{
	const char *src = getenv("AH_SRC"), *build = getenv("AH_BUILD");
	const char *san = getenv("AH_SAN");
	char cmd[4096];

	if (!src || !build)
		cr_skip_test("AH_SRC/AH_BUILD not set");
	tl_dir d = tl_tmpdir("malloc");
	put_file(&d, "dl.c", dl_prog);
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && cc -std=c11 -Wall -Wextra -Werror %s -I'%s/include' "
	         "-o dl dl.c 2>&1 && "
	         "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=8192 "
	         "./dl '%s/libarrheap.so' dl.heap 2>&1",
	         d.dir, san ? san : "", src, build);
	sh_ok(cmd);
	tl_rmdir(&d);
}

/* Every allocation that fails is AH_ENOMEM and loses nothing (the header:
 * "bad input gets a clear error and loses nothing"; a malloc failure in
 * the open's page check had no test): a program written from the header
 * alone defines malloc, calloc, realloc, aligned_alloc and posix_memalign
 * over the C library's, failing the nth call after it arms them, and
 * sweeps n over every allocation of
 *  - a write txn on an open handle (an append, then commit), and the same
 *    with a merge of all (ah_maintain, fuel 0): each call returns 0 or
 *    AH_ENOMEM; a commit that returned 0 is whole, any other leaves the
 *    heap exactly as before (every key's sum and the upper, checked after
 *    each trial against a model), and the handle goes on working;
 *  - ah_open (writable and AH_OPEN_RDONLY), a read txn, a seek and the
 *    answer: 0 or AH_ENOMEM, a right answer when 0, and the heap opens
 *    again afterwards (no registry entry or lock left behind) holding
 *    everything.
 * It fails unless some allocation was failed in each sweep (the
 * interposition in effect).  The pool's own jemalloc is not reached from
 * here: the internal sweep (tests/fault) covers it.  Skipped in sanitizer
 * builds, whose malloc is the sanitizer's. */
static const char enomem_prog[] =
"#define _GNU_SOURCE\n"
"#include <arrheap.h>\n"
"#include <errno.h>\n"
"#include <stdatomic.h>\n"
"#include <stdio.h>\n"
"#include <stdlib.h>\n"
"#include <string.h>\n"
"\n"
"/* malloc and its kin, failing the armed call: the C library's own\n"
" * allocator underneath (glibc exports it as __libc_*). */\n"
"extern void *__libc_malloc(size_t);\n"
"extern void *__libc_calloc(size_t, size_t);\n"
"extern void *__libc_realloc(void *, size_t);\n"
"extern void *__libc_memalign(size_t, size_t);\n"
"static atomic_long armed; /* calls until the one that fails; 0: none */\n"
"static atomic_int fired;\n"
"static int fail_now(void)\n"
"{\n"
"	long a = atomic_load(&armed);\n"
"	while (a > 0)\n"
"		if (atomic_compare_exchange_weak(&armed, &a, a - 1)) {\n"
"			if (a > 1)\n"
"				return 0;\n"
"			atomic_store(&fired, 1);\n"
"			return 1;\n"
"		}\n"
"	return 0;\n"
"}\n"
"void *malloc(size_t n) { return fail_now() ? NULL : __libc_malloc(n); }\n"
"void *calloc(size_t a, size_t b) { return fail_now() ? NULL : __libc_calloc(a, b); }\n"
"void *realloc(void *p, size_t n) { return fail_now() ? NULL : __libc_realloc(p, n); }\n"
"void *aligned_alloc(size_t al, size_t n) { return fail_now() ? NULL : __libc_memalign(al, n); }\n"
"int posix_memalign(void **p, size_t al, size_t n)\n"
"{\n"
"	if (fail_now())\n"
"		return ENOMEM;\n"
"	*p = __libc_memalign(al, n);\n"
"	return *p ? 0 : ENOMEM;\n"
"}\n"
"static void arm(long n) { atomic_store(&fired, 0); atomic_store(&armed, n); }\n"
"static int disarm(void) { atomic_store(&armed, 0); return atomic_load(&fired); }\n"
"\n"
"#define KEYS 400\n"
"static const char *path;\n"
"static uint64_t upper = 0; /* the model: upper and every key's sum */\n"
"static int64_t sums[KEYS];\n"
"static int bad;\n"
"\n"
"static void key_of(unsigned i, unsigned char k[4])\n"
"{\n"
"	k[0] = (unsigned char)(i >> 24); k[1] = (unsigned char)(i >> 16);\n"
"	k[2] = (unsigned char)(i >> 8); k[3] = (unsigned char)i;\n"
"}\n"
"\n"
"#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\\n', stderr); bad++; } while (0)\n"
"\n"
"/* The heap (disarmed) against the model: upper, and every key's sum. */\n"
"static void verify(ah_heap *h, const char *when, long n)\n"
"{\n"
"	ah_txn *t;\n"
"	ah_cursor *c;\n"
"	ah_arrangement_info in;\n"
"	int64_t got[KEYS] = { 0 }, s;\n"
"	const void *k;\n"
"	size_t kl;\n"
"	int rc;\n"
"\n"
"	if ((rc = ah_txn_begin(h, AH_TXN_RDONLY, &t)) ||\n"
"	    (rc = ah_arrangement_info_get(t, \"a\", &in)) ||\n"
"	    (rc = ah_cursor_open(t, \"a\", &c))) {\n"
"		FAIL(\"%s %ld: verify: %s\", when, n, ah_strerror(rc));\n"
"		return;\n"
"	}\n"
"	if (in.upper != upper)\n"
"		FAIL(\"%s %ld: upper %llu, expected %llu\", when, n,\n"
"		     (unsigned long long)in.upper, (unsigned long long)upper);\n"
"	for (int v = ah_cursor_key_valid(c); v == 1; v = ah_cursor_step_key(c)) {\n"
"		if (ah_cursor_key(c, &k, &kl) || kl != 4) { FAIL(\"%s %ld: key\", when, n); break; }\n"
"		const unsigned char *b = k;\n"
"		unsigned i = (unsigned)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];\n"
"		for (int w = ah_cursor_val_valid(c); w == 1; w = ah_cursor_step_val(c))\n"
"			if (i < KEYS && ah_cursor_accumulate(c, upper - 1, &s) == 0)\n"
"				got[i] += s;\n"
"	}\n"
"	ah_cursor_close(c);\n"
"	ah_txn_abort(t);\n"
"	for (unsigned i = 0; i < KEYS; i++)\n"
"		if (got[i] != sums[i]) {\n"
"			FAIL(\"%s %ld: key %u sums %lld, expected %lld\", when, n, i,\n"
"			     (long long)got[i], (long long)sums[i]);\n"
"			break;\n"
"		}\n"
"}\n"
"\n"
"/* One write: 60 updates at [upper, upper + 1), with merge a merge of all\n"
" * (fuel 0), committed; rcs[] each call's result. */\n"
"static int write_once(ah_heap *h, long n, int merge, int *rcs)\n"
"{\n"
"	static unsigned char kb[60][4];\n"
"	ah_update u[60];\n"
"	ah_txn *t;\n"
"	int rc;\n"
"\n"
"	for (unsigned j = 0; j < 60; j++) {\n"
"		unsigned i = (unsigned)((n * 61 + j * 7) % KEYS);\n"
"		key_of(i, kb[j]);\n"
"		u[j] = (ah_update){ kb[j], 4, kb[j], 4, upper, (j & 1) ? 1 : 2 };\n"
"	}\n"
"	if ((rc = ah_txn_begin(h, 0, &t)))\n"
"		return rcs[0] = rc;\n"
"	if ((rcs[1] = rc = ah_append(t, \"a\", upper, upper + 1, u, 60)) == 0 &&\n"
"	    merge)\n"
"		rcs[2] = rc = ah_maintain(t, \"a\", 0, NULL);\n"
"	if (rc) {\n"
"		ah_txn_abort(t);\n"
"		return rc;\n"
"	}\n"
"	return rcs[3] = ah_txn_commit(t);\n"
"}\n"
"\n"
"static void model_write(long n)\n"
"{\n"
"	for (unsigned j = 0; j < 60; j++)\n"
"		sums[(n * 61 + j * 7) % KEYS] += (j & 1) ? 1 : 2;\n"
"	upper++;\n"
"}\n"
"\n"
"static int ok_rc(int rc) { return rc == 0 || rc == AH_ENOMEM; }\n"
"\n"
"int main(int argc, char **argv)\n"
"{\n"
"	const ah_open_opts cr = { .size = sizeof cr, .flags = AH_OPEN_CREATE | AH_OPEN_NOSYNC,\n"
"	                          .max_bytes = 64u << 20 };\n"
"	const ah_open_opts wr = { .size = sizeof wr, .flags = AH_OPEN_NOSYNC };\n"
"	const ah_open_opts ro = { .size = sizeof ro, .flags = AH_OPEN_RDONLY };\n"
"	long fails[3] = { 0 }, n;\n"
"	ah_heap *h;\n"
"	int rc;\n"
"\n"
"	if (argc < 2)\n"
"		return 2;\n"
"	path = argv[1];\n"
"	/* the heap: an arrangement, one write */\n"
"	if ((rc = ah_open(path, &cr, &h)) == 0) {\n"
"		ah_txn *t;\n"
"		if (!(rc = ah_txn_begin(h, 0, &t)) && !(rc = ah_arrangement_create(t, \"a\")))\n"
"			rc = ah_txn_commit(t);\n"
"		if (!rc)\n"
"			rc = write_once(h, 0, 0, (int[4]){ 0 });\n"
"		if (!rc)\n"
"			model_write(0);\n"
"		ah_close(h);\n"
"	}\n"
"	if (rc) {\n"
"		fprintf(stderr, \"setup: %s\\n\", ah_strerror(rc));\n"
"		return 1;\n"
"	}\n"
"	/* writes: the nth allocation of an open handle's write txn fails,\n"
"	 * appends alone and appends with a merge of all */\n"
"	for (int merge = 0; merge < 2; merge++) {\n"
"		long nf = 0;\n"
"		for (n = 1; n < 100000 && bad < 5; n++) {\n"
"			int rcs[4] = { 0 };\n"
"			if ((rc = ah_open(path, &wr, &h))) {\n"
"				FAIL(\"write %ld: open %s\", n, ah_strerror(rc));\n"
"				break;\n"
"			}\n"
"			arm(n);\n"
"			rc = write_once(h, n, merge, rcs);\n"
"			int f = disarm();\n"
"			for (int i = 0; i < 4; i++)\n"
"				if (!ok_rc(rcs[i]))\n"
"					FAIL(\"write %d/%ld: call %d returned %s\", merge, n, i,\n"
"					     ah_strerror(rcs[i]));\n"
"			if (rc == AH_ENOMEM && !f)\n"
"				FAIL(\"write %d/%ld: AH_ENOMEM with no failed allocation\",\n"
"				     merge, n);\n"
"			if (rc == 0)\n"
"				model_write(n);\n"
"			nf += rc != 0;\n"
"			verify(h, \"write\", n);\n"
"			if ((rc = ah_close(h)))\n"
"				FAIL(\"write %d/%ld: close %s\", merge, n, ah_strerror(rc));\n"
"			if (!f)\n"
"				break;\n"
"		}\n"
"		printf(\"write %d: %ld allocations swept, %ld failed writes\\n\",\n"
"		       merge, n - 1, nf);\n"
"		fails[0] += nf;\n"
"	}\n"
"	/* opens and first answers: the nth allocation from ah_open on fails */\n"
"	for (int mode = 0; mode < 2; mode++)\n"
"		for (n = 1; n < 100000 && bad < 5; n++) {\n"
"			ah_txn *t = NULL;\n"
"			ah_cursor *c = NULL;\n"
"			unsigned char k[4];\n"
"			int64_t s = 0, x;\n"
"			h = NULL;\n"
"			key_of(7, k);\n"
"			arm(n);\n"
"			rc = ah_open(path, mode ? &ro : &wr, &h);\n"
"			if (!rc)\n"
"				rc = ah_txn_begin(h, AH_TXN_RDONLY, &t);\n"
"			if (!rc)\n"
"				rc = ah_cursor_open_at(t, \"a\", k, 4, &c);\n"
"			if (!rc && ah_cursor_key_valid(c) == 1)\n"
"				for (int w = ah_cursor_val_valid(c); w == 1 && !rc;\n"
"				     w = ah_cursor_step_val(c))\n"
"					if (!(rc = ah_cursor_accumulate(c, upper - 1, &x)))\n"
"						s += x;\n"
"			int f = disarm();\n"
"			if (!ok_rc(rc))\n"
"				FAIL(\"read %d/%ld: %s\", mode, n, ah_strerror(rc));\n"
"			if (rc == AH_ENOMEM && !f)\n"
"				FAIL(\"read %d/%ld: AH_ENOMEM with no failed allocation\", mode, n);\n"
"			if (rc == 0 && s != sums[7])\n"
"				FAIL(\"read %d/%ld: answer %lld, expected %lld\", mode, n,\n"
"				     (long long)s, (long long)sums[7]);\n"
"			fails[1 + mode] += rc != 0;\n"
"			ah_cursor_close(c);\n"
"			ah_txn_abort(t);\n"
"			if (h && (rc = ah_close(h)))\n"
"				FAIL(\"read %d/%ld: close %s\", mode, n, ah_strerror(rc));\n"
"			/* nothing left behind: the heap opens again and holds all */\n"
"			if ((rc = ah_open(path, mode ? &ro : &wr, &h))) {\n"
"				FAIL(\"read %d/%ld: reopen %s\", mode, n, ah_strerror(rc));\n"
"				break;\n"
"			}\n"
"			verify(h, \"read\", n);\n"
"			ah_close(h);\n"
"			if (!f)\n"
"				break;\n"
"		}\n"
"	printf(\"read: %ld failed opens or reads (writable), %ld (read-only)\\n\",\n"
"	       fails[1], fails[2]);\n"
"	if (!fails[0] || !fails[1] || !fails[2])\n"
"		FAIL(\"no allocation failed: the interposition is not in effect\");\n"
"	return bad ? 1 : 0;\n"
"}\n";

Test(api_malloc, every_failed_allocation_is_enomem_and_loses_nothing,
     .timeout = 120)
{
	const char *src = getenv("AH_SRC"), *build = getenv("AH_BUILD");
	const char *san = getenv("AH_SAN");
	char cmd[4096];

	if (!src || !build)
		cr_skip_test("AH_SRC/AH_BUILD not set");
	if (san && *san)
		cr_skip_test("a sanitizer's malloc cannot be interposed");
	tl_dir d = tl_tmpdir("malloc");
	put_file(&d, "enomem.c", enomem_prog);
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && cc -std=c11 -Wall -Wextra -Werror -rdynamic "
	         "-I'%s/include' -o enomem enomem.c '%s/libarrheap.a' -llmdb "
	         "-lpthread -lm 2>&1 && ./enomem e.heap 2>&1",
	         d.dir, src, build);
	sh_ok(cmd);
	tl_rmdir(&d);
}
