/* SPDX-License-Identifier: MIT */
/*
 * Bulk calls larger than a sheaf (issue 18): freeing four sheaves' worth of objects in
 * one call fills the calling CPU's main in runs and hands whole full sheaves to the
 * barn (no object goes to a slab), and allocating them back takes whole sheaves from
 * the barn (no object comes from a slab); a bulk call within main touches neither.
 * Counted from the statistics, pinned to one CPU so that every call sees the same
 * sheaves.
 */
#include "harness.h"
#include "base/base.h" /* sheaf_option_long: the capacity in effect */

#include <pthread.h>
#include <sched.h>
#include <sheaf.h>
#include <stdlib.h>
#include <sheaf_stats.h>

static struct sheaf_stats stats_of(struct sheaf_cache *c)
{
	struct sheaf_stats st = { .size = sizeof(st) };
	REQUIRE(sheaf_stats_get(c, &st) == 0);
	return st;
}

#define DELTA(a, b, ev) ((b).events[SHEAF_STAT_##ev] - (a).events[SHEAF_STAT_##ev])

static void test_whole_sheaves(void)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(0, &s);
	pthread_setaffinity_np(pthread_self(), sizeof(s), &s);

	struct sheaf_cache_args a = { .sheaf_capacity = 64 };
	struct sheaf_cache *c = sheaf_cache_create("bulk-sheaves", 64, &a);
	REQUIRE(c);
	enum {
		N = 4 * 64
	};
	void *v[N];
	/* Warm: the objects come from slabs once. */
	REQUIRE(sheaf_cache_alloc_bulk(c, N, v) == N);
	struct sheaf_stats s0 = stats_of(c);
	sheaf_cache_free_bulk(c, N, v);
	struct sheaf_stats s1 = stats_of(c);
	printf("# free_bulk(%d): fast %llu slow %llu, barn puts %llu, flushed %llu\n", N,
	       (unsigned long long)DELTA(s0, s1, FREE_FASTPATH),
	       (unsigned long long)DELTA(s0, s1, FREE_SLOWPATH),
	       (unsigned long long)DELTA(s0, s1, BARN_PUT),
	       (unsigned long long)DELTA(s0, s1, SHEAF_FLUSH));
	CHECK(DELTA(s0, s1, FREE_FASTPATH) == N);
	CHECK(DELTA(s0, s1, FREE_SLOWPATH) == 0);
	CHECK(DELTA(s0, s1, SHEAF_FLUSH) == 0);
	CHECK(DELTA(s0, s1, BARN_PUT) >=
	      2); /* main and spare hold two sheaves, the barn the rest */

	REQUIRE(sheaf_cache_alloc_bulk(c, N, v) == N);
	struct sheaf_stats s2 = stats_of(c);
	printf("# alloc_bulk(%d): fast %llu slow %llu, barn gets %llu, refilled %llu\n", N,
	       (unsigned long long)DELTA(s1, s2, ALLOC_FASTPATH),
	       (unsigned long long)DELTA(s1, s2, ALLOC_SLOWPATH),
	       (unsigned long long)DELTA(s1, s2, BARN_GET),
	       (unsigned long long)DELTA(s1, s2, SHEAF_REFILL));
	CHECK(DELTA(s1, s2, ALLOC_FASTPATH) == N);
	CHECK(DELTA(s1, s2, ALLOC_SLOWPATH) == 0);
	CHECK(DELTA(s1, s2, SHEAF_REFILL) == 0);
	CHECK(DELTA(s1, s2, BARN_GET) >= 1);
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			if (v[i] == v[j])
				CHECKF(0, "object %p handed out twice", v[i]);

	/* Within main: 32 out and back, no barn, no slab. */
	sheaf_cache_free_bulk(c, 32, v);
	struct sheaf_stats s3 = stats_of(c);
	REQUIRE(sheaf_cache_alloc_bulk(c, 32, v) == 32);
	sheaf_cache_free_bulk(c, 32, v);
	struct sheaf_stats s4 = stats_of(c);
	/* Per-thread mode harvests fast-path counts at the next slow path only. */
	if (!strcmp(sheaf_percpu_mode(), "percpu-rseq"))
		CHECK(DELTA(s3, s4, ALLOC_FASTPATH) == 32 && DELTA(s3, s4, FREE_FASTPATH) == 32);
	CHECK(DELTA(s3, s4, BARN_GET) + DELTA(s3, s4, BARN_PUT) + DELTA(s3, s4, ALLOC_SLOWPATH) +
		      DELTA(s3, s4, FREE_SLOWPATH) ==
	      0);
	sheaf_cache_free_bulk(c, N - 32, v + 32);
	sheaf_cache_destroy(c);
}

/* Bulk calls larger than a sheaf on a cache of the default, adaptive capacity (121 for
 * 64 and 256 bytes): each alloc and each free of 128 took the pcs lock to swap main and
 * spare (SHEAF_SWAP twice per round, no barn).  The adaptive capacity (D2) now steps up
 * for such calls, and main and spare of the old capacity give way once empty, so that
 * the calls stay in main.  For 256 bytes the step is one the exchange rate never takes
 * (past 32 KiB of objects a sheaf: cache/create.c capacity_ladder_init). */
static void larger_than_capacity(size_t size)
{
	if (sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY)) {
		printf("# skipped: SHEAF_SHEAF_CAPACITY fixes the capacity\n");
		return;
	}
	struct sheaf_cache *c = sheaf_cache_create("bulk-grow", size, NULL);
	REQUIRE(c);
	enum {
		B = 128
	};
	void *v[B];
	REQUIRE(stats_of(c).sheaf_capacity < B); /* else the test proves nothing */
	for (int i = 0; i < 4; i++) {
		REQUIRE(sheaf_cache_alloc_bulk(c, B, v) == B);
		sheaf_cache_free_bulk(c, B, v);
	}
	struct sheaf_stats s0 = stats_of(c);
	for (int i = 0; i < 100; i++) {
		REQUIRE(sheaf_cache_alloc_bulk(c, B, v) == B);
		sheaf_cache_free_bulk(c, B, v);
	}
	struct sheaf_stats s1 = stats_of(c);
	printf("# %zu B: capacity %llu (default %llu, %llu steps up); 100 rounds of %d: %llu swaps, %llu barn gets\n",
	       size, (unsigned long long)s1.sheaf_capacity, (unsigned long long)s1.capacity_default,
	       (unsigned long long)s1.capacity_grows, B,
	       (unsigned long long)DELTA(s0, s1, SHEAF_SWAP),
	       (unsigned long long)DELTA(s0, s1, BARN_GET));
	CHECK(s1.sheaf_capacity >= B);
	CHECK(DELTA(s0, s1, SHEAF_SWAP) == 0);
	CHECK(DELTA(s0, s1, BARN_GET) + DELTA(s0, s1, BARN_PUT) + DELTA(s0, s1, ALLOC_SLOWPATH) +
		      DELTA(s0, s1, FREE_SLOWPATH) ==
	      0);
	sheaf_cache_destroy(c);
}

static void test_larger_than_capacity(void)
{
	larger_than_capacity(64);
	larger_than_capacity(256);
}

int main(void)
{
	RUN(test_whole_sheaves);
	RUN(test_larger_than_capacity);
	return th_done();
}
