/* SPDX-License-Identifier: MIT */
/*
 * percpu_suite.h - the per-CPU sheaves stress suite (issue 4, done-when 2), shared by
 * test_percpu_stress.c (default mode: per-CPU with rseq where available),
 * test_percpu_stress_thread.c (SHEAF_PERCPU=thread) and test_percpu_stress_norseq.c
 * (GLIBC_TUNABLES=glibc.pthread.rseq=0).  A header of static functions rather than an
 * included .c, so each test compiles as one translation unit; each test file only says which mode it expects.
 *
 * What it does, with 4x and then 32x more threads than online CPUs:
 *   - every thread allocates batches, writes an owner tag into each object and checks
 *     it before freeing (an object handed out twice is caught);
 *   - a quarter of the objects go through a shared exchange table and are freed by
 *     another thread, usually on another CPU (cross-CPU frees);
 *   - threads change their CPU affinity in a loop (one CPU, then all) and call
 *     sched_yield inside the loop, so sequences are preempted and aborted and locks
 *     are taken on one CPU and released on another;
 *   - a shrinker thread shrinks the caches and reads exact statistics in a loop
 *     (per-CPU mode: remote lock + membarrier on every CPU, design §6);
 *   - the main thread forks while all this runs; each child allocates, frees,
 *     shrinks and checks conservation in its own copy;
 * and at the end the conservation check of the core must balance: every object is
 * free, slabs are all given back, allocations equal frees in the statistics.
 */
#ifndef SHEAF_TEST_PERCPU_SUITE_H
#define SHEAF_TEST_PERCPU_SUITE_H

#include "harness.h"
#include "cache/cache.h"
#include "percpu/percpu.h"

#include <pthread.h>
#include <sched.h>
#include <sheaf.h>
#include <sheaf_stats.h>
#include <stdatomic.h>
#include <time.h>

#define PS_NCACHES 2
#define PS_XSLOTS  1024
#define PS_BATCH   160

static struct sheaf_cache *ps_cache[PS_NCACHES];
static const size_t ps_size[PS_NCACHES] = { 64, 256 };
static _Atomic(uintptr_t) ps_xchg[PS_XSLOTS];
static atomic_int ps_bad, ps_stop;
static atomic_long ps_ops;
static int ps_ncpu = 1;
static long ps_budget_ops = 4000000; /* alloc+free pairs per phase, over all threads */

struct ps_obj {
	uint64_t tag;   /* thread << 40 | sequence */
	uint64_t check; /* tag * constant */
	uint32_t ci;    /* cache index */
};

static void ps_fill(struct ps_obj *o, unsigned ci, uint64_t tag)
{
	o->tag = tag;
	o->check = tag * 0x9E3779B97F4A7C15ull;
	o->ci = ci;
}

static void ps_free(struct ps_obj *o, uint64_t want_tag)
{
	if (o->check != o->tag * 0x9E3779B97F4A7C15ull || o->ci >= PS_NCACHES ||
	    (want_tag && o->tag != want_tag)) {
		atomic_fetch_add(&ps_bad, 1);
		return;
	}
	sheaf_cache_free(ps_cache[o->ci], o);
}

