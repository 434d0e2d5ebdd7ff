/* SPDX-License-Identifier: MIT */
/*
 * cache.c - cache creation and destruction, geometry (K§1.6, K§3, D1), and the
 * public allocation entry points: single, bulk (K§2.8) and prefilled sheaves (K§5).
 *
 * The fast paths (design §6) sit at the top of sheaf_cache_alloc/sheaf_cache_free and
 * fit on one screen: pop or push on the current main sheaf, one unlikely branch to a
 * noinline slow path, so that the common case costs a handful of instructions
 * (tools/fastpath-golden.sh counts them).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/introspect.h"

/* Half the machine's memory (set at initialisation): the most one bulk call takes. */
static size_t bulk_limit = SIZE_MAX;

/* ---- Initialisation -------------------------------------------------------------- */

static void stats_at_exit(void)
{
	long mode = sheaf_option_long(SHEAF_OPT_STATS);
	if (mode == 2)
		sheaf_stats_print_all_json(stderr);
	else if (mode)
		sheaf_stats_print_all(stderr);
}

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* The child of fork: the reaper first, while the prepare handler's caches_lock is
 * still held, then the per-CPU layer releases its locks and adopts orphans. */
static void cache_fork_child(void)
{
	sheaf_reaper_fork_child();
	sheaf_percpu_fork_child();
}

int sheaf_init(void)
{
	pthread_mutex_lock(&init_lock);
	int st = atomic_load(&sheaf_g.init_state);
	if (st == 2) {
		pthread_mutex_unlock(&init_lock);
		return 0;
	}
	if (st == 1) {
		/* Re-entered from our own initialisation (e.g. a preloaded malloc). */
		pthread_mutex_unlock(&init_lock);
		return -EAGAIN;
	}
	atomic_store(&sheaf_g.init_state, 1);
	/* The hooks through which lower layers call up, before any layer runs. */
	sheaf_meta_register();
	sheaf_rcu_init();
	sheaf_options_init();
	sheaf_free_key_init();
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psize > 0)
		bulk_limit = (size_t)pages / 2 * (size_t)psize;
	sheaf_list_init(&sheaf_reg.caches);
	sheaf_list_init(&sheaf_reg.threads);
	int r = sheaf_node_topology_init();
	if (!r)
		r = sheaf_page_init();
	if (!r)
		r = sheaf_percpu_init();
	if (r) {
		atomic_store(&sheaf_g.init_state, 0);
		pthread_mutex_unlock(&init_lock);
		return r;
	}
	atomic_store_explicit(&sheaf_g.init_state, 2, memory_order_release);
	pthread_mutex_unlock(&init_lock);
	sheaf_introspect_link(); /* keeps the root sheafinfo reads (docs/introspection.md) */
	sheaf_meta_init();
	pthread_atfork(sheaf_percpu_fork_prepare, sheaf_percpu_fork_parent, cache_fork_child);
	atexit(stats_at_exit);
	if (sheaf_option_long(SHEAF_OPT_VERBOSE)) {
		sheaf_options_print(stderr);
		fprintf(stderr, "sheaf: mode %s, %d possible CPUs, %d nodes%s\n", sheaf_percpu_mode(), sheaf_g.ncpus,
			sheaf_g.nnodes, sheaf_g.fake_numa ? " (fake)" : "");
	}
	return 0;
}

SHEAF_API const char *sheaf_percpu_mode(void)
{
	return sheaf_reg.mode == SHEAF_MODE_PERCPU ? "percpu-rseq" : "per-thread";
}

/* ---- Geometry ----------------------------------------------------------------------- */

static unsigned fls_u(unsigned x) { return x ? 32u - (unsigned)__builtin_clz(x) : 0; }

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

/* Capacity for a sheaf that fills one internal metadata class (K§3 step 2). */
static uint32_t round_capacity(uint32_t cap)
{
	static const uint32_t classes[] = { 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096 };
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
	if (c->kernel_compat)
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
static bool capacity_ok(const struct sheaf_cache *c, size_t n)
{
	return n >= 1 && n <= SHEAF_MAX_SHEAF_CAPACITY && n * c->slot_size <= SHEAF_MAX_SHEAF_BYTES;
}

/* Adaptive capacity (docs/design.md, D2): a cache whose CPUs exchange sheaves with the
 * barn at a high rate gets larger sheaves, in steps of about twice (rounded like the
 * default), at most SHEAF_ADAPT_STEPS - 1 steps up, never beyond
 * SHEAF_ADAPT_SHEAF_BYTES of objects per sheaf nor the largest metadata class; it
 * steps back when the rate falls, and to the default when the reaper finds it idle.
 * Only caches on Sheaf's default capacity adapt: a capacity given at creation, by
 * SHEAF_SHEAF_CAPACITY or by sheaf_cache_set_capacity stays as given, and so do
 * kernel-compatible caches (the kernel's is fixed, K§3). */
#define SHEAF_ADAPT_STEPS 3u
#define SHEAF_ADAPT_SHEAF_BYTES (32u << 10)

static void capacity_ladder_init(struct sheaf_cache *c, uint32_t cap, bool adaptive)
{
	c->capacity_ladder[0] = cap;
	c->capacity_steps = 1;
	for (unsigned i = 1; adaptive && cap && !c->kernel_compat && i < SHEAF_ADAPT_STEPS; i++) {
		uint32_t next = round_capacity(2 * c->capacity_ladder[i - 1]);
		size_t meta = SHEAF_SHEAF_HDR + (size_t)next * sizeof(void *);
		if (next <= c->capacity_ladder[i - 1] || next > SHEAF_MAX_SHEAF_CAPACITY || meta > 4096 ||
		    (size_t)next * c->slot_size > SHEAF_ADAPT_SHEAF_BYTES)
			break;
		c->capacity_ladder[c->capacity_steps++] = next;
	}
	atomic_store(&c->capacity_step, 0);
	atomic_store(&c->capacity_adaptive, c->capacity_steps > 1);
}

static int compute_layout(struct sheaf_cache *c, size_t size, const struct sheaf_cache_args *a)
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
	c->order = calculate_order(c->slot_size);
	c->objs_per_slab = (uint32_t)SHEAF_MIN((SHEAF_PAGE_SIZE << c->order) / c->slot_size, SHEAF_MAX_OBJS);
	c->slot_recip = (uint32_t)(((1ull << 32) + c->slot_size - 1) / c->slot_size);
	c->slab_mask = (SHEAF_PAGE_SIZE << c->order) - 1;
	/* The object-start test (freecheck.h) takes every multiple of the slot size in the
	 * slab for an object: no whole slot may fit in the slab's tail. */
	sheaf_assert(c->slot_size * (c->objs_per_slab + 1ull) > (SHEAF_PAGE_SIZE << c->order));
	unsigned lg = fls_u((unsigned)SHEAF_MIN(c->slot_size, (size_t)1u << 30)) - 1;
	c->min_partial = SHEAF_MIN(SHEAF_MAX(lg / 2, SHEAF_MIN_PARTIAL), SHEAF_MAX_PARTIAL);
	return 0;
}

