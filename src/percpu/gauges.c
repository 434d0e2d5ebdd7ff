/* SPDX-License-Identifier: MIT */
/*
 * gauges.c - read-only walks of a cache's per-CPU (or per-thread) state: the activity
 * signature the reaper compares between visits, and the gauges of cached objects.
 */
#include "percpu/percpu_impl.h"

/* ---- The reaper's probe (reaper.c) ---------------------------------------------- */

/* A signature of this cache's slow-path activity, read racily and without locking a
 * CPU (no membarrier): every pcs's event counters.  Fast paths change none of it; the
 * reaper copes with that (see reaper.c). */
static uint64_t pcs_signature(uint64_t sig, const struct sheaf_pcs *pcs)
{
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		sig = sheaf_sig_mix(sig, sheaf_rd(pcs->stat[i]));
	return sig;
}

uint64_t sheaf_pcs_reap_signature(struct sheaf_cache *c)
{
	uint64_t sig = 0;
	if (percpu_cache(c)) {
		for (int k = 0; k < sheaf_g.ncpus; k++) {
			struct sheaf_pcs *pcs = cpu_pcs_get(c, k);
			if (pcs)
				sig = pcs_signature(sig, pcs);
		}
		return sig;
	}
	sheaf_mutex_lock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	struct sheaf_list *pos;
	for (pos = c->pcs_list.next; pos != &c->pcs_list; pos = pos->next) {
		struct sheaf_pcs *pcs = sheaf_container_of(pos, struct sheaf_pcs, link);
		sig = sheaf_sig_mix(pcs_signature(sig, pcs), sheaf_rd(pcs->cached));
	}
	sheaf_mutex_unlock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	return sig;
}

/* ---- Gauges ----------------------------------------------------------------------- */

static void gauge_one(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	(void)c;
	uint64_t *a = arg;
	if (pcs->slot >= 0) /* per-CPU: locked by for_each, exact */
		a[0] += pcs->main->size + (pcs->spare ? pcs->spare->size : 0);
	else /* per-thread: as of the owner's last slow path */
		a[0] += sheaf_rd(pcs->cached);
	a[1]++;
}

/* Objects cached in main and spare sheaves, and the number of slots that may cache
 * them: possible CPUs in per-CPU mode (bounded however many threads run), live
 * threads that used the cache in per-thread mode. */
void sheaf_pcs_stats_gauge(struct sheaf_cache *c, uint64_t *in_pcs, uint64_t *slots)
{
	uint64_t a[2] = { 0, 0 };
	sheaf_pcs_for_each(c, gauge_one, a);
	*in_pcs = a[0];
	*slots = percpu_cache(c) ? (uint64_t)sheaf_g.ncpus : a[1];
}

static void sum_events(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	(void)c;
	uint64_t *ev = arg;
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		ev[i] += sheaf_rd(pcs->stat[i]);
}

static void add_atomic_events(struct sheaf_cache *c, uint64_t *ev)
{
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		ev[i] += atomic_load_explicit(&c->stat_atomic[i], memory_order_relaxed);
}

/* ---- Events ----------------------------------------------------------------------- */

/* Every event of @c: each pcs's counters plus the cache's atomic ones.  Per-thread mode
 * reads the atomic ones under pcs_lock, under which an exiting thread's counts move
 * into them as its pcs leaves the list (tcache_destroy): read after the lock, a count
 * could be seen twice, or (read before) in neither place, and a counter went back. */
void sheaf_pcs_stats_events(struct sheaf_cache *c, uint64_t ev[SHEAF_STAT_NR])
{
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		ev[i] = 0;
	if (percpu_cache(c)) {
		/* Per-CPU mode: each CPU locked in turn; counts move only at destroy. */
		sheaf_pcs_for_each(c, sum_events, ev);
		add_atomic_events(c, ev);
		return;
	}
	sheaf_mutex_lock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
	struct sheaf_list *pos;
	for (pos = c->pcs_list.next; pos != &c->pcs_list; pos = pos->next)
		sum_events(c, sheaf_container_of(pos, struct sheaf_pcs, link), ev);
	add_atomic_events(c, ev);
	sheaf_mutex_unlock(&c->pcs_lock, SHEAF_LOCK_PCS_LIST);
}
