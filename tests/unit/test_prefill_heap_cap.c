/* SPDX-License-Identifier: MIT */
/*
 * test_prefill_heap_cap.c - prefilled sheaves at the heap's cap (SHEAF_HEAP_GB=1, in the
 * .env sidecar): with the window full and objects freed into the cache, a prefill or a
 * refill that they can serve succeeds, as alloc_bulk does.  Until 2026-11-30 both failed
 * with ENOMEM there: the sheaf itself needed a metadata slab the full heap could not give
 * (cache/meta.c now maps it on its own), and an oversize sheaf was filled from slabs only,
 * while most of the free objects sat in the cache's barn (cache/prefill.c now flushes the
 * barn to the slabs and tries again).
 */
#include <errno.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_stats.h"

#define OBJ  8192
#define MAXN (1u << 18) /* 2 GiB of objects: more than the 1 GiB window */

static void *objs[MAXN];
static struct sheaf_cache *cap_cache;

static void do_alloc_from(void *p)
{
	sheaf_cache_alloc_from(cap_cache, p);
}
static void do_size(void *p)
{
	(void)sheaf_prefilled_size(p);
}

/* A sheaf of 1,000 objects at the cap: its class (8 KiB) has no slab, so it is mapped on
 * its own, and unmapped at its return.  alloc_from and sheaf_prefilled_size with it
 * afterwards read the unmapped sheaf (SIGSEGV) until 2026-11-30; now reported. */
static void returned_own_mapping(struct sheaf_cache *c, size_t *n)
{
	/* Every other object: no slab is left empty, whose pages would serve the class. */
	size_t base = *n - 2200, m = base;
	for (size_t j = base; j < *n; j++) {
		if ((j - base) % 2)
			sheaf_cache_free(c, objs[j]);
		else
			objs[m++] = objs[j];
	}
	*n = m;
	struct sheaf_prefilled *p = sheaf_cache_prefill(c, 1000);
	CHECKF(p != NULL, "prefill(1000) with 1100 objects free: errno %d", errno);
	if (!p)
		return;
	CHECK(sheaf_prefilled_size(p) >= 1000 && sheaf_cache_alloc_from(c, p) != NULL);
	sheaf_cache_return(c, p);
	cap_cache = c;
	th_expect_report("alloc_from of a returned sheaf mapped on its own", do_alloc_from, p,
			 "wrong sheaf", "heap-cap", p);
	th_expect_report("size of a returned sheaf mapped on its own", do_size, p, "wrong sheaf",
			 "?", p);
}

static void prefill_at_cap(void)
{
	struct sheaf_cache *c = sheaf_cache_create("heap-cap", OBJ, NULL);
	REQUIRE(c);
	struct sheaf_stats st = { .size = sizeof(st) };
	REQUIRE(sheaf_stats_get(c, &st) == 0);
	REQUIRE(st.sheaf_capacity > 0 && st.sheaf_capacity < 20);
	size_t n = 0;
	while (n < MAXN && (objs[n] = sheaf_cache_alloc(c)))
		n++;
	REQUIRE(n < MAXN && errno == ENOMEM); /* the window is full */
	printf("# %zu objects of %d B fill the heap\n", n, OBJ);
	/* 15 objects free in the caller's own sheaves (9 a sheaf), none in the barn: a
	 * prefill of 10 failed with ENOMEM, while alloc_bulk of 10 worked, until 2026-11-30. */
	for (int i = 0; i < 15; i++)
		sheaf_cache_free(c, objs[--n]);
	errno = 0;
	struct sheaf_prefilled *own = sheaf_cache_prefill(c, 10);
	CHECKF(own != NULL, "prefill(10) with 15 objects free in the caller's sheaves: errno %d",
	       errno);
	if (own) {
		CHECK(sheaf_prefilled_size(own) >= 10);
		sheaf_cache_return(c, own);
	}
	for (int i = 0; i < 100; i++)
		sheaf_cache_free(c, objs[--n]);

	errno = 0;
	struct sheaf_prefilled *p = sheaf_cache_prefill(c, 20);
	CHECKF(p != NULL, "prefill(20) with 100 objects free: errno %d", errno);
	if (p) {
		CHECK(sheaf_prefilled_size(p) >= 20);
		CHECK(sheaf_cache_refill(c, &p, 40) == 0 && sheaf_prefilled_size(p) >= 40);
		for (unsigned i = 0; i < 40; i++)
			CHECK(sheaf_cache_alloc_from(c, p) != NULL);
		sheaf_cache_return(c, p);
	}
	/* More than the cache holds free: ENOMEM, and nothing lost. */
	errno = 0;
	CHECK(sheaf_cache_prefill(c, 200) == NULL && errno == ENOMEM);
	void *b[60];
	CHECK(sheaf_cache_alloc_bulk(c, 60, b) == 60);
	sheaf_cache_free_bulk(c, 60, b);
	returned_own_mapping(c, &n);
	/* The 41 taken through alloc_from are not freed here: the cache is not destroyed. */
	sheaf_cache_free_bulk(c, n, objs);
}

int main(void)
{
	RUN(prefill_at_cap);
	return th_done();
}
