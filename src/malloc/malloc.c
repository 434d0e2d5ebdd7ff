/* SPDX-License-Identifier: MIT */
/*
 * malloc.c - the malloc front end (docs/malloc.md).
 *
 * Three kinds of memory, told apart on free in this order:
 *
 *  1. Size-class objects (<= 32 KiB, sizeclass.h): one Sheaf cache per class,
 *     created on first use, so malloc and free are the caches' per-CPU sheaf
 *     fast paths (K§2.1-2.6) plus a table lookup (inline, in
 *     malloc/malloc.h).  The page map finds the owning cache of any
 *     pointer in O(1), and a pointer whose cache is not one of
 *     ours is reported, never followed.
 *  2. Extents (> 32 KiB, or alignment > 4 KiB): page-aligned anonymous
 *     mappings recorded in a sharded hash table keyed by address (no header,
 *     so a foreign pointer is never dereferenced).  Freed extents wait in a
 *     cache (64-256 MiB, in size bins; best fit, split and merged, grown
 *     with mremap) for reuse and are unmapped once they have been idle for
 *     1 s, checked by the reaper and on later large operations: prompt
 *     unmapping of large blocks is what made jemalloc and mimalloc slow on a
 *     large-allocation benchmark, keeping them forever is what users of
 *     allocators complain about most.
 *  3. Bootstrap memory: an allocation made while this thread is inside the
 *     creation of a class cache (the core's first initialisation may read
 *     /sys with stdio, which calls malloc) is served by a bump allocator over
 *     a static arena and never reused.  This is what makes early start-up and
 *     re-entry safe without dlsym (dlsym itself may allocate).
 *
 * Anything else is foreign: in libsheaf-malloc.so it may be glibc's (see
 * src/malloc/preload/preload.c), otherwise it is reported.
 *
 * Locks (none is held while calling into the core except sc_lock):
 *   sc_lock      class-cache creation; taken before the core's locks.
 *   xc.lock      the extent cache.
 *   shard locks  the extent registry, one per shard; never nested.
 * All are taken by the fork handlers in that order, so that a child never inherits a
 * lock held by a thread that did not survive the fork.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "malloc/malloc.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define PAGE 4096u
/* Requests above PTRDIFF_MAX fail as in glibc: pointer differences inside
 * the block must be representable. */
#define SIZE_LIMIT ((size_t)PTRDIFF_MAX)

static size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) & ~(a - 1);
}

__thread int *sheaf_malloc_tls_errno;

int *sheaf_malloc_errno_slow(void)
{
	return sheaf_malloc_tls_errno = &errno;
}

/* ---- Counters and error reports ---------------------------------------------- */

/* Non-zero while this thread creates a class cache (holding sc_lock) or
 * initialises the core: allocations it makes meanwhile come from the
 * bootstrap arena.  Zero-initialised TLS, so it reads 0 even before the
 * loader has copied the TLS image (malloc may run that early). */
static __thread unsigned int tls_creating;

static struct {
	_Atomic uint64_t extent_maps, extent_reuses, extent_grows, extent_merges, extent_unmaps,
		extent_remaps;
	_Atomic uint64_t boot_allocs, foreign_frees, errors;
} ctr;

#define CTR_INC(f) atomic_fetch_add_explicit(&ctr.f, 1, memory_order_relaxed)

void sheaf_malloc_counters_get(struct sheaf_malloc_counters *out)
{
	out->extent_maps = atomic_load_explicit(&ctr.extent_maps, memory_order_relaxed);
	out->extent_reuses = atomic_load_explicit(&ctr.extent_reuses, memory_order_relaxed);
	out->extent_grows = atomic_load_explicit(&ctr.extent_grows, memory_order_relaxed);
	out->extent_merges = atomic_load_explicit(&ctr.extent_merges, memory_order_relaxed);
	out->extent_unmaps = atomic_load_explicit(&ctr.extent_unmaps, memory_order_relaxed);
	out->extent_remaps = atomic_load_explicit(&ctr.extent_remaps, memory_order_relaxed);
	out->boot_allocs = atomic_load_explicit(&ctr.boot_allocs, memory_order_relaxed);
	out->foreign_frees = atomic_load_explicit(&ctr.foreign_frees, memory_order_relaxed);
	out->errors = atomic_load_explicit(&ctr.errors, memory_order_relaxed);
}

/* Report an invalid use of the malloc API through the one reporter (base/error.h):
 * "sheaf: <kind>: cache '<class cache, or malloc>' address <ptr>: <fn>: <what>".
 * Aborts unless SHEAF_ON_ERROR=warn.  Never allocates. */
static void __attribute__((cold, noinline))
report(enum sheaf_error_kind kind, const char *fn, const char *what, const void *ptr, const char *cache, size_t size)
{
	CTR_INC(errors);
	if (size != (size_t)-1)
		sheaf_error(kind, cache ? cache : "malloc", ptr, "%s: %s (size %zu)", fn, what, size);
	else
		sheaf_error(kind, cache ? cache : "malloc", ptr, "%s: %s", fn, what);
}

/* ---- Class caches -------------------------------------------------------------- */

struct sheaf_cache *_Atomic sheaf_malloc_classes[SHEAF_SC_COUNT];
struct sheaf_cache *_Atomic sheaf_malloc_small[SHEAF_SC_TABLE_MAX / 8 + 1];
static pthread_mutex_t sc_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int fork_handlers_registered;
/* The core could not start (no address space for its heap): when it last failed
 * (CLOCK_MONOTONIC ns, never 0), so the start-up is not retried on every
 * allocation; 0 while it has not failed. */
static _Atomic uint64_t core_failed;

/* Whether size-class requests skip the core.  The preload, once it has sent them to
 * glibc's allocator, stays with it; the direct API tries the start-up again a second
 * after it failed, so a process whose address-space limit was raised, or whose
 * failing mmap was transient, gets its small blocks again. */
static bool core_down(void)
{
	uint64_t t = atomic_load_explicit(&core_failed, memory_order_relaxed);
	if (sheaf_likely(t == 0))
		return false;
	return sheaf_preload_fallback_alloc || sheaf_os_now_ns() - t < 1000000000ull;
}

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

static void class_name(char *buf, size_t cap, unsigned int i)
{
	sheaf_fmt(buf, cap, "malloc-%u", (unsigned)sheaf_sc_size[i]);
}

