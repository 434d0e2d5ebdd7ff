/* SPDX-License-Identifier: MIT */
/*
 * page.c - the page provider: slab memory from one reserved range of address space.
 *
 * Why one range: the free fast path must tell, in O(1) and for *any* pointer, whether
 * Sheaf owns it.  With every slab inside [base, base + size), that is one
 * subtraction and one compare, then a load from a flat page map (8 bytes per 4 KiB
 * page) that holds the owning cache node -- the key the fast path compares with its
 * sheaf's key.  Foreign pointers, pointers into free pages and into metadata (which
 * lives outside the range) all give key 0: "not ours".
 *
 * The range is reserved PROT_NONE (no commit charge) and committed in 2 MiB blocks.
 * Inside a block pages are handed out by a binary buddy allocator (orders 0..8), so a
 * slab of 2^k pages is 2^k-page aligned.  Freed pages are given back with MADV_DONTNEED
 * with a delay and a floor (jemalloc and mimalloc, purging large blocks at once, were 6x
 * slower on a large-allocation benchmark): free runs stay resident while the dirty
 * total is under max(4 MiB, mapped / 8) and younger than a second; past that, the
 * largest dirty runs of SHEAF_PURGE_ORDER (64 KiB) or more are purged, whole free
 * blocks first, together with their slices of the page map and descriptor array.
 * Shrink purges everything at once, so RSS returns to its starting point (issue: 1 GiB
 * burst test).
 *
 * Locking: sheaf_heap.lock protects the free lists, the block stack and the pg_* fields
 * of FREE descriptors.  It nests inside node->list_lock (design §4).
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

struct sheaf_heap sheaf_heap = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Fault injection (tests): page allocations left before they fail; -1 = off.
 * Protected by sheaf_heap.lock. */
static long heap_fail_countdown = -1;

void sheaf_os_inject_heap_failure(long n)
{
	pthread_mutex_lock(&sheaf_heap.lock);
	heap_fail_countdown = n;
	pthread_mutex_unlock(&sheaf_heap.lock);
}

static void *reserve_aligned(size_t size, size_t align, int prot)
{
	size_t len = size + align;
	char *p = mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	char *a = (char *)SHEAF_ALIGN_UP((uintptr_t)p, align);
	if (a > p)
		munmap(p, (size_t)(a - p));
	size_t tail = (size_t)((p + len) - (a + size));
	if (tail)
		munmap(a + size, tail);
	return a;
}

int sheaf_page_init(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	long gb = sheaf_option_long(SHEAF_OPT_HEAP_GB);
	/* Halve the reservation while the address space is tight (Valgrind, ulimit -v),
	 * down to 64 MiB. */
	for (size_t size = gb > 0 ? (size_t)gb << 30 : 0; size >= (64ul << 20); size /= 2) {
		size_t npages = size >> SHEAF_PAGE_SHIFT;
		char *base = reserve_aligned(size, SHEAF_BLOCK_SIZE, PROT_NONE);
		if (!base)
			continue;
		void *pm = reserve_aligned(npages * sizeof(uintptr_t), SHEAF_PAGE_SIZE, PROT_READ | PROT_WRITE);
		void *ds = reserve_aligned(npages * sizeof(struct sheaf_slab), SHEAF_PAGE_SIZE,
					   PROT_READ | PROT_WRITE);
		if (!pm || !ds) {
			munmap(base, size);
			if (pm)
				munmap(pm, npages * sizeof(uintptr_t));
			if (ds)
				munmap(ds, npages * sizeof(struct sheaf_slab));
			continue;
		}
		h->base = base;
		h->size = size;
		h->npages = npages;
		h->pagemap = pm;
		h->desc = ds;
		break;
	}
	if (!h->base)
		return -ENOMEM;
	for (int n = 0; n < SHEAF_MAX_NODES; n++) {
		for (int o = 0; o < SHEAF_BLOCK_ORDER; o++)
			sheaf_list_init(&h->free_area[n][o]);
		sheaf_list_init(&h->dirty_blocks[n]);
	}
	h->purge_order = (unsigned)sheaf_option_long(SHEAF_OPT_PURGE_ORDER);
	if (h->purge_order > SHEAF_BLOCK_ORDER)
		h->purge_order = SHEAF_BLOCK_ORDER;
	return 0;
}

