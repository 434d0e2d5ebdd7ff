/* SPDX-License-Identifier: MIT */
/*
 * test_debug_objects_env.c - the tracker's environment switches (sidecar
 * .env: SHEAF_DEBUG_OBJECTS_POOL=single): the pool mode is taken from the
 * environment, is fixed once records exist, and SHEAF_DEBUG_OBJECTS=0 makes
 * every hook a no-op (checked in a child that sets it before first use).
 */
#include "harness.h"
#include "sheaf_debug.h"

static const struct sheaf_debug_obj_descr d = { .name = "env_obj" };
static long objs[64];

static void child_disabled(void *arg)
{
	setenv("SHEAF_DEBUG_OBJECTS", "0", 1);
	sheaf_debug_object_init(&objs[0], &d);
	sheaf_debug_object_activate(&objs[0], &d);
	sheaf_debug_object_free(&objs[0], &d);       /* would be "free active" */
	sheaf_debug_object_deactivate(&objs[1], &d); /* would be "not available" */
	struct sheaf_debug_objects_stats s = { .size = sizeof(s) };
	sheaf_debug_objects_stats_get(&s);
	fprintf(stderr, "@enabled=%u warnings=%llu allocs=%llu state=%d\n", s.enabled,
		(unsigned long long)s.warnings, (unsigned long long)s.cache_allocs,
		(int)sheaf_debug_object_state(&objs[0]));
}

static void test_disabled(void)
{
	struct th_child r;
	th_run_child(child_disabled, NULL, &r);
	CHECKF(r.exited && r.status == 0, "%s", r.err);
	CHECKF(strstr(r.err, "@enabled=0 warnings=0 allocs=0 state=0") != NULL, "%s", r.err);
	CHECK(strstr(r.err, "debug-objects:") == NULL);
}

static void test_pool_from_env(void)
{
	for (int i = 0; i < 64; i++)
		sheaf_debug_object_init(&objs[i], &d);
	struct sheaf_debug_objects_stats s = { .size = sizeof(s) };
	REQUIRE(sheaf_debug_objects_stats_get(&s) == 0);
	CHECK(s.enabled == 1);
	CHECK(s.pool_mode == SHEAF_DEBUG_POOL_SINGLE);
	CHECK(s.objs_in_use == 64);
	CHECK(s.pool_percpu == 0); /* single: no per-thread pools */
	CHECK(sheaf_debug_objects_set_pool(SHEAF_DEBUG_POOL_BATCHED) == -EBUSY);
	CHECK(sheaf_debug_objects_set_pool(SHEAF_DEBUG_POOL_SINGLE) == 0);
	CHECK(sheaf_debug_objects_set_pool((enum sheaf_debug_pool_mode)7) == -EINVAL);
	for (int i = 0; i < 64; i++)
		sheaf_debug_object_free(&objs[i], &d);
	REQUIRE(sheaf_debug_objects_stats_get(&s) == 0);
	CHECK(s.objs_in_use == 0 && s.warnings == 0);
	/* a too-small size is refused, a smaller known one accepted */
	struct sheaf_debug_objects_stats t = { .size = 8 };
	CHECK(sheaf_debug_objects_stats_get(&t) == -EINVAL);
}

int main(void)
{
	RUN(test_disabled); /* first: the parent has not touched the tracker yet */
	RUN(test_pool_from_env);
	return th_done();
}
