/* SPDX-License-Identifier: MIT */
/*
 * test_admin_race.c - administration calls beside a thread that allocates and frees
 * through RCU: sheaf_cache_shrink, sheaf_cache_rcu_barrier and sheaf_global_stats_get
 * in another thread, for a second.  Every object comes back (the statistics balance
 * after a final barrier and shrink).  Under TSan (the tsan preset) it is the race
 * check: the shrink's drain tested a pcs's rcu sheaf outside the lock the barrier takes
 * it under, and the global statistics read the heap's block count while a page
 * allocation wrote it, both reported by TSan until 2026-11-29 (adversarial review).
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <sheaf.h>
#include <sheaf_stats.h>

static struct sheaf_cache *cache;
static atomic_int stop;

static void *worker(void *arg)
{
	(void)arg;
	void *held[64] = { 0 };
	unsigned i = 0;
	while (!atomic_load(&stop)) {
		unsigned k = i++ % 64;
		if (held[k])
			sheaf_cache_free_rcu(cache, held[k]);
		held[k] = sheaf_cache_alloc(cache);
		if (!held[k])
			abort();
		*(unsigned *)held[k] = i;
	}
	for (unsigned k = 0; k < 64; k++)
		if (held[k])
			sheaf_cache_free(cache, held[k]);
	return NULL;
}

static void *admin(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		sheaf_cache_shrink(cache);
		sheaf_cache_rcu_barrier(cache);
		struct sheaf_global_stats g = { .size = sizeof(g) };
		if (sheaf_global_stats_get(&g) != 0)
			abort();
	}
	return NULL;
}

static void test_admin_beside_rcu(void)
{
	cache = sheaf_cache_create("admin-race", 200, NULL);
	REQUIRE(cache);
	pthread_t w, a;
	REQUIRE(pthread_create(&w, NULL, worker, NULL) == 0);
	REQUIRE(pthread_create(&a, NULL, admin, NULL) == 0);
	struct timespec ts = { 1, 0 };
	nanosleep(&ts, NULL);
	atomic_store(&stop, 1);
	pthread_join(w, NULL);
	pthread_join(a, NULL);
	sheaf_cache_rcu_barrier(cache);
	sheaf_cache_shrink(cache);
	struct sheaf_stats st = { .size = sizeof(st) };
	REQUIRE(sheaf_stats_get(cache, &st) == 0);
	CHECKF(st.objects_inuse == 0 && st.slabs == 0, "in use %llu, slabs %llu",
	       (unsigned long long)st.objects_inuse, (unsigned long long)st.slabs);
	sheaf_cache_destroy(cache);
}

int main(void)
{
	RUN(test_admin_beside_rcu);
	return th_done();
}
