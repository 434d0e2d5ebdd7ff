/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_threads.c - the malloc front end across threads and fork
 * (the fork and thread-exit pitfalls of replacement mallocs): fork from a process with 8 busy threads, then
 * allocation in the child (every front-end and core lock must be free
 * there); threads that exit holding objects that others free later;
 * concurrent first use of the classes (lazy cache creation) and cross-thread
 * frees of small and large blocks.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "harness.h"
#include <sheaf.h>
#include <sheaf_stats.h>
#include "malloc/malloc.h"
#include "malloc/sizeclass.h"

static atomic_int stop;

/* Random sizes over every kind of block, with frees of the thread's own. */
static void *busy(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
	void *slot[64] = { 0 };
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t r = th_rand(&seed);
		unsigned k = (unsigned)(r >> 58);
		sheaf_free(slot[k]);
		size_t n;
		switch ((r >> 8) & 7) {
		case 0:
			n = (r >> 12) % 200000; /* extents too */
			break;
		case 1:
			n = (r >> 12) % SHEAF_SC_MAX;
			break;
		default:
			n = (r >> 12) % 512;
		}
		slot[k] = ((r >> 16) & 15) == 0 ?
				  sheaf_aligned_alloc((size_t)1 << ((r >> 20) % 13), n) :
				  sheaf_malloc(n);
		if (slot[k] && n)
			memset(slot[k], (int)k, n < 128 ? n : 128);
	}
	for (int i = 0; i < 64; i++)
		sheaf_free(slot[i]);
	return NULL;
}

static void child_work(void)
{
	alarm(30); /* a lock inherited held would hang: fail instead */
	static void *v[3000];
	for (int i = 0; i < 3000; i++) {
		size_t n = (size_t)(i * 131) % 70000 + 1;
		v[i] = sheaf_malloc(n);
		if (!v[i])
			_exit(3);
		memset(v[i], 5, n < 256 ? n : 256);
	}
	for (int i = 0; i < 3000; i++)
		sheaf_free(v[i]);
	/* A class possibly never used before the fork: creation works. */
	void *a = sheaf_aligned_alloc(2048, 5000);
	if (!a)
		_exit(4);
	sheaf_free(a);
#if !SANITIZE_THREAD && !SANITIZE_ADDRESS
	/* A thread in the child allocates too.  Skipped under ThreadSanitizer (it
	 * cannot start threads after a multi-threaded fork) and AddressSanitizer
	 * (gcc 12's libasan does not hold its allocator locks across fork: the
	 * child's pthread_create deadlocked in ASan's calloc on a lock a parent
	 * thread held at the fork, one run in about 15, with or without Sheaf's
	 * reaper thread). */
	pthread_t t;
	atomic_store(&stop, 0);
	if (pthread_create(&t, NULL, busy, (void *)77) != 0)
		_exit(5);
	usleep(2000);
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
#endif
	_exit(0);
}

static void t_fork_with_busy_threads(void)
{
	pthread_t t[8];
	atomic_store(&stop, 0);
	for (int i = 0; i < 8; i++)
		REQUIRE(pthread_create(&t[i], NULL, busy, (void *)(uintptr_t)(i + 1)) == 0);
	usleep(10000);
	int ok = 0, rounds = 30;
	for (int r = 0; r < rounds; r++) {
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0)
			child_work();
		int st = 0;
		waitpid(pid, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			ok++;
		else
			fprintf(stderr, "# fork round %d: status 0x%x\n", r, st);
		usleep(1000);
	}
	CHECK(ok == rounds);
	atomic_store(&stop, 1);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
}

/* ---- thread exit ---------------------------------------------------------------- */

#define NPROD 6
#define NOBJ  4000
static void *objs[NPROD][NOBJ];

static void *producer(void *arg)
{
	void **v = arg;
	for (int i = 0; i < NOBJ; i++) {
		size_t n = (size_t)(i % 61) * 16 + 1 + (i % 211 == 0 ? 60000 : 0);
		v[i] = sheaf_malloc(n);
		if (v[i])
			memset(v[i], i & 0xff, n);
	}
	/* Free a third itself, so its sheaves hold objects when it exits. */
	for (int i = 0; i < NOBJ; i += 3) {
		sheaf_free(v[i]);
		v[i] = NULL;
	}
	return NULL;
}