/* ---- Create / destroy ------------------------------------------------------------- */

static size_t cache_struct_size(void)
{
	return sizeof(struct sheaf_cache) + (size_t)(sheaf_g.ncpus + 2) * sizeof(struct sheaf_sheaf *);
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

/* A cache's nodes and, after them, their barns (barn/): one mapping. */
static size_t nodes_struct_size(void)
{
	return SHEAF_ALIGN_UP((sizeof(struct sheaf_node) + sizeof(struct sheaf_barn)) * (size_t)sheaf_g.nnodes,
			      SHEAF_PAGE_SIZE);
}

static void cache_free_nodes(struct sheaf_cache *c)
{
	if (c->node[0])
		sheaf_os_unmap(c->node[0], nodes_struct_size());
	memset(c->node, 0, sizeof(c->node));
}

static void cache_free_struct(struct sheaf_cache *c)
{
	cache_free_nodes(c);
	sheaf_os_unmap(c, SHEAF_ALIGN_UP(cache_struct_size(), SHEAF_PAGE_SIZE));
}

/* Destroyed caches keep their descriptor (magic SHEAF_CACHE_DEAD, every CPU's main the
 * sentinel) so that a later call with the stale handle is reported, not a crash.  The
 * last SHEAF_DEAD_KEPT are kept; the oldest beyond that is reused by the next create
 * (a program that creates and destroys caches in a loop stays bounded).  Protected by
 * sheaf_reg.caches_lock. */
#define SHEAF_DEAD_KEPT 64
static struct sheaf_cache *dead_caches[SHEAF_DEAD_KEPT];
static unsigned dead_head, dead_count;

static struct sheaf_cache *cache_struct_get(void)
{
	size_t bytes = SHEAF_ALIGN_UP(cache_struct_size(), SHEAF_PAGE_SIZE);
	struct sheaf_cache *c = NULL;
	pthread_mutex_lock(&sheaf_reg.caches_lock);
	if (dead_count == SHEAF_DEAD_KEPT) {
		c = dead_caches[dead_head];
		dead_head = (dead_head + 1) % SHEAF_DEAD_KEPT;
		dead_count--;
	}
	pthread_mutex_unlock(&sheaf_reg.caches_lock);
	if (c) {
		memset(c, 0, bytes);
		return c;
	}
	return sheaf_os_map(bytes);
}

static void cache_struct_retire(struct sheaf_cache *c)
{
	/* Stale handles: alloc and free fast paths find the sentinel and take the slow
	 * path, which checks the magic first. */
	for (int k = 0; k < sheaf_g.ncpus + 2; k++)
		__atomic_store_n(&c->mainv[k], &sheaf_sentinel_sheaf, __ATOMIC_RELEASE);
	cache_free_nodes(c);
	__atomic_store_n(&c->magic, SHEAF_CACHE_DEAD, __ATOMIC_RELEASE);
	pthread_mutex_lock(&sheaf_reg.caches_lock);
	sheaf_assert_internal(dead_count < SHEAF_DEAD_KEPT);
	dead_caches[(dead_head + dead_count) % SHEAF_DEAD_KEPT] = c;
	dead_count++;
	pthread_mutex_unlock(&sheaf_reg.caches_lock);
}

struct sheaf_cache *sheaf_cache_create_internal(const char *name, size_t size, const struct sheaf_cache_args *args,
						bool meta)
{
	int saved_errno = errno; /* a successful create leaves errno alone */
	int r = sheaf_ensure_init();
	if (r) {
		errno = -r == EAGAIN ? ENOMEM : -r;
		return NULL;
	}
	if (size == 0 || size > SHEAF_MAX_OBJECT_SIZE ||
	    (args && args->sheaf_capacity > SHEAF_MAX_SHEAF_CAPACITY)) {
		errno = EINVAL;
		return NULL;
	}
	struct sheaf_cache *c = cache_struct_get();
	if (!c)
		return NULL;
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "unnamed");
	c->flags = args ? args->flags : 0;
	c->ctor = args ? args->ctor : NULL;
	c->kernel_compat = (c->flags & SHEAF_KERNEL_COMPAT) || sheaf_option_long(SHEAF_OPT_KERNEL_COMPAT);
	if (!meta)
		c->debug_flags = (c->flags & SHEAF_DEBUG_ALL) | sheaf_debug_slab_flags_for(c->name);
	/* Debug caches check every free on their slab path, with fuller reports;
	 * metadata caches serve Sheaf itself. */
	c->free_checks = !meta && !c->debug_flags && sheaf_option_long(SHEAF_OPT_FREE_CHECKS);
	/* Under ASan and memcheck a freed object of a tracked cache is known to the tool,
	 * which reports a double free by itself (slab/track.h); the mark would be an
	 * access to poisoned memory there. */
	bool mark = c->free_checks && !(sheaf_track_cache(c) && (SHEAF_TRACK_VALGRIND || sheaf_track_asan_ok(c)));
	c->random = ((uint64_t)(uintptr_t)c * 0x9E3779B97F4A7C15ull) ^ sheaf_os_now_ns();
	r = compute_layout(c, size, args);
	if (r) {
		sheaf_os_unmap(c, SHEAF_ALIGN_UP(cache_struct_size(), SHEAF_PAGE_SIZE));
		errno = -r;
		return NULL;
	}
	c->free_mark = !mark ? SHEAF_MARK_NONE : c->mark_offset == 8 ? SHEAF_MARK_WORD1 : SHEAF_MARK_AT;
	uint32_t cap = 0;
	if (!meta && !c->debug_flags && !(c->flags & SHEAF_NO_SHEAVES)) {
		if (args && args->sheaf_capacity) {
			cap = args->sheaf_capacity;
			if (!capacity_ok(c, cap)) {
				sheaf_os_unmap(c, SHEAF_ALIGN_UP(cache_struct_size(), SHEAF_PAGE_SIZE));
				errno = EINVAL;
				return NULL;
			}
		} else if (sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY) > 0) {
			/* The option applies to every cache: held to each one's byte bound. */
			cap = (uint32_t)sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY);
			cap = SHEAF_MIN(cap, (uint32_t)SHEAF_MAX((size_t)1, SHEAF_MAX_SHEAF_BYTES / c->slot_size));
		} else {
			cap = sheaf_cache_default_capacity(c);
		}
	}
	c->capacity_default = cap;
	atomic_store(&c->sheaf_capacity, cap);
	capacity_ladder_init(c, cap, !(args && args->sheaf_capacity) &&
					     sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY) <= 0);

	struct sheaf_node *nodes = sheaf_os_map(nodes_struct_size());
	if (!nodes) {
		sheaf_os_unmap(c, SHEAF_ALIGN_UP(cache_struct_size(), SHEAF_PAGE_SIZE));
		return NULL;
	}
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		struct sheaf_node *n = &nodes[i];
		n->barn = (struct sheaf_barn *)&nodes[sheaf_g.nnodes] + i;
		n->cache = c;
		n->malloc_cache = (c->flags & SHEAF_CACHE_MALLOC_CLASS) ? c : NULL;
		n->nid = i;
		n->mem_nid = sheaf_g.node_mem_nid[i];
		n->has_memory = sheaf_g.node_has_mem[i];
		pthread_mutex_init(&n->list_lock, NULL);
		sheaf_list_init(&n->partial);
		/* D3: a barn for every node; Linux 7.0 only for nodes with memory. */
		sheaf_barn_init(n->barn, cap > 0 && (n->has_memory || !c->kernel_compat), c->kernel_compat);
		if (!c->kernel_compat)
			sheaf_barn_set_limits(n->barn, (size_t)cap * c->slot_size);
		c->node[i] = n;
	}
	c->is_meta = meta;
	pthread_mutex_init(&c->pcs_lock, NULL);
	sheaf_list_init(&c->pcs_list);
	pthread_mutex_init(&c->prefilled_lock, NULL);
	sheaf_list_init(&c->prefilled);
	sheaf_list_init(&c->cache_list);
	sheaf_pcs_setup_cache(c);
	if (!meta)
		sheaf_rcu_cache_init(c);

	pthread_mutex_lock(&sheaf_reg.caches_lock);
	r = alloc_id_locked(&c->id);
	if (!r)
		sheaf_list_add_tail(&c->cache_list, &sheaf_reg.caches);
	pthread_mutex_unlock(&sheaf_reg.caches_lock);
	if (r) {
		cache_free_struct(c);
		errno = ENOMEM;
		return NULL;
	}
	__atomic_store_n(&c->magic, SHEAF_CACHE_LIVE, __ATOMIC_RELEASE);
	errno = saved_errno;
	return c;
}

