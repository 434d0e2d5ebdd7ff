/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_api.c - the contracts of the malloc front end (sheaf_malloc.h,
 * and the POSIX/glibc conventions in malloc/malloc.h that the preload
 * library exports): what glibc's malloc tests check, written anew.
 */
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "harness.h"
#include "malloc/malloc.h"
#include "malloc/sizeclass.h"

static bool aligned(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

/* Run first, before any class exists: the inline malloc's table opens (its bound set,
 * the classes not made yet holding the placeholder) with the first class, and a class
 * first asked for after that is made through the placeholder's miss path, never handed
 * the placeholder itself. */
static void t_classes_made_on_first_use(void)
{
	CHECK(sheaf_malloc_small_limit.v == 0);
	CHECK(sheaf_malloc_unmade == NULL);
	void *p = sheaf_malloc(24);
	REQUIRE(p != NULL);
	CHECK(sheaf_malloc_small_limit.v == SHEAF_SC_TABLE_MAX + 1);
	REQUIRE(sheaf_malloc_unmade != NULL);
	/* Every entry: its class's cache, or the placeholder while there is none. */
	unsigned made = 0;
	for (size_t n = 0; n <= SHEAF_SC_TABLE_MAX; n++) {
		struct sheaf_cache *e = sheaf_malloc_small[(n + 7) >> 3];
		struct sheaf_cache *k = sheaf_malloc_classes[sheaf_sc_index(n)];
		CHECKF(e == (k ? k : sheaf_malloc_unmade), "n=%zu", n);
		made += k != NULL;
	}
	CHECK(made > 0 && made < SHEAF_SC_TABLE_MAX + 1);
	unsigned i1000 = sheaf_sc_index(1000);
	CHECK(sheaf_malloc_classes[i1000] == NULL);
	CHECK(sheaf_malloc_small[(1000 + 7) >> 3] == sheaf_malloc_unmade);
	/* The first 1000-byte block: its class is made on the way. */
	unsigned char *q = sheaf_malloc(1000);
	REQUIRE(q != NULL);
	memset(q, 0x5a, 1000);
	CHECK(sheaf_usable_size(q) >= 1000);
	CHECK(sheaf_malloc_classes[i1000] != NULL);
	CHECK(sheaf_cache_of(q) == sheaf_malloc_classes[i1000]);
	CHECK(sheaf_cache_of(q) != sheaf_malloc_unmade);
	CHECK(sheaf_malloc_small[(1000 + 7) >> 3] == sheaf_malloc_classes[i1000]);
	/* The placeholder is no live cache (every public call checks the magic first). */
	CHECK(sheaf_malloc_unmade->magic != SHEAF_CACHE_LIVE);
	sheaf_free(q);
	sheaf_free(p);
}

static void t_basic_sizes(void)
{
	/* Every size up to 70000 in steps, written end to end. */
	for (size_t n = 0; n <= 70000; n += (n < 1100 ? 1 : 97)) {
		unsigned char *p = sheaf_malloc(n);
		REQUIRE(p != NULL);
		CHECK(aligned(p, n >= 16 ? 16 : 8));
		size_t u = sheaf_usable_size(p);
		CHECKF(u >= n, "n=%zu usable=%zu", n, u);
		memset(p, 0xab, u);
		sheaf_free(p);
	}
	CHECK(sheaf_usable_size(NULL) == 0);
	sheaf_free(NULL);
	/* A small object is a size-class object: its usable size is the class. */
	void *q = sheaf_malloc(100);
	CHECK(sheaf_usable_size(q) == 112);
	CHECK(sheaf_cache_of(q) != NULL);
	sheaf_free(q);
	/* Distinct live objects. */
	void *v[512];
	for (int i = 0; i < 512; i++)
		v[i] = sheaf_malloc(24);
	int dup = 0;
	for (int i = 0; i < 512; i++)
		for (int j = i + 1; j < 512; j++)
			dup += v[i] == v[j];
	CHECK(dup == 0);
	for (int i = 0; i < 512; i++)
		sheaf_free(v[i]);
}

static void t_calloc(void)
{
	errno = 0;
	CHECK(sheaf_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(sheaf_calloc((size_t)1 << 32, (size_t)1 << 32) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(sheaf_calloc(SIZE_MAX, SIZE_MAX) == NULL && errno == ENOMEM);
	/* Zeroed, also when the memory is recycled (small and large). */
	size_t sizes[] = { 1, 40, 1000, 32768, 40000, 65536, 65537, 300000 };
	for (unsigned k = 0; k < 8; k++) {
		for (int r = 0; r < 3; r++) {
			unsigned char *d = sheaf_malloc(sizes[k]);
			memset(d, 0xff, sizes[k]);
			sheaf_free(d);
			unsigned char *z = sheaf_calloc(1, sizes[k]);
			REQUIRE(z != NULL);
			size_t nz = 0;
			for (size_t i = 0; i < sizes[k]; i++)
				nz += z[i] != 0;
			CHECKF(nz == 0, "size %zu: %zu non-zero", sizes[k], nz);
			sheaf_free(z);
		}
	}
	void *z0 = sheaf_calloc(0, 10);
	CHECK(z0 != NULL);
	sheaf_free(z0);
}

static void t_too_large(void)
{
	size_t bad[] = { SIZE_MAX,
			 SIZE_MAX - 1,
			 SIZE_MAX - 4096,
			 (size_t)PTRDIFF_MAX + 1,
			 (size_t)PTRDIFF_MAX,
			 (size_t)1 << 62 };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		CHECKF(sheaf_malloc(bad[i]) == NULL && errno == ENOMEM, "malloc(%zu)", bad[i]);
		errno = 0;
		CHECK(sheaf_aligned_alloc(4096, bad[i]) == NULL && errno == ENOMEM);
		errno = 0;
		CHECK(sheaf_aligned_alloc((size_t)1 << 20, bad[i]) == NULL && errno == ENOMEM);
		errno = 0;
		CHECK(sheaf_malloc_pvalloc(bad[i]) == NULL && errno == ENOMEM);
		char *q = sheaf_malloc(50);
		strcpy(q, "kept");
		errno = 0;
		CHECK(sheaf_realloc(q, bad[i]) == NULL && errno == ENOMEM);
		CHECK(strcmp(q, "kept") == 0); /* the old block is intact */
		char *big = sheaf_malloc(100000);
		strcpy(big, "kept too");
		CHECK(sheaf_realloc(big, bad[i]) == NULL && strcmp(big, "kept too") == 0);
		sheaf_free(big);
		sheaf_free(q);
	}
	/* The allocator still works. */
	void *p = sheaf_malloc(1 << 20);
	CHECK(p != NULL);
	sheaf_free(p);
}

static void t_posix_memalign(void)
{
	void *const sentinel = (void *)0x5151;
	size_t bad[] = { 0, 1, 2, 4, 3, 12, 24, 48, 100, (size_t)1 << 63 | 8 };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		void *p = sentinel;
		CHECKF(sheaf_malloc_posix_memalign(&p, bad[i], 64) == EINVAL && p == sentinel,
		       "align %zu", bad[i]);
	}
	void *p = sentinel;
	int e = errno = 4242;
	CHECK(sheaf_malloc_posix_memalign(&p, 64, SIZE_MAX - 64) == ENOMEM && p == sentinel);
	CHECK(errno == e);
	CHECK(sheaf_malloc_posix_memalign(&p, (size_t)1 << 20, (size_t)PTRDIFF_MAX) == ENOMEM &&
	      p == sentinel);
	CHECK(sheaf_malloc_posix_memalign(&p, 8, 0) == 0 && p != sentinel);
	sheaf_free(p);
	/* aligned_alloc: not a power of two is EINVAL. */
	errno = 0;
	CHECK(sheaf_aligned_alloc(0, 8) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(sheaf_aligned_alloc(24, 8) == NULL && errno == EINVAL);
	/* memalign rounds up; valloc/pvalloc give pages. */
	void *m = sheaf_malloc_memalign(48, 10);
	CHECK(m && aligned(m, 64));
	sheaf_free(m);
	m = sheaf_malloc_memalign(0, 10);
	CHECK(m != NULL);
	sheaf_free(m);
	errno = 0;
	CHECK(sheaf_malloc_memalign(SIZE_MAX, 10) == NULL && errno == EINVAL);
	m = sheaf_malloc_valloc(1);
	CHECK(m && aligned(m, 4096));
	sheaf_free(m);
	m = sheaf_malloc_pvalloc(4097);
	CHECK(m && aligned(m, 4096) && sheaf_usable_size(m) >= 8192);
	sheaf_free(m);
	m = sheaf_malloc_pvalloc(0);
	CHECK(m && sheaf_usable_size(m) >= 4096);
	sheaf_free(m);
}

/* Every alignment from 1 to 1 MiB, with sizes around it, by every entry point. */
static void t_every_alignment(void)
{
	for (size_t al = 1; al <= ((size_t)1 << 20); al <<= 1) {
		size_t sizes[] = {
			0, 1, 7, al / 2, al - 1, al, al + 1, 3 * al, 65536, 65537, 100000
		};
		void *keep[11][3];
		for (unsigned i = 0; i < 11; i++) {
			size_t n = sizes[i];
			void *a = sheaf_aligned_alloc(al, n);
			CHECKF(a && aligned(a, al), "aligned_alloc(%zu, %zu) = %p", al, n, a);
			void *b = NULL;
			if (al >= sizeof(void *))
				CHECK(sheaf_malloc_posix_memalign(&b, al, n) == 0 &&
				      aligned(b, al));
			void *c = sheaf_malloc_memalign(al, n);
			CHECK(c && aligned(c, al));
			CHECK(sheaf_usable_size(a) >= n && sheaf_usable_size(c) >= n);
			if (a)
				memset(a, 0x11, n);
			if (b)
				memset(b, 0x22, n);
			if (c)
				memset(c, 0x33, n);
			keep[i][0] = a;
			keep[i][1] = b;
			keep[i][2] = c;
		}
		/* Nothing overlapped: the fills survived. */
		for (unsigned i = 0; i < 11; i++) {
			size_t n = sizes[i];
			for (int k = 0; k < 3; k++) {
				unsigned char *x = keep[i][k];
				if (x && n)
					CHECK(x[0] == 0x11 * (k + 1) && x[n - 1] == 0x11 * (k + 1));
				/* free_sized with the request is valid for aligned blocks */
				if (k == 0)
					sheaf_free_sized(x, n);
				else
					sheaf_free(x);
			}
		}
	}
}

static void fill(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 7 + 3);
}

static size_t check_fill(const unsigned char *p, size_t n)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += p[i] != (unsigned char)(i * 7 + 3);
	return bad;
}

