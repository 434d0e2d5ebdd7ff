/* SPDX-License-Identifier: MIT */
/*
 * page.c - the page provider: slab memory from a window of address space that is
 * mapped as it is used.
 *
 * Why one window: the free fast path must tell, in O(1) and for *any* pointer, whether
 * Sheaf owns it.  With every slab inside [base, base + cap), that is one
 * subtraction and one compare, then a load from a flat page map (8 bytes per 4 KiB
 * page) that holds the owning cache node -- the key the fast path compares with its
 * sheaf's key.  Foreign pointers, pointers into free pages and into metadata (which
 * lives outside the heap part of the window) all give key 0: "not ours".
 *
 * Why the window is not reserved: every mapping counts against
 * RLIMIT_AS, PROT_NONE ones too, so a reservation of the whole heap at start-up took
 * what `ulimit -v` allowed from thread stacks and large blocks, and a limit lowered
 * after start-up left nothing to grow into.  So nothing is reserved ahead:
 *  - the window is only chosen at init, where the address space is free and expected to
 *    stay free: at the bottom of a free range twice its size (a PROT_NONE probe, unmapped
 *    again at once), or, when the probe does not fit under RLIMIT_AS, the same distance
 *    below where the kernel maps now.  The kernel places new mappings top-down, so the
 *    program's later mappings come down from above the window, the heap grows up;
 *  - the page map and the descriptors, flat arrays over the window laid out below the
 *    heap part, are mapped for the first `size` bytes of the window only, and `size`
 *    grows in steps of whole blocks (64 MiB, or half the size so far rounded up to 2 MiB,
 *    up to 1 GiB: 1.8 % of a step in metadata address space, halved down to one block
 *    when the address space is short);
 *  - each 2 MiB block is mapped (read-write, at its fixed address: a plain hint, which
 *    the kernel honours when the range is free) when the buddy allocator first needs it,
 *    and unmapped when it is purged as a whole, so freed memory gives its address space
 *    back too.  A block whose address something else took meanwhile is skipped for good
 *    (`holes`); its page-map entries stay 0.
 * The growth is invisible to the fast path: it reads sheaf_heap.fast_limit, which moves
 * up after the new page-map slice is mapped (release).  At the cap or the limit a page
 * allocation fails with ENOMEM and the caller reports it; the next one tries again, so
 * freeing memory or raising the limit makes the heap usable again.
 *
 * Inside a block pages are handed out by a binary buddy allocator (orders 0..8), so a
 * slab of 2^k pages is 2^k-page aligned.  Freed pages are given back with MADV_DONTNEED
 * after they stay unused for a while (decay), not when they are freed: a program whose
 * live memory swings (a producer that fills a queue of batches a consumer frees later,
 * mimalloc-bench's xmalloc-test) would otherwise fault its working set in again on every
 * swing -- 342,000 minor faults and 3 s of system time in 5 s there, purging beyond 1/8
 * of the mapped pages.  The rule is a low watermark per epoch of half the decay time
 * (SHEAF_PURGE_MS, 1 s by default): the least the dirty total fell to during an epoch is
 * memory no allocation needed in it, and at the epoch's end that much is purged (the
 * largest runs of SHEAF_PURGE_ORDER, 64 KiB, or more; whole free blocks first, unmapped
 * with their slice of the descriptor array; their page-map slice stays, page.h "Keys").
 * So memory left unused for a whole epoch is given back at its end, within the decay
 * time (the largest runs go, not the oldest).  The epoch is checked on every page
 * allocation and free and by the reaper's rounds, so an idle program purges too.  A
 * bound keeps a burst from holding its pages for the decay time: above max(64 MiB, the
 * pages in use) dirty, half of that is kept.  Shrink purges everything at once, so RSS returns to its starting point
 * (issue: 1 GiB burst test).
 *
 * Locking: sheaf_heap.lock protects the free lists, the block stack, the growth and the
 * pg_* fields of FREE descriptors.  It nests inside node->list_lock (design §4).
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "page/page.h"

/* Dirty free pages may exceed the pages in use up to this before the decay time runs
 * out (see the header comment). */
