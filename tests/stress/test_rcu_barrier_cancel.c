/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_barrier_cancel - pthread_cancel of a thread waiting in sheaf_cache_rcu_barrier
 * (or sheaf_cache_destroy, which calls it) for a ticket's callback that is running.
 *
 * That wait is a pthread_cond_wait, a cancellation point.  A thread cancelled there died
 * holding the cache's rcu_state lock and its barrier mutex: the next free_rcu that
 * submitted a sheaf, every later barrier, the reaper's shrink and fork() hung for good.
 * The barriers now run with cancellation disabled, so the thread is cancelled at its
 * next cancellation point after the barrier instead.
 *
 * A child process per attempt (alarm: a hang kills it): 400,000 objects freed through
 * RCU make the ticket's callback run for milliseconds; once it runs (its state read
 * from rcu_impl.h), a thread with a cancel already pending calls the barrier, and must
 * leave the locks free: the child then frees through RCU, waits, creates and destroys a
 * cache and forks.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "harness.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the header's static helpers */
#include "rcu/rcu_impl.h"
#pragma GCC diagnostic pop
#include "sheaf.h"

#define OBJS 400000 /* freed through RCU per 100 rounds at most */

static struct sheaf_cache *cache;
static atomic_int cancel_sent;

/* True once the cache's ticket is in its callback (the barrier then waits for it).  Read
 * under the state's lock: the callback clears st->ticket under it before it frees the
 * ticket, so an unlocked read could follow a ticket already freed (ASan's use-after-poison,
 * 1 in about 50 runs under load, 2026-11-29). */
static bool ticket_running(void)
{
	struct rcu_state *st = cache->rcu_priv;
	pthread_mutex_lock(&st->lock);
	struct rcu_ticket *t = st->ticket;
	bool running = t && atomic_load(&t->state) == TICKET_RUNNING;
	pthread_mutex_unlock(&st->lock);
	return running;
}

static void *barrier_thread(void *arg)
{
	(void)arg;
	/* Nothing before the barrier is a cancellation point: the cancel, already pending,
	 * is acted on at the first one, in the barrier (before) or just after it. */
	while (!atomic_load(&cancel_sent))
		sched_yield();
	sheaf_cache_rcu_barrier(cache);
	pthread_testcancel();
	return NULL;
}

static void attempt(void *arg)
{
	(void)arg;
	/* A hang is for good: the alarm only has to outlast a slow attempt on a loaded
	 * machine.  10 s did not: an attempt that catches no ticket spent 3.6 s in its 2,000
	 * rounds on a 2-CPU machine at load 11 (8 M objects freed through RCU; debug build
	 * alike), and such attempts, or the barrier after millions of objects, were killed as
	 * hangs in 1 of 11 release and 1 of 2 debug runs under load (2026-11-29). */
	alarm(60);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cache = sheaf_cache_create("cancel", 16, NULL);
	if (!cache)
		_exit(2);
	/* Keep tickets coming until one is caught in its callback, for 2 s at most. */
	for (int round = 0; !ticket_running(); round++) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (round == 2000 || now.tv_sec - t0.tv_sec > 2)
			_exit(0); /* not caught: nothing tested (the other attempts are) */
		for (int i = 0; i < OBJS / 100 && !ticket_running(); i++)
			sheaf_cache_free_rcu(cache, sheaf_cache_alloc(cache));
	}
	pthread_t t;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old); /* keep the alarm for this thread */
	if (pthread_create(&t, NULL, barrier_thread, NULL))
		_exit(3);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_cancel(t);
	atomic_store(&cancel_sent, 1);
	void *r;
	pthread_join(t, &r);
	/* Everything that needs the barrier's locks. */
	for (int i = 0; i < 1000; i++)
		sheaf_cache_free_rcu(cache, sheaf_cache_alloc(cache));
	sheaf_cache_rcu_barrier(cache);
	struct sheaf_cache *c = sheaf_cache_create("other", 32, NULL);
	sheaf_cache_destroy(c);
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	int st;
	if (p < 0 || waitpid(p, &st, 0) != p || st != 0)
		_exit(4);
	sheaf_cache_destroy(cache);
	_exit(r == PTHREAD_CANCELED ? 0 : 5);
}

static void cancel_in_barrier(void)
{
	for (int i = 0; i < 10; i++) {
		struct th_child r;
		th_run_child(attempt, NULL, &r);
		CHECKF(r.exited && r.status == 0,
		       "attempt %d: %s %d (SIGALRM %d: a lock left held): %s", i,
		       r.exited ? "exit" : "signal", r.exited ? r.status : r.sig, SIGALRM, r.err);
	}
}

int main(void)
{
	RUN(cancel_in_barrier);
	return th_done();
}
