/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_extents.c - the extent cache serves a working set of large blocks (the
 * benchmark's "large" shape, issue 17): a set freed as a whole and built again is not
 * faulted in again; a request that no cached extent holds alone is gathered from
 * several with mremap (their pages not faulted again, calloc's cleared, alignment
 * kept); the kernel mappings that gathering makes stay bounded; and an idle set goes
 * back to the OS after the delay.  Every test
 * bounds its memory: at most about 100 MiB resident.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <time.h>

#include "harness.h"
#include "malloc/malloc.h"

static long minflt(void)
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return r.ru_minflt;
}

/* The process's mappings: lines of /proc/self/maps. */
static int nmaps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int c, n = 0;
	if (!f)
		return -1;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* 16 blocks of 4-8 MiB (about 100 MiB, all touched), freed as a whole, then built again
 * in another order: all of it comes from the cache.  Before, the cache's bound followed
 * the live bytes down while the set was freed, to 64 MiB, so a third of the set was
 * unmapped, then mapped and faulted in again. */
static void t_rebuild(void)
{
	enum {
		N = 16
	};
	size_t sz[N], pages = 0;
	char *v[N];
	uint64_t rng = 17;
	sheaf_malloc_extent_cache_drain();
	for (int i = 0; i < N; i++) {
		sz[i] = (4u << 20) + (size_t)(th_rand(&rng) % (4u << 20));
		v[i] = sheaf_malloc(sz[i]);
		REQUIRE(v[i] != NULL);
		/* The whole mapping, its size step's rounding too: every page resident. */
		memset(v[i], 1, sheaf_usable_size(v[i]));
	}
	for (int i = 0; i < N; i++)
		sheaf_free(v[i]);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct sheaf_malloc_counters c0, c1;
	sheaf_malloc_counters_get(&c0);
	long f0 = minflt();
	for (int i = 0; i < N; i++) {
		size_t n = sz[(i * 5 + 3) % N]; /* a permutation of the sizes */
		v[i] = sheaf_malloc(n);
		REQUIRE(v[i] != NULL);
		memset(v[i], 2, n);
		pages += n / 4096;
	}
	long f = minflt() - f0;
	sheaf_malloc_counters_get(&c1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("# rebuilt %zu pages in %.3f s: %ld faults; %llu mapped, %llu reused, %llu gathered\n",
	       pages, s, f, (unsigned long long)(c1.extent_maps - c0.extent_maps),
	       (unsigned long long)(c1.extent_reuses - c0.extent_reuses),
	       (unsigned long long)(c1.extent_gathers - c0.extent_gathers));
	if (s > 0.8) {
		/* Extents idle for the delay (1 s) go back, as they should: a machine too
		 * slow to rebuild the set within it proves nothing either way. */
		printf("# skipped: the rebuild took %.3f s, near the 1 s delay\n", s);
		goto out;
	}
	CHECK(c1.extent_maps == c0.extent_maps);
	CHECK(c1.extent_unmaps == c0.extent_unmaps);
#if !SANITIZE_ADDRESS && !SANITIZE_THREAD /* their shadow memory faults too */
	CHECKF(f < (long)pages / 20, "%ld faults for %zu pages", f, pages);
#endif
out:
	for (int i = 0; i < N; i++)
		sheaf_free(v[i]);
	sheaf_malloc_extent_cache_drain();
}

/* Three cached 1 MiB extents, dirty and kept apart by live ones (no merging): a 3 MiB
 * request takes all three, moved into one new mapping, instead of mapping 3 MiB afresh
 * or growing one of them and faulting the other 2 MiB in. */
static void cache_three_apart(char *v[6])
{
	sheaf_malloc_extent_cache_drain();
	for (int i = 0; i < 6; i++) {
		v[i] = sheaf_malloc(1u << 20);
		REQUIRE(v[i] != NULL);
		memset(v[i], 0x5a, 1u << 20);
	}
	for (int i = 0; i < 6; i += 2)
		sheaf_free(v[i]);
	size_t cnt, bytes;
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECKF(cnt == 3 && bytes == (3u << 20), "%zu cached, %zu bytes", cnt, bytes);
}

static void t_gather(void)
{
	char *v[6];
	struct sheaf_malloc_counters c0, c1;
	/* calloc: the moved pages are cleared, none faulted. */
	cache_three_apart(v);
	sheaf_malloc_counters_get(&c0);
	long f0 = minflt();
	unsigned char *p = sheaf_calloc(1, 3u << 20);
	long f = minflt() - f0;
	sheaf_malloc_counters_get(&c1);
	REQUIRE(p != NULL);
	printf("# 3 MiB gathered from three cached extents: %ld faults\n", f);
	CHECK(c1.extent_gathers - c0.extent_gathers == 1 && c1.extent_moves - c0.extent_moves == 3);
	CHECK(c1.extent_maps == c0.extent_maps && c1.extent_unmaps == c0.extent_unmaps);
	CHECK(sheaf_usable_size(p) == 3u << 20);
	size_t nonzero = 0;
	for (size_t i = 0; i < 3u << 20; i++)
		nonzero += p[i] != 0;
	CHECKF(nonzero == 0, "%zu bytes not cleared", nonzero);
#if !SANITIZE_ADDRESS && !SANITIZE_THREAD
	CHECKF(f < 64, "%ld faults for 768 pages moved", f);
#endif
	memset(p, 3, 3u << 20);
	sheaf_free(p);
	for (int i = 1; i < 6; i += 2)
		sheaf_free(v[i]);
	/* Aligned beyond a page: the new mapping is, wherever the parts were. */
	cache_three_apart(v);
	sheaf_malloc_counters_get(&c0);
	char *a = sheaf_aligned_alloc(2u << 20, 3u << 20);
	sheaf_malloc_counters_get(&c1);
	REQUIRE(a != NULL);
	CHECK(((uintptr_t)a & ((2u << 20) - 1)) == 0);
	CHECK(c1.extent_gathers - c0.extent_gathers == 1 && c1.extent_maps == c0.extent_maps);
	memset(a, 4, 3u << 20);
	/* realloc of a gathered extent (several kernel mappings): it grows by a copy where
	 * mremap cannot grow it, contents kept. */
	char *r = sheaf_realloc(a, 5u << 20);
	REQUIRE(r != NULL);
	CHECK(r[0] == 4 && r[(3u << 20) - 1] == 4);
	sheaf_free(r);
	for (int i = 1; i < 6; i += 2)
		sheaf_free(v[i]);
	sheaf_malloc_extent_cache_drain();
}

/* Free the @slots blocks replace_blocks() left in @s and empty the extent cache. */
static void free_blocks(char **s, unsigned int slots)
{
	for (unsigned int i = 0; i < slots; i++) {
		sheaf_free(s[i]);
		s[i] = NULL;
	}
	sheaf_malloc_extent_cache_drain();
}

/* @iters replacements of a random one of @slots blocks (@s, all NULL at the start) by a
 * block of @lo + [0, @span) bytes written at both ends: mappings, not memory, are what
 * the callers count.  Returns how many mappings the process has more than at the start,
 * and in *@worst the most seen at every 2,000th replacement. */
static int replace_blocks(char **s, unsigned int slots, int iters, uint64_t seed, size_t lo,
			  size_t span, int *worst)
{
	uint64_t rng = seed;
	int m0 = nmaps();
	REQUIRE(m0 > 0);
	for (int i = 0; i < iters; i++) {
		uint64_t x = th_rand(&rng);
		size_t n = lo + (size_t)((x >> 16) % span);
		char *b = sheaf_malloc(n);
		REQUIRE(b != NULL);
		b[0] = b[n - 1] = 1;
		unsigned int k = (unsigned int)(x % slots);
		sheaf_free(s[k]);
		s[k] = b;
		if (i % 2000 == 1999) {
			int d = nmaps() - m0;
			*worst = d > *worst ? d : *worst;
		}
	}
	return nmaps() - m0;
}

/* Gathering moves extents into mappings of their own, and moving part of a split one
 * cuts the kernel's mapping in two; the extents' mappings are bounded (XC_VMAS_MAX in
 * extent.c), so that a long run of replacements leaves the process's mapping count
 * flat.  Without the bound it rose by 4,700 over these 20,000 replacements, for ever,
 * towards vm.max_map_count (and the run took 11 s of system time instead of 0.3 s).
 * Blocks are touched at both ends only: mappings, not memory, are what is counted. */
static void t_mappings_bounded(void)
{
	enum {
		SLOTS = 8,
		ITERS = 20000
	};
	static char *s[SLOTS];
	sheaf_malloc_extent_cache_drain();
	int worst = 0;
	(void)replace_blocks(s, SLOTS, ITERS, 7, 1u << 20, 7u << 20, &worst);
	struct sheaf_malloc_counters c;
	sheaf_malloc_counters_get(&c);
	printf("# mappings: at most %d more over %d replacements (%llu gathers so far)\n", worst,
	       ITERS, (unsigned long long)c.extent_gathers);
	CHECKF(worst <= 1500, "%d more mappings", worst);
	free_blocks(s, SLOTS);
}

/* Many live blocks of random sizes just above the classes (64-256 KiB): the cache's
 * extents are split for smaller requests, and until 2026-11-29 a request that none held
 * alone was gathered from pieces of 64 KiB and more, each mremap making a mapping of its
 * own: 300 live blocks left 8,400 mappings after 20,000 replacements, each of which took
 * 30 us (tcmalloc: 0.06 us).  Pieces of a gather are now 1 MiB or more
 * (XC_GATHER_PIECE_MIN, extent.c): the mappings stay flat.  Touched at both ends only:
 * 75 MiB of address space, little memory. */
static void t_mappings_small_blocks(void)
{
	enum {
		SLOTS = 300,
		ITERS = 20000
	};
	static char *s[SLOTS];
	sheaf_malloc_extent_cache_drain();
	int worst = 0;
	int d = replace_blocks(s, SLOTS, ITERS, 11, (64u << 10) + 1, 192u << 10, &worst);
	printf("# mappings: %d more after %d replacements of 64-256 KiB blocks\n", d, ITERS);
	CHECKF(d <= 200, "%d more mappings", d);
	free_blocks(s, SLOTS);
}

/* The cache keeps a working set for reuse, not for ever: freed and left alone (no
 * further malloc call), it goes back to the OS after the delay, by the reaper thread's
 * ageing (1 s idle, checked every SHEAF_REAP_MS = 250 ms). */
static void t_idle_returns(void)
{
	enum {
		N = 12
	};
	char *v[N];
	/* The reaper starts with the core, which a program of large blocks only never
	 * initialises (docs/malloc.md, Limits): a small block does. */
	sheaf_free(sheaf_malloc(100));
	sheaf_malloc_extent_cache_drain();
	size_t before = th_rss();
	for (int i = 0; i < N; i++) {
		v[i] = sheaf_malloc((4u << 20) + (size_t)i * (256u << 10));
		REQUIRE(v[i] != NULL);
		memset(v[i], 1, sheaf_usable_size(v[i]));
	}
	size_t peak = th_rss();
	for (int i = 0; i < N; i++)
		sheaf_free(v[i]);
	size_t cnt, bytes;
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECKF(bytes >= (48u << 20), "%zu bytes cached", bytes); /* kept for reuse */
	/* Up to 4 s (a loaded machine): the reaper takes the extents out of the cache,
	 * then unmaps them outside its lock. */
	size_t after = peak;
	for (int waited = 0; waited < 40 && (bytes || after >= before + (peak - before) / 4);
	     waited++) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		sheaf_malloc_extent_cache_stat(&cnt, &bytes);
		after = th_rss();
	}
	printf("# rss before %zu KiB, peak %zu KiB, idle %zu KiB; %zu bytes cached\n", before >> 10,
	       peak >> 10, after >> 10, bytes);
	CHECK(cnt == 0 && bytes == 0);
#if !SANITIZE_THREAD /* TSan's shadow of the freed pages stays resident */
	CHECK(after < before + (peak - before) / 4);
#endif
}

