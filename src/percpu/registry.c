/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the registry of caches and threads (sheaf_reg) and its walks: every
 * cache in turn (statistics, the RCU barrier of all caches), and every lock of every
 * cache for fork.  The cache layer adds and removes caches under caches_lock.
 */
#include "percpu/percpu.h"

struct sheaf_registry sheaf_reg = {
	.caches_lock = PTHREAD_MUTEX_INITIALIZER,
	.threads_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- The registry's walks ---------------------------------------------------------- */

void sheaf_cache_for_each(void (*fn)(struct sheaf_cache *, void *), void *arg)
{
	pthread_mutex_lock(&sheaf_reg.caches_lock);
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next)
		fn(sheaf_container_of(pos, struct sheaf_cache, cache_list), arg);
	pthread_mutex_unlock(&sheaf_reg.caches_lock);
}

/* fork: caches_lock is held by the caller. */
void sheaf_caches_lock_all(void)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next) {
		struct sheaf_cache *c = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		pthread_mutex_lock(&c->pcs_lock);
		for (int i = 0; i < sheaf_g.nnodes; i++) {
			pthread_mutex_lock(&c->node[i]->barn->lock);
			pthread_mutex_lock(&c->node[i]->list_lock);
		}
		pthread_mutex_lock(&c->prefilled_lock);
	}
}

void sheaf_caches_unlock_all(void)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.prev; pos != &sheaf_reg.caches; pos = pos->prev) {
		struct sheaf_cache *c = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		pthread_mutex_unlock(&c->prefilled_lock);
		for (int i = sheaf_g.nnodes - 1; i >= 0; i--) {
			pthread_mutex_unlock(&c->node[i]->list_lock);
			pthread_mutex_unlock(&c->node[i]->barn->lock);
		}
		pthread_mutex_unlock(&c->pcs_lock);
	}
}
