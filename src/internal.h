/* SPDX-License-Identifier: MIT */
/*
 * internal.h - cross-file prototypes, grouped by the file that defines them.
 * Everything here is hidden (-fvisibility=hidden) and prefixed sheaf_<module>_.
 */
#ifndef SHEAF_INTERNAL_H
#define SHEAF_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "types.h"

/* Internal cache flag (above the public ones): a size-class cache of the malloc front
 * end, so that free() recognises one with a single test. */
#define SHEAF_CACHE_MALLOC_CLASS 0x80000000u

/* ---- "os.c": system calls, errors, time -------------------------------------------- */
/* Fault injection for tests (docs/testing.md, "Fault injection"): the calls Sheaf makes
 * to the kernel, by kind.  Reachable only through these hidden functions (the static
 * library's tests and fuzz targets), never from the environment. */
enum sheaf_fault_kind {
	SHEAF_FAULT_MMAP,       /* mmap and mremap */
	SHEAF_FAULT_MUNMAP,
	SHEAF_FAULT_MADVISE,
	SHEAF_FAULT_MEMBARRIER,
	SHEAF_FAULT_THREAD,     /* pthread_create */
	SHEAF_FAULT_NR
};
/* Make the @nth next call of kind @k fail (1: the next one; 0: disarm); with
 * @persistent, that call and every later one fail until disarmed. */
void sheaf_fault_arm(enum sheaf_fault_kind k, long nth, bool persistent);
void sheaf_fault_disarm_all(void);
unsigned long sheaf_fault_hits(enum sheaf_fault_kind k); /* injected failures so far */
bool sheaf_fault_fail(enum sheaf_fault_kind k);           /* the wrappers' test */
/* Failures of munmap and madvise seen (injected or real), by kind: memory that stayed
 * mapped.  Read by tests and the stats line. */
extern atomic_ulong sheaf_os_fail_counts[SHEAF_FAULT_NR];

/* The system calls, each wrapped once.  mmap/mremap return MAP_FAILED with errno set;
 * munmap/madvise return 0 or -errno and report the first failure of the process on
 * stderr; thread_create returns 0 or an error number, as pthread_create does. */
void *sheaf_sys_mmap(void *addr, size_t len, int prot, int flags);
void *sheaf_sys_mremap(void *old, size_t len, size_t nlen, int flags, void *new_addr);
int sheaf_sys_munmap(void *p, size_t len);
int sheaf_sys_madvise(void *p, size_t len, int advice);
int sheaf_sys_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

