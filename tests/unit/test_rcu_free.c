/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_free.c - RCU-deferred free (docs/rcu.md, D5; issue 5): the per-cache
 * barrier and its statistics, contents kept until the grace period, destroy with
 * frees in flight, thread exit with a partly filled rcu_free sheaf, the batched
 * fallback, flavour selection and misuse.  Readers use liburcu's memb flavour
 * (Sheaf's default), linked through test_rcu_free.libs.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <urcu/urcu-memb.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_stats.h"

#define MAGIC 0x5eafc0ffee15900dull

struct obj {
	uint64_t canary; /* MAGIC ^ (uintptr_t)self while owned or waiting for a grace period */
	uint64_t payload[7];
};

static void obj_fill(struct obj *o)
{
	o->canary = MAGIC ^ (uint64_t)(uintptr_t)o;
	for (int i = 0; i < 7; i++)
		o->payload[i] = (uint64_t)(uintptr_t)o + (uint64_t)i;
}

static int obj_intact(const struct obj *o)
{
	if (o->canary != (MAGIC ^ (uint64_t)(uintptr_t)o))
		return 0;
	for (int i = 0; i < 7; i++)
		if (o->payload[i] != (uint64_t)(uintptr_t)o + (uint64_t)i)
			return 0;
	return 1;
}

static struct sheaf_stats stats(struct sheaf_cache *c)
{
	struct sheaf_stats st = { .size = sizeof(st) };
	sheaf_stats_get(c, &st);
	return st;
}

static struct sheaf_cache *mk(const char *name, unsigned cap, unsigned flags)
{
	struct sheaf_cache_args a = { .sheaf_capacity = cap, .flags = flags };
	struct sheaf_cache *c = sheaf_cache_create(name, sizeof(struct obj), &a);
	REQUIRE(c != NULL);
	return c;
}

/* Every earlier free_rcu object is back in the allocator: nothing waits for a grace
 * period, and once the caller's sheaves and the barns are flushed to slabs (shrink),
 * the slabs count exactly the objects the program holds.  (The pcs gauge alone is a
 * snapshot "at last unlock", stale after fast-path operations, so it cannot balance
 * exactly; shrink makes the count exact.) */
static void check_balance(struct sheaf_cache *c, uint64_t held)
{
	sheaf_cache_shrink(c);
	struct sheaf_stats st = stats(c);
	CHECKF(st.rcu_inflight_objects == 0 && st.rcu_inflight_sheaves == 0, "rcu %llu/%llu",
	       (unsigned long long)st.rcu_inflight_objects,
	       (unsigned long long)st.rcu_inflight_sheaves);
	CHECKF(st.objects_inuse == held, "inuse %llu held %llu (pcs %llu barns %llu)",
	       (unsigned long long)st.objects_inuse, (unsigned long long)held,
	       (unsigned long long)st.objects_in_pcs, (unsigned long long)st.objects_in_barns);
}

/* Scenarios that need a fresh process (options are read once; liburcu's call_rcu
 * worker does not survive fork) run in a re-executed copy of this test. */
static const char *self_exe;

struct child_req {
	const char *name, *env;
};

static void exec_child(void *arg)
{
	struct child_req *q = arg;
	if (q->env)
		putenv((char *)q->env);
	execl(self_exe, self_exe, q->name, (char *)NULL);
	_exit(127);
}

static void run_child(const char *name, const char *env, struct th_child *r)
{
	struct child_req q = { name, env };
	th_run_child(exec_child, &q, r);
}

/* ---- A reader that holds a read-side critical section until told to leave ----- */

struct holder {
	pthread_t t;
	atomic_int inside, leave;
};

static void *holder_main(void *arg)
{
	struct holder *h = arg;
	urcu_memb_register_thread();
	urcu_memb_read_lock();
	atomic_store(&h->inside, 1);
	while (!atomic_load(&h->leave))
		usleep(1000);
	urcu_memb_read_unlock();
	urcu_memb_unregister_thread();
	return NULL;
}

static void holder_start(struct holder *h)
{
	memset(h, 0, sizeof(*h));
	REQUIRE(pthread_create(&h->t, NULL, holder_main, h) == 0);
	while (!atomic_load(&h->inside))
		usleep(100);
}

static void holder_stop(struct holder *h)
{
	atomic_store(&h->leave, 1);
	pthread_join(h->t, NULL);
}

struct barrier_arg {
	struct sheaf_cache *c;
	atomic_int done;
};

static void *barrier_main(void *arg)
{
	struct barrier_arg *b = arg;
	sheaf_cache_rcu_barrier(b->c);
	atomic_store(&b->done, 1);
	return NULL;
}

/* ---- Tests ------------------------------------------------------------------------ */

/* After sheaf_cache_rcu_barrier() every earlier free_rcu object is back: nothing in
 * flight, every submitted sheaf completed, objects accounted for. */
static void test_barrier_stats(void)
{
	struct sheaf_cache *c = mk("rcu-stats", 8, 0);
	enum {
		N = 1000,
		F = 701
	};
	static void *o[N];
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
	}
	for (int i = 0; i < F; i++)
		sheaf_cache_free_rcu(c, o[i]);
	struct sheaf_stats st = stats(c);
	CHECK(st.events[SHEAF_STAT_FREE_RCU_SHEAF] + st.events[SHEAF_STAT_FREE_RCU_SHEAF_FAIL] ==
	      F);
	CHECK(st.rcu_inflight_objects > 0); /* at least the partly filled sheaf (701 % 8) */
	sheaf_cache_rcu_barrier(c);
	st = stats(c);
	CHECKF(st.rcu_inflight_objects == 0, "%llu", (unsigned long long)st.rcu_inflight_objects);
	CHECK(st.rcu_inflight_sheaves == 0);
	CHECK(st.events[SHEAF_STAT_RCU_SHEAF_QUEUED] == st.events[SHEAF_STAT_RCU_SHEAF_DONE]);
	CHECK(st.events[SHEAF_STAT_RCU_SHEAF_QUEUED] >= F / 8);
	check_balance(c, N - F);
	/* The returned objects are reusable: the barn hands back full sheaves. */
	for (int i = 0; i < F; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
	}
	check_balance(c, N);
	for (int i = 0; i < N; i++)
		sheaf_cache_free(c, o[i]);
	check_balance(c, 0);
	/* Nothing in flight: the barrier returns even while a reader holds on. */
	struct holder h;
	holder_start(&h);
	sheaf_cache_rcu_barrier(c);
	CHECK(stats(c).rcu_inflight_objects == 0);
	holder_stop(&h);
	sheaf_cache_destroy(c);
}

