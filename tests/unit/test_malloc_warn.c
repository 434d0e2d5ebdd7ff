/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_warn.c - with SHEAF_ON_ERROR=warn (sidecar .env) misuse of the
 * malloc front end is reported, counted and the process goes on: an invalid
 * free leaks nothing of ours, a size mismatch leaks the object rather than
 * freeing it into the wrong place.
 */
#include "harness.h"
#include "malloc/malloc.h"

static uint64_t errors(void)
{
	struct sheaf_malloc_counters c;
	sheaf_malloc_counters_get(&c);
	return c.errors;
}

static void t_reported_and_survived(void)
{
	uint64_t e0 = errors();
	char stack[32];
	errno = 55;
	sheaf_free(stack + 8);
	CHECK(errno == 55);
	CHECK(errors() == e0 + 1);
	char *p = sheaf_malloc(100);
	strcpy(p, "still mine");
	sheaf_free_sized(p, 3); /* mismatch: reported, p is leaked, not freed */
	CHECK(errors() == e0 + 2);
	char *q = sheaf_malloc(100);
	CHECK(q != p && strcmp(p, "still mine") == 0);
	void *big = sheaf_malloc(1 << 20);
	sheaf_free(big);
	sheaf_free(big); /* double free of an extent */
	CHECK(errors() == e0 + 3);
	CHECK(sheaf_usable_size(stack) == 0);
	CHECK(errors() == e0 + 4);
	CHECK(sheaf_realloc(stack, 10) == NULL && errno == EINVAL);
	sheaf_free(q);
}

int main(void)
{
	RUN(t_reported_and_survived);
	return th_done();
}