void *sheaf_os_map(size_t size);            /* zeroed RW pages, NULL + ENOMEM on failure */
int sheaf_os_unmap(void *p, size_t size);   /* 0, or -errno (reported; the pages stay) */
int sheaf_os_purge(void *p, size_t size);   /* madvise(MADV_DONTNEED): 0 or -errno */
uint64_t sheaf_os_now_ns(void);
int sheaf_os_getcpu(void);                  /* current CPU (rseq cpu_id via glibc) */
/* Write a formatted line to stderr without allocating. */
void sheaf_os_print(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Errors: the one reporter, base/error.h (kind, cache, address, one line). */
/* Fault injection for tests: the next @n page allocations succeed, then every one
 * fails (as if the heap were full) until reset with -1. */
void sheaf_os_inject_heap_failure(long n);

/* ---- "options.c": one table of options (docs/options.md) ---------------------------- */
enum sheaf_option_id {
	SHEAF_OPT_STATS,
	SHEAF_OPT_ON_ERROR,
	SHEAF_OPT_SHEAF_CAPACITY,
	SHEAF_OPT_FAKE_NUMA,
	SHEAF_OPT_PERCPU,
	SHEAF_OPT_HEAP_GB,
	SHEAF_OPT_PURGE_ORDER,
	SHEAF_OPT_BARN_MAX_FULL,
	SHEAF_OPT_BARN_MAX_EMPTY,
	SHEAF_OPT_BARN_BYTES,
	SHEAF_OPT_BARN_EWMA,
	SHEAF_OPT_KERNEL_COMPAT,
	SHEAF_OPT_SLAB_DEBUG,
	SHEAF_OPT_RCU_BARRIER,
	SHEAF_OPT_VERBOSE,
	SHEAF_OPT_DEBUG_OBJECTS,
	SHEAF_OPT_DEBUG_OBJECTS_POOL,
	SHEAF_OPT_REAP_MS,
	SHEAF_OPT_FREE_CHECKS,
	SHEAF_OPT_NR
};
void sheaf_options_init(void);
bool sheaf_options_secure(void); /* AT_SECURE: the environment is ignored */
long sheaf_option_long(enum sheaf_option_id id);
const char *sheaf_option_str(enum sheaf_option_id id);
void sheaf_options_print(FILE *f);

/* ---- "node.c": topology (D3) --------------------------------------------------------- */
int sheaf_node_topology_init(void);
static inline int sheaf_cpu_to_node(int cpu)
{
	return (cpu >= 0 && cpu < sheaf_g.ncpus) ? sheaf_g.cpu_node[cpu] : 0;
}
int sheaf_node_current(void);               /* node of the calling thread's CPU */

/* ---- "page.c": the page heap (page provider) ----------------------------------------- */
/* The heap is a window of address space, [base, base + cap), chosen at init and never
 * reserved as a whole: 2 MiB blocks are mapped inside it one by one as slabs need them
 * and unmapped when purged, and the page map and descriptors (flat arrays indexed by
 * page) are mapped for the part covered so far, [base, base + size), which grows in
 * steps.  So the heap takes from RLIMIT_AS what it uses (page.c has the reasons). */
struct sheaf_heap {
	char *base;                 /* the heap window, 2 MiB aligned; fixed after init */
	size_t size;                /* bytes of the window covered by pagemap and desc; grows
				       under lock, read racily (sheaf_rd) by the lookups */
	size_t cap;                 /* window bytes (SHEAF_HEAP_GB): size never passes it */
	uintptr_t *pagemap;         /* key per page: owning sheaf_node, 0 if not a slab page */
	struct sheaf_slab *desc;    /* descriptor per page */
	pthread_mutex_t lock;       /* protects everything below */
	struct sheaf_list free_area[SHEAF_MAX_NODES][SHEAF_BLOCK_ORDER];
	size_t next_block;          /* bump index of never-used blocks (read racily) */
	uint32_t *free_blocks;      /* unmapped whole blocks, reusable by any node; entries
				       with SHEAF_BLOCK_STILL_MAPPED set failed to unmap */
	size_t nr_free_blocks, cap_free_blocks;
	struct sheaf_list dirty_blocks[SHEAF_MAX_NODES]; /* free whole blocks not yet purged */
	size_t dirty_bytes;         /* free but still resident (approximate) */
	uint64_t dirty_since_ns;    /* when dirty_bytes last left 0 */
	size_t mapped_bytes;        /* pages handed to slabs (read racily) */
	size_t returned_bytes;      /* purged over the process life (read racily) */
	size_t blocks_mapped;       /* blocks of address space held now (read racily) */
	size_t holes;               /* blocks given up: something else was mapped there */
	bool gate_closed;           /* sheaf_page_fast_gate(true): fast frees go slow */
	unsigned purge_order;
};
#define SHEAF_BLOCK_STILL_MAPPED 0x80000000u
extern struct sheaf_heap sheaf_heap;
/* The free fast paths (percpu/rseq.h, malloc/malloc_internal.h) accept a pointer p with
 * p - sheaf_heap.base below this: the covered size, or 0 while the gate is closed. */
extern uintptr_t sheaf_page_fast_limit;
/* Close (or reopen) the free fast paths: every free then takes the slow path. */
void sheaf_page_fast_gate(bool closed);
int sheaf_page_init(void);
void *sheaf_page_alloc(unsigned order, int nid);       /* NULL + ENOMEM on failure */
void sheaf_page_free(void *p, unsigned order, int nid);
void sheaf_page_purge_all(void);                        /* purge dirty free blocks */

/* O(1) pointer -> key, for any pointer (foreign ones give 0). */
static inline uintptr_t sheaf_page_key(const void *p)
{
	uintptr_t off = (uintptr_t)p - (uintptr_t)sheaf_heap.base;
	if (sheaf_unlikely(off >= sheaf_rd(sheaf_heap.size)))
		return 0;
	return __atomic_load_n(&sheaf_heap.pagemap[off >> SHEAF_PAGE_SHIFT], __ATOMIC_RELAXED);
}
/* The slab holding @p, or NULL if @p is not inside a live slab of Sheaf. */
static inline struct sheaf_slab *sheaf_page_slab(const void *p)
{
	uintptr_t off = (uintptr_t)p - (uintptr_t)sheaf_heap.base;
	if (sheaf_unlikely(off >= sheaf_rd(sheaf_heap.size)))
		return NULL;
	size_t pg = off >> SHEAF_PAGE_SHIFT;
	if (!__atomic_load_n(&sheaf_heap.pagemap[pg], __ATOMIC_ACQUIRE))
		return NULL;
	struct sheaf_slab *d = &sheaf_heap.desc[pg];
	if (sheaf_rd(d->pg_kind) == SHEAF_PG_TAIL)
		d -= d->pg_head_delta;
	return d;
}

/* ---- "meta.c": internal metadata allocator ------------------------------------------ */
void sheaf_meta_init(void);
void *sheaf_meta_alloc(size_t size);  /* zeroed; NULL on failure */
void sheaf_meta_free(void *p, size_t size);
size_t sheaf_meta_bytes(void);
bool sheaf_cache_is_meta(const struct sheaf_cache *c);

/* ---- "slab.c": slabs and node partial lists (K§2.3, K§2.4, K§2.7) -------------------- */
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
void sheaf_slab_node_counts(struct sheaf_node *n, uint64_t *slabs, uint64_t *partial, uint64_t *inuse);
bool sheaf_slab_is_valid(struct sheaf_cache *c, struct sheaf_slab *s);
bool sheaf_slab_node_is_valid(struct sheaf_node *n);
/* Release every slab of @n whose objects are all free; returns objects still in use. */
uint64_t sheaf_slab_node_release(struct sheaf_node *n);

/* ---- "barn.c" (K§1.3, D6) ---------------------------------------------------------- */
void sheaf_barn_init(struct sheaf_barn *b, bool enabled, bool compat);
/* Soft limits for a barn whose full sheaves hold @sheaf_bytes of objects each (D6). */
void sheaf_barn_set_limits(struct sheaf_barn *b, size_t sheaf_bytes);
struct sheaf_sheaf *sheaf_barn_get_empty(struct sheaf_barn *b);
struct sheaf_sheaf *sheaf_barn_get_full(struct sheaf_barn *b, uint32_t min_size);
void sheaf_barn_put_empty(struct sheaf_barn *b, struct sheaf_sheaf *s);
void sheaf_barn_put_full(struct sheaf_barn *b, struct sheaf_sheaf *s);
/* Give an empty sheaf, get a full one; NULL if the barn has none (@empty not taken). */
struct sheaf_sheaf *sheaf_barn_replace_empty(struct sheaf_barn *b, struct sheaf_sheaf *empty);
/* Give a full sheaf, get an empty one (may be NULL: caller allocates); -E2BIG when the
 * barn is over its full limit (@full not taken). */
int sheaf_barn_replace_full(struct sheaf_barn *b, struct sheaf_sheaf *full, struct sheaf_sheaf **empty);
/* Two-sheaf exchanges (one lock for up to @n sheaves each way).  swap_fulls puts up to
 * nfull full sheaves (within the limit; *put says how many) and returns the empties
 * taken (at most *put).  swap_empties takes up to @want full sheaves and, if it got
 * any, puts the nempty empties. */
unsigned sheaf_barn_swap_fulls(struct sheaf_barn *b, struct sheaf_sheaf **full, unsigned nfull,
			       struct sheaf_sheaf **empty_out, unsigned *put);
unsigned sheaf_barn_swap_empties(struct sheaf_barn *b, struct sheaf_sheaf **empty, unsigned nempty,
				 struct sheaf_sheaf **full_out, unsigned want);
/* Take every sheaf out of the barn (shrink/destroy). */
void sheaf_barn_take_all(struct sheaf_barn *b, struct sheaf_list *full, struct sheaf_list *empty);
/* D6: sheaves beyond the working set, taken out for the caller to flush and free. */
void sheaf_barn_trim(struct sheaf_barn *b, struct sheaf_list *full, struct sheaf_list *empty);
bool sheaf_barn_is_valid(struct sheaf_barn *b, const struct sheaf_cache *c);
bool sheaf_barn_holds(struct sheaf_barn *b, const void *obj);
void sheaf_barn_counts(struct sheaf_barn *b, uint64_t *full, uint64_t *empty, uint64_t *objs, uint64_t *locks,
		       uint64_t *moved);

/* reaper.c: the background thread that shrinks idle caches (SHEAF_REAP_MS). */
void sheaf_reaper_kick(void);  /* start it if not started; call holding no Sheaf lock */
/* A start was attempted in this process (or it is a fork child, which never gets one). */
extern atomic_int sheaf_reaper_kicked;
/* The malloc front end starts the reaper only once Sheaf's heap holds this much (a
 * small tool under the preload stays single-threaded; see reaper.c). */
#define SHEAF_REAP_MALLOC_START (16ul << 20)
static inline bool sheaf_reaper_wanted_by_malloc(void)
{
	return !atomic_load_explicit(&sheaf_reaper_kicked, memory_order_relaxed) &&
	       sheaf_rd(sheaf_heap.next_block) << SHEAF_BLOCK_SHIFT >= SHEAF_REAP_MALLOC_START;
}
/* Mixing step of the reaper's activity signatures (FNV-1a style). */
static inline uint64_t sheaf_sig_mix(uint64_t sig, uint64_t v)
{
	return (sig ^ v) * 0x100000001B3ull;
}
void sheaf_reaper_stop(void);
void sheaf_reaper_unlink(struct sheaf_cache *c); /* destroy: unlink when not pinned */
void sheaf_reaper_fork_child(void);
unsigned long sheaf_reaper_rounds(void);
uint64_t sheaf_pcs_reap_signature(struct sheaf_cache *c); /* percpu.c */
/* malloc.c: give back cached extents older than SHEAF_MALLOC_EXTENT_DELAY_NS. */
void sheaf_malloc_extent_cache_age(void);

/* ---- "sheaf.c": sheaves and the per-CPU/per-thread slow paths (K§2.2, K§2.6) -------- */
struct sheaf_sheaf *sheaf_sheaf_new(struct sheaf_cache *c, uint32_t capacity);
void sheaf_sheaf_free(struct sheaf_cache *c, struct sheaf_sheaf *s);
/* Flush all objects of an unused sheaf to slabs (SHEAF_FLUSH); the sheaf stays. */
void sheaf_sheaf_flush(struct sheaf_cache *c, struct sheaf_sheaf *s, uint64_t *stat);
/* Refill to capacity from @n's slabs; returns objects added. */
unsigned sheaf_sheaf_refill(struct sheaf_cache *c, struct sheaf_node *n, struct sheaf_sheaf *s,
			    uint64_t *stat);
bool sheaf_sheaf_is_valid(const struct sheaf_cache *c, const struct sheaf_sheaf *s);
void sheaf_barn_maybe_trim(struct sheaf_cache *c, struct sheaf_barn *b, struct sheaf_pcs *pcs);
/* Slow paths, called with the pcs locked (design §6) and pcs->main valid. */
bool sheaf_pcs_replace_empty_main(struct sheaf_cache *c, struct sheaf_pcs *pcs);
bool sheaf_pcs_swap_or_barn(struct sheaf_cache *c, struct sheaf_pcs *pcs); /* no refill */
bool sheaf_pcs_replace_full_main(struct sheaf_cache *c, struct sheaf_pcs *pcs);
/* Flush everything the pcs caches into barns (thread exit) or slabs (@to_slabs). */
void sheaf_pcs_drain(struct sheaf_cache *c, struct sheaf_pcs *pcs, bool to_slabs);
void sheaf_pcs_harvest(struct sheaf_pcs *pcs);  /* fold fast-path counts into pcs->stat */
void sheaf_pcs_rebase(struct sheaf_pcs *pcs);   /* after changing main */
struct sheaf_barn *sheaf_pcs_barn(struct sheaf_cache *c, struct sheaf_pcs *pcs);
struct sheaf_node *sheaf_pcs_mem_node(struct sheaf_cache *c, struct sheaf_pcs *pcs);

/* ---- "percpu.c": per-CPU/per-thread state, locking, thread exit, fork ---------------- */
int sheaf_percpu_init(void);
/* Lock the calling context's pcs of @c (per-CPU: on the current CPU; per-thread: the
 * thread's own, created on first use).  NULL when it cannot (held by another, or no
 * memory): the caller falls back to the slab path (K§2.4). */
struct sheaf_pcs *sheaf_pcs_lock(struct sheaf_cache *c);
void sheaf_pcs_unlock(struct sheaf_cache *c, struct sheaf_pcs *pcs);
/* The calling thread's existing pcs of @c, or NULL (the fast-path lookup). */
struct sheaf_pcs *sheaf_pcs_current(struct sheaf_cache *c);
void sheaf_pcs_shrink_all(struct sheaf_cache *c);
void sheaf_pcs_stats_gauge(struct sheaf_cache *c, uint64_t *in_pcs, uint64_t *slots);
/* Run fn on every pcs of @c with that pcs locked (shrink, destroy, barrier, stats). */
void sheaf_pcs_for_each(struct sheaf_cache *c, void (*fn)(struct sheaf_cache *, struct sheaf_pcs *, void *),
			void *arg);
int sheaf_pcs_setup_cache(struct sheaf_cache *c);   /* at create */
void sheaf_pcs_teardown_cache(struct sheaf_cache *c); /* at destroy, after draining */
void sheaf_percpu_fork_prepare(void);
void sheaf_percpu_fork_parent(void);
void sheaf_percpu_fork_child(void);
/* Why the active mode was chosen ("forced by SHEAF_PERCPU=thread", "glibc rseq ..."). */
const char *sheaf_percpu_mode_reason(void);
/* Install (or with NULL remove) sheaf_free_check_hook.  Use this, not a plain store:
 * in per-CPU mode it also closes the free fast path, which has no hook test of its
 * own (rseq.h), so that every free reaches the hook. */
void sheaf_free_check_hook_set(void (*fn)(const void *obj, size_t size));

/* ---- "cache.c" ---------------------------------------------------------------------- */
int sheaf_init(void);  /* idempotent; 0 or -errno */
static inline int sheaf_ensure_init(void)
{
	if (sheaf_likely(atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) == 2))
		return 0;
	return sheaf_init();
}
static inline void sheaf_stat_add(struct sheaf_pcs *pcs, enum sheaf_stat_item it, uint64_t v)
{
	sheaf_wr(pcs->stat[it], sheaf_rd(pcs->stat[it]) + v);
}
static inline void sheaf_stat_atomic(struct sheaf_cache *c, enum sheaf_stat_item it, uint64_t v)
{
	atomic_fetch_add_explicit(&c->stat_atomic[it], v, memory_order_relaxed);
}
/* Add to pcs when one is held, else to the atomic counters. */
static inline void sheaf_stat(struct sheaf_cache *c, struct sheaf_pcs *pcs, enum sheaf_stat_item it,
			      uint64_t v)
{
	if (pcs)
		sheaf_stat_add(pcs, it, v);
	else
		sheaf_stat_atomic(c, it, v);
}
uint32_t sheaf_cache_default_capacity(const struct sheaf_cache *c);
/* A live cache handle?  NULL, destroyed and foreign handles are reported (false). */
bool sheaf_cache_check(const struct sheaf_cache *c);
struct sheaf_cache *sheaf_cache_create_class(const char *name, size_t size, const struct sheaf_cache_args *args);
/* The free mark (slab/freecheck.h) of @obj, a start of an object of @c: false after
 * reporting a confirmed double free; _take also marks it free.  No lock held. */