/* The malloc front end starts the reaper from an allocation once Sheaf's heap holds
 * 16 MiB, before any free: never from a free, which glibc makes while holding a lock
 * that pthread_create takes (malloc/malloc.h sheaf_malloc_reaper_start).  First in
 * main, before anything else can have started it. */
static void t_reaper_from_alloc(void)
{
	enum {
		N = 320000
	}; /* 64-byte blocks: 20 MiB of slabs */
	void **v = calloc(N, sizeof(void *));
	REQUIRE(v != NULL);
	CHECK(th_threads_named("sheaf-reaper") == 0);
	for (int i = 0; i < N; i++) {
		v[i] = sheaf_malloc(64);
		REQUIRE(v[i] != NULL);
	}
	int n = th_threads_named("sheaf-reaper");
	printf("# %d reaper thread(s) after %d allocations and no free\n", n, N);
	CHECK(n == 1);
	for (int i = 0; i < N; i++)
		sheaf_free(v[i]);
	free(v);
}

/* realloc to a smaller size never moves or grows an extent, and a resize keeps the count
 * of live extent bytes (the extent cache's bound) true.  Until 2026-11-29 a shrink of an
 * extent mapped at its exact length (under an address-space limit, or split from a
 * cached one) was taken for a growth to the size step, and could move the block, grow
 * it or fail with ENOMEM; and a resize left the count at the old length, so that the
 * free after it made the count drift (up, after a shrink) or wrap (after a growth), and
 * the cache's bound went to its maximum of 512 MiB (adversarial run). */
