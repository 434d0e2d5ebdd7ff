/* SPDX-License-Identifier: MIT */
/*
 * percpu.c - where a thread finds its sheaves, the per-CPU lock, thread exit, and fork
 * (docs/percpu.md; design §6, §7).
 *
 * Per-CPU mode (the default where glibc registered rseq, see rseq.h): CPU k's sheaves
 * are cache->cpu_pcs[k] (created by the first thread that locks CPU k), and its main
 * sheaf is also published in cache->mainv[k + 2] for the restartable fast paths.
 * mainv[k + 2] has three kinds of value:
 *   - a real sheaf: CPU k is unlocked and that is its main (== cpu_pcs[k]->main);
 *   - &pcpu_idle: unlocked, no main sheaf (before first use, after shrink);
 *   - &sheaf_sentinel_sheaf: locked.  The holder keeps the real main in
 *     cpu_pcs[k]->main (sheaf.c works on pcs->main) and unlocks with a store-release
 *     of the possibly new main.
 * Both sentinels have size 0, capacity 0 and key 0, so the fast paths send all three
 * "empty", "full" and "locked" cases to the slow path with the same two tests.
 *
 * Who takes the lock, and how:
 *   - the slow paths, on the calling thread's own CPU: sheaf_rseq_lock(), a
 *     restartable sequence committed by `lock cmpxchg` (rseq.c).  Found held: up to
 *     two sched_yield() for a preempted holder (cpu_lock_local), then, like a thread
 *     with no rseq CPU, NULL, and the caller uses the slab path (K§2.4); it never
 *     spins;
 *   - work on another CPU's sheaves (shrink, destroy, rcu barrier, statistics that
 *     must be exact): lock_remote() exchanges mainv[k + 2] from m to the sentinel with
 *     a plain compare-and-swap, then membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
 *     CPU k) restarts any sequence still running on CPU k with m; after it returns the
 *     caller owns m.  These callers may wait (sched_yield) for a holder: holders never
 *     block on anything those callers hold (lock order, design §4: the per-CPU lock is
 *     taken before barn, list and heap locks, and per-CPU mode never takes pcs_lock);
 *   - fork: the prepare handler takes every per-CPU lock, so that no holder can be
 *     halfway through changing a CPU's sheaves when the child is created.
 * Thread exit needs nothing in per-CPU mode: no thread owns sheaves.
 *
 * Per-thread mode (docs/percpu.md, "Modes"; forced by SHEAF_PERCPU=thread, and wherever
 * rseq is missing): every entry of mainv is the sentinel, so the rseq fast path always
 * fails, and each thread owns one struct sheaf_pcs per cache it used, found by cache id
 * in its struct sheaf_tcache.  Only the owner touches a pcs's sheaves, so the "lock" is
 * ownership itself; other threads never reach into it, except:
 *   - shrink sets flush_req, and the owner flushes at its next slow path;
 *   - destroy drains every pcs (the caller guarantees no concurrent use of the cache);
 *   - thread exit (the pthread key destructor) drains the thread's pcs into the barns;
 *   - the child of fork drains the pcs of threads that did not survive the fork.
 * cache->pcs_lock protects the cache's list of pcs; sheaf_reg.caches_lock serialises destroy
 * against thread exit (lock order: design §4).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "percpu/percpu_impl.h"

struct sheaf_percpu_hooks sheaf_percpu_hooks; /* set by sheaf_init and sheaf_rcu_init */

void (*volatile sheaf_free_check_hook)(const void *obj, size_t size);

/* The calling thread's state (percpu.h: read inline by sheaf_pcs_current). */
__thread struct sheaf_tcache *sheaf_tls_tc;

/* Per-thread mode: a thread's pcs, with a flag saying its owner is between sheaf_pcs_lock
 * and sheaf_pcs_unlock (or draining it).  fork waits for every flag to clear, so that the
 * child never drains a pcs its vanished owner left half changed (design §7); the owner
 * backs off (slab path) while a fork is pending. */
struct thread_pcs {
	struct sheaf_pcs pcs;
	atomic_int busy;
};
static atomic_int fork_pending;

/* Dekker-style: each side stores its flag (seq_cst) and then reads the other's. */
static bool thread_pcs_enter(struct sheaf_pcs *pcs)
{
	struct thread_pcs *tp = (struct thread_pcs *)pcs;
	atomic_store(&tp->busy, 1);
	if (sheaf_likely(!atomic_load(&fork_pending))) {
		sheaf_witness_acquired_try(SHEAF_LOCK_PERCPU); /* never waits */
		return true;
	}
	atomic_store_explicit(&tp->busy, 0, memory_order_release);
	return false;
}

