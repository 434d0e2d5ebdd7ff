/* SPDX-License-Identifier: MIT */
/*
 * extent.c - the cache of freed large blocks of the malloc front end (docs/malloc.md):
 * size steps and bins, best fit, split and merge, the choice of extents to gather, the
 * bound and ageing.  The extents themselves (mapping, gathering with mremap, realloc)
 * are extent_alloc.c's, the registry of live extents extent_registry.c's.
 *
 * Locks: xc.lock (the cache), then one registry shard lock at a time; both are taken by
 * the fork walk of the lock table (base/lock.h) through malloc_extent_fork_register().
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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

/* Smallest extents that are merged with neighbours they were never part of
 * (separate mappings the kernel placed side by side).  Merging saves the pages
 * of the smaller side from being faulted again, and costs, under the cache's
 * lock, reads and relinks of the neighbours' headers, each on a page of its own
 * that has usually left the CPU's caches.  Below this size the saving is small
 * (64 pages at most) and the cost was not: in the malloc mix of sizes up to
 * 64 KiB (docs/benchmarks.md, 2026-11-28 "Mix wide"), merging every freed
 * extent made an operation 1.6-1.8x as slow as the earlier cache of whole
 * extents.  The two sides of a split merge again whatever their size (a split
 * extent becomes whole when its head comes back), so the address table keys
 * an extent of at least this size or one that a split cut (xc_keyed). */
#define XC_MERGE_MIN (256u << 10)

size_t malloc_extent_len(size_t n)
{
	size_t len = round_up(n, PAGE);
	if (len <= 4 * PAGE || len > SHEAF_MALLOC_EXTENT_CACHE_ONE)
		return len;
	unsigned int k = 63u - (unsigned int)__builtin_clzll((unsigned long long)(len - 1));
	return round_up(len, (size_t)1 << (k - 2));
}

/* Bin of an extent length produced by malloc_extent_len() (<= the cached maximum). */
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
	unsigned int vmas; /* its kernel mappings, estimated (EXT_VMAS_*, XC_VMAS_MAX) */
	bool keyed;        /* in the address table (xc_keyed) */
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
	size_t live_peak;      /* the live extents' largest bytes within the delay (xc_bound) */
	uint64_t live_peak_ns; /* when the live bytes were last at live_peak */
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
	__atomic_store_n(&sheaf_cache_hooks.extent_cache_age, sheaf_malloc_extent_cache_age,
			 __ATOMIC_RELEASE);
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
	if (x->keyed) {
		xc_tab_del_locked((uintptr_t)x);
		xc_tab_del_locked(((uintptr_t)x + x->len) | 1u);
	}
}

/* Whether a cached extent of @len bytes and mappings @vmas may ever be merged, and so
 * needs keys in the address table: large enough (XC_MERGE_MIN), or a side of a split
 * (the EXT_VMAS_*_SHARED marks of that cut). */
static bool xc_keyed(size_t len, unsigned int vmas)
{
	return len >= XC_MERGE_MIN || (vmas & (EXT_VMAS_LO_SHARED | EXT_VMAS_HI_SHARED));
}

/* Whether the cached or freed extents @lo and @hi, @lo right before @hi, are merged:
 * the two sides of a split cut, or both at least XC_MERGE_MIN. */
static bool xc_mergeable(size_t lo_len, unsigned int lo_vmas, size_t hi_len, unsigned int hi_vmas)
{
	if ((lo_vmas & EXT_VMAS_HI_SHARED) && (hi_vmas & EXT_VMAS_LO_SHARED))
		return true;
	return lo_len >= XC_MERGE_MIN && hi_len >= XC_MERGE_MIN;
}

/* Give the newly cached @x its two keys (start, end | 1) if it may be merged
 * (xc_keyed) and the table has room for them; without (no memory for a larger
 * table) it is cached all the same, never merged. */
