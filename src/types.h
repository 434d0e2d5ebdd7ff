/* SPDX-License-Identifier: MIT */
/*
 * types.h - every core structure of Sheaf, after the theory statement.
 *
 * ==== Theory statement (mirrors docs/design.md; cited as "design §n") ====
 *
 * §1 Object life cycle.  A free object is in exactly one place (K§1.8): its slab's
 *    freelist; a CPU's (or thread's) main or spare sheaf; a full sheaf in a barn; an
 *    rcu_free sheaf or one waiting for a grace period; a borrowed prefilled sheaf.
 *    Objects in sheaves count as in use for their slab ("sheaves pin slabs").
 *
 * §2 Sheaves and barns (K§2).  Allocation pops main->objects[size-1]; free pushes at
 *    objects[size].  When main is empty: swap with a non-empty spare; else give the empty
 *    main to the barn for a full sheaf; else refill main from slabs (D4: whenever the
 *    caller may spin, which in userspace is always).  When main is full: take an empty
 *    sheaf (spare, barn, or a new one); if spare is full too, hand the full main to the
 *    barn; over the barn's soft limit, flush the spare to slabs and reuse it.
 *
 * §3 Slab states.  A slab is on its node's partial list (sl_on_partial, under
 *    list_lock) when it has free objects and is not isolated; full slabs are on no list;
 *    a refill isolates slabs (off the list) while it takes their freelists.  The
 *    freelist head index, inuse and objects live in one 64-bit word updated with one
 *    compare-and-swap (K§1.1).  Pops happen only under list_lock or on an isolated
 *    slab, so the CAS never suffers ABA; frees push locklessly.
 *      free:  was full  -> add to partial tail (FREE_ADD_PARTIAL)
 *             now empty and nr_partial >= min_partial -> discard (FREE_SLAB)
 *
 * §4 Lock order (outermost first):
 *      1. sheaf_g.caches_lock      (cache list, ids)
 *      2. cache->pcs_lock          (per-thread pcs registration)
 *      3. the per-CPU lock         (main swapped for the sentinel; design §6)
 *      4. barn->lock  |  node->list_lock   (never both at once)
 *      5. sheaf_heap.lock          (page heap)
 *      6. sheaf_meta locks         (internal metadata caches; they use 4-5 only)
 *
 * §5 RCU-deferred free: see rcu_free.c.
 *
 * §6 Per-CPU state.  In per-CPU mode cache->mainv[cpu + 2] is the CPU's main sheaf; the
 *    per-CPU lock is taken by swapping it for the sentinel sheaf (size 0, capacity 0,
 *    key 0), so the fast paths need no separate lock test: a pop sees "empty", a push
 *    sees "full" and a key that never matches, and both fall to the slow path (the
 *    kernel's bootstrap-sheaf trick, K§1.5, doubling as local_trylock).  In per-thread
 *    mode every entry of mainv is the sentinel and each thread owns a struct sheaf_pcs
 *    per cache, found through its struct sheaf_tcache.
 *
 * §7 Fork and thread exit.  pthread_atfork takes every lock in the order of §4 and
 *    releases it in both parent and child.  A thread's pcs are flushed to the barns at
 *    thread exit (per-thread mode); in the child of fork, pcs of threads that no longer
 *    exist are flushed by the child.
 *
 * §8 Statistics: plain increments in each pcs (under its lock or by its owner), atomic
 *    adds in cache->stat_atomic for events outside any pcs, summed on read.  Fast-path
 *    counts are harvested (design §6): a main sheaf counts its fast-path pops in
 *    `nalloc`; pushes are derived from the size change when the pcs is next locked.
 */
#ifndef SHEAF_TYPES_H
#define SHEAF_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "base/list.h"
#include "sheaf.h"
#include "sheaf_stats.h"

/* ---- Sheaf: a bare array of object pointers (K§1.4) --------------------------------- */

#define SHEAF_SH_OVERSIZE  0x1u /* prefilled sheaf larger than the cache's capacity */
#define SHEAF_SH_PREFILLED 0x2u /* lent out through the prefill API */
#define SHEAF_SH_RCU       0x4u /* collects free_rcu objects */