static void thread_pcs_leave(struct sheaf_pcs *pcs)
{
	atomic_store_explicit(&((struct thread_pcs *)pcs)->busy, 0, memory_order_release);
	sheaf_witness_release(SHEAF_LOCK_PERCPU);
}

static void tcache_destroy(struct sheaf_tcache *tc, bool owner_alive);

/* Set once the calling thread's key destructor ran: the thread is exiting, and what
 * it allocates or frees from then on (other keys' destructors, glibc's own freeing of
 * a thread's dlerror string and the like in __libc_thread_freeres, after every
 * destructor) takes the slab path.  Until 2026-11-29 such a call made a new tcache
 * whose destructor never ran, and every exiting thread stranded its sheaves (9 KiB a
 * thread that had used dlerror; adversarial run). */
static __thread bool tls_exited;

static void thread_exit_cb(void *arg)
{
	struct sheaf_tcache *tc = arg;
	tls_exited = true;
	if (!tc)
		return;
	tcache_destroy(tc, true);
	sheaf_tls_tc = NULL;
}

/* Why the mode is what it is (SHEAF_VERBOSE, docs/percpu.md). */
static char mode_why[192];

/* Unlocked CPU without a main sheaf (see the top of this file). */
static struct sheaf_sheaf pcpu_idle;

int sheaf_percpu_init(void)
{
	sheaf_reg.mode = SHEAF_MODE_PERTHREAD;
	if (pthread_key_create(&sheaf_reg.tkey, thread_exit_cb) != 0)
		return -EAGAIN;
	const char *opt = sheaf_option_str(SHEAF_OPT_PERCPU);
	bool forced_thread = opt && !strcmp(opt, "thread");
	bool forced_rseq = opt && !strcmp(opt, "rseq");
	if (opt && !forced_thread && !forced_rseq && strcmp(opt, "auto"))
		sheaf_os_print("sheaf: SHEAF_PERCPU=%s unknown (auto, rseq or thread): using auto",
			       opt);
	/* Always: sets the offset the fast path reads even in per-thread mode. */
	int r = sheaf_rseq_init(mode_why, sizeof(mode_why));
	if (forced_thread) {
		snprintf(mode_why, sizeof(mode_why), "forced by SHEAF_PERCPU=thread");
	} else if (r == 0) {
		sheaf_reg.mode = SHEAF_MODE_PERCPU;
	} else if (forced_rseq) {
		sheaf_os_print(
			"sheaf: SHEAF_PERCPU=rseq is not available here (%s): using per-thread sheaves",
			mode_why);
	}
	if (sheaf_option_long(SHEAF_OPT_VERBOSE))
		sheaf_os_print("sheaf: %s mode: %s",
			       sheaf_reg.mode == SHEAF_MODE_PERCPU ? "per-CPU" : "per-thread",
			       mode_why);
	return 0;
}

const char *sheaf_percpu_mode_reason(void)
{
	return mode_why;
}

void sheaf_free_check_hook_set(void (*fn)(const void *obj, size_t size))
{
	__atomic_store_n(&sheaf_free_check_hook, fn, __ATOMIC_RELEASE);
	/* Every free now reaches the slow path, which calls the hook (rseq.h). */
	sheaf_page_fast_gate(fn != NULL);
}

static struct sheaf_tcache *tcache_create(void)
{
	struct sheaf_tcache *tc = sheaf_meta_alloc(sizeof(*tc));
	if (!tc)
		return NULL;
	tc->owner = pthread_self();
	sheaf_list_init(&tc->link);
	/* The key's destructor is what drains the thread's sheaves at exit: without it
	 * they would be stranded, so a thread that cannot set it gets no sheaves (every
	 * operation then takes the slab path). */
	int r = pthread_setspecific(sheaf_reg.tkey, tc);
	if (r != 0) {
		static atomic_int warned;
		if (!atomic_exchange(&warned, 1))
			sheaf_os_print("sheaf: pthread_setspecific failed (%s): this thread uses "
				       "no sheaves",
				       sheaf_os_errstr(r));
		sheaf_meta_free(tc, sizeof(*tc));
		return NULL;
	}
	sheaf_mutex_lock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
	sheaf_list_add(&tc->link, &sheaf_reg.threads);
	sheaf_mutex_unlock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
	sheaf_tls_tc = tc;
	return tc;
}

