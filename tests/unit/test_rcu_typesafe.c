/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_typesafe.c - SHEAF_TYPESAFE_BY_RCU (issue 5; the kernel's
 * SLAB_TYPESAFE_BY_RCU contract): objects may be reused at once, but the slab memory
 * goes back to the OS only after a grace period.
 *
 * A reader inside rcu_read_lock() holds a pointer into a slab; the program frees every
 * object of that slab and shrinks the cache, so the slab is discarded.  While the reader
 * is inside, the page stays resident (mincore) and still holds the object's contents
 * (read by the reader, not by crashing); once the reader has left and a grace period
 * has passed, the next shrink purges it (and a shrink made before the grace period ended
 * purges it as the pages come back).  A control cache without the flag shows that
 * the same shrink purges the page at once, so the test can tell the two apart.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include <urcu/urcu-memb.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_stats.h"

#define OBJ   256
#define MAGIC 0x7e5afeb7c0ffee00ull

struct obj {
	uint64_t canary;
	uint64_t words[OBJ / 8 - 1];
};

static int resident(const void *p)
{
	unsigned char v = 0;
	uintptr_t pg = (uintptr_t)p & ~(uintptr_t)4095;
	if (mincore((void *)pg, 4096, &v) != 0)
		return -1;
	return v & 1;
}

static uint64_t free_slabs(struct sheaf_cache *c)
{
	struct sheaf_stats st = { .size = sizeof(st) };
	sheaf_stats_get(c, &st);
	return st.events[SHEAF_STAT_FREE_SLAB];
}

/* Fill one cache with objects, free them all, shrink: returns one object pointer that
 * was in a discarded slab (its canary set before the free). */
enum {
	N = 200
};
static struct obj *objs[N];

static void fill(struct sheaf_cache *c)
{
	for (int i = 0; i < N; i++) {
		objs[i] = sheaf_cache_alloc(c);
		REQUIRE(objs[i]);
		objs[i]->canary = MAGIC ^ (uint64_t)i;
		for (int k = 0; k < OBJ / 8 - 1; k++)
			objs[i]->words[k] = (uint64_t)i * 1000 + (uint64_t)k;
	}
}

static void free_all_and_shrink(struct sheaf_cache *c)
{
	for (int i = 0; i < N; i++)
		sheaf_cache_free(c, objs[i]);
	sheaf_cache_shrink(c);
}

/* ---- The reader ------------------------------------------------------------------ */

static _Atomic(struct obj *) shared;
static atomic_int inside, check_now, checked, leave;
static atomic_int reader_ok;

/* noinline: named by the TSan suppression (tests/stress/rcu.tsan.supp). */
__attribute__((noinline)) static int typesafe_reader_check(const struct obj *o, int idx)
{
	int ok = *(volatile const uint64_t *)&o->canary == (MAGIC ^ (uint64_t)idx);
	for (int k = 0; k < OBJ / 8 - 1; k++)
		ok &= *(volatile const uint64_t *)&o->words[k] ==
		      (uint64_t)idx * 1000 + (uint64_t)k;
	return ok;
}

static void *reader_main(void *arg)
{
	int idx = (int)(intptr_t)arg;
	urcu_memb_register_thread();
	urcu_memb_read_lock();
	struct obj *o = atomic_load(&shared);
	atomic_store(&inside, 1);
	while (!atomic_load(&check_now))
		usleep(500);
	atomic_store(&reader_ok, typesafe_reader_check(o, idx));
	atomic_store(&checked, 1);
	while (!atomic_load(&leave))
		usleep(500);
	urcu_memb_read_unlock();
	urcu_memb_unregister_thread();
	return NULL;
}

static void test_control_purges_at_once(void)
{
	struct sheaf_cache *c = sheaf_cache_create("rcu-ts-control", OBJ, NULL);
	REQUIRE(c);
	fill(c);
	struct obj *p = objs[N / 2];
	CHECK(resident(p) == 1);
	uint64_t f0 = free_slabs(c);
	free_all_and_shrink(c);
	CHECK(free_slabs(c) > f0);
	CHECKF(resident(p) == 0, "control: page still resident after shrink");
	sheaf_cache_destroy(c);
}