#define PAGE_DIRTY_MIN ((size_t)64 << 20)

struct sheaf_heap sheaf_heap = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* page.h "Keys": the key of every page below fast_limit that is not a slab's.  Const:
 * in a read-only section, so nothing can write it. */
const uintptr_t sheaf_page_none[SHEAF_PAGE_NONE_WORDS] sheaf_aligned(SHEAF_CACHELINE);

/* Fault injection (tests): page allocations left before they fail; -1 = off.
 * Protected by sheaf_heap.lock. */
static long heap_fail_countdown = -1;

void sheaf_os_inject_heap_failure(long n)
{
	sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	heap_fail_countdown = n;
	sheaf_mutex_unlock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
}

#define HEAP_MAP_FLAGS (MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)

/* Map @len bytes read-write at exactly @addr: 0, -EEXIST when something else is there
 * (the kernel put the mapping elsewhere; it is unmapped again), -ENOMEM. */
static int map_exact(void *addr, size_t len)
{
	void *p = sheaf_sys_mmap(addr, len, PROT_READ | PROT_WRITE, HEAP_MAP_FLAGS);
	if (p == MAP_FAILED)
		return -ENOMEM;
	if (p != addr) {
		(void)sheaf_sys_munmap(p, len); /* reported if it fails */
		return -EEXIST;
	}
	return 0;
}

static inline size_t pm_bytes(size_t heap_bytes)
{
	return heap_bytes >> (SHEAF_PAGE_SHIFT - 3);
}
static inline size_t desc_bytes(size_t heap_bytes)
{
	return (heap_bytes >> SHEAF_PAGE_SHIFT) * sizeof(struct sheaf_slab);
}

/* Publish the fast paths' bound: the blocks reached so far, whose page-map slices hold
 * keys or SHEAF_KEY_NONE (release: after they were written).  Locked. */
static void fast_limit_update_locked(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t reached = SHEAF_MIN(h->size, h->next_block << SHEAF_BLOCK_SHIFT);
	__atomic_store_n(&h->fast_limit, h->gate_closed ? 0 : reached, __ATOMIC_RELEASE);
}

/* Block @blk is reached for the first time (the bump of block_take_locked, mapped or
 * a hole): its page-map slice, one page, gets SHEAF_KEY_NONE in every entry before the
 * fast paths' bound passes it.  The slice is never purged afterwards (block_release_locked):
 * purged, it would read 0 again.  Locked. */
static void block_reach_locked(size_t blk)
{
	struct sheaf_heap *h = &sheaf_heap;
	uintptr_t *e = &h->pagemap[blk << SHEAF_BLOCK_ORDER];
	for (size_t i = 0; i < SHEAF_BLOCK_PAGES; i++)
		__atomic_store_n(&e[i], SHEAF_KEY_NONE, __ATOMIC_RELAXED);
	sheaf_wr(h->next_block, blk + 1); /* read racily by the reaper */
	fast_limit_update_locked();
}

void sheaf_page_fast_gate(bool closed)
{
	sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	sheaf_heap.gate_closed = closed;
	fast_limit_update_locked();
	sheaf_mutex_unlock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
}

/* Cover @step more bytes of the window: map their page-map and descriptor slices.
 * 0, or -ENOMEM (nothing changed).  Locked. */
static int cover_map_locked(size_t step)
{
	struct sheaf_heap *h = &sheaf_heap;
	char *pm = (char *)h->pagemap + pm_bytes(h->size);
	char *ds = (char *)h->desc + desc_bytes(h->size);
	if (map_exact(pm, pm_bytes(step)) != 0)
		return -ENOMEM;
	if (map_exact(ds, desc_bytes(step)) != 0) {
		(void)sheaf_sys_munmap(pm, pm_bytes(step));
		return -ENOMEM;
	}
	__atomic_store_n(&h->size, h->size + step, __ATOMIC_RELEASE);
	fast_limit_update_locked();
	return 0;
}