static void xc_key_locked(struct xc_node *x)
{
	x->keyed = xc_keyed(x->len, x->vmas) && xc_tab_reserve_locked();
	if (x->keyed) {
		xc_tab_put_locked((uintptr_t)x, x);
		xc_tab_put_locked(((uintptr_t)x + x->len) | 1u, x);
	}
}

/* The cache's bound in bytes at @now: SHEAF_MALLOC_EXTENT_CACHE_BYTES, or as
 * much as the live extents took at their peak within the last
 * SHEAF_MALLOC_EXTENT_DELAY_NS and a quarter more (up to
 * SHEAF_MALLOC_EXTENT_CACHE_MAX).  A working set of large blocks replaced one
 * at a time needs a cache of about the blocks in flight; one that is freed as
 * a whole and built again (a phase, a request, a benchmark's next run) needs
 * all of it, and the quarter more its extents' size steps (fresh mappings
 * are rounded up by at most a quarter, and blocks reused for smaller
 * requests leave pieces): with the peak alone, the large shape's second and
 * third runs still faulted 1,000-8,000 pages each, none with it.  Following the
 * current live bytes, the bound fell as the set was freed and unmapped it
 * while it was freed, so that building it again faulted every page anew.
 * The peak is forgotten once the cache has served no request for the delay
 * (malloc_extent_take renews it: a set built again more slowly than that,
 * on a loaded machine, lost the cached rest of it halfway); extents idle for
 * the delay go back in any case (the ageing), whatever the bound. */
static size_t xc_bound_locked(uint64_t now)
{
	size_t live = malloc_extent_live_bytes();
	if (live >= xc.live_peak || now - xc.live_peak_ns >= SHEAF_MALLOC_EXTENT_DELAY_NS) {
		xc.live_peak = live;
		xc.live_peak_ns = now;
	}
	size_t b = xc.live_peak + xc.live_peak / 4;
	if (b < SHEAF_MALLOC_EXTENT_CACHE_BYTES)
		return SHEAF_MALLOC_EXTENT_CACHE_BYTES;
	return b < SHEAF_MALLOC_EXTENT_CACHE_MAX ? b : SHEAF_MALLOC_EXTENT_CACHE_MAX;
}

/* Take out the oldest entries while they have been idle for the delay, or
 * while adding @add bytes would exceed the bound (or all, with @all); they
 * are chained through bin_next for xc_unmap() after the lock is dropped. */
