/* SPDX-License-Identifier: MIT */
/*
 * base/lock.h - every lock of Sheaf in one table, in rank order (design §4, docs/locking.md).
 *
 * A thread may take a lock only if every lock it holds has a lower rank: the order is the
 * order of this table, outermost first.  Three things are built from the table:
 *   - the witness (SHEAF_DEBUG >= 1, lock.c): each acquisition through sheaf_mutex_lock()
 *     and friends is checked against the ranks the thread already holds; a violation is
 *     reported with both locks' names and aborts (a potential deadlock is found on the
 *     first run that takes the two locks in the wrong order, not on the unlucky run that
 *     deadlocks).  Release builds compile the checks away.
 *   - fork (lock.c): the pthread_atfork handlers walk the table from the first rank to the
 *     last, calling each rank's "take all" hook (registered by the layer that owns the
 *     lock), and release in the reverse order in parent and child.
 *   - docs/locking.md: its table is generated from SHEAF_LOCK_TABLE below by
 *     tools/gen-locking-doc.py (and checked to be up to date by tests/lint).
 *
 * X(id, name, file, protects, fork) -- @fork says how the fork handler takes that rank.
 * Keep each entry on its own lines starting with "X(": the generator reads them.
 */
#ifndef SHEAF_LOCK_H
#define SHEAF_LOCK_H

#include <pthread.h>
#include <stdbool.h>

#include "base/config.h"

#define SHEAF_LOCK_TABLE(X)                                                                      \
	X(FORK, "fork walk lock", "src/base/lock.c",                                             \
	  "held by the forking thread from the prepare handler to the end of the parent or "     \
	  "child handler: a layer that registers its ranks late waits for a fork in progress",   \
	  "taken first, released last (the walk itself)")                                        \
	X(RCU_WARM, "rcu warm_lock", "src/rcu/rcu_free.c",                                       \
	  "creation of the RCU flavour's call_rcu worker (it starts a thread, which may call "   \
	  "malloc)",                                                                             \
	  "taken, then liburcu's call_rcu_before_fork() pauses the worker between callbacks; "   \
	  "released last, after call_rcu_after_fork_child() started the child's worker")         \
	X(REAPER, "reaper_lock", "src/cache/reaper.c",                                           \
	  "the reaper thread's state and condition variable (held while it is started)",         \
	  "taken; the child has no reaper and never starts one")                                 \
	X(MALLOC_CLASS, "malloc sc_lock", "src/malloc/malloc.c",                                 \
	  "creation of malloc's class caches (the core is called under it)", "taken")            \
	X(INIT, "init_lock", "src/cache/init.c",                                                 \
	  "initialisation of the core (until the metadata caches and fork handlers exist)",      \
	  "taken: no initialisation is half done in the child")                                  \
	X(RCU_BARRIER, "rcu barrier_mutex", "src/rcu/rcu_free.c",                                \
	  "one per cache: serialises that cache's RCU barriers (the objects a barrier took "     \
	  "back are on its stack)",                                                              \
	  "every cache's, with try-lock under caches_lock (the cache list is only stable "       \
	  "under it), backing off and retrying while a barrier runs")                            \
	X(CACHES, "sheaf_reg.caches_lock", "src/percpu/percpu.c",                                \
	  "the cache list and ids; destroy against thread exit; per-thread tables of other "     \
	  "threads",                                                                             \
	  "taken (held while every later rank walks the cache list)")                            \
	X(THREADS, "sheaf_reg.threads_lock", "src/percpu/percpu.c",                              \
	  "the list of per-thread tables (sheaf_tcache) and the fork orphans", "taken")          \
	X(PCS_LIST, "cache->pcs_lock", "src/percpu/percpu.c",                                    \
	  "one per cache: the cache's list of per-thread pcs", "every cache's")                  \
	X(PERCPU, "per-CPU lock", "src/percpu/percpu.c",                                         \
	  "per-CPU mode: a CPU's sheaves (mainv[cpu + 2] swapped for the sentinel); per-thread " \
	  "mode: the owner's use of its pcs (busy flag)",                                        \
	  "per-CPU mode: every CPU of every cache; per-thread mode: waits until no owner is "    \
	  "inside its pcs (owners back off while a fork is pending)")                            \
	X(PCS_RCU, "pcs->rcu_lock", "src/rcu/rcu_free.c",                                        \
	  "one per pcs: its rcu_free sheaf, free_rcu (owner) against barriers",                  \
	  "not taken: every holder also holds the pcs (rank PERCPU) or a pcs_lock")              \
	X(BARN, "barn->lock", "src/barn/barn.c",                                                 \
	  "one per cache and node: the barn's stacks of full and empty sheaves, its limits",     \
	  "every barn of every cache but the metadata caches (no sheaves: never taken there)")   \
	X(LIST, "node->list_lock", "src/slab/slab.c",                                            \
	  "one per cache and node: the partial list and slab state changes (never held with "    \
	  "the same node's barn lock by the slow paths)",                                        \
	  "every node of every cache but the metadata caches")                                   \
	X(PREFILLED, "cache->prefilled_lock", "src/cache/prefill.c",                             \
	  "one per cache: the list of prefilled sheaves lent to the program (searched for "      \
	  "double frees)",                                                                       \
	  "every cache's but the metadata caches' (they lend none: never taken there)")          \
	X(RCU_STATE, "rcu_state.lock", "src/rcu/rcu_free.c",                                     \
	  "one per cache: its RCU batches, next list and ticket in flight", "every cache's")     \
	X(META_LIST, "metadata node->list_lock", "src/cache/meta.c",                             \
	  "one per metadata cache and node (sheaves, pcs, tables are allocated under the ranks " \
	  "above)",                                                                              \
	  "every node of every metadata cache")                                                  \
	X(HEAP, "sheaf_heap.lock", "src/page/page.c",                                            \
	  "the page heap: buddy free lists, block bump index, purge state", "taken")             \
	X(MALLOC_EXTENTS, "malloc xc.lock", "src/malloc/extent.c",                               \
	  "malloc's cache of freed extents", "taken")                                            \
	X(MALLOC_SHARD, "malloc extent shard lock", "src/malloc/extent_registry.c",              \
	  "one per shard of malloc's extent registry (never two at once outside fork)",          \
	  "every shard's")                                                                       \
	X(DOBJ_REPORT, "debug-objects report_lock", "src/debug/debug_objects.c",                 \
	  "serialises debug-objects reports (never held with another tracker lock)", "taken")    \
	X(DOBJ_BUCKET, "debug-objects bucket lock", "src/debug/debug_objects.c",                 \
	  "one per hash bucket (a spinlock): the bucket's records", "every bucket's")            \
	X(DOBJ_POOL, "debug-objects pool.lock", "src/debug/debug_objects.c",                     \
	  "the tracker's record pools and their counts", "taken")

