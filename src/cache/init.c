/* SPDX-License-Identifier: MIT */
/*
 * init.c - library initialisation: every layer brought up bottom to top, the hooks through
 * which lower layers call up registered first (src/README.md), the exit handler, and
 * this layer's ranks of the fork walk (base/lock.h, docs/locking.md).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_impl.h"

/* ---- Initialisation -------------------------------------------------------------- */

static void stats_at_exit(void)
{
	long mode = sheaf_option_long(SHEAF_OPT_STATS);
	if (mode == 2)
		sheaf_stats_print_all_json(stderr);
	else if (mode)
		sheaf_stats_print_all(stderr);
}

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
/* This thread is inside sheaf_init(): a call it makes back into Sheaf (a preloaded
 * malloc called by stdio, pthread_atfork or atexit) must not wait for init_lock. */
static __thread int tls_initialising;

bool sheaf_init_running_here(void)
{
	return tls_initialising != 0;
}

static void fork_register_cache_ranks(void);

/* Step 2 of sheaf_init, after the fork handlers: the hooks through which lower layers
 * call up, before any layer runs; options, the bulk limit, the registry
 * lists and the topology. */
static int init_lower_layers(void)
{
	sheaf_meta_register();
	sheaf_rcu_init();
	sheaf_options_init();
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psize > 0)
		sheaf_bulk_limit = (size_t)pages / 2 * (size_t)psize;
	sheaf_list_init(&sheaf_reg.caches);
	sheaf_list_init(&sheaf_reg.threads);
	return sheaf_node_topology_init();
}

/* Everything is built before init_state says 2 (release): a thread that sees 2 finds the
 * metadata caches, the per-CPU mode and the fork handlers in place; a thread that comes
 * while another initialises waits for init_lock (issue 13: the state used to be
 * published before the metadata caches existed, and a concurrent first call saw a
 * half-built allocator). */
int sheaf_init(void)
{
	if (tls_initialising)
		return -EAGAIN; /* re-entered from our own initialisation */
	/* No cancellation under init_lock: the topology is read from sysfs with open and
	 * read, cancellation points, and a thread with a cancel pending that made the
	 * process's first call died there holding the lock (until 2026-11-29): every later
	 * call of the process hung. */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	sheaf_mutex_lock(&init_lock, SHEAF_LOCK_INIT);
	if (atomic_load(&sheaf_g.init_state) == 2) {
		sheaf_mutex_unlock(&init_lock, SHEAF_LOCK_INIT);
		pthread_setcancelstate(cancel_state, NULL);
		return 0;
	}
	tls_initialising = 1;
	atomic_store(&sheaf_g.init_state, 1);
	/* First, as it is the one step that cannot be undone: a failure leaves nothing
	 * half done for the next attempt. */
	int r = sheaf_fork_handlers_install();
	if (r) {
		sheaf_os_print("sheaf: pthread_atfork failed (%s): Sheaf cannot start",
			       strerror(r));
		r = -r;
	}
	if (!r)
		r = init_lower_layers();
	if (!r)
		r = sheaf_page_init();
	if (!r)
		r = sheaf_percpu_init();
	if (r) {
		atomic_store(&sheaf_g.init_state, 0);
		tls_initialising = 0;
		sheaf_mutex_unlock(&init_lock, SHEAF_LOCK_INIT);
		pthread_setcancelstate(cancel_state, NULL);
		return r;
	}
	sheaf_introspect_link(); /* keeps the root sheafinfo reads (docs/introspection.md) */
	sheaf_meta_init();
	/* The fork walk of each rank, before any other thread can use that rank. */
	fork_register_cache_ranks();
	sheaf_percpu_fork_register();
	sheaf_page_fork_register();
	sheaf_rcu_fork_register();
	sheaf_reaper_fork_register();
	atexit(stats_at_exit);
	atomic_store_explicit(&sheaf_g.init_state, 2, memory_order_release);
	tls_initialising = 0;
	sheaf_mutex_unlock(&init_lock, SHEAF_LOCK_INIT);
	pthread_setcancelstate(cancel_state, NULL);
	if (sheaf_option_long(SHEAF_OPT_VERBOSE)) {
		sheaf_options_print(stderr);
		fprintf(stderr, "sheaf: mode %s, %d possible CPUs, %d nodes%s\n",
			sheaf_percpu_mode(), sheaf_g.ncpus, sheaf_g.nnodes,
			sheaf_g.fake_numa ? " (fake)" : "");
	}
	return 0;
}

/* ---- fork: ranks INIT, CACHES (with RCU_BARRIER), BARN, LIST, PREFILLED, META_LIST ---- */

