/* SPDX-License-Identifier: MIT */
/*
 * sheaf_stats.h - per-cache statistics (docs/stats.md).
 *
 * Events are defined once in SHEAF_STAT_EVENTS (the kernel's K§6.1 names) and
 * counted with plain per-CPU (or per-thread) increments, summed on read, so a
 * read racing with allocation is approximate, never torn.  Gauges are
 * snapshots.  struct sheaf_stats starts with `size` and `version`; the
 * version grows on every incompatible change, new fields are only appended.
 */
#ifndef SHEAF_STATS_H
#define SHEAF_STATS_H

#include <stdint.h>
#include <stdio.h>
#include "sheaf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, "meaning") */
#define SHEAF_STAT_EVENTS(X)                                                                    \
	X(ALLOC_FASTPATH, "allocated from a CPU's sheaves (including bulk)")                    \
	X(ALLOC_SLOWPATH, "allocated from a partial or new slab (sheaf refills not counted)")   \
	X(FREE_FASTPATH, "freed to a CPU's sheaves (including bulk)")                           \
	X(FREE_SLOWPATH, "a user free that went to a slab (sheaf flushes not counted)")         \
	X(FREE_RCU_SHEAF, "free_rcu object put in an rcu_free sheaf")                           \
	X(FREE_RCU_SHEAF_FAIL, "free_rcu object that could not use a sheaf (batched fallback)") \
	X(FREE_ADD_PARTIAL, "a free moved a full slab to the partial list")                     \
	X(FREE_REMOVE_PARTIAL, "a free emptied a slab that was then discarded")                 \
	X(ALLOC_SLAB, "slab taken from the page provider")                                      \
	X(FREE_SLAB, "slab returned to the page provider")                                      \
	X(ALLOC_NODE_MISMATCH, "object of another node could not use the sheaves")              \
	X(CMPXCHG_DOUBLE_FAIL, "retries of the slab freelist+counters update")                  \
	X(SHEAF_FLUSH, "objects flushed from sheaves to slabs")                                 \
	X(SHEAF_REFILL, "objects refilled into sheaves from slabs")                             \
	X(SHEAF_ALLOC, "empty sheaves allocated")                                               \
	X(SHEAF_FREE, "sheaves freed")                                                          \
	X(BARN_GET, "got a full sheaf from the barn")                                           \
	X(BARN_GET_FAIL, "barn had no full sheaf")                                              \
	X(BARN_PUT, "put a full sheaf in the barn")                                             \
	X(BARN_PUT_FAIL, "barn refused a full sheaf (over its limit) or had no empty one")      \
	X(SHEAF_PREFILL_FAST, "prefill took the spare sheaf")                                   \
	X(SHEAF_PREFILL_SLOW, "prefill used the barn or allocated a sheaf")                     \
	X(SHEAF_PREFILL_OVERSIZE, "prefill exceeded the sheaf capacity")                        \
	X(SHEAF_RETURN_FAST, "returned prefilled sheaf became the spare")                       \
	X(SHEAF_RETURN_SLOW, "returned prefilled sheaf went to the barn or was flushed")        \
	X(SHEAF_SWAP, "main and spare swapped without touching the barn")                       \
	X(PCS_LOCK_FAIL, "per-CPU lock found held: fell back to the slab path")                 \
	X(BARN_TRIM, "sheaves given back by the EWMA barn trimmer (D6)")                        \
	X(RCU_SHEAF_QUEUED, "rcu sheaves handed to call_rcu")                                   \
	X(RCU_SHEAF_DONE, "rcu sheaves whose grace period ended")                               \
	X(RCU_FALLBACK_BATCH, "fallback batches of free_rcu objects handed to call_rcu")

enum sheaf_stat_item {
#define SHEAF_X_ENUM(n, d) SHEAF_STAT_##n,
	SHEAF_STAT_EVENTS(SHEAF_X_ENUM)
#undef SHEAF_X_ENUM
	SHEAF_STAT_NR
};

#define SHEAF_STATS_VERSION 1

struct sheaf_stats {
	uint32_t size;    /* sizeof(struct sheaf_stats) of the library */
	uint32_t version; /* SHEAF_STATS_VERSION */
	char name[48];
	uint64_t events[SHEAF_STAT_NR];