/* Grow the covered part: a step of 64 MiB or half the size so far (at most 1 GiB),
 * halved down to one block while the address space is short.  Every step is whole
 * blocks, so the covered size stays a multiple of 2 MiB and the next slices of the page
 * map (size / 512) and descriptors (size / 64) start on a page: until 2026-11-29 half of
 * 1458 MiB made the size 2187 MiB, whose page-map slice began inside a page, every
 * mapping of the next step missed its address, and the heap stopped growing at 2.1 GiB
 * whatever the cap (found by review; tests/unit/test_page_dirty.c test_growth_past_2g).
 * Locked. */
static int cover_grow_locked(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t left = h->cap - h->size;
	size_t step = SHEAF_MIN(SHEAF_MAX((size_t)64 << 20, h->size / 2), (size_t)1 << 30);
	step = SHEAF_MIN(SHEAF_ALIGN_UP(step, SHEAF_BLOCK_SIZE), left);
	for (; step >= SHEAF_BLOCK_SIZE; step = SHEAF_ALIGN_UP(step / 2, SHEAF_BLOCK_SIZE)) {
		if (cover_map_locked(step) == 0)
			return 0;
		if (step == SHEAF_BLOCK_SIZE)
			break;
	}
	return -ENOMEM;
}

/* Try the window whose metadata starts at @w (2 MiB aligned) for a heap of @cap bytes:
 * 0 when its first step could be mapped there. */
static int window_try(char *w, size_t cap)
{
	struct sheaf_heap *h = &sheaf_heap;
	h->pagemap = (uintptr_t *)w;
	h->desc = (struct sheaf_slab *)(w + pm_bytes(cap));
	h->base = w + pm_bytes(cap) + desc_bytes(cap);
	h->cap = cap;
	h->size = 0;
	if (cover_grow_locked() == 0)
		return 0;
	h->pagemap = NULL;
	h->desc = NULL;
	h->base = NULL;
	h->cap = 0;
	return -ENOMEM;
}

/* Choose the window (see the header comment).  Locked. */
static int window_place_locked(size_t cap)
{
	for (; cap >= (64ul << 20); cap /= 2) {
		size_t total = pm_bytes(cap) + desc_bytes(cap) + cap;
		/* 1: the bottom of a free range of twice the window (the gap above it is
		 * where the program's later mappings go first). */
		size_t probe_len = 2 * total + SHEAF_BLOCK_SIZE;
		char *probe = sheaf_sys_mmap(NULL, probe_len, PROT_NONE, HEAP_MAP_FLAGS);
		if (probe != MAP_FAILED) {
			char *w = (char *)SHEAF_ALIGN_UP((uintptr_t)probe, SHEAF_BLOCK_SIZE);
			int un = sheaf_sys_munmap(probe, probe_len);
			if (un == 0 && window_try(w, cap) == 0)
				return 0;
		}
		/* 2: the probe does not fit under RLIMIT_AS: the same place found without
		 * mapping it, below where the kernel maps now, then closer. */
		char *x = sheaf_sys_mmap(NULL, SHEAF_BLOCK_SIZE, PROT_NONE, HEAP_MAP_FLAGS);
		if (x == MAP_FAILED)
			return -ENOMEM; /* not even 2 MiB of address space */
		if (sheaf_sys_munmap(x, SHEAF_BLOCK_SIZE) != 0)
			return -ENOMEM;
		for (size_t gap = total;; gap /= 16) {
			uintptr_t top = (uintptr_t)x;
			if (top > gap + total + (1ul << 32)) {
				char *w = (char *)((top - gap - total) & ~(SHEAF_BLOCK_SIZE - 1));
				if (window_try(w, cap) == 0)
					return 0;
			}
			if (gap < SHEAF_BLOCK_SIZE)
				break;
		}
	}
	return -ENOMEM;
}

