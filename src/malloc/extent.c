/* SPDX-License-Identifier: MIT */
/*
 * extent.c - large blocks of the malloc front end (docs/malloc.md): the extent cache
 * (size bins, best fit, split and merge, growth with mremap, ageing) and the extents
 * themselves; the registry of live extents is extent_registry.c.
 *
 * Locks: xc.lock (the cache), then one registry shard lock at a time; both are taken by
 * the fork walk of the lock table (base/lock.h) through malloc_extent_fork_register().
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

#include "malloc/malloc_impl.h"

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
	size_t live = malloc_extent_live_bytes();
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

/* address_space_limited() for every freed extent, asked of the kernel at most every
 * 10 ms (@now: now_ns()): a system call per free of a large block was a cost of its
 * own.  A limit set meanwhile lets at most 10 ms of frees be cached; a mapping that
 * then fails gives the cache back and tries again (large_alloc). */
static bool xc_space_limited(uint64_t now)
{
	static _Atomic uint64_t asked_ns;
	static atomic_bool limited;
	uint64_t t = atomic_load_explicit(&asked_ns, memory_order_relaxed);
	if (t == 0 || now - t >= 10 * 1000 * 1000) {
		bool l = address_space_limited();
		atomic_store_explicit(&limited, l, memory_order_relaxed);
		atomic_store_explicit(&asked_ns, now ? now : 1, memory_order_relaxed);
		return l;
	}
	return atomic_load_explicit(&limited, memory_order_relaxed);
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
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
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
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_unmap(victims);
	return found;
}

/* Merge the freed extent @x of *@len bytes with the cached extents right after and
 * right before it while the result stays cacheable; returns the merged extent's start
 * and updates *@len.  Neighbours may lie in other mappings (the kernel places mappings
 * next to each other): munmap works across them, and mremap, which does not, falls
 * back (see malloc_large_alloc and malloc_extent_resize). */
static struct xc_node *xc_merge_locked(struct xc_node *x, size_t *len)
{
	struct xc_key *k = xc_tab_find_locked(((uintptr_t)x + *len));
	if (k && *len + k->node->len <= SHEAF_MALLOC_EXTENT_CACHE_ONE) {
		struct xc_node *next = k->node;
		xc_unlink_locked(next);
		*len += next->len;
		CTR_INC(extent_merges);
	}
	k = xc_tab_find_locked((uintptr_t)x | 1u);
	if (k && *len + k->node->len <= SHEAF_MALLOC_EXTENT_CACHE_ONE) {
		struct xc_node *prev = k->node;
		xc_unlink_locked(prev);
		*len += prev->len;
		x = prev;
		CTR_INC(extent_merges);
	}
	return x;
}

/* Keep a freed extent for reuse, merged with the cached extents right
 * before and after it (a split extent becomes whole again when its head
 * comes back), giving back the oldest ones (or any idle for the delay) to
 * stay within the byte bound. */
void malloc_extent_put(void *p, size_t len)
{
	/* Where address space is limited (RLIMIT_AS), a cached extent would
	 * hold address space the program may need: it goes back at once. */
	uint64_t now = now_ns();
	if (len > SHEAF_MALLOC_EXTENT_CACHE_ONE || xc_space_limited(now)) {
		(void)sheaf_os_unmap(p, len);
		CTR_INC(extent_unmaps);
		return;
	}
	struct xc_node *x = p;
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_init_locked();
	if (!xc_tab_reserve_locked()) {
		sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
		(void)sheaf_os_unmap(p, len);
		CTR_INC(extent_unmaps);
		return;
	}
	x = xc_merge_locked(x, &len);
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
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_unmap(victims);
	/* A program of large blocks only may never grow Sheaf's heap to the
	 * reaper's threshold: start it for the cached extents too, so that they
	 * still go back after the delay when the program goes idle.  No lock
	 * of ours is held here. */
	if (sheaf_unlikely(cached >= SHEAF_REAP_MALLOC_START) &&
	    !atomic_load_explicit(&sheaf_reaper_kicked, memory_order_relaxed) && !malloc_tls_creating)
		sheaf_reaper_kick();
}