struct sheaf_sheaf {
	uint32_t size;          /* valid entries; owner-only while installed (design §6) */
	uint32_t capacity;      /* entries in objects[]; 0 for the sentinel */
	uintptr_t key;          /* the free fast path accepts objects whose pagemap key equals
				   this (the cache node serving the owning CPU); 0 accepts none */
	uint64_t nalloc;        /* fast-path pops while installed as main (stat harvest) */
	struct sheaf_list link; /* barn list, or rcu list; protected by whoever holds the sheaf */
	struct sheaf_cache *cache;
	int32_t node;           /* rcu sheaves: the barn they return to */
	uint32_t flags;         /* SHEAF_SH_* */
	void *objects[];
};
#define SHEAF_SHEAF_HDR ((uint32_t)sizeof(struct sheaf_sheaf))

/* ---- Barn: per node per cache, full and empty sheaves (K§1.3, D6) -------------------- */

/* A barn's sheaves are LIFO stacks linked through sheaf->link.next (NULL-terminated):
 * taking or giving a sheaf touches the barn and that sheaf only, never a neighbour's
 * header, which across CPUs is one cache-line transfer fewer per sheaf moved. */
struct sheaf_barn {
	pthread_mutex_t lock;
	struct sheaf_sheaf *full;  /* top of the stack of full sheaves; protected by lock */
	struct sheaf_sheaf *empty; /* top of the stack of empty sheaves; protected by lock */
	unsigned nr_full;        /* protected by lock; read racily (sheaf_rd) to fail fast */
	unsigned nr_empty;       /* protected by lock; read racily */
	unsigned max_full;       /* soft limits; D6 moves them within [min, hard] by an EWMA */
	unsigned max_empty;
	bool enabled;            /* false: no barn (KERNEL_COMPAT on a memoryless node) */
	/* D6: working-set estimate, protected by lock. */
	uint32_t ewma_low;       /* EWMA (x16) of the lowest nr_full seen per interval: full
				    sheaves that sat unused through the interval */
	uint32_t interval_low;   /* lowest nr_full in the current interval */
	uint32_t ewma_low_empty; /* the same for empty sheaves */
	uint32_t interval_low_empty;
	uint32_t interval_ops;   /* barn operations in the current interval */
	uint32_t nr_locks;       /* lock acquisitions ever (gauge barn_locks); under lock */
	uint64_t nr_objects;     /* objects moved in or out in full sheaves ever (gauge
				    barn_objects); protected by lock */
	uint32_t trim_due;       /* an interval ended: the next slow path trims (racy read) */
};

/* ---- Cache node: per node per cache (K§1.2); its address is the pagemap key --------- */

struct sheaf_node {
	struct sheaf_cache *cache;
	/* The same cache if it is one of malloc's size classes (SHEAF_CACHE_MALLOC_CLASS),
	 * else NULL: malloc's free fast path goes from the page map to the cache it
	 * pushes to in two loads, with no flag test (malloc_internal.h). */
	struct sheaf_cache *malloc_cache;
	int nid;                    /* this node */
	int mem_nid;                /* node whose memory backs this node's slabs (itself, or the
				       nearest memory node when this one is memoryless, D3) */
	bool has_memory;
	pthread_mutex_t list_lock;
	struct sheaf_list partial;  /* protected by list_lock */
	unsigned long nr_partial;   /* protected by list_lock; read racily */
	atomic_long nr_slabs;       /* slabs of this node (memory nodes only) */
	struct sheaf_barn barn;
} sheaf_aligned(SHEAF_CACHELINE);

/* ---- Slab descriptor: one 64-byte record per heap page (K§1.1) ---------------------- */

/* The freelist+counters word (K§1.1): head index | inuse | objects | frozen. */
#define SHEAF_FC_HEAD(w)    ((uint32_t)((w)&0xffffu))
#define SHEAF_FC_INUSE(w)   ((uint32_t)(((w) >> 16) & 0xffffu))
#define SHEAF_FC_OBJECTS(w) ((uint32_t)(((w) >> 32) & 0xffffu))
#define SHEAF_FC_FROZEN(w)  ((uint32_t)(((w) >> 48) & 1u))
#define SHEAF_FC_MAKE(head, inuse, objects, frozen)                                     \
	((uint64_t)(head) | ((uint64_t)(inuse) << 16) | ((uint64_t)(objects) << 32) |   \
	 ((uint64_t)(frozen) << 48))

enum sheaf_page_kind {
	SHEAF_PG_UNUSED = 0, /* never handed out, or inside a free block (not its head) */
	SHEAF_PG_FREE,       /* head page of a free buddy block */
	SHEAF_PG_SLAB,       /* first page of a slab: the whole record is the slab */
	SHEAF_PG_TAIL,       /* other page of a slab: pg_head_delta leads to the first */
};

