/*
 * tests/tsan/driver.c - the runner of `make tsan` (see
 * tests/tsan/criterion/criterion.h for why Criterion is not used there):
 * runs every registered test in its own forked process, one at a time, and
 * fails if any test fails or ThreadSanitizer reports (TSAN_OPTIONS
 * exitcode).  Compiled only with -DAH_TSAN_DRIVER; in the normal suite this
 * file is empty.
 */
#ifdef AH_TSAN_DRIVER
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criterion/criterion.h"

#define MAX_TESTS 256

struct shim_test {
	const char *suite, *name;
	void (*fn)(void);
};

static struct shim_test tests[MAX_TESTS];
static int ntests;

void shim_register(const char *suite, const char *name, void (*fn)(void))
{
	if (ntests < MAX_TESTS)
		tests[ntests++] = (struct shim_test){ suite, name, fn };
}

void shim_fail(const char *file, int line, const char *cond, const char *fmt,
               ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: assertion failed: %s: ", file, line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void shim_skip(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "skipped: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(77);
}

void shim_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int main(int argc, char **argv)
{
	int failed = 0, ran = 0;

	for (int i = 0; i < ntests; i++) {
		char full[256];
		int status;
		pid_t pid;

		snprintf(full, sizeof full, "%s/%s", tests[i].suite,
		         tests[i].name);
		if (argc > 1 && strstr(full, argv[1]) == NULL)
			continue;
		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			tests[i].fn();
			fflush(NULL);
			_exit(0);
		}
		waitpid(pid, &status, 0);
		ran++;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
			printf("[SKIP] %s\n", full);
		} else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			printf("[PASS] %s\n", full);
		} else {
			printf("[FAIL] %s (status %d)\n", full, status);
			failed++;
		}
	}
	printf("tsan driver: %d tests, %d failed\n", ran, failed);
	return failed != 0 || ran == 0;
}
#endif
