/* SPDX-License-Identifier: MIT */
/*
 * The extent cache's address table (src/malloc/extent.c) is mapped when the first
 * extent that may be merged (256 KiB or more, XC_MERGE_MIN) is cached.  When that mapping
 * fails (fault injection, docs/testing.md), the freed extent is still cached, only never
 * merged: nothing is lost, and the next request of its size reuses it.  Its own process,
 * so that the table does not exist yet.
 */
#include "harness.h"
#include "base/base.h"
#include "malloc/malloc.h"

#include <sheaf.h>
#include <sheaf_malloc.h>

#define BLOCK (512u << 10) /* a size step of its own: the extent is exactly this long */

static void t_table_map_fails(void)
{
	struct sheaf_malloc_counters c0, c1;
	size_t cnt, bytes;
	char *p = sheaf_malloc(BLOCK);
	REQUIRE(p != NULL);
	REQUIRE(sheaf_usable_size(p) == BLOCK);
	p[0] = 1;
	p[BLOCK - 1] = 2;
	sheaf_malloc_counters_get(&c0);
	unsigned long hits0 = sheaf_fault_hits(SHEAF_FAULT_MMAP);
	sheaf_fault_arm(SHEAF_FAULT_MMAP, 1, false);
	sheaf_free(p); /* the table's first mapping fails here */
	sheaf_fault_disarm_all();
	sheaf_malloc_counters_get(&c1);
	CHECKF(sheaf_fault_hits(SHEAF_FAULT_MMAP) - hits0 == 1, "%lu injected",
	       sheaf_fault_hits(SHEAF_FAULT_MMAP) - hits0);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECKF(cnt == 1 && bytes == BLOCK, "cached %zu extents, %zu bytes", cnt, bytes);
	CHECK(c1.extent_unmaps == c0.extent_unmaps);
	/* Reused, whole. */
	char *q = sheaf_malloc(BLOCK);
	sheaf_malloc_counters_get(&c0);
	CHECK(q == p && c0.extent_reuses - c1.extent_reuses == 1);
	CHECK(sheaf_usable_size(q) == BLOCK);
	sheaf_free(q); /* the table is mapped now: cached with its keys */
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECKF(cnt == 1 && bytes == BLOCK, "cached %zu extents, %zu bytes", cnt, bytes);
	sheaf_malloc_extent_cache_drain();
}

int main(void)
{
	RUN(t_table_map_fails);
	return th_done();
}
