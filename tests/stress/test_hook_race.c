/* SPDX-License-Identifier: MIT */
/*
 * The free-check hook is read by every per-thread free while another thread installs
 * it: the debug-objects tracker sets it on its first tracked object.  Two threads free
 * and allocate objects of a cache in per-thread mode (the .env) while the main thread
 * starts tracking.  Under TSan the plain read of the hook in the per-thread push was a
 * data race with the hook's atomic store (found 2026-11-29; now
 * sheaf_free_check_hook_get, percpu/percpu.h); in every build the test also checks that
 * a tracked object freed after the hook is set is reported as freed while active (the
 * hook sees every free once set, in the thread that frees too).
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sheaf.h>
#include <sheaf_debug.h>
#include <time.h>

static struct sheaf_cache *cache;
static atomic_int stop;
static atomic_int fixups;

static bool fixup_free(void *addr, enum sheaf_debug_state state)
{
	(void)addr;
	(void)state;
	atomic_fetch_add(&fixups, 1);
	return true;
}

static const struct sheaf_debug_obj_descr descr = {
	.name = "hook_race",
	.fixup_free = fixup_free,
};

static void *churn(void *arg)
{
	(void)arg;
	void *v[64];
	while (!atomic_load(&stop)) {
		for (int i = 0; i < 64; i++)
			v[i] = sheaf_cache_alloc(cache);
		for (int i = 0; i < 64; i++)
			sheaf_cache_free(cache, v[i]);
	}
	return NULL;
}

static void test_hook_set_while_freeing(void)
{
	cache = sheaf_cache_create("hook-race", 64, NULL);
	REQUIRE(cache != NULL);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_create(&t[i], NULL, churn, NULL) == 0);
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	/* The first tracked object installs the hook while the threads free. */
	void *o = sheaf_cache_alloc(cache);
	REQUIRE(o != NULL);
	sheaf_debug_object_init(o, &descr);
	REQUIRE(sheaf_debug_object_activate(o, &descr) == 0);
	nanosleep(&ts, NULL);
	sheaf_cache_free(cache, o); /* active: the hook reports it and calls the fix-up */
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_join(t[i], NULL) == 0);
	CHECK(atomic_load(&fixups) == 1);
	sheaf_cache_destroy(cache);
}

int main(void)
{
	RUN(test_hook_set_while_freeing);
	return th_done();
}
