/* SPDX-License-Identifier: MIT */
/*
 * test_fork_compat_barrier.c - fork() while another thread runs the RCU barrier of a
 * SHEAF_KERNEL_COMPAT cache (sheaf_cache_rcu_barrier, as sheaf_cache_destroy calls it).
 *
 * Such a cache's barrier is the global one of Linux 7.0 (liburcu's rcu_barrier()).
 * Until 2026-11-29 it called rcu_barrier() holding the cache's barrier mutex: a fork's
 * prepare handler pauses liburcu's call_rcu worker first (holding liburcu's call_rcu
 * mutex, which rcu_barrier() takes) and then waits for every barrier mutex, so the two
 * threads waited for each other for good (within a few hundred forks).
 *
 * In a child process (alarm: a hang kills it): a thread frees through RCU and calls
 * the barrier in a loop while the main thread forks for two seconds.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "sheaf.h"

static struct sheaf_cache *cache;
static atomic_int stop;
static atomic_long barriers;

static void *barrier_loop(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		for (int i = 0; i < 64; i++)
			sheaf_cache_free_rcu(cache, sheaf_cache_alloc(cache));
		sheaf_cache_rcu_barrier(cache);
		atomic_fetch_add(&barriers, 1);
	}
	return NULL;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void forking_child(void *arg)
{
	(void)arg;
	alarm(30);
	struct sheaf_cache_args a = { .flags = SHEAF_KERNEL_COMPAT };
	cache = sheaf_cache_create("fork-compat", 64, &a);
	if (!cache)
		_exit(2);
	pthread_t t;
	if (pthread_create(&t, NULL, barrier_loop, NULL))
		_exit(3);
	int forks = 0;
	for (double end = now_s() + 2; now_s() < end || atomic_load(&barriers) < 10; forks++) {
		pid_t p = fork();
		if (p == 0)
			_exit(0);
		int st;
		if (p < 0 || waitpid(p, &st, 0) != p || st != 0)
			_exit(4);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	sheaf_cache_destroy(cache);
	fprintf(stderr, "%d forks, %ld barriers\n", forks, atomic_load(&barriers));
	_exit(0);
}

static void test_fork_during_compat_barrier(void)
{
	struct th_child r;
	th_run_child(forking_child, NULL, &r);
	CHECKF(r.exited && r.status == 0, "%s %d (SIGALRM %d: fork and barrier hung): %s",
	       r.exited ? "exit" : "signal", r.exited ? r.status : r.sig, SIGALRM, r.err);
	printf("# %s", r.err);
}

int main(void)
{
	RUN(test_fork_during_compat_barrier);
	return th_done();
}
