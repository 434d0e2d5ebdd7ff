/* SPDX-License-Identifier: MIT */
/*
 * create.c - cache geometry (K§1.6, K§3, D1) and capacities, creation and destruction,
 * shrink, and the handles of destroyed caches.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_impl.h"

/* ---- Geometry ----------------------------------------------------------------------- */

static unsigned fls_u(unsigned x)
{
	return x ? 32u - (unsigned)__builtin_clz(x) : 0;
}

/* K§1.6 calculate_order: the smallest order holding min_objects with little waste. */
static unsigned calculate_order(size_t slot)
{
	unsigned min_objs = 4 * (fls_u((unsigned)sheaf_g.ncpus) + 1);
	unsigned max_order = SHEAF_DEF_MAX_ORDER;
	while (max_order < SHEAF_MAX_ORDER && (SHEAF_PAGE_SIZE << max_order) < slot)
		max_order++;
	for (; min_objs >= 1; min_objs /= 2) {
		for (unsigned frac = 16; frac >= 4; frac /= 2) {
			for (unsigned o = 0; o <= max_order; o++) {
				size_t slab = SHEAF_PAGE_SIZE << o;
				size_t n = SHEAF_MIN(slab / slot, SHEAF_MAX_OBJS);
				if (n < min_objs)
					continue;
				if ((slab - n * slot) * frac <= slab)
					return o;
			}
		}
		if (min_objs == 1)
			break;
	}
	for (unsigned o = 0; o <= SHEAF_MAX_ORDER; o++)
		if ((SHEAF_PAGE_SIZE << o) >= slot)
			return o;
	return SHEAF_MAX_ORDER;
}

/* The internal metadata caches (sheaves, per-thread tables) take the smallest slab
 * that holds one object with at most a quarter wasted: calculate_order's slabs of 32 KiB
 * for the sheaves of 1.5-4 KiB made a small program hold 128 KiB of metadata slabs for
 * a handful of sheaves (one slab per sheaf size, the adaptive capacity's steps), a third
 * of the malloc shapes' peak RSS (docs/benchmarks.md, sixth session).  Metadata is
 * taken on slow paths only, so more, smaller slabs cost nothing measurable. */
static unsigned meta_order(size_t slot)
{
	for (unsigned o = 0; o < SHEAF_MAX_ORDER; o++) {
		size_t slab = SHEAF_PAGE_SIZE << o;
		size_t n = slab / slot;
		if (n >= 1 && (slab - n * slot) * 4 <= slab)
			return o;
	}
	return calculate_order(slot);
}

/* Capacity for a sheaf that fills one internal metadata class (K§3 step 2). */
static uint32_t round_capacity(uint32_t cap)
{
	static const uint32_t classes[] = { 128,  192,  256,  384,  512, 768,
					    1024, 1536, 2048, 3072, 4096 };
	size_t bytes = SHEAF_SHEAF_HDR + (size_t)cap * sizeof(void *);
	for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
		if (bytes <= classes[i])
			return (classes[i] - SHEAF_SHEAF_HDR) / (uint32_t)sizeof(void *);
	return cap;
}

uint32_t sheaf_cache_default_capacity(const struct sheaf_cache *c)
{
	/* K§3 size tiers (after the kernel's kmalloc rounding) and 6.19's cpu_partial. */
	uint32_t tier, cpu_partial;
	if (c->slot_size >= SHEAF_PAGE_SIZE) {
		tier = 4;
		cpu_partial = 6;
	} else if (c->slot_size >= 1024) {
		tier = 12;
		cpu_partial = 24;
	} else if (c->slot_size >= 256) {
		tier = 28;
		cpu_partial = 52;
	} else {
		tier = 60;
		cpu_partial = 120;
	}
	if (!c->policy.capacity_counts_slab)
		return tier;
	/* D1: also count the old per-CPU slab, so that 2 x capacity >= cpu slab +
	 * cpu_partial of v6.19 (seed 001, Points 1 and 2). */
	uint32_t d1 = (c->objs_per_slab + cpu_partial + 1) / 2;
	/* And a byte floor: a sheaf holds at least SHEAF_SHEAF_MIN_BYTES of objects, up to
	 * what a 1 KiB sheaf holds.  A userspace cache is rarely one of thousands, and a
	 * mid-size object (256 B: 28 by the tiers, 34 by the slab) would otherwise cost a
	 * barn exchange every few dozen operations; a batch of 100 then stays within a
	 * CPU's two sheaves (docs/benchmarks.md, batch100/256). */
	uint32_t floor_n = (uint32_t)SHEAF_MIN(SHEAF_SHEAF_MIN_BYTES / c->slot_size,
					       (size_t)SHEAF_SHEAF_FLOOR_MAX);
	return round_capacity(SHEAF_MAX(SHEAF_MAX(tier, d1), floor_n));
}

