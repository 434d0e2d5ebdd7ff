/* SPDX-License-Identifier: MIT */
/*
 * objects_inuse never counts a slab that is being discarded.  One thread fills several
 * slabs of a SHEAF_NO_SHEAVES cache, frees everything and shrinks, over and over; the
 * main thread reads the statistics meanwhile.  A reading taken wholly while the
 * churning thread shrinks (it holds nothing then, the round's phase word is odd before
 * and after the reading) must show no object in use.  Before the fix, a slab taken off
 * the partial list for discarding still counted in the node's slab total until it was
 * unmapped, so a reader saw it as a full slab: objects_inuse a slab per victim too
 * high (the
 * fuzz target's "objects in transit after barrier and shrink", whose reader raced the
 * reaper's shrink).
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sheaf.h>
#include <sheaf_stats.h>
#include <stdlib.h>

#define ROUNDS 3000

static struct sheaf_cache *cache;
static atomic_int done;
static atomic_uint phase; /* 2r: round r allocates and frees; 2r + 1: it shrinks */
static unsigned live;     /* objects the churning thread holds at most: 6 slabs and one */

static void *churn(void *arg)
{
	void **v = arg;
	for (unsigned r = 0; r < ROUNDS; r++) {
		atomic_store(&phase, 2 * r);
		for (unsigned i = 0; i < live; i++)
			v[i] = sheaf_cache_alloc(cache);
		for (unsigned i = 0; i < live; i++)
			sheaf_cache_free(cache, v[i]);
		atomic_store(&phase, 2 * r + 1);
		sheaf_cache_shrink(cache); /* every slab is empty: all are victims */
	}
	atomic_store(&done, 1);
	return NULL;
}

static void stats(struct sheaf_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	REQUIRE(sheaf_stats_get(cache, st) == 0);
}

static void test_inuse_during_discard(void)
{
	struct sheaf_cache_args a = { .flags = SHEAF_NO_SHEAVES };
	cache = sheaf_cache_create("stats-inuse-race", 200, &a);
	REQUIRE(cache);
	/* Objects per slab, from one slab's worth. */
	void *one = sheaf_cache_alloc(cache);
	REQUIRE(one);
	struct sheaf_stats st;
	stats(&st);
	REQUIRE(st.slabs == 1 && st.objects_total > 1);
	sheaf_cache_free(cache, one);
	sheaf_cache_shrink(cache);
	live = (unsigned)st.objects_total * 6 + 1;
	void **v = calloc(live, sizeof(*v));
	REQUIRE(v);

	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, churn, v) == 0);
	unsigned long reads = 0, in_shrink = 0, over = 0;
	uint64_t worst = 0;
	while (!atomic_load(&done)) {
		unsigned p1 = atomic_load(&phase);
		stats(&st);
		unsigned p2 = atomic_load(&phase);
		reads++;
		if (p1 != p2 || !(p1 & 1))
			continue;
		in_shrink++;
		if (st.objects_inuse > 0)
			over++;
		if (st.objects_inuse > worst)
			worst = st.objects_inuse;
	}
	pthread_join(t, NULL);
	printf("# %lu reads, %lu of them wholly during a shrink with nothing held: objects_inuse "
	       "at most %llu, %lu reads above 0\n",
	       reads, in_shrink, (unsigned long long)worst, over);
	CHECK(in_shrink > 0);
	CHECKF(over == 0, "objects_inuse read %llu during a shrink of empty slabs",
	       (unsigned long long)worst);
	stats(&st);
	CHECK(st.objects_inuse == 0 && st.slabs == 0);
	free(v);
	sheaf_cache_destroy(cache);
}

int main(void)
{
	RUN(test_inuse_during_discard);
	return th_done();
}