/* Objects keep their contents and are not handed out again while a reader that may
 * see them is inside; the barrier waits for that reader. */
static void test_no_reuse_before_gp(void)
{
	struct sheaf_cache *c = mk("rcu-noreuse", 8, 0);
	enum {
		N = 203
	};
	static struct obj *o[N];
	static void *again[4 * N];
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
		obj_fill(o[i]);
	}
	struct holder h;
	holder_start(&h);
	for (int i = 0; i < N; i++)
		sheaf_cache_free_rcu(c, o[i]);
	struct barrier_arg b = { .c = c };
	pthread_t bt;
	REQUIRE(pthread_create(&bt, NULL, barrier_main, &b) == 0);
	/* Allocate a lot meanwhile: none of it may be an object still waiting. */
	int bad = 0;
	for (int i = 0; i < 4 * N; i++) {
		again[i] = sheaf_cache_alloc(c);
		REQUIRE(again[i]);
		for (int j = 0; j < N; j++)
			bad += again[i] == (void *)o[j];
	}
	CHECKF(bad == 0, "%d objects reused before the grace period", bad);
	usleep(100 * 1000);
	CHECKF(!atomic_load(&b.done), "barrier returned while a reader was inside");
	int intact = 0;
	for (int i = 0; i < N; i++)
		intact += obj_intact(o[i]);
	CHECKF(intact == N, "%d of %d objects changed before the grace period", N - intact, N);
	CHECK(stats(c).rcu_inflight_objects == N);
	holder_stop(&h);
	pthread_join(bt, NULL);
	CHECK(atomic_load(&b.done));
	CHECK(stats(c).rcu_inflight_objects == 0);
	check_balance(c, 4 * N);
	for (int i = 0; i < 4 * N; i++)
		sheaf_cache_free(c, again[i]);
	sheaf_cache_destroy(c);
}