/* A sheaf (and a prefill) of @n objects of @c: at most SHEAF_MAX_SHEAF_CAPACITY objects
 * and SHEAF_MAX_SHEAF_BYTES of them, so that no refill commits more than that. */
bool cache_capacity_ok(const struct sheaf_cache *c, size_t n)
{
	return n >= 1 && n <= SHEAF_MAX_SHEAF_CAPACITY && n * c->slot_size <= SHEAF_MAX_SHEAF_BYTES;
}

/* Adaptive capacity (docs/design.md, D2): a cache whose CPUs exchange sheaves with the
 * barn at a high rate gets larger sheaves, in steps of about twice (rounded like the
 * default), at most SHEAF_ADAPT_STEPS - 1 steps up, never beyond
 * SHEAF_ADAPT_SHEAF_BYTES of objects per sheaf (or SHEAF_ADAPT_MIN_OBJS objects, up to
 * SHEAF_ADAPT_SHEAF_BYTES_MAX bytes, where that is more) nor the largest metadata class;
 * it steps back when the rate falls, and to the default when the reaper finds it idle.
 * The object floor is for producer/consumer bursts of larger objects: with 32 KiB alone a
 * 1 KiB cache's sheaf stayed at its default 41, and a burst of 64 cost two barn
 * exchanges a side.  With the floor it may step to 89 (2 KiB: 25 -> 57, 4 KiB: 9 -> 25),
 * which made burst64/1024 0.75-0.78x as long in the same process (docs/benchmarks.md,
 * 2026-11-28 (second session)).  Caches of up to 512 B are where they were, and the
 * 128 KiB cap keeps sheaves of big blocks small (the floor without it took the thread
 * shape's peak RSS up by a third).
 * Only caches on Sheaf's default capacity adapt: a capacity given at creation, by
 * SHEAF_SHEAF_CAPACITY or by sheaf_cache_set_capacity stays as given, and so do
 * kernel-compatible caches (the kernel's is fixed, K§3). */
#define SHEAF_ADAPT_STEPS           3u
#define SHEAF_ADAPT_SHEAF_BYTES     (32u << 10)
#define SHEAF_ADAPT_MIN_OBJS        128u
#define SHEAF_ADAPT_SHEAF_BYTES_MAX (128u << 10)

static void capacity_ladder_init(struct sheaf_cache *c, uint32_t cap, bool adaptive)
{
	size_t bound = SHEAF_MIN((size_t)SHEAF_ADAPT_MIN_OBJS * c->slot_size,
				 (size_t)SHEAF_ADAPT_SHEAF_BYTES_MAX);
	bound = SHEAF_MAX(bound, (size_t)SHEAF_ADAPT_SHEAF_BYTES);
	c->capacity_ladder[0] = cap;
	c->capacity_steps = 1;
	c->capacity_steps_rate = 1;
	for (unsigned i = 1;
	     adaptive && cap && c->policy.adaptive_capacity && i < SHEAF_ADAPT_STEPS; i++) {
		uint32_t next = round_capacity(2 * c->capacity_ladder[i - 1]);
		size_t meta = SHEAF_SHEAF_HDR + (size_t)next * sizeof(void *);
		if (next <= c->capacity_ladder[i - 1] || next > SHEAF_MAX_SHEAF_CAPACITY ||
		    meta > 4096 || (size_t)next * c->slot_size > SHEAF_ADAPT_SHEAF_BYTES_MAX)
			break;
		/* Past @bound a step is for bulk calls alone (sheaf_pcs_bulk_fit): a call
		 * of 128 on a 256-byte cache (121) swapped main and spare under the lock on
		 * every call, 2.8-3.0x DPDK's mempool against 1.8x for 64 bytes, whose
		 * ladder has 249 (issue 18, bench bulk128/256).  Such a call holds as many
		 * objects as the larger sheaf anyway; the exchange rate alone, which any
		 * single-object workload can drive, stays within @bound (the peak RSS
		 * that bound protects, "Adaptive capacity for larger objects" in
		 * docs/benchmarks.md). */
		if ((size_t)next * c->slot_size <= bound)
			c->capacity_steps_rate = c->capacity_steps + 1;
		else if (c->capacity_steps_rate != c->capacity_steps)
			break; /* one bulk-only step at most */
		c->capacity_ladder[c->capacity_steps++] = next;
	}
	atomic_store(&c->capacity_step, 0);
	atomic_store(&c->capacity_adaptive, c->capacity_steps > 1);
}

