/* SPDX-License-Identifier: MIT */
/*
 * rcu/rcu.h - the RCU layer's interface (layer 6 of src/README.md).
 *
 * Owns: RCU-deferred freeing in sheaves (sheaf_cache_free_rcu), the per-cache and the
 * global barriers, the deferred page frees of TYPESAFE_BY_RCU caches, and everything
 * that touches liburcu (D5; docs/rcu.md).
 *
 * May call: percpu/, barn/, slab/, page/, base/.  The layers below reach it only
 * through the hooks that sheaf_rcu_init() registers (sheaf_slab_hooks.defer_pages,
 * sheaf_percpu_hooks.rcu_flush_pcs).
 */
#ifndef SHEAF_LAYER_RCU_H
#define SHEAF_LAYER_RCU_H

#include "percpu/percpu.h"

/* Register this layer's hooks in the layers below; sheaf_init calls it before it
 * creates any cache. */
void sheaf_rcu_init(void);
/* fork (base/lock.h): ranks RCU_WARM and RCU_STATE; RCU_BARRIER from the cache layer's
 * CACHES walk (with caches_lock held: try-lock every barrier mutex, false if one is
 * busy, nothing then held). */
void sheaf_rcu_fork_register(void);
bool sheaf_rcu_fork_trylock_barriers(void);
void sheaf_rcu_fork_unlock_barriers(void);
/* Start the flavour's call_rcu worker if it is not running; false when no thread can
 * be created for it.  With no Sheaf lock held (a TYPESAFE_BY_RCU cache's creation). */
bool sheaf_rcu_worker_start(void);
void sheaf_rcu_cache_init(struct sheaf_cache *c);
void sheaf_rcu_cache_fini(struct sheaf_cache *c); /* after the per-cache barrier */
/* Submit the pcs's partly filled rcu_free sheaf (thread exit, shrink, barrier). */
void sheaf_rcu_flush_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs);
/* Does @obj wait for a grace period after a free_rcu (the double-free search,
 * percpu/freecheck.c, through sheaf_percpu_hooks.rcu_pending)?  false when @c has no
 * RCU state. */
bool sheaf_rcu_pending(struct sheaf_cache *c, const void *obj);
/* TYPESAFE_BY_RCU: give slab pages back only after a grace period.
 * The rcu_head lives in the discarded slab's descriptor (sl_rcu), so deferring cannot
 * fail; sl_base, pg_order and pg_node say what to free. */
void sheaf_rcu_defer_pages(struct sheaf_cache *c, struct sheaf_slab *s);
/* A TYPESAFE_BY_RCU cache was shrunk (after its discards): the page heap is purged when
 * the pages deferred so far are back (at once if they are), as shrink does for others. */
void sheaf_rcu_shrunk(void);

#endif /* SHEAF_LAYER_RCU_H */
