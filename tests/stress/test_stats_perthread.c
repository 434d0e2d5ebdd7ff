/* SPDX-License-Identifier: MIT */
/*
 * Per-thread mode's event counters (docs/stats.md): a reset zeroes the caller's own
 * fast-path operations, and a reader never sees a counter go back while threads come
 * and go.
 *
 * Before the fixes (2026-11-29, adversarial run): sheaf_stats_reset zeroed what each
 * thread had harvested but not the caller's fast-path operations since its last slow
 * path, so ALLOC_FASTPATH read 19 right after a reset that followed 20 allocations;
 * and an exiting thread's pcs left the list before its counts moved to the cache's
 * atomic counters, so a reader between the two lost them: ALLOC_FASTPATH went from
 * 145,800 to 145,500 and back, thousands of times a run.
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sheaf.h>
#include <sheaf_stats.h>
#include <stdlib.h>
#include <string.h>

static struct sheaf_cache *cache;
static atomic_int done;

static void stats(struct sheaf_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	REQUIRE(sheaf_stats_get(cache, st) == 0);
}

static void test_reset_own_fastpath(void)
{
	void *v[20];
	v[0] = sheaf_cache_alloc(cache); /* the slow path: a sheaf is refilled */
	for (int i = 1; i < 20; i++)
		v[i] = sheaf_cache_alloc(cache); /* fast paths, not harvested yet */
	sheaf_stats_reset(cache);
	struct sheaf_stats st;
	stats(&st);
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		CHECKF(st.events[i] == 0, "%s is %llu right after a reset", sheaf_stat_name(i),
		       (unsigned long long)st.events[i]);
	for (int i = 0; i < 20; i++)
		sheaf_cache_free(cache, v[i]);
	stats(&st);
	CHECK(st.events[SHEAF_STAT_FREE_FASTPATH] + st.events[SHEAF_STAT_FREE_SLOWPATH] == 20);
	CHECK(st.events[SHEAF_STAT_ALLOC_FASTPATH] + st.events[SHEAF_STAT_ALLOC_SLOWPATH] == 0);
}

/* A short-lived thread: a sheaf's worth of fast-path operations, then exit. */
static void *brief(void *arg)
{
	(void)arg;
	void *v[300];
	for (int i = 0; i < 300; i++)
		v[i] = sheaf_cache_alloc(cache);
	for (int i = 0; i < 300; i++)
		sheaf_cache_free(cache, v[i]);
	return NULL;
}

static void *spawner(void *arg)
{
	(void)arg;
	for (int k = 0; k < 1500; k++) {
		pthread_t t[2];
		for (int i = 0; i < 2; i++) /* not REQUIRE: the harness counts in main only */
			if (pthread_create(&t[i], NULL, brief, NULL) != 0)
				abort();
		for (int i = 0; i < 2; i++)
			pthread_join(t[i], NULL);
	}
	atomic_store(&done, 1);
	return NULL;
}

static void test_never_backwards_at_exit(void)
{
	sheaf_stats_reset(cache); /* nothing is held: the counts start level */
	pthread_t s;
	REQUIRE(pthread_create(&s, NULL, spawner, NULL) == 0);
	struct sheaf_stats prev, st;
	memset(&prev, 0, sizeof(prev));
	unsigned long reads = 0, back = 0;
	while (!atomic_load(&done)) {
		stats(&st);
		reads++;
		for (int i = 0; i < SHEAF_STAT_NR; i++) {
			if (st.events[i] >= prev.events[i])
				continue;
			if (back++ < 5)
				printf("# %s went back: %llu -> %llu\n", sheaf_stat_name(i),
				       (unsigned long long)prev.events[i],
				       (unsigned long long)st.events[i]);
		}
		prev = st;
	}
	pthread_join(s, NULL);
	printf("# %lu reads while 3,000 threads came and went, %lu counters went back\n", reads,
	       back);
	CHECK(reads > 0);
	CHECK(back == 0);
	/* Every object is back: allocations = frees, once the cache is shrunk. */
	sheaf_cache_shrink(cache);
	stats(&st);
	uint64_t a = st.events[SHEAF_STAT_ALLOC_FASTPATH] + st.events[SHEAF_STAT_ALLOC_SLOWPATH];
	uint64_t f = st.events[SHEAF_STAT_FREE_FASTPATH] + st.events[SHEAF_STAT_FREE_SLOWPATH];
	CHECKF(a == f, "allocated %llu, freed %llu", (unsigned long long)a, (unsigned long long)f);
}

int main(void)
{
	REQUIRE(sheaf_option_set("PERCPU", "thread") == 0);
	cache = sheaf_cache_create("stats-perthread", 64, NULL);
	REQUIRE(cache);
	REQUIRE(!strcmp(sheaf_percpu_mode(), "per-thread"));
	RUN(test_reset_own_fastpath);
	RUN(test_never_backwards_at_exit);
	sheaf_cache_destroy(cache);
	return th_done();
}
