/* D6 barn trimming (src/barn/barn.c): what sat unused in a barn through its intervals is
 * given back gradually; a barn that a batch drains and refills every interval is left
 * alone, so the batch keeps cycling through sheaves instead of slabs. */
#include "harness.h"

#include <sheaf.h>
#include <sheaf_stats.h>

static void stats(struct sheaf_cache *c, struct sheaf_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	REQUIRE(sheaf_stats_get(c, st) == 0);
}

static void alloc_free(struct sheaf_cache *c, void **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		v[i] = sheaf_cache_alloc(c);
		REQUIRE(v[i]);
		*(size_t *)v[i] = i;
	}
	for (size_t i = 0; i < n; i++) {
		CHECK(*(size_t *)v[i] == i);
		sheaf_cache_free(c, v[i]);
	}
}

/* Batches of 10,000 drain the barn in every interval: nothing may be trimmed, and after
 * the first rounds no object comes from a slab any more. */
static void test_batch_not_trimmed(void)
{
	enum {
		N = 10000,
		ROUNDS = 40
	};
	struct sheaf_cache *c = sheaf_cache_create("trim-batch", 256, NULL);
	REQUIRE(c);
	void **v = calloc(N, sizeof(void *));
	REQUIRE(v);
	struct sheaf_stats a, b;
	for (int r = 0; r < 4; r++)
		alloc_free(c, v, N);
	stats(c, &a);
	for (int r = 0; r < ROUNDS; r++)
		alloc_free(c, v, N);
	stats(c, &b);
	uint64_t refill = b.events[SHEAF_STAT_SHEAF_REFILL] - a.events[SHEAF_STAT_SHEAF_REFILL];
	uint64_t trim = b.events[SHEAF_STAT_BARN_TRIM] - a.events[SHEAF_STAT_BARN_TRIM];
	printf("# batch: capacity %llu, barn_full %llu, %llu objects refilled from slabs of %d, "
	       "%llu sheaves trimmed\n",
	       (unsigned long long)b.sheaf_capacity, (unsigned long long)b.barn_full,
	       (unsigned long long)refill, N * ROUNDS, (unsigned long long)trim);
	CHECK(trim == 0);
	CHECK(refill * 100 < (uint64_t)N * ROUNDS); /* under 1 % through the slabs */
	/* Every batch goes into the barn and back in full sheaves: the objects moved are
	 * counted, at most two sheaves' worth per barn lock (the swaps of two). */
	uint64_t moved = b.barn_objects - a.barn_objects, locks = b.barn_locks - a.barn_locks;
	printf("# batch: %llu objects moved by %llu barn operations\n", (unsigned long long)moved,
	       (unsigned long long)locks);
	CHECK(moved >= (uint64_t)N * ROUNDS);
	CHECK(locks > 0 && moved <= locks * 2 * b.sheaf_capacity);
	free(v);
	sheaf_cache_destroy(c);
}

/* A burst leaves the barn full; afterwards only a few sheaves at its head are used.
 * The rest must go back, gradually. */
static void test_unused_trimmed(void)
{
	enum {
		BURST = 20000
	};
	struct sheaf_cache *c = sheaf_cache_create("trim-idle", 256, NULL);
	REQUIRE(c);
	void **v = calloc(BURST, sizeof(void *));
	REQUIRE(v);
	struct sheaf_stats a, b;
	alloc_free(c, v, BURST);
	stats(c, &a);
	b = a;
	size_t small = 3 * a.sheaf_capacity;
	for (int r = 0; r < 40000 && b.barn_full > 6; r++) {
		alloc_free(c, v, small);
		if (r % 1000 == 0)
			stats(c, &b);
	}
	stats(c, &b);
	printf("# unused: barn_full %llu -> %llu, %llu sheaves trimmed, slab bytes %llu -> %llu\n",
	       (unsigned long long)a.barn_full, (unsigned long long)b.barn_full,
	       (unsigned long long)(b.events[SHEAF_STAT_BARN_TRIM] -
				    a.events[SHEAF_STAT_BARN_TRIM]),
	       (unsigned long long)a.bytes_from_os, (unsigned long long)b.bytes_from_os);
	CHECK(a.barn_full >= 20);
	CHECK(b.barn_full <= 6);
	CHECK(b.events[SHEAF_STAT_BARN_TRIM] > a.events[SHEAF_STAT_BARN_TRIM]);
	CHECK(b.objects_cached < a.objects_cached);
	free(v);
	sheaf_cache_destroy(c);
}

int main(void)
{
	RUN(test_batch_not_trimmed);
	RUN(test_unused_trimmed);
	return th_done();
}
