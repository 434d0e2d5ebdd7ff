/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_nocore.c - the malloc front end when the core cannot start
 * (sidecar .env: SHEAF_HEAP_GB=0 leaves it no heap to reserve, as a low
 * `ulimit -v` would): small requests fail with ENOMEM and are not retried
 * at great cost, extents still work, free of them works, nothing crashes.
 * (libsheaf-malloc.so turns to glibc's allocator instead: see
 * tests/integration/test_preload_api.sh.)
 */
#include <time.h>

#include "harness.h"
#include "malloc/malloc.h"

static void t_small_fail_large_work(void)
{
	errno = 0;
	REQUIRE(sheaf_malloc(100) == NULL && errno == ENOMEM); /* run with the .env */
	errno = 0;
	CHECK(sheaf_calloc(10, 10) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(sheaf_aligned_alloc(64, 64) == NULL && errno == ENOMEM);
	char *big = sheaf_malloc(1 << 20);
	CHECK(big != NULL);
	if (big) {
		memset(big, 3, 1 << 20);
		CHECK(sheaf_usable_size(big) >= (1 << 20));
		big = sheaf_realloc(big, 3 << 20);
		CHECK(big != NULL && big[12345] == 3);
		errno = 42;
		sheaf_free(big);
		CHECK(errno == 42);
	}
	void *a = sheaf_aligned_alloc((size_t)1 << 16, 10); /* an extent */
	CHECK(a != NULL && ((uintptr_t)a & 0xffff) == 0);
	sheaf_free(a);
	/* The failed start-up is not repeated on every call. */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int got = 0;
	for (int i = 0; i < 100000; i++)
		got += sheaf_malloc(16) != NULL;
	CHECK(got == 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ns =
		((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e5;
	printf("# %.0f ns per failing malloc\n", ns);
	CHECK(ns < 20000);
}

int main(void)
{
	RUN(t_small_fail_large_work);
	return th_done();
}
