/*
 * tests/fault/usr1.h - does a thread of the library take a signal?  The
 * test installs the handler, starts the library's thread while this
 * thread takes SIGUSR1 (so only the thread's own mask can keep it out),
 * then usr1_only_here: SIGUSR1 blocked here and sent 20 times must stay
 * pending (a thread that did not block it would take it), and is taken by
 * this thread, once, when it unblocks.  Test-only.
 */
#ifndef TESTS_FAULT_USR1_H
#define TESTS_FAULT_USR1_H

#include <criterion/criterion.h>
#include <signal.h>
#include <unistd.h>

static volatile sig_atomic_t usr1_taken;
static pid_t usr1_tid;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_taken++;
	usr1_tid = gettid();
}

static inline void usr1_install(void)
{
	struct sigaction sa = { .sa_handler = on_usr1 };

	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
}

static inline void usr1_only_here(void)
{
	sigset_t usr1, old;

	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	cr_assert_eq(sigprocmask(SIG_BLOCK, &usr1, &old), 0);
	for (int i = 0; i < 20; i++) {
		cr_assert_eq(kill(getpid(), SIGUSR1), 0);
		usleep(1000);
	}
	cr_assert_eq(usr1_taken, 0, "a thread of the library took SIGUSR1");
	cr_assert_eq(sigprocmask(SIG_SETMASK, &old, NULL), 0);
	cr_assert_eq(usr1_taken, 1, "pending once, taken at the unblock");
	cr_assert_eq(usr1_tid, gettid());
}

#endif
