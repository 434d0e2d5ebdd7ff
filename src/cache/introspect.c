/* SPDX-License-Identifier: MIT */
/*
 * introspect.c - the root another process reads to list this one's caches
 * (cache/introspect.h, tools/sheafinfo, docs/introspection.md).
 *
 * It is filled at compile time: addresses of globals and offsets of fields, all
 * constants the linker relocates.  The library never reads or writes it; the only
 * code here is sheaf_introspect_link(), which sheaf_init() calls so that a program
 * linked with libsheaf.a pulls this object in (an archive member nobody references
 * would be left out, and the program could not be inspected).
 */
#include <stddef.h>

#include "cache/cache.h"
#include "cache/introspect.h"

#ifndef SHEAF_VERSION_STRING
#define SHEAF_VERSION_STRING "unknown" /* CMake sets the project's version */
#endif

static const char *const ix_stat_names[SHEAF_STAT_NR] = {
#define SHEAF_X_NAME(n, d) #n,
	SHEAF_STAT_EVENTS(SHEAF_X_NAME)
#undef SHEAF_X_NAME
};

#define IX_ADDR(x) ((uint64_t)(uintptr_t) & (x))
#define IX_FIELD(type, field)                                                          \
	{                                                                              \
		(uint32_t) offsetof(type, field), (uint32_t)sizeof(((type *)0)->field) \
	}
/* An array field: its offset and the size of one element. */
#define IX_ARRAY(type, field)                                                             \
	{                                                                                 \
		(uint32_t) offsetof(type, field), (uint32_t)sizeof(((type *)0)->field[0]) \
	}

/* Written once, by the compiler and the dynamic linker; read only by inspectors.
 * `used`: a static link keeps it even though no code of the program reads it. */
SHEAF_API __attribute__((used,
			 section(SHEAF_IX_SECTION))) struct sheaf_ix_root sheaf_introspect_root = {
	.magic = SHEAF_IX_MAGIC,
	.version = SHEAF_IX_VERSION,
	.size = sizeof(struct sheaf_ix_root),
	.ptr_size = sizeof(void *),
	.stat_nr = SHEAF_STAT_NR,
	.page_size = SHEAF_PAGE_SIZE,
	.max_nodes = SHEAF_MAX_NODES,
	.lib_version = SHEAF_VERSION_STRING,

	.init_state = IX_ADDR(sheaf_g.init_state),
	.mode = IX_ADDR(sheaf_reg.mode),
	.ncpus = IX_ADDR(sheaf_g.ncpus),
	.nnodes = IX_ADDR(sheaf_g.nnodes),
	.caches = IX_ADDR(sheaf_reg.caches),
	.heap_cap = IX_ADDR(sheaf_heap.cap),
	.heap_mapped = IX_ADDR(sheaf_heap.mapped_bytes),
	.heap_returned = IX_ADDR(sheaf_heap.returned_bytes),
	.stat_names = IX_ADDR(ix_stat_names),
	.ev_alloc_fast = SHEAF_STAT_ALLOC_FASTPATH,
	.ev_alloc_slow = SHEAF_STAT_ALLOC_SLOWPATH,
	.ev_free_fast = SHEAF_STAT_FREE_FASTPATH,
	.ev_free_slow = SHEAF_STAT_FREE_SLOWPATH,

	.list_next = IX_FIELD(struct sheaf_list, next),

	.cache_name = IX_FIELD(struct sheaf_cache, name),
	.cache_object_size = IX_FIELD(struct sheaf_cache, object_size),
	.cache_slot_size = IX_FIELD(struct sheaf_cache, slot_size),
	.cache_objs_per_slab = IX_FIELD(struct sheaf_cache, objs_per_slab),
	.cache_order = IX_FIELD(struct sheaf_cache, order),
	.cache_sheaf_capacity = IX_FIELD(struct sheaf_cache, sheaf_capacity),
	.cache_node = IX_ARRAY(struct sheaf_cache, node),
	.cache_list = IX_FIELD(struct sheaf_cache, cache_list),
	.cache_pcs_list = IX_FIELD(struct sheaf_cache, pcs_list),
	.cache_cpu_pcs = IX_FIELD(struct sheaf_cache, cpu_pcs),
	.cache_stat_atomic = IX_ARRAY(struct sheaf_cache, stat_atomic),
	.cache_rcu_inflight_sheaves = IX_FIELD(struct sheaf_cache, rcu_inflight_sheaves),
	.cache_rcu_inflight_objects = IX_FIELD(struct sheaf_cache, rcu_inflight_objects),
	.cache_bytes_returned = IX_FIELD(struct sheaf_cache, bytes_returned),
	.cache_mainv = IX_ARRAY(struct sheaf_cache, mainv),

	.node_cache = IX_FIELD(struct sheaf_node, cache),
	.node_nr_slabs = IX_FIELD(struct sheaf_node, nr_slabs),
	.node_partial = IX_FIELD(struct sheaf_node, partial),
	.node_barn = IX_FIELD(struct sheaf_node, barn),

	.barn_full = IX_FIELD(struct sheaf_barn, full),
	.barn_nr_full = IX_FIELD(struct sheaf_barn, nr_full),
	.barn_nr_empty = IX_FIELD(struct sheaf_barn, nr_empty),
	.barn_nr_locks = IX_FIELD(struct sheaf_barn, nr_locks),

	.sheaf_size = IX_FIELD(struct sheaf_sheaf, size),
	.sheaf_capacity = IX_FIELD(struct sheaf_sheaf, capacity),
	.sheaf_nalloc = IX_FIELD(struct sheaf_sheaf, nalloc),
	.sheaf_link = IX_FIELD(struct sheaf_sheaf, link),

	.slab_fc = IX_FIELD(struct sheaf_slab, sl_fc),
	.slab_list = IX_FIELD(struct sheaf_slab, sl_list),

	.pcs_main = IX_FIELD(struct sheaf_pcs, main),
	.pcs_spare = IX_FIELD(struct sheaf_pcs, spare),
	.pcs_nalloc_base = IX_FIELD(struct sheaf_pcs, nalloc_base),
	.pcs_size_base = IX_FIELD(struct sheaf_pcs, size_base),
	.pcs_stat = IX_ARRAY(struct sheaf_pcs, stat),
	.pcs_link = IX_FIELD(struct sheaf_pcs, link),
	.pcs_cached = IX_FIELD(struct sheaf_pcs, cached),
	.pcs_cache = IX_FIELD(struct sheaf_pcs, cache),

	.fc_inuse_shift = 16,
	.fc_inuse_mask = 0xffff,
	.node_barn_is_ptr =
		_Generic(((struct sheaf_node *)0)->barn, struct sheaf_barn * : 1, default : 0),
};

/* SHEAF_FC_INUSE must agree with the shift and mask above. */
_Static_assert(SHEAF_FC_INUSE(SHEAF_FC_MAKE(0, 0xabcd, 0, 0)) == 0xabcd, "fc_inuse layout");

void sheaf_introspect_link(void)
{
	/* A read the compiler must keep: it makes this object part of every program
	 * that initialises Sheaf. */
	__asm__ volatile("" : : "r"(&sheaf_introspect_root) : "memory");
}
