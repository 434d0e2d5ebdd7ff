/* SPDX-License-Identifier: MIT */
/*
 * introspect.h - the self-describing root that lets another process read a
 * running program's caches (tools/sheafinfo, docs/introspection.md).
 *
 * The library exports one object, `sheaf_introspect_root` (default visibility, in
 * the ELF section "sheaf_introspect" so that a stripped static executable still
 * shows it).  An inspector finds it in the target's mapped ELF files, reads it
 * with process_vm_readv(2) -- the kernel allows that only to the target's own user
 * or to root (PTRACE_MODE_ATTACH) -- and from then on reads only what the root
 * describes: the addresses of a few globals, and the offset and size of every field
 * it follows in the core structures.  Nothing in the library changes for it: no
 * thread, no signal, no counter on any path; the inspector reads the same counters
 * sheaf_stats_get() sums, racily (a snapshot, never a consistent cut).
 *
 * Compatibility: `version` grows on every incompatible change of this layout; fields
 * are only appended, and `size` says how much of it the library fills.  Neither the
 * library nor the tool includes the other's private headers: only this file.
 */
#ifndef SHEAF_CACHE_INTROSPECT_H
#define SHEAF_CACHE_INTROSPECT_H

#include <stdint.h>

#define SHEAF_IX_MAGIC   "SHEAF-IX" /* 8 bytes, no terminating NUL in the root */
#define SHEAF_IX_VERSION 1
#define SHEAF_IX_SYMBOL  "sheaf_introspect_root"
#define SHEAF_IX_SECTION "sheaf_introspect"

/* Where a field is inside its structure; for an array, size is one element's. */
struct sheaf_ix_field {
	uint32_t off;
	uint32_t size;
};

struct sheaf_ix_root {
	char magic[8];        /* SHEAF_IX_MAGIC */
	uint32_t version;     /* SHEAF_IX_VERSION */
	uint32_t size;        /* sizeof(struct sheaf_ix_root) of the library */
	uint32_t ptr_size;    /* sizeof(void *) */
	uint32_t stat_nr;     /* events per counter array (SHEAF_STAT_NR) */
	uint32_t page_size;   /* slab = page_size << order */
	uint32_t max_nodes;   /* entries of cache->node[] */
	char lib_version[16]; /* "0.1.0" */

	/* Addresses in the target process. */
	uint64_t init_state;    /* int: 2 once the library is initialised */
	uint64_t mode;          /* int: 1 per-CPU sheaves, 0 per-thread sheaves */
	uint64_t ncpus;         /* int: possible CPUs (entries of cpu_pcs) */
	uint64_t nnodes;        /* int: entries of cache->node[] in use */
	uint64_t caches;        /* list head of every cache (links: cache_list) */
	uint64_t heap_cap;      /* size_t: the most address space slabs may take (SHEAF_HEAP_GB) */
	uint64_t heap_mapped;   /* size_t: bytes handed to slabs, not given back */
	uint64_t heap_returned; /* size_t: bytes given back over the process life */
	uint64_t stat_names;    /* const char *[stat_nr]: event names */
	/* Indexes of the events the hit rate is made of. */
	uint32_t ev_alloc_fast, ev_alloc_slow, ev_free_fast, ev_free_slow;

	/* struct sheaf_list (circular, doubly linked). */
	struct sheaf_ix_field list_next;
	/* struct sheaf_cache. */
	struct sheaf_ix_field cache_name, cache_object_size, cache_slot_size, cache_objs_per_slab,
		cache_order, cache_sheaf_capacity, cache_node, cache_list, cache_pcs_list,
		cache_cpu_pcs, cache_stat_atomic, cache_rcu_inflight_sheaves,
		cache_rcu_inflight_objects, cache_bytes_returned, cache_mainv;
	/* struct sheaf_node (cache_node's elements point to these). */
	struct sheaf_ix_field node_cache, node_nr_slabs, node_partial, node_barn;
	/* struct sheaf_barn (inside the node at node_barn). */
	struct sheaf_ix_field barn_full, barn_nr_full, barn_nr_empty, barn_nr_locks;
	/* struct sheaf_sheaf (a barn's full stack is linked through link.next). */
	struct sheaf_ix_field sheaf_size, sheaf_capacity, sheaf_nalloc, sheaf_link;
	/* struct sheaf_slab (on a node's partial list through sl_list). */
	struct sheaf_ix_field slab_fc, slab_list;
	/* struct sheaf_pcs. */
	struct sheaf_ix_field pcs_main, pcs_spare, pcs_nalloc_base, pcs_size_base, pcs_stat,
		pcs_link, pcs_cached, pcs_cache;
	/* The slab's freelist+counters word: inuse = (fc >> shift) & mask. */
	uint32_t fc_inuse_shift, fc_inuse_mask;
	/* 1: node_barn is a pointer to the node's barn; 0: the barn is inside the node. */
	uint32_t node_barn_is_ptr;
};

/* The library's side (introspect.c): called by sheaf_init() so that a static link
 * keeps the root. */
void sheaf_introspect_link(void);

#endif /* SHEAF_CACHE_INTROSPECT_H */