static struct sheaf_pcs *pcs_create(struct sheaf_cache *c, struct sheaf_tcache *tc)
{
	if (c->id >= tc->n) {
		uint32_t n = tc->n ? tc->n : 16;
		while (n <= c->id)
			n *= 2;
		struct sheaf_pcs **t = sheaf_meta_alloc(n * sizeof(*t));
		if (!t)
			return NULL;
		/* Other threads read this table under caches_lock: destroy clears its
		 * entries, fork waits on them.  So it is copied and replaced under that
		 * lock (a destroy between an unlocked copy and the publication would be
		 * lost), and the old table is freed only once nobody can read it: freeing
		 * it first let fork and destroy read a freed table (issue 13). */
		sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		struct sheaf_pcs **old = tc->pcs;
		uint32_t old_n = tc->n;
		if (old)
			memcpy(t, old, old_n * sizeof(*t));
		tc->pcs = t;
		tc->n = n;
		sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		if (old)
			sheaf_meta_free(old, old_n * sizeof(*t));
	}
	struct thread_pcs *tp = sheaf_meta_alloc(sizeof(*tp));
	if (!tp)
		return NULL;
	struct sheaf_pcs *pcs = &tp->pcs;
	pcs->main = &sheaf_sentinel_sheaf;
	pcs->slot = -1;
	pcs->node = sheaf_node_current();
	pcs->cache = c;
	pthread_mutex_init(&pcs->rcu_lock, NULL);
	struct sheaf_node *kn = c->node[sheaf_g.node_mem_nid[pcs->node]];
	pcs->key = sheaf_key_encode(kn);
	sheaf_list_init(&pcs->link);
	sheaf_mutex_lock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	sheaf_list_add(&pcs->link, &c->pcs_list);
	sheaf_mutex_unlock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	__atomic_store_n(&tc->pcs[c->id], pcs, __ATOMIC_RELEASE);
	return pcs;
}

/* The calling thread's pcs of @c, creating it on first use; NULL if impossible. */
static inline struct sheaf_pcs *thread_pcs(struct sheaf_cache *c)
{
	struct sheaf_tcache *tc = sheaf_tls_tc;
	if (sheaf_likely(tc && c->id < tc->n && tc->pcs[c->id]))
		return tc->pcs[c->id];
	if (!tc) {
		if (sheaf_unlikely(tls_exited))
			return NULL; /* exiting: no tcache that nobody would drain */
		tc = tcache_create();
		if (!tc)
			return NULL;
	}
	if (tc->in_setup)
		return NULL; /* re-entered while creating state: use the slab path */
	tc->in_setup = 1;
	struct sheaf_pcs *pcs = pcs_create(c, tc);
	tc->in_setup = 0;
	return pcs;
}

/* ---- Per-CPU mode: the lock (design §6) ------------------------------------------- */

/* A CPU's pcs, with the holder of its lock recorded (fork checks it, and a debugger
 * can tell who holds a CPU). */
