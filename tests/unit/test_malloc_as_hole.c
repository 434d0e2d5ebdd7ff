/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_as_hole.c - at an address-space limit, memory the program freed serves its
 * next allocation, of any kind (docs/malloc.md "Limits"): a large block that fits only
 * once Sheaf gives back what it keeps is served, with errno left as it was.
 *
 * The process fills RLIMIT_AS with 1 KiB blocks and frees them all (hundreds of MiB free
 * inside Sheaf's heap), then maps everything that is left but one 72 KiB hole, and asks
 * for a 70,000-byte block: an extent, the first of the process, whose registry table must
 * be mapped too.  Until 2026-11-29 the block's own mapping took the hole, the table's
 * mapping was refused, and malloc failed with ENOMEM without giving anything back
 * (extent_alloc.c malloc_large_alloc; adversarial run).  Every mapping of the test is
 * bounded by the limit it sets.  Sanitizer builds skip it (their shadow needs terabytes
 * of address space).
 */
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "harness.h"
#include "malloc/malloc.h"

static void *map(size_t len)
{
	void *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return q == MAP_FAILED ? NULL : q;
}

/* The process's address space in use, in bytes (/proc/self/statm's first field). */
static size_t vm_size(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long pages = 0;
	if (f) {
		if (fscanf(f, "%lu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	return pages * 4096;
}

static void t_hole_after_free(void)
{
	sheaf_free(sheaf_malloc(64)); /* the core started before the limit */
	struct rlimit r;
	REQUIRE(getrlimit(RLIMIT_AS, &r) == 0);
	r.rlim_cur = vm_size() + (256ul << 20); /* the hard limit stays */
	REQUIRE(r.rlim_max == RLIM_INFINITY || r.rlim_cur <= r.rlim_max);
	REQUIRE(setrlimit(RLIMIT_AS, &r) == 0);
	enum {
		CAP = 1 << 20
	};
	void **p = map(CAP * sizeof(void *));
	REQUIRE(p != NULL);
	size_t n = 0;
	while (n < CAP && (p[n] = sheaf_malloc(1024)) != NULL)
		memset(p[n++], 1, 1024);
	printf("# %zu MiB of 1 KiB blocks at the limit\n", n >> 10);
	CHECK(n > 100000); /* most of the 256 MiB */
	for (size_t i = 0; i < n; i++)
		sheaf_free(p[i]);
	void *last = NULL, *q;
	while ((q = map(72 << 10)) != NULL)
		last = q;
	while (map(4096) != NULL)
		;
	REQUIRE(last != NULL);
	munmap(last, 72 << 10);
	errno = 0;
	void *x = sheaf_malloc(70000);
	int e = errno;
	CHECKF(x != NULL && e == 0, "malloc(70000) in the last hole = %p, errno %d", x, e);
	sheaf_free(x);
}

int main(void)
{
	if (SANITIZE_ADDRESS || SANITIZE_THREAD) {
		printf("# skipped: the sanitizer's shadow memory needs more address space than "
		       "any limit\n");
		return 77;
	}
	RUN(t_hole_after_free);
	return th_done();
}