struct sheaf_slab {
	_Atomic uint64_t sl_fc;       /* freelist head, inuse, objects, frozen */
	struct sheaf_node *sl_node;   /* owner; constant while the slab lives */
	char *sl_base;                /* first slot */
	union {
		struct sheaf_list sl_list;  /* SLAB: node partial list, protected by list_lock.
					       FREE: buddy free list, protected by sheaf_heap.lock */
		void *sl_rcu[2];            /* a discarded TYPESAFE_BY_RCU slab waiting for its
					       grace period: the rcu_head (rcu_free.c) */
	};
	uint32_t pg_head_delta;       /* TAIL: pages back to the slab's first page */
	uint8_t pg_kind;              /* enum sheaf_page_kind; written under sheaf_heap.lock
					 (FREE) or before the slab is published (SLAB/TAIL) */
	uint8_t pg_order;             /* FREE/SLAB: block order */
	uint8_t pg_dirty;             /* FREE: pages may be resident (not yet purged) */
	uint8_t pg_node;              /* FREE/SLAB: memory node of the block */
	uint8_t sl_on_partial;        /* protected by sl_node->list_lock */
	uint8_t sl_pad[3];
	uint64_t sl_pad2;
} sheaf_aligned(SHEAF_CACHELINE);

/* ---- Per-CPU (or per-thread) sheaves (K§1.5) ---------------------------------------- */

struct sheaf_pcs {
	struct sheaf_sheaf *main;     /* never NULL; per-CPU mode: valid only while locked */
	struct sheaf_sheaf *spare;    /* may be NULL; protected by the pcs lock / owner */
	struct sheaf_sheaf *rcu_free; /* may be NULL; protected by the pcs lock / owner */
	uint64_t nalloc_base;         /* stat harvest: main->nalloc at last unlock */
	uint32_t size_base;           /* stat harvest: main->size at last unlock */
	int32_t slot;                 /* CPU number (per-CPU mode) or -1 (per-thread mode) */
	int node;                     /* node whose barn this pcs uses */
	uintptr_t key;                /* pagemap key accepted by the fast path */
	struct sheaf_cache *cache;
	struct sheaf_list link;       /* cache->pcs_list; protected by cache->pcs_lock */
	atomic_int flush_req;         /* per-thread mode: shrink asked the owner to flush */
	uint32_t cached;              /* gauge: objects in main+spare at last unlock (racy) */
	pthread_mutex_t rcu_lock;     /* protects rcu_free: free_rcu (owner) against barriers */
	uint64_t stat[SHEAF_STAT_NR]; /* written by the owner/lock holder, read racily */
};

/* ---- Cache (K§1.6) ------------------------------------------------------------------ */

/* sheaf_cache.magic: a live cache, and one destroyed (its descriptor is kept, so that
 * later calls with the stale handle are recognised and reported, until a new cache
 * reuses it). */
#define SHEAF_CACHE_LIVE 0x5e4fcac1u
#define SHEAF_CACHE_DEAD 0xdeadcac1u

struct sheaf_cache {
	/* Read-mostly.  The free checks' geometry comes first: the free fast path reads
	 * it (slab/freecheck.h). */
	uint32_t magic;              /* SHEAF_CACHE_LIVE or SHEAF_CACHE_DEAD */
	bool free_checks;            /* interior-pointer and mark checks on every free */
	uint8_t free_mark;           /* ... and the free mark is used (not under ASan/memcheck,
					which track freed objects themselves): SHEAF_MARK_* */
	uint32_t mark_offset;        /* offset of the 8-byte free mark from the object start:
					8 (in the object), or past the object (constructor,
					TYPESAFE_BY_RCU: their free objects keep their bytes) */
	uint32_t slot_recip;         /* ceil(2^32 / slot_size): slot index by a multiply */
	uintptr_t slab_mask;         /* slab bytes - 1 (slabs are aligned to their size) */
	size_t slot_size;            /* stride between slots */
	uint32_t id;                 /* index into per-thread tables */
	uint32_t flags;              /* SHEAF_* cache flags */
	uint32_t debug_flags;        /* SHEAF_DEBUG_* in effect (debug caches have no sheaves) */
	uint32_t order;              /* slab = SHEAF_PAGE_SIZE << order */
	uint32_t objs_per_slab;
	uint32_t min_partial;
	uint32_t obj_offset;         /* user object offset within the slot (red zone) */
	uint32_t freeptr_offset;     /* where a free slot keeps its next index */
	uint32_t debug_offset;       /* debug metadata offset within the slot */
	size_t object_size;          /* requested size */
	size_t align;
	atomic_uint sheaf_capacity;  /* capacity of new sheaves (D2: changeable at run time) */
	uint32_t capacity_default;
	void (*ctor)(void *);
	uint64_t random;             /* freelist encoding secret */
	char name[48];
	bool kernel_compat;          /* SHEAF_KERNEL_COMPAT */