static int compute_layout(struct sheaf_cache *c, size_t size, const struct sheaf_cache_args *a,
			  bool meta)
{
	size_t align = a && a->align ? a->align : (size >= 16 ? 16 : 8);
	if (align & (align - 1) || align > SHEAF_PAGE_SIZE)
		return -EINVAL;
	if (c->flags & SHEAF_HWCACHE_ALIGN) {
		/* Kernel calculate_alignment: a cache line, halved while two objects fit. */
		size_t ral = SHEAF_CACHELINE;
		while (size <= ral / 2 && ral > 8)
			ral /= 2;
		align = SHEAF_MAX(align, ral);
	}
	if (align < 8 && size >= 8)
		align = 8;
	c->align = align;
	c->object_size = size;
	c->obj_offset = 0;
	c->debug_offset = 0;
	size_t inuse;
	if (c->ctor || (c->flags & SHEAF_TYPESAFE_BY_RCU)) {
		/* The object's contents must survive on the freelist: the free mark and the
		 * link live outside it (slab/freecheck.h). */
		c->mark_offset = (uint32_t)SHEAF_ALIGN_UP(size, (size_t)8);
		c->freeptr_offset = c->mark_offset + 8;
		inuse = c->freeptr_offset + 2;
	} else {
		/* Link in the first word, free mark in the second: at least 16 bytes. */
		c->freeptr_offset = 0;
		c->mark_offset = 8;
		inuse = SHEAF_MAX(size, (size_t)16);
	}
	c->slot_size = SHEAF_ALIGN_UP(inuse, align);
	if (c->debug_flags)
		sheaf_debug_slab_layout(c);
	if (c->slot_size > (SHEAF_PAGE_SIZE << SHEAF_MAX_ORDER))
		return -EINVAL;
	c->order = meta ? meta_order(c->slot_size) : calculate_order(c->slot_size);
	c->objs_per_slab =
		(uint32_t)SHEAF_MIN((SHEAF_PAGE_SIZE << c->order) / c->slot_size, SHEAF_MAX_OBJS);
	c->slot_recip = (uint32_t)(((1ull << 32) + c->slot_size - 1) / c->slot_size);
	c->slot_div_c = UINT64_MAX / c->slot_size + 1;
	uint64_t div_e = (uint64_t)c->slot_size * c->slot_div_c; /* mod 2^64 (freecheck.h) */
	c->slot_div_lim = div_e ? (uint64_t)c->objs_per_slab * div_e : c->slot_div_c;
	c->slab_mask = (SHEAF_PAGE_SIZE << c->order) - 1;
	c->start_mask = (c->slot_size & (c->slot_size - 1)) == 0 && c->obj_offset == 0 ?
				c->slot_size - 1 :
				0;
	/* The object-start tests (freecheck.h) take every multiple of the slot size below
	 * objs_per_slab slots for an object: no whole slot may fit in the slab's tail (the
	 * power-of-two mask tests have none: the slot divides the slab). */
	sheaf_assert(c->slot_size * (c->objs_per_slab + 1ull) > (SHEAF_PAGE_SIZE << c->order));
	unsigned lg = fls_u((unsigned)SHEAF_MIN(c->slot_size, (size_t)1u << 30)) - 1;
	c->min_partial = SHEAF_MIN(SHEAF_MAX(lg / 2, SHEAF_MIN_PARTIAL), SHEAF_MAX_PARTIAL);
	return 0;
}

/* ---- Create / destroy ------------------------------------------------------------- */

static size_t cache_struct_size(void)
{
	return sizeof(struct sheaf_cache) +
	       (size_t)(sheaf_g.ncpus + 2) * sizeof(struct sheaf_mainv_slot);
}

