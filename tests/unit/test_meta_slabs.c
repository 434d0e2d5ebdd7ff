/* SPDX-License-Identifier: MIT */
/*
 * test_meta_slabs.c - the internal metadata caches (cache/meta.c: sheaves, per-thread
 * tables) take one-page slabs: each of their sizes (64 B .. 4 KiB) fits a page with at
 * most a quarter wasted (cache/create.c meta_order).  With the kernel's order rule they
 * took 32 KiB slabs for the sheaves of 1.5-4 KiB, and a small program held 128 KiB of
 * metadata slabs for a handful of sheaves.  Checked by the caches' layout, and by the
 * metadata a program with sheaves of 4 KiB holds after its first allocations.
 *
 * Sheaves of more than 505 objects, up to SHEAF_MAX_SHEAF_CAPACITY, come from metadata
 * slabs too (classes of 8, 16 and 32 KiB): until 2026-11-30 each had a mapping of its own,
 * which a prefilled sheaf's return found by a walk of the cache's lent sheaves (quadratic
 * for many held) and which alloc_from read after its return (SIGSEGV).
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

/* Is @p an object of a metadata cache (the page map's view)? */
static bool in_meta_slab(const void *p)
{
	uintptr_t k = sheaf_page_key(p);
	return k && sheaf_key_owner(k)->cache->is_meta;
}

static void test_big_sheaves(void)
{
	struct sheaf_cache *c = sheaf_cache_create("meta-big", 64, NULL);
	REQUIRE(c);
	const unsigned sizes[] = { 506, 1000, 2000, 3000, SHEAF_MAX_SHEAF_CAPACITY };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct sheaf_prefilled *p = sheaf_cache_prefill(c, sizes[i]);
		REQUIRE(p);
		CHECKF(in_meta_slab(p),
		       "a prefilled sheaf of %u objects at %p is in no metadata slab", sizes[i],
		       (void *)p);
		CHECK(sheaf_prefilled_size(p) >= sizes[i]);
		sheaf_cache_return(c, p);
	}
	/* Regular sheaves of a large capacity too. */
	struct sheaf_cache_args a = { .sheaf_capacity = SHEAF_MAX_SHEAF_CAPACITY };
	struct sheaf_cache *d = sheaf_cache_create("meta-big-cap", 16, &a);
	REQUIRE(d);
	struct sheaf_prefilled *p = sheaf_cache_prefill(d, 10);
	REQUIRE(p);
	CHECK(in_meta_slab(p));
	sheaf_cache_return(d, p);
	sheaf_cache_destroy(d);
	sheaf_cache_destroy(c);
}

int main(void)
{
	RUN(test_meta_order);
	RUN(test_big_sheaves);
	return th_done();
}