static inline size_t page_index(const void *p)
{
	return (size_t)((const char *)p - sheaf_heap.base) >> SHEAF_PAGE_SHIFT;
}
static inline char *page_addr(size_t pg) { return sheaf_heap.base + (pg << SHEAF_PAGE_SHIFT); }

/* Purge a whole free block with its page-map and descriptor slices.  Locked. */
static void block_release_locked(size_t blk)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t pg = blk << SHEAF_BLOCK_ORDER;
	sheaf_os_purge(page_addr(pg), SHEAF_BLOCK_SIZE);
	/* 512 entries * 8 B = one page; 512 * 64 B = 8 pages: both page aligned. */
	sheaf_os_purge(&h->pagemap[pg], SHEAF_BLOCK_PAGES * sizeof(uintptr_t));
	sheaf_os_purge(&h->desc[pg], SHEAF_BLOCK_PAGES * sizeof(struct sheaf_slab));
	if (h->nr_free_blocks == h->cap_free_blocks) {
		size_t ncap = h->cap_free_blocks ? h->cap_free_blocks * 2 : 1024;
		uint32_t *nb = sheaf_os_map(ncap * sizeof(uint32_t));
		if (!nb) {
			/* Cannot remember it: leave the (purged) block unused rather than lose
			 * track of it; it costs address space only. */
			return;
		}
		if (h->free_blocks) {
			memcpy(nb, h->free_blocks, h->nr_free_blocks * sizeof(uint32_t));
			sheaf_os_unmap(h->free_blocks, h->cap_free_blocks * sizeof(uint32_t));
		}
		h->free_blocks = nb;
		h->cap_free_blocks = ncap;
	}
	h->free_blocks[h->nr_free_blocks++] = (uint32_t)blk;
}

static void mark_free_locked(size_t pg, unsigned order, int nid, int dirty)
{
	struct sheaf_slab *d = &sheaf_heap.desc[pg];
	sheaf_wr(d->pg_kind, SHEAF_PG_FREE);
	d->pg_order = (uint8_t)order;
	d->pg_node = (uint8_t)nid;
	d->pg_dirty = (uint8_t)dirty;
	sheaf_list_add(&d->sl_list, &sheaf_heap.free_area[nid][order]);
}

/* Take a whole 2 MiB block for @nid: a purged one, else a fresh one.  Locked. */
static long block_take_locked(int nid)
{
	struct sheaf_heap *h = &sheaf_heap;
	long blk;
	if (h->nr_free_blocks) {
		blk = h->free_blocks[--h->nr_free_blocks];
	} else {
		if ((h->next_block + 1) << SHEAF_BLOCK_SHIFT > h->size)
			return -1;
		blk = (long)h->next_block;
		if (mprotect(page_addr((size_t)blk << SHEAF_BLOCK_ORDER), SHEAF_BLOCK_SIZE,
			     PROT_READ | PROT_WRITE) != 0)
			return -1;
		sheaf_wr(h->next_block, h->next_block + 1); /* read racily by the reaper */
	}
	(void)nid; /* real NUMA placement: first touch by the node's CPUs (see docs) */
	return blk;
}

static inline void dirty_add_locked(size_t bytes)
{
	struct sheaf_heap *h = &sheaf_heap;
	if (!h->dirty_bytes)
		h->dirty_since_ns = sheaf_os_now_ns();
	h->dirty_bytes += bytes;
}

static inline void dirty_sub_locked(size_t bytes)
{
	struct sheaf_heap *h = &sheaf_heap;
	h->dirty_bytes = h->dirty_bytes > bytes ? h->dirty_bytes - bytes : 0;
}

