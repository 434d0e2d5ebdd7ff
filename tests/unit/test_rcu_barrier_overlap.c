/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_barrier_overlap.c - sheaf_rcu_barrier() while another thread's per-cache
 * barrier holds objects it took back (docs/rcu.md): the global barrier returns only
 * once those objects are back.  Until 2026-11-29 it found nothing left to hand to
 * liburcu, returned after its two rcu_barrier() calls, and the objects were still
 * waiting in the other barrier's hands (not poisoned, counted in flight).
 *
 * The per-cache barrier is held up deterministically: the first of the two objects
 * it returns holds an active debug object, so the tracker's check of that free calls
 * the type's fix-up, which waits 300 ms, before the second object is returned.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_debug.h"
#include "sheaf_stats.h"

#if SANITIZE_ADDRESS
#include <sanitizer/asan_interface.h>
#endif

#define SIZE 256

static struct sheaf_cache *cache;
static atomic_int in_fixup;

static const struct sheaf_debug_obj_descr slow_descr;

/* Runs in the per-cache barrier's thread, while it returns its objects. */
static bool slow_fixup_free(void *addr, enum sheaf_debug_state s)
{
	(void)s;
	atomic_store(&in_fixup, 1);
	usleep(300 * 1000);
	sheaf_debug_object_deactivate(addr, &slow_descr);
	sheaf_debug_object_free(addr, &slow_descr);
	return true;
}

static const struct sheaf_debug_obj_descr slow_descr = {
	.name = "slow",
	.fixup_free = slow_fixup_free,
};

static void *cache_barrier_main(void *arg)
{
	(void)arg;
	sheaf_cache_rcu_barrier(cache);
	return NULL;
}

/* Back in the allocator: a poison cache has filled it with 0x6b after its grace
 * period (ASan: the object is poisoned instead). */
static bool is_back(const unsigned char *x)
{
#if SANITIZE_ADDRESS
	return __asan_address_is_poisoned(x);
#else
	for (int i = 0; i < SIZE - 1; i++)
		if (x[i] != 0x6b)
			return false;
	return true;
#endif
}

static void test_global_waits_for_cache_barrier(void)
{
	struct sheaf_cache_args a = { .flags = SHEAF_DEBUG_POISON };
	cache = sheaf_cache_create("rcu-overlap", SIZE, &a);
	REQUIRE(cache != NULL);
	unsigned char *slow = sheaf_cache_alloc(cache);
	unsigned char *x = sheaf_cache_alloc(cache);
	REQUIRE(slow && x);
	memset(x, 0x5a, SIZE);
	sheaf_debug_object_init(slow, &slow_descr);
	REQUIRE(sheaf_debug_object_activate(slow, &slow_descr) == 0);
	/* A poison cache has no sheaves: both wait in the fallback batch, in order. */
	sheaf_cache_free_rcu(cache, slow);
	sheaf_cache_free_rcu(cache, x);

	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, cache_barrier_main, NULL) == 0);
	while (!atomic_load(&in_fixup))
		usleep(1000);
	/* The per-cache barrier has taken both objects and returns them now. */
	sheaf_rcu_barrier();
	struct sheaf_stats st = { .size = sizeof(st) };
	REQUIRE(sheaf_stats_get(cache, &st) == 0);
	CHECKF(st.rcu_inflight_objects == 0, "%llu objects in flight after the global barrier",
	       (unsigned long long)st.rcu_inflight_objects);
	CHECKF(is_back(x), "the object freed before the global barrier is not back");
	pthread_join(t, NULL);
	CHECK(is_back(x));
	sheaf_cache_destroy(cache);
}

int main(void)
{
	RUN(test_global_waits_for_cache_barrier);
	return th_done();
}