	struct sheaf_node *node[SHEAF_MAX_NODES]; /* every node with CPUs or memory */

	struct sheaf_list cache_list;  /* sheaf_g.caches; protected by sheaf_g.caches_lock */
	pthread_mutex_t prefilled_lock;
	struct sheaf_list prefilled;   /* prefilled sheaves lent to the program (through
					  sheaf->link), for the double-free search;
					  protected by prefilled_lock */
	pthread_mutex_t pcs_lock;
	struct sheaf_list pcs_list;    /* per-thread pcs; protected by pcs_lock */
	struct sheaf_pcs **cpu_pcs;    /* per-CPU mode: one per possible CPU */

	/* RCU-deferred free (rcu_free.c). */
	atomic_long rcu_inflight_sheaves; /* handed to call_rcu, callback not finished */
	atomic_long rcu_inflight_objects; /* in rcu_free sheaves or waiting for a grace period */
	void *rcu_priv;                   /* owned by rcu_free.c */

	/* Background reaper (reaper.c). */
	atomic_int reaping;   /* the reaper is shrinking this cache; destroy waits for 0 */
	bool is_meta;         /* an internal metadata cache (meta.c): never reaped */
	bool reap_seen;       /* the reaper's own (reaper.c), touched only while it pins the cache */
	bool reap_clean;      /* the reaper's own: shrunk, untouched since */
	uint64_t reap_sig;    /* the reaper's own: activity signature at its last visit */

	_Atomic uint64_t stat_atomic[SHEAF_STAT_NR]; /* events outside any pcs */
	/* Slow paths that found their CPU's lock held and yielded to its holder
	 * (gauge pcs_lock_waits; percpu.c). */
	_Atomic uint64_t pcs_lock_waits;
	atomic_ulong bytes_returned;

	/* Per-CPU mode: mainv[cpu + 2] is CPU cpu's main sheaf (design §6); mainv[0] and
	 * mainv[1] serve the rseq cpu_id values -2 and -1 (registration failed / none)
	 * and always hold the sentinel.  Sized for every possible CPU. */
	struct sheaf_sheaf *mainv[];
};

/* ---- Per-thread state (per-thread mode, and bookkeeping in both modes) -------------- */

struct sheaf_tcache {
	uint32_t n;                 /* entries in pcs[] */
	struct sheaf_pcs **pcs;     /* by cache id; NULL until first use */
	struct sheaf_list link;     /* sheaf_g.threads; protected by sheaf_g.threads_lock */
	pthread_t owner;
	int in_setup;               /* re-entrancy guard while creating state */
};

enum sheaf_mode { SHEAF_MODE_PERTHREAD = 0, SHEAF_MODE_PERCPU = 1 };

struct sheaf_globals {
	atomic_int init_state;      /* 0 none, 1 in progress, 2 done */
	enum sheaf_mode mode;
	int ncpus;                  /* possible CPUs */
	int nnodes;                 /* nodes (real or fake) */
	int node_has_mem[SHEAF_MAX_NODES];
	int node_has_cpu[SHEAF_MAX_NODES];
	int node_mem_nid[SHEAF_MAX_NODES]; /* nearest node with memory */
	int *cpu_node;              /* [ncpus] */
	bool fake_numa;
	pthread_mutex_t caches_lock;
	struct sheaf_list caches;   /* protected by caches_lock */
	uint32_t next_id;           /* protected by caches_lock */
	uint8_t *id_used;           /* protected by caches_lock */
	uint32_t id_cap;
	pthread_mutex_t threads_lock;
	struct sheaf_list threads;  /* protected by threads_lock */
	pthread_key_t tkey;
};

extern struct sheaf_globals sheaf_g;
extern struct sheaf_sheaf sheaf_sentinel_sheaf;

#endif /* SHEAF_TYPES_H */