int sheaf_page_init(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	long gb = sheaf_option_long(SHEAF_OPT_HEAP_GB);
	if (gb <= 0)
		return -ENOMEM;
	if (gb > (1l << 16))
		gb = 1l << 16; /* 64 TiB: half of the 47-bit user address space */
	for (int n = 0; n < SHEAF_MAX_NODES; n++) {
		for (int o = 0; o < SHEAF_BLOCK_ORDER; o++)
			sheaf_list_init(&h->free_area[n][o]);
		sheaf_list_init(&h->dirty_blocks[n]);
	}
	h->purge_order = (unsigned)sheaf_option_long(SHEAF_OPT_PURGE_ORDER);
	if (h->purge_order > SHEAF_BLOCK_ORDER)
		h->purge_order = SHEAF_BLOCK_ORDER;
	h->purge_ns = (uint64_t)sheaf_option_long(SHEAF_OPT_PURGE_MS) * 1000000ull;
	h->decay_epoch_ns = sheaf_os_now_ns();
	sheaf_mutex_lock(&h->lock, SHEAF_LOCK_HEAP);
	int r = window_place_locked((size_t)gb << 30);
	sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
	return r;
}

static inline size_t page_index(const void *p)
{
	return (size_t)((const char *)p - sheaf_heap.base) >> SHEAF_PAGE_SHIFT;
}
static inline char *page_addr(size_t pg)
{
	return sheaf_heap.base + (pg << SHEAF_PAGE_SHIFT);
}

/* Room for one more entry on the free-block stack.  Locked. */
static bool free_blocks_reserve_locked(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	if (h->nr_free_blocks < h->cap_free_blocks)
		return true;
	size_t ncap = h->cap_free_blocks ? h->cap_free_blocks * 2 : 1024;
	uint32_t *nb = sheaf_os_map(ncap * sizeof(uint32_t));
	if (!nb)
		return false;
	if (h->free_blocks) {
		memcpy(nb, h->free_blocks, h->nr_free_blocks * sizeof(uint32_t));
		(void)sheaf_os_unmap(h->free_blocks, h->cap_free_blocks * sizeof(uint32_t));
	}
	h->free_blocks = nb;
	h->cap_free_blocks = ncap;
	return true;
}

/* ---- Dirty pages ------------------------------------------------------------------------
 * Every free page carries a flag, pg_dirty, set when it is freed and cleared when it is
 * purged, and a free run's head counts its flagged pages (pg_ndirty).  So a run that
 * grew by merging with pages already purged gives back only the others, and a run with
 * none is skipped: before 2026-11-29 a run had one flag for all its pages, and merged
 * runs were purged (and counted in returned_bytes) again, up to 3.5x the heap with
 * SHEAF_PURGE_MS=0 and about 2.5x the madvise calls needed.  A split counts the flags
 * of each half only when the run is partly dirty. */

/* How many of the 2^@order pages from @pg are pg_dirty.  Locked. */
static unsigned dirty_count_locked(size_t pg, unsigned order)
{
	unsigned n = 0;
	for (size_t i = 0; i < (1ul << order); i++)
		n += sheaf_heap.desc[pg + i].pg_dirty;
	return n;
}

/* Clear the flags of the 2^@order pages from @pg, writing only those set (the
 * descriptors of a block never used are untouched zero pages).  Locked. */
static void dirty_clear_locked(size_t pg, unsigned order)
{
	for (size_t i = 0; i < (1ul << order); i++)
		if (sheaf_heap.desc[pg + i].pg_dirty)
			sheaf_heap.desc[pg + i].pg_dirty = 0;
	sheaf_heap.desc[pg].pg_ndirty = 0;
}

/* Give a whole free block back to the OS: unmap it (its address space too), purge its
 * descriptor slice, and remember it for reuse; @bytes of it were dirty.
 * False when there is no room to remember it: the caller keeps it resident instead
 * (nothing is lost).  Locked. */
