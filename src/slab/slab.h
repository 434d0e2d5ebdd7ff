/* SPDX-License-Identifier: MIT */
/*
 * slab/slab.h - the slab layer's interface (layer 3 of src/README.md).
 *
 * Owns: slabs and their hardened freelists, the per-node partial lists (list_lock),
 * slab debugging (debug_slab.c: red zones, poison, owner tracking) and the memory
 * annotations for Valgrind and ASan (track.h).  Defines the per-cache and per-node
 * records (struct sheaf_cache, struct sheaf_node) that every layer above keeps its
 * per-cache state in, as the kernel's struct kmem_cache: a layer touches only the
 * fields of its own group and of the groups below it.
 *
 * May call: page/, base/.  Calls up only through sheaf_slab_hooks, set by the RCU
 * layer at init (rcu/).
 */
#ifndef SHEAF_LAYER_SLAB_H
#define SHEAF_LAYER_SLAB_H

#include "page/page.h"

struct sheaf_barn;  /* barn/barn.h */
struct sheaf_sheaf; /* barn/barn.h */
struct sheaf_pcs;   /* percpu/percpu.h */

/* Internal cache flag (above the public ones): a size-class cache of the malloc front
 * end, so that free() recognises one with a single test. */
#define SHEAF_CACHE_MALLOC_CLASS 0x80000000u

/* ---- Cache node: per node per cache (K§1.2); its address is the pagemap key --------- */

struct sheaf_node {
	struct sheaf_cache *cache;
	/* The same cache if it is one of malloc's size classes (SHEAF_CACHE_MALLOC_CLASS),
	 * else NULL: malloc's free fast path goes from the page map to the cache it
	 * pushes to in two loads, with no flag test (malloc/malloc.h). */
	struct sheaf_cache *malloc_cache;
	/* malloc's free fast path tests "a size class with the free mark, and an object
	 * start of it" with these three, the same instructions for every class
	 * (malloc/malloc.h sheaf_malloc_start_ok): the offset in the slab,
	 * `p & malloc_slab_mask`, times malloc_div_c, modulo 2^64, is below malloc_div_lim
	 * exactly for an object start.  They are the cache's slot_div_c and slot_div_lim
	 * (the divisibility test of slab/freecheck.h sheaf_obj_is_start, whose bound leaves
	 * out the slab's tail) for a size class with the mark, and 0 for every other cache
	 * (no class, or a class without the mark): no product is below 0, so those take the
	 * general path.  Until 2026-11-29 the test was a mask for power-of-two slots and a
	 * branch to a reciprocal for the others, which a program freeing sizes of both kinds
	 * at random mispredicted on about every other free (docs/benchmarks.md, ninth
	 * session).  Set with malloc_cache, before any key of this node is published.
	 * SHEAF_KEY_NONE, the key of every page that is not a slab's (page.h "Keys"), reads
	 * as a node with all four 0: the test fails there too, with no test of the key. */
	uintptr_t malloc_slab_mask;
	uint64_t malloc_div_c;
	uint64_t malloc_div_lim;
	int nid;     /* this node */
	int mem_nid; /* node whose memory backs this node's slabs (itself, or the
				       nearest memory node when this one is memoryless, D3) */
	bool has_memory;
	struct sheaf_barn *barn; /* barn/: this node's barn, allocated with the node;
				       constant while the cache lives */
	/* Everything above is written once, before the node's key is published, and
	 * malloc's free reads malloc_cache, malloc_slab_mask and malloc_div_c on every call; what follows
	 * is written by the slab paths of every CPU (the lock on each refill and flush),
	 * so it starts a line of its own: in the same line, each of those writes took
	 * the line from the CPUs freeing into the node's cache. */
	pthread_mutex_t list_lock sheaf_aligned(SHEAF_CACHELINE);
	struct sheaf_list partial; /* protected by list_lock */
	unsigned long nr_partial;  /* protected by list_lock; read racily */
	atomic_long nr_slabs;      /* slabs of this node (memory nodes only) */
} sheaf_aligned(SHEAF_CACHELINE);

/* ---- Slab descriptor: the freelist+counters word (K§1.1) ----------------------------- */

/* head index | inuse | objects | frozen, in struct sheaf_slab's sl_fc (page/page.h). */
#define SHEAF_FC_HEAD(w)    ((uint32_t)((w)&0xffffu))
#define SHEAF_FC_INUSE(w)   ((uint32_t)(((w) >> 16) & 0xffffu))
#define SHEAF_FC_OBJECTS(w) ((uint32_t)(((w) >> 32) & 0xffffu))
#define SHEAF_FC_FROZEN(w)  ((uint32_t)(((w) >> 48) & 1u))
#define SHEAF_FC_MAKE(head, inuse, objects, frozen)                                   \
	((uint64_t)(head) | ((uint64_t)(inuse) << 16) | ((uint64_t)(objects) << 32) | \
	 ((uint64_t)(frozen) << 48))

