/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_warm_cancel.c - the process's first free_rcu made by a thread with a
 * pthread_cancel pending.  That call starts liburcu's call_rcu worker under the RCU
 * layer's warm_lock, after a probe thread it creates and joins; pthread_join is a
 * cancellation point, and until 2026-11-29 the thread was cancelled there with
 * warm_lock held: the next free_rcu (the worker was never marked started) and every
 * fork() hung for good.  The thread must now be cancelled only after the call (at its
 * next cancellation point), the object freed, and the rest of the process unaffected.
 *
 * In a child process (alarm: a hang kills it), so that this is its first free_rcu.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sheaf.h"

static struct sheaf_cache *cache;
static void *obj;

static void *first_free_rcu(void *arg)
{
	(void)arg;
	/* Deferred: acted on at the first cancellation point from here on. */
	pthread_cancel(pthread_self());
	sheaf_cache_free_rcu(cache, obj);
	pthread_testcancel();
	return NULL;
}

static void cancelled_child(void *arg)
{
	(void)arg;
	alarm(10);
	cache = sheaf_cache_create("warm-cancel", 64, NULL);
	obj = sheaf_cache_alloc(cache);
	if (!cache || !obj)
		_exit(2);
	pthread_t t;
	void *r = NULL;
	if (pthread_create(&t, NULL, first_free_rcu, NULL) || pthread_join(t, &r))
		_exit(3);
	if (r != PTHREAD_CANCELED)
		_exit(4);
	/* Everything that needs warm_lock: free_rcu, a barrier, fork. */
	sheaf_cache_free_rcu(cache, sheaf_cache_alloc(cache));
	sheaf_cache_rcu_barrier(cache);
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	int st;
	if (p < 0 || waitpid(p, &st, 0) != p || st != 0)
		_exit(5);
	sheaf_cache_destroy(cache);
	_exit(0);
}

static void test_first_free_rcu_cancelled(void)
{
	struct th_child r;
	th_run_child(cancelled_child, NULL, &r);
	CHECKF(r.exited && r.status == 0, "%s %d (SIGALRM %d: warm_lock left held): %s",
	       r.exited ? "exit" : "signal", r.exited ? r.status : r.sig, SIGALRM, r.err);
}

int main(void)
{
	RUN(test_first_free_rcu_cancelled);
	return th_done();
}
