/* SPDX-License-Identifier: MIT */
/* With the free checks off (SHEAF_FREE_CHECKS=0, this test's .env) the free fast path
 * reads nothing of the object and looks its page up inside the restartable sequence
 * (percpu/fastpath.h sheaf_cpu_free): a foreign pointer and another cache's object must
 * still miss there and be reported by the slow path, in one line naming cache and
 * address, as with the checks on (test_errors.c). */
#include "harness.h"
#include "base/base.h"

#include <sheaf.h>
#include <stdlib.h>

static struct sheaf_cache *ca, *cb;
static char foreign[128];

static void do_free(void *p)
{
	sheaf_cache_free(ca, sheaf_cache_alloc(ca)); /* the fast path is warm */
	sheaf_cache_free(ca, p);
}

static void test_nochecks_reported(void)
{
	REQUIRE(sheaf_option_long(SHEAF_OPT_FREE_CHECKS) == 0);
	th_expect_report("foreign pointer", do_free, foreign + 64, "invalid pointer", "nochk-a",
			 foreign + 64);
	void *q = sheaf_cache_alloc(cb);
	REQUIRE(q != NULL);
	th_expect_report("another cache's object", do_free, q, "wrong cache", "nochk-a", q);
	sheaf_cache_free(cb, q);
}

static int ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
	return x < y ? -1 : x > y;
}

/* The unchecked fast path still frees and reuses: no object is handed out twice while
 * live, over rounds that go through the sheaves, the barn and the slabs. */
static void test_nochecks_roundtrip(void)
{
	enum {
		N = 1000
	};
	static void *v[N];
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < N; i++)
			REQUIRE((v[i] = sheaf_cache_alloc(ca)) != NULL);
		for (int i = 0; i < N; i++)
			sheaf_cache_free(ca, v[i]);
		qsort(v, N, sizeof(v[0]), ptr_cmp);
		for (int i = 1; i < N; i++)
			CHECKF(v[i] != v[i - 1], "round %d: %p handed out twice", round, v[i]);
	}
}

int main(void)
{
	ca = sheaf_cache_create("nochk-a", 64, NULL);
	cb = sheaf_cache_create("nochk-b", 64, NULL);
	REQUIRE(ca && cb);
	RUN(test_nochecks_reported);
	RUN(test_nochecks_roundtrip);
	return th_done();
}