/* ---- Cache (K§1.6) ------------------------------------------------------------------ */

/* Where Sheaf departs from Linux 7.0 (docs/design.md, D1-D7), decided once when the
 * cache is created (cache/create.c, cache_policy_init): Sheaf's behaviour, or the
 * kernel's for a SHEAF_KERNEL_COMPAT cache.  The slow paths read these fields; none
 * tests the flag itself. */
struct sheaf_cache_policy {
	bool capacity_counts_slab;       /* D1: the default capacity also counts the old CPU
					    slab, with a byte floor (else the size tiers) */
	bool adaptive_capacity;          /* D2: capacity steps with the barn's exchange rate */
	bool barn_on_memoryless;         /* D3: a memoryless node's CPUs use a barn (their
					    memory node's); 7.0: none */
	bool cache_remote_on_memoryless; /* D3: remote frees are cached on a memoryless node
					    (K§2.5: they bypass the sheaves) */
	bool slab_path_without_barn;     /* 7.0: no barn means no refill and no free to a
					    sheaf (K§2.2 step 3, K§2.6 step 1) */
	bool per_cache_rcu_barrier;      /* D5 (7.0: the global rcu_barrier) */
	bool barn_limits_in_bytes;       /* D6: barn limits sized in bytes (7.0: 10 + 10) */
	bool barn_trim;                  /* D6: barns trimmed to their working set */
	bool refill_by_demand;           /* D6: a refill after a quiet spell takes at most
					    SHEAF_REFILL_QUIET_BYTES of objects (7.0: the
					    whole sheaf, always) */
};
/* Every field a fast path reads of a key with no test first lies inside sheaf_page_none
 * (page.h "Keys"). */
_Static_assert(offsetof(struct sheaf_node, malloc_div_lim) + sizeof(uint64_t) <=
		       sizeof(uintptr_t) * SHEAF_PAGE_NONE_WORDS,
	       "sheaf_page_none must cover the node fields the free fast paths read");

/* One CPU's main sheaf pointer of a cache, in a cache line of its own: a CPU's slow
 * path swaps its own entry (the lock, a new main: lock cmpxchg or a store), and with
 * eight CPUs' entries in one line every such write took the line from the other CPUs,
 * whose next fast-path operation on the cache then missed (the fast path reads its
 * entry on every call; docs/benchmarks.md, 2026-11-28 third session). */
struct sheaf_mainv_slot {
	struct sheaf_sheaf *m;
} sheaf_aligned(SHEAF_CACHELINE);
#define SHEAF_MAINV_SHIFT 6 /* log2(sizeof(struct sheaf_mainv_slot)), for rseq.h */
_Static_assert(sizeof(struct sheaf_mainv_slot) == (1u << SHEAF_MAINV_SHIFT),
	       "rseq.h scales the CPU number by SHEAF_MAINV_SHIFT");

/* sheaf_cache.magic: a live cache, and one destroyed (its descriptor is kept, so that
 * later calls with the stale handle are recognised and reported, until a new cache
 * reuses it). */
#define SHEAF_CACHE_LIVE 0x5e4fcac1u
#define SHEAF_CACHE_DEAD 0xdeadcac1u