/* The malloc front end's class caches carry an internal flag users may not pass. */
struct sheaf_cache *sheaf_cache_create_class(const char *name, size_t size, const struct sheaf_cache_args *args)
{
	return sheaf_cache_create_internal(name, size, args, false);
}

SHEAF_API struct sheaf_cache *sheaf_cache_create(const char *name, size_t size, const struct sheaf_cache_args *args)
{
	if (args && (args->flags & ~SHEAF_CACHE_FLAGS_ALL)) {
		errno = EINVAL;
		return NULL;
	}
	int saved_errno = errno;
	struct sheaf_cache *c = sheaf_cache_create_internal(name, size, args, false);
	/* The malloc front end starts the reaper itself, later (sheaf_free_slowpath): a
	 * class cache may be created inside malloc, where no thread may be started. */
	if (c && !(c->flags & SHEAF_CACHE_MALLOC_CLASS))
		sheaf_reaper_kick();
	if (c)
		errno = saved_errno;
	return c;
}

static void barns_flush(struct sheaf_cache *c)
{
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		struct sheaf_list full, empty, *pos, *tmp;
		sheaf_list_init(&full);
		sheaf_list_init(&empty);
		sheaf_barn_take_all(c->node[i]->barn, &full, &empty);
		sheaf_list_for_each_safe(pos, tmp, &full)
		{
			struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
			sheaf_list_del(&s->link);
			sheaf_sheaf_flush(c, s, NULL);
			sheaf_sheaf_free(c, s);
		}
		sheaf_list_for_each_safe(pos, tmp, &empty)
		{
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
	/* D5: wait for this cache's deferred frees only. */
	sheaf_cache_rcu_barrier(c);
	/* Unlinked under caches_lock once the reaper is not visiting it (reaper.c). */
	sheaf_reaper_unlink(c);
	sheaf_pcs_teardown_cache(c);
	barns_flush(c);
	uint64_t leaked = 0;
	for (int i = 0; i < sheaf_g.nnodes; i++)
		leaked += sheaf_slab_node_release(c->node[i]);
	if (leaked) {
		/* Report, and keep the memory (and the cache, which its slabs point to)
		 * rather than free anything still in use. */
		sheaf_os_print("sheaf: cache '%s' destroyed with %llu object%s still allocated; their memory is kept",
			       c->name, (unsigned long long)leaked, leaked == 1 ? "" : "s");
		return;
	}
	sheaf_rcu_cache_fini(c);
	pthread_mutex_lock(&sheaf_reg.caches_lock);
	sheaf_reg.id_used[c->id] = 0;
	pthread_mutex_unlock(&sheaf_reg.caches_lock);
	cache_struct_retire(c);
}

SHEAF_API void sheaf_cache_shrink(struct sheaf_cache *c)
{
	if (!sheaf_cache_check(c))
		return;
	sheaf_pcs_shrink_all(c);
	barns_flush(c);
	for (int i = 0; i < sheaf_g.nnodes; i++)
		sheaf_slab_node_shrink(c->node[i], 0);
	sheaf_page_purge_all();
}

SHEAF_API int sheaf_cache_set_capacity(struct sheaf_cache *c, unsigned int capacity)
{
	if (!sheaf_cache_check(c))
		return -EINVAL;
	if (!capacity_ok(c, capacity) || c->capacity_default == 0)
		return -EINVAL;
	atomic_store(&c->capacity_adaptive, false); /* the caller's choice stays */
	atomic_store(&c->sheaf_capacity, capacity);
	return 0;
}

SHEAF_API const char *sheaf_cache_name(const struct sheaf_cache *c) { return c ? c->name : NULL; }
SHEAF_API size_t sheaf_cache_object_size(const struct sheaf_cache *c) { return c ? c->object_size : 0; }

SHEAF_API struct sheaf_cache *sheaf_cache_of(const void *obj)
{
	if (atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) != 2)
		return NULL;
	uintptr_t k = sheaf_page_key(obj);
	return k ? ((struct sheaf_node *)k)->cache : NULL;
}

