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
#include "harness.h"
#include "sheaf.h"

static void t_churn(void)
{
	struct sheaf_cache *keep[4];
	for (int i = 0; i < 4; i++) {
		keep[i] = sheaf_cache_create("churn-keep", 32 + 16 * (size_t)i, NULL);
		REQUIRE(keep[i] != NULL);
	}
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
	for (int i = 0; i < 4; i++)
		sheaf_cache_destroy(keep[i]);
}

int main(void)
{
	RUN(t_churn);
	return th_done();
}