struct cpu_pcs {
	struct sheaf_pcs pcs;
	pthread_t holder; /* valid while the CPU is locked */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static inline struct sheaf_sheaf **cpu_slot(struct sheaf_cache *c, int k)
{
	return &c->mainv[k + 2].m;
}

/* First lock of CPU k by anyone: its pcs.  Only the holder of CPU k's lock creates
 * it, so there is no race; remote lockers see it through the lock word. */
static struct sheaf_pcs *cpu_pcs_create(struct sheaf_cache *c, int k)
{
	struct cpu_pcs *cp = sheaf_meta_alloc(sizeof(*cp));
	if (!cp)
		return NULL;
	struct sheaf_pcs *pcs = &cp->pcs;
	pcs->main = &sheaf_sentinel_sheaf;
	pcs->slot = k;
	pcs->node = sheaf_cpu_to_node(k);
	pcs->cache = c;
	pcs->key = sheaf_key_encode(c->node[sheaf_g.node_mem_nid[pcs->node]]);
	pthread_mutex_init(&pcs->rcu_lock, NULL);
	sheaf_list_init(&pcs->link);
	__atomic_store_n(&c->cpu_pcs[k], pcs, __ATOMIC_RELEASE);
	return pcs;
}

/* CPU k's slot now holds the sentinel and @m was its value: the holder's view. */
static struct sheaf_pcs *cpu_locked(struct sheaf_cache *c, int k, struct sheaf_sheaf *m,
				    bool create)
{
	struct sheaf_pcs *pcs = cpu_pcs_get(c, k);
	if (!pcs && create)
		pcs = cpu_pcs_create(c, k);
	if (!pcs)
		return NULL;
	/* While unlocked, the slot and pcs->main name the same sheaf. */
	sheaf_assert_internal(m == &pcpu_idle ? pcs->main == &sheaf_sentinel_sheaf :
						pcs->main == m);
	pcs->main = m == &pcpu_idle ? &sheaf_sentinel_sheaf : m;
	((struct cpu_pcs *)pcs)->holder = pthread_self();
	return pcs;
}

/* Release CPU k: publish its (possibly new) main with a store-release; @pcs NULL
 * means CPU k never had sheaves and goes back to idle. */
static void cpu_unlock_slot(struct sheaf_cache *c, int k, struct sheaf_pcs *pcs)
{
	struct sheaf_sheaf *m = pcs ? pcs->main : &pcpu_idle;
	if (m == &sheaf_sentinel_sheaf)
		m = &pcpu_idle;
	if (pcs)
		((struct cpu_pcs *)pcs)->holder = 0;
	__atomic_store_n(cpu_slot(c, k), m, __ATOMIC_RELEASE);
	sheaf_witness_release(SHEAF_LOCK_PERCPU);
}

/* The slow paths: lock the calling thread's current CPU, or NULL (held, no rseq CPU,
 * no memory for its pcs): the caller takes the slab path and never waits. */
static struct sheaf_pcs *cpu_lock_local(struct sheaf_cache *c)
{
	if (!c->cpu_pcs)
		return NULL;
	struct sheaf_sheaf *m;
	int k = sheaf_rseq_lock(c->mainv, &sheaf_sentinel_sheaf, &m);
	/* Held: its holder took it on this CPU and, since this thread runs here now, was
	 * most likely preempted inside its slow path (a wake-up preempts the running
	 * thread anywhere).  Until it runs again, every slow path of this CPU found the
	 * lock held and took the slab path: with two producer and two consumer threads
	 * on two CPUs, whole batches of 4096 frees at a time, 0.4-1.4 % of all
	 * operations (issue 17).  Yielding lets a preempted holder finish; a holder that
	 * sleeps (or a remote locker) costs two yields, then the slab path as before. */
	for (int tries = 0; k == -2 && tries < 2; tries++) {
		atomic_fetch_add_explicit(&c->pcs_lock_waits, 1, memory_order_relaxed);
		sched_yield();
		k = sheaf_rseq_lock(c->mainv, &sheaf_sentinel_sheaf, &m);
	}
	if (k < 0)
		return NULL;
	sheaf_witness_acquired_try(SHEAF_LOCK_PERCPU); /* yields at most: never blocks */
	sheaf_assert_internal(k < sheaf_g.ncpus);
	struct sheaf_pcs *pcs = cpu_locked(c, k, m, true);
	if (!pcs) {
		cpu_unlock_slot(c, k, NULL);
		return NULL;
	}
	sheaf_pcs_harvest(pcs);
	return pcs;
}

/* Lock CPU k from any CPU: compare-and-swap its slot to the sentinel (waiting for a
 * holder to finish), then, with @fence, restart every sequence still running on CPU k
 * with the old main (membarrier).  Returns the value replaced. */
static struct sheaf_sheaf *cpu_lock_slot_remote(struct sheaf_cache *c, int k, bool fence)
{
	struct sheaf_sheaf **slot = cpu_slot(c, k);
	sheaf_witness_acquire(SHEAF_LOCK_PERCPU); /* may wait for the holder */
	for (unsigned spin = 0;; spin++) {
		struct sheaf_sheaf *m = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		if (m != &sheaf_sentinel_sheaf &&
		    __atomic_compare_exchange_n(slot, &m, &sheaf_sentinel_sheaf, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			/* The idle sheaf is never written by a fast path (size and capacity
			 * 0), so taking it needs no fence. */
			if (fence && m != &pcpu_idle)
				sheaf_rseq_fence(k);
			return m;
		}
		if (spin < 64)
			cpu_relax();
		else
			sched_yield();
	}
}

/* Remote lock with the pcs view and the statistics harvested; NULL when CPU k never
 * had sheaves (still locked: release with cpu_unlock_remote). */
static struct sheaf_pcs *cpu_lock_remote(struct sheaf_cache *c, int k)
{
	struct sheaf_sheaf *m = cpu_lock_slot_remote(c, k, true);
	struct sheaf_pcs *pcs = cpu_locked(c, k, m, false);
	if (pcs)
		sheaf_pcs_harvest(pcs);
	return pcs;
}

static void cpu_unlock_remote(struct sheaf_cache *c, int k, struct sheaf_pcs *pcs)
{
	if (pcs)
		sheaf_pcs_rebase(pcs);
	cpu_unlock_slot(c, k, pcs);
}

/* ---- Lock and unlock, both modes ------------------------------------------------------ */

/* Per-thread mode: tcaches of threads that did not survive a fork.  The child handler only
 * moves them here and folds in their counts (list operations, arithmetic); they are drained
 * at the child's next slow path, after every atfork handler has run -- draining inside the
 * handler could call a free hook whose locks a later child handler has yet to release.
 * Protected by sheaf_reg.threads_lock. */
static struct sheaf_list fork_orphans = { &fork_orphans, &fork_orphans };
static atomic_int fork_orphans_pending;
static void drain_fork_orphans(void);

struct sheaf_pcs *sheaf_pcs_lock(struct sheaf_cache *c)
{
	if (sheaf_reg.mode == SHEAF_MODE_PERCPU)
		return cpu_lock_local(c);
	if (sheaf_unlikely(atomic_load_explicit(&fork_orphans_pending, memory_order_relaxed)))
		drain_fork_orphans();
	struct sheaf_pcs *pcs = thread_pcs(c);
	if (!pcs || !thread_pcs_enter(pcs))
		return NULL;
	sheaf_pcs_harvest(pcs);
	if (sheaf_unlikely(atomic_load_explicit(&pcs->flush_req, memory_order_relaxed))) {
		atomic_store_explicit(&pcs->flush_req, 0, memory_order_relaxed);
		sheaf_pcs_drain(c, pcs, true);
		/* The thread may have moved since: pick up its current node (D3). */
		int nid = sheaf_node_current();
		if (nid != pcs->node) {
			pcs->node = nid;
			pcs->key = sheaf_key_encode(c->node[sheaf_g.node_mem_nid[nid]]);
		}
	}
	return pcs;
}

/* Per-thread mode: fold the calling thread's own fast-path counts of @c into its pcs,
 * so that statistics this thread reads are exact for its own operations (another live
 * thread's join at its next slow path).  Creates nothing.  In per-CPU mode
 * sheaf_pcs_for_each harvests every CPU itself. */
void sheaf_pcs_harvest_self(struct sheaf_cache *c)
{
	if (sheaf_reg.mode == SHEAF_MODE_PERCPU)
		return;
	struct sheaf_tcache *tc = sheaf_tls_tc;
	if (!tc || c->id >= tc->n || !tc->pcs[c->id])
		return;
	struct sheaf_pcs *pcs = tc->pcs[c->id];
	if (!thread_pcs_enter(pcs))
		return; /* a fork is pending: the counts join later */
	sheaf_pcs_harvest(pcs);
	sheaf_pcs_rebase(pcs);
	thread_pcs_leave(pcs);
}

void sheaf_pcs_unlock(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	sheaf_pcs_rebase(pcs);
	if (pcs->slot >= 0)
		cpu_unlock_slot(c, pcs->slot, pcs);
	else
		thread_pcs_leave(pcs);
}

static void pcs_free(struct sheaf_cache *c, struct sheaf_pcs *pcs, size_t bytes)
{
	struct sheaf_sheaf *m = pcs->main;
	if (m != &sheaf_sentinel_sheaf) {
		if (m->size)
			sheaf_sheaf_flush(c, m, pcs->stat);
		sheaf_sheaf_free(c, m);
	}
	sheaf_pcs_fold_stats(c, pcs);
	sheaf_meta_free(pcs, bytes);
}

/* Drain and free every pcs of @tc (thread exit, or a thread lost in fork). */
static void tcache_destroy(struct sheaf_tcache *tc, bool owner_alive)
{
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	for (uint32_t i = 0; i < tc->n; i++) {
		struct sheaf_pcs *pcs = tc->pcs[i];
		if (!pcs)
			continue;
		struct sheaf_cache *c = pcs->cache;
		/* Counts and list in one step under pcs_lock (sheaf_pcs_fold_stats). */
		sheaf_mutex_lock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
		sheaf_pcs_harvest(pcs);
		sheaf_pcs_fold_stats(c, pcs);
		sheaf_list_del(&pcs->link);
		sheaf_mutex_unlock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
		sheaf_pcs_drain(c, pcs, false);
		pcs_free(c, pcs, sizeof(struct thread_pcs));
		tc->pcs[i] = NULL;
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	sheaf_mutex_lock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
	sheaf_list_del(&tc->link);
	sheaf_mutex_unlock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
	/* Our own frees below must not look into the table being freed. */
	if (owner_alive && sheaf_tls_tc == tc)
		sheaf_tls_tc = NULL;
	if (tc->pcs)
		sheaf_meta_free(tc->pcs, tc->n * sizeof(*tc->pcs));
	sheaf_meta_free(tc, sizeof(*tc));
}

SHEAF_API void sheaf_thread_flush(void)
{
	struct sheaf_tcache *tc = sheaf_tls_tc;
	if (!tc || sheaf_reg.mode != SHEAF_MODE_PERTHREAD)
		return;
	for (uint32_t i = 0; i < tc->n; i++) {
		struct sheaf_pcs *pcs = tc->pcs[i];
		if (pcs && thread_pcs_enter(pcs)) {
			sheaf_pcs_drain(pcs->cache, pcs, false);
			thread_pcs_leave(pcs);
		}
	}
}

/* Shrink: the caller's own pcs are drained to slabs now; other threads' on their next
 * slow path (they may be inside a fast path this very moment). */
void sheaf_pcs_shrink_all(struct sheaf_cache *c)
{
	if (percpu_cache(c)) {
		/* Per-CPU mode: every CPU's sheaves, now, from here (membarrier makes it
		 * safe; this also empties CPUs gone offline or out of the cpuset). */
		for (int k = 0; k < sheaf_g.ncpus; k++) {
			struct sheaf_pcs *pcs = cpu_lock_remote(c, k);
			if (pcs) {
				sheaf_pcs_drain(c, pcs, true);
				if (pcs->main != &sheaf_sentinel_sheaf) {
					sheaf_sheaf_free(c, pcs->main);
					pcs->main = &sheaf_sentinel_sheaf;
				}
			}
			cpu_unlock_remote(c, k, pcs);
		}
		return;
	}
	/* The threads a fork left behind first: their sheaves belong to nobody who could
	 * answer a flush request (until 2026-11-29 a shrink in the child left them until
	 * its next slow path, adversarial review). */
	if (sheaf_unlikely(atomic_load_explicit(&fork_orphans_pending, memory_order_relaxed)))
		drain_fork_orphans();
	struct sheaf_pcs *mine = sheaf_pcs_current(c);
	sheaf_mutex_lock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	struct sheaf_list *pos;
	for (pos = c->pcs_list.next; pos != &c->pcs_list; pos = pos->next) {
		struct sheaf_pcs *pcs = sheaf_container_of(pos, struct sheaf_pcs, link);
		if (pcs != mine)
			atomic_store_explicit(&pcs->flush_req, 1, memory_order_relaxed);
	}
	sheaf_mutex_unlock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	if (mine && thread_pcs_enter(mine)) {
		sheaf_pcs_harvest(mine);
		sheaf_pcs_drain(c, mine, true);
		struct sheaf_sheaf *m = mine->main;
		if (m != &sheaf_sentinel_sheaf) {
			sheaf_sheaf_free(c, m);
			mine->main = &sheaf_sentinel_sheaf;
		}
		sheaf_pcs_rebase(mine);
		thread_pcs_leave(mine);
	}
}

/* Destroy: drain and free every pcs (no concurrent use of @c, by contract). */
void sheaf_pcs_teardown_cache(struct sheaf_cache *c)
{
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	/* And the threads a fork left behind: their tables kept the pcs freed below, freed
	 * again by their drain (a fork child's destroy aborted, until 2026-11-29). */
	sheaf_mutex_lock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
	sheaf_tcaches_forget(&sheaf_reg.threads, c->id);
	sheaf_tcaches_forget(&fork_orphans, c->id);
	sheaf_mutex_unlock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
	struct sheaf_list *pos;
	/* Take the list out under pcs_lock, drain outside it: draining frees metadata,
	 * whose caches' list locks fork takes after every pcs_lock (design §4). */
	struct sheaf_list gone, *tmp;
	sheaf_list_init(&gone);
	sheaf_mutex_lock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	sheaf_list_for_each_safe(pos, tmp, &c->pcs_list) {
		sheaf_list_del(pos);
		sheaf_list_add(pos, &gone);
	}
	sheaf_mutex_unlock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	sheaf_list_for_each_safe(pos, tmp, &gone) {
		struct sheaf_pcs *pcs = sheaf_container_of(pos, struct sheaf_pcs, link);
		sheaf_list_del(&pcs->link);
		sheaf_pcs_drain(c, pcs, true);
		pcs_free(c, pcs, sizeof(struct thread_pcs));
	}
	if (c->cpu_pcs) {
		/* Per-CPU mode: every CPU stays locked for good, so a late free of a
		 * leaked object (destroy kept the cache) takes the slab path. */
		for (int k = 0; k < sheaf_g.ncpus; k++) {
			struct sheaf_pcs *pcs = cpu_lock_remote(c, k);
			/* Locked for good (above): the witness no longer counts it as ours. */
			sheaf_witness_release(SHEAF_LOCK_PERCPU);
			if (!pcs)
				continue;
			sheaf_pcs_drain(c, pcs, true);
			__atomic_store_n(&c->cpu_pcs[k], NULL, __ATOMIC_RELAXED);
			pcs_free(c, pcs, sizeof(struct cpu_pcs));
		}
		struct sheaf_pcs **v = c->cpu_pcs;
		c->cpu_pcs = NULL;
		sheaf_meta_free(v, (size_t)sheaf_g.ncpus * sizeof(*v));
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
}

/* Run @fn on every pcs of @c (statistics; racy reads of sheaf sizes are fine). */
void sheaf_pcs_for_each(struct sheaf_cache *c,
			void (*fn)(struct sheaf_cache *, struct sheaf_pcs *, void *), void *arg)
{
	if (percpu_cache(c)) {
		/* Per-CPU mode: each CPU locked in turn (exact figures, harvested). */
		for (int k = 0; k < sheaf_g.ncpus; k++) {
			struct sheaf_pcs *pcs = cpu_lock_remote(c, k);
			if (pcs)
				fn(c, pcs, arg);
			cpu_unlock_remote(c, k, pcs);
		}
		return;
	}
	sheaf_mutex_lock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	struct sheaf_list *pos;
	for (pos = c->pcs_list.next; pos != &c->pcs_list; pos = pos->next)
		fn(c, sheaf_container_of(pos, struct sheaf_pcs, link), arg);
	sheaf_mutex_unlock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
}

int sheaf_pcs_setup_cache(struct sheaf_cache *c)
{
	c->mainv[0].m = &sheaf_sentinel_sheaf; /* rseq cpu_id -2: registration failed */
	c->mainv[1].m = &sheaf_sentinel_sheaf; /* rseq cpu_id -1: not registered yet */
	c->cpu_pcs = NULL;
	/* Per-CPU slots for every possible CPU (a CPU that comes online later needs
	 * nothing new); caches without sheaves (metadata, debug) never lock a CPU. */
	if (sheaf_reg.mode == SHEAF_MODE_PERCPU && c->capacity_default > 0)
		c->cpu_pcs = sheaf_meta_alloc((size_t)sheaf_g.ncpus * sizeof(*c->cpu_pcs));
	/* Without cpu_pcs (per-thread mode, no sheaves, or no memory) every CPU stays
	 * "locked": the fast paths always fail, as design §6 wants for per-thread mode. */
	for (int k = 0; k < sheaf_g.ncpus; k++)
		*cpu_slot(c, k) = c->cpu_pcs ? &pcpu_idle : &sheaf_sentinel_sheaf;
	return 0;
}

/* ---- fork (design §7, the lock table in base/lock.h) --------------------------------- */

/* Rank PERCPU, per-CPU mode: every CPU of every cache is locked by the forking thread,
 * so no lock holder can be halfway through changing a CPU's sheaves when the child is
 * created (the child has no thread to finish the change).  No membarrier is needed:
 * nothing here changes a main sheaf, and a fast path that commits on it meanwhile is
 * just an earlier operation.  caches_lock is held (rank CACHES).
 * Per-thread mode: wait until no thread is inside its pcs (see struct thread_pcs);
 * threads_lock (rank THREADS) keeps the thread list, caches_lock every table, in place. */
static void fork_take_percpu(void)
{
	if (sheaf_reg.mode != SHEAF_MODE_PERCPU) {
		atomic_store(&fork_pending, 1);
		struct sheaf_list *pos;
		for (pos = sheaf_reg.threads.next; pos != &sheaf_reg.threads; pos = pos->next) {
			struct sheaf_tcache *tc =
				sheaf_container_of(pos, struct sheaf_tcache, link);
			for (uint32_t i = 0; i < tc->n; i++) {
				/* Acquire: pairs with pcs_create's release publication, so
				 * the new pcs (zeroed by the metadata allocator) is seen
				 * initialised. */
				struct thread_pcs *tp = (struct thread_pcs *)__atomic_load_n(
					&tc->pcs[i], __ATOMIC_ACQUIRE);
				for (unsigned spin = 0; tp && atomic_load(&tp->busy); spin++)
					spin < 64 ? cpu_relax() : (void)sched_yield();
			}
		}
		return;
	}
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next) {
		struct sheaf_cache *c = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		if (!c->cpu_pcs)
			continue;
		for (int k = 0; k < sheaf_g.ncpus; k++) {
			struct sheaf_sheaf *m = cpu_lock_slot_remote(c, k, false);
			(void)cpu_locked(c, k, m, false);
		}
	}
}

static void fork_release_percpu(bool child)
{
	if (sheaf_reg.mode != SHEAF_MODE_PERCPU) {
		atomic_store(&fork_pending, 0);
		return;
	}
	pthread_t self = pthread_self();
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next) {
		struct sheaf_cache *c = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		if (!c->cpu_pcs)
			continue;
		for (int k = 0; k < sheaf_g.ncpus; k++) {
			struct sheaf_pcs *pcs = cpu_pcs_get(c, k);
			/* Every holder is this thread (prepare took them all); a lock left by
			 * a vanished thread would mean a half-done change: refuse to go on. */
			if (pcs && !pthread_equal(((struct cpu_pcs *)pcs)->holder, self)) {
				sheaf_os_print(
					"sheaf: fork: CPU %d of cache '%s' locked by a lost thread",
					k, c->name);
				abort();
			}
			cpu_unlock_slot(c, k, pcs);
		}
	}
	if (child)
		sheaf_rseq_fork_child();
}

/* Rank PCS_LIST: every cache's list of per-thread pcs. */
static void fork_take_pcs_lists(void)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next)
		sheaf_mutex_lock(&sheaf_container_of(pos, struct sheaf_cache, cache_list)->pcs_lock,
				 SHEAF_LOCK_PCS_LIST);
}