static int alloc_id_locked(uint32_t *id)
{
	for (uint32_t i = 0; i < sheaf_reg.id_cap; i++) {
		if (!sheaf_reg.id_used[i]) {
			sheaf_reg.id_used[i] = 1;
			*id = i;
			return 0;
		}
	}
	uint32_t ncap = sheaf_reg.id_cap ? sheaf_reg.id_cap * 2 : 4096;
	uint8_t *n = sheaf_os_map(ncap);
	if (!n)
		return -ENOMEM;
	if (sheaf_reg.id_used) {
		memcpy(n, sheaf_reg.id_used, sheaf_reg.id_cap);
		sheaf_os_unmap(sheaf_reg.id_used, sheaf_reg.id_cap);
	}
	*id = sheaf_reg.id_cap;
	n[*id] = 1;
	sheaf_reg.id_used = n;
	sheaf_reg.id_cap = ncap;
	return 0;
}

/* A cache's nodes and, after them, their barns (barn/), right after the descriptor and
 * its per-CPU entries in the descriptor's own mapping: a program with many caches then
 * has one page of these per cache, not two (fewer pages for the TLB to map). */
static size_t nodes_bytes(void)
{
	return (sizeof(struct sheaf_node) + sizeof(struct sheaf_barn)) * (size_t)sheaf_g.nnodes;
}

/* The descriptor, its per-CPU entries and its nodes. */
static size_t cache_all_bytes(void)
{
	return cache_struct_size() + nodes_bytes();
}

/* Colouring (docs/percpu.md "Colours"): every cache's descriptor and nodes were each at
 * the start of pages of their own, so the lines every operation reads of them (the
 * node's first, the cache's entry for the CPU) fell in the same level-1 cache set for
 * every cache, and a program using more size classes than a set has ways evicted
 * them from each other all the time.  Each new mapping places its structure k lines
 * into its first page, k the next of the lines the mapping has to spare (@spare
 * bytes), in turn.  The count is shared by every mapping: any spread will do. */
static size_t colour_offset(size_t spare)
{
	static unsigned next;
	size_t lines = spare / SHEAF_CACHELINE + 1;
	unsigned k = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
	return (size_t)(k % lines) * SHEAF_CACHELINE;
}

static void *page_of(const void *p)
{
	return (void *)((uintptr_t)p & ~(uintptr_t)(SHEAF_PAGE_SIZE - 1));
}

static void cache_struct_unmap(struct sheaf_cache *c)
{
	sheaf_os_unmap(page_of(c), SHEAF_ALIGN_UP(cache_all_bytes(), SHEAF_PAGE_SIZE));
}

/* A new cache descriptor's mapping, the descriptor (and its nodes) coloured into it. */
static struct sheaf_cache *cache_struct_map(void)
{
	size_t bytes = SHEAF_ALIGN_UP(cache_all_bytes(), SHEAF_PAGE_SIZE);
	char *m = sheaf_os_map(bytes);
	if (!m)
		return NULL;
	size_t spare = SHEAF_MIN(bytes - cache_all_bytes(), (size_t)SHEAF_PAGE_SIZE - 1);
	return (struct sheaf_cache *)(m + colour_offset(spare));
}

/* Destroyed caches keep their descriptor (magic SHEAF_CACHE_DEAD, every CPU's main the
 * sentinel) so that a later call with the stale handle is reported, not a crash.  The
 * last SHEAF_DEAD_KEPT are kept; once there are that many, the next create reuses the
 * oldest of them (a program that creates and destroys caches in a loop stays bounded).
 * Protected by sheaf_reg.caches_lock. */
#define SHEAF_DEAD_KEPT 64
static struct sheaf_cache *dead_caches[SHEAF_DEAD_KEPT];
static unsigned dead_head, dead_count;