/* Create class @i's cache; NULL if it cannot be created or if this thread is
 * already creating one (the caller then uses the bootstrap arena). */
static struct sheaf_cache *__attribute__((noinline)) class_create(unsigned int i)
{
	if (tls_creating)
		return NULL;
	int e = errno;
	pthread_mutex_lock(&sc_lock);
	struct sheaf_cache *c = atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
	if (!c) {
		char name[32];
		struct sheaf_cache_args args = {
			.align = sheaf_sc_align(i), .sheaf_capacity = 0,
			.flags = SHEAF_CACHE_MALLOC_CLASS, .ctor = NULL,
		};
		class_name(name, sizeof(name), i);
		tls_creating++;
		c = sheaf_cache_create_class(name, sheaf_sc_size[i], &args);
		tls_creating--;
		if (!c && atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) != 2)
			atomic_store_explicit(&core_failed, sheaf_os_now_ns() | 1, memory_order_relaxed);
		if (c) {
			size_t osz = sheaf_cache_object_size(c);
			/* sheaf_malloc_class_of() depends on this; the core only rounds
			 * sizes up to the alignment, which divides ours. */
			if (osz < sheaf_sc_size[i] || sheaf_sc_index(osz) != i) {
				report(SHEAF_ERR_CORRUPTION, "malloc", "class cache has an unexpected object size", c,
				       name, osz);
				c = NULL;
			} else {
				atomic_store_explicit(&core_failed, 0, memory_order_relaxed);
				atomic_store_explicit(&sheaf_malloc_classes[i], c, memory_order_release);
				for (unsigned int j = 0; j <= SHEAF_SC_TABLE_MAX / 8; j++)
					if (sheaf_sc_small[j] == i)
						atomic_store_explicit(&sheaf_malloc_small[j], c,
								      memory_order_release);
			}
		}
	}
	pthread_mutex_unlock(&sc_lock);
	if (c) {
		errno = e;
		/* After the first cache, so that the core's own handlers (set
		 * up by its initialisation) are registered first: prepare
		 * handlers run in reverse order, so ours take sc_lock before
		 * the core's locks are taken, the order class_create uses.
		 * pthread_atfork allocates: outside sc_lock. */
		if (!atomic_exchange(&fork_handlers_registered, 1))
			pthread_atfork(fork_prepare, fork_parent, fork_child);
	}
	return c;
}

/* The fork handlers must also protect the extent locks of a process that
 * has made no small allocation yet, or whose core could not start. */
