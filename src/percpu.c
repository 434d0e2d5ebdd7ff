/* SPDX-License-Identifier: MIT */
/*
 * percpu.c - where a thread finds its sheaves, thread exit, and fork (design §6, §7).
 *
 * Per-thread mode (DESIGN §2 "per-thread fallback"): each thread owns one struct
 * sheaf_pcs per cache it used, found by cache id in its struct sheaf_tcache.  Only the
 * owner touches a pcs's sheaves, so the "lock" is ownership itself; other threads
 * never reach into it, except:
 *   - shrink sets flush_req, and the owner flushes at its next slow path;
 *   - destroy drains every pcs (the caller guarantees no concurrent use of the cache);
 *   - thread exit (the pthread key destructor) drains the thread's pcs into the barns;
 *   - the child of fork drains the pcs of threads that did not survive the fork.
 * cache->pcs_lock protects the cache's list of pcs; sheaf_g.caches_lock serialises
 * destroy against thread exit (lock order: design §4).
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

static __thread struct sheaf_tcache *tls_tc;

static void tcache_destroy(struct sheaf_tcache *tc, bool owner_alive);

static void thread_exit_cb(void *arg)
{
	struct sheaf_tcache *tc = arg;
	if (!tc)
		return;
	tcache_destroy(tc, true);
	tls_tc = NULL;
}

int sheaf_percpu_init(void)
{
	sheaf_g.mode = SHEAF_MODE_PERTHREAD;
	if (pthread_key_create(&sheaf_g.tkey, thread_exit_cb) != 0)
		return -EAGAIN;
	return 0;
}

static struct sheaf_tcache *tcache_create(void)
{
	struct sheaf_tcache *tc = sheaf_meta_alloc(sizeof(*tc));
	if (!tc)
		return NULL;
	tc->owner = pthread_self();
	sheaf_list_init(&tc->link);
	pthread_mutex_lock(&sheaf_g.threads_lock);
	sheaf_list_add(&tc->link, &sheaf_g.threads);
	pthread_mutex_unlock(&sheaf_g.threads_lock);
	tls_tc = tc;
	pthread_setspecific(sheaf_g.tkey, tc);
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
		if (tc->pcs) {
			memcpy(t, tc->pcs, tc->n * sizeof(*t));
			sheaf_meta_free(tc->pcs, tc->n * sizeof(*t));
		}
		/* Published under caches_lock so destroy never sees a stale table. */
		pthread_mutex_lock(&sheaf_g.caches_lock);
		tc->pcs = t;
		tc->n = n;
		pthread_mutex_unlock(&sheaf_g.caches_lock);
	}
	struct sheaf_pcs *pcs = sheaf_meta_alloc(sizeof(*pcs));
	if (!pcs)
		return NULL;
	pcs->main = &sheaf_sentinel_sheaf;
	pcs->slot = -1;
	pcs->node = sheaf_node_current();
	pcs->cache = c;
	pthread_mutex_init(&pcs->rcu_lock, NULL);
	struct sheaf_node *kn = c->node[sheaf_g.node_mem_nid[pcs->node]];
	pcs->key = (uintptr_t)kn;
	sheaf_list_init(&pcs->link);
	pthread_mutex_lock(&c->pcs_lock);
	sheaf_list_add(&pcs->link, &c->pcs_list);
	pthread_mutex_unlock(&c->pcs_lock);
	__atomic_store_n(&tc->pcs[c->id], pcs, __ATOMIC_RELEASE);
	return pcs;
}

