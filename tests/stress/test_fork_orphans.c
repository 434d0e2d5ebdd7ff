/* SPDX-License-Identifier: MIT */
/*
 * test_fork_orphans - per-thread mode (test_fork_orphans.env): a fork child drains the
 * sheaves of the threads the fork left behind exactly once, however many of its own
 * threads reach a slow path or sheaf_cache_shrink() at the same moment.
 *
 * Until 2026-11-29 drain_fork_orphans (src/percpu/percpu.c) picked an orphan under the
 * threads lock but unlinked it only later, inside its destruction: two threads of the
 * child took the same one and destroyed it twice (24-32 of 40 children died, double
 * frees of sheaf metadata reported; adversarial review).  The parent here holds 32
 * threads whose sheaves of 8 caches are full; each of 40 children starts 8 threads that
 * at once shrink or allocate from every cache, then checks the statistics: nothing in
 * any thread's sheaves but its own threads'.
 *
 * Sanitizer builds start no thread in the child (TSan does not support it; gcc 12's
 * libasan can hang there, test_fork_modes.c): one thread drains, which still checks
 * that every orphan's objects come back.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include <sheaf.h>
#include <sheaf_stats.h>

#define NC      8
#define HOLDERS 32
#define FORKS   40
#if SANITIZE_THREAD || SANITIZE_ADDRESS
#define CHILD_THREADS 0
#else
#define CHILD_THREADS 8
#endif

static struct sheaf_cache *caches[NC];
static pthread_barrier_t held, go;

static void *holder(void *arg)
{
	for (int k = 0; k < NC; k++) {
		void *v[200];
		for (int i = 0; i < 200; i++)
			v[i] = sheaf_cache_alloc(caches[k]);
		for (int i = 0; i < 200; i++)
			sheaf_cache_free(caches[k], v[i]);
	}
	pthread_barrier_wait(&held);
	pthread_barrier_wait(&go); /* until the parent is done forking */
	return arg;
}

/* Half the child's threads shrink every cache, half allocate and free in each. */
static void *child_thread(void *arg)
{
	long me = (long)arg;
	for (int k = 0; k < NC; k++) {
		if (me & 1) {
			sheaf_cache_shrink(caches[k]);
		} else {
			void *p = sheaf_cache_alloc(caches[k]);
			if (!p)
				return (void *)1;
			sheaf_cache_free(caches[k], p);
		}
	}
	return NULL;
}

static void child(void)
{
	alarm(30);
	pthread_t t[CHILD_THREADS + 1];
	long bad = 0;
	for (long i = 0; i < CHILD_THREADS; i++)
		if (pthread_create(&t[i], NULL, child_thread, (void *)i) != 0)
			_exit(2);
	for (int i = 0; i < CHILD_THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad += (long)r;
	}
	if (bad)
		_exit(3);
	/* Every orphan drained: after a shrink of each cache, no objects in sheaves of
	 * threads (this one's own were given back by the shrink too). */
	for (int k = 0; k < NC; k++) {
		sheaf_cache_shrink(caches[k]);
		struct sheaf_stats st = { .size = sizeof(st) };
		if (sheaf_stats_get(caches[k], &st) != 0 || st.objects_in_pcs != 0 ||
		    st.objects_inuse != st.objects_cached)
			_exit(4);
	}
	_exit(0);
}

static void test_fork_orphans(void)
{
	for (int k = 0; k < NC; k++) {
		char name[16];
		snprintf(name, sizeof(name), "orphans-%d", k);
		caches[k] = sheaf_cache_create(name, 64 + (size_t)k * 16, NULL);
		REQUIRE(caches[k]);
	}
	pthread_barrier_init(&held, NULL, HOLDERS + 1);
	pthread_barrier_init(&go, NULL, HOLDERS + 1);
	pthread_t t[HOLDERS];
	for (int i = 0; i < HOLDERS; i++)
		REQUIRE(pthread_create(&t[i], NULL, holder, NULL) == 0);
	pthread_barrier_wait(&held);
	for (int r = 0; r < FORKS; r++) {
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0)
			child();
		int st;
		waitpid(pid, &st, 0);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		       "child %d: status 0x%x (signal: a double destroy; 4: sheaves left)", r, st);
	}
	pthread_barrier_wait(&go);
	for (int i = 0; i < HOLDERS; i++)
		pthread_join(t[i], NULL);
	for (int k = 0; k < NC; k++)
		sheaf_cache_destroy(caches[k]);
}

/* A child that destroys a cache a lost thread used, before anything drained the orphans:
 * the destroy frees that thread's pcs of the cache, and until 2026-11-29 the orphan's
 * table still pointed at it, so the drain at the child's next slow path freed it again
 * ("invalid pointer: cache 'sheaf-meta-64' ... a double free?", abort). */
static pthread_barrier_t used, leave;

