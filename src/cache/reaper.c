/* SPDX-License-Identifier: MIT */
/*
 * reaper.c - gives the memory of idle caches back to the OS (D6, "memory given
 * back", as tcmalloc's background release and jemalloc's background threads do).
 *
 * D6 trims a barn as it is used.  A cache that goes quiet is never used again to
 * trigger that, so without help it would keep its CPUs' sheaves, its barn and its free
 * pages until the program calls sheaf_cache_shrink().  One background thread ("sheaf-
 * reaper") wakes every SHEAF_REAP_MS milliseconds (default 250, so an idle cache is back with the OS within half a second; 0: no thread) and
 * shrinks each cache that holds cached objects and showed no activity during one
 * whole period (its event counters, barn lock count and per-CPU fill unchanged).
 * A cache in steady fast-path use can look idle (fast paths count nothing shared):
 * it is then shrunk once, its next operations refill from slabs, and that activity
 * keeps it off the list afterwards.  The malloc front end's cached extents are aged
 * out on the same tick.
 *
 * Start: lazily, from places that hold no lock: sheaf_cache_create() of a user cache
 * (a program using the cache API gets it at once), and for the malloc front end
 * (linked or preloaded) an allocation's slow path once Sheaf's heap, or its live large
 * blocks, reach SHEAF_REAP_MALLOC_START (16 MiB), never a free (malloc/malloc.h:
 * glibc frees under its stack-cache lock, which pthread_create takes): a small tool
 * run under the preload library stays
 * single-threaded (unshare(CLONE_NEWUSER) refuses a multi-threaded caller, for one).  A forked child has no reaper (see
 * fork_release_reaper); it still shrinks on sheaf_cache_shrink()/malloc_trim().
 *
 * Per-thread mode (TSan builds, Valgrind, no rseq): a shrink drains only the calling
 * thread's sheaves at once and asks the other threads to drain at their next slow
 * path, so an idle thread keeps its two sheaves of each cache; barns and free pages
 * still go back.
 *
 * Locking (docs/locking.md): the reaper walks sheaf_reg.caches under caches_lock but
 * holds it only to move from one cache to the next: it pins the cache it visits
 * (cache->reaping), drops the lock, probes and perhaps shrinks it (shrink runs
 * concurrently with everything but destroy), retakes the lock and moves on.
 * sheaf_cache_destroy() unlinks a cache only when it is not pinned
 * (sheaf_reaper_unlink), so a cache is never destroyed under the reaper and the
 * pinned cache's next pointer stays valid.
 *
 * dlclose: the library's destructor stops and joins the thread, so it never runs code
 * that has been unmapped (test: unit/test_rcu_dlclose).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"

static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER; /* protects the fields below */
static pthread_cond_t reaper_cond;
static pthread_t reaper_thread;
static bool reaper_running;     /* a thread exists (joinable) */
static bool reaper_stop;        /* ask it to exit */
atomic_int sheaf_reaper_kicked; /* cache/cache.h */
struct sheaf_cache_hooks sheaf_cache_hooks;
static atomic_ulong reaper_rounds;

/* What changes when the cache's slow paths, barns or slabs are used, read racily and
 * without locking a CPU (a full sheaf_stats_get() would lock every CPU with a
 * membarrier, for every cache, every period).  *@slabs: slabs it holds. */
static uint64_t probe(struct sheaf_cache *c, long *slabs)
{
	uint64_t s = sheaf_pcs_reap_signature(c);
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		s = sheaf_sig_mix(s,
				  atomic_load_explicit(&c->stat_atomic[i], memory_order_relaxed));
	*slabs = 0;
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		struct sheaf_node *n = c->node[i];
		long ns = atomic_load_explicit(&n->nr_slabs, memory_order_relaxed);
		*slabs += ns;
		s = sheaf_sig_mix(s, sheaf_rd(n->barn->nr_locks));
		s = sheaf_sig_mix(s, sheaf_rd(n->barn->nr_full) |
					     (uint64_t)sheaf_rd(n->barn->nr_empty) << 32);
		s = sheaf_sig_mix(s, (uint64_t)ns ^ (uint64_t)sheaf_rd(n->nr_partial) << 32);
	}
	return s;
}

/* One cache, pinned (cache->reaping), caches_lock not held.  A cache whose signature
 * did not change over a whole period is shrunk, once: the signature after the shrink
 * is remembered and the cache is left alone until it changes.  A cache used only
 * through its fast paths looks idle too: it is shrunk, refills its CPUs' sheaves on
 * its next slow paths, and that activity shows in the next round. */
static void reap_one(struct sheaf_cache *c)
{
	long slabs;
	uint64_t sig = probe(c, &slabs);
	if (c->reap_seen && sig == c->reap_sig) {
		/* Idle for a whole period: back to the default capacity (D2, adaptive). */
		sheaf_capacity_adapt(c, -2);
		if (c->reap_clean || slabs == 0)
			return;
		sheaf_cache_shrink(c);
		if (sheaf_option_long(SHEAF_OPT_VERBOSE))
			sheaf_os_print("sheaf: reaper shrank idle cache '%s'", c->name);
		c->reap_sig = probe(c, &slabs);
		c->reap_clean = true;
		return;
	}
	c->reap_sig = sig;
	c->reap_seen = true;
	c->reap_clean = false;
}

