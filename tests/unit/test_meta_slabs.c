/* SPDX-License-Identifier: MIT */
/*
 * test_meta_slabs.c - the internal metadata caches (cache/meta.c: sheaves, per-thread
 * tables) take one-page slabs: each of their sizes (64 B .. 4 KiB) fits a page with at
 * most a quarter wasted (cache/create.c meta_order).  With the kernel's order rule they
 * took 32 KiB slabs for the sheaves of 1.5-4 KiB, and a small program held 128 KiB of
 * metadata slabs for a handful of sheaves.  Checked by the caches' layout, and by the
 * metadata a program with sheaves of 4 KiB holds after its first allocations.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "cache/cache.h"
#include "sheaf.h"

/* The smallest order whose slab holds one @slot with at most a quarter wasted. */
static unsigned expected_order(size_t slot)
{
	unsigned o = 0;
	while ((4096u << o) / slot == 0 || ((4096u << o) % slot) * 4 > (4096u << o))
		o++;
	return o;
}

static void test_meta_order(void)
{
	/* Any cache initialises the core, which creates the metadata caches. */
	struct sheaf_cache_args a = { .sheaf_capacity = 500 }; /* a sheaf of about 4 KiB */
	struct sheaf_cache *c = sheaf_cache_create("meta-probe", 64, &a);
	REQUIRE(c);
	int metas = 0;
	bool all_pages = true;
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next) {
		struct sheaf_cache *m = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		if (!m->is_meta)
			continue;
		metas++;
		/* One page for every size unless a debug layout made the slot larger. */
		CHECKF(m->order == expected_order(m->slot_size), "%s: slab order %u, slot %zu B",
		       m->name, (unsigned)m->order, (size_t)m->slot_size);
		all_pages &= m->order == 0;
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	CHECK(metas >= 10);
	size_t before = sheaf_meta_bytes();
	void *p = sheaf_cache_alloc(c); /* this CPU's sheaves: main and spare, 4 KiB each */
	REQUIRE(p);
	sheaf_cache_free(c, p);
	size_t grew = sheaf_meta_bytes() - before;
	printf("# metadata grew by %zu KiB for the first sheaves of 4 KiB\n", grew >> 10);
	if (all_pages)
		CHECKF(grew <= 16u << 10, "metadata grew by %zu KiB", grew >> 10);
	sheaf_cache_destroy(c);
}

int main(void)
{
	RUN(test_meta_order);
	return th_done();
}
