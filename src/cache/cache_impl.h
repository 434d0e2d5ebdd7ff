/* SPDX-License-Identifier: MIT */
/*
 * cache_impl.h - what the files of the cache layer share among themselves (private to
 * src/cache/; the layers above use cache/cache.h).
 */
#ifndef SHEAF_CACHE_IMPL_H
#define SHEAF_CACHE_IMPL_H

#include "cache/cache.h"
#include "cache/introspect.h"

/* The node whose memory serves the calling thread's CPU. */
static inline struct sheaf_node *local_mem_node(struct sheaf_cache *c)
{
	return c->node[sheaf_g.node_mem_nid[sheaf_node_current()]];
}

/* cache.c: the slab path of one object (no sheaves, a locked CPU, a debug cache). */
void *cache_alloc_from_slab(struct sheaf_cache *c, const void *caller);
void cache_free_to_slab(struct sheaf_cache *c, void *obj);
/* The pointer checks of every free: @obj lies in a slab of @c and is the start of an
 * object (reported otherwise).  @key is its page-map key. */
bool cache_free_ptr_ok(struct sheaf_cache *c, const void *obj, uintptr_t key, const char *op);
/* Half the machine's memory (set by sheaf_init): the most one bulk call takes. */
extern size_t sheaf_bulk_limit;

/* prefill.c: destroy takes back the prefilled sheaves the program did not return;
 * returns how many, their objects in @objs. */
unsigned long cache_prefilled_reclaim(struct sheaf_cache *c, unsigned long *objs);
void cache_barns_flush(struct sheaf_cache *c); /* create.c */

/* create.c: a sheaf (and a prefill) of @n objects of @c is within the bounds. */
bool cache_capacity_ok(const struct sheaf_cache *c, size_t n);

#endif /* SHEAF_CACHE_IMPL_H */