static void test_typesafe_keeps_memory_under_reader(void)
{
	struct sheaf_cache_args a = { .flags = SHEAF_TYPESAFE_BY_RCU };
	struct sheaf_cache *c = sheaf_cache_create("rcu-ts", OBJ, &a);
	REQUIRE(c);
	fill(c);
	int idx = N / 2;
	struct obj *p = objs[idx];
	atomic_store(&shared, p);
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, reader_main, (void *)(intptr_t)idx) == 0);
	while (!atomic_load(&inside))
		usleep(200);

	uint64_t f0 = free_slabs(c);
	free_all_and_shrink(c);
	CHECKF(free_slabs(c) > f0, "no slab was discarded");
	CHECK(sheaf_cache_of(p) == NULL); /* the slab is gone from Sheaf's page map */
	usleep(50 * 1000);                /* a grace period could have ended by now, if allowed */
	sheaf_cache_shrink(c);            /* and a purge would have taken the page */
	CHECKF(resident(p) == 1, "page of a discarded TYPESAFE_BY_RCU slab purged under a reader");
	atomic_store(&check_now, 1);
	while (!atomic_load(&checked))
		usleep(200);
	CHECKF(atomic_load(&reader_ok), "reader saw the object's memory change");

	atomic_store(&leave, 1);
	pthread_join(t, NULL);
	/* The deferred page frees ran after the grace period; purge and look again. */
	sheaf_rcu_barrier();
	sheaf_cache_shrink(c);
	CHECKF(resident(p) == 0, "page still resident after the grace period and a shrink");
	sheaf_cache_destroy(c);
}

/* sheaf_cache_shrink gives free pages back to the OS; a TYPESAFE_BY_RCU cache's reach the
 * page heap after the grace period, when shrink has returned: they are purged then, not
 * left for the decay, which never comes to an idle program without the reaper (the
 * sidecar sets SHEAF_REAP_MS=0).  Until 2026-11-29 the page stayed resident. */
static void test_typesafe_shrink_purges_after_grace_period(void)
{
	struct sheaf_cache_args a = { .flags = SHEAF_TYPESAFE_BY_RCU };
	struct sheaf_cache *c = sheaf_cache_create("rcu-ts-shrink", OBJ, &a);
	REQUIRE(c);
	fill(c);
	struct obj *p = objs[N / 2];
	CHECK(resident(p) == 1);
	uint64_t f0 = free_slabs(c);
	free_all_and_shrink(c);
	CHECKF(free_slabs(c) > f0, "no slab was discarded");
	sheaf_rcu_barrier(); /* the deferred page frees have run */
	CHECKF(resident(p) == 0,
	       "page of a shrunk TYPESAFE_BY_RCU cache resident after the grace period");
	sheaf_cache_destroy(c);
}

/* Objects of a TYPESAFE_BY_RCU cache may be reused at once: free + alloc can hand back
 * the same object while a reader is inside, and its contents survive on the free list
 * (the free-list link lives outside the object). */
static void test_typesafe_reuse_at_once(void)
{
	struct sheaf_cache_args a = { .flags = SHEAF_TYPESAFE_BY_RCU, .sheaf_capacity = 8 };
	struct sheaf_cache *c = sheaf_cache_create("rcu-ts-reuse", OBJ, &a);
	REQUIRE(c);
	struct obj *o = sheaf_cache_alloc(c);
	REQUIRE(o);
	o->canary = MAGIC;
	sheaf_cache_free(c, o);
	CHECK(o->canary == MAGIC); /* freed, not poisoned nor linked through */
	struct obj *o2 = sheaf_cache_alloc(c);
	CHECK(o2 == o); /* LIFO sheaf: reused at once, no grace period */
	sheaf_cache_free(c, o2);
	sheaf_cache_destroy(c);
}

int main(void)
{
	RUN(test_control_purges_at_once);
	RUN(test_typesafe_keeps_memory_under_reader);
	RUN(test_typesafe_reuse_at_once);
	RUN(test_typesafe_shrink_purges_after_grace_period);
	return th_done();
}