/* D5: a cache's barrier flushes only that cache's rcu_free sheaves. */
static void test_barrier_is_per_cache(void)
{
	struct sheaf_cache *a = mk("rcu-a", 8, 0), *b = mk("rcu-b", 8, 0);
	void *oa[5], *ob[5];
	for (int i = 0; i < 5; i++) {
		oa[i] = sheaf_cache_alloc(a);
		ob[i] = sheaf_cache_alloc(b);
		REQUIRE(oa[i] && ob[i]);
	}
	for (int i = 0; i < 5; i++) {
		sheaf_cache_free_rcu(a, oa[i]);
		sheaf_cache_free_rcu(b, ob[i]);
	}
	uint64_t qb = stats(b).events[SHEAF_STAT_RCU_SHEAF_QUEUED];
	sheaf_cache_rcu_barrier(a);
	CHECK(stats(a).rcu_inflight_objects == 0);
	CHECK(stats(b).rcu_inflight_objects == 5);
	CHECK(stats(b).events[SHEAF_STAT_RCU_SHEAF_QUEUED] == qb); /* b's partial sheaf untouched */
	sheaf_cache_destroy(a);
	CHECK(stats(b).rcu_inflight_objects == 5);
	/* The global barrier flushes everything. */
	sheaf_rcu_barrier();
	CHECK(stats(b).rcu_inflight_objects == 0);
	CHECK(stats(b).events[SHEAF_STAT_RCU_SHEAF_QUEUED] == qb + 1);
	sheaf_cache_destroy(b);
}

/* The same with SHEAF_RCU_BARRIER=global (a child: options are read once): the cache
 * barrier then flushes every cache, like kvfree_rcu_barrier() before seed 000. */
static void global_mode_child(void)
{
	struct sheaf_cache *a = mk("rcu-ga", 8, 0), *b = mk("rcu-gb", 8, 0);
	void *oa = sheaf_cache_alloc(a), *ob = sheaf_cache_alloc(b);
	sheaf_cache_free_rcu(a, oa);
	sheaf_cache_free_rcu(b, ob);
	sheaf_cache_rcu_barrier(a);
	int ok = stats(a).rcu_inflight_objects == 0 && stats(b).rcu_inflight_objects == 0 &&
		 stats(b).events[SHEAF_STAT_RCU_SHEAF_QUEUED] == 1;
	sheaf_cache_destroy(a);
	sheaf_cache_destroy(b);
	_exit(ok ? 0 : 3);
}

static void test_global_mode(void)
{
	struct th_child r;
	run_child("global", "SHEAF_RCU_BARRIER=global", &r);
	CHECKF(r.exited && r.status == 0, "status %d: %s", r.status, r.err);
}

/* Destroy with deferred frees in flight (full sheaves submitted, a partial one, a
 * fallback batch) waits for them, then loses and leaks nothing. */
static void destroy_round(void)
{
	struct sheaf_cache *c = mk("rcu-destroy", 8, 0);
	struct sheaf_cache *fb = mk("rcu-destroy-nosheaves", 0, SHEAF_NO_SHEAVES);
	enum {
		N = 3000
	};
	static void *o[N], *p[N];
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		p[i] = sheaf_cache_alloc(fb);
		if (!o[i] || !p[i])
			_exit(4);
	}
	for (int i = 0; i < N; i++) {
		sheaf_cache_free_rcu(c, o[i]);
		sheaf_cache_free_rcu(fb, p[i]);
	}
	/* In flight: full sheaves submitted, a partial sheaf, batches and a partial batch. */
	if (stats(c).rcu_inflight_objects == 0 || stats(fb).rcu_inflight_objects == 0)
		_exit(5);
	if (stats(fb).events[SHEAF_STAT_FREE_RCU_SHEAF_FAIL] != N ||
	    !stats(fb).events[SHEAF_STAT_RCU_FALLBACK_BATCH])
		_exit(6);
	sheaf_cache_destroy(c);
	sheaf_cache_destroy(fb);
}

