/* The page heap's dirty pages (src/page/page.c, "Dirty pages"): every free page carries
 * a flag, set when it is freed and cleared when it is purged, and a free run's head
 * counts its flagged pages.  So heap_returned counts each freed page once per purge
 * that gives it back, however the run it lies in grew by merging with pages already
 * purged, and the dirty total the decay reads is exact.  Until 2026-11-29 a run had one
 * flag for all its pages: a page freed next to purged ones made the whole merged run
 * count again (up to 3.5x the heap, README "Limitations" then).
 *
 * Run with SHEAF_REAP_MS=0 (no reaper frees or purges beside the test) and the default
 * decay of 1 s: nothing is purged by the decay within the few milliseconds the test
 * takes, only by the test's own sheaf_page_purge_all(). */
#include "harness.h"

#include "cache/cache.h" /* sheaf_ensure_init; the page layer below it */

#include <sheaf.h>
#include <sheaf_stats.h>

#define LIVE 64

/* Walk every free run and whole free block: each head's count equals its flagged
 * pages, and their sum is the heap's dirty total.  Returns that sum in bytes. */
static size_t check_dirty_invariant(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t total = 0;
	int bad_heads = 0;
	sheaf_mutex_lock(&h->lock, SHEAF_LOCK_HEAP);
	for (int n = 0; n < SHEAF_MAX_NODES; n++) {
		for (unsigned o = 0; o <= SHEAF_BLOCK_ORDER; o++) {
			struct sheaf_list *head = o < SHEAF_BLOCK_ORDER ? &h->free_area[n][o] :
									  &h->dirty_blocks[n];
			for (struct sheaf_list *pos = head->next; pos != head; pos = pos->next) {
				struct sheaf_slab *d =
					sheaf_container_of(pos, struct sheaf_slab, sl_list);
				size_t pg = (size_t)(d - h->desc);
				unsigned flagged = 0;
				for (size_t i = 0; i < (1ul << o); i++)
					flagged += h->desc[pg + i].pg_dirty;
				if (flagged != d->pg_ndirty)
					bad_heads++;
				total += (size_t)flagged << SHEAF_PAGE_SHIFT;
			}
		}
	}
	size_t dirty = h->dirty_bytes;
	sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
	CHECK(bad_heads == 0);
	CHECK(dirty == total);
	return total;
}

/* Buddies freed one page at a time next to pages already purged: each free gives back
 * its own page, not the run it merges into. */
static void test_merge_counts_once(void)
{
	REQUIRE(sheaf_ensure_init() == 0);
	sheaf_page_purge_all();
	char *r = sheaf_page_alloc(3, 0); /* eight pages, 32 KiB aligned */
	REQUIRE(r);
	memset(r, 0x5a, SHEAF_PAGE_SIZE << 3);
	size_t before = sheaf_heap.returned_bytes;
	for (unsigned i = 0; i < 8; i++) {
		sheaf_page_free(r + i * SHEAF_PAGE_SIZE, 0, 0);
		sheaf_page_purge_all();
		/* One page more each time: the run it merged into was clean. */
		CHECK(sheaf_heap.returned_bytes - before == (i + 1) * SHEAF_PAGE_SIZE);
	}
	CHECK(check_dirty_invariant() == 0);
}

/* Random takes and frees of orders 0..4, purges now and then: the counts stay exact
 * through splits of partly dirty runs and merges, and a purge returns exactly the dirty
 * total it found. */