static bool block_release_locked(size_t blk, size_t bytes)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t pg = blk << SHEAF_BLOCK_ORDER;
	if (!free_blocks_reserve_locked())
		return false;
	uint32_t entry = (uint32_t)blk;
	/* Its dirty pages (@bytes, the caller's count) are what it gives back; the flags
	 * go with the descriptors (a block is reused with none set: sheaf_page_alloc). */
	dirty_clear_locked(pg, SHEAF_BLOCK_ORDER);
	if (sheaf_sys_munmap(page_addr(pg), SHEAF_BLOCK_SIZE) == 0) {
		sheaf_wr(h->blocks_mapped, h->blocks_mapped - 1);
		sheaf_wr(h->returned_bytes, h->returned_bytes + bytes);
	} else {
		/* Still mapped (reported): at least give the memory back. */
		entry |= SHEAF_BLOCK_STILL_MAPPED;
		if (sheaf_os_purge(page_addr(pg), SHEAF_BLOCK_SIZE) == 0)
			sheaf_wr(h->returned_bytes, h->returned_bytes + bytes);
	}
	/* 512 * 64 B = 8 pages, page aligned.  A failure leaves zeros resident (reported),
	 * nothing else.  The page-map slice (512 entries * 8 B, one page) stays: it holds
	 * SHEAF_KEY_NONE, which the free fast paths read without a test (page.h "Keys"). */
	(void)sheaf_os_purge(&h->desc[pg], SHEAF_BLOCK_PAGES * sizeof(struct sheaf_slab));
	h->free_blocks[h->nr_free_blocks++] = entry;
	return true;
}

/* Map block @blk: 0, -EEXIST (the address is taken), -ENOMEM.  Locked. */
static int block_map_locked(size_t blk)
{
	int r = map_exact(page_addr(blk << SHEAF_BLOCK_ORDER), SHEAF_BLOCK_SIZE);
	if (r == 0)
		sheaf_wr(sheaf_heap.blocks_mapped, sheaf_heap.blocks_mapped + 1);
	return r;
}

/* Take a whole 2 MiB block for @nid: a released one, else a fresh one, covering more
 * of the window when needed.  -1 when no block can be mapped (ENOMEM).  Locked. */
static long block_take_locked(int nid)
{
	struct sheaf_heap *h = &sheaf_heap;
	(void)nid; /* real NUMA placement: first touch by the node's CPUs (see docs) */
	while (h->nr_free_blocks) {
		uint32_t e = h->free_blocks[h->nr_free_blocks - 1];
		size_t blk = e & ~SHEAF_BLOCK_STILL_MAPPED;
		int r = (e & SHEAF_BLOCK_STILL_MAPPED) ? 0 : block_map_locked(blk);
		if (r == -ENOMEM)
			return -1; /* keep it listed: the next try may succeed */
		h->nr_free_blocks--;
		if (r == 0)
			return (long)blk;
		h->holes++; /* taken by another mapping while it was unmapped: give it up */
	}
	/* Every block up to the cap may be tried: a foreign mapping inside the window (a
	 * glibc arena is 64 MiB, 32 blocks; a few of them and some thread stacks are more
	 * than any fixed number of tries) must cost a skip, never a spurious ENOMEM.  The
	 * loop ends because next_block only grows and cover_grow_locked() fails at the cap. */
	for (;;) {
		if ((h->next_block + 1) << SHEAF_BLOCK_SHIFT > h->size && cover_grow_locked() != 0)
			return -1;
		int r = block_map_locked(h->next_block);
		if (r == -ENOMEM)
			return -1;
		size_t blk = h->next_block;
		block_reach_locked(blk);
		if (r == 0)
			return (long)blk;
		h->holes++; /* something else is mapped there: skip it for good */
	}
	return -1;
}

/* A free run of 2^@order pages at @pg on node @nid's list, @ndirty of its pages
 * pg_dirty.  Locked. */
static void mark_free_locked(size_t pg, unsigned order, int nid, unsigned ndirty)
{
	struct sheaf_slab *d = &sheaf_heap.desc[pg];
	sheaf_wr(d->pg_kind, SHEAF_PG_FREE);
	d->pg_order = (uint8_t)order;
	d->pg_node = (uint8_t)nid;
	d->pg_ndirty = (uint16_t)ndirty;
	sheaf_list_add(&d->sl_list, &sheaf_heap.free_area[nid][order]);
}

static inline void dirty_add_locked(size_t bytes)
{
	sheaf_heap.dirty_bytes += bytes;
}