static void *user(void *arg)
{
	struct sheaf_cache **cs = arg;
	for (int k = 0; k < 2; k++) {
		void *v[100];
		for (int i = 0; i < 100; i++)
			v[i] = sheaf_cache_alloc(cs[k]);
		for (int i = 0; i < 100; i++)
			sheaf_cache_free(cs[k], v[i]);
	}
	pthread_barrier_wait(&used);
	pthread_barrier_wait(&leave);
	return NULL;
}

static void test_fork_child_destroys(void)
{
	struct sheaf_cache *cs[2] = { sheaf_cache_create("orphan-gone", 100, NULL),
				      sheaf_cache_create("orphan-kept", 64, NULL) };
	REQUIRE(cs[0] && cs[1]);
	pthread_barrier_init(&used, NULL, 2);
	pthread_barrier_init(&leave, NULL, 2);
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, user, cs) == 0);
	pthread_barrier_wait(&used);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		alarm(30);
		sheaf_cache_destroy(cs[0]);
		/* A new cache may take the id; a slow path drains the orphans. */
		struct sheaf_cache *e = sheaf_cache_create("orphan-new", 100, NULL);
		void *v[300];
		for (int i = 0; e && i < 300; i++)
			v[i] = sheaf_cache_alloc(e);
		for (int i = 0; e && i < 300; i++)
			sheaf_cache_free(e, v[i]);
		void *p = sheaf_cache_alloc(cs[1]);
		sheaf_cache_free(cs[1], p);
		sheaf_cache_destroy(e);
		sheaf_cache_destroy(cs[1]);
		_exit(e ? 0 : 2);
	}
	int st;
	waitpid(pid, &st, 0);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "child that destroyed a cache a lost thread used: status 0x%x", st);
	pthread_barrier_wait(&leave);
	pthread_join(t, NULL);
	sheaf_cache_destroy(cs[0]);
	sheaf_cache_destroy(cs[1]);
}

/* The same while another thread of the child drains the orphans: the drain took an
 * orphan off its list before it destroyed it, and a destroy in between found it on no
 * list, left its entry, freed the pcs, and the drain freed it again ("wrong cache:
 * cache 'sheaf-meta-64' ... free of an object of cache ...": 75-200 of 600 children,
 * until 2026-11-29).  Sanitizer builds: no thread in the child (see above), no race. */
#define DC     4
#define DH     32
#define DFORKS (CHILD_THREADS ? 600 : 40) /* 75-200 of 600 died before */
static struct sheaf_cache *dc[DC];
static pthread_barrier_t dheld, dgo, dstart;

static void *dholder(void *arg)
{
	for (int k = 0; k < DC; k++) {
		void *v[50];
		for (int i = 0; i < 50; i++)
			v[i] = sheaf_cache_alloc(dc[k]);
		for (int i = 0; i < 50; i++)
			sheaf_cache_free(dc[k], v[i]);
	}
	pthread_barrier_wait(&dheld);
	pthread_barrier_wait(&dgo);
	return arg;
}

static void *ddrain(void *arg)
{
	pthread_barrier_wait(&dstart);
	for (int k = 1; k < DC; k++) /* a slow path: the orphans are drained */
		sheaf_cache_free(dc[k], sheaf_cache_alloc(dc[k]));
	return arg;
}

static void destroy_child(int r)
{
	alarm(30);
	pthread_t d;
	pthread_barrier_init(&dstart, NULL, CHILD_THREADS ? 2 : 1);
	if (CHILD_THREADS && pthread_create(&d, NULL, ddrain, NULL) != 0)
		_exit(2);
	pthread_barrier_wait(&dstart);
	usleep((useconds_t)(r % 50));
	sheaf_cache_destroy(dc[0]);
	if (CHILD_THREADS)
		pthread_join(d, NULL);
	else
		ddrain(NULL);
	_exit(0);
}

static void test_fork_destroy_while_draining(void)
{
	for (int k = 0; k < DC; k++) {
		char name[24];
		snprintf(name, sizeof(name), "drain-race-%d", k);
		dc[k] = sheaf_cache_create(name, 64 + (size_t)k * 16, NULL);
		REQUIRE(dc[k]);
	}
	pthread_barrier_init(&dheld, NULL, DH + 1);
	pthread_barrier_init(&dgo, NULL, DH + 1);
	pthread_t t[DH];
	for (int i = 0; i < DH; i++)
		REQUIRE(pthread_create(&t[i], NULL, dholder, NULL) == 0);
	pthread_barrier_wait(&dheld);
	int bad = 0;
	for (int r = 0; r < DFORKS; r++) {
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0)
			destroy_child(r);
		int st;
		waitpid(pid, &st, 0);
		bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	CHECKF(bad == 0, "%d of %d children died destroying a cache while draining", bad, DFORKS);
	pthread_barrier_wait(&dgo);
	for (int i = 0; i < DH; i++)
		pthread_join(t[i], NULL);
	for (int k = 0; k < DC; k++)
		sheaf_cache_destroy(dc[k]);
}

int main(void)
{
	RUN(test_fork_orphans);
	RUN(test_fork_child_destroys);
	RUN(test_fork_destroy_while_draining);
	return th_done();
}