static void fork_take_init(void)
{
	sheaf_mutex_lock(&init_lock, SHEAF_LOCK_INIT);
}

static void fork_release_init(bool child)
{
	(void)child;
	sheaf_mutex_unlock(&init_lock, SHEAF_LOCK_INIT);
}

/* caches_lock, and every cache's RCU barrier mutex (rank RCU_BARRIER, before CACHES):
 * the cache list is only stable under caches_lock, so the barrier mutexes are
 * try-locked under it, and while a barrier runs (it takes caches_lock with its mutex
 * held) everything is let go and tried again. */
static void fork_take_caches(void)
{
	for (;;) {
		sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		if (sheaf_rcu_fork_trylock_barriers())
			return;
		sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		sched_yield();
	}
}

static void fork_release_caches(bool child)
{
	if (child)
		sheaf_reaper_fork_child_caches(); /* no cache is being reaped in the child */
	sheaf_rcu_fork_unlock_barriers();
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
}

/* Every lock of one rank, in cache-list order (caches_lock is held by the walk): barns
 * (a disabled one is still locked by the statistics), list locks of the ordinary or of
 * the metadata caches (the metadata caches' come later: they are allocated from under
 * the others), or prefilled-list locks. */
static void walk_locks(enum sheaf_lock_id id, bool take)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next) {
		struct sheaf_cache *c = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		int n = id == SHEAF_LOCK_PREFILLED ? 1 : sheaf_g.nnodes;
		/* A metadata cache has no sheaves and lends none: its barn and prefilled
		 * locks are never taken (stats.c, percpu/freecheck.c and prefill.c leave
		 * them out too), so the walk does.
		 * ThreadSanitizer's deadlock detector holds at most 64 locks a thread, and
		 * the walk took three per metadata cache. */
		if (c->is_meta && id != SHEAF_LOCK_META_LIST)
			n = 0;
		for (int i = 0; i < n; i++) {
			pthread_mutex_t *m = NULL;
			if (id == SHEAF_LOCK_BARN) /* a barn shared by a memoryless node: once */
				m = sheaf_barn_is_alias(c, i) ? NULL : &c->node[i]->barn->lock;
			else if (id == SHEAF_LOCK_PREFILLED)
				m = &c->prefilled_lock;
			else if (c->is_meta == (id == SHEAF_LOCK_META_LIST))
				m = &c->node[i]->list_lock;
			if (m && take)
				sheaf_mutex_lock(m, id);
			else if (m)
				sheaf_mutex_unlock(m, id);
		}
	}
}

/* The fork handlers of one walked rank @id: take its locks, release them on either side. */
#define FORK_WALK_OPS(name, id)                                                  \
	static void fork_take_##name(void)                                       \
	{                                                                        \
		walk_locks(id, true);                                            \
	}                                                                        \
	static void fork_release_##name(bool child)                              \
	{                                                                        \
		(void)child;                                                     \
		walk_locks(id, false);                                           \
	}                                                                        \
	static const struct sheaf_fork_ops fork_ops_##name = { fork_take_##name, \
							       fork_release_##name }
FORK_WALK_OPS(barns, SHEAF_LOCK_BARN);
FORK_WALK_OPS(lists, SHEAF_LOCK_LIST);
FORK_WALK_OPS(prefilled, SHEAF_LOCK_PREFILLED);
FORK_WALK_OPS(meta, SHEAF_LOCK_META_LIST);

static void fork_register_cache_ranks(void)
{
	static const struct sheaf_fork_ops init = { fork_take_init, fork_release_init };
	static const struct sheaf_fork_ops caches = { fork_take_caches, fork_release_caches };
	sheaf_fork_register(SHEAF_LOCK_INIT, &init);
	sheaf_fork_register(SHEAF_LOCK_CACHES, &caches);
	sheaf_fork_register(SHEAF_LOCK_BARN, &fork_ops_barns);
	sheaf_fork_register(SHEAF_LOCK_LIST, &fork_ops_lists);
	sheaf_fork_register(SHEAF_LOCK_PREFILLED, &fork_ops_prefilled);
	sheaf_fork_register(SHEAF_LOCK_META_LIST, &fork_ops_meta);
}

SHEAF_API const char *sheaf_percpu_mode(void)
{
	/* Before Sheaf starts the mode is not chosen yet: it said "per-thread" there,
	 * then "percpu-rseq" once the first cache was made (2026-11-29). */
	if (atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) != 2)
		return "not started";
	return sheaf_reg.mode == SHEAF_MODE_PERCPU ? "percpu-rseq" : "per-thread";
}
