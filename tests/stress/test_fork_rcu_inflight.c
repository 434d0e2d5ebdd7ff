/* SPDX-License-Identifier: MIT */
/*
 * test_fork_rcu_inflight.c - a fork while another thread frees through RCU: in the
 * child, after its own free_rcu calls and both barriers, no object is counted in
 * flight (docs/rcu.md).  Until 2026-11-29 free_rcu counted the object before it took
 * the locks a fork's handlers hold, so a fork in between left the child one object in
 * flight for good (about 4 forks in 20 of an adversarial program).
 */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sheaf.h>
#include <sheaf_stats.h>

static struct sheaf_cache *cache;
static atomic_int stop;

static void *freer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		for (int i = 0; i < 50; i++) {
			void *o = sheaf_cache_alloc(cache);
			if (!o)
				abort();
			sheaf_cache_free_rcu(cache, o);
		}
		sheaf_cache_rcu_barrier(cache);
	}
	return NULL;
}

static void test_child_inflight(void)
{
	if (SANITIZE_THREAD) {
		/* TSan builds keep liburcu's worker running across fork (src/rcu/rcu_free.c:
		 * TSan kills a child that starts one), so a child's barrier cannot wait for a
		 * grace period there (as in test_fork_modes). */
		printf("# skipped: a TSan child does not wait for grace periods\n");
		return;
	}
	cache = sheaf_cache_create("fork-rcu-inflight", 64, NULL);
	REQUIRE(cache);
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, freer, NULL) == 0);
	usleep(20000);
	int bad = 0, forks = 0;
	for (; forks < 60 && bad < 3; forks++) {
		pid_t p = fork();
		REQUIRE(p >= 0);
		if (p == 0) {
			alarm(20);
			for (int i = 0; i < 100; i++)
				sheaf_cache_free_rcu(cache, sheaf_cache_alloc(cache));
			sheaf_cache_rcu_barrier(cache);
			sheaf_rcu_barrier();
			struct sheaf_stats st = { .size = sizeof(st) };
			if (sheaf_stats_get(cache, &st) != 0)
				_exit(4);
			_exit(st.rcu_inflight_objects || st.rcu_inflight_sheaves ? 3 : 0);
		}
		int ws = 0;
		waitpid(p, &ws, 0);
		if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
			printf("# fork %d: child status %#x (3: objects in flight after the barriers)\n",
			       forks, ws);
			bad++;
		}
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("# %d forks, %d children with objects in flight after the barriers\n", forks, bad);
	CHECK(bad == 0);
	sheaf_cache_rcu_barrier(cache);
	sheaf_cache_destroy(cache);
}

int main(void)
{
	RUN(test_child_inflight);
	return th_done();
}