/* Purge dirty free memory until at most @keep bytes stay resident: whole blocks first,
 * then the largest runs of purge_order or more.  Locked. */
static void purge_locked(size_t keep)
{
	struct sheaf_heap *h = &sheaf_heap;
	for (int n = 0; n < SHEAF_MAX_NODES && h->dirty_bytes > keep; n++) {
		while (!sheaf_list_empty(&h->dirty_blocks[n]) && h->dirty_bytes > keep) {
			struct sheaf_slab *d = sheaf_list_first(&h->dirty_blocks[n], struct sheaf_slab, sl_list);
			sheaf_list_del(&d->sl_list);
			sheaf_wr(d->pg_kind, SHEAF_PG_UNUSED);
			size_t pg = (size_t)(d - h->desc);
			h->returned_bytes += SHEAF_BLOCK_SIZE;
			dirty_sub_locked(SHEAF_BLOCK_SIZE);
			block_release_locked(pg >> SHEAF_BLOCK_ORDER);
		}
	}
	for (int o = SHEAF_BLOCK_ORDER - 1; o >= (int)h->purge_order && h->dirty_bytes > keep; o--) {
		for (int n = 0; n < SHEAF_MAX_NODES && h->dirty_bytes > keep; n++) {
			struct sheaf_list *pos;
			for (pos = h->free_area[n][o].next; pos != &h->free_area[n][o] && h->dirty_bytes > keep;
			     pos = pos->next) {
				struct sheaf_slab *d = sheaf_container_of(pos, struct sheaf_slab, sl_list);
				if (!d->pg_dirty)
					continue;
				sheaf_os_purge(page_addr((size_t)(d - h->desc)), SHEAF_PAGE_SIZE << o);
				h->returned_bytes += SHEAF_PAGE_SIZE << o;
				dirty_sub_locked(SHEAF_PAGE_SIZE << o);
				d->pg_dirty = 0;
			}
		}
	}
	if (keep == 0)
		h->dirty_bytes = 0; /* merges blur the estimate: everything is purged now */
}

/* The delay and the floor (see the header comment). Locked. */
static inline void maybe_purge_locked(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	if (!h->dirty_bytes)
		return;
	size_t limit = SHEAF_MAX((size_t)4 << 20, h->mapped_bytes / 8);
	if (h->dirty_bytes > limit)
		purge_locked(limit / 2);
	else if (sheaf_os_now_ns() - h->dirty_since_ns > 1000000000ull)
		purge_locked(0);
}

void *sheaf_page_alloc(unsigned order, int nid)
{
	struct sheaf_heap *h = &sheaf_heap;
	sheaf_assert_internal(order <= SHEAF_BLOCK_ORDER);
	pthread_mutex_lock(&h->lock);
	if (sheaf_unlikely(heap_fail_countdown >= 0)) {
		if (heap_fail_countdown == 0) {
			pthread_mutex_unlock(&h->lock);
			errno = ENOMEM;
			return NULL;
		}
		heap_fail_countdown--;
	}
	size_t pg = 0;
	unsigned o;
	for (o = order; o < SHEAF_BLOCK_ORDER; o++)
		if (!sheaf_list_empty(&h->free_area[nid][o]))
			break;
	int dirty = 0;
	if (o < SHEAF_BLOCK_ORDER) {
		struct sheaf_slab *d = sheaf_list_first(&h->free_area[nid][o], struct sheaf_slab, sl_list);
		sheaf_list_del(&d->sl_list);
		pg = (size_t)(d - h->desc);
		dirty = d->pg_dirty;
		if (dirty)
			dirty_sub_locked(SHEAF_PAGE_SIZE << o);
		sheaf_wr(d->pg_kind, SHEAF_PG_UNUSED);
	} else if (!sheaf_list_empty(&h->dirty_blocks[nid])) {
		/* A free block still resident: reuse it before committing another. */
		struct sheaf_slab *d = sheaf_list_first(&h->dirty_blocks[nid], struct sheaf_slab, sl_list);
		sheaf_list_del(&d->sl_list);
		sheaf_wr(d->pg_kind, SHEAF_PG_UNUSED);
		pg = (size_t)(d - h->desc);
		dirty = 1;
		dirty_sub_locked(SHEAF_BLOCK_SIZE);
		o = SHEAF_BLOCK_ORDER;
	} else {
		long blk = block_take_locked(nid);
		if (blk < 0) {
			pthread_mutex_unlock(&h->lock);
			errno = ENOMEM;
			return NULL;
		}
		pg = (size_t)blk << SHEAF_BLOCK_ORDER;
		o = SHEAF_BLOCK_ORDER;
	}
	/* Split down to the requested order; upper halves go back on the free lists. */
	while (o > order) {
		o--;
		mark_free_locked(pg + (1ul << o), o, nid, dirty);
	}
	h->mapped_bytes += SHEAF_PAGE_SIZE << order;
	maybe_purge_locked();
	pthread_mutex_unlock(&h->lock);
	return page_addr(pg);
}