static void fork_release_pcs_lists(bool child)
{
	(void)child;
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.prev; pos != &sheaf_reg.caches; pos = pos->prev)
		sheaf_mutex_unlock(
			&sheaf_container_of(pos, struct sheaf_cache, cache_list)->pcs_lock,
			SHEAF_LOCK_PCS_LIST);
}

static void fork_take_threads(void)
{
	sheaf_mutex_lock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
}

static sheaf_noinline void drain_fork_orphans(void)
{
	/* Not while the fork's child handlers still run: one of them (liburcu's
	 * call_rcu_after_fork_child, from the RCU layer's) allocates while it holds
	 * liburcu's call_rcu mutex, and an orphan's rcu sheaf handed to call_rcu here
	 * would take that mutex again (the child hung in fork(), adversarial review of
	 * 2026-11-29).  The next slow path after the walk drains them. */
	if (sheaf_fork_walking())
		return;
	for (;;) {
		struct sheaf_tcache *victim = NULL;
		sheaf_mutex_lock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
		if (!sheaf_list_empty(&fork_orphans)) {
			victim = sheaf_list_first(&fork_orphans, struct sheaf_tcache, link);
			/* Off the list before the lock goes (two threads took the same one), onto
			 * the threads' list, where a destroy clears its entry (until 2026-11-29). */
			sheaf_list_del(&victim->link);
			sheaf_list_add(&victim->link, &sheaf_reg.threads);
		} else {
			atomic_store(&fork_orphans_pending, 0);
		}
		sheaf_mutex_unlock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
		if (!victim)
			break;
		tcache_destroy(victim, false); /* off fork_orphans, takes it off threads */
	}
}