static struct sheaf_cache *cache_struct_get(void)
{
	struct sheaf_cache *c = NULL;
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	if (dead_count == SHEAF_DEAD_KEPT) {
		c = dead_caches[dead_head];
		dead_head = (dead_head + 1) % SHEAF_DEAD_KEPT;
		dead_count--;
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	if (c) {
		memset(c, 0, cache_all_bytes()); /* its colour stays */
		return c;
	}
	return cache_struct_map();
}

/* Every CPU's main of @c the sentinel: its fast paths miss from now on. */
static void cache_mainv_to_sentinel(struct sheaf_cache *c)
{
	for (int k = 0; k < sheaf_g.ncpus + 2; k++)
		__atomic_store_n(&c->mainv[k].m, &sheaf_sentinel_sheaf, __ATOMIC_RELEASE);
}

struct sheaf_cache *sheaf_cache_placeholder_new(void)
{
	struct sheaf_cache *c = cache_struct_map();
	if (!c)
		return NULL;
	cache_mainv_to_sentinel(c);
	c->id = UINT32_MAX;
	c->free_p2_mask = UINTPTR_MAX;
	__atomic_store_n(&c->magic, SHEAF_CACHE_DEAD, __ATOMIC_RELEASE);
	return c;
}

static void cache_struct_retire(struct sheaf_cache *c)
{
	/* Stale handles: alloc and free fast paths find the sentinel and take the slow
	 * path, which checks the magic first. */
	cache_mainv_to_sentinel(c);
	/* Its nodes live in its mapping, kept with it; a stale handle must not reach them. */
	memset(c->node, 0, sizeof(c->node));
	__atomic_store_n(&c->magic, SHEAF_CACHE_DEAD, __ATOMIC_RELEASE);
	struct sheaf_cache *oldest = NULL;
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	/* Full when more caches were alive at once than are kept (a create reuses one only
	 * at SHEAF_DEAD_KEPT): the oldest goes back to the OS.  The fuzz corpus found this
	 * (two caches alive while others churn); tests/unit/test_cache_churn.c. */
	if (dead_count == SHEAF_DEAD_KEPT) {
		oldest = dead_caches[dead_head];
		dead_head = (dead_head + 1) % SHEAF_DEAD_KEPT;
		dead_count--;
	}
	dead_caches[(dead_head + dead_count) % SHEAF_DEAD_KEPT] = c;
	dead_count++;
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	if (oldest)
		cache_struct_unmap(oldest);
}

/* Sheaf's behaviour, or Linux 7.0's for a kernel-compatible cache (slab/slab.h). */
static void cache_policy_init(struct sheaf_cache_policy *p, bool kernel_compat)
{
	bool sheaf = !kernel_compat;
	*p = (struct sheaf_cache_policy){
		.capacity_counts_slab = sheaf,
		.adaptive_capacity = sheaf,
		.barn_on_memoryless = sheaf,
		.cache_remote_on_memoryless = sheaf,
		.slab_path_without_barn = kernel_compat,
		.per_cache_rcu_barrier = sheaf,
		.barn_limits_in_bytes = sheaf,
		.barn_trim = sheaf,
		.refill_by_demand = sheaf,
	};
}

/* Creation, step 1: who the cache is (name, flags, constructor, kernel compatibility,
 * debugging, the checks of every free).  Returns whether its frees may use the free
 * mark.  Under ASan and memcheck a freed object of a tracked cache is known to the
 * tool, which reports a double free by itself (slab/track.h); the mark would be an
 * access to poisoned memory there. */
static bool cache_identity(struct sheaf_cache *c, const char *name,
			   const struct sheaf_cache_args *args, bool meta)
{
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "unnamed");
	c->flags = args ? args->flags : 0;
	c->ctor = args ? args->ctor : NULL;
	c->kernel_compat = (c->flags & SHEAF_KERNEL_COMPAT) ||
			   sheaf_option_long(SHEAF_OPT_KERNEL_COMPAT);
	cache_policy_init(&c->policy, c->kernel_compat);
	if (!meta)
		c->debug_flags = (c->flags & SHEAF_DEBUG_ALL) | sheaf_debug_slab_flags_for(c->name);
	/* Debug caches check every free on their slab path, with fuller reports;
	 * metadata caches serve Sheaf itself. */
	c->free_checks = !meta && !c->debug_flags && sheaf_option_long(SHEAF_OPT_FREE_CHECKS);
	c->random = ((uint64_t)(uintptr_t)c * 0x9E3779B97F4A7C15ull) ^ sheaf_os_now_ns();
	return c->free_checks &&
	       !(sheaf_track_cache(c) && (SHEAF_TRACK_VALGRIND || sheaf_track_asan_ok(c)));
}

/* Creation, step 3: the capacity of the cache's sheaves (0: no sheaves), from the
 * arguments, the SHEAF_SHEAF_CAPACITY option or the default; -EINVAL for an argument
 * out of bounds. */
static int cache_capacity_choose(struct sheaf_cache *c, const struct sheaf_cache_args *args,
				 bool meta, uint32_t *cap)
{
	*cap = 0;
	if (meta || c->debug_flags || (c->flags & SHEAF_NO_SHEAVES))
		return 0;
	if (args && args->sheaf_capacity) {
		*cap = args->sheaf_capacity;
		return cache_capacity_ok(c, *cap) ? 0 : -EINVAL;
	}
	if (sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY) > 0) {
		/* The option applies to every cache: held to each one's byte bound. */
		uint32_t o = (uint32_t)sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY);
		*cap = SHEAF_MIN(o, (uint32_t)SHEAF_MAX((size_t)1,
							SHEAF_MAX_SHEAF_BYTES / c->slot_size));
		return 0;
	}
	*cap = sheaf_cache_default_capacity(c);
	return 0;
}