/* ---- Single-object allocation and free ------------------------------------------------ */

static inline struct sheaf_node *local_mem_node(struct sheaf_cache *c)
{
	return c->node[sheaf_g.node_mem_nid[sheaf_node_current()]];
}

static void *alloc_from_slab(struct sheaf_cache *c, const void *caller)
{
	void *obj;
	for (;;) {
		obj = sheaf_slab_alloc_one(c, local_mem_node(c));
		if (!obj) {
			errno = ENOMEM;
			return NULL;
		}
		if (!c->debug_flags || sheaf_debug_slab_alloc(c, obj, caller) == 0)
			break;
		/* Corrupt object: reported and leaked; try another. */
	}
	sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_SLOWPATH, 1);
	sheaf_mark_clear(c, obj);
	return obj;
}

static sheaf_noinline void *alloc_slow(struct sheaf_cache *c, const void *caller)
{
	if (sheaf_unlikely(!sheaf_cache_check(c)))
		return NULL;
	if (atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) == 0)
		return alloc_from_slab(c, caller);
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (!pcs) {
		sheaf_stat_atomic(c, SHEAF_STAT_PCS_LOCK_FAIL, 1);
		return alloc_from_slab(c, caller);
	}
	struct sheaf_sheaf *m = pcs->main;
	if (m->size == 0 && !sheaf_pcs_replace_empty_main(c, pcs)) {
		sheaf_pcs_unlock(c, pcs);
		return alloc_from_slab(c, caller);
	}
	void *obj = sheaf_sheaf_pop(pcs->main);
	sheaf_stat_add(pcs, SHEAF_STAT_ALLOC_FASTPATH, 1);
	sheaf_pcs_unlock(c, pcs);
	sheaf_mark_clear(c, obj);
	return obj;
}