/* The calling thread's pcs of @c, creating it on first use; NULL if impossible. */
static inline struct sheaf_pcs *thread_pcs(struct sheaf_cache *c)
{
	struct sheaf_tcache *tc = tls_tc;
	if (sheaf_likely(tc && c->id < tc->n && tc->pcs[c->id]))
		return tc->pcs[c->id];
	if (!tc) {
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

struct sheaf_pcs *sheaf_pcs_lock(struct sheaf_cache *c)
{
	struct sheaf_pcs *pcs = thread_pcs(c);
	if (!pcs)
		return NULL;
	sheaf_pcs_harvest(pcs);
	if (sheaf_unlikely(atomic_load_explicit(&pcs->flush_req, memory_order_relaxed))) {
		atomic_store_explicit(&pcs->flush_req, 0, memory_order_relaxed);
		sheaf_pcs_drain(c, pcs, true);
		/* The thread may have moved since: pick up its current node (D3). */
		int nid = sheaf_node_current();
		if (nid != pcs->node) {
			pcs->node = nid;
			pcs->key = (uintptr_t)c->node[sheaf_g.node_mem_nid[nid]];
		}
	}
	return pcs;
}

void sheaf_pcs_unlock(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	(void)c;
	sheaf_pcs_rebase(pcs);
}

struct sheaf_pcs *sheaf_pcs_current(struct sheaf_cache *c)
{
	struct sheaf_tcache *tc = tls_tc;
	if (sheaf_likely(tc && c->id < tc->n))
		return tc->pcs[c->id];
	return NULL;
}

static void pcs_free(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	struct sheaf_sheaf *m = pcs->main;
	if (m != &sheaf_sentinel_sheaf) {
		if (m->size)
			sheaf_sheaf_flush(c, m, pcs->stat);
		sheaf_sheaf_free(c, m);
	}
	/* Keep the thread's event counts: they move to the cache's atomic counters. */
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		if (pcs->stat[i])
			sheaf_stat_atomic(c, (enum sheaf_stat_item)i, pcs->stat[i]);
	sheaf_meta_free(pcs, sizeof(*pcs));
}

/* Drain and free every pcs of @tc (thread exit, or a thread lost in fork). */
static void tcache_destroy(struct sheaf_tcache *tc, bool owner_alive)
{
	pthread_mutex_lock(&sheaf_g.caches_lock);
	for (uint32_t i = 0; i < tc->n; i++) {
		struct sheaf_pcs *pcs = tc->pcs[i];
		if (!pcs)
			continue;
		struct sheaf_cache *c = pcs->cache;
		pthread_mutex_lock(&c->pcs_lock);
		sheaf_list_del(&pcs->link);
		pthread_mutex_unlock(&c->pcs_lock);
		sheaf_pcs_drain(c, pcs, false);
		pcs_free(c, pcs);
		tc->pcs[i] = NULL;
	}
	pthread_mutex_unlock(&sheaf_g.caches_lock);
	pthread_mutex_lock(&sheaf_g.threads_lock);
	sheaf_list_del(&tc->link);
	pthread_mutex_unlock(&sheaf_g.threads_lock);
	/* Our own frees below must not look into the table being freed. */
	if (owner_alive && tls_tc == tc)
		tls_tc = NULL;
	if (tc->pcs)
		sheaf_meta_free(tc->pcs, tc->n * sizeof(*tc->pcs));
	sheaf_meta_free(tc, sizeof(*tc));
}

SHEAF_API void sheaf_thread_flush(void)
{
	struct sheaf_tcache *tc = tls_tc;
	if (!tc || sheaf_g.mode != SHEAF_MODE_PERTHREAD)
		return;
	for (uint32_t i = 0; i < tc->n; i++) {
		struct sheaf_pcs *pcs = tc->pcs[i];
		if (pcs)
			sheaf_pcs_drain(pcs->cache, pcs, false);
	}
}

/* Shrink: the caller's own pcs are drained to slabs now; other threads' on their next
 * slow path (they may be inside a fast path this very moment). */
void sheaf_pcs_shrink_all(struct sheaf_cache *c)
{
	struct sheaf_pcs *mine = sheaf_pcs_current(c);
	pthread_mutex_lock(&c->pcs_lock);
	struct sheaf_list *pos;
	for (pos = c->pcs_list.next; pos != &c->pcs_list; pos = pos->next) {
		struct sheaf_pcs *pcs = sheaf_container_of(pos, struct sheaf_pcs, link);
		if (pcs != mine)
			atomic_store_explicit(&pcs->flush_req, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&c->pcs_lock);
	if (mine) {
		sheaf_pcs_harvest(mine);
		sheaf_pcs_drain(c, mine, true);
		struct sheaf_sheaf *m = mine->main;
		if (m != &sheaf_sentinel_sheaf) {
			sheaf_sheaf_free(c, m);
			mine->main = &sheaf_sentinel_sheaf;
		}
		sheaf_pcs_rebase(mine);
	}
}

/* Destroy: drain and free every pcs (no concurrent use of @c, by contract). */
void sheaf_pcs_teardown_cache(struct sheaf_cache *c)
{
	pthread_mutex_lock(&sheaf_g.caches_lock);
	pthread_mutex_lock(&sheaf_g.threads_lock);
	struct sheaf_list *pos;
	for (pos = sheaf_g.threads.next; pos != &sheaf_g.threads; pos = pos->next) {
		struct sheaf_tcache *tc = sheaf_container_of(pos, struct sheaf_tcache, link);
		if (c->id < tc->n)
			__atomic_store_n(&tc->pcs[c->id], NULL, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&sheaf_g.threads_lock);
	pthread_mutex_lock(&c->pcs_lock);
	struct sheaf_list *tmp;
	sheaf_list_for_each_safe(pos, tmp, &c->pcs_list)
	{
		struct sheaf_pcs *pcs = sheaf_container_of(pos, struct sheaf_pcs, link);
		sheaf_list_del(&pcs->link);
		sheaf_pcs_drain(c, pcs, true);
		pcs_free(c, pcs);
	}
	pthread_mutex_unlock(&c->pcs_lock);
	pthread_mutex_unlock(&sheaf_g.caches_lock);
}

/* Run @fn on every pcs of @c (statistics; racy reads of sheaf sizes are fine). */
void sheaf_pcs_for_each(struct sheaf_cache *c, void (*fn)(struct sheaf_cache *, struct sheaf_pcs *, void *), void *arg)
{
	pthread_mutex_lock(&c->pcs_lock);
	struct sheaf_list *pos;
	for (pos = c->pcs_list.next; pos != &c->pcs_list; pos = pos->next)
		fn(c, sheaf_container_of(pos, struct sheaf_pcs, link), arg);
	pthread_mutex_unlock(&c->pcs_lock);
}

int sheaf_pcs_setup_cache(struct sheaf_cache *c)
{
	for (int i = 0; i < sheaf_g.ncpus + 2; i++)
		c->mainv[i] = &sheaf_sentinel_sheaf;
	return 0;
}

/* ---- fork (design §7) ------------------------------------------------------------- */

void sheaf_percpu_fork_prepare(void)
{
	pthread_mutex_lock(&sheaf_g.caches_lock);
	sheaf_caches_lock_all();
	pthread_mutex_lock(&sheaf_g.threads_lock);
	pthread_mutex_lock(&sheaf_heap.lock);
}

void sheaf_percpu_fork_parent(void)
{
	pthread_mutex_unlock(&sheaf_heap.lock);
	pthread_mutex_unlock(&sheaf_g.threads_lock);
	sheaf_caches_unlock_all();
	pthread_mutex_unlock(&sheaf_g.caches_lock);
}

void sheaf_percpu_fork_child(void)
{
	sheaf_percpu_fork_parent();
	/* Threads other than this one are gone: their cached objects return to the
	 * barns now instead of being stranded. */
	struct sheaf_tcache *mine = tls_tc;
	for (;;) {
		struct sheaf_tcache *victim = NULL;
		pthread_mutex_lock(&sheaf_g.threads_lock);
		struct sheaf_list *pos;
		for (pos = sheaf_g.threads.next; pos != &sheaf_g.threads; pos = pos->next) {
			struct sheaf_tcache *tc = sheaf_container_of(pos, struct sheaf_tcache, link);
			if (tc != mine) {
				victim = tc;
				break;
			}
		}
		pthread_mutex_unlock(&sheaf_g.threads_lock);
		if (!victim)
			break;
		tcache_destroy(victim, false);
	}
}

static void gauge_one(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	(void)c;
	uint64_t *a = arg;
	a[0] += sheaf_rd(pcs->cached);
	a[1]++;
}

void sheaf_pcs_stats_gauge(struct sheaf_cache *c, uint64_t *in_pcs, uint64_t *slots)
{
	uint64_t a[2] = { 0, 0 };
	sheaf_pcs_for_each(c, gauge_one, a);
	*in_pcs = a[0];
	*slots = a[1];
}
