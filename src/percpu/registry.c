/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the registry of caches and threads (sheaf_reg) and its walks: every
 * cache in turn (statistics, the RCU barrier of all caches).  Fork walks the lock
 * table instead (base/lock.h).  The cache layer adds and removes caches under caches_lock.
 */
#include "percpu/percpu.h"

struct sheaf_registry sheaf_reg = {
	.caches_lock = PTHREAD_MUTEX_INITIALIZER,
	.threads_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- The registry's walks ---------------------------------------------------------- */

void sheaf_cache_for_each(void (*fn)(struct sheaf_cache *, void *), void *arg)
{
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next)
		fn(sheaf_container_of(pos, struct sheaf_cache, cache_list), arg);
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
}

/* A destroyed cache's pcs are freed from its own list (sheaf_pcs_teardown_cache): the
 * tables of the threads that used it must not point at them any more. */
void sheaf_tcaches_forget(struct sheaf_list *list, uint32_t id)
{
	for (struct sheaf_list *pos = list->next; pos != list; pos = pos->next) {
		struct sheaf_tcache *tc = sheaf_container_of(pos, struct sheaf_tcache, link);
		if (id < tc->n)
			__atomic_store_n(&tc->pcs[id], NULL, __ATOMIC_RELEASE);
	}
}