/* Per-thread fast path (design §6, per-thread mode), then the slow path. */
static inline void *alloc_thread(struct sheaf_cache *c, const void *caller)
{
	void *o;
	if (sheaf_likely(c != NULL) && sheaf_likely(sheaf_thread_pop(c, &o))) {
		sheaf_mark_clear(c, o);
		sheaf_track_obj_alloc(c, o); /* nothing unless Valgrind/ASan (track.h) */
		return o;
	}
	o = alloc_slow(c, caller);
	sheaf_track_obj_alloc(c, o);
	return o;
}

#if SHEAF_HAVE_RSEQ
static sheaf_noinline void *alloc_thread_noinline(struct sheaf_cache *c, const void *caller)
{
	return alloc_thread(c, caller);
}
#endif

SHEAF_API void *sheaf_cache_alloc(struct sheaf_cache *c)
{
#if SHEAF_HAVE_RSEQ
	/* Per-CPU fast path: a restartable sequence popping the current CPU's main
	 * (fastpath.h).  Empty, locked (sentinel; a destroyed cache has it on every CPU),
	 * no rseq CPU, or aborted: slow.  NULL is tested first (reported by the slow path). */
	void *o;
	if (sheaf_likely(c != NULL) && sheaf_likely(sheaf_cpu_pop(c, &o))) {
		sheaf_mark_clear(c, o);
		sheaf_track_obj_alloc(c, o);
		return o;
	}
	return alloc_thread_noinline(c, __builtin_return_address(0));
#else
	return alloc_thread(c, __builtin_return_address(0));
#endif
}

static void free_to_slab(struct sheaf_cache *c, void *obj)
{
	sheaf_slab_free_bulk(c, &obj, 1);
	sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, 1);
}

/* The pointer checks of every free: @obj lies in a slab of @c and is the start of an
 * object (reported otherwise).  @key is its page-map key. */
static bool free_ptr_ok(struct sheaf_cache *c, const void *obj, uintptr_t key, const char *op)
{
	if (sheaf_unlikely(!key || ((struct sheaf_node *)key)->cache != c || c->debug_flags))
		return sheaf_slab_check_obj(c, obj, op) != NULL;
	if (sheaf_unlikely(c->free_checks && !sheaf_obj_is_start(c, obj))) {
		sheaf_error(SHEAF_ERR_INTERIOR, c->name, obj, "%s of a pointer that is not the start of an object",
			    op);
		return false;
	}
	return true;
}

void sheaf_cache_free_slowpath(struct sheaf_cache *c, void *obj, struct sheaf_pcs *unused)
{
	(void)unused;
	if (!obj)
		return;
	if (!sheaf_cache_check(c))
		return;
	uintptr_t key = sheaf_page_key(obj);
	if (!free_ptr_ok(c, obj, key, "free"))
		return; /* reported; with SHEAF_ON_ERROR=warn the object is leaked */
	void (*hook)(const void *, size_t) = sheaf_free_check_hook;
	if (hook)
		hook(obj, c->object_size);
	/* After the hook: fix-ups may still touch the object. */
	if (sheaf_unlikely(sheaf_track_obj_free(c, obj))) {
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
		return;
	}
	if (c->debug_flags) {
		if (sheaf_debug_slab_free(c, obj, __builtin_return_address(0)) != 0)
			return;
		free_to_slab(c, obj);
		return;
	}
	if (c->free_mark && !sheaf_free_mark_take(c, obj))
		return;
	if (atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) == 0) {
		free_to_slab(c, obj);
		return;
	}
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (!pcs) {
		sheaf_stat_atomic(c, SHEAF_STAT_PCS_LOCK_FAIL, 1);
		free_to_slab(c, obj);
		return;
	}
	if (key != pcs->key && (c->kernel_compat || sheaf_g.node_has_mem[pcs->node])) {
		/* K§2.5: remote-node objects bypass the sheaves -- except on a memoryless node,
		 * where every object is remote and is cached anyway (D3). */
		sheaf_pcs_unlock(c, pcs);
		free_to_slab(c, obj);
		return;
	}
	struct sheaf_sheaf *m = pcs->main;
	if (sheaf_unlikely(sheaf_sheaf_top_is(m, obj))) {
		/* Only reachable without the mark (SHEAF_FREE_CHECKS=0, ASan, memcheck). */
		sheaf_pcs_unlock(c, pcs);
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
		return;
	}
	if (m->size >= m->capacity && !sheaf_pcs_replace_full_main(c, pcs)) {
		sheaf_pcs_unlock(c, pcs);
		free_to_slab(c, obj);
		return;
	}
	sheaf_sheaf_push(pcs->main, obj);
	sheaf_stat_add(pcs, SHEAF_STAT_FREE_FASTPATH, 1);
	sheaf_pcs_unlock(c, pcs);
}

/* Per-thread fast path (design §6, per-thread mode), then the slow path. */
static inline void free_thread(struct sheaf_cache *c, void *obj)
{
	if (sheaf_likely(c != NULL) && sheaf_likely(sheaf_thread_push(c, obj, sheaf_page_key(obj))))
		return;
	sheaf_cache_free_slowpath(c, obj, NULL);
}

#if SHEAF_HAVE_RSEQ
static sheaf_noinline void free_thread_noinline(struct sheaf_cache *c, void *obj) { free_thread(c, obj); }
#endif