/* Destroy reports leaks itself ("still allocated", checked by the parent).  The page
 * heap also holds the metadata caches' slabs, whose level depends on how many sheaves
 * and batches happened to be in flight at once; slab memory of the program's caches is
 * heap_mapped - meta_bytes, which must be back where it started after every round. */
static long long user_bytes(void)
{
	struct sheaf_global_stats g = { .size = sizeof(g) };
	sheaf_global_stats_get(&g);
	return (long long)g.heap_mapped - (long long)g.meta_bytes;
}

static void destroy_child(void)
{
	struct sheaf_global_stats g0 = { .size = sizeof(g0) }, g1 = { .size = sizeof(g1) };
	sheaf_cache_destroy(mk("rcu-warm", 8, 0));
	sheaf_global_stats_get(&g0);
	long long u0 = user_bytes();
	int bad = 0;
	for (int i = 0; i < 6; i++) {
		destroy_round();
		long long u = user_bytes();
		fprintf(stderr, "round %d: program slab bytes %lld (before %lld)\n", i, u, u0);
		bad += u > u0;
	}
	sheaf_global_stats_get(&g1);
	if (g1.caches != g0.caches || bad)
		_exit(7);
	_exit(0);
}

static void test_destroy_in_flight(void)
{
	struct th_child r;
	run_child("destroy", NULL, &r);
	CHECKF(r.exited && r.status == 0, "status %d: %s", r.status, r.err);
	CHECKF(!strstr(r.err, "still allocated"), "%s", r.err);
}

/* Destroy while a reader is inside: the destroy itself must wait for the reader
 * (a destroy that returned earlier would have freed memory the reader can see). */
struct destroy_arg {
	struct sheaf_cache *c;
	atomic_int done;
};

static void *destroy_main(void *arg)
{
	struct destroy_arg *d = arg;
	sheaf_cache_destroy(d->c);
	atomic_store(&d->done, 1);
	return NULL;
}

static void test_destroy_waits_for_reader(void)
{
	struct sheaf_cache *c = mk("rcu-destroy-wait", 8, 0);
	enum {
		N = 100
	};
	struct obj *o[N];
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
		obj_fill(o[i]);
	}
	struct holder h;
	holder_start(&h);
	for (int i = 0; i < N; i++)
		sheaf_cache_free_rcu(c, o[i]);
	struct destroy_arg d = { .c = c };
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, destroy_main, &d) == 0);
	usleep(100 * 1000);
	CHECKF(!atomic_load(&d.done), "destroy returned while a reader was inside");
	int intact = 0;
	for (int i = 0; i < N; i++)
		intact += obj_intact(o[i]);
	CHECK(intact == N);
	holder_stop(&h);
	pthread_join(t, NULL);
	CHECK(atomic_load(&d.done));
}

/* Thread exit with a partly filled rcu_free sheaf: the objects are submitted, and
 * after the barrier back in the cache. */
struct exit_arg {
	struct sheaf_cache *c;
	void *o[3];
};

static void *exit_main(void *arg)
{
	struct exit_arg *e = arg;
	for (int i = 0; i < 3; i++)
		sheaf_cache_free_rcu(e->c, e->o[i]);
	return NULL;
}