void sheaf_malloc_extent_cache_drain(void)
{
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	struct xc_node *victims = xc_evict_locked(0, 0, true);
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_unmap(victims);
}

/* The reaper's tick (reaper.c): extents idle for the delay go back even when no
 * later extent operation would have noticed. */
void sheaf_malloc_extent_cache_age(void)
{
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	struct xc_node *victims = xc.lru.lru_next ? xc_evict_locked(now_ns(), 0, false) : NULL;
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_unmap(victims);
}

void sheaf_malloc_extent_cache_stat(size_t *count, size_t *bytes)
{
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	*count = xc.count;
	*bytes = xc.bytes;
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
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

/* A new mapping for a large block of @n bytes aligned to @align, *@len bytes long
 * (the size step; less where address space is short).  The rounding to a size step
 * costs address space, not memory: where address space is limited (RLIMIT_AS, checked
 * at each mapping because a program may set it at any time) or runs out, do without
 * it, as glibc does.  Such an extent is not cached when freed (malloc_extent_put): its
 * address space goes back at once. */
static void *large_map(size_t n, size_t align, size_t *len)
{
	size_t exact = round_up(n, PAGE);
	if (exact < *len && address_space_limited())
		*len = exact;
	void *p = map_aligned(*len, align);
	if (!p && exact < *len) {
		*len = exact;
		p = map_aligned(*len, align);
	}
	if (!p) {
		/* Out of address space: what the cache holds goes back first. */
		size_t count, bytes;
		sheaf_malloc_extent_cache_stat(&count, &bytes);
		if (count) {
			sheaf_malloc_extent_cache_drain();
			*len = exact;
			p = map_aligned(*len, align);
		}
	}
	return p;
}

void *malloc_large_alloc(size_t n, size_t align, bool zero)
{
	if (unlikely(n > SIZE_LIMIT - PAGE)) {
		errno = ENOMEM;
		return NULL;
	}
	malloc_fork_handlers_ensure();
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
			malloc_extent_put(p, got);
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
		p = large_map(n, align, &len);
		if (!p) {
			errno = ENOMEM;
			return NULL;
		}
		CTR_INC(extent_maps);
	}
	if (unlikely(!malloc_extent_register(p, len))) {
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
void *malloc_extent_resize(void *p, size_t len, size_t n)
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
		malloc_extent_set_len(p, nlen);
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
	if (unlikely(!malloc_extent_register(q, nlen))) {
		(void)sheaf_os_unmap(q, nlen);
		errno = ENOMEM;
		return NULL;
	}
	if (sheaf_sys_mremap(p, len, nlen, MREMAP_MAYMOVE | MREMAP_FIXED, q) == MAP_FAILED) {
		/* An extent merged in the cache from neighbouring mappings may
		 * span several of the kernel's mappings, which mremap cannot move
		 * (EFAULT): copy it instead. */
		memcpy(q, p, len);
		malloc_extent_lookup(p, true);
		malloc_extent_put(p, len);
		return q;
	}
	malloc_extent_lookup(p, true);
	CTR_INC(extent_remaps);
	return q;
}

/* ---- fork (malloc.c's handlers) ------------------------------------------------------ */

/* fork: rank MALLOC_EXTENTS of the lock table (base/lock.h); MALLOC_SHARD is the
 * registry's (extent_registry.c). */
static void fork_take_extents(void)
{
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
}

static void fork_release_extents(bool child)
{
	(void)child;
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
}

void malloc_extent_fork_register(void)
{
	static const struct sheaf_fork_ops ext = { fork_take_extents, fork_release_extents };
	sheaf_fork_register(SHEAF_LOCK_MALLOC_EXTENTS, &ext);
	malloc_extent_registry_fork_register();
}
