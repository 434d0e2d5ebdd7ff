/* SPDX-License-Identifier: MIT */
/*
 * fork_rcu_orphan.c - run by test_preload_fork_rcu.sh under the preload library in
 * per-thread mode: another thread holds objects in a partly filled rcu_free sheaf
 * (sheaf_cache_free_rcu) when the main thread forks.  The child must come back from
 * fork() and allocate.  Until 2026-11-29 it hung inside fork(): liburcu's
 * call_rcu_after_fork_child (called by Sheaf's child handler) holds liburcu's call_rcu
 * mutex and allocates; that allocation's slow path drained the dead thread's orphaned
 * sheaves, whose rcu sheaf went to call_rcu, which takes the same mutex.
 * Exit 0 when every child came back; 1 when one did not within 5 s (it is killed).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sheaf.h>

static struct sheaf_cache *cache;
static atomic_int ready, stop;

static void *holder(void *arg)
{
	(void)arg;
	for (int i = 0; i < 5; i++) {
		void *o = sheaf_cache_alloc(cache);
		if (!o)
			exit(3);
		sheaf_cache_free_rcu(cache, o); /* a partly filled rcu sheaf of this thread */
	}
	atomic_store(&ready, 1);
	while (!atomic_load(&stop))
		usleep(1000); /* alive across the forks */
	return NULL;
}

static int one_fork(void)
{
	pid_t p = fork();
	if (p < 0)
		return 2;
	if (p == 0) {
		char *m = malloc(100); /* the child allocates (a slow path: orphans drained) */
		if (!m)
			_exit(4);
		memset(m, 1, 100);
		free(m);
		void *o = sheaf_cache_alloc(cache);
		if (!o)
			_exit(5);
		sheaf_cache_free(cache, o);
		_exit(0);
	}
	int ws = 0;
	for (int i = 0; i < 500; i++) {
		if (waitpid(p, &ws, WNOHANG) == p)
			return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 6;
		usleep(10000);
	}
	fprintf(stderr, "child %d still inside fork() after 5 s\n", (int)p);
	kill(p, SIGKILL);
	waitpid(p, &ws, 0);
	return 1;
}

int main(void)
{
	cache = sheaf_cache_create("fork-rcu-orphan", 64, NULL);
	if (!cache)
		return 3;
	/* The flavour's call_rcu worker exists: the fork handlers pause it. */
	sheaf_cache_free_rcu(cache, sheaf_cache_alloc(cache));
	sheaf_cache_rcu_barrier(cache);
	pthread_t t;
	if (pthread_create(&t, NULL, holder, NULL))
		return 3;
	while (!atomic_load(&ready))
		usleep(100);
	int rc = 0;
	for (int i = 0; i < 5 && !rc; i++) {
		/* The forking thread's own sheaves empty: the child's first allocation
		 * takes the slow path, which drains the orphans. */
		sheaf_thread_flush();
		rc = one_fork();
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("mode %s: %s\n", sheaf_percpu_mode(),
	       rc ? "a child hung or failed" : "5 children came back");
	return rc;
}
