/* SPDX-License-Identifier: MIT */
/*
 * A munmap that fails gives the memory back all the same (issue 16: every failing
 * system call handled; nothing leaks silently).  With every munmap made to fail
 * (fault injection, docs/testing.md), large blocks above the extent cache's largest
 * (SHEAF_MALLOC_EXTENT_CACHE_ONE) are allocated, written and freed over and over:
 * each free's munmap fails, is reported once and counted, and the block's pages are
 * purged, so the resident set stays flat.  Before, each failed munmap kept the block
 * resident: the malloc fuzz target grew to its 2 GiB RSS limit with munmap faults.
 */
#include "harness.h"
#include "base/base.h"

#include <sheaf.h>
#include <sheaf_malloc.h>
#include <sys/resource.h>

#define BLOCK  (40ul << 20) /* above the extent cache's 32 MiB: unmapped at free */
#define ROUNDS 24

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	REQUIRE(f);
	char line[256];
	long v = -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			v = atol(line + 6);
	fclose(f);
	return v;
}

static void test_large_blocks(void)
{
	/* Warm up: the core, the extent table. */
	void *w = sheaf_malloc(BLOCK);
	REQUIRE(w);
	sheaf_free(w);
	long before = rss_kib();
	unsigned long hits0 = sheaf_fault_hits(SHEAF_FAULT_MUNMAP);
	sheaf_fault_arm(SHEAF_FAULT_MUNMAP, 1, true);
	for (int i = 0; i < ROUNDS; i++) {
		char *p = sheaf_malloc(BLOCK);
		if (!p)
			break; /* address space: the ranges stay mapped (bounded below) */
		memset(p, i + 1, BLOCK);
		sheaf_free(p);
	}
	sheaf_fault_disarm_all();
	long after = rss_kib();
	unsigned long hits = sheaf_fault_hits(SHEAF_FAULT_MUNMAP) - hits0;
	printf("# %d blocks of %lu MiB freed with munmap failing (%lu failures injected): "
	       "RSS %ld -> %ld KiB\n",
	       ROUNDS, BLOCK >> 20, hits, before, after);
	CHECK(hits >= ROUNDS / 2);
	/* Without the purge: ROUNDS x 40 MiB = 960 MiB more.  Allow two blocks.  Not
	 * under TSan: its shadow of a range that stays mapped stays resident (4x). */
	if (!SANITIZE_THREAD)
		CHECKF(after - before < (long)(2 * BLOCK >> 10), "RSS grew by %ld KiB",
		       after - before);
	/* Usable afterwards. */
	char *p = sheaf_malloc(BLOCK);
	CHECK(p != NULL);
	if (p)
		memset(p, 7, BLOCK);
	sheaf_free(p);
}

/* Caches created and destroyed while every munmap fails: a create may fail with
 * ENOMEM (the heap cannot probe for room to grow without unmapping the probe), never
 * crash; what was created works and is destroyed; after the fault, creation works. */
static void test_cache_create_destroy(void)
{
	int made = 0, enomem = 0;
	sheaf_fault_arm(SHEAF_FAULT_MUNMAP, 1, true);
	for (int i = 0; i < 200; i++) {
		errno = 0;
		struct sheaf_cache *c = sheaf_cache_create("unmap-fail", 64, NULL);
		if (!c) {
			CHECKF(errno == ENOMEM, "create failed with errno %d", errno);
			enomem++;
			continue;
		}
		made++;
		void *o = sheaf_cache_alloc(c);
		if (o) {
			memset(o, 1, 64);
			sheaf_cache_free(c, o);
		} else {
			CHECK(errno == ENOMEM);
		}
		sheaf_cache_destroy(c);
	}
	sheaf_fault_disarm_all();
	printf("# 200 cache creations with munmap failing: %d made, %d ENOMEM\n", made, enomem);
	struct sheaf_cache *c = sheaf_cache_create("after", 64, NULL);
	CHECK(c != NULL);
	if (c) {
		void *o = sheaf_cache_alloc(c);
		CHECK(o != NULL);
		sheaf_cache_free(c, o);
		sheaf_cache_destroy(c);
	}
}

int main(void)
{
	/* A bound for the address space the failed unmaps leave mapped. */
	struct rlimit rl = { 8ul << 30, 8ul << 30 };
	if (!SANITIZE_ADDRESS && !SANITIZE_THREAD)
		REQUIRE(setrlimit(RLIMIT_AS, &rl) == 0);
	RUN(test_large_blocks);
	RUN(test_cache_create_destroy);
	return th_done();
}
