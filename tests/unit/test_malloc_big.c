/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_big.c - the size classes above 32 KiB (src/malloc/sizeclass.h: 40, 48, 56
 * and 64 KiB) and where their sizes stay extents (src/malloc/malloc.c big_classes_ok):
 * in per-thread mode, where address space is limited, for calloc, and when the heap
 * window is full (sidecar .env: SHEAF_HEAP_GB=1, a window of 1 GiB, which 40 KiB
 * objects in 64 KiB slabs fill after 16,384 blocks).  Found by an adversarial review of
 * the classes (2026-11-29): each check fails without its part of malloc.c.
 */
#include <sys/resource.h>

#include "harness.h"
#include "malloc/malloc.h"

static bool per_cpu_mode(void)
{
	return sheaf_reg.mode == SHEAF_MODE_PERCPU;
}

/* A block of 32-64 KiB: a class object in per-CPU mode, an extent in per-thread mode;
 * the same usable size either way (the class ladder is the extents' size steps). */
static void t_class_or_extent(void)
{
	sheaf_free(sheaf_malloc(16)); /* the core started: the mode is known */
	static const size_t sizes[] = { 32769, 40000, 48000, 56000, 65536 };
	static const size_t usable[] = { 40960, 40960, 49152, 57344, 65536 };
	for (unsigned i = 0; i < 5; i++) {
		char *p = sheaf_malloc(sizes[i]);
		REQUIRE(p != NULL);
		p[0] = p[sizes[i] - 1] = 1;
		struct sheaf_cache *c = sheaf_malloc_cache_of(p);
		if (per_cpu_mode())
			CHECKF(c != NULL && sheaf_malloc_class_of(c) >= (int)SHEAF_SC_BIG_FIRST,
			       "%zu B: not a class object", sizes[i]);
		else
			CHECKF(c == NULL, "%zu B: not an extent in per-thread mode", sizes[i]);
		CHECK(sheaf_usable_size(p) == usable[i]);
		sheaf_free(p);
	}
}

/* Under a limit of address space, set after the core started and before the first
 * block of 32-64 KiB: extents, whose length is the request's pages (a 64 KiB slab for a
 * 33 KiB block gave such a program half the memory glibc gives it): 36 KiB for
 * 33,000 B, not the class's 40 KiB. */
static void limited_child(void *arg)
{
	(void)arg;
	sheaf_free(sheaf_malloc(16));
	/* The address space in use (terabytes under ASan and TSan, whose shadow it
	 * counts) and 4 GiB more: far above what the test uses, but a limit. */
	size_t vm = th_vm_size();
	struct rlimit r;
	if (!vm || getrlimit(RLIMIT_AS, &r) != 0)
		_exit(3);
	r.rlim_cur = (rlim_t)vm + ((rlim_t)4 << 30);
	if (r.rlim_max != RLIM_INFINITY && r.rlim_cur > r.rlim_max)
		r.rlim_cur = r.rlim_max;
	if (setrlimit(RLIMIT_AS, &r) != 0)
		_exit(3);
	char *p = sheaf_malloc(33000);
	if (!p)
		_exit(4);
	_exit(sheaf_malloc_cache_of(p) == NULL && sheaf_usable_size(p) == 36864 ? 0 : 5);
}

static void t_address_space_limited(void)
{
	struct th_child r;
	th_run_child(limited_child, NULL, &r);
	CHECKF(r.exited && r.status == 0, "status %d (5: a class object under RLIMIT_AS): %s",
	       r.status, r.err);
}

/* calloc of more than 32 KiB is an extent: a fresh one is zero without a write, where a
 * class object was cleared page by page (2,000 x 60,000 B with one byte written: 117 MiB
 * resident), and a recycled one is cleared. */