static void test_random_invariant(void)
{
	REQUIRE(sheaf_ensure_init() == 0);
	char *live[LIVE] = { 0 };
	unsigned order[LIVE] = { 0 };
	unsigned seed = 12345;
	for (int step = 0; step < 4000; step++) {
		int i = (int)(rand_r(&seed) % LIVE);
		if (live[i]) {
			sheaf_page_free(live[i], order[i], 0);
			live[i] = NULL;
		} else {
			order[i] = (unsigned)(rand_r(&seed) % 5);
			live[i] = sheaf_page_alloc(order[i], 0);
			REQUIRE(live[i]);
			live[i][0] = 1; /* touch one page: flags say "may be resident" */
		}
		if (step % 97 == 0)
			check_dirty_invariant();
		if (step % 500 == 499) {
			size_t dirty = check_dirty_invariant();
			size_t before = sheaf_heap.returned_bytes;
			sheaf_page_purge_all();
			CHECK(sheaf_heap.returned_bytes - before == dirty);
			CHECK(check_dirty_invariant() == 0);
		}
	}
	for (int i = 0; i < LIVE; i++)
		if (live[i])
			sheaf_page_free(live[i], order[i], 0);
	check_dirty_invariant();
	sheaf_page_purge_all();
	CHECK(check_dirty_invariant() == 0);
}

/* The public figure: a cache's slabs given back through the decay's purge count once
 * in heap_returned, as in the cache's own bytes_returned. */
