/* SPDX-License-Identifier: MIT */
/*
 * cache/cache.h - the cache layer's interface (layer 7 of src/README.md).
 *
 * Owns: cache creation and destruction, geometry and capacities (create.c), the public
 * object API with its fast paths (cache.c), bulk (bulk.c) and prefilled sheaves
 * (prefill.c), library initialisation (init.c: sheaf_init, which brings up every layer
 * below in order and registers the hooks the lower layers call up through), the internal metadata caches (meta.c), statistics
 * (stats.c) and the background reaper (reaper.c).
 *
 * May call: rcu/, percpu/, barn/, slab/, page/, base/.  Calls up only through
 * sheaf_cache_hooks (the malloc front end's extent ageing, set by malloc/).
 *
 * ==== Theory statement (mirrors docs/design.md; cited as "design §n") ====
 *
 * §1 Object life cycle.  A free object is in exactly one place (K§1.8): its slab's
 *    freelist; a CPU's (or thread's) main or spare sheaf; a full sheaf in a barn; an
 *    rcu_free sheaf or one waiting for a grace period; a borrowed prefilled sheaf.
 *    Objects in sheaves count as in use for their slab ("sheaves pin slabs").
 *
 * §2 Sheaves and barns (K§2).  Allocation pops main->objects[size-1]; free pushes at
 *    objects[size].  When main is empty: swap with a non-empty spare; else give the empty
 *    main to the barn for a full sheaf; else refill main from slabs (D4: whenever the
 *    caller may spin, which in userspace is always).  When main is full: take an empty
 *    sheaf (spare, barn, or a new one); if spare is full too, hand the full main to the
 *    barn; over the barn's soft limit, flush the spare to slabs and reuse it.
 *
 * §3 Slab states.  A slab is on its node's partial list (sl_on_partial, under
 *    list_lock) when it has free objects and is not isolated; full slabs are on no list;
 *    a refill isolates slabs (off the list) while it takes their freelists.  The
 *    freelist head index, inuse and objects live in one 64-bit word updated with one
 *    compare-and-swap (K§1.1).  Pops happen only under list_lock or on an isolated
 *    slab, so the CAS never suffers ABA; frees push locklessly.
 *      free:  was full  -> add to partial tail (FREE_ADD_PARTIAL)
 *             now empty and nr_partial >= min_partial -> discard (FREE_SLAB)
 *
 * §4 Lock order: one table of ranks, SHEAF_LOCK_TABLE in base/lock.h (outermost first;
 *    its witness checks it in debug builds, fork walks it, docs/locking.md is generated
 *    from it).  In short: caches_lock, threads_lock, pcs_lock, the per-CPU lock,
 *    rcu_lock, barn->lock, list_lock, prefilled_lock, rcu_state.lock, the metadata
 *    caches' list locks, the heap.
 *
 * §5 RCU-deferred free: see rcu_free.c.
 *
 * §6 Per-CPU state.  In per-CPU mode cache->mainv[cpu + 2] is the CPU's main sheaf; the
 *    per-CPU lock is taken by swapping it for the sentinel sheaf (size 0, capacity 0,
 *    key 0), so the fast paths need no separate lock test: a pop sees "empty", a push
 *    sees "full" and a key that never matches, and both fall to the slow path (the
 *    kernel's bootstrap-sheaf trick, K§1.5, doubling as local_trylock).  In per-thread
 *    mode every entry of mainv is the sentinel and each thread owns a struct sheaf_pcs
 *    per cache, found through its struct sheaf_tcache.
 *
 * §7 Fork and thread exit.  pthread_atfork takes every lock in the order of §4 (the
 *    walk of base/lock.h's table) and releases it in both parent and child.  A thread's pcs are flushed to the barns at
 *    thread exit (per-thread mode); in the child of fork, pcs of threads that no longer
 *    exist are flushed by the child.
 *
 * §8 Statistics: plain increments in each pcs (under its lock or by its owner), atomic
 *    adds in cache->stat_atomic for events outside any pcs, summed on read.  Fast-path
 *    counts are harvested (design §6): a main sheaf counts its fast-path pops in
 *    `nalloc`; pushes are derived from the size change when the pcs is next locked.
 */
