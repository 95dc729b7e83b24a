/*
 * heap/thread.c - the library's own threads (the writeback thread, the
 * flusher, a merge's helper) start with every signal blocked: signals stay
 * the application's, delivered to its threads only.
 */
#include <pthread.h>
#include <signal.h>

#include "heap/heap.h"

bool heap_thread_start(pthread_t *thr, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	bool ok;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ok = pthread_create(thr, NULL, fn, arg) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ok;
}