static void test_global_stat(void)
{
	struct sheaf_global_stats g0 = { .size = sizeof(g0) }, g1 = { .size = sizeof(g1) };
	REQUIRE(sheaf_global_stats_get(&g0) == 0);
	sheaf_page_purge_all();
	REQUIRE(sheaf_global_stats_get(&g0) == 0);
	struct sheaf_cache_args a = { .flags = SHEAF_NO_SHEAVES };
	struct sheaf_cache *c = sheaf_cache_create("dirty-stat", 512, &a);
	REQUIRE(c);
	enum {
		N = 4096
	};
	static void *v[N];
	for (int i = 0; i < N; i++) {
		v[i] = sheaf_cache_alloc(c);
		REQUIRE(v[i]);
	}
	/* Free every other object first, then the rest, interleaved with purges: slabs
	 * empty one by one and merge with runs purged before. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = pass; i < N; i += 2)
			sheaf_cache_free(c, v[i]);
		sheaf_cache_shrink(c);
		sheaf_page_purge_all();
	}
	struct sheaf_stats st = { .size = sizeof(st) };
	REQUIRE(sheaf_stats_get(c, &st) == 0);
	REQUIRE(sheaf_global_stats_get(&g1) == 0);
	CHECK(st.bytes_returned > 0);
	CHECK(g1.heap_returned - g0.heap_returned == st.bytes_returned);
	printf("# cache returned %llu B, heap_returned grew %llu B\n",
	       (unsigned long long)st.bytes_returned,
	       (unsigned long long)(g1.heap_returned - g0.heap_returned));
	sheaf_cache_destroy(c);
}

/* With SHEAF_PURGE_MS=0 (purge at once), dirt that no purge can reach (a run below
 * SHEAF_PURGE_ORDER) must not make every later page operation walk the free lists: only
 * a free, which may merge it into a run a purge reaches, does.  The page heap's walk
 * counter says so; before 2026-11-29 (evening) each allocation walked again. */
static void test_stuck_dirt_no_walks(void)
{
	REQUIRE(sheaf_ensure_init() == 0);
	struct sheaf_heap *h = &sheaf_heap;
	sheaf_mutex_lock(&h->lock, SHEAF_LOCK_HEAP);
	uint64_t saved_ns = h->purge_ns;
	unsigned saved_order = h->purge_order;
	h->purge_ns = 0;
	h->purge_order = 4;
	sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
	sheaf_page_purge_all();
	char *r = sheaf_page_alloc(1, 0); /* two pages: free one, its buddy stays taken */
	REQUIRE(r);
	r[SHEAF_PAGE_SIZE] = 1;
	sheaf_page_free(r + SHEAF_PAGE_SIZE, 0, 0); /* a dirty order-0 run: out of reach */
	CHECK(h->dirty_bytes >= SHEAF_PAGE_SIZE);
	size_t walks = h->purge_walks;
	char *big[4];
	for (int i = 0; i < 4; i++) {
		big[i] = sheaf_page_alloc(3, 0);
		REQUIRE(big[i]);
	}
	CHECK(h->purge_walks == walks); /* allocations: no walk for unreachable dirt */
	for (int i = 0; i < 4; i++)
		sheaf_page_free(big[i], 3, 0);
	CHECK(h->purge_walks > walks); /* frees may merge: they walk, and purge */
	CHECK(check_dirty_invariant() >= SHEAF_PAGE_SIZE);
	sheaf_page_free(r, 0, 0);
	sheaf_page_purge_all();
	CHECK(check_dirty_invariant() == 0);
	sheaf_mutex_lock(&h->lock, SHEAF_LOCK_HEAP);
	h->purge_ns = saved_ns;
	h->purge_order = saved_order;
	sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
}

/* The heap grows past 2.1 GiB (src/page/page.c cover_grow_locked): whole blocks taken
 * one after another, mapped and never touched (only their page-map slice, one page each,
 * is written), until the covered size passes 3 GiB, which takes steps from 1458 MiB on;
 * the covered size stays a multiple of 2 MiB.  Until 2026-11-29 a step of half of
 * 1458 MiB left the next page-map slice off a page boundary and every allocation past
 * 2187 MiB failed with ENOMEM (review). */
static void test_growth_past_2g(void)
{
	/* 3.3 GiB of address space at most, no memory behind it. */
	enum {
		MAX_BLOCKS = 1700
	};
	static void *blk[MAX_BLOCKS];
	int n = 0, misaligned = 0;
	if (sheaf_heap.cap < (4ul << 30)) {
		printf("# heap cap %zu MiB: growth past 3 GiB not tested\n", sheaf_heap.cap >> 20);
		return;
	}
	while (n < MAX_BLOCKS && sheaf_heap.size <= (3ul << 30)) {
		blk[n] = sheaf_page_alloc(SHEAF_BLOCK_ORDER, 0);
		if (!blk[n])
			break;
		misaligned += (sheaf_heap.size & (SHEAF_BLOCK_SIZE - 1)) != 0;
		n++;
	}
	printf("# %d blocks taken, heap covered %zu MiB\n", n, sheaf_heap.size >> 20);
	CHECK(sheaf_heap.size > (3ul << 30));
	CHECK(misaligned == 0);
	while (n > 0)
		sheaf_page_free(blk[--n], SHEAF_BLOCK_ORDER, 0);
	sheaf_page_purge_all();
}

/* A burst of pages freed in random order, most of it left in runs below purge_order:
 * the bound's purge walks the free lists a bounded number of times, not once a page.
 * Until 2026-11-29 every free past the bound walked every list again (a random-order
 * free of 2 GiB of 256-byte objects took 33 s against glibc's 2.7; adversarial run).
 * 160 MiB of pages, never written: address space only. */
static void test_random_free_walks(void)
{
	enum {
		N = 40960
	};
	static char *pg[N];
	REQUIRE(sheaf_ensure_init() == 0);
	sheaf_page_purge_all();
	for (int i = 0; i < N; i++) {
		pg[i] = sheaf_page_alloc(0, 0);
		REQUIRE(pg[i]);
	}
	uint64_t seed = 7;
	for (int i = N - 1; i > 0; i--) {
		int j = (int)(th_rand(&seed) % (uint64_t)(i + 1));
		char *t = pg[i];
		pg[i] = pg[j];
		pg[j] = t;
	}
	size_t walks = sheaf_heap.purge_walks;
	for (int i = 0; i < N; i++)
		sheaf_page_free(pg[i], 0, 0);
	size_t w = sheaf_heap.purge_walks - walks;
	printf("# %d pages freed in random order: %zu walks of the free lists\n", N, w);
	CHECKF(w < 500, "%zu walks for %d frees", w, N);
	sheaf_page_purge_all();
	CHECK(check_dirty_invariant() == 0);
}

int main(void)
{
	RUN(test_merge_counts_once);
	RUN(test_random_invariant);
	RUN(test_global_stat);
	RUN(test_stuck_dirt_no_walks);
	RUN(test_growth_past_2g);
	RUN(test_random_free_walks);
	return th_done();
}