static void t_calloc_fresh(void)
{
	enum {
		N = 2000
	};
	static unsigned char *v[N];
	sheaf_malloc_extent_cache_drain();
	long r0 = (long)(th_rss() >> 10);
	for (int i = 0; i < N; i++) {
		REQUIRE((v[i] = sheaf_calloc(1, 60000)) != NULL);
		v[i][0] = 1;
	}
	long grew = (long)(th_rss() >> 10) - r0;
	printf("# %d x calloc(1, 60000), one byte written: %ld KiB more resident\n", N, grew);
	CHECKF(grew < 40 * 1024, "%ld KiB", grew);
	for (int i = 0; i < N; i++) {
		memset(v[i], 0xa5, 60000);
		sheaf_free(v[i]);
	}
	for (int i = 0; i < 8; i++) {
		unsigned char *z = sheaf_calloc(60000, 1);
		REQUIRE(z != NULL);
		size_t nz = 0;
		for (size_t k = 0; k < 60000; k++)
			nz += z[k] != 0;
		CHECKF(nz == 0, "%zu bytes not cleared", nz);
		v[i] = z;
	}
	for (int i = 0; i < 8; i++)
		sheaf_free(v[i]);
	sheaf_malloc_extent_cache_drain();
}

/* The heap window full (1 GiB here): blocks of a big class become extents instead of
 * failing, from half the window on (bigclass.c malloc_big_class_spills), so that the small
 * classes keep the rest: 100,000 blocks of 256 B still come after them (every one
 * failed once the big blocks had filled the window).  24,000 x 40,000 B would need
 * 1.5 GiB of 64 KiB slabs; only their first bytes are written (about 100 MiB
 * resident).  And malloc keeps errno when it succeeds. */
static void t_heap_full(void)
{
	enum {
		N = 24000
	};
	static char *v[N];
	int extents = 0;
	int errno_changed = 0;
	for (int i = 0; i < N; i++) {
		errno = 777;
		v[i] = sheaf_malloc(40000);
		REQUIRE(v[i] != NULL);
		errno_changed += errno != 777;
		v[i][0] = (char)i;
		extents += sheaf_malloc_cache_of(v[i]) == NULL;
	}
	printf("# %d blocks of 40,000 B with a 1 GiB heap window: %d of them extents\n", N,
	       extents);
	CHECK(errno_changed == 0);
	if (per_cpu_mode())
		CHECK(extents > 0 && extents < N);
	enum {
		S = 100000
	};
	static void *small[S];
	int small_failed = 0;
	for (int i = 0; i < S; i++)
		small_failed += (small[i] = sheaf_malloc(256)) == NULL;
	CHECKF(small_failed == 0, "%d of %d blocks of 256 B failed", small_failed, S);
	for (int i = 0; i < S; i++)
		sheaf_free(small[i]);
	for (int i = 0; i < N; i++) {
		CHECK(v[i][0] == (char)i && sheaf_usable_size(v[i]) == 40960);
		sheaf_free(v[i]);
	}
	sheaf_malloc_extent_cache_drain();
	sheaf_malloc_trim();
}

/* A refill that gets part of what it asks for (the page heap fails after one slab)
 * still hands out an object; malloc then keeps errno as it does on every success (the
 * failed part set ENOMEM until 2026-11-29). */
static void t_errno_partial_refill(void)
{
	sheaf_free(sheaf_malloc(4000)); /* the 4 KiB class exists */
	sheaf_malloc_trim();            /* its sheaves are empty */
	sheaf_os_inject_heap_failure(1);
	errno = 777;
	void *p = sheaf_malloc(4000);
	int e = errno;
	sheaf_os_inject_heap_failure(-1);
	CHECKF(p != NULL && e == 777, "p %p errno %d", p, e);
	sheaf_free(p);
}

int main(void)
{
	RUN(t_address_space_limited); /* first: the decision is made once a process */
	RUN(t_class_or_extent);
	RUN(t_calloc_fresh);
	RUN(t_errno_partial_refill);
	RUN(t_heap_full);
	return th_done();
}