SHEAF_API void sheaf_cache_free(struct sheaf_cache *c, void *obj)
{
#if SHEAF_HAVE_RSEQ
	/* Per-CPU fast path (rseq.h): @obj must be an object start (slab/freecheck.h, pure
	 * arithmetic), then a restartable sequence looks its page-map key up, compares it
	 * with the current CPU's main ("this cache, this node, not the sentinel": a
	 * foreign pointer, a destroyed cache or an installed free-check hook go slow),
	 * tests and writes the free mark, and pushes.  Everything else is slow. */
	if (sheaf_unlikely(!c))
		goto slow;
	if (sheaf_likely(c->free_mark == SHEAF_MARK_WORD1) && !SHEAF_TRACK_ENABLED) {
		if (sheaf_unlikely(!sheaf_obj_is_start(c, obj)))
			goto slow;
		if (sheaf_likely(sheaf_cpu_push_mark(c, obj)))
			return;
		goto slow;
	}
	/* The other cases look the key up first and check that it names a node of @c,
	 * so that the mark, where there is one, is safe to read before the sequence. */
	uintptr_t off = (uintptr_t)obj - (uintptr_t)sheaf_heap.base;
	if (sheaf_unlikely(off >= __atomic_load_n(&sheaf_page_fast_limit, __ATOMIC_RELAXED)))
		goto slow;
	uintptr_t key = __atomic_load_n(&sheaf_heap.pagemap[off >> SHEAF_PAGE_SHIFT], __ATOMIC_RELAXED);
	if (sheaf_unlikely(!key || ((struct sheaf_node *)key)->cache != c))
		goto slow;
	if (SHEAF_TRACK_ENABLED) {
		/* Valgrind/ASan builds: mark the object free before it can enter a sheaf,
		 * and undo it if the sequence fails (the slow path marks it again). */
		if (sheaf_reg.mode != SHEAF_MODE_PERCPU || !sheaf_track_cache(c) || c->free_mark ||
		    (c->free_checks && !sheaf_obj_is_start(c, obj)))
			goto slow;
		if (sheaf_unlikely(sheaf_track_obj_free(c, obj))) {
			sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
			return;
		}
		if (sheaf_likely(sheaf_cpu_push_key(c, obj, key)))
			return;
		/* The contents stay as they were: defined (the slow path reads sheaf
		 * metadata objects, and the hook reads the object). */
		if (sheaf_track_asan_ok(c))
			sheaf_track_asan_unpoison(obj, c->object_size);
		sheaf_track_vg_malloc(obj, c->object_size, 1);
		goto slow;
	}
	if (c->free_mark) {
		/* A constructor or TYPESAFE_BY_RCU cache: the mark past the object. */
		if (sheaf_unlikely(!sheaf_obj_is_start(c, obj)))
			goto slow;
		uint64_t *mk = sheaf_mark_word(c, obj);
		uint64_t old = *mk;
		if (sheaf_unlikely(old == sheaf_free_key))
			goto slow;
		*mk = sheaf_free_key;
		if (sheaf_likely(sheaf_cpu_push_key(c, obj, key)))
			return;
		*mk = old;
		goto slow;
	}
	if (c->free_checks && sheaf_unlikely(!sheaf_obj_is_start(c, obj)))
		goto slow;
	if (sheaf_likely(sheaf_cpu_push_key(c, obj, key)))
		return;
slow:
	free_thread_noinline(c, obj);
#else
	free_thread(c, obj);
#endif
}

/* ---- Bulk (K§2.8) ------------------------------------------------------------------ */

SHEAF_API size_t sheaf_cache_alloc_bulk(struct sheaf_cache *c, size_t n, void **objs)
{
	if (!objs || n == 0)
		return 0;
	if (!sheaf_cache_check(c))
		return 0;
	/* All or nothing: a request for more than half the machine's memory fails at once
	 * instead of filling it first. */
	if (n > bulk_limit / c->slot_size) {
		errno = ENOMEM;
		return 0;
	}
	size_t done = 0;
	struct sheaf_pcs *pcs = NULL;
	if (atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) && !c->debug_flags)
		pcs = sheaf_pcs_lock(c);
	if (pcs) {
		while (done < n) {
			struct sheaf_sheaf *m = pcs->main;
			uint32_t take = (uint32_t)SHEAF_MIN((size_t)m->size, n - done);
			if (take) { /* never write to the shared sentinel */
				sheaf_sheaf_pop_n(m, objs + done, take);
				done += take;
				sheaf_stat_add(pcs, SHEAF_STAT_ALLOC_FASTPATH, take);
			}
			if (done == n)
				break;
			/* Swap in a spare or a barn sheaf, but do not refill a sheaf only to
			 * copy it out again: the rest comes from slabs directly (K§2.8). */
			struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
			if (!(pcs->spare && pcs->spare->size) && !(b->enabled && sheaf_rd(b->nr_full)))
				break;
			if (!sheaf_pcs_swap_or_barn(c, pcs) || !pcs->main->size)
				break;
		}
		sheaf_pcs_unlock(c, pcs);
	}
	for (size_t i = 0; i < done; i++) {
		sheaf_mark_clear(c, objs[i]);
		sheaf_track_obj_alloc(c, objs[i]);
	}
	if (done < n) {
		size_t rest = n - done;
		struct sheaf_node *nd = local_mem_node(c);
		size_t got = 0;
		while (got < rest) {
			unsigned want = (unsigned)SHEAF_MIN(rest - got, (size_t)1u << 30);
			unsigned k;
			if (c->debug_flags) {
				void *o = alloc_from_slab(c, __builtin_return_address(0));
				k = o ? 1 : 0;
				if (o)
					objs[done + got] = o;
			} else {
				k = sheaf_slab_refill(c, nd, objs + done + got, want, want);
				sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_SLOWPATH, k);
			}
			if (!k)
				break;
			got += k;
		}
		for (size_t i = done; i < done + got; i++) {
			sheaf_mark_clear(c, objs[i]);
			sheaf_track_obj_alloc(c, objs[i]);
		}
		if (got < rest) {
			/* All or nothing (K§2.8 step 4). */
			sheaf_cache_free_bulk(c, done + got, objs);
			errno = ENOMEM;
			return 0;
		}
	}
	return n;
}