static void t_realloc(void)
{
	/* From NULL. */
	unsigned char *p = sheaf_realloc(NULL, 30);
	CHECK(p != NULL);
	fill(p, 30);
	/* Same class: in place, growing and shrinking. */
	unsigned char *q = sheaf_realloc(p, 32);
	CHECK(q == p);
	q = sheaf_realloc(p, 17);
	CHECK(q == p && check_fill(q, 17) == 0);
	/* Grow through every kind: classes, the largest class, extents. */
	size_t path[] = { 17,       100,     1000,   4000,  65536, 65537, 200000, 5 << 20,
			  40 << 20, 6 << 20, 100000, 40000, 20000, 1000,  10,     1 };
	size_t cur = 17;
	for (unsigned i = 1; i < sizeof(path) / sizeof(path[0]); i++) {
		size_t n = path[i];
		unsigned char *r = sheaf_realloc(q, n);
		REQUIRE(r != NULL);
		size_t keep = cur < n ? cur : n;
		CHECKF(check_fill(r, keep) == 0, "realloc %zu -> %zu lost contents", cur, n);
		CHECK(sheaf_usable_size(r) >= n);
		fill(r, n);
		q = r;
		cur = n;
	}
	/* To 0: freed, NULL. */
	CHECK(sheaf_realloc(q, 0) == NULL);
	/* An extent grows in place or by mremap (no copy), counted. */
	struct sheaf_malloc_counters c0, c1;
	sheaf_malloc_counters_get(&c0);
	unsigned char *e = sheaf_malloc(100000);
	fill(e, 100000);
	e = sheaf_realloc(e, 10 << 20);
	CHECK(e && check_fill(e, 100000) == 0);
	e = sheaf_realloc(e, 200000); /* shrink in place, to 224 KiB (four steps per doubling) */
	CHECK(e && check_fill(e, 100000) == 0 && sheaf_usable_size(e) == 229376);
	sheaf_malloc_counters_get(&c1);
	CHECK(c1.extent_remaps - c0.extent_remaps == 2);
	sheaf_free(e);
	/* reallocarray */
	errno = 0;
	unsigned char *ra = sheaf_malloc_reallocarray(NULL, 10, 10);
	CHECK(ra != NULL);
	fill(ra, 100);
	CHECK(sheaf_malloc_reallocarray(ra, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
	ra = sheaf_malloc_reallocarray(ra, 1000, 10);
	CHECK(ra && check_fill(ra, 100) == 0);
	sheaf_free(ra);
}

static void t_free_keeps_errno(void)
{
	size_t sizes[] = { 1, 100, 5000, 32768, 50000, 65537, 3 << 20 };
	for (unsigned i = 0; i < 7; i++) {
		void *p = sheaf_malloc(sizes[i]);
		errno = 9876;
		sheaf_free(p);
		CHECK(errno == 9876);
		p = sheaf_malloc(sizes[i]);
		errno = 5432;
		sheaf_free_sized(p, sizes[i]);
		CHECK(errno == 5432);
	}
	errno = 77;
	sheaf_free(NULL);
	CHECK(errno == 77);
	/* Freeing many extents, which unmaps some, keeps errno too. */
	void *v[40];
	for (int i = 0; i < 40; i++)
		v[i] = sheaf_malloc((size_t)(i + 1) << 20);
	errno = 31;
	for (int i = 0; i < 40; i++)
		sheaf_free(v[i]);
	CHECK(errno == 31);
}

/* A realloc to a smaller class that cannot get memory fails (NULL, ENOMEM) and leaves
 * the block as it was, so that free_sized with the size the program last asked for is
 * always right: before, the block was kept under the smaller request and
 * free_sized(p, 1500) of a block in the 32 KiB class was reported as a size mismatch. */
/* A successful realloc leaves errno as it was (README "Malloc front end"), also when a
 * large block cannot grow in place: its first mremap fails (ENOMEM) and the move that
 * follows succeeds.  A page mapped right after the block makes the growth move. */
static void t_realloc_move(void)
{
	/* Also the served counts (docs/malloc.md): a moving realloc counts a malloc and a
	 * free, one in place nothing (the mremap move counted nothing until 2026-11-29). */
	uint64_t m0, f0, m1, f1;
	sheaf_malloc_served(&m0, &f0);
	char *p = sheaf_malloc(200000);
	REQUIRE(p);
	memset(p, 0x3c, 200000);
	uintptr_t end = ((uintptr_t)p + sheaf_usable_size(p) + 4095) & ~(uintptr_t)4095;
	void *blk = mmap((void *)end, 4096, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	bool mine = blk == (void *)end; /* else something is there already: as good */
	errno = 4242;
	char *q = sheaf_realloc(p, 4000000);
	CHECKF(q != NULL && errno == 4242, "q %p errno %d", (void *)q, errno);
	CHECK(q != p);
	for (int i = 0; q && i < 200000; i += 4096)
		CHECK(q[i] == 0x3c);
	errno = 4343;
	char *r = sheaf_realloc(q, 100000); /* a shrink, in place */
	CHECK(r != NULL && errno == 4343);
	CHECK(r == q);
	sheaf_free(r);
	sheaf_malloc_served(&m1, &f1);
	CHECKF(m1 - m0 == 2 && f1 - f0 == 2, "served +%llu mallocs +%llu frees",
	       (unsigned long long)(m1 - m0), (unsigned long long)(f1 - f0));
	if (mine)
		munmap(blk, 4096);
}

static void t_realloc_shrink_enomem(void)
{
	char *p = sheaf_malloc(30000);
	REQUIRE(p);
	memset(p, 0x5a, 30000);
	(void)sheaf_malloc_trim(); /* no cached 1536-byte object or slab left */
	struct sheaf_malloc_counters c0, c1;
	sheaf_malloc_counters_get(&c0);
	sheaf_os_inject_heap_failure(0);
	errno = 0;
	char *q = sheaf_realloc(p, 1500);
	int e = errno;
	sheaf_os_inject_heap_failure(-1);
	CHECK(q == NULL && e == ENOMEM);
	CHECK(p[0] == 0x5a && p[29999] == 0x5a);
	sheaf_free_sized(p, 30000); /* the block's request is still 30000 */
	q = sheaf_malloc(30000);
	REQUIRE(q);
	q[0] = 1;
	char *r = sheaf_realloc(q, 1500); /* with memory: moves */
	CHECK(r != NULL && r[0] == 1);
	sheaf_free_sized(r, 1500);
	sheaf_malloc_counters_get(&c1);
	CHECK(c1.errors == c0.errors);
}

static void t_free_sized(void)
{
	/* Any size between the request and the usable size is accepted. */
	for (size_t n = 1; n < 40000; n = n * 5 / 4 + 1) {
		void *p = sheaf_malloc(n);
		size_t u = sheaf_usable_size(p);
		sheaf_free_sized(p, n);
		p = sheaf_malloc(n);
		sheaf_free_sized(p, u);
	}
	void *a = sheaf_aligned_alloc(4096, 8);
	sheaf_free_sized(a, 8);
	struct sheaf_malloc_counters c;
	sheaf_malloc_counters_get(&c);
	CHECK(c.errors == 0);
}

/* Misuse, each in a child that must abort with a message naming the address. */
static void bad_sized_small(void *arg)
{
	(void)arg;
	void *p = sheaf_malloc(100);
	sheaf_free_sized(p, 20);
}
static void bad_sized_over(void *arg)
{
	(void)arg;
	void *p = sheaf_malloc(100);
	sheaf_free_sized(p, 113);
}
static void bad_sized_extent(void *arg)
{
	(void)arg;
	void *p = sheaf_malloc(100000);
	sheaf_free_sized(p, 200000);
}
static void bad_stack(void *arg)
{
	(void)arg;
	char buf[64];
	sheaf_free(buf + 16);
}
static void bad_double_extent(void *arg)
{
	(void)arg;
	void *p = sheaf_malloc(1 << 20);
	sheaf_free(p);
	sheaf_free(p);
}
static void bad_interior_extent(void *arg)
{
	(void)arg;
	char *p = sheaf_malloc(1 << 20);
	sheaf_free(p + 4096);
}
static void bad_other_cache(void *arg)
{
	(void)arg;
	struct sheaf_cache *c = sheaf_cache_create("not-malloc", 100, NULL);
	void *p = sheaf_cache_alloc(c);
	sheaf_free(p);
}
static void bad_mmap(void *arg)
{
	(void)arg;
	void *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	(void)sheaf_realloc(p, 100);
}

static void expect_abort(void (*fn)(void *), const char *what)
{
	struct th_child r;
	th_run_child(fn, NULL, &r);
	CHECKF(r.signaled && r.sig == SIGABRT, "%s: exited=%d status=%d", what, r.exited, r.status);
	CHECKF(strstr(r.err, "sheaf") && strstr(r.err, "0x"), "%s: stderr '%s'", what, r.err);
}

static void t_misuse_reported(void)
{
	expect_abort(bad_sized_small, "free_sized too small");
	expect_abort(bad_sized_over, "free_sized over usable");
	expect_abort(bad_sized_extent, "free_sized extent");
	expect_abort(bad_stack, "free of a stack address");
	expect_abort(bad_double_extent, "double free of an extent");
	expect_abort(bad_interior_extent, "free of an extent's interior");
	expect_abort(bad_other_cache, "free of another cache's object");
	expect_abort(bad_mmap, "realloc of foreign memory");
}

/* Freed extents wait in the cache, are reused best fit, split and merged,
 * gathered with mremap, bounded in bytes, and go back after 1 s. */
static void t_extent_cache(void)
{
	sheaf_malloc_extent_cache_drain();
	struct sheaf_malloc_counters c0, c1;
	size_t cnt, bytes;
	sheaf_malloc_counters_get(&c0);
	void *p = sheaf_malloc(300000);
	/* Fresh lengths go in four steps per power of two: 300000 -> 320 KiB. */
	CHECK(sheaf_usable_size(p) == 327680);
	sheaf_free(p);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(cnt == 1 && bytes == 327680);
	/* 270000 B is 66 pages: the 14 left over are too few to split off. */
	void *q = sheaf_malloc(270000);
	CHECK(q == p && sheaf_usable_size(q) == 327680);
	sheaf_malloc_counters_get(&c1);
	CHECK(c1.extent_reuses - c0.extent_reuses == 1);
	CHECK(c1.extent_maps - c0.extent_maps == 1);
	CHECK(c1.extent_unmaps == c0.extent_unmaps);
	sheaf_free(q);
	/* A smaller request splits it: the head is handed out, whole pages of
	 * the request, and the tail stays cached. */
	void *s = sheaf_malloc(80000);
	CHECK(s == p && sheaf_usable_size(s) == 81920);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(cnt == 1 && bytes == 327680 - 81920);
	/* ... and so does the next one, from the tail. */
	void *s2 = sheaf_malloc(100000);
	CHECK(s2 == (char *)p + 81920 && sheaf_usable_size(s2) == 102400);
	/* Freed, the pieces merge with the cached tail into the whole again. */
	sheaf_malloc_counters_get(&c0);
	sheaf_free(s);
	sheaf_free(s2);
	sheaf_malloc_counters_get(&c1);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(cnt == 1 && bytes == 327680);
	CHECK(c1.extent_merges - c0.extent_merges == 2);
	void *r = sheaf_malloc(327680);
	CHECK(r == p);
	sheaf_free(r);
	/* A request larger than anything cached moves the cached extents of 1 MiB or more
	 * (XC_GATHER_PIECE_MIN, extent.c) into a new mapping with mremap instead of mapping
	 * afresh: the resident pages move, only the rest is new (the first bytes held the
	 * cache's own links).  The cache emptied first, so that the extent of 320 KiB is not
	 * merged with the new one, should the kernel place them side by side. */
	sheaf_malloc_extent_cache_drain();
	char *m = sheaf_malloc(1310720); /* 1.25 MiB, a size step */
	REQUIRE(m != NULL);
	memset(m, 7, 1310720);
	sheaf_free(m);
	sheaf_malloc_counters_get(&c0);
	char *g = sheaf_malloc(4 << 20);
	sheaf_malloc_counters_get(&c1);
	CHECK(c1.extent_gathers - c0.extent_gathers == 1 && c1.extent_moves - c0.extent_moves == 1);
	CHECK(c1.extent_maps == c0.extent_maps);
	CHECK(sheaf_usable_size(g) == 4 << 20);
	CHECK(g[4096] == 7 && g[1310719] == 7 && g[1310720] == 0 && g[(4 << 20) - 1] == 0);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECKF(cnt == 0 && bytes == 0, "%zu cached, %zu bytes", cnt, bytes);
	sheaf_free(g);
	/* Bounded in bytes by the live extents' recent peak (and a quarter): 20 extents of
	 * 4 MiB freed as a whole (which may merge where the kernel placed them side by
	 * side) are all kept, though none is live any more. */
	sheaf_malloc_extent_cache_drain();
	void *v[20];
	for (unsigned i = 0; i < 20; i++)
		v[i] = sheaf_malloc(4 << 20);
	sheaf_malloc_counters_get(&c0);
	for (unsigned i = 0; i < 20; i++)
		sheaf_free(v[i]);
	sheaf_malloc_counters_get(&c1);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(cnt >= 1 && bytes == (80u << 20));
	CHECK(c1.extent_unmaps == c0.extent_unmaps);
	/* ... and never beyond SHEAF_MALLOC_EXTENT_CACHE_MAX: 160 extents of 4 MiB (address
	 * space; a page of each is written, by the cache's own links). */
	sheaf_malloc_extent_cache_drain();
	enum {
		NMAX = (SHEAF_MALLOC_EXTENT_CACHE_MAX >> 22) + 32
	};
	static void *vmax[NMAX];
	for (unsigned i = 0; i < NMAX; i++)
		REQUIRE((vmax[i] = sheaf_malloc(4 << 20)) != NULL);
	sheaf_malloc_counters_get(&c0);
	for (unsigned i = 0; i < NMAX; i++)
		sheaf_free(vmax[i]);
	sheaf_malloc_counters_get(&c1);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(bytes <= SHEAF_MALLOC_EXTENT_CACHE_MAX &&
	      bytes >= SHEAF_MALLOC_EXTENT_CACHE_MAX - (32u << 20));
	CHECK(c1.extent_unmaps - c0.extent_unmaps >= 1);
	/* With live extents, the bound grows with them (up to
	 * SHEAF_MALLOC_EXTENT_CACHE_MAX): 100 MiB live, 80 MiB freed, all kept. */
	sheaf_malloc_extent_cache_drain();
	void *live[25];
	for (unsigned i = 0; i < 25; i++)
		live[i] = sheaf_malloc(4 << 20);
	for (unsigned i = 0; i < 20; i++)
		v[i] = sheaf_malloc(4 << 20);
	sheaf_malloc_counters_get(&c0);
	for (unsigned i = 0; i < 20; i++)
		sheaf_free(v[i]);
	sheaf_malloc_counters_get(&c1);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(bytes == (80u << 20) && c1.extent_unmaps == c0.extent_unmaps);
	for (unsigned i = 0; i < 25; i++)
		sheaf_free(live[i]);
	/* A huge one is never cached. */
	sheaf_malloc_counters_get(&c0);
	void *h = sheaf_malloc(SHEAF_MALLOC_EXTENT_CACHE_ONE + 1);
	sheaf_free(h);
	sheaf_malloc_counters_get(&c1);
	CHECK(c1.extent_unmaps - c0.extent_unmaps == 1);
	/* After the delay they are given back: by the reaper's tick (SHEAF_REAP_MS) or
	 * at the latest by the next large operation. */
	sheaf_malloc_counters_get(&c0);
	struct timespec ts = { 1, 150 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	void *t = sheaf_malloc(1 << 20);
	sheaf_malloc_counters_get(&c1);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(cnt == 0 && bytes == 0);
	CHECK(c1.extent_unmaps - c0.extent_unmaps >= 1);
	sheaf_free(t);
	sheaf_malloc_extent_cache_drain();
}

/* Freed extents under 256 KiB from separate mappings are cached whole, never merged
 * (extent.c XC_MERGE_MIN), wherever the kernel placed them; and a request takes one of
 * its own size step.  Mappings made one after the other usually lie side by side, so
 * merging would show here. */
static void t_extent_small_whole(void)
{
	enum {
		N = 32
	};
	static void *v[N];
	struct sheaf_malloc_counters c0, c1;
	size_t cnt, bytes;
	sheaf_malloc_extent_cache_drain();
	for (int i = 0; i < N; i++)
		REQUIRE((v[i] = sheaf_malloc(80000)) != NULL); /* 80 KiB step */
	sheaf_malloc_counters_get(&c0);
	for (int i = 0; i < N; i++)
		sheaf_free(v[i]);
	sheaf_malloc_counters_get(&c1);
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	CHECK(c1.extent_merges == c0.extent_merges);
	CHECKF(cnt == N && bytes == N * 81920u, "cnt %zu bytes %zu", cnt, bytes);
	/* 72 KiB of request: the 80 KiB step, reused whole (no 8 KiB tail). */
	void *p = sheaf_malloc(72 * 1024 + 1);
	sheaf_malloc_counters_get(&c0);
	CHECK(c0.extent_reuses - c1.extent_reuses == 1 && sheaf_usable_size(p) == 81920);
	sheaf_free(p);
	sheaf_malloc_extent_cache_drain();
}

/* Thousands of live extents: the registry grows, reuses tombstones, and
 * always answers with the right length. */
static void t_extent_registry(void)
{
	enum {
		N = 3000
	};
	static char *v[N];
	static size_t want[N];
	uint64_t seed = 42;
	for (int i = 0; i < N; i++) {
		size_t n = SHEAF_SC_MAX + 1 + th_rand(&seed) % 70000;
		v[i] = sheaf_malloc(n);
		REQUIRE(v[i] != NULL);
		v[i][0] = (char)i;
		want[i] = n;
	}
	for (int round = 0; round < 4; round++) {
		for (int i = round % 2; i < N; i += 2) {
			sheaf_free(v[i]);
			size_t n = SHEAF_SC_MAX + 1 + th_rand(&seed) % 70000;
			v[i] = sheaf_malloc(n);
			REQUIRE(v[i] != NULL);
			v[i][0] = (char)i;
			want[i] = n;
		}
		int bad = 0;
		for (int i = 0; i < N; i++) {
			size_t u = sheaf_usable_size(v[i]);
			/* rounded up by at most 25 %, or a reused extent with a
			 * tail too short to split off (under 64 KiB) */
			bad += u < want[i] || u > want[i] + want[i] / 4 + 4096 + (64u << 10) ||
			       v[i][0] != (char)i;
		}
		CHECK(bad == 0);
	}
	for (int i = 0; i < N; i++)
		sheaf_free(v[i]);
	struct sheaf_malloc_counters c;
	sheaf_malloc_counters_get(&c);
	CHECK(c.errors == 0);
	sheaf_malloc_extent_cache_drain();
}

/* malloc_trim gives memory back: RSS falls after a burst is freed. */
/* malloc's free tests "an object start of a checked class" with one divisibility test
 * for every class (slab.h malloc_div_c, malloc.h sheaf_malloc_start_ok): for each class,
 * against the remainder, at every offset of its slab; and for a node that is not a
 * class, false everywhere. */
static void t_start_test_every_class(void)
{
	int bad = 0, classes = 0, extents = 0;
	for (unsigned i = 0; i < SHEAF_SC_COUNT; i++) {
		void *p = sheaf_malloc(sheaf_sc_size[i]);
		REQUIRE(p);
		if (i >= SHEAF_SC_BIG_FIRST && sheaf_malloc_cache_of(p) == NULL) {
			/* Per-thread mode: the sizes above 32 KiB are extents (malloc.c). */
			CHECK(sheaf_reg.mode != SHEAF_MODE_PERCPU);
			extents++;
			sheaf_free(p);
			continue;
		}
		uintptr_t k = sheaf_page_key(p);
		struct sheaf_node *n = sheaf_key_owner(k);
		REQUIRE(n && n->malloc_cache == n->cache);
		const struct sheaf_cache *c = n->cache;
		bool checked = c->free_checks && c->free_mark != SHEAF_MARK_NONE;
		uintptr_t base = (uintptr_t)p & ~c->slab_mask;
		for (uintptr_t off = 0; off <= c->slab_mask; off++) {
			/* An object start: not the slab's tail (off / slot == objs_per_slab
			 * when the slot does not divide the slab), which was taken for one. */
			bool want = checked && off % c->slot_size == 0 &&
				    off / c->slot_size < c->objs_per_slab;
			struct sheaf_cache *fc = NULL;
			bool got = sheaf_malloc_start_ok(k, (void *)(base + off), &fc);
			if ((got != want || (got && fc != c)) && bad++ < 5)
				fprintf(stderr, "# class %u (slot %u): offset %zu\n", i,
					(unsigned)c->slot_size, (size_t)off);
		}
		classes += checked;
		sheaf_free(p);
	}
	CHECK(bad == 0);
	if (!SANITIZE_ADDRESS) /* ASan builds keep no mark (slab.h free_mark) */
		CHECK(classes + extents == (int)SHEAF_SC_COUNT); /* the default: all checked */
	/* A cache that is not one of malloc's: never the fast path's start. */
	struct sheaf_cache *other = sheaf_cache_create("not-a-class", 64, NULL);
	REQUIRE(other);
	void *o = sheaf_cache_alloc(other);
	REQUIRE(o);
	uintptr_t ok = sheaf_page_key(o);
	struct sheaf_node *on = sheaf_key_owner(ok);
	struct sheaf_cache *ofc = NULL;
	CHECK(on && on->malloc_div_c == 0 && !sheaf_malloc_start_ok(ok, o, &ofc));
	/* SHEAF_KEY_NONE (no slab there: page/page.h "Keys") reads as a node with no cache,
	 * whatever the pointer: never the fast path's start. */
	void *ps[3] = { o, (char *)o + 16, sheaf_heap.base };
	for (int j = 0; j < 3; j++) {
		ofc = other;
		CHECK(!sheaf_malloc_start_ok(SHEAF_KEY_NONE, ps[j], &ofc) && ofc == NULL);
	}
	CHECK(sheaf_key_owner(0) == NULL && sheaf_key_owner(SHEAF_KEY_NONE) == NULL &&
	      sheaf_key_encode(on) == ok);
	sheaf_cache_free(other, o);
	sheaf_cache_destroy(other);
}

static void t_trim(void)
{
	enum {
		N = 40000
	};
	static void *v[N];
	size_t before = th_rss();
	for (int i = 0; i < N; i++) {
		v[i] = sheaf_malloc(1000 + (size_t)(i % 8) * 500); /* ~90 MB in classes */
		REQUIRE(v[i] != NULL);
		memset(v[i], 1, 1000);
	}
	void *big[8];
	for (int i = 0; i < 8; i++) {
		big[i] = sheaf_malloc(2 << 20);
		memset(big[i], 1, 2 << 20);
	}
	size_t peak = th_rss();
	for (int i = 0; i < N; i++)
		sheaf_free(v[i]);
	for (int i = 0; i < 8; i++)
		sheaf_free(big[i]);
	CHECK(sheaf_malloc_trim() == 1); /* the extents were cached */
	size_t after = th_rss();
	printf("# rss before %zu KiB, peak %zu KiB, after trim %zu KiB\n", before >> 10, peak >> 10,
	       after >> 10);
	CHECK(peak > before + (40u << 20));
#if !SANITIZE_THREAD /* TSan's shadow of the freed pages stays resident */
	CHECK(after < before + (peak - before) / 4);
#endif
	CHECK(sheaf_malloc_trim() == 0);
	/* page/page.h "Keys": below the fast paths' bound no page-map entry is 0 (the free
	 * fast path reads the node's fields with no test of the key), also after trim gave
	 * whole blocks back, and the pages of the freed slabs read SHEAF_KEY_NONE. */
	size_t lim = __atomic_load_n(&sheaf_heap.fast_limit, __ATOMIC_ACQUIRE) >> SHEAF_PAGE_SHIFT;
	size_t zero = 0, none = 0;
	for (size_t pg = 0; pg < lim; pg++) {
		uintptr_t e = __atomic_load_n(&sheaf_heap.pagemap[pg], __ATOMIC_RELAXED);
		zero += e == 0;
		none += e == SHEAF_KEY_NONE;
	}
	printf("# page map below the bound: %zu pages, %zu SHEAF_KEY_NONE, %zu zero\n", lim, none,
	       zero);
	CHECK(lim > 0 && zero == 0 && none > 0);
	size_t freed_none = 0;
	for (int i = 0; i < N; i++) {
		uintptr_t off = (uintptr_t)v[i] - (uintptr_t)sheaf_heap.base;
		freed_none += sheaf_heap.pagemap[off >> SHEAF_PAGE_SHIFT] == SHEAF_KEY_NONE;
	}
	CHECK(freed_none > N / 2); /* the classes' slabs went with the trim */
}

/* Out of address space (RLIMIT_AS set after extents were cached): a fresh mapping
 * that fails gives the cached extents back and tries again, instead of failing. */
static void rlimit_child(void *arg)
{
	(void)arg;
	sheaf_malloc_extent_cache_drain();
	void *v[8];
	for (int i = 0; i < 8; i++)
		if (!(v[i] = sheaf_malloc(8u << 20)))
			_exit(2);
	for (int i = 0; i < 8; i++)
		sheaf_free(v[i]); /* 64 MiB of address space cached */
	size_t cnt, bytes;
	sheaf_malloc_extent_cache_stat(&cnt, &bytes);
	if (bytes != (64u << 20))
		_exit(3);
	size_t vm = th_vm_size();
	if (!vm)
		_exit(4);
	struct rlimit rl = { (rlim_t)vm + (16u << 20), RLIM_INFINITY };
	if (setrlimit(RLIMIT_AS, &rl))
		_exit(5);
	void *p = sheaf_malloc(48u << 20); /* 16 MiB of headroom: only with the cache back */
	if (!p)
		_exit(1);
	memset(p, 1, 4096);
	sheaf_free(p);
	_exit(0);
}

static void t_extent_cache_rlimit(void)
{
#if SANITIZE_ADDRESS || SANITIZE_THREAD
	/* The sanitizer's shadow memory needs address space far beyond any such limit. */
	printf("# skipped: RLIMIT_AS under a sanitizer\n");
	return;
#endif
	struct th_child r;
	th_run_child(rlimit_child, NULL, &r);
	CHECKF(r.exited && r.status == 0, "exited=%d status=%d", r.exited, r.status);
}

int main(void)
{
	RUN(t_classes_made_on_first_use);
	RUN(t_basic_sizes);
	RUN(t_calloc);
	RUN(t_too_large);
	RUN(t_posix_memalign);
	RUN(t_every_alignment);
	RUN(t_realloc);
	RUN(t_free_keeps_errno);
	RUN(t_free_sized);
	RUN(t_realloc_shrink_enomem);
	RUN(t_realloc_move);
	RUN(t_misuse_reported);
	RUN(t_extent_cache);
	RUN(t_extent_small_whole);
	RUN(t_extent_cache_rlimit);
	RUN(t_extent_registry);
	RUN(t_trim);
	RUN(t_start_test_every_class);
	return th_done();
}