bool sheaf_free_mark_check(struct sheaf_cache *c, const void *obj);
bool sheaf_free_mark_take(struct sheaf_cache *c, void *obj);
/* Registered by the RCU layer: does @obj wait for a grace period (free_rcu)? */
extern bool (*sheaf_rcu_pending_hook)(struct sheaf_cache *c, const void *obj);
void sheaf_cache_free_slowpath(struct sheaf_cache *c, void *obj, struct sheaf_pcs *pcs);
void sheaf_cache_for_each(void (*fn)(struct sheaf_cache *, void *), void *arg);
void sheaf_caches_lock_all(void);
void sheaf_caches_unlock_all(void);

/* ---- "debug_slab.c" hooks (debug caches: no sheaves, every op on the slab path) ------ */
/* Set c->obj_offset, c->slot_size, c->freeptr_offset, c->debug_offset for c->debug_flags. */
void sheaf_debug_slab_layout(struct sheaf_cache *c);
void sheaf_debug_slab_init(struct sheaf_cache *c, void *first_slot, unsigned nslots);
/* Nonzero: corruption was reported; the core leaks that object. */
int sheaf_debug_slab_alloc(struct sheaf_cache *c, void *obj, const void *caller);
int sheaf_debug_slab_free(struct sheaf_cache *c, void *obj, const void *caller);
/* Debug flags selected for a cache name by SHEAF_SLAB_DEBUG. */
unsigned sheaf_debug_slab_flags_for(const char *name);
/* Set when a checker wants to see every free (debug objects); frees then take the
 * slow path (per-thread) or the checker is called before the object enters a sheaf. */
extern void (*volatile sheaf_free_check_hook)(const void *obj, size_t size);

/* ---- "rcu_free.c" ------------------------------------------------------------------- */
void sheaf_rcu_cache_init(struct sheaf_cache *c);
void sheaf_rcu_cache_fini(struct sheaf_cache *c);  /* after the per-cache barrier */
/* Submit the pcs's partly filled rcu_free sheaf (thread exit, shrink, barrier). */
void sheaf_rcu_flush_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs);
/* TYPESAFE_BY_RCU: give slab pages back only after a grace period. */
/* The rcu_head lives in the discarded slab's descriptor (sl_rcu), so deferring cannot
 * fail; sl_base, pg_order and pg_node say what to free. */
void sheaf_rcu_defer_pages(struct sheaf_cache *c, struct sheaf_slab *s);

#endif /* SHEAF_INTERNAL_H */