static void ps_set_affinity(uint64_t r)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (r & 1) {
		for (int i = 0; i < ps_ncpu; i++)
			CPU_SET(i, &set);
	} else {
		CPU_SET((int)((r >> 1) % (uint64_t)ps_ncpu), &set);
	}
	(void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

struct ps_arg {
	int id;
	long ops;
};

static void *ps_worker(void *argp)
{
	struct ps_arg *a = argp;
	uint64_t seed = 0x1234567ull + (uint64_t)a->id * 7919;
	uint64_t seq = 1;
	struct ps_obj *v[PS_BATCH];
	uint64_t tags[PS_BATCH];
	long done = 0;
	for (int it = 0; done < a->ops && !atomic_load_explicit(&ps_stop, memory_order_relaxed);
	     it++) {
		uint64_t r = th_rand(&seed);
		unsigned ci = (unsigned)(r % PS_NCACHES);
		unsigned n = 1 + (unsigned)((r >> 8) % PS_BATCH);
		for (unsigned i = 0; i < n; i++) {
			v[i] = sheaf_cache_alloc(ps_cache[ci]);
			if (!v[i]) {
				atomic_fetch_add(&ps_bad, 1);
				n = i;
				break;
			}
			tags[i] = ((uint64_t)(a->id + 1) << 40) | seq++;
			ps_fill(v[i], ci, tags[i]);
			if ((r >> 20) % 64 == 0 && i == n / 2)
				sched_yield(); /* preempt ourselves inside a burst */
		}
		for (unsigned i = 0; i < n; i++) {
			if (((r >> 30) + i) % 4 == 0) {
				/* Cross-CPU free: another thread frees it, we free theirs. */
				uintptr_t old = atomic_exchange(&ps_xchg[(r + i * 31) % PS_XSLOTS],
								(uintptr_t)v[i]);
				if (old)
					ps_free((struct ps_obj *)old, 0);
			} else {
				ps_free(v[i], tags[i]);
			}
		}
		if (it % 16 == 5)
			sched_yield();
		if (it % 32 == 7)
			ps_set_affinity(r >> 40);
		done += n;
	}
	atomic_fetch_add(&ps_ops, done);
	return NULL;
}

static void *ps_shrinker(void *arg)
{
	(void)arg;
	while (!atomic_load(&ps_stop)) {
		for (int i = 0; i < PS_NCACHES; i++) {
			sheaf_cache_shrink(ps_cache[i]);
			struct sheaf_stats st = { .size = sizeof(st) };
			sheaf_stats_get(ps_cache[i], &st);
		}
		usleep(500);
	}
	return NULL;
}

static void ps_conservation(const char *when, bool final)
{
	/* Per-thread mode: this thread's own fast-path operations are counted (and its
	 * cached objects seen by the gauge) once its sheaves are flushed; a no-op in
	 * per-CPU mode, where statistics lock every CPU and are exact. */
	sheaf_thread_flush();
	for (int i = 0; i < PS_NCACHES; i++) {
		struct sheaf_cache *c = ps_cache[i];
		struct sheaf_stats st = { .size = sizeof(st) };
		sheaf_stats_get(c, &st);
		uint64_t allocs =
			st.events[SHEAF_STAT_ALLOC_FASTPATH] + st.events[SHEAF_STAT_ALLOC_SLOWPATH];
		uint64_t frees =
			st.events[SHEAF_STAT_FREE_FASTPATH] + st.events[SHEAF_STAT_FREE_SLOWPATH];
		CHECKF(allocs == frees, "%s %s: allocs %llu frees %llu", when, st.name,
		       (unsigned long long)allocs, (unsigned long long)frees);
		CHECKF(st.objects_inuse ==
			       st.objects_in_pcs + st.objects_in_barns + st.rcu_inflight_objects,
		       "%s %s: inuse %llu = pcs %llu + barns %llu + rcu %llu", when, st.name,
		       (unsigned long long)st.objects_inuse, (unsigned long long)st.objects_in_pcs,
		       (unsigned long long)st.objects_in_barns,
		       (unsigned long long)st.rcu_inflight_objects);
		if (final) {
			sheaf_cache_shrink(c);
			sheaf_stats_get(c, &st);
			CHECKF(st.objects_inuse == 0 && st.slabs == 0 && st.objects_in_pcs == 0,
			       "%s %s after shrink: inuse %llu slabs %llu pcs %llu", when, st.name,
			       (unsigned long long)st.objects_inuse, (unsigned long long)st.slabs,
			       (unsigned long long)st.objects_in_pcs);
			CHECK(st.events[SHEAF_STAT_ALLOC_SLAB] == st.events[SHEAF_STAT_FREE_SLAB]);
			for (int n = 0; n < sheaf_g.nnodes; n++) {
				CHECK(sheaf_slab_node_is_valid(c->node[n]));
				CHECK(sheaf_barn_is_valid(c->node[n]->barn, c));
			}
		}
	}
}

/* In a child of fork taken while every worker runs: the child's copy works. */
static void ps_fork_child(void *arg)
{
	(void)arg;
	struct ps_obj *v[300];
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 300; i++) {
			v[i] = sheaf_cache_alloc(ps_cache[round & 1]);
			if (!v[i])
				_exit(3);
			ps_fill(v[i], (unsigned)(round & 1), (uint64_t)i + 1);
		}
		for (int i = 0; i < 300; i++)
			ps_free(v[i], (uint64_t)i + 1);
		sheaf_cache_shrink(ps_cache[round & 1]);
	}
	_exit(atomic_load(&ps_bad) ? 4 : 0);
}