static void *consumer(void *arg)
{
	void **v = arg;
	size_t bad = 0;
	for (int i = 0; i < NOBJ; i++) {
		if (!v[i])
			continue;
		bad += *(unsigned char *)v[i] != (unsigned char)(i & 0xff);
		sheaf_free(v[i]);
	}
	return (void *)bad;
}

static void t_thread_exit_then_others_free(void)
{
	for (int round = 0; round < 3; round++) {
		pthread_t t[NPROD];
		for (int i = 0; i < NPROD; i++)
			REQUIRE(pthread_create(&t[i], NULL, producer, objs[i]) == 0);
		for (int i = 0; i < NPROD; i++)
			pthread_join(t[i], NULL);
		/* The producers are gone; other threads free their objects. */
		for (int i = 0; i < NPROD; i++)
			REQUIRE(pthread_create(&t[i], NULL, consumer, objs[(i + 1) % NPROD]) == 0);
		size_t bad = 0;
		for (int i = 0; i < NPROD; i++) {
			void *r;
			pthread_join(t[i], &r);
			bad += (size_t)r;
		}
		CHECK(bad == 0);
	}
	/* And the memory is handed out again. */
	void *v[2000];
	for (int i = 0; i < 2000; i++)
		CHECK((v[i] = sheaf_malloc(40)) != NULL);
	for (int i = 0; i < 2000; i++)
		sheaf_free(v[i]);
}

/* ---- concurrent first use and cross-thread frees ----------------------------------- */

#define RING 1024
struct ring {
	void *_Atomic slot[RING];
};
static struct ring rings[2];

static void *ping(void *arg)
{
	int me = (int)(uintptr_t)arg;
	struct ring *out = &rings[me], *in = &rings[1 - me];
	uint64_t seed = 1234 + (uint64_t)me;
	for (int i = 0; i < 200000; i++) {
		unsigned k = (unsigned)(i % RING);
		uint64_t r = th_rand(&seed);
		size_t n = (r & 31) == 0 ? 40000 + (r >> 40) % 100000 : (r >> 40) % 3000;
		void *p = sheaf_malloc(n);
		if (p)
			*(volatile char *)p = 1;
		void *old = atomic_exchange(&out->slot[k], p);
		sheaf_free(old); /* allocated by this thread, long ago */
		void *theirs = atomic_exchange(&in->slot[(k + 7) % RING], NULL);
		sheaf_free(theirs); /* allocated by the other thread */
	}
	return NULL;
}

static void t_cross_thread(void)
{
	pthread_t a, b;
	REQUIRE(pthread_create(&a, NULL, ping, (void *)0) == 0);
	REQUIRE(pthread_create(&b, NULL, ping, (void *)1) == 0);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < RING; k++)
			sheaf_free(atomic_exchange(&rings[r].slot[k], NULL));
	struct sheaf_malloc_counters c;
	sheaf_malloc_counters_get(&c);
	CHECK(c.errors == 0);
}

/* realloc of large blocks that moves them, racing with other threads' large mallocs:
 * every block keeps its size and its bytes.  Until 2026-11-29 a moving realloc took its
 * block out of the extent registry only after mremap had unmapped the old address, which
 * another thread's mmap could get and register meanwhile: the registry then held the
 * address twice, and the block that got it was left with the old one's length (usable
 * size too small, contents lost, a crash; adversarial run). */