static void t_realloc_resize(void)
{
	size_t n0, live0, n1, live1;
	sheaf_malloc_extent_live_stat(&n0, &live0);
	size_t before = malloc_extent_live_bytes();
	char *p = sheaf_malloc(8u << 20);
	REQUIRE(p != NULL);
	memset(p, 7, 1u << 20);
	char *q = sheaf_realloc(p, 1u << 20);
	CHECK(q == p && sheaf_usable_size(q) >= (1u << 20) && sheaf_usable_size(q) < (8u << 20));
	CHECK(q[0] == 7 && q[(1u << 20) - 1] == 7);
	sheaf_malloc_extent_live_stat(&n1, &live1);
	CHECKF(malloc_extent_live_bytes() - before == live1 - live0,
	       "live bytes counted %zu, registered %zu", malloc_extent_live_bytes() - before,
	       live1 - live0);
	sheaf_free(q);
	CHECKF(malloc_extent_live_bytes() == before, "live bytes %zu after the free, %zu before",
	       malloc_extent_live_bytes(), before);
	/* An extent of exactly its pages (300,000 B: 74 pages, below its size step of 80),
	 * shrunk by a little: it stays where it is, at the same usable size, never more. */
	struct rlimit old, lim;
	REQUIRE(getrlimit(RLIMIT_AS, &old) == 0);
	lim = old;
	lim.rlim_cur = (rlim_t)64 << 30; /* exact-length extents; far above what runs here */
	if (old.rlim_cur == RLIM_INFINITY && setrlimit(RLIMIT_AS, &lim) == 0) {
		p = sheaf_malloc(300000);
		REQUIRE(p != NULL);
		size_t u = sheaf_usable_size(p);
		q = sheaf_realloc(p, 290000);
		CHECKF(q == p && sheaf_usable_size(q) <= u, "shrink: %p -> %p, usable %zu -> %zu",
		       (void *)p, (void *)q, u, sheaf_usable_size(q));
		sheaf_free(q ? q : p);
		REQUIRE(setrlimit(RLIMIT_AS, &old) == 0);
	}
}