SHEAF_API void sheaf_cache_free_bulk(struct sheaf_cache *c, size_t n, void **objs)
{
	if (!objs || !n)
		return;
	if (!sheaf_cache_check(c))
		return;
	if (c->debug_flags || sheaf_free_check_hook ||
	    atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) == 0) {
		for (size_t i = 0; i < n; i++)
			sheaf_cache_free_slowpath(c, objs[i], NULL);
		return;
	}
	void *remote[SHEAF_PCS_BATCH];
	unsigned nremote = 0;
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	for (size_t i = 0; i < n; i++) {
		void *obj = objs[i];
		if (!obj)
			continue;
		uintptr_t key = sheaf_page_key(obj);
		if (sheaf_unlikely(!free_ptr_ok(c, obj, key, "free_bulk")))
			continue; /* reported */
		if (sheaf_unlikely(sheaf_track_obj_free(c, obj))) {
			sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
			continue;
		}
		if (c->free_mark) {
			uint64_t *mk = sheaf_mark_word(c, obj);
			if (sheaf_unlikely(*mk == sheaf_free_key)) {
				/* Maybe a double free: confirm with no lock held and with this
				 * call's earlier objects where the search can see them. */
				if (pcs)
					sheaf_pcs_unlock(c, pcs);
				if (nremote) {
					sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, nremote);
					sheaf_slab_free_bulk(c, remote, nremote);
					nremote = 0;
				}
				bool ok = sheaf_free_mark_check(c, obj);
				pcs = sheaf_pcs_lock(c);
				if (!ok)
					continue; /* reported */
			}
			*mk = sheaf_free_key;
		}
		bool local = pcs && (key == pcs->key || (!c->kernel_compat && !sheaf_g.node_has_mem[pcs->node]));
		if (local) {
			struct sheaf_sheaf *m = pcs->main;
			if (m->size >= m->capacity && !sheaf_pcs_replace_full_main(c, pcs))
				local = false;
		}
		if (local) {
			sheaf_sheaf_push(pcs->main, obj);
			sheaf_stat_add(pcs, SHEAF_STAT_FREE_FASTPATH, 1);
			continue;
		}
		remote[nremote++] = obj;
		if (nremote == SHEAF_PCS_BATCH) {
			sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, nremote);
			sheaf_slab_free_bulk(c, remote, nremote);
			nremote = 0;
		}
	}
	if (pcs)
		sheaf_pcs_unlock(c, pcs);
	if (nremote) {
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, nremote);
		sheaf_slab_free_bulk(c, remote, nremote);
	}
}

/* ---- Prefilled sheaves (K§5) ------------------------------------------------------- */

static inline struct sheaf_sheaf *to_sheaf(struct sheaf_prefilled *p) { return (struct sheaf_sheaf *)p; }

/* A sheaf lent to the program as prefilled: on c->prefilled, where the double-free
 * search finds its objects (they are free until alloc_from hands them out). */
static void prefilled_lend(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	s->flags |= SHEAF_SH_PREFILLED;
	pthread_mutex_lock(&c->prefilled_lock);
	sheaf_list_add(&s->link, &c->prefilled);
	pthread_mutex_unlock(&c->prefilled_lock);
}

static void prefilled_unlend(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	pthread_mutex_lock(&c->prefilled_lock);
	sheaf_list_del(&s->link);
	pthread_mutex_unlock(&c->prefilled_lock);
	s->flags &= ~SHEAF_SH_PREFILLED;
	sheaf_list_init(&s->link);
}

/* A live cache and a prefilled sheaf of that cache (reported otherwise: a sheaf knows
 * its cache, and one of another cache would mix their objects). */
static bool prefilled_ok(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	if (!sheaf_cache_check(c))
		return false;
	if (sheaf_unlikely(s->cache != c || !(s->flags & SHEAF_SH_PREFILLED))) {
		if (s->cache != c)
			sheaf_error(SHEAF_ERR_WRONG_SHEAF, c->name, s, "a prefilled sheaf of cache '%s'",
				    s->cache ? s->cache->name : "?");
		else
			sheaf_error(SHEAF_ERR_WRONG_SHEAF, c->name, s, "not a prefilled sheaf (returned already?)");
		return false;
	}
	return true;
}

/* Refill @s to its full capacity from slabs (K§5 step 2: not just to @n); if it still
 * holds fewer than @n objects, give everything back and fail with ENOMEM. */
static bool prefill_to_capacity(struct sheaf_cache *c, struct sheaf_sheaf *s, unsigned int n)
{
	if (s->size >= n)
		return true;
	sheaf_sheaf_refill(c, local_mem_node(c), s, NULL);
	if (s->size >= n)
		return true;
	sheaf_sheaf_flush(c, s, NULL);
	sheaf_sheaf_free(c, s);
	errno = ENOMEM;
	return false;
}

