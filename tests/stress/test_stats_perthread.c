/* SPDX-License-Identifier: MIT */
/*
 * Per-thread mode's event counters (docs/stats.md): a reset zeroes the caller's own
 * fast-path operations.
 *
 * Before the fix (2026-11-29, adversarial run): sheaf_stats_reset zeroed what each
 * thread had harvested but not the caller's fast-path operations since its last slow
 * path, so ALLOC_FASTPATH read 19 right after a reset that followed 20 allocations.
 */
#include "harness.h"

#include <sheaf.h>
#include <sheaf_stats.h>
#include <string.h>

static struct sheaf_cache *cache;

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

int main(void)
{
	REQUIRE(sheaf_option_set("PERCPU", "thread") == 0);
	cache = sheaf_cache_create("stats-perthread", 64, NULL);
	REQUIRE(cache);
	REQUIRE(!strcmp(sheaf_percpu_mode(), "per-thread"));
	RUN(test_reset_own_fastpath);
	sheaf_cache_destroy(cache);
	return th_done();
}
