/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_dlclose.c - liburcu's rule for libraries that use call_rcu(): no callback
 * may outlive the library's code.  sheaf_cache_destroy() waits only for its own cache
 * (D5) and leaves an orphaned grace-period ticket's callback queued in liburcu,
 * so libsheaf waits for its pending callbacks in its destructor.  This test dlopen()s
 * libsheaf.so, leaves callbacks pending (a destroyed cache's orphaned ticket, a live
 * cache's ticket, deferred page frees of a TYPESAFE_BY_RCU cache), dlclose()s it, and
 * then lets liburcu's worker run: a callback left behind would jump into unmapped code.
 *
 * liburcu itself cannot be unloaded once its call_rcu worker thread runs (the thread
 * executes liburcu's code), so the program keeps liburcu-memb loaded, as a program
 * that uses RCU does: it calls liburcu directly (registers this thread).
 */
#include <dlfcn.h>
#include <stdatomic.h>

#include <urcu/urcu-memb.h>

#include "harness.h"
#include "percpu/percpu.h"
#include "sheaf.h"

typedef struct sheaf_cache *(*create_fn)(const char *, size_t, const struct sheaf_cache_args *);

int main(void)
{
#if defined(__SANITIZE_THREAD__)
	/* TSan intercepts atexit() with its own list, which dlclose() does not prune: the
	 * exit handler libsheaf registers (statistics at exit, cache.c) would then run in
	 * unmapped code.  Nothing to do with RCU; the test runs in the other builds. */
	printf("1..0 # SKIP dlclose under TSan (its atexit interceptor outlives the library)\n");
	return 0;
#endif
	urcu_memb_register_thread(); /* this program uses liburcu itself: it stays loaded */
	const char *bindir = getenv("SHEAF_TEST_BINDIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/libsheaf.so", bindir ? bindir : ".");
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		/* Only when the shared library was not built (e.g. `ninja <this test>`). */
		printf("# skipped: %s\n1..0 # SKIP libsheaf.so not built\n", dlerror());
		return 0;
	}
	create_fn create = (create_fn)dlsym(h, "sheaf_cache_create");
	void *(*alloc)(struct sheaf_cache *) =
		(void *(*)(struct sheaf_cache *))dlsym(h, "sheaf_cache_alloc");
	void (*free_rcu)(struct sheaf_cache *, void *) =
		(void (*)(struct sheaf_cache *, void *))dlsym(h, "sheaf_cache_free_rcu");
	void (*destroy)(struct sheaf_cache *) =
		(void (*)(struct sheaf_cache *))dlsym(h, "sheaf_cache_destroy");
	void (*shrink)(struct sheaf_cache *) =
		(void (*)(struct sheaf_cache *))dlsym(h, "sheaf_cache_shrink");
	void (*cfree)(struct sheaf_cache *, void *) =
		(void (*)(struct sheaf_cache *, void *))dlsym(h, "sheaf_cache_free");
	REQUIRE(create && alloc && free_rcu && destroy && shrink && cfree);

	/* A cache destroyed with a ticket in flight: the barrier orphans it. */
	struct sheaf_cache_args a = { .sheaf_capacity = 4 };
	struct sheaf_cache *c = create("dl-rcu", 64, &a);
	REQUIRE(c);
	for (int i = 0; i < 200; i++)
		free_rcu(c, alloc(c));
	destroy(c);
	/* A live cache with tickets in flight. */
	struct sheaf_cache *d = create("dl-rcu-live", 64, &a);
	REQUIRE(d);
	for (int i = 0; i < 200; i++)
		free_rcu(d, alloc(d));
	/* Deferred page frees. */
	struct sheaf_cache_args t = { .flags = SHEAF_TYPESAFE_BY_RCU };
	struct sheaf_cache *e = create("dl-rcu-typesafe", 512, &t);
	REQUIRE(e);
	void *o[64];
	for (int i = 0; i < 64; i++)
		o[i] = alloc(e);
	for (int i = 0; i < 64; i++)
		cfree(e, o[i]);
	shrink(e);

	CHECK(dlclose(h) == 0);
	/* The test means something only if the library really left the address space. */
	FILE *m = fopen("/proc/self/maps", "r");
	char line[512];
	int mapped = 0;
	while (m && fgets(line, sizeof(line), m))
		mapped += strstr(line, "/libsheaf.so") != NULL;
	if (m)
		fclose(m);
	CHECKF(mapped == 0, "libsheaf.so still mapped after dlclose (%d mappings)", mapped);
	/* liburcu's worker runs its batches every 10 ms: give it several. */
	usleep(100 * 1000);
	CHECK(1); /* still alive */
	urcu_memb_unregister_thread();
	th_tests = 1;
	printf("%s 1 - callbacks finished before dlclose\n", th_fails ? "not ok" : "ok");
	return th_done();
}
