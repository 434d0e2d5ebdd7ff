/* SPDX-License-Identifier: MIT */
/*
 * test_init_race - 16 threads make their first call into Sheaf at the same moment, in
 * fresh processes (issue 13; docs/locking.md, initialisation).
 *
 * The driver runs this program again PROCS times for each way in:
 *   - "object": each thread's first call is sheaf_cache_create (half of them) or a
 *     sheaf_cache_alloc on a cache made by the first creator (the others wait on it),
 *   - "malloc": each thread's first call is sheaf_malloc (linked front end),
 *   - "preload": the same with plain malloc under LD_PRELOAD=libsheaf-malloc.so, where
 *     the loader and libc start Sheaf first but the class caches are created by the
 *     racing threads (when the preload library is built and no sanitizer is in the way).
 * Every thread then allocates, checks and frees; the process checks the statistics and
 * destroys its caches without a leak report, and exits 0.  Before the fix the state was
 * published before the metadata caches existed, so a second thread could allocate its
 * metadata elsewhere and free it into a metadata cache (a foreign pointer).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_malloc.h"

#define THREADS 16
#if SANITIZE_THREAD || SANITIZE_ADDRESS || SHEAF_DEBUG >= 1
#define PROCS 25
#else
#define PROCS 100
#endif

static pthread_barrier_t start;
static const char *way;
static struct sheaf_cache *_Atomic shared;
static atomic_int bad;

static void *racer(void *arg)
{
	int id = (int)(intptr_t)arg;
	void *v[64];
	struct sheaf_cache *mine = NULL, *c;
	pthread_barrier_wait(&start);
	if (!strcmp(way, "object")) {
		if (id % 2 == 0) {
			char name[32];
			snprintf(name, sizeof(name), "race-%d", id);
			mine = sheaf_cache_create(name, 48 + (size_t)id * 8, NULL);
			if (!mine) {
				atomic_store(&bad, 1);
				return NULL;
			}
			if (id == 0)
				atomic_store(&shared, mine);
			c = mine;
		} else {
			while (!(c = atomic_load(&shared)))
				sched_yield();
		}
		for (int i = 0; i < 64; i++) {
			v[i] = sheaf_cache_alloc(c);
			if (!v[i]) {
				atomic_store(&bad, 2);
				return NULL;
			}
			memset(v[i], id, 48);
		}
		for (int i = 0; i < 64; i++) {
			unsigned char *p = v[i];
			if (p[0] != (unsigned char)id || p[47] != (unsigned char)id)
				atomic_store(&bad, 3);
			sheaf_cache_free(c, v[i]);
		}
		if (mine && mine != atomic_load(&shared)) {
			sheaf_cache_destroy(mine); /* reports a leak if an object went missing */
		}
		return NULL;
	}
	bool linked = !strcmp(way, "malloc");
	for (int i = 0; i < 64; i++) {
		size_t sz = 8 + (size_t)((id * 64 + i) * 37 % 3000);
		v[i] = linked ? sheaf_malloc(sz) : malloc(sz);
		if (!v[i]) {
			atomic_store(&bad, 4);
			return NULL;
		}
		memset(v[i], id, sz < 16 ? sz : 16);
	}
	for (int i = 0; i < 64; i++) {
		if (((unsigned char *)v[i])[0] != (unsigned char)id)
			atomic_store(&bad, 5);
		if (linked)
			sheaf_free(v[i]);
		else
			free(v[i]);
	}
	return NULL;
}

static int run(const char *w)
{
	alarm(30);
	way = w;
	pthread_barrier_init(&start, NULL, THREADS);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, racer, (void *)(intptr_t)i) != 0)
			return 2;
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	if (atomic_load(&bad))
		return 10 + atomic_load(&bad);
	struct sheaf_cache *c = atomic_load(&shared);
	if (c)
		sheaf_cache_destroy(c);
	return 0;
}

static int spawn(const char *w, const char *preload)
{
	fflush(NULL);
	pid_t p = fork();
	if (p == 0) {
		if (preload)
			setenv("LD_PRELOAD", preload, 1);
		setenv("SHEAF_HEAP_GB", "1", 1);
		execl("/proc/self/exe", "test_init_race", "run", w, (char *)NULL);
		_exit(127);
	}
	int st;
	if (p < 0 || waitpid(p, &st, 0) != p)
		return -1;
	return st;
}

static void many(const char *w, const char *preload)
{
	int failed = 0;
	for (int i = 0; i < PROCS; i++) {
		int st = spawn(w, preload);
		if (st != 0 && failed++ < 5)
			fprintf(stderr, "# %s: process %d: status %#x\n", w, i, st);
	}
	CHECKF(failed == 0, "%s: %d of %d processes failed", w, failed, PROCS);
	printf("%s %d - %s: %d fresh processes, %d threads' first calls at once\n",
	       failed ? "not ok" : "ok", ++th_tests, w, PROCS, THREADS);
}

int main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[1], "run"))
		return run(argv[2]);
	many("object", NULL);
	many("malloc", NULL);
#if !SANITIZE_THREAD && !SANITIZE_ADDRESS
	/* Set by tests/CMakeLists.txt whenever the preload library is built. */
	const char *lib = getenv("SHEAF_TEST_PRELOAD");
	struct stat sb;
	if (lib) {
		CHECKF(stat(lib, &sb) == 0, "SHEAF_TEST_PRELOAD=%s does not exist", lib);
		many("preload", lib);
	} else {
		printf("# libsheaf-malloc.so not built: preload runs skipped\n");
	}
#endif
	printf("1..%d\n", th_tests);
	return th_fails ? 1 : 0;
}