static struct xc_node *xc_evict_locked(uint64_t now, size_t add, bool all)
{
	struct xc_node *victims = NULL;
	size_t bound = all ? 0 : xc_bound_locked(now);
	while (xc.count) {
		struct xc_node *old = xc.lru.lru_prev;
		if (!all && now - old->freed_ns < SHEAF_MALLOC_EXTENT_DELAY_NS &&
		    xc.bytes + add <= bound)
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

bool malloc_address_space_limited(void)
{
	/* RLIMIT_DATA counts private writable mappings (Linux 4.7 on), so an anonymous
	 * extent kept mapped holds it as it holds RLIMIT_AS. */
	struct rlimit r;
	if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
		return true;
	return getrlimit(RLIMIT_DATA, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
}

/* The room the address-space limits leave, in bytes: the least of RLIMIT_AS less the
 * process's size and RLIMIT_DATA less its data and stack (/proc/self/statm, read with
 * open/read: no allocation); UINT64_MAX where neither is set, 0 where the size cannot
 * be read. */
static uint64_t space_room(void)
{
	struct rlimit as, data;
	if (getrlimit(RLIMIT_AS, &as) != 0)
		as.rlim_cur = RLIM_INFINITY;
	if (getrlimit(RLIMIT_DATA, &data) != 0)
		data.rlim_cur = RLIM_INFINITY;
	if (as.rlim_cur == RLIM_INFINITY && data.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	/* open, read and close are cancellation points, and free() must not be one (POSIX;
	 * glibc's is not): a thread with a cancel pending died here, inside the free of a
	 * large block under `ulimit -v`, the extent neither cached nor unmapped (until
	 * 2026-11-29).  errno is kept: free() preserves it. */
	char buf[256];
	int cancel_state, e = errno;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	ssize_t r = sheaf_os_read_file("/proc/self/statm", buf, sizeof(buf));
	pthread_setcancelstate(cancel_state, NULL);
	errno = e;
	unsigned long long f[6];
	if (r <= 0)
		return 0;
	if (sscanf(buf, "%llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4],
		   &f[5]) != 6)
		return 0;
	uint64_t room = UINT64_MAX;
	uint64_t size = f[0] * PAGE, dat = f[5] * PAGE;
	if (as.rlim_cur != RLIM_INFINITY)
		room = as.rlim_cur > size ? as.rlim_cur - size : 0;
	if (data.rlim_cur != RLIM_INFINITY) {
		uint64_t d = data.rlim_cur > dat ? data.rlim_cur - dat : 0;
		room = d < room ? d : room;
	}
	return room;
}

/* space_room() for every freed extent, asked of the kernel at most every 10 ms (@now:
 * now_ns()): system calls per free of a large block were a cost of their own.  A limit
 * set meanwhile lets at most 10 ms of frees be cached; a mapping that then fails gives
 * the cache back and tries again (large_alloc). */
static uint64_t xc_space_room(uint64_t now)
{
	static _Atomic uint64_t asked_ns;
	static _Atomic uint64_t room;
	uint64_t t = atomic_load_explicit(&asked_ns, memory_order_relaxed);
	if (t == 0 || now - t >= 10 * 1000 * 1000) {
		uint64_t r = space_room();
		atomic_store_explicit(&room, r, memory_order_relaxed);
		atomic_store_explicit(&asked_ns, now ? now : 1, memory_order_relaxed);
		return r;
	}
	return atomic_load_explicit(&room, memory_order_relaxed);
}

/* Under a limit of address space the cache holds at most this share of the room the
 * limit leaves (1/XC_ROOM_SHARE): enough that a working set of large blocks under a
 * generous `ulimit -v` is not unmapped and faulted in again at every free (mimalloc-
 * bench's malloc-large under an 8 GB limit: 7.8 M page faults and 48 s, against 119 K
 * and 8 s without the limit, while the whole cache was refused), little enough that
 * the rest of the process (thread stacks, other libraries' mappings) keeps the most of
 * the room; Sheaf's own mappings that fail give the cache back and try again. */
#define XC_ROOM_SHARE 4

/* Bin of any cached length (a whole number of pages up to the cached
 * maximum): that of the largest malloc_extent_len() class not above it, so every
 * extent in bin xc_bin(len) or above holds a request of malloc_extent_len() = len.
 * Split remainders and extents shrunk by realloc have such lengths. */
static unsigned int xc_bin_floor(size_t len)
{
	if (len <= 4 * PAGE)
		return (unsigned int)(len / PAGE) - 1;
	unsigned int k = 63u - (unsigned int)__builtin_clzll((unsigned long long)len);
	size_t cls = ((size_t)1 << k) + (((len >> (k - 2)) & 3u) << (k - 2));
	return xc_bin(cls);
}

/* Smallest remainder worth keeping when a cached extent is split (below it
 * the whole extent is handed out: a few pages more address space). */
#define XC_SPLIT_MIN (64u << 10)
/* Smallest cached extent moved into a gathered one.  It was XC_SPLIT_MIN until
 * 2026-11-29, on the reckoning that faulting 16 pages in costs about what an mremap
 * call does; but every moved piece stays a kernel mapping of its own, and mremap's
 * cost grows with the mappings around it.  300 live blocks of random sizes of 64-256
 * KiB, replaced 20,000 times, made 8,400 mappings and took 30 us a replacement
 * (tcmalloc 0.06, mimalloc 0.5, glibc 0.4); with pieces of 1 MiB or more, where a
 * move saves 256 faults or more, the mappings stay flat and a replacement takes 1.3
 * us, 9.1 us with each block written whole (tcmalloc 9.4, mimalloc 8.9: the memory
 * writes).  The large shape (blocks of 5-25 MiB) gathers as before
 * (docs/benchmarks.md, eleventh session; test unit/test_malloc_extents.c
 * t_mappings_small_blocks). */
#define XC_GATHER_PIECE_MIN (1u << 20)
/* Most kernel mappings (VMAs) an extent may span and stay cached.  A moved
 * extent stays a mapping of its own (the kernel merges neighbours only when
 * their page offsets follow on, which moved ones' do not), so every gather
 * adds mappings, and every split of a cached extent that is then moved
 * splits one.  Without a bound, a program that keeps replacing large blocks
 * had its mappings fragment for ever (6,700 after 20,000 replacements of
 * the large shape, and rising) towards vm.max_map_count, where its own mmap
 * calls would fail.  Each extent carries an estimate (EXT_VMAS_*): one for
 * a fresh mapping, the sum of the parts for a gather, one more shared out by
 * length on a split (the cut may fall inside a mapping), one fewer when the
 * two sides of such a cut merge again.  An extent over the bound is unmapped
 * when freed, neighbours are not merged beyond it, and a gather stops short
 * of it.  With 64, the large shape's process levels off at about 1,000
 * mappings; with 32 at 500, but its second and third runs then faulted
 * 16,000-24,000 pages instead of 8,000 and peaked 7-15 % higher (cached
 * extents left out of gathers while new pages were faulted in). */
#define XC_VMAS_MAX 64u

static unsigned int vmas_count(unsigned int v)
{
	return v & (EXT_VMAS_LO_SHARED - 1u);
}

/* The mappings of extent @lo followed by extent @hi, merged. */
static unsigned int vmas_join(unsigned int lo, unsigned int hi)
{
	unsigned int n = vmas_count(lo) + vmas_count(hi);
	if ((lo & EXT_VMAS_HI_SHARED) && (hi & EXT_VMAS_LO_SHARED))
		n--;
	return n | (lo & EXT_VMAS_LO_SHARED) | (hi & EXT_VMAS_HI_SHARED);
}

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

/* @x was just unlinked: its first @keep bytes are handed out (x->vmas is
 * then theirs), the rest stays cached with @x's age and place in the LRU
 * (@x's own links are still intact: unlinking only repointed its
 * neighbours).  Unlinking freed two keys of the address table, so the
 * remainder's two always fit. */
static void xc_split_locked(struct xc_node *x, size_t keep)
{
	struct xc_node *r = (struct xc_node *)((char *)x + keep);
	/* The split may cut a mapping in two: one more, shared out by length. */
	unsigned int n = vmas_count(x->vmas);
	unsigned int head = 1u + (unsigned int)((uint64_t)(n - 1u) * keep / x->len);
	r->vmas = (n + 1u - head) | EXT_VMAS_LO_SHARED | (x->vmas & EXT_VMAS_HI_SHARED);
	x->vmas = head | (x->vmas & EXT_VMAS_LO_SHARED) | EXT_VMAS_HI_SHARED;
	r->len = x->len - keep;
	r->freed_ns = x->freed_ns;
	r->lru_next = x->lru_next;
	r->lru_prev = x->lru_prev;
	r->lru_next->lru_prev = r;
	r->lru_prev->lru_next = r;
	xc_link_bin_locked(r);
	xc.count++;
	xc.bytes += r->len;
	xc_key_locked(r);
}

/* Cached extents for a request of @need bytes that no single one holds, to
 * be moved into a new mapping of @need bytes: the largest first (the fewest
 * moves), none under XC_GATHER_PIECE_MIN, while their mappings stay within
 * XC_VMAS_MAX.  The last one is split where it holds more than the rest of
 * @need, its tail staying cached. */
static void xc_gather_locked(size_t need, struct malloc_extent_pick *pk)
{
	size_t sum = 0;
	unsigned int low = xc_bin_floor(XC_GATHER_PIECE_MIN), vmas = 0;
	for (unsigned int i = XC_BINS;
	     i-- > low && sum < need && pk->n < MALLOC_EXTENT_GATHER_MAX;) {
		struct xc_node *x;
		while (sum < need && pk->n < MALLOC_EXTENT_GATHER_MAX &&
		       (x = xc.bin[i].bin_next) != &xc.bin[i]) {
			/* One more mapping for the split, one for a fresh tail. */
			if (vmas + vmas_count(x->vmas) + 2u > XC_VMAS_MAX)
				return;
			xc_unlink_locked(x);
			size_t len = x->len, want = need - sum;
			if (len > want) {
				xc_split_locked(x, want);
				len = want;
				/* The head moves away: the cut is real. */
				((struct xc_node *)((char *)x + len))->vmas &= ~EXT_VMAS_LO_SHARED;
			}
			/* Moved, the parts meet no neighbour they were split from. */
			pk->piece[pk->n].p = (char *)x;
			pk->piece[pk->n].vmas = vmas_count(x->vmas);
			pk->piece[pk->n++].len = len;
			sum += len;
			vmas += vmas_count(x->vmas);
		}
	}
}

/* Cached memory for a request of @need (whole pages) bytes aligned to
 * @align, into *@pk.
 *
 * Best fit first, by bins: the smallest bin that holds one, the most
 * recently freed extent in it (its pages are the likeliest to be
 * resident), its tail split off and kept when at least XC_SPLIT_MIN.  The
 * split is at @need, not at the request's malloc_extent_len(): pages of the
 * rounding would be resident garbage in a reused extent.
 *
 * When no cached extent holds the request alone (the cache is fragmented:
 * freed blocks of random sizes, address neighbours still in use), the
 * largest ones are gathered instead, for the caller to move into one new
 * mapping: their pages are resident, and mremap moves them without a fault,
 * where mapping afresh faulted in every page of the request, and growing
 * one cached extent every page beyond it, while the rest of the cache sat
 * unused until it aged out. */
void malloc_extent_take(size_t need, size_t align, struct malloc_extent_pick *pk)
{
	pk->one = false;
	pk->n = 0;
	if (need > SHEAF_MALLOC_EXTENT_CACHE_ONE)
		return;
	struct xc_node *found = NULL;
	/* A request under XC_MERGE_MIN starts at the bin of its own size step, where
	 * every extent fits: the bin of need's floor holds mostly extents of the step
	 * below (fresh mappings' lengths, never merged at that size), whose cold
	 * headers the search would read in vain. */
	unsigned int b = need < XC_MERGE_MIN ? xc_bin(malloc_extent_len(need)) : xc_bin_floor(need);
	uint64_t now = now_ns();
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_init_locked();
	struct xc_node *victims = xc_evict_locked(now, 0, false);
	for (unsigned int i = b; i < XC_BINS && !found && xc.count; i++)
		found = xc_bin_first_locked(i, need, align);
	if (found) {
		xc_unlink_locked(found);
		size_t len = found->len;
		if (len - need >= XC_SPLIT_MIN) {
			xc_split_locked(found, need);
			len = need;
		}
		pk->one = true;
		pk->n = 1;
		pk->piece[0].p = (char *)found;
		pk->piece[0].len = len;
		pk->piece[0].vmas = found->vmas;
	} else if (xc.count) {
		xc_gather_locked(need, pk);
	}
	/* The working set is being built again from the cache: its peak still
	 * holds (xc_bound_locked). */
	if (pk->n)
		xc.live_peak_ns = now;
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_unmap(victims);
}

/* Merge the freed extent @x of *@len bytes spanning *@vmas mappings with the cached
 * extents right after and right before it while the result stays cacheable (XC_VMAS_MAX
 * too); returns the merged extent's start and updates *@len and *@vmas.  Neighbours may
 * lie in other mappings (the kernel places mappings next to each other): munmap works
 * across them, and mremap moves them together only on kernels since 6.17 and grows them
 * on none (see extent_alloc.c). */
static struct xc_node *xc_merge_locked(struct xc_node *x, size_t *len, unsigned int *vmas)
{
	struct xc_key *k = xc_tab_find_locked(((uintptr_t)x + *len));
	if (k && xc_mergeable(*len, *vmas, k->node->len, k->node->vmas) &&
	    *len + k->node->len <= SHEAF_MALLOC_EXTENT_CACHE_ONE &&
	    vmas_count(vmas_join(*vmas, k->node->vmas)) <= XC_VMAS_MAX) {
		struct xc_node *next = k->node;
		xc_unlink_locked(next);
		*len += next->len;
		*vmas = vmas_join(*vmas, next->vmas);
		CTR_INC(extent_merges);
	}
	k = xc_tab_find_locked((uintptr_t)x | 1u);
	if (k && xc_mergeable(k->node->len, k->node->vmas, *len, *vmas) &&
	    *len + k->node->len <= SHEAF_MALLOC_EXTENT_CACHE_ONE &&
	    vmas_count(vmas_join(k->node->vmas, *vmas)) <= XC_VMAS_MAX) {
		struct xc_node *prev = k->node;
		xc_unlink_locked(prev);
		*len += prev->len;
		*vmas = vmas_join(prev->vmas, *vmas);
		x = prev;
		CTR_INC(extent_merges);
	}
	return x;
}

void malloc_extent_unmap(void *p, size_t len)
{
	(void)sheaf_os_unmap(p, len); /* reported if it fails */
	CTR_INC(extent_unmaps);
}

/* Keep a freed extent for reuse, merged with the cached extents right
 * before and after it where xc_mergeable allows (a split extent becomes
 * whole again when its head comes back; separate mappings only from
 * XC_MERGE_MIN), giving back the oldest ones (or any idle for the delay) to
 * stay within the byte bound. */
void malloc_extent_free(void *p, size_t len, unsigned int vmas)
{
	uint64_t now = now_ns();
	if (len > SHEAF_MALLOC_EXTENT_CACHE_ONE || vmas_count(vmas) > XC_VMAS_MAX) {
		malloc_extent_unmap(p, len);
		return;
	}
	/* Where address space is limited (RLIMIT_AS or RLIMIT_DATA), cached extents
	 * hold address space the program may need: past their share of the room left
	 * (XC_ROOM_SHARE) a freed extent goes back at once. */
	uint64_t room = xc_space_room(now);
	struct xc_node *x = p;
	sheaf_mutex_lock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	if (room != UINT64_MAX && (uint64_t)xc.bytes + len > room / XC_ROOM_SHARE) {
		sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
		malloc_extent_unmap(p, len);
		return;
	}
	xc_init_locked();
	if (xc_keyed(len, vmas))
		x = xc_merge_locked(x, &len, &vmas);
	x->len = len;
	x->vmas = vmas;
	x->freed_ns = now;
	struct xc_node *victims = xc_evict_locked(now, len, false);
	xc_link_bin_locked(x);
	x->lru_next = xc.lru.lru_next;
	x->lru_prev = &xc.lru;
	xc.lru.lru_next->lru_prev = x;
	xc.lru.lru_next = x;
	xc.count++;
	xc.bytes += len;
	xc_key_locked(x);
	sheaf_mutex_unlock(&xc.lock, SHEAF_LOCK_MALLOC_EXTENTS);
	xc_unmap(victims);
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
