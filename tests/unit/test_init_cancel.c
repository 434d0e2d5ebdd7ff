/* SPDX-License-Identifier: MIT */
/*
 * test_init_cancel.c - the process's first call into Sheaf made by a thread with a
 * pthread_cancel pending.  That call starts Sheaf under init_lock, reading the topology
 * from sysfs with open and read, which are cancellation points: until 2026-11-29 the
 * thread was cancelled there holding init_lock, and every later call of the process
 * hung.  The thread must now be cancelled only after the call (at its next
 * cancellation point), with its cache made, and the rest of the process unaffected.
 *
 * In a child process (alarm: a hang kills it), so that Sheaf starts there.
 */
#include <pthread.h>
#include <unistd.h>

#include "harness.h"
#include "sheaf.h"

static struct sheaf_cache *first;

static void *first_call(void *arg)
{
	(void)arg;
	pthread_cancel(pthread_self()); /* deferred: acted on at the next point */
	first = sheaf_cache_create("init-cancel-1", 64, NULL);
	pthread_testcancel();
	return NULL;
}

static void cancelled_child(void *arg)
{
	(void)arg;
	alarm(10);
	pthread_t t;
	void *r = NULL;
	if (pthread_create(&t, NULL, first_call, NULL) || pthread_join(t, &r))
		_exit(2);
	/* Hung here, before: init_lock was left held. */
	struct sheaf_cache *c = sheaf_cache_create("init-cancel-2", 64, NULL);
	void *p = c ? sheaf_cache_alloc(c) : NULL;
	if (!p)
		_exit(3);
	sheaf_cache_free(c, p);
	sheaf_cache_destroy(c);
	if (r != PTHREAD_CANCELED || !first)
		_exit(4); /* cancelled inside sheaf_cache_create */
	sheaf_cache_destroy(first);
	_exit(0);
}

static void test_first_call_cancelled(void)
{
	struct th_child r;
	th_run_child(cancelled_child, NULL, &r);
	CHECKF(r.exited && r.status == 0, "%s %d (SIGALRM %d: init_lock left held): %s",
	       r.exited ? "exit" : "signal", r.exited ? r.status : r.sig, SIGALRM, r.err);
}

int main(void)
{
	RUN(test_first_call_cancelled);
	return th_done();
}