static void test_thread_exit(void)
{
	struct sheaf_cache *c = mk("rcu-exit", 8, 0);
	struct exit_arg e = { .c = c };
	for (int i = 0; i < 3; i++) {
		e.o[i] = sheaf_cache_alloc(c);
		REQUIRE(e.o[i]);
	}
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, exit_main, &e) == 0);
	pthread_join(t, NULL);
	struct sheaf_stats st = stats(c);
	CHECK(st.events[SHEAF_STAT_FREE_RCU_SHEAF] == 3);
	/* The exiting thread handed its partial sheaf to call_rcu (per-thread mode);
	 * in per-CPU mode the CPU keeps it until the barrier below. */
	CHECK(st.events[SHEAF_STAT_RCU_SHEAF_QUEUED] ==
	      (strcmp(sheaf_percpu_mode(), "percpu-rseq") ? 1u : 0u));
	sheaf_cache_rcu_barrier(c);
	st = stats(c);
	CHECK(st.rcu_inflight_objects == 0 && st.rcu_inflight_sheaves == 0);
	CHECK(st.events[SHEAF_STAT_RCU_SHEAF_DONE] == 1);
	check_balance(c, 0);
	/* They are allocatable again. */
	void *a[3];
	for (int i = 0; i < 3; i++)
		a[i] = sheaf_cache_alloc(c);
	for (int i = 0; i < 3; i++)
		sheaf_cache_free(c, a[i]);
	sheaf_cache_destroy(c);
}

/* A cache without sheaves (and a debug cache) uses the batched fallback: one call_rcu
 * per 64 objects, never one per object. */
static void test_fallback_batches(void)
{
	struct sheaf_cache *c = mk("rcu-fallback", 0, SHEAF_NO_SHEAVES);
	enum {
		N = 640
	};
	static void *o[N];
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
	}
	for (int i = 0; i < N; i++)
		sheaf_cache_free_rcu(c, o[i]);
	struct sheaf_stats st = stats(c);
	CHECK(st.events[SHEAF_STAT_FREE_RCU_SHEAF_FAIL] == N);
	CHECKF(st.events[SHEAF_STAT_RCU_FALLBACK_BATCH] == N / 64, "%llu",
	       (unsigned long long)st.events[SHEAF_STAT_RCU_FALLBACK_BATCH]);
	sheaf_cache_free_rcu(c, sheaf_cache_alloc(c)); /* a partial batch */
	sheaf_cache_rcu_barrier(c);
	st = stats(c);
	CHECK(st.rcu_inflight_objects == 0 && st.objects_inuse == 0);
	sheaf_cache_destroy(c);
}

/* A poisoning debug cache: the poison is written only after the grace period. */
static void test_debug_poison_after_gp(void)
{
	struct sheaf_cache *c = mk("rcu-poison", 0, SHEAF_DEBUG_POISON);
	enum {
		N = 100
	};
	struct obj *o[N];
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
		obj_fill(o[i]);
	}
	struct holder h;
	holder_start(&h);
	for (int i = 0; i < N; i++)
		sheaf_cache_free_rcu(c, o[i]);
	struct barrier_arg b = { .c = c };
	pthread_t bt;
	REQUIRE(pthread_create(&bt, NULL, barrier_main, &b) == 0);
	usleep(50 * 1000);
	int intact = 0;
	for (int i = 0; i < N; i++)
		intact += obj_intact(o[i]);
	CHECKF(intact == N, "%d objects poisoned under a reader", N - intact);
	holder_stop(&h);
	pthread_join(bt, NULL);
	CHECK(stats(c).objects_inuse == 0);
	sheaf_cache_destroy(c);
}

static void test_flavor(void)
{
	/* Flavour is in use by now (earlier tests): only the same one is accepted. */
	CHECK(sheaf_rcu_set_flavor(SHEAF_RCU_MEMB) == 0);
	CHECK(sheaf_rcu_set_flavor(SHEAF_RCU_QSBR) == -EBUSY);
	CHECK(sheaf_rcu_set_flavor((enum sheaf_rcu_flavor)7) == -EINVAL);
}