static struct sheaf_prefilled *prefill_oversize(struct sheaf_cache *c, unsigned int n)
{
	struct sheaf_sheaf *s = sheaf_sheaf_new(c, n);
	if (!s)
		return NULL;
	s->flags = SHEAF_SH_OVERSIZE;
	/* K§5: an oversize sheaf is filled straight from slabs. */
	if (!prefill_to_capacity(c, s, n))
		return NULL;
	prefilled_lend(c, s);
	sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_PREFILL_OVERSIZE, 1);
	return (struct sheaf_prefilled *)s;
}

SHEAF_API struct sheaf_prefilled *sheaf_cache_prefill(struct sheaf_cache *c, unsigned int n)
{
	if (!sheaf_cache_check(c) || !capacity_ok(c, n)) {
		errno = EINVAL;
		return NULL;
	}
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	if (cap == 0 || n > cap)
		return prefill_oversize(c, n);
	struct sheaf_sheaf *s = NULL;
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (pcs) {
		if (pcs->spare) {
			s = pcs->spare;
			pcs->spare = NULL;
			sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_PREFILL_FAST, 1);
		} else {
			struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
			s = sheaf_barn_get_full(b, 1);
			sheaf_stat_add(pcs, s ? SHEAF_STAT_BARN_GET : SHEAF_STAT_BARN_GET_FAIL, 1);
			if (!s)
				s = sheaf_barn_get_empty(b);
			sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_PREFILL_SLOW, 1);
		}
		sheaf_pcs_unlock(c, pcs);
	} else {
		sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_PREFILL_SLOW, 1);
	}
	if (s && s->capacity != cap) {
		sheaf_sheaf_flush(c, s, NULL);
		sheaf_sheaf_free(c, s);
		s = NULL;
	}
	if (!s)
		s = sheaf_sheaf_new(c, cap);
	if (!s || !prefill_to_capacity(c, s, n))
		return NULL;
	prefilled_lend(c, s);
	return (struct sheaf_prefilled *)s;
}

SHEAF_API void *sheaf_cache_alloc_from(struct sheaf_cache *c, struct sheaf_prefilled *p)
{
	struct sheaf_sheaf *s = to_sheaf(p);
	void *o;
	if (!s || !prefilled_ok(c, s))
		return NULL;
	do {
		if (s->size == 0)
			return NULL;
		o = sheaf_sheaf_pop(s);
		/* Counted like any allocation from a sheaf (K§6.1 ALLOC_FASTPATH). */
		sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_FASTPATH, 1);
		/* A debug cache's prefilled objects come straight from its slabs, still
		 * free: check and mark them as every other allocation (corrupt: leaked). */
	} while (sheaf_unlikely(c->debug_flags) &&
		 sheaf_debug_slab_alloc(c, o, __builtin_return_address(0)) != 0);
	sheaf_mark_clear(c, o);
	sheaf_track_obj_alloc(c, o); /* track.h */
	return o;
}

SHEAF_API unsigned int sheaf_prefilled_size(const struct sheaf_prefilled *p)
{
	return p ? ((const struct sheaf_sheaf *)p)->size : 0;
}

SHEAF_API void sheaf_cache_return(struct sheaf_cache *c, struct sheaf_prefilled *p)
{
	struct sheaf_sheaf *s = to_sheaf(p);
	if (!s || !prefilled_ok(c, s))
		return; /* reported; under warn the sheaf and its objects are leaked */
	prefilled_unlend(c, s);
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	if ((s->flags & SHEAF_SH_OVERSIZE) || s->capacity != cap) {
		sheaf_sheaf_flush(c, s, NULL);
		sheaf_sheaf_free(c, s);
		return;
	}
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (pcs && !pcs->spare) {
		pcs->spare = s;
		sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_RETURN_FAST, 1);
		sheaf_pcs_unlock(c, pcs);
		return;
	}
	struct sheaf_barn *b = pcs ? sheaf_pcs_barn(c, pcs) : local_mem_node(c)->barn;
	if (pcs) {
		sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_RETURN_SLOW, 1);
		sheaf_pcs_unlock(c, pcs);
	} else {
		sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_RETURN_SLOW, 1);
	}
	if (b->enabled && sheaf_rd(b->nr_full) < b->max_full) {
		sheaf_sheaf_refill(c, local_mem_node(c), s, NULL);
		if (s->size) {
			sheaf_barn_put_full(b, s);
			sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT, 1);
			return;
		}
	}
	sheaf_sheaf_flush(c, s, NULL);
	sheaf_sheaf_free(c, s);
}

SHEAF_API int sheaf_cache_refill(struct sheaf_cache *c, struct sheaf_prefilled **pp, unsigned int n)
{
	if (!pp || !*pp || !prefilled_ok(c, to_sheaf(*pp)))
		return -EINVAL;
	if (!capacity_ok(c, n))
		return -EINVAL;
	struct sheaf_sheaf *s = to_sheaf(*pp);
	if (s->size >= n)
		return 0;
	if (s->capacity >= n) {
		/* Regular sheaves refill to full capacity, oversize ones too (capacity == their
		 * original request). */
		sheaf_sheaf_refill(c, local_mem_node(c), s, NULL);
		return s->size >= n ? 0 : -ENOMEM;
	}
	struct sheaf_prefilled *np = sheaf_cache_prefill(c, n);
	if (!np)
		return -ENOMEM;
	sheaf_cache_return(c, *pp);
	*pp = np;
	return 0;
}
