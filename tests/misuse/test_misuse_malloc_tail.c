/* SPDX-License-Identifier: MIT */
/*
 * test_misuse_malloc_tail.c - free() of a pointer into a slab's tail.  A size class
 * whose slot size does not divide its slab leaves a tail of fewer than slot bytes at the
 * slab's end; its first byte is a multiple of the slot size from the slab start but no
 * object.  free() of it must be reported ("interior pointer", one line, abort), never
 * taken for an object: accepted, the tail would be handed out by a later malloc as a
 * whole object that runs past the slab's end into the next one.
 */
#include <stdint.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_malloc.h"

#include "malloc/sizeclass.h"
#include "slab/slab.h"

static void do_free(void *p)
{
	sheaf_free(p);
}
static void do_free_sized(void *p)
{
	struct sheaf_cache *c = sheaf_cache_of((char *)p - 1);
	sheaf_free_sized(p, c ? c->object_size : 1);
}
static void do_realloc(void *p)
{
	sheaf_realloc(p, 1);
}

static void test_tail(void)
{
	int tried = 0;
	for (unsigned i = 0; i < SHEAF_SC_COUNT; i++) {
		char *p = sheaf_malloc(sheaf_sc_size[i]);
		REQUIRE(p);
		struct sheaf_cache *c = sheaf_cache_of(p);
		if (!c && i >= SHEAF_SC_BIG_FIRST) {
			/* Per-thread mode: the sizes above 32 KiB are extents (malloc.c). */
			sheaf_free(p);
			continue;
		}
		REQUIRE(c);
		size_t slab = (size_t)c->slab_mask + 1;
		size_t end = (size_t)c->objs_per_slab * c->slot_size;
		if (end < slab && c->free_checks) {
			char *tail = (char *)((uintptr_t)p & ~(uintptr_t)c->slab_mask) + end;
			const char *cn = sheaf_cache_name(c);
			th_expect_report("free(slab tail)", do_free, tail, "interior pointer", cn,
					 tail);
			if (tried < 2) {
				th_expect_report("free_sized(slab tail)", do_free_sized, tail,
						 "interior pointer", cn, tail);
				th_expect_report("realloc(slab tail)", do_realloc, tail,
						 "interior pointer", cn, tail);
			}
			tried++;
		}
		sheaf_free(p);
	}
	printf("# %d classes with a tail\n", tried);
	CHECK(tried > 0);
}

/* The same for a cache of the core API (the reciprocal test, slab/freecheck.h). */
static struct sheaf_cache *plain;
static void do_cache_free(void *p)
{
	sheaf_cache_free(plain, p);
}

static void test_cache_tail(void)
{
	plain = sheaf_cache_create("tail-48", 48, NULL);
	REQUIRE(plain);
	char *p = sheaf_cache_alloc(plain);
	REQUIRE(p);
	size_t slab = (size_t)plain->slab_mask + 1;
	size_t end = (size_t)plain->objs_per_slab * plain->slot_size;
	REQUIRE(end < slab);
	char *tail = (char *)((uintptr_t)p & ~(uintptr_t)plain->slab_mask) + end;
	th_expect_report("sheaf_cache_free(slab tail)", do_cache_free, tail, "interior pointer",
			 "tail-48", tail);
	sheaf_cache_free(plain, p);
	sheaf_cache_destroy(plain);
}

int main(void)
{
	RUN(test_tail);
	RUN(test_cache_tail);
	return th_done();
}