static void double_free_child(void)
{
	struct sheaf_cache *c = mk("rcu-df", 8, 0);
	void *o = sheaf_cache_alloc(c);
	sheaf_cache_free_rcu(c, o);
	sheaf_cache_free_rcu(c, o);
	_exit(0);
}

static void barrier_in_reader_child(void)
{
	struct sheaf_cache *c = mk("rcu-in-reader", 8, 0);
	sheaf_cache_free_rcu(c, sheaf_cache_alloc(c));
	urcu_memb_register_thread();
	urcu_memb_read_lock();
	sheaf_cache_rcu_barrier(c); /* would deadlock: reported */
	_exit(0);
}

/* The global barrier in a reader: its report names no cache (it crashed in the
 * reporter, reading the name of a NULL cache, until 2026-11-28). */
static void global_barrier_in_reader_child(void)
{
	struct sheaf_cache *c = mk("rcu-in-reader-g", 8, 0);
	sheaf_cache_free_rcu(c, sheaf_cache_alloc(c));
	urcu_memb_register_thread();
	urcu_memb_read_lock();
	sheaf_rcu_barrier(); /* would deadlock: reported */
	_exit(0);
}

/* The same with nothing in flight (no object freed through RCU, or all of them done):
 * reported all the same, for the cache's barrier and the global one (until 2026-11-29
 * both returned before they looked, so the misuse showed only when frees happened to
 * be pending). */
static void idle_barrier_in_reader_child(bool global)
{
	struct sheaf_cache *c = mk("rcu-idle-reader", 8, 0);
	urcu_memb_register_thread();
	urcu_memb_read_lock();
	if (global)
		sheaf_rcu_barrier();
	else
		sheaf_cache_rcu_barrier(c);
	_exit(0);
}

static void test_misuse(void)
{
	struct th_child r;
	run_child("global-barrier-in-reader", NULL, &r);
	CHECKF(r.signaled && r.sig == SIGABRT && strstr(r.err, "sheaf: rcu misuse: cache '?'") &&
		       strstr(r.err, "read-side critical section"),
	       "%s", r.err);
	run_child("double-free", NULL, &r);
	CHECKF(r.signaled && strstr(r.err, "double free"), "%s", r.err);
	run_child("barrier-in-reader", NULL, &r);
	CHECKF(r.signaled && strstr(r.err, "read-side critical section"), "%s", r.err);
	run_child("idle-barrier-in-reader", NULL, &r);
	CHECKF(r.signaled && strstr(r.err, "sheaf: rcu misuse: cache 'rcu-idle-reader'") &&
		       strstr(r.err, "read-side critical section"),
	       "%s", r.err);
	run_child("idle-global-barrier-in-reader", NULL, &r);
	CHECKF(r.signaled && strstr(r.err, "sheaf: rcu misuse: cache '?'"), "%s", r.err);
}

int main(int argc, char **argv)
{
	self_exe = "/proc/self/exe";
	if (argc > 1) {
		if (!strcmp(argv[1], "global"))
			global_mode_child();
		else if (!strcmp(argv[1], "destroy"))
			destroy_child();
		else if (!strcmp(argv[1], "double-free"))
			double_free_child();
		else if (!strcmp(argv[1], "idle-barrier-in-reader"))
			idle_barrier_in_reader_child(false);
		else if (!strcmp(argv[1], "idle-global-barrier-in-reader"))
			idle_barrier_in_reader_child(true);
		else if (!strcmp(argv[1], "barrier-in-reader"))
			barrier_in_reader_child();
		else if (!strcmp(argv[1], "global-barrier-in-reader"))
			global_barrier_in_reader_child();
		return 2;
	}
	RUN(test_barrier_stats);
	RUN(test_no_reuse_before_gp);
	RUN(test_barrier_is_per_cache);
	RUN(test_global_mode);
	RUN(test_destroy_in_flight);
	RUN(test_destroy_waits_for_reader);
	RUN(test_thread_exit);
	RUN(test_fallback_batches);
	RUN(test_debug_poison_after_gp);
	RUN(test_flavor);
	RUN(test_misuse);
	return th_done();
}