static void fork_handlers_ensure(void)
{
	if (sheaf_likely(atomic_load_explicit(&fork_handlers_registered, memory_order_relaxed)) ||
	    tls_creating)
		return;
	if (!core_down()) {
		/* Start the core and register in the right order. */
		if (class_create(0) || !atomic_load_explicit(&core_failed, memory_order_relaxed))
			return;
	}
	if (!atomic_exchange(&fork_handlers_registered, 1))
		pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- Bootstrap arena ------------------------------------------------------------ */

#define BOOT_SIZE (1u << 20)
#define BOOT_HDR 16u /* keeps 16-byte alignment; holds the size */
static char boot_mem[BOOT_SIZE] __attribute__((aligned(PAGE)));
static _Atomic size_t boot_used;

static bool is_boot(const void *p)
{
	return (const char *)p >= boot_mem && (const char *)p < boot_mem + BOOT_SIZE;
}

static size_t boot_size(const void *p)
{
	return *(const size_t *)((const char *)p - BOOT_HDR);
}

static void *large_alloc(size_t n, size_t align, bool zero);

/* Bump allocation, lock-free; the memory is never reused (it is a few KiB
 * for the core's start-up).  When the arena is exhausted, extents. */
static void *boot_alloc(size_t n, size_t align)
{
	if (align < BOOT_HDR)
		align = BOOT_HDR;
	if (n <= BOOT_SIZE && align <= PAGE) {
		size_t old = atomic_load_explicit(&boot_used, memory_order_relaxed);
		for (;;) {
			size_t start = round_up(old + BOOT_HDR, align);
			size_t end = round_up(start + n, BOOT_HDR);
			if (end > BOOT_SIZE)
				break;
			if (atomic_compare_exchange_weak(&boot_used, &old, end)) {
				*(size_t *)(boot_mem + start - BOOT_HDR) = n;
				CTR_INC(boot_allocs);
				return boot_mem + start;
			}
		}
	}
	return large_alloc(n ? n : 1, align, false);
}

/* ---- Extent registry -------------------------------------------------------------- */

#define EXT_SHARDS 16u
#define EXT_EMPTY 0u
#define EXT_DEAD 1u

struct ext_slot {
	uintptr_t addr; /* EXT_EMPTY, EXT_DEAD or the extent's address */
	size_t len;     /* mapped bytes, a multiple of PAGE */
};

struct ext_shard {
	pthread_mutex_t lock;
	struct ext_slot *tab; /* mmap'd, cap slots; protected by lock */
	size_t cap, live, dead;
} __attribute__((aligned(64)));

static struct ext_shard ext_shards[EXT_SHARDS] = {
	[0 ... EXT_SHARDS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER },
};

static uint64_t ext_hash(uintptr_t a)
{
	return (uint64_t)(a >> 12) * 0x9e3779b97f4a7c15ull;
}

static struct ext_shard *ext_shard_of(uint64_t h)
{
	return &ext_shards[h >> 60];
}

/* Find @a's slot, or the empty slot that ends its probe sequence. */
static struct ext_slot *ext_find_locked(struct ext_shard *s, uintptr_t a, uint64_t h)
{
	size_t mask = s->cap - 1;
	for (size_t i = (h >> 16) & mask;; i = (i + 1) & mask) {
		struct ext_slot *e = &s->tab[i];
		if (e->addr == a || e->addr == EXT_EMPTY)
			return e;
	}
}

/* Rebuild the table so that one more insertion keeps it at most 3/4 full,
 * tombstones included.  The table lives in its own mapping: the registry
 * must not depend on malloc. */
static bool ext_grow_locked(struct ext_shard *s)
{
	size_t cap = s->cap ? s->cap : 256;
	while ((s->live + 1) * 2 > cap)
		cap *= 2;
	struct ext_slot *t = sheaf_os_map(cap * sizeof(*t));
	if (!t)
		return false;
	struct ext_slot *old = s->tab;
	size_t oldcap = s->cap;
	s->tab = t;
	s->cap = cap;
	s->dead = 0;
	for (size_t i = 0; i < oldcap; i++) {
		if (old[i].addr > EXT_DEAD)
			*ext_find_locked(s, old[i].addr, ext_hash(old[i].addr)) = old[i];
	}
	if (old)
		(void)sheaf_os_unmap(old, oldcap * sizeof(*old)); /* reported if it fails */
	return true;
}

/* Bytes of live extents (registered, not cached): the extent cache's bound
 * grows with them (xc_bound). */
static _Atomic size_t ext_live_bytes;

static size_t xc_bound(void);
static bool ext_insert(void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p;
	uint64_t h = ext_hash(a);
	struct ext_shard *s = ext_shard_of(h);
	bool ok = true;
	pthread_mutex_lock(&s->lock);
	/* Growing fails only when no memory is left; the table then fills
	 * further, as long as an empty slot remains to end every probe. */
	if ((s->live + s->dead + 1) * 4 > s->cap * 3 && !ext_grow_locked(s))
		ok = s->live + s->dead + 2 <= s->cap;
	if (ok) {
		/* @a is not in the table (it is a live mapping of ours): take
		 * the first tombstone on its probe sequence, else the empty
		 * slot that ends it. */
		size_t mask = s->cap - 1;
		struct ext_slot *e;
		for (size_t i = (h >> 16) & mask;; i = (i + 1) & mask) {
			e = &s->tab[i];
			if (e->addr == EXT_DEAD) {
				s->dead--;
				break;
			}
			if (e->addr == EXT_EMPTY)
				break;
		}
		e->addr = a;
		e->len = len;
		s->live++;
		atomic_fetch_add_explicit(&ext_live_bytes, len, memory_order_relaxed);
	}
	pthread_mutex_unlock(&s->lock);
	return ok;
}

/* Length of the extent at @p, 0 if @p is not an extent's address.  With
 * @remove, it stops being one (so a second free of it is detected). */
static size_t ext_lookup(const void *p, bool remove)
{
	uintptr_t a = (uintptr_t)p;
	uint64_t h = ext_hash(a);
	struct ext_shard *s = ext_shard_of(h);
	size_t len = 0;
	pthread_mutex_lock(&s->lock);
	if (s->cap) {
		struct ext_slot *e = ext_find_locked(s, a, h);
		if (e->addr == a) {
			len = e->len;
			if (remove) {
				atomic_fetch_sub_explicit(&ext_live_bytes, len, memory_order_relaxed);
				e->addr = EXT_DEAD;
				s->live--;
				s->dead++;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
	return len;
}

/* The extent at @p (registered) now has @len bytes. */
static void ext_set_len(const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p;
	uint64_t h = ext_hash(a);
	struct ext_shard *s = ext_shard_of(h);
	pthread_mutex_lock(&s->lock);
	struct ext_slot *e = ext_find_locked(s, a, h);
	if (e->addr == a)
		e->len = len;
	pthread_mutex_unlock(&s->lock);
}

/* Extents the program holds: how many and their mapped bytes (mallinfo's hblks and
 * hblkhd).  Walks every shard's table under its lock: for introspection only. */
void sheaf_malloc_extent_live_stat(size_t *count, size_t *bytes)
{
	*count = *bytes = 0;
	for (unsigned int i = 0; i < EXT_SHARDS; i++) {
		struct ext_shard *s = &ext_shards[i];
		pthread_mutex_lock(&s->lock);
		for (size_t k = 0; k < s->cap; k++)
			if (s->tab[k].addr > EXT_DEAD)
				*bytes += s->tab[k].len;
		*count += s->live;
		pthread_mutex_unlock(&s->lock);
	}
}

/* ---- Extent cache ------------------------------------------------------------------ */

/* Extent lengths are whole pages up to 16 KiB, then four steps per power of
 * two up to SHEAF_MALLOC_EXTENT_CACHE_ONE, like the classes (at most 25 %
 * more address space; pages never touched cost nothing).  Freed extents
 * then fit later requests of nearby sizes: with page-exact lengths a cache
 * of random sizes turns over through mmap and munmap, and each munmap of a
 * multi-threaded process is a TLB shootdown on every CPU it runs on. */
#define XC_BINS 48u /* 4 page bins, then 4 per doubling from 16 KiB to 32 MiB */

static size_t extent_len(size_t n)
{
	size_t len = round_up(n, PAGE);
	if (len <= 4 * PAGE || len > SHEAF_MALLOC_EXTENT_CACHE_ONE)
		return len;
	unsigned int k = 63u - (unsigned int)__builtin_clzll((unsigned long long)(len - 1));
	return round_up(len, (size_t)1 << (k - 2));
}

/* Bin of an extent length produced by extent_len() (<= the cached maximum). */
static unsigned int xc_bin(size_t len)
{
	if (len <= 4 * PAGE)
		return (unsigned int)(len / PAGE) - 1;
	unsigned int k = 63u - (unsigned int)__builtin_clzll((unsigned long long)(len - 1));
	unsigned int s = (unsigned int)((len - 1) >> (k - 2)) - 4u;
	return 4u + (k - 14u) * 4u + s;
}

/* A cached extent describes itself in its first bytes: it is ours, mapped,
 * and nothing else uses it, so the cache needs no memory of its own and no
 * bound on the number of entries, only on bytes. */
struct xc_node {
	struct xc_node *bin_next, *bin_prev; /* its size bin, most recent first */
	struct xc_node *lru_next, *lru_prev; /* all cached extents, most recent first */
	size_t len;
	uint64_t freed_ns;
};

/* An entry of the cache's address table: a cached extent under its start
 * address, and under its end address with the low bit set, so that a freed
 * extent finds the cached neighbours it can be merged with in O(1). */
struct xc_key {
	uintptr_t key; /* 0: empty */
	struct xc_node *node;
};

/* Protected by lock.  Circular lists with the heads as sentinels. */
static struct {
	pthread_mutex_t lock;
	size_t count, bytes;
	struct xc_node lru;
	struct xc_node bin[XC_BINS];
	struct xc_key *tab; /* linear probing, in its own mapping; cap a power of two */
	size_t cap, used;
} xc = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t now_ns(void)
{
	struct timespec ts;
	/* The coarse clock is a vDSO read; a few ms of resolution is plenty
	 * for a 1 s delay. */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void xc_init_locked(void)
{
	if (xc.lru.lru_next)
		return;
	xc.lru.lru_next = xc.lru.lru_prev = &xc.lru;
	for (unsigned int i = 0; i < XC_BINS; i++)
		xc.bin[i].bin_next = xc.bin[i].bin_prev = &xc.bin[i];
	/* From the first cached extent on, the reaper ages the cache too (its hook). */
	__atomic_store_n(&sheaf_cache_hooks.extent_cache_age, sheaf_malloc_extent_cache_age, __ATOMIC_RELEASE);
}

static size_t xc_home(uintptr_t key)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (xc.cap - 1);
}

static struct xc_key *xc_tab_find_locked(uintptr_t key)
{
	if (!xc.cap)
		return NULL;
	for (size_t i = xc_home(key);; i = (i + 1) & (xc.cap - 1)) {
		if (xc.tab[i].key == key)
			return &xc.tab[i];
		if (xc.tab[i].key == 0)
			return NULL;
	}
}

static void xc_tab_put_locked(uintptr_t key, struct xc_node *x)
{
	size_t i = xc_home(key);
	while (xc.tab[i].key != 0)
		i = (i + 1) & (xc.cap - 1);
	xc.tab[i].key = key;
	xc.tab[i].node = x;
	xc.used++;
}

/* Room for two more keys at most half full; false when no memory is left
 * for a larger table (the extent is then not cached). */
static bool xc_tab_reserve_locked(void)
{
	if ((xc.used + 2) * 2 <= xc.cap)
		return true;
	size_t cap = xc.cap ? xc.cap : 256;
	while ((xc.used + 2) * 2 > cap)
		cap *= 2;
	struct xc_key *t = sheaf_os_map(cap * sizeof(*t));
	if (!t)
		return false;
	struct xc_key *old = xc.tab;
	size_t oldcap = xc.cap;
	xc.tab = t;
	xc.cap = cap;
	xc.used = 0;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].key)
			xc_tab_put_locked(old[i].key, old[i].node);
	if (old)
		(void)sheaf_os_unmap(old, oldcap * sizeof(*old)); /* reported if it fails */
	return true;
}

/* Remove @key (present): backward-shift deletion keeps every probe sequence
 * unbroken without tombstones. */
static void xc_tab_del_locked(uintptr_t key)
{
	size_t mask = xc.cap - 1, i = (size_t)(xc_tab_find_locked(key) - xc.tab);
	for (size_t j = (i + 1) & mask; xc.tab[j].key != 0; j = (j + 1) & mask) {
		size_t h = xc_home(xc.tab[j].key);
		/* Entry j may move to the hole at i unless its home lies
		 * cyclically in (i, j]. */
		bool stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
		if (!stays) {
			xc.tab[i] = xc.tab[j];
			i = j;
		}
	}
	xc.tab[i].key = 0;
	xc.used--;
}

static void xc_unlink_locked(struct xc_node *x)
{
	x->bin_prev->bin_next = x->bin_next;
	x->bin_next->bin_prev = x->bin_prev;
	x->lru_prev->lru_next = x->lru_next;
	x->lru_next->lru_prev = x->lru_prev;
	xc.count--;
	xc.bytes -= x->len;
	xc_tab_del_locked((uintptr_t)x);
	xc_tab_del_locked(((uintptr_t)x + x->len) | 1u);
}

/* The cache's bound in bytes: SHEAF_MALLOC_EXTENT_CACHE_BYTES, or as much as
 * the live extents take (up to SHEAF_MALLOC_EXTENT_CACHE_MAX): a working set
 * of large blocks replaced one at a time needs a cache of about the blocks
 * in flight, and splitting and merging need room beyond that. */
static size_t xc_bound(void)
{
	size_t live = atomic_load_explicit(&ext_live_bytes, memory_order_relaxed);
	if (live < SHEAF_MALLOC_EXTENT_CACHE_BYTES)
		return SHEAF_MALLOC_EXTENT_CACHE_BYTES;
	return live < SHEAF_MALLOC_EXTENT_CACHE_MAX ? live : SHEAF_MALLOC_EXTENT_CACHE_MAX;
}

/* Take out the oldest entries while they have been idle for the delay, or
 * while adding @add bytes would exceed the bound (or all, with @all); they
 * are chained through bin_next for xc_unmap() after the lock is dropped. */
static struct xc_node *xc_evict_locked(uint64_t now, size_t add, bool all)
{
	struct xc_node *victims = NULL;
	while (xc.count) {
		struct xc_node *old = xc.lru.lru_prev;
		if (!all && now - old->freed_ns < SHEAF_MALLOC_EXTENT_DELAY_NS &&
		    xc.bytes + add <= xc_bound())
			break;
		xc_unlink_locked(old);
		old->bin_next = victims;
		victims = old;
	}
	return victims;
}

static void xc_unmap(struct xc_node *v)
{
	while (v) {
		struct xc_node *next = v->bin_next;
		/* A failure is reported (os.c); the extent then stays mapped, unused. */
		(void)sheaf_os_unmap(v, v->len);
		CTR_INC(extent_unmaps);
		v = next;
	}
}

static bool address_space_limited(void)
{
	struct rlimit r;
	return getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
}

/* Bin of any cached length (a whole number of pages up to the cached
 * maximum): that of the largest extent_len() class not above it, so every
 * extent in bin xc_bin(len) or above holds a request of extent_len() = len.
 * Split remainders and extents shrunk by realloc have such lengths. */
static unsigned int xc_bin_floor(size_t len)
{
	if (len <= 4 * PAGE)
		return (unsigned int)(len / PAGE) - 1;
	unsigned int k = 63u - (unsigned int)__builtin_clzll((unsigned long long)len);
	size_t cls = ((size_t)1 << k) + (((len >> (k - 2)) & 3u) << (k - 2));
	return xc_bin(cls);
}

/* Smallest remainder worth keeping when a cached extent is split: below
 * it the whole extent is handed out (a few pages more address space). */
#define XC_SPLIT_MIN (64u << 10)
/* When nothing cached is large enough for a request, a smaller extent from
 * one of the XC_GROW_BINS bins below the request's (two doublings: at
 * least a quarter of it) is grown with mremap: its resident pages move
 * without copying and only the difference is faulted in. */
#define XC_GROW_BINS 8u

static void xc_link_bin_locked(struct xc_node *x)
{
	struct xc_node *bin = &xc.bin[xc_bin_floor(x->len)];
	x->bin_next = bin->bin_next;
	x->bin_prev = bin;
	bin->bin_next->bin_prev = x;
	bin->bin_next = x;
}

/* The first extent of bin @i (most recently freed first) of at least @min
 * bytes aligned to @align, or NULL; a few entries are looked at, not the
 * whole bin. */
static struct xc_node *xc_bin_first_locked(unsigned int i, size_t min, size_t align)
{
	unsigned int seen = 0;
	for (struct xc_node *x = xc.bin[i].bin_next; x != &xc.bin[i] && seen < 8;
	     x = x->bin_next, seen++)
		if (x->len >= min && ((uintptr_t)x & (align - 1)) == 0)
			return x;
	return NULL;
}

/* A cached extent for a request of @need (whole pages) bytes aligned to
 * @align: best fit by bins (the smallest bin that holds one, the most
 * recently freed extent in it, so its pages are the likeliest to be
 * resident), its tail split off and kept when at least XC_SPLIT_MIN.  The
 * split is at @need, not at the request's extent_len(): pages of the
 * rounding would be resident garbage in a reused extent.  Its length is
 * returned in *@got.  When no cached extent is large enough, *@grow is set
 * and the largest one of at least about a quarter of @need is returned
 * instead (its length in *@got), for the caller to grow with mremap; NULL
 * if there is none either. */
static void *xc_take(size_t need, size_t align, size_t *got, bool *grow)
{
	*grow = false;
	if (need > SHEAF_MALLOC_EXTENT_CACHE_ONE)
		return NULL;
	struct xc_node *found = NULL;
	unsigned int b = xc_bin_floor(need);
	pthread_mutex_lock(&xc.lock);
	xc_init_locked();
	struct xc_node *victims = xc_evict_locked(now_ns(), 0, false);
	for (unsigned int i = b; i < XC_BINS && !found && xc.count; i++)
		found = xc_bin_first_locked(i, need, align);
	if (found) {
		xc_unlink_locked(found);
		*got = found->len;
		/* Unlinking freed two keys: the remainder's two always fit. */
		if (found->len - need >= XC_SPLIT_MIN) {
			/* The remainder keeps the extent's age and place in the LRU
			 * (found's links are still intact: unlinking only
			 * repointed its neighbours). */
			struct xc_node *r = (struct xc_node *)((char *)found + need);
			r->len = found->len - need;
			r->freed_ns = found->freed_ns;
			r->lru_next = found->lru_next;
			r->lru_prev = found->lru_prev;
			r->lru_next->lru_prev = r;
			r->lru_prev->lru_next = r;
			xc_link_bin_locked(r);
			xc.count++;
			xc.bytes += r->len;
			xc_tab_put_locked((uintptr_t)r, r);
			xc_tab_put_locked(((uintptr_t)r + r->len) | 1u, r);
			*got = need;
		}
	} else if (align <= PAGE && xc.count) {
		/* mremap gives page alignment only. */
		for (unsigned int i = b + 1; i-- > 0 && i + XC_GROW_BINS >= b && !found;)
			found = xc_bin_first_locked(i, PAGE, PAGE);
		if (found) {
			xc_unlink_locked(found);
			*got = found->len;
			*grow = true;
		}
	}
	pthread_mutex_unlock(&xc.lock);
	xc_unmap(victims);
	return found;
}

/* Keep a freed extent for reuse, merged with the cached extents right
 * before and after it (a split extent becomes whole again when its head
 * comes back), giving back the oldest ones (or any idle for the delay) to
 * stay within the byte bound. */
static void xc_put(void *p, size_t len)
{
	/* Where address space is limited (RLIMIT_AS), a cached extent would
	 * hold address space the program may need: it goes back at once. */
	if (len > SHEAF_MALLOC_EXTENT_CACHE_ONE || address_space_limited()) {
		(void)sheaf_os_unmap(p, len);
		CTR_INC(extent_unmaps);
		return;
	}
	struct xc_node *x = p;
	uint64_t now = now_ns();
	pthread_mutex_lock(&xc.lock);
	xc_init_locked();
	if (!xc_tab_reserve_locked()) {
		pthread_mutex_unlock(&xc.lock);
		(void)sheaf_os_unmap(p, len);
		CTR_INC(extent_unmaps);
		return;
	}
	/* Merge while the result stays cacheable.  Neighbours may lie in other
	 * mappings (the kernel places mappings next to each other): munmap
	 * works across them, and mremap, which does not, falls back (see
	 * large_alloc and extent_resize). */
	struct xc_key *k = xc_tab_find_locked(((uintptr_t)x + len));
	if (k && len + k->node->len <= SHEAF_MALLOC_EXTENT_CACHE_ONE) {
		struct xc_node *next = k->node;
		xc_unlink_locked(next);
		len += next->len;
		CTR_INC(extent_merges);
	}
	k = xc_tab_find_locked((uintptr_t)x | 1u);
	if (k && len + k->node->len <= SHEAF_MALLOC_EXTENT_CACHE_ONE) {
		struct xc_node *prev = k->node;
		xc_unlink_locked(prev);
		len += prev->len;
		x = prev;
		CTR_INC(extent_merges);
	}
	x->len = len;
	x->freed_ns = now;
	struct xc_node *victims = xc_evict_locked(now, len, false);
	xc_link_bin_locked(x);
	x->lru_next = xc.lru.lru_next;
	x->lru_prev = &xc.lru;
	xc.lru.lru_next->lru_prev = x;
	xc.lru.lru_next = x;
	xc.count++;
	xc.bytes += len;
	xc_tab_put_locked((uintptr_t)x, x);
	xc_tab_put_locked(((uintptr_t)x + len) | 1u, x);
	size_t cached = xc.bytes;
	pthread_mutex_unlock(&xc.lock);
	xc_unmap(victims);
	/* A program of large blocks only may never grow Sheaf's heap to the
	 * reaper's threshold: start it for the cached extents too, so that they
	 * still go back after the delay when the program goes idle.  No lock
	 * of ours is held here. */
	if (sheaf_unlikely(cached >= SHEAF_REAP_MALLOC_START) &&
	    !atomic_load_explicit(&sheaf_reaper_kicked, memory_order_relaxed) && !tls_creating)
		sheaf_reaper_kick();
}

void sheaf_malloc_extent_cache_drain(void)
{
	pthread_mutex_lock(&xc.lock);
	struct xc_node *victims = xc_evict_locked(0, 0, true);
	pthread_mutex_unlock(&xc.lock);
	xc_unmap(victims);
}

/* The reaper's tick (reaper.c): extents idle for the delay go back even when no
 * later extent operation would have noticed. */
void sheaf_malloc_extent_cache_age(void)
{
	pthread_mutex_lock(&xc.lock);
	struct xc_node *victims = xc.lru.lru_next ? xc_evict_locked(now_ns(), 0, false) : NULL;
	pthread_mutex_unlock(&xc.lock);
	xc_unmap(victims);
}

void sheaf_malloc_extent_cache_stat(size_t *count, size_t *bytes)
{
	pthread_mutex_lock(&xc.lock);
	*count = xc.count;
	*bytes = xc.bytes;
	pthread_mutex_unlock(&xc.lock);
}

/* ---- Extents --------------------------------------------------------------------- */

/* Map @len bytes aligned to @align (a power of two >= PAGE): over-map by
 * align - PAGE and trim both ends. */
static void *map_aligned(size_t len, size_t align)
{
	size_t extra = align - PAGE;
	if (len > SIZE_LIMIT - extra)
		return NULL;
	char *m = sheaf_sys_mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	if (m == MAP_FAILED)
		return NULL;
	char *p = (char *)round_up((uintptr_t)m, align);
	/* A trim that fails (reported) leaves address space mapped beside the extent,
	 * never the extent itself. */
	if (p > m)
		(void)sheaf_os_unmap(m, (size_t)(p - m));
	if ((size_t)(p - m) < extra)
		(void)sheaf_os_unmap(p + len, extra - (size_t)(p - m));
	return p;
}

static void *large_alloc(size_t n, size_t align, bool zero)
{
	if (unlikely(n > SIZE_LIMIT - PAGE)) {
		errno = ENOMEM;
		return NULL;
	}
	fork_handlers_ensure();
	size_t len = extent_len(n), need = round_up(n, PAGE), got = 0;
	if (align < PAGE)
		align = PAGE;
	bool grow;
	void *p = xc_take(need, align, &got, &grow);
	if (p && grow) {
		/* Grow a smaller cached extent: its resident pages move with it.
		 * (Extents merged in the cache across mappings cannot be grown:
		 * it is then put back, and a fresh mapping is made.) */
		len = need;
		void *q = sheaf_sys_mremap(p, got, len, MREMAP_MAYMOVE, NULL);
		if (q == MAP_FAILED) {
			xc_put(p, got);
			p = NULL;
		} else {
			CTR_INC(extent_grows);
			if (zero)
				memset(q, 0, got < n ? got : n); /* the new part is zero */
			p = q;
		}
	} else if (p) {
		CTR_INC(extent_reuses);
		if (zero)
			memset(p, 0, n); /* fresh mappings are zero already */
		len = got;
	}
	if (!p) {
		/* The rounding to a size step costs address space, not memory: where
		 * address space is limited (RLIMIT_AS, checked at each mapping because a
		 * program may set it at any time) or runs out, do without it, as glibc
		 * does.  Such an extent is not cached when freed (xc_put): its address
		 * space goes back at once. */
		size_t exact = round_up(n, PAGE);
		if (exact < len && address_space_limited())
			len = exact;
		p = map_aligned(len, align);
		if (!p && exact < len) {
			len = exact;
			p = map_aligned(len, align);
		}
		if (!p) {
			errno = ENOMEM;
			return NULL;
		}
		CTR_INC(extent_maps);
	}
	if (unlikely(!ext_insert(p, len))) {
		(void)sheaf_os_unmap(p, len);
		errno = ENOMEM;
		return NULL;
	}
	return p;
}

/* realloc of an extent of @len bytes at @p to @n > SHEAF_SC_MAX bytes:
 * shrink in place (the tail goes back at once: it is a realloc the program
 * asked for, not a free), grow with mremap, which moves the pages without
 * copying them. */
static void *extent_resize(void *p, size_t len, size_t n)
{
	if (unlikely(n > SIZE_LIMIT - PAGE)) {
		errno = ENOMEM;
		return NULL;
	}
	size_t nlen = extent_len(n);
	if (nlen == len)
		return p;
	/* In place first: a shrink always is, a growth when the pages after it are free.
	 * Nobody else may use @p meanwhile (it is being reallocated). */
	if (sheaf_sys_mremap(p, len, nlen, 0, NULL) != MAP_FAILED) {
		ext_set_len(p, nlen);
		CTR_INC(extent_remaps);
		return p;
	}
	if (nlen < len) {
		errno = ENOMEM;
		return NULL;
	}
	/* Moving: the destination is mapped and registered first, so that every step that
	 * can fail comes before the block moves, and a failure leaves it where it was
	 * (realloc's contract); then mremap moves the pages over our own mapping. */
	void *q = sheaf_sys_mmap(NULL, nlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	if (q == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	if (unlikely(!ext_insert(q, nlen))) {
		(void)sheaf_os_unmap(q, nlen);
		errno = ENOMEM;
		return NULL;
	}
	if (sheaf_sys_mremap(p, len, nlen, MREMAP_MAYMOVE | MREMAP_FIXED, q) == MAP_FAILED) {
		/* An extent merged in the cache from neighbouring mappings may
		 * span several of the kernel's mappings, which mremap cannot move
		 * (EFAULT): copy it instead. */
		memcpy(q, p, len);
		ext_lookup(p, true);
		xc_put(p, len);
		return q;
	}
	ext_lookup(p, true);
	CTR_INC(extent_remaps);
	return q;
}

/* ---- Foreign pointers ------------------------------------------------------------- */

/* Free of a pointer that is no size-class object: an extent, bootstrap memory,
 * glibc's memory (preload only) or an error. */
void sheaf_malloc_free_slow(void *p, struct sheaf_cache *c, const char *fn)
{
	if (c) {
		report(SHEAF_ERR_WRONG_CACHE, fn, "pointer of a cache that is not malloc's", p, sheaf_cache_name(c),
		       (size_t)-1);
		return;
	}
	if (is_boot(p))
		return; /* bootstrap memory is never reused */
	size_t len = ext_lookup(p, true);
	if (len) {
		xc_put(p, len);
		return;
	}
	if (sheaf_preload_foreign_size && sheaf_preload_foreign_size(p)) {
		CTR_INC(foreign_frees);
		sheaf_preload_foreign_free(p);
		return;
	}
	report(SHEAF_ERR_INVALID_POINTER, fn, "not allocated by sheaf_malloc, or a large block freed twice", p, NULL,
	       (size_t)-1);
}

/* ---- The API ---------------------------------------------------------------------- */

/* No class cache for a request: re-entry while creating one (bootstrap
 * arena), the core could not start (in the preload: glibc's allocator, see
 * sheaf_preload_fallback_alloc), or no memory. */
static void *__attribute__((noinline)) no_class(size_t n, size_t align)
{
	if (tls_creating)
		return boot_alloc(n, align);
	if (atomic_load_explicit(&core_failed, memory_order_relaxed) && sheaf_preload_fallback_alloc) {
		fork_handlers_ensure();
		return sheaf_preload_fallback_alloc(n, align);
	}
	errno = ENOMEM;
	return NULL;
}

/* Slow path of sheaf_malloc_inline(): the class has no cache yet, or the
 * request is an extent. */
void *sheaf_malloc_slow(size_t n)
{
	if (n > SHEAF_SC_MAX)
		return large_alloc(n, 0, false);
	unsigned int i = sheaf_sc_index(n);
	struct sheaf_cache *c = core_down() ? NULL : class_create(i);
	if (!c)
		return no_class(n, 0);
	return sheaf_cache_alloc(c);
}

void *sheaf_malloc(size_t n)
{
	return sheaf_malloc_inline(n);
}

void sheaf_free_slowpath(void *p)
{
	if (sheaf_unlikely(p == NULL))
		return;
	/* The reaper starts here, where no lock of ours is held, once the heap
	 * is big enough (cache/cache.h, reaper.c). */
	if (sheaf_unlikely(sheaf_reaper_wanted_by_malloc()) && !tls_creating)
		sheaf_reaper_kick();
	int *ep = sheaf_malloc_errno_ptr();
	int e = *ep;
	/* The fast path's test (node->malloc_cache), with the owner kept for errors. */
	uintptr_t k = sheaf_page_key(p);
	struct sheaf_node *n = (struct sheaf_node *)k;
	if (sheaf_likely(n != NULL) && sheaf_likely(n->malloc_cache != NULL))
		sheaf_cache_free(n->malloc_cache, p);
	else
		sheaf_malloc_free_slow(p, n ? n->cache : NULL, "free");
	*ep = e;
}

void sheaf_free(void *p)
{
	sheaf_free_inline(p);
}

void *sheaf_calloc(size_t nmemb, size_t size)
{
	size_t n;
	if (unlikely(__builtin_mul_overflow(nmemb, size, &n))) {
		errno = ENOMEM;
		return NULL;
	}
	if (n > SHEAF_SC_MAX)
		return large_alloc(n, 0, true);
	void *p = sheaf_malloc(n);
	if (likely(p != NULL))
		memset(p, 0, n);
	return p;
}

/* A class object @p of @c that the program may use: the start of an object (the
 * slab geometry) and not free (its mark, confirmed).  Reported otherwise. */
static bool class_ptr_ok(struct sheaf_cache *c, const void *p, const char *fn)
{
	if (unlikely(c->free_checks && !sheaf_obj_is_start(c, p))) {
		report(SHEAF_ERR_INTERIOR, fn, "not the start of an allocated block", p, c->name, (size_t)-1);
		return false;
	}
	if (c->free_mark && unlikely(*sheaf_mark_word(c, p) == sheaf_free_key)) {
		CTR_INC(errors);
		return sheaf_free_mark_check(c, p);
	}
	/* ASan builds track freed objects themselves instead of the mark (slab/track.h). */
	if (SHEAF_TRACK_ASAN && sheaf_track_cache(c) && sheaf_track_asan_ok(c) &&
	    unlikely(sheaf_track_is_poisoned(p))) {
		report(SHEAF_ERR_DOUBLE_FREE, fn, "the block is already free", p, c->name, (size_t)-1);
		return false;
	}
	return true;
}

/* The usable size of @p, 0 if it is not ours (reported unless glibc's). */
static size_t usable_size(const void *p, const char *fn)
{
	struct sheaf_cache *c = sheaf_malloc_cache_of(p);
	if (likely(c != NULL)) {
		if (likely(sheaf_malloc_class_of(c) >= 0))
			return class_ptr_ok(c, p, fn) ? sheaf_cache_object_size(c) : 0;
		report(SHEAF_ERR_WRONG_CACHE, fn, "pointer of a cache that is not malloc's", p, sheaf_cache_name(c),
		       (size_t)-1);
		return 0;
	}
	size_t len = ext_lookup(p, false);
	if (len)
		return len;
	if (is_boot(p))
		return boot_size(p);
	if (sheaf_preload_foreign_size && (len = sheaf_preload_foreign_size(p)) != 0)
		return len;
	report(SHEAF_ERR_INVALID_POINTER, fn, "not allocated by sheaf_malloc", p, NULL, (size_t)-1);
	return 0;
}

size_t sheaf_usable_size(const void *p)
{
	return p ? usable_size(p, "malloc_usable_size") : 0;
}

void *sheaf_realloc(void *p, size_t n)
{
	if (!p)
		return sheaf_malloc(n);
	if (n == 0) {
		/* glibc's choice, which Linux programs expect: free and
		 * return NULL (C17 leaves it implementation-defined). */
		sheaf_free(p);
		return NULL;
	}
	struct sheaf_cache *c = sheaf_malloc_cache_of(p);
	size_t cur;
	if (likely(c != NULL)) {
		int i = sheaf_malloc_class_of(c);
		if (unlikely(i < 0)) {
			report(SHEAF_ERR_WRONG_CACHE, "realloc", "pointer of a cache that is not malloc's", p,
			       sheaf_cache_name(c), (size_t)-1);
			errno = EINVAL;
			return NULL;
		}
		if (unlikely(!class_ptr_ok(c, p, "realloc"))) {
			errno = EINVAL; /* reported; under warn the block is left alone */
			return NULL;
		}
		/* Same class: nothing to do, growing or shrinking. */
		if (n <= SHEAF_SC_MAX && sheaf_sc_index(n) == (unsigned int)i)
			return p;
		cur = sheaf_cache_object_size(c);
	} else {
		size_t len = ext_lookup(p, false);
		if (len) {
			if (n > SHEAF_SC_MAX)
				return extent_resize(p, len, n);
			cur = len; /* shrinking below the extent threshold: move */
		} else {
			cur = usable_size(p, "realloc");
			if (!cur) {
				errno = EINVAL;
				return NULL;
			}
		}
	}
	void *q = sheaf_malloc(n);
	if (unlikely(!q)) {
		/* A shrink that cannot move keeps the old block. */
		return n <= cur ? p : NULL;
	}
	memcpy(q, p, n < cur ? n : cur);
	sheaf_free(p);
	return q;
}

/* Class @i reached from class @from by the aligned-allocation search for
 * some alignment, i.e. no class in [from, i) is aligned as much as @i. */
static bool align_reachable(unsigned int from, unsigned int i)
{
	for (unsigned int j = from; j < i; j++)
		if (sheaf_sc_align(j) >= sheaf_sc_align(i))
			return false;
	return true;
}

void *sheaf_aligned_alloc(size_t align, size_t n)
{
	if (unlikely(align == 0 || (align & (align - 1)) != 0)) {
		errno = EINVAL;
		return NULL;
	}
	if (align <= SHEAF_SC_ALIGN_MAX && n <= SHEAF_SC_MAX) {
		/* The smallest class that holds n and whose objects are all
		 * aligned to align; the 32 KiB class is 4 KiB-aligned, so the
		 * search always ends. */
		unsigned int i = sheaf_sc_index(n);
		while (sheaf_sc_align(i) < align)
			i++;
		struct sheaf_cache *c = atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
		if (unlikely(!c)) {
			c = core_down() ? NULL : class_create(i);
			if (!c)
				return no_class(n, align);
		}
		return sheaf_cache_alloc(c);
	}
	return large_alloc(n ? n : 1, align, false);
}

void sheaf_free_sized(void *p, size_t size)
{
	if (unlikely(!p))
		return;
	int *ep = sheaf_malloc_errno_ptr();
	int e = *ep;
	struct sheaf_cache *c = sheaf_malloc_cache_of(p);
	int i;
	if (likely(c != NULL) && likely((i = sheaf_malloc_class_of(c)) >= 0)) {
		/* Valid sizes: those whose class is i, and those from which an
		 * aligned allocation reaches class i. */
		if (likely(size <= SHEAF_SC_MAX && sheaf_sc_index(size) == (unsigned int)i) ||
		    (size <= sheaf_sc_size[i] && align_reachable(sheaf_sc_index(size), (unsigned int)i)))
			sheaf_cache_free(c, p);
		else if (class_ptr_ok(c, p, "sheaf_free_sized"))
			report(SHEAF_ERR_SIZE_MISMATCH, "sheaf_free_sized", "size does not match the allocation", p,
			       sheaf_cache_name(c), size);
	} else if (!c && !is_boot(p)) {
		size_t len = ext_lookup(p, false);
		if (len && size > len)
			report(SHEAF_ERR_SIZE_MISMATCH, "sheaf_free_sized", "size does not match the allocation", p,
			       NULL, size);
		else
			sheaf_malloc_free_slow(p, c, "sheaf_free_sized");
	} else {
		sheaf_malloc_free_slow(p, c, "sheaf_free_sized");
	}
	*ep = e;
}

/* ---- POSIX and glibc conventions (malloc/malloc.h) -------------------------------- */

int sheaf_malloc_trim(void)
{
	size_t count, bytes;
	sheaf_malloc_extent_cache_stat(&count, &bytes);
	sheaf_malloc_extent_cache_drain();
	for (unsigned int i = 0; i < SHEAF_SC_COUNT; i++) {
		struct sheaf_cache *c = atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
		if (c)
			sheaf_cache_shrink(c);
	}
	/* The core does not say what shrink released: report the extents. */
	return count != 0;
}

int sheaf_malloc_posix_memalign(void **memptr, size_t align, size_t size)
{
	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	int e = errno;
	void *p = sheaf_aligned_alloc(align, size);
	int r = p ? 0 : errno;
	errno = e;
	if (p)
		*memptr = p;
	return r;
}

void *sheaf_malloc_memalign(size_t align, size_t size)
{
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (align == 0)
		align = 1;
	if (align & (align - 1))
		align = (size_t)1 << (64 - __builtin_clzll((unsigned long long)align));
	return sheaf_aligned_alloc(align, size);
}

void *sheaf_malloc_valloc(size_t size)
{
	return sheaf_aligned_alloc(PAGE, size);
}

void *sheaf_malloc_pvalloc(size_t size)
{
	if (size > SIZE_LIMIT) {
		errno = ENOMEM;
		return NULL;
	}
	return sheaf_aligned_alloc(PAGE, size ? round_up(size, PAGE) : PAGE);
}

void *sheaf_malloc_reallocarray(void *p, size_t nmemb, size_t size)
{
	size_t n;
	if (__builtin_mul_overflow(nmemb, size, &n)) {
		errno = ENOMEM;
		return NULL;
	}
	return sheaf_realloc(p, n);
}

/* ---- fork (design §7) ----------------------------------------------------------------- */

/* Hold every front-end lock across fork, so the child never inherits one
 * that a thread which does not exist there was holding. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&sc_lock);
	pthread_mutex_lock(&xc.lock);
	for (unsigned int i = 0; i < EXT_SHARDS; i++)
		pthread_mutex_lock(&ext_shards[i].lock);
}

static void fork_parent(void)
{
	for (unsigned int i = EXT_SHARDS; i-- > 0;)
		pthread_mutex_unlock(&ext_shards[i].lock);
	pthread_mutex_unlock(&xc.lock);
	pthread_mutex_unlock(&sc_lock);
}

static void fork_child(void)
{
	/* The forking thread is the owner of every lock in the child. */
	fork_parent();
}