static void ps_drain_exchange(void)
{
	for (int i = 0; i < PS_XSLOTS; i++) {
		uintptr_t o = atomic_exchange(&ps_xchg[i], 0);
		if (o)
			ps_free((struct ps_obj *)o, 0);
	}
}

static void ps_phase(int per_cpu, bool forks)
{
	int nthreads = per_cpu * ps_ncpu;
	pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
	struct ps_arg *args = calloc((size_t)nthreads, sizeof(*args));
	REQUIRE(t && args);
	atomic_store(&ps_stop, 0);
	atomic_store(&ps_ops, 0);
	pthread_t sh;
	REQUIRE(pthread_create(&sh, NULL, ps_shrinker, NULL) == 0);
	for (int i = 0; i < nthreads; i++) {
		args[i].id = i;
		args[i].ops = ps_budget_ops / nthreads + 1;
		REQUIRE(pthread_create(&t[i], NULL, ps_worker, &args[i]) == 0);
	}
	if (forks && !getenv("PS_NOFORK")) {
		for (int f = 0; f < 3; f++) {
			usleep(20000);
			struct th_child r;
			th_run_child(ps_fork_child, NULL, &r);
			CHECKF(r.exited && r.status == 0,
			       "fork child %d: exited %d status %d signaled %d sig %d: %s", f,
			       r.exited, r.status, r.signaled, r.sig, r.err);
		}
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	atomic_store(&ps_stop, 1);
	pthread_join(sh, NULL);
	ps_drain_exchange();
	CHECKF(atomic_load(&ps_bad) == 0, "%d bad objects", atomic_load(&ps_bad));
	char when[48];
	snprintf(when, sizeof(when), "%dx threads", per_cpu);
	ps_conservation(when, false);
	printf("# %s: %d threads, %ld objects, mode %s\n", when, nthreads, atomic_load(&ps_ops),
	       sheaf_percpu_mode());
	free(t);
	free(args);
}

static void ps_setup(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	ps_ncpu = n > 0 ? (int)n : 1;
	if (ps_ncpu > CPU_SETSIZE)
		ps_ncpu = CPU_SETSIZE;
	const char *s = getenv("SHEAF_TEST_SCALE");
	if (s && atoi(s) > 0)
		ps_budget_ops *= atoi(s);
	for (int i = 0; i < PS_NCACHES; i++) {
		char name[32];
		snprintf(name, sizeof(name), "percpu-stress-%zu", ps_size[i]);
		/* A small capacity so that refills, flushes and barn exchanges (the locked
		 * slow paths) are frequent, not just the fast paths. */
		struct sheaf_cache_args a = { .sheaf_capacity = 16 };
		ps_cache[i] = sheaf_cache_create(name, ps_size[i], &a);
		REQUIRE(ps_cache[i]);
	}
}

static void test_4x_threads(void)
{
	ps_phase(4, true);
}
static void test_32x_threads(void)
{
	ps_phase(32, false);
}

static void test_final_conservation(void)
{
	ps_conservation("final", true);
	for (int i = 0; i < PS_NCACHES; i++)
		sheaf_cache_destroy(ps_cache[i]);
}

/* Run the suite; @want_percpu: the mode this test file expects. */
static int ps_main(bool want_percpu, const char *why)
{
	ps_setup();
	bool is_percpu = !strcmp(sheaf_percpu_mode(), "percpu-rseq");
	CHECKF(is_percpu == want_percpu, "mode %s, expected %s (%s)", sheaf_percpu_mode(),
	       want_percpu ? "percpu-rseq" : "per-thread", why);
	printf("# mode %s: %s\n", sheaf_percpu_mode(), sheaf_percpu_mode_reason());
	RUN(test_4x_threads);
	RUN(test_32x_threads);
	RUN(test_final_conservation);
	return th_done();
}

#endif /* SHEAF_TEST_PERCPU_SUITE_H */