/* Creation, step 4: one node per NUMA node, each with its barn (D3: a barn for every
 * node; Linux 7.0 only for nodes with memory).  False without memory. */
static bool cache_nodes_init(struct sheaf_cache *c, uint32_t cap)
{
	struct sheaf_node *nodes = (struct sheaf_node *)((char *)c + cache_struct_size());
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		struct sheaf_node *n = &nodes[i];
		n->barn = (struct sheaf_barn *)&nodes[sheaf_g.nnodes] + i;
		n->cache = c;
		n->malloc_cache = (c->flags & SHEAF_CACHE_MALLOC_CLASS) ? c : NULL;
		/* malloc's test of an object start (slab.h), for its classes with the mark. */
		n->malloc_slab_mask = c->slab_mask;
		bool class_mark = n->malloc_cache &&
				  sheaf_u8_any(&c->free_mark, SHEAF_MARK_IN_WORD1);
		n->malloc_div_c = class_mark ? c->slot_div_c : 0;
		n->malloc_div_lim = class_mark ? c->slot_div_lim : 0;
		n->nid = i;
		n->mem_nid = sheaf_g.node_mem_nid[i];
		n->has_memory = sheaf_g.node_has_mem[i];
		pthread_mutex_init(&n->list_lock, NULL);
		sheaf_list_init(&n->partial);
		sheaf_barn_init(n->barn, cap > 0 && (n->has_memory || c->policy.barn_on_memoryless),
				!c->policy.barn_limits_in_bytes);
		if (c->policy.barn_limits_in_bytes)
			sheaf_barn_set_limits(n->barn, (size_t)cap * c->slot_size);
		c->node[i] = n;
	}
	/* D3 (issue 18): a memoryless node's objects are its nearest memory node's, so its
	 * CPUs use that node's barn: the full sheaves a consumer there fills reach the
	 * producers of the memory node, which would never read a barn of its own.  Not in
	 * the Linux 7.0 configuration, where a memoryless node has no barn. */
	if (c->policy.barn_on_memoryless)
		for (int i = 0; i < sheaf_g.nnodes; i++)
			if (!sheaf_g.node_has_mem[i])
				nodes[i].barn = nodes[sheaf_g.node_mem_nid[i]].barn;
	return true;
}

/* Creation, step 5: the layers' per-cache state and an id in the registry; -ENOMEM
 * when no id can be had. */
static int cache_register(struct sheaf_cache *c, bool meta)
{
	c->is_meta = meta;
	pthread_mutex_init(&c->pcs_lock, NULL);
	sheaf_list_init(&c->pcs_list);
	pthread_mutex_init(&c->prefilled_lock, NULL);
	sheaf_list_init(&c->prefilled);
	sheaf_list_init(&c->cache_list);
	sheaf_pcs_setup_cache(c);
	if (!meta)
		sheaf_rcu_cache_init(c);
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	int r = alloc_id_locked(&c->id);
	if (!r) {
		/* Live before it is linked: a walk of the registry (the statistics
		 * printers, a fork child's) checks every cache it meets, and took one
		 * still being created for a bad handle until 2026-11-29 (adversarial
		 * review: sheaf_stats_print_all against a create in another thread). */
		__atomic_store_n(&c->magic, SHEAF_CACHE_LIVE, __ATOMIC_RELEASE);
		sheaf_list_add_tail(&c->cache_list, &sheaf_reg.caches);
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	return r;
}

struct sheaf_cache *sheaf_cache_create_internal(const char *name, size_t size,
						const struct sheaf_cache_args *args, bool meta)
{
	int saved_errno = errno; /* a successful create leaves errno alone */
	/* The metadata caches are created by sheaf_init() itself. */
	int r = meta ? 0 : sheaf_ensure_init();
	if (r) {
		errno = -r == EAGAIN ? ENOMEM : -r;
		return NULL;
	}
	if (size == 0 || size > SHEAF_MAX_OBJECT_SIZE ||
	    (args && args->sheaf_capacity > SHEAF_MAX_SHEAF_CAPACITY)) {
		errno = EINVAL;
		return NULL;
	}
	/* A TYPESAFE_BY_RCU cache defers page frees to call_rcu() from under list_lock,
	 * where liburcu's worker cannot be started (nor fail to be): start it now. */
	if (!meta && args && (args->flags & SHEAF_TYPESAFE_BY_RCU) && !sheaf_rcu_worker_start()) {
		errno = ENOMEM;
		return NULL;
	}
	struct sheaf_cache *c = cache_struct_get();
	if (!c)
		return NULL;
	bool mark = cache_identity(c, name, args, meta);
	/* Step 2: the slot layout. */
	r = compute_layout(c, size, args, meta);
	uint32_t cap = 0;
	if (!r)
		r = cache_capacity_choose(c, args, meta, &cap);
	if (r) {
		cache_struct_unmap(c);
		errno = -r;
		return NULL;
	}
	c->free_mark = !mark               ? SHEAF_MARK_NONE :
		       c->mark_offset != 8 ? SHEAF_MARK_AT :
		       c->start_mask       ? SHEAF_MARK_WORD1_P2 :
					     SHEAF_MARK_WORD1;
	c->free_p2_mask = c->free_mark == SHEAF_MARK_WORD1_P2 ? c->start_mask : UINTPTR_MAX;
	c->capacity_default = cap;
	atomic_store(&c->sheaf_capacity, cap);
	bool own_capacity = !(args && args->sheaf_capacity) &&
			    sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY) <= 0;
	capacity_ladder_init(c, cap, own_capacity);
	atomic_store(&c->refill_demand, own_capacity && c->policy.refill_by_demand);
	if (!cache_nodes_init(c, cap)) {
		cache_struct_unmap(c);
		return NULL;
	}
	if (cache_register(c, meta)) {
		cache_struct_unmap(c); /* its nodes with it */
		errno = ENOMEM;
		return NULL;
	}
	errno = saved_errno;
	return c;
}