void sheaf_page_free(void *p, unsigned order, int nid)
{
	struct sheaf_heap *h = &sheaf_heap;
	size_t pg = page_index(p);
	int dirty = 1;
	unsigned freed_order = order;
	pthread_mutex_lock(&h->lock);
	h->mapped_bytes -= SHEAF_PAGE_SIZE << order;
	while (order < SHEAF_BLOCK_ORDER) {
		size_t buddy = pg ^ (1ul << order);
		struct sheaf_slab *bd = &h->desc[buddy];
		/* The buddy may be a live slab whose descriptor its owner writes without
		 * this lock: read the kind atomically; pg_order of a FREE block is ours. */
		if (sheaf_rd(bd->pg_kind) != SHEAF_PG_FREE || bd->pg_order != order)
			break;
		sheaf_list_del(&bd->sl_list);
		sheaf_wr(bd->pg_kind, SHEAF_PG_UNUSED);
		dirty |= bd->pg_dirty;
		pg &= ~(1ul << order);
		order++;
	}
	dirty_add_locked(SHEAF_PAGE_SIZE << freed_order);
	if (order == SHEAF_BLOCK_ORDER) {
		/* Keep the whole block resident for now (purge_locked gives it back). */
		struct sheaf_slab *d = &h->desc[pg];
		d->pg_order = SHEAF_BLOCK_ORDER;
		d->pg_node = (uint8_t)nid;
		d->pg_dirty = 1;
		sheaf_wr(d->pg_kind, SHEAF_PG_FREE);
		sheaf_list_add(&d->sl_list, &h->dirty_blocks[nid]);
	} else {
		mark_free_locked(pg, order, nid, dirty);
	}
	maybe_purge_locked();
	pthread_mutex_unlock(&h->lock);
}

void sheaf_page_purge_all(void)
{
	struct sheaf_heap *h = &sheaf_heap;
	pthread_mutex_lock(&h->lock);
	/* Every dirty run of any order, and every whole free block with its metadata. */
	h->dirty_bytes = SIZE_MAX;
	for (int n = 0; n < SHEAF_MAX_NODES; n++) {
		for (unsigned o = 0; o < SHEAF_BLOCK_ORDER; o++) {
			struct sheaf_list *pos;
			for (pos = h->free_area[n][o].next; pos != &h->free_area[n][o]; pos = pos->next) {
				struct sheaf_slab *d = sheaf_container_of(pos, struct sheaf_slab, sl_list);
				if (!d->pg_dirty)
					continue;
				sheaf_os_purge(page_addr((size_t)(d - h->desc)), SHEAF_PAGE_SIZE << o);
				h->returned_bytes += SHEAF_PAGE_SIZE << o;
				d->pg_dirty = 0;
			}
		}
	}
	purge_locked(0);
	h->dirty_bytes = 0;
	pthread_mutex_unlock(&h->lock);
}