/* The process's size in bytes (/proc/self/statm), 0 if unknown. */
static unsigned long long vm_bytes(void)
{
	unsigned long long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%llu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	return pages * 4096;
}

/* May this process set RLIMIT_AS for a test and read its size?  Says why not. */
static bool limit_testable(void)
{
#if SANITIZE_ADDRESS || SANITIZE_THREAD
	printf("# skipped: RLIMIT_AS under a sanitizer\n");
	return false;
#endif
	struct rlimit old;
	REQUIRE(getrlimit(RLIMIT_AS, &old) == 0);
	if (old.rlim_cur != RLIM_INFINITY || vm_bytes() == 0) {
		printf("# skipped: RLIMIT_AS already set, or no /proc/self/statm\n");
		return false;
	}
	return true;
}

/* Free one 8 MiB block under RLIMIT_AS at the process's size plus @room and report
 * whether the extent cache kept it (no unmap), after the limit's 10 ms reading. */
static bool kept_under_room(unsigned long long room)
{
	struct sheaf_malloc_counters c0, c1;
	struct timespec ms11 = { 0, 11 * 1000 * 1000 };
	char *p = sheaf_malloc(8u << 20);
	REQUIRE(p != NULL);
	memset(p, 3, 8u << 20);
	struct rlimit lim = { (rlim_t)(vm_bytes() + room), RLIM_INFINITY };
	REQUIRE(setrlimit(RLIMIT_AS, &lim) == 0);
	nanosleep(&ms11, NULL);
	sheaf_malloc_counters_get(&c0);
	sheaf_free(p);
	sheaf_malloc_counters_get(&c1);
	lim.rlim_cur = RLIM_INFINITY;
	REQUIRE(setrlimit(RLIMIT_AS, &lim) == 0);
	nanosleep(&ms11, NULL);
	sheaf_malloc_extent_cache_drain();
	return c1.extent_unmaps == c0.extent_unmaps;
}