static inline void dirty_sub_locked(size_t bytes)
{
	struct sheaf_heap *h = &sheaf_heap;
	h->dirty_bytes = h->dirty_bytes > bytes ? h->dirty_bytes - bytes : 0;
	if (h->dirty_bytes < h->dirty_low)
		h->dirty_low = h->dirty_bytes;
	/* What is left of unreachable dirt stays unreachable: only a free (a merge) can
	 * make a run large enough, and a free raises dirty_bytes above this. */
	if (h->dirty_stuck > h->dirty_bytes)
		h->dirty_stuck = h->dirty_bytes;
	if (h->dirty_retry > h->dirty_bytes + SHEAF_MAX(h->dirty_bytes / 8, SHEAF_BLOCK_SIZE))
		h->dirty_retry = 0; /* the dirt went to allocations: a new burst walks at once */
}

/* Purge the free run headed by @d (order @o, some pages dirty): one madvise over the
 * run, its flags cleared; returns the bytes that were dirty.  On failure (reported) the
 * run stays resident and is not counted as returned; it is not retried.  Locked. */
static size_t run_purge_locked(struct sheaf_slab *d, unsigned o)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t pg = (size_t)(d - h->desc);
	size_t bytes = (size_t)d->pg_ndirty << SHEAF_PAGE_SHIFT;
	if (sheaf_os_purge(page_addr(pg), SHEAF_PAGE_SIZE << o) == 0)
		sheaf_wr(h->returned_bytes, h->returned_bytes + bytes);
	dirty_clear_locked(pg, o);
	return bytes;
}

/* Purge dirty free memory until at most @keep bytes stay resident: whole blocks first,
 * then the largest runs of purge_order or more.  Locked. */
static void purge_locked(size_t keep)
{
	struct sheaf_heap *h = &sheaf_heap;
	for (int n = 0; n < SHEAF_MAX_NODES && h->dirty_bytes > keep; n++) {
		while (!sheaf_list_empty(&h->dirty_blocks[n]) && h->dirty_bytes > keep) {
			struct sheaf_slab *d =
				sheaf_list_first(&h->dirty_blocks[n], struct sheaf_slab, sl_list);
			size_t pg = (size_t)(d - h->desc);
			sheaf_list_del(&d->sl_list);
			sheaf_wr(d->pg_kind, SHEAF_PG_UNUSED);
			size_t bytes = (size_t)d->pg_ndirty << SHEAF_PAGE_SHIFT;
			if (!block_release_locked(pg >> SHEAF_BLOCK_ORDER, bytes)) {
				/* No room to remember it: it stays a resident free block. */
				sheaf_wr(d->pg_kind, SHEAF_PG_FREE);
				sheaf_list_add_tail(&d->sl_list, &h->dirty_blocks[n]);
				break;
			}
			dirty_sub_locked(bytes);
		}
	}
	for (int o = SHEAF_BLOCK_ORDER - 1; o >= (int)h->purge_order && h->dirty_bytes > keep;
	     o--) {
		for (int n = 0; n < SHEAF_MAX_NODES && h->dirty_bytes > keep; n++) {
			struct sheaf_list *pos;
			for (pos = h->free_area[n][o].next;
			     pos != &h->free_area[n][o] && h->dirty_bytes > keep; pos = pos->next) {
				struct sheaf_slab *d =
					sheaf_container_of(pos, struct sheaf_slab, sl_list);
				if (d->pg_ndirty)
					dirty_sub_locked(run_purge_locked(d, (unsigned)o));
			}
		}
	}
	if (keep == 0)
		h->dirty_low = 0;
	/* Not down to @keep after every list: the rest lies in runs below purge_order (or
	 * blocks there was no room to release), which no purge reaches until a free merges
	 * them.  Since the exact dirty count (2026-11-29) that rest no longer reads as 0,
	 * and with SHEAF_PURGE_MS=0 every page allocation walked the lists again for it. */
	h->purge_walks++;
	if (h->dirty_bytes > keep)
		h->dirty_stuck = h->dirty_bytes;
	/* The bound's purge (maybe_purge_locked) walks again only once an eighth more (at
	 * least a block) has been freed: a burst freed in random order leaves most of its
	 * dirt in runs below purge_order, every free then raised dirty_bytes above
	 * dirty_stuck by a page, and each walked every list again, most of it runs already
	 * given back.  Freeing 2 GiB of 256-byte objects in random order took 33 s against
	 * glibc's 2.7 (quadratic; adversarial run, 2026-11-29). */
	h->dirty_retry = h->dirty_bytes > keep ?
				 h->dirty_bytes + SHEAF_MAX(h->dirty_bytes / 8, SHEAF_BLOCK_SIZE) :
				 0;
}