/* In the child, other threads are gone: their cached objects go back to the barns (lazily,
 * see fork_orphans); their fast-path counts, the parent's, are folded in now (at the drain
 * they were the child's: SHEAF_MALLOC_STATS until 2026-11-29).  Under threads_lock. */
static void fork_release_threads(bool child)
{
	if (child) {
		struct sheaf_tcache *mine = sheaf_tls_tc;
		struct sheaf_list *pos, *tmp;
		sheaf_list_for_each_safe(pos, tmp, &sheaf_reg.threads) {
			struct sheaf_tcache *tc =
				sheaf_container_of(pos, struct sheaf_tcache, link);
			if (tc == mine)
				continue;
			for (uint32_t i = 0; i < tc->n; i++)
				if (tc->pcs[i])
					sheaf_pcs_harvest(tc->pcs[i]);
			sheaf_list_del(&tc->link);
			sheaf_list_add(&tc->link, &fork_orphans);
		}
		if (!sheaf_list_empty(&fork_orphans))
			atomic_store(&fork_orphans_pending, 1);
	}
	sheaf_mutex_unlock(&sheaf_reg.threads_lock, SHEAF_LOCK_THREADS);
}

void sheaf_percpu_fork_register(void)
{
	static const struct sheaf_fork_ops threads = { fork_take_threads, fork_release_threads };
	static const struct sheaf_fork_ops lists = { fork_take_pcs_lists, fork_release_pcs_lists };
	static const struct sheaf_fork_ops percpu = { fork_take_percpu, fork_release_percpu };
	sheaf_fork_register(SHEAF_LOCK_THREADS, &threads);
	sheaf_fork_register(SHEAF_LOCK_PCS_LIST, &lists);
	sheaf_fork_register(SHEAF_LOCK_PERCPU, &percpu);
}