	/* gauges */
	uint64_t object_size; /* bytes requested at creation */
	uint64_t slot_size;   /* bytes per object slot incl. metadata and alignment */
	uint64_t objs_per_slab;
	uint64_t slab_order; /* slab = 4 KiB << order */
	uint64_t sheaf_capacity;
	uint64_t slabs;          /* slabs held from the page provider */
	uint64_t partial_slabs;  /* on node partial lists */
	uint64_t objects_total;  /* slabs * objs_per_slab */
	uint64_t objects_inuse;  /* not on a slab freelist (includes cached ones) */
	uint64_t objects_cached; /* in CPU/thread sheaves, barns, rcu and prefilled sheaves */
	uint64_t objects_in_pcs; /* in CPU/thread main and spare sheaves */
	uint64_t objects_in_barns;
	uint64_t barn_full;            /* full sheaves in barns (all nodes) */
	uint64_t barn_empty;           /* empty sheaves in barns (all nodes) */
	uint64_t rcu_inflight_sheaves; /* sheaves waiting for a grace period */
	uint64_t rcu_inflight_objects; /* objects waiting in rcu_free sheaves or grace periods */
	uint64_t bytes_from_os;        /* slab bytes currently held */
	/* Slab bytes the cache gave back to the page heap over its life; the heap gives
	 * free pages to the OS after SHEAF_PURGE_MS, or reuses them (the OS's figure is
	 * sheaf_global_stats.heap_returned). */
	uint64_t bytes_returned;
	uint64_t nodes;
	uint64_t percpu_slots; /* CPUs (per-CPU mode) or live threads (per-thread mode) */
	uint64_t barn_locks;   /* barn lock acquisitions over the cache's life */
	/* Objects moved into and out of barns in full sheaves over the cache's life:
	 * barn_objects / barn_locks is the objects a barn operation moves. */
	uint64_t barn_objects;
	/* Slow paths that found their CPU's lock held and yielded to its holder before
	 * trying again (PCS_LOCK_FAIL counts those that then took the slab path). */
	uint64_t pcs_lock_waits;
	/* Adaptive capacity (docs/design.md, D2): sheaf_capacity is the current one,
	 * capacity_default the one it starts from and returns to; steps up and down. */
	uint64_t capacity_default;
	uint64_t capacity_grows;
	uint64_t capacity_shrinks;
	uint64_t reserved[2];
};

/* Fill *st with @c's statistics.  st->size must be set by the caller to
 * sizeof(*st) (0 is taken as the library's size; below 8, the size and version
 * words, -EINVAL with nothing written).  Returns 0 or -EINVAL. */
SHEAF_API int sheaf_stats_get(struct sheaf_cache *c, struct sheaf_stats *st);
/* Name of an event ("ALLOC_FASTPATH"), NULL if out of range. */
SHEAF_API const char *sheaf_stat_name(enum sheaf_stat_item item);
/* Zero @c's event counters. */
SHEAF_API void sheaf_stats_reset(struct sheaf_cache *c);

/* Aligned "name : value" text, or one JSON object.  A bad handle is reported, as by
 * every call; a NULL @f prints nothing. */
SHEAF_API void sheaf_stats_print(struct sheaf_cache *c, FILE *f);
SHEAF_API void sheaf_stats_print_json(struct sheaf_cache *c, FILE *f);
/* Every live cache: text blocks, or a JSON array. */
SHEAF_API void sheaf_stats_print_all(FILE *f);
SHEAF_API void sheaf_stats_print_all_json(FILE *f);

/* Process-wide page-provider figures. */
struct sheaf_global_stats {
	uint32_t size, version;
	uint64_t heap_reserved; /* bytes of address space the slab heap holds (2 MiB blocks mapped) */
	uint64_t heap_mapped;   /* bytes handed to slabs and not yet given back */
	uint64_t heap_returned; /* bytes the page heap gave back to the OS over the
				 * process life: each page freed by a slab counts once
				 * when it is purged (again if it is used, freed and
				 * purged again) */
	uint64_t meta_bytes;    /* internal metadata (sheaves, cache structs) */
	uint64_t caches;        /* live caches, Sheaf's own included: its metadata caches
				 * (sheaf-meta-<size>, 15 once it has started), malloc's
				 * size classes in use, the debug-objects record cache */
	uint64_t nodes, memory_nodes, cpus;
	uint64_t reserved[8];
};
/* Fill *st, with st->size as for sheaf_stats_get.  Returns 0 or -EINVAL. */
SHEAF_API int sheaf_global_stats_get(struct sheaf_global_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* SHEAF_STATS_H */
