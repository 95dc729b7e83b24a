/*
 * tests/tsan/criterion/criterion.h - a minimal stand-in for Criterion's
 * header, used only by `make tsan`: Criterion cannot start under
 * ThreadSanitizer (its BoxFort arena picks random fixed addresses in
 * 0x2000'0000'0000..0x7f00'0000'0000, all of which TSan reserves, so
 * cri_alloc_init fails with "Could not initialize inheritable arena";
 * upstream Snaipe/Criterion#274).  With this header first on the include
 * path, the threaded test files build into tests/tsan/driver.c's runner,
 * which forks one process per test as Criterion does.  Only the macros the
 * reliability tests use are provided.  Never part of the normal suite.
 */
#ifndef TSAN_CRITERION_SHIM_H
#define TSAN_CRITERION_SHIM_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void shim_register(const char *suite, const char *name, void (*fn)(void));
void shim_fail(const char *file, int line, const char *cond, const char *fmt,
               ...) __attribute__((noreturn));
void shim_skip(const char *fmt, ...) __attribute__((noreturn));
void shim_log(const char *fmt, ...);

#define Test(suite, name, ...)                                                 \
	static void suite##_##name(void);                                      \
	__attribute__((constructor)) static void reg_##suite##_##name(void)    \
	{                                                                      \
		shim_register(#suite, #name, suite##_##name);                  \
	}                                                                      \
	static void suite##_##name(void)

#define cr_assert(c, ...)                                                      \
	do {                                                                   \
		if (!(c))                                                      \
			shim_fail(__FILE__, __LINE__, #c, "" __VA_ARGS__);     \
	} while (0)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), __VA_ARGS__)
#define cr_assert_null(a, ...) cr_assert((a) == NULL, __VA_ARGS__)
#define cr_assert_not_null(a, ...) cr_assert((a) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_fail(...) cr_assert(0, __VA_ARGS__)
#define cr_skip_test(...) shim_skip("" __VA_ARGS__)
#define cr_log_info(...) shim_log("" __VA_ARGS__)
#define cr_log_warn(...) shim_log("" __VA_ARGS__)

#endif