enum sheaf_lock_id {
#define SHEAF_LOCK_ENUM(id, name, file, protects, fork) SHEAF_LOCK_##id,
	SHEAF_LOCK_TABLE(SHEAF_LOCK_ENUM)
#undef SHEAF_LOCK_ENUM
	SHEAF_LOCK_NR
};

/* The lock's name in the table (reports, tests). */
const char *sheaf_lock_name(enum sheaf_lock_id id);

/* ---- The witness (SHEAF_DEBUG >= 1) --------------------------------------------------
 * Per thread, a count of held locks per rank (thread-local, no allocation, so it works
 * inside malloc and in the fork handlers, which hold thousands of locks).  acquire()
 * checks before blocking, so a violation is reported instead of deadlocking; a try-lock
 * that succeeded is recorded without a check (it never waits, so it cannot deadlock). */
#if SHEAF_DEBUG >= 1
#define SHEAF_WITNESS 1
void sheaf_witness_acquire(enum sheaf_lock_id id);
void sheaf_witness_acquired_try(enum sheaf_lock_id id);
void sheaf_witness_release(enum sheaf_lock_id id);
#else
#define SHEAF_WITNESS 0
static inline void sheaf_witness_acquire(enum sheaf_lock_id id)
{
	(void)id;
}
static inline void sheaf_witness_acquired_try(enum sheaf_lock_id id)
{
	(void)id;
}
static inline void sheaf_witness_release(enum sheaf_lock_id id)
{
	(void)id;
}
#endif
/* Whether the calling thread holds a lock of rank @id (witness builds; else false). */
bool sheaf_witness_holds(enum sheaf_lock_id id);

static inline void sheaf_mutex_lock(pthread_mutex_t *m, enum sheaf_lock_id id)
{
	sheaf_witness_acquire(id);
	pthread_mutex_lock(m);
}

static inline bool sheaf_mutex_trylock(pthread_mutex_t *m, enum sheaf_lock_id id)
{
	if (pthread_mutex_trylock(m) != 0)
		return false;
	sheaf_witness_acquired_try(id);
	return true;
}

static inline void sheaf_mutex_unlock(pthread_mutex_t *m, enum sheaf_lock_id id)
{
	pthread_mutex_unlock(m);
	sheaf_witness_release(id);
}

/* ---- fork ------------------------------------------------------------------------------
 * The layer that owns a rank registers how to take every lock of that rank and how to
 * release them (@child: in the child of fork, where the caller is the only thread).
 * Called once, at that layer's initialisation, before the rank can be used. */
struct sheaf_fork_ops {
	void (*take)(void);
	void (*release)(bool child);
};
void sheaf_fork_register(enum sheaf_lock_id id, const struct sheaf_fork_ops *ops);
/* Register the process's fork handlers (once; 0 or the pthread_atfork error). */
int sheaf_fork_handlers_install(void);
/* After registering ranks late (malloc, debug objects; no Sheaf lock held): wait for a
 * fork whose prepare handler may have walked past those ranks before they existed, so
 * that none of their locks is taken before that fork is over. */
void sheaf_fork_settle(void);
/* True between the prepare handler and the end of the parent/child handler, in the
 * forking thread: the walk takes many locks of one rank, in table order. */
bool sheaf_fork_walking(void);

#endif /* SHEAF_LOCK_H */
