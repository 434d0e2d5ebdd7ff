/* SPDX-License-Identifier: MIT */
/*
 * test_cache_churn.c - caches created and destroyed in a loop while others stay
 * alive: the list of destroyed descriptors that stale handles are checked against
 * (cache.c, SHEAF_DEAD_KEPT) stays bounded and consistent.  Found by the fuzz corpus
 * (tests/stress/test_fuzz_replay.c in the debug preset): with two caches alive at a
 * time, a destroy found the list full, which the debug build asserted against and the
 * others overran.  Every create and allocation must still work after many rounds,
 * and a stale handle of a recently destroyed cache must still be recognised.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_stats.h"

/* The process's address space in KiB (VmSize), 0 if unknown. */
static long vm_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmSize:", 7))
			kib = strtol(line + 7, NULL, 10);
	fclose(f);
	return kib;
}

/* Colours (docs/percpu.md): a new cache's descriptor starts at another line of its page
 * than the caches made just before it, so that the lines every operation reads of many
 * caches do not all fall in one level-1 set.  Eight new caches: at least four offsets,
 * each a whole line. */
static void t_colours(void)
{
	struct sheaf_cache *c[8];
	uintptr_t seen[8];
	unsigned distinct = 0;
	for (int i = 0; i < 8; i++) {
		c[i] = sheaf_cache_create("colour", 64, NULL);
		REQUIRE(c[i] != NULL);
		uintptr_t off = (uintptr_t)c[i] & 4095;
		CHECKF(off % 64 == 0, "descriptor at %#lx, not on a line",
		       (unsigned long)(uintptr_t)c[i]);
		bool dup = false;
		for (unsigned k = 0; k < distinct; k++)
			dup |= seen[k] == off;
		if (!dup)
			seen[distinct++] = off;
		void *o = sheaf_cache_alloc(c[i]);
		CHECK(o != NULL);
		if (o)
			sheaf_cache_free(c[i], o);
	}
	CHECKF(distinct >= 4, "8 new caches at only %u offsets of their pages", distinct);
	for (int i = 0; i < 8; i++)
		sheaf_cache_destroy(c[i]);
}

static void t_churn(void)
{
	struct sheaf_cache *keep[4];
	for (int i = 0; i < 4; i++) {
		keep[i] = sheaf_cache_create("churn-keep", 32 + 16 * (size_t)i, NULL);
		REQUIRE(keep[i] != NULL);
	}
	long vm0 = vm_kib();
	for (int round = 0; round < 300; round++) {
		/* Three alive at once, destroyed together: more destroys than creates
		 * that reuse a descriptor. */
		struct sheaf_cache *c[3];
		for (int i = 0; i < 3; i++) {
			c[i] = sheaf_cache_create("churn", 64, NULL);
			REQUIRE(c[i] != NULL);
			void *o = sheaf_cache_alloc(c[i]);
			CHECK(o != NULL);
			if (o)
				sheaf_cache_free(c[i], o);
		}
		for (int i = 0; i < 3; i++)
			sheaf_cache_destroy(c[i]);
		void *k = sheaf_cache_alloc(keep[round % 4]);
		CHECK(k != NULL);
		if (k)
			sheaf_cache_free(keep[round % 4], k);
	}
	/* 900 descriptors and node mappings made and given back: a mapping freed from the
	 * wrong address (a coloured structure is not at the start of its page) would stay,
	 * a page each (3.5 MiB here); what may grow is the SHEAF_DEAD_KEPT descriptors kept. */
	long grown = vm_kib() - vm0;
	CHECKF(vm0 == 0 || grown < 1024, "address space grew by %ld KiB over 900 creates", grown);
	for (int i = 0; i < 4; i++)
		sheaf_cache_destroy(keep[i]);
}

/* The statistics printers walk every cache while another thread creates and destroys
 * them: each cache met is live (it was linked before its magic was set, and the walk
 * reported a bad handle and aborted, 8 runs in 9 of an adversarial program of 20 s). */
static atomic_int walk_stop;
static void *creator(void *a)
{
	(void)a;
	while (!atomic_load(&walk_stop)) {
		struct sheaf_cache *c = sheaf_cache_create("walk-race", 64, NULL);
		if (!c)
			break;
		sheaf_cache_destroy(c);
	}
	return NULL;
}

static void t_walk_during_create(void)
{
	FILE *f = fopen("/dev/null", "w");
	REQUIRE(f);
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, creator, NULL) == 0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long walks = 0;
	do {
		if (walks & 1)
			sheaf_stats_print_all_json(f);
		else
			sheaf_stats_print_all(f);
		walks++;
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 2000000000L);
	atomic_store(&walk_stop, 1);
	pthread_join(t, NULL);
	fclose(f);
	printf("# %ld walks beside creates and destroys\n", walks);
	CHECK(walks > 0);
}

int main(void)
{
	RUN(t_colours);
	RUN(t_churn);
	RUN(t_walk_during_create);
	return th_done();
}