/* The malloc front end's class caches carry an internal flag users may not pass. */
struct sheaf_cache *sheaf_cache_create_class(const char *name, size_t size,
					     const struct sheaf_cache_args *args)
{
	return sheaf_cache_create_internal(name, size, args, false);
}

SHEAF_API struct sheaf_cache *sheaf_cache_create(const char *name, size_t size,
						 const struct sheaf_cache_args *args)
{
	if (args && (args->flags & ~SHEAF_CACHE_FLAGS_ALL)) {
		errno = EINVAL;
		return NULL;
	}
	int saved_errno = errno;
	struct sheaf_cache *c = sheaf_cache_create_internal(name, size, args, false);
	/* The malloc front end starts the reaper itself, later (sheaf_malloc_reaper_start): a
	 * class cache may be created inside malloc, where no thread may be started. */
	if (c && !(c->flags & SHEAF_CACHE_MALLOC_CLASS))
		sheaf_reaper_kick();
	if (c)
		errno = saved_errno;
	return c;
}

/* Every sheaf of @c's barns: full ones flushed to their slabs, all freed. */
void cache_barns_flush(struct sheaf_cache *c)
{
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		struct sheaf_list full, empty, *pos, *tmp;
		sheaf_list_init(&full);
		sheaf_list_init(&empty);
		sheaf_barn_take_all(c->node[i]->barn, &full, &empty);
		sheaf_list_for_each_safe(pos, tmp, &full) {
			struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
			sheaf_list_del(&s->link);
			sheaf_sheaf_flush(c, s, NULL);
			sheaf_sheaf_free(c, s);
		}
		sheaf_list_for_each_safe(pos, tmp, &empty) {
			struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
			sheaf_list_del(&s->link);
			sheaf_sheaf_free(c, s);
		}
	}
}