/* Under an address-space limit that leaves ample room (4 GiB) a freed extent is
 * cached, as without a limit; under one that leaves little (16 MiB: a quarter is 4
 * MiB) it goes back at once.  Until 2026-11-29 any finite RLIMIT_AS or RLIMIT_DATA
 * turned the cache off: a working set of large blocks under a generous `ulimit -v`
 * was unmapped and faulted in again at every free (malloc-large: 7.8 M faults). */
static void t_cache_under_limit(void)
{
	if (!limit_testable())
		return;
	CHECKF(kept_under_room(4ull << 30), "an 8 MiB extent unmapped with 4 GiB of room");
	CHECKF(!kept_under_room(16ull << 20), "an 8 MiB extent kept with 16 MiB of room");
}

static _Atomic int freed_fully;

/* A thread with a cancel pending frees a large block: free is no cancellation point. */
static void *cancelled_free(void *p)
{
	pthread_cancel(pthread_self()); /* deferred: acted on at the next point */
	sheaf_free(p);
	atomic_store(&freed_fully, 1);
	pthread_testcancel();
	return NULL;
}

/* Under an address-space limit a freed extent reads the process's size from /proc
 * (at most every 10 ms) with open, read and close, which are cancellation points: until
 * 2026-11-29 a thread with a cancel pending died inside that free, the block's address
 * space neither cached nor unmapped, for good. */
static void t_free_under_limit_not_cancelled(void)
{
	if (!limit_testable())
		return;
	struct timespec ms11 = { 0, 11 * 1000 * 1000 };
	char *p = sheaf_malloc(1u << 20);
	REQUIRE(p != NULL);
	struct rlimit lim = { (rlim_t)(vm_bytes() + (4ull << 30)), RLIM_INFINITY };
	REQUIRE(setrlimit(RLIMIT_AS, &lim) == 0);
	nanosleep(&ms11, NULL); /* the next free reads /proc again */
	pthread_t t;
	void *r = NULL;
	REQUIRE(pthread_create(&t, NULL, cancelled_free, p) == 0);
	REQUIRE(pthread_join(t, &r) == 0);
	lim.rlim_cur = RLIM_INFINITY;
	REQUIRE(setrlimit(RLIMIT_AS, &lim) == 0);
	CHECK(r == PTHREAD_CANCELED);
	CHECKF(atomic_load(&freed_fully), "the thread was cancelled inside free()");
	sheaf_malloc_extent_cache_drain();
}

int main(void)
{
	RUN(t_reaper_from_alloc);
	RUN(t_realloc_resize);
	RUN(t_cache_under_limit);
	RUN(t_free_under_limit_not_cancelled);
	RUN(t_rebuild);
	RUN(t_gather);
	RUN(t_mappings_bounded);
	RUN(t_mappings_small_blocks);
	RUN(t_idle_returns);
	return th_done();
}