#ifndef SHEAF_LAYER_CACHE_H
#define SHEAF_LAYER_CACHE_H

#include "rcu/rcu.h"

/* ---- init.c, create.c, cache.c ---------------------------------------------------- */
int sheaf_init(void); /* idempotent; 0 or -errno */
static inline int sheaf_ensure_init(void)
{
	if (sheaf_likely(atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) == 2))
		return 0;
	return sheaf_init();
}
/* Create a cache; @meta marks the internal metadata caches (no sheaves, not counted
 * as leaks, never debugged). */
struct sheaf_cache *sheaf_cache_create_internal(const char *name, size_t size,
						const struct sheaf_cache_args *args, bool meta);
uint32_t sheaf_cache_default_capacity(const struct sheaf_cache *c);
/* sheaf_cache_alloc without its restartable attempt, for the malloc front end, whose
 * inline attempt just failed (cache.c). */
void *sheaf_cache_alloc_thread(struct sheaf_cache *c);
/* The same with the call site a debug cache records given (@caller: the program's,
 * for a front end that is not tail-called). */
void *sheaf_cache_alloc_caller(struct sheaf_cache *c, const void *caller);
struct sheaf_cache *sheaf_cache_create_class(const char *name, size_t size,
					     const struct sheaf_cache_args *args);

void sheaf_cache_free_slowpath(struct sheaf_cache *c, void *obj, struct sheaf_pcs *pcs);
/* The same with the call site a debug cache records given (@caller: the program's, for
 * the malloc front end, whose free tail-calls its own slow path first). */
void sheaf_cache_free_caller(struct sheaf_cache *c, void *obj, const void *caller);
/* A cache descriptor that no object belongs to and no call accepts: every CPU's main is
 * the sentinel (the restartable pop misses), no thread has a pcs of it (its id is past
 * every table), its magic is not SHEAF_CACHE_LIVE and it is in no list.  For a table of
 * the front end above whose entries must never be NULL (malloc.c, the classes not yet
 * made).  NULL without memory; the caller keeps it for the process. */
struct sheaf_cache *sheaf_cache_placeholder_new(void);

/* ---- meta.c: internal metadata allocator ------------------------------------------ */
/* Register the allocator in the layers below (sheaf_percpu_hooks.meta_alloc/free). */
void sheaf_meta_register(void);
/* Create the metadata caches (after the other layers are up). */
void sheaf_meta_init(void);
size_t sheaf_meta_bytes(void);
bool sheaf_cache_is_meta(const struct sheaf_cache *c);

/* ---- reaper.c: the background thread that shrinks idle caches (SHEAF_REAP_MS) ------ */
void sheaf_reaper_kick(void); /* start it if not started; call holding no Sheaf lock */
/* A start was attempted in this process (or it is a fork child, which never gets one). */
extern atomic_int sheaf_reaper_kicked;
/* The malloc front end starts the reaper only once Sheaf's heap holds this much (a
 * small tool under the preload stays single-threaded; see reaper.c). */
#define SHEAF_REAP_MALLOC_START (16ul << 20)
static inline bool sheaf_reaper_wanted_by_malloc(void)
{
	return !atomic_load_explicit(&sheaf_reaper_kicked, memory_order_relaxed) &&
	       sheaf_rd(sheaf_heap.next_block) << SHEAF_BLOCK_SHIFT >= SHEAF_REAP_MALLOC_START;
}
void sheaf_reaper_stop(void);
void sheaf_reaper_unlink(struct sheaf_cache *c); /* destroy: unlink when not pinned */
void sheaf_reaper_fork_child_caches(void);       /* fork, in the child: nothing is being reaped */
void sheaf_reaper_fork_register(void);           /* rank REAPER of base/lock.h */
/* This thread is inside sheaf_init() (a malloc it causes must not create a class). */
bool sheaf_init_running_here(void);
unsigned long sheaf_reaper_rounds(void);

/* Calls up, registered at init. */
struct sheaf_cache_hooks {
	/* Each reaper round: give back cached extents older than their delay (malloc/,
	 * set when the front end initialises; NULL before). */
	void (*extent_cache_age)(void);
};
extern struct sheaf_cache_hooks sheaf_cache_hooks;

#endif /* SHEAF_LAYER_CACHE_H */