struct sheaf_cache {
	/* Slab layer: geometry, read-mostly, written once at creation (cache/).  The free
	 * checks' geometry comes first: the free fast path reads it (slab/freecheck.h). */
	uint32_t magic;         /* SHEAF_CACHE_LIVE or SHEAF_CACHE_DEAD */
	bool free_checks;       /* interior-pointer and mark checks on every free */
	uint8_t free_mark;      /* ... and the free mark is used (not under ASan/memcheck,
					which track freed objects themselves): SHEAF_MARK_* */
	uint32_t mark_offset;   /* offset of the 8-byte free mark from the object start:
					8 (in the object), or past the object (constructor,
					TYPESAFE_BY_RCU: their free objects keep their bytes) */
	uint32_t slot_recip;    /* ceil(2^32 / slot_size): slot index by a multiply */
	uintptr_t slab_mask;    /* slab bytes - 1 (slabs are aligned to their size) */
	uintptr_t start_mask;   /* slot bytes - 1 when that is a power of two, else 0:
					then an object start is p & start_mask == 0 */
	uintptr_t free_p2_mask; /* start_mask when free_mark is SHEAF_MARK_WORD1_P2, else
				   all ones: "the usual cache, and an object start of it"
				   in one test (percpu/fastpath.h sheaf_cpu_free) */
	size_t slot_size;       /* stride between slots */
	uint64_t slot_div_c;    /* ceil(2^64 / slot_size): the object-start test
				   (slab/freecheck.h sheaf_obj_is_start) */
	uint64_t slot_div_lim;  /* its bound: objs_per_slab * (slot_size * slot_div_c
				   mod 2^64), or slot_div_c for a power-of-two slot */
	uint32_t id;            /* index into per-thread tables */
	uint32_t flags;         /* SHEAF_* cache flags */
	uint32_t debug_flags;   /* SHEAF_DEBUG_* in effect (debug caches have no sheaves) */
	uint32_t order;         /* slab = SHEAF_PAGE_SIZE << order */
	uint32_t objs_per_slab;
	uint32_t min_partial;
	uint32_t obj_offset;     /* user object offset within the slot (red zone) */
	uint32_t freeptr_offset; /* where a free slot keeps its next index */
	uint32_t debug_offset;   /* debug metadata offset within the slot */
	size_t object_size;      /* requested size */
	size_t align;
	/* Per-CPU layer (percpu/). */
	atomic_uint sheaf_capacity; /* capacity of new sheaves (D2: changeable at run time) */
	uint32_t capacity_default;
	/* Adaptive capacity (docs/design.md, D2): capacity_ladder[0] is capacity_default,
	 * each next step about twice the last, up to capacity_steps - 1; the current
	 * step is capacity_step.  The exchange rate moves it among the first
	 * capacity_steps_rate steps; the steps above those are taken only for a bulk
	 * call larger than a sheaf (cache/create.c).  Set at creation; capacity_adaptive
	 * is cleared by sheaf_cache_set_capacity (the caller's choice wins). */
	atomic_bool capacity_adaptive;
	/* D6 refill by demand in force (percpu/sheaf.c refill_budget): the policy's, for a
	 * capacity the cache chose itself; cleared with capacity_adaptive by
	 * sheaf_cache_set_capacity, and never set for a capacity given at creation or by
	 * SHEAF_SHEAF_CAPACITY (the caller's sheaves are filled as they asked). */
	atomic_bool refill_demand;
	atomic_uint capacity_step;
	uint32_t capacity_steps;
	uint32_t capacity_steps_rate;
	uint32_t capacity_ladder[4];
	_Atomic uint64_t capacity_grows, capacity_shrinks; /* gauges of the same names */
	/* Slab layer. */
	void (*ctor)(void *);
	uint64_t random; /* freelist encoding secret */
	char name[48];
	bool kernel_compat;               /* SHEAF_KERNEL_COMPAT asked for; its consequences: */
	struct sheaf_cache_policy policy; /* written once at creation */

	struct sheaf_node *node[SHEAF_MAX_NODES]; /* every node with CPUs or memory */

	/* Per-CPU layer (percpu/). */
	struct sheaf_list cache_list; /* sheaf_reg.caches; protected by sheaf_reg.caches_lock */
	pthread_mutex_t prefilled_lock;
	struct sheaf_list prefilled; /* prefilled sheaves lent to the program (through
					  sheaf->link), for the double-free search;
					  protected by prefilled_lock */
	pthread_mutex_t pcs_lock;
	struct sheaf_list pcs_list; /* per-thread pcs; protected by pcs_lock */
	struct sheaf_pcs **cpu_pcs; /* per-CPU mode: one per possible CPU */

	/* RCU layer (rcu/rcu_free.c). */
	atomic_long rcu_inflight_sheaves; /* handed to call_rcu, callback not finished */
	atomic_long rcu_inflight_objects; /* in rcu_free sheaves or waiting for a grace period */
	void *rcu_priv;                   /* owned by rcu_free.c */

	/* Cache layer: the background reaper (cache/reaper.c). */
	atomic_int reaping; /* the reaper is shrinking this cache; destroy waits for 0 */
	bool is_meta;       /* an internal metadata cache (cache/meta.c): never reaped */
	bool reap_seen;     /* the reaper's own (reaper.c), touched only while it pins the cache */
	bool reap_clean;    /* the reaper's own: shrunk, untouched since */
	uint64_t reap_sig;  /* the reaper's own: activity signature at its last visit */

	/* Statistics: every layer counts here. */
	_Atomic uint64_t stat_atomic[SHEAF_STAT_NR]; /* events outside any pcs */
	/* Slow paths that found their CPU's lock held and yielded to its holder
	 * (gauge pcs_lock_waits; percpu/percpu.c). */
	_Atomic uint64_t pcs_lock_waits;
	atomic_ulong bytes_returned;