static void reap_round(void)
{
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	struct sheaf_list *pos = sheaf_reg.caches.next;
	while (pos != &sheaf_reg.caches) {
		struct sheaf_cache *c = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		if (c->is_meta) {
			pos = pos->next;
			continue;
		}
		/* Pinned, it stays on the list (destroy waits to unlink it), so its next
		 * pointer is valid again once the lock is retaken. */
		atomic_store_explicit(&c->reaping, 1, memory_order_relaxed);
		sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		reap_one(c);
		sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		pos = c->cache_list.next;
		atomic_store_explicit(&c->reaping, 0, memory_order_release);
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	/* Free pages of busy caches decay too when no page is taken or freed. */
	sheaf_page_decay_tick();
	/* malloc/'s extent cache, once the front end is initialised. */
	void (*age)(void) = __atomic_load_n(&sheaf_cache_hooks.extent_cache_age, __ATOMIC_ACQUIRE);
	if (age)
		age();
	atomic_fetch_add_explicit(&reaper_rounds, 1, memory_order_relaxed);
}

static void *reaper_main(void *arg)
{
	(void)arg;
	long ms = sheaf_option_long(SHEAF_OPT_REAP_MS);
	sheaf_mutex_lock(&reaper_lock, SHEAF_LOCK_REAPER);
	while (!reaper_stop) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_sec += ms / 1000;
		t.tv_nsec += (ms % 1000) * 1000000L;
		if (t.tv_nsec >= 1000000000L) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000L;
		}
		int r = 0;
		while (!reaper_stop && r != ETIMEDOUT)
			r = pthread_cond_timedwait(&reaper_cond, &reaper_lock, &t);
		if (reaper_stop)
			break;
		sheaf_mutex_unlock(&reaper_lock, SHEAF_LOCK_REAPER);
		reap_round();
		sheaf_mutex_lock(&reaper_lock, SHEAF_LOCK_REAPER);
	}
	sheaf_mutex_unlock(&reaper_lock, SHEAF_LOCK_REAPER);
	return NULL;
}

void sheaf_reaper_kick(void)
{
	if (sheaf_likely(atomic_load_explicit(&sheaf_reaper_kicked, memory_order_relaxed)))
		return;
	if (atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) != 2 ||
	    sheaf_option_long(SHEAF_OPT_REAP_MS) <= 0)
		return;
	if (atomic_exchange(&sheaf_reaper_kicked, 1))
		return;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	sheaf_mutex_lock(&reaper_lock, SHEAF_LOCK_REAPER);
	pthread_cond_init(&reaper_cond, &ca);
	pthread_condattr_destroy(&ca);
	reaper_stop = false;
	/* Signals go to the program's threads, never to this one. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	reaper_running = sheaf_sys_thread_create(&reaper_thread, reaper_main, NULL) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (reaper_running)
		pthread_setname_np(reaper_thread, "sheaf-reaper");
	sheaf_mutex_unlock(&reaper_lock, SHEAF_LOCK_REAPER);
}

void sheaf_reaper_stop(void)
{
	sheaf_mutex_lock(&reaper_lock, SHEAF_LOCK_REAPER);
	if (!reaper_running) {
		sheaf_mutex_unlock(&reaper_lock, SHEAF_LOCK_REAPER);
		return;
	}
	reaper_stop = true;
	pthread_cond_broadcast(&reaper_cond);
	pthread_t t = reaper_thread;
	reaper_running = false;
	sheaf_mutex_unlock(&reaper_lock, SHEAF_LOCK_REAPER);
	/* Bounded: at exit another thread may hold a lock the reaper waits for. */
	struct timespec limit;
	clock_gettime(CLOCK_REALTIME, &limit);
	limit.tv_sec += 2;
	if (pthread_timedjoin_np(t, NULL, &limit) != 0)
		pthread_detach(t);
}

unsigned long sheaf_reaper_rounds(void)
{
	return atomic_load_explicit(&reaper_rounds, memory_order_relaxed);
}

/* fork, in the child (caches_lock held by the walk, rank CACHES): no cache is being
 * shrunk there, whatever the parent's reaper was doing. */
void sheaf_reaper_fork_child_caches(void)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next)
		atomic_store_explicit(
			&sheaf_container_of(pos, struct sheaf_cache, cache_list)->reaping, 0,
			memory_order_relaxed);
}

/* Rank REAPER: reaper_lock, so that the child never inherits it held by a start or stop
 * in progress. */
static void fork_take_reaper(void)
{
	sheaf_mutex_lock(&reaper_lock, SHEAF_LOCK_REAPER);
}

static void fork_release_reaper(bool child)
{
	if (child) {
		reaper_running = false;
		/* No reaper in the child, ever: with the parent's reaper every Sheaf
		 * process is multi-threaded, and after such a fork POSIX allows only
		 * async-signal-safe calls until exec.  Starting a thread there deadlocked
		 * on an allocator lock the fork had copied held (ASan's,
		 * unit/test_malloc_threads); TSan kills such a child. */
		atomic_store(&sheaf_reaper_kicked, 1);
	}
	sheaf_mutex_unlock(&reaper_lock, SHEAF_LOCK_REAPER);
}

void sheaf_reaper_fork_register(void)
{
	static const struct sheaf_fork_ops ops = { fork_take_reaper, fork_release_reaper };
	sheaf_fork_register(SHEAF_LOCK_REAPER, &ops);
}

/* Unlink @c from the cache list once the reaper is not visiting it (destroy). */
void sheaf_reaper_unlink(struct sheaf_cache *c)
{
	for (;;) {
		sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		if (!atomic_load_explicit(&c->reaping, memory_order_acquire)) {
			sheaf_list_del(&c->cache_list);
			sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
			return;
		}
		sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		sched_yield();
	}
}

__attribute__((destructor)) static void reaper_fini(void)
{
	sheaf_reaper_stop();
}