SHEAF_API void sheaf_cache_destroy(struct sheaf_cache *c)
{
	if (!c)
		return; /* like free(NULL) */
	if (!sheaf_cache_check(c))
		return; /* destroyed twice, or not a cache: reported */
	if (sheaf_unlikely(c->is_meta || (c->flags & SHEAF_CACHE_MALLOC_CLASS))) {
		/* A handle sheaf_cache_of() gave for a malloc block (or, until 2026-11-29, for
		 * Sheaf's own metadata): destroying it broke every later malloc of that class
		 * ("destroyed cache"), or every sheaf of that size. */
		sheaf_error(SHEAF_ERR_INVALID_CACHE, c->name, c,
			    "a cache of Sheaf's own (%s), not one the program created",
			    c->is_meta ? "metadata" : "a malloc size class");
		return;
	}
	/* D5: wait for this cache's deferred frees only. */
	sheaf_cache_rcu_barrier(c);
	/* Unlinked under caches_lock once the reaper is not visiting it (reaper.c). */
	sheaf_reaper_unlink(c);
	sheaf_pcs_teardown_cache(c);
	unsigned long pf_objs, pf = cache_prefilled_reclaim(c, &pf_objs);
	if (pf)
		sheaf_os_print("sheaf: cache '%s' destroyed with %lu prefilled %s not returned "
			       "(%lu free objects, taken back)",
			       c->name, pf, pf == 1 ? "sheaf" : "sheaves", pf_objs);
	cache_barns_flush(c);
	uint64_t leaked = 0;
	for (int i = 0; i < sheaf_g.nnodes; i++)
		leaked += sheaf_slab_node_release(c->node[i]);
	if (leaked) {
		/* Report, and keep the memory (and the cache, which its slabs point to)
		 * rather than free anything still in use.  The handle is dead all the same:
		 * every later call on it is a destroyed cache, reported (until 2026-11-29
		 * it stayed live here, and went on handing out objects unreported).  The
		 * structure is never unmapped, since the leaked objects' page-map keys
		 * point into it: it goes on no dead list, and its id stays taken. */
		sheaf_os_print(
			"sheaf: cache '%s' destroyed with %llu object%s still allocated; their memory is kept",
			c->name, (unsigned long long)leaked, leaked == 1 ? "" : "s");
		cache_mainv_to_sentinel(c);
		__atomic_store_n(&c->magic, SHEAF_CACHE_DEAD, __ATOMIC_RELEASE);
		return;
	}
	sheaf_rcu_cache_fini(c);
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	sheaf_reg.id_used[c->id] = 0;
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	cache_struct_retire(c);
}

SHEAF_API void sheaf_cache_shrink(struct sheaf_cache *c)
{
	if (!sheaf_cache_check(c))
		return;
	sheaf_pcs_shrink_all(c);
	cache_barns_flush(c);
	for (int i = 0; i < sheaf_g.nnodes; i++)
		sheaf_slab_node_shrink(c->node[i], 0);
	sheaf_page_purge_all();
	if (c->flags & SHEAF_TYPESAFE_BY_RCU)
		sheaf_rcu_shrunk(); /* its slabs' pages come back after a grace period */
}

SHEAF_API int sheaf_cache_set_capacity(struct sheaf_cache *c, unsigned int capacity)
{
	if (!sheaf_cache_check(c))
		return -EINVAL;
	if (!cache_capacity_ok(c, capacity) || c->capacity_default == 0)
		return -EINVAL;
	atomic_store(&c->capacity_adaptive, false); /* the caller's choice stays */
	atomic_store(&c->refill_demand, false);     /* and its sheaves are filled */
	/* The barns' limits are in bytes of objects (D6), as the adaptive steps set them
	 * (sheaf_capacity_adapt): until 2026-11-29 they kept the sheaf count of the old
	 * capacity, and a 64-byte cache set to 4096 kept 256 sheaves, 64 MiB, in its barn
	 * where SHEAF_BARN_BYTES allows 4.  A kernel-compatible cache keeps its 10/10. */
	for (int i = 0; c->policy.barn_limits_in_bytes && i < sheaf_g.nnodes; i++) {
		struct sheaf_barn *b = c->node[i]->barn;
		sheaf_mutex_lock(&b->lock, SHEAF_LOCK_BARN);
		sheaf_barn_set_limits(b, (size_t)capacity * c->slot_size);
		sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	}
	atomic_store(&c->sheaf_capacity, capacity);
	return 0;
}

/* A NULL, destroyed or foreign handle is reported like every call's (README "Errors");
 * until 2026-11-29 these two answered NULL and 0 for NULL without a word, and read a
 * destroyed cache as if it were live. */
SHEAF_API const char *sheaf_cache_name(const struct sheaf_cache *c)
{
	return sheaf_cache_check(c) ? c->name : NULL;
}
SHEAF_API size_t sheaf_cache_object_size(const struct sheaf_cache *c)
{
	return sheaf_cache_check(c) ? c->object_size : 0;
}

SHEAF_API struct sheaf_cache *sheaf_cache_of(const void *obj)
{
	if (atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) != 2)
		return NULL;
	uintptr_t k = sheaf_page_key(obj);
	if (!k)
		return NULL;
	/* Sheaf's own metadata (sheaves, per-thread tables) is no object of the program's:
	 * its cache's handle would let a call free or destroy what Sheaf itself uses. */
	struct sheaf_cache *c = sheaf_key_owner(k)->cache;
	return c->is_meta ? NULL : c;
}