/* The decay and the bound (see the header comment).  Locked. */
static void maybe_purge_locked(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	if (!h->dirty_bytes)
		return; /* nothing to purge, no clock to read; dirty_low is 0 */
	bool reachable = h->dirty_bytes > h->dirty_stuck; /* else no purge can give any */
	size_t bound = SHEAF_MAX(PAGE_DIRTY_MIN, h->mapped_bytes);
	if (reachable &&
	    (h->purge_ns == 0 || (h->dirty_bytes > bound && h->dirty_bytes >= h->dirty_retry)))
		purge_locked(h->purge_ns ? bound / 2 : 0);
	if (h->purge_ns == 0)
		return; /* everything reachable is purged at once: no decay epochs */
	uint64_t now = sheaf_os_now_ns();
	if (now - h->decay_epoch_ns < h->purge_ns / 2)
		return;
	/* dirty_low bytes were free through the whole epoch: give that much back. */
	if (h->dirty_low && h->dirty_bytes > h->dirty_stuck)
		purge_locked(h->dirty_bytes - SHEAF_MIN(h->dirty_low, h->dirty_bytes));
	h->decay_epoch_ns = now;
	h->dirty_low = h->dirty_bytes;
}

void sheaf_page_decay_tick(void)
{
	sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	maybe_purge_locked();
	sheaf_mutex_unlock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
}

/* A free run of @order or more from node @nid's lists, or its resident free block:
 * false when it has neither.  Locked. */
static bool take_free_locked(int nid, unsigned order, size_t *pg, unsigned *o_out, unsigned *ndirty)
{
	struct sheaf_heap *h = &sheaf_heap;
	unsigned o;
	for (o = order; o < SHEAF_BLOCK_ORDER; o++)
		if (!sheaf_list_empty(&h->free_area[nid][o]))
			break;
	struct sheaf_slab *d;
	if (o < SHEAF_BLOCK_ORDER) {
		d = sheaf_list_first(&h->free_area[nid][o], struct sheaf_slab, sl_list);
	} else if (!sheaf_list_empty(&h->dirty_blocks[nid])) {
		/* A free block still resident: reuse it before mapping another. */
		d = sheaf_list_first(&h->dirty_blocks[nid], struct sheaf_slab, sl_list);
	} else {
		return false;
	}
	sheaf_list_del(&d->sl_list);
	sheaf_wr(d->pg_kind, SHEAF_PG_UNUSED);
	*pg = (size_t)(d - h->desc);
	*o_out = o;
	*ndirty = d->pg_ndirty;
	return true;
}

void *sheaf_page_alloc(unsigned order, int nid)
{
	struct sheaf_heap *h = &sheaf_heap;
	sheaf_assert_internal(order <= SHEAF_BLOCK_ORDER);
	sheaf_mutex_lock(&h->lock, SHEAF_LOCK_HEAP);
	if (sheaf_unlikely(heap_fail_countdown >= 0)) {
		if (heap_fail_countdown == 0) {
			sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
			errno = ENOMEM;
			return NULL;
		}
		heap_fail_countdown--;
	}
	size_t pg = 0;
	unsigned o = order, ndirty = 0; /* a block taken by block_take_locked has none */
	/* This node's free runs and blocks, a new block, then (at the limit: the address
	 * space is exhausted) what other nodes have free, rather than fail. */
	int from = nid;
	if (!take_free_locked(nid, order, &pg, &o, &ndirty)) {
		long blk = block_take_locked(nid);
		if (blk >= 0) {
			pg = (size_t)blk << SHEAF_BLOCK_ORDER;
			o = SHEAF_BLOCK_ORDER;
		} else {
			for (from = 0; from < SHEAF_MAX_NODES; from++)
				if (from != nid && take_free_locked(from, order, &pg, &o, &ndirty))
					break;
			if (from == SHEAF_MAX_NODES) {
				sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
				errno = ENOMEM;
				return NULL;
			}
		}
	}
	/* Split down to the requested order; upper halves go back on the free lists with
	 * their dirty pages, which leave the dirty total only with the part handed out. */
	while (o > order) {
		o--;
		unsigned hi = ndirty == 0       ? 0 :
			      ndirty == 2u << o ? 1u << o :
						  dirty_count_locked(pg + (1ul << o), o);
		mark_free_locked(pg + (1ul << o), o, from, hi);
		ndirty -= hi;
	}
	dirty_sub_locked((size_t)ndirty << SHEAF_PAGE_SHIFT);
	h->mapped_bytes += SHEAF_PAGE_SIZE << order;
	maybe_purge_locked();
	sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
	return page_addr(pg);
}