	/* Per-CPU layer: mainv[cpu + 2].m is CPU cpu's main sheaf (design §6); mainv[0]
	 * and mainv[1] serve the rseq cpu_id values -2 and -1 (registration failed /
	 * none) and always hold the sentinel.  Sized for every possible CPU, one cache
	 * line each (struct sheaf_mainv_slot). */
	struct sheaf_mainv_slot mainv[];
};

static inline void sheaf_stat_atomic(struct sheaf_cache *c, enum sheaf_stat_item it, uint64_t v)
{
	atomic_fetch_add_explicit(&c->stat_atomic[it], v, memory_order_relaxed);
}

/* ---- slab.c: slabs and node partial lists (K§2.3, K§2.4, K§2.7) ---------------------- */
void *sheaf_slab_alloc_one(struct sheaf_cache *c, struct sheaf_node *n);
/* Take between @min and @max objects from @n's slabs into objs; returns the count
 * (0 .. max), or fewer than min only when memory ran out (the objects taken are still
 * returned). */
unsigned sheaf_slab_refill(struct sheaf_cache *c, struct sheaf_node *n, void **objs, unsigned min,
			   unsigned max);
/* Give @cnt objects back to their slabs (any nodes), each lock once per batch. */
void sheaf_slab_free_bulk(struct sheaf_cache *c, void **objs, unsigned cnt);
/* Is @obj on its slab's free list (@obj lies in a slab of @c)?  Double-free search. */
bool sheaf_slab_holds_free(struct sheaf_cache *c, const void *obj);
/* Validate that @obj is an object slot of @c; returns its slab or NULL after reporting. */
struct sheaf_slab *sheaf_slab_check_obj(struct sheaf_cache *c, const void *obj, const char *op);
/* Discard completely free slabs of @n beyond @keep (shrink: keep 0). */
void sheaf_slab_node_shrink(struct sheaf_node *n, unsigned long keep);
/* Objects in use on slabs of @n and the slab counts (gauges). */
void sheaf_slab_node_counts(struct sheaf_node *n, uint64_t *slabs, uint64_t *partial,
			    uint64_t *inuse);
bool sheaf_slab_is_valid(struct sheaf_cache *c, struct sheaf_slab *s);
bool sheaf_slab_node_is_valid(struct sheaf_node *n);
/* Release every slab of @n whose objects are all free; returns objects still in use. */
uint64_t sheaf_slab_node_release(struct sheaf_node *n);

/* A live cache handle?  NULL, destroyed and foreign handles are reported (false). */
bool sheaf_cache_check(const struct sheaf_cache *c);

/* Calls up, registered by the layers above at init. */
struct sheaf_slab_hooks {
	/* TYPESAFE_BY_RCU: give a discarded slab's pages back to the page provider only
	 * after a grace period (rcu/, set by sheaf_rcu_init before any cache exists). */
	void (*defer_pages)(struct sheaf_cache *c, struct sheaf_slab *s);
};
extern struct sheaf_slab_hooks sheaf_slab_hooks;

/* ---- debug_slab.c (debug caches: no sheaves, every op on the slab path) ------------- */
/* Set c->obj_offset, c->slot_size, c->freeptr_offset, c->debug_offset for c->debug_flags. */
void sheaf_debug_slab_layout(struct sheaf_cache *c);
void sheaf_debug_slab_init(struct sheaf_cache *c, void *first_slot, unsigned nslots);
/* Nonzero: corruption was reported; the core leaks that object. */
int sheaf_debug_slab_alloc(struct sheaf_cache *c, void *obj, const void *caller);
int sheaf_debug_slab_free(struct sheaf_cache *c, void *obj, const void *caller);
/* Is the object start @obj of debug cache @c not handed out (free, or its state word
 * overwritten)?  For a check that frees nothing (malloc_usable_size, realloc's). */
bool sheaf_debug_slab_is_free(const struct sheaf_cache *c, const void *obj);
/* Debug flags selected for a cache name by SHEAF_SLAB_DEBUG. */
unsigned sheaf_debug_slab_flags_for(const char *name);

/* The rank of a node's list_lock (base/lock.h): the metadata caches' come after every
 * other cache's (sheaves, pcs and tables are allocated under those). */
static inline enum sheaf_lock_id sheaf_node_lock_id(const struct sheaf_node *n)
{
	return n->cache->is_meta ? SHEAF_LOCK_META_LIST : SHEAF_LOCK_LIST;
}

#include "slab/track.h"     /* annotations; need struct sheaf_cache above */
#include "slab/freecheck.h" /* the checks of every free; the same */

#endif /* SHEAF_LAYER_SLAB_H */