static atomic_int rr_stop, rr_bad;
static void *rr_worker(void *arg)
{
	uint64_t seed = 17 + (uint64_t)(uintptr_t)arg * 1009;
	char *p[8] = { 0 };
	size_t sz[8] = { 0 };
	while (!atomic_load_explicit(&rr_stop, memory_order_relaxed)) {
		unsigned k = (unsigned)(th_rand(&seed) % 8);
		size_t n = 65537 + th_rand(&seed) % 400000;
		if (!p[k]) {
			p[k] = sheaf_malloc(n);
			if (!p[k]) {
				atomic_fetch_add(&rr_bad, 1);
				break;
			}
		} else if (th_rand(&seed) % 4 == 0) {
			sheaf_free(p[k]);
			p[k] = NULL;
			continue;
		} else {
			char *q = sheaf_realloc(p[k], n);
			if (!q || sheaf_usable_size(q) < n ||
			    (n >= sz[k] && q[sz[k] - 1] != (char)sz[k])) {
				atomic_fetch_add(&rr_bad, 1);
				break;
			}
			p[k] = q;
		}
		sz[k] = n;
		p[k][n - 1] = (char)n;
	}
	for (int k = 0; k < 8; k++)
		sheaf_free(p[k]);
	return NULL;
}
static void t_realloc_race(void)
{
	pthread_t t[4];
	for (uintptr_t i = 0; i < 4; i++)
		REQUIRE(pthread_create(&t[i], NULL, rr_worker, (void *)i) == 0);
	struct timespec d = { 1, 500000000 }; /* 1.5 s: the race showed within 0.1 s */
	nanosleep(&d, NULL);
	atomic_store(&rr_stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECKF(atomic_load(&rr_bad) == 0, "%d threads saw a realloc'd block lose its size or bytes",
	       atomic_load(&rr_bad));
}

/* A thread that allocates and frees in a key destructor of its own, re-armed every
 * round until glibc stops calling it (after Sheaf's destructor has drained the thread's
 * sheaves, as glibc itself does when it frees a thread's dlerror string after every
 * destructor): what it caches then must not be stranded.  Until 2026-11-29 such a call
 * made the thread a new tcache that no destructor ever drained, 9 KiB and more a thread
 * in per-thread mode (adversarial run). */
static pthread_key_t late_key;
static void late_destructor(void *v)
{
	void *p[16];
	for (int i = 0; i < 16; i++)
		p[i] = sheaf_malloc(200);
	for (int i = 0; i < 16; i++)
		sheaf_free(p[i]);
	pthread_setspecific(late_key, v); /* again, until the rounds run out */
}
static void *late_thread(void *arg)
{
	(void)arg;
	sheaf_free(sheaf_malloc(200)); /* the thread's sheaves exist */
	pthread_setspecific(late_key, (void *)1);
	return NULL;
}
static void t_exit_late_frees(void)
{
	REQUIRE(pthread_key_create(&late_key, late_destructor) == 0);
	void *probe = sheaf_malloc(200);
	REQUIRE(probe != NULL);
	struct sheaf_cache *c = sheaf_cache_of(probe);
	sheaf_free(probe);
	REQUIRE(c != NULL);
	for (int i = 0; i < 200; i++) {
		pthread_t t;
		REQUIRE(pthread_create(&t, NULL, late_thread, NULL) == 0);
		pthread_join(t, NULL);
	}
	struct sheaf_stats st = { .size = sizeof(st) };
	REQUIRE(sheaf_stats_get(c, &st) == 0);
	printf("# %s mode: %llu objects in per-CPU/thread sheaves, %llu slots\n",
	       sheaf_percpu_mode(), (unsigned long long)st.objects_in_pcs,
	       (unsigned long long)st.percpu_slots);
	/* Per-thread mode: only this thread's own sheaves remain (one pcs); per-CPU mode
	 * keeps sheaves per CPU, never per thread. */
	if (strcmp(sheaf_percpu_mode(), "percpu-rseq"))
		CHECKF(st.percpu_slots <= 1, "%llu thread caches left after 200 exited threads",
		       (unsigned long long)st.percpu_slots);
	pthread_key_delete(late_key);
}

int main(void)
{
	/* Before any other use: several threads race to create the classes. */
	RUN(t_cross_thread);
	RUN(t_thread_exit_then_others_free);
	RUN(t_fork_with_busy_threads);
	RUN(t_exit_late_frees);
	RUN(t_realloc_race);
	return th_done();
}