void sheaf_page_free(void *p, unsigned order, int nid)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t pg = page_index(p);
	unsigned freed_order = order, ndirty = 1u << order;
	sheaf_mutex_lock(&h->lock, SHEAF_LOCK_HEAP);
	h->mapped_bytes -= SHEAF_PAGE_SIZE << order;
	/* Every page freed may be resident (a slab's were written). */
	for (size_t i = 0; i < (1ul << order); i++)
		h->desc[pg + i].pg_dirty = 1;
	while (order < SHEAF_BLOCK_ORDER) {
		size_t buddy = pg ^ (1ul << order);
		struct sheaf_slab *bd = &h->desc[buddy];
		/* The buddy may be a live slab whose descriptor its owner writes without
		 * this lock: read the kind atomically; pg_order of a FREE block is ours. */
		if (sheaf_rd(bd->pg_kind) != SHEAF_PG_FREE || bd->pg_order != order)
			break;
		sheaf_list_del(&bd->sl_list);
		sheaf_wr(bd->pg_kind, SHEAF_PG_UNUSED);
		ndirty += bd->pg_ndirty;
		pg &= ~(1ul << order);
		order++;
	}
	dirty_add_locked(SHEAF_PAGE_SIZE << freed_order);
	if (order == SHEAF_BLOCK_ORDER) {
		/* Keep the whole block resident for now (purge_locked gives it back). */
		struct sheaf_slab *d = &h->desc[pg];
		d->pg_order = SHEAF_BLOCK_ORDER;
		d->pg_node = (uint8_t)nid;
		d->pg_ndirty = (uint16_t)ndirty;
		sheaf_wr(d->pg_kind, SHEAF_PG_FREE);
		sheaf_list_add(&d->sl_list, &h->dirty_blocks[nid]);
	} else {
		mark_free_locked(pg, order, nid, ndirty);
	}
	maybe_purge_locked();
	sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
}

void sheaf_page_purge_all(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	sheaf_mutex_lock(&h->lock, SHEAF_LOCK_HEAP);
	/* Every dirty run of any order, and every whole free block with its metadata. */
	for (int n = 0; n < SHEAF_MAX_NODES; n++) {
		for (unsigned o = 0; o < SHEAF_BLOCK_ORDER; o++) {
			struct sheaf_list *pos;
			for (pos = h->free_area[n][o].next; pos != &h->free_area[n][o];
			     pos = pos->next) {
				struct sheaf_slab *d =
					sheaf_container_of(pos, struct sheaf_slab, sl_list);
				if (d->pg_ndirty)
					dirty_sub_locked(run_purge_locked(d, o));
			}
		}
	}
	purge_locked(0);
	sheaf_mutex_unlock(&h->lock, SHEAF_LOCK_HEAP);
}

/* ---- fork: rank HEAP (base/lock.h) ----------------------------------------------------- */

static void fork_take_heap(void)
{
	sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
}

static void fork_release_heap(bool child)
{
	(void)child;
	sheaf_mutex_unlock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
}

void sheaf_page_fork_register(void)
{
	static const struct sheaf_fork_ops ops = { fork_take_heap, fork_release_heap };
	sheaf_fork_register(SHEAF_LOCK_HEAP, &ops);
}
