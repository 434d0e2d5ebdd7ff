/* SPDX-License-Identifier: MIT */
/*
 * page/page.h - the page provider's interface (layer 2 of src/README.md).
 *
 * Owns: the reserved heap range, its 2 MiB blocks and buddy free lists, the page map
 * (pointer -> owning cache node, O(1) for any pointer, docs/architecture.md) and the array of
 * 64-byte page descriptors, which the slab layer uses as its slab records.
 *
 * May call: base/.  Its lock, sheaf_heap.lock, nests inside every other lock
 * (docs/locking.md).
 */
#ifndef SHEAF_LAYER_PAGE_H
#define SHEAF_LAYER_PAGE_H

#include "base/base.h"

struct sheaf_node; /* slab/slab.h: the page map's keys are cache nodes */

/* ---- Page descriptor: one 64-byte record per heap page (K§1.1) ---------------------- */

enum sheaf_page_kind {
	SHEAF_PG_UNUSED = 0, /* never handed out, or inside a free block (not its head) */
	SHEAF_PG_FREE,       /* head page of a free buddy block */
	SHEAF_PG_SLAB,       /* first page of a slab: the whole record is the slab */
	SHEAF_PG_TAIL,       /* other page of a slab: pg_head_delta leads to the first */
};

/* The sl_* fields belong to the slab layer (slab/), the pg_* fields to this one. */
struct sheaf_slab {
	_Atomic uint64_t sl_fc;     /* freelist head, inuse, objects, frozen (slab/slab.h) */
	struct sheaf_node *sl_node; /* owner; constant while the slab lives */
	char *sl_base;              /* first slot */
	union {
		struct sheaf_list sl_list; /* SLAB: node partial list, protected by list_lock.
					       FREE: buddy free list, protected by sheaf_heap.lock */
		void *sl_rcu[2];           /* a discarded TYPESAFE_BY_RCU slab waiting for its
					       grace period: the rcu_head (rcu/rcu_free.c) */
	};
	uint32_t pg_head_delta; /* TAIL: pages back to the slab's first page */
	uint8_t pg_kind;        /* enum sheaf_page_kind; written under sheaf_heap.lock
					 (FREE) or before the slab is published (SLAB/TAIL) */
	uint8_t pg_order;       /* FREE/SLAB: block order */
	uint8_t pg_dirty;       /* every page, while free: freed since it was last purged
				   (may be resident); page.c, under sheaf_heap.lock */
	uint8_t pg_node;        /* FREE/SLAB: memory node of the block */
	uint8_t sl_on_partial;  /* protected by sl_node->list_lock */
	uint8_t sl_pad;
	uint16_t pg_ndirty; /* FREE head: how many of the run's pages are pg_dirty */
	uint64_t sl_pad2;
} sheaf_aligned(SHEAF_CACHELINE);

/* ---- page.c: the page heap ------------------------------------------------------------ */
/* The heap is a window of address space, [base, base + cap), chosen at init and never
 * reserved as a whole: 2 MiB blocks are mapped inside it one by one as slabs need them
 * and unmapped when purged, and the page map and descriptors (flat arrays indexed by
 * page) are mapped for the part covered so far, [base, base + size), which grows in
 * steps.  So the heap takes from RLIMIT_AS what it uses (page.c has the reasons). */
struct sheaf_heap {
	char *base;              /* the heap window, 2 MiB aligned; fixed after init */
	size_t size;             /* bytes of the window covered by pagemap and desc; grows
				       under lock, read racily (sheaf_rd) by the lookups */
	size_t cap;              /* window bytes (SHEAF_HEAP_GB): size never passes it */
	uintptr_t *pagemap;      /* key per page (below): owning sheaf_node, SHEAF_KEY_NONE
				    or 0 if not a slab page */
	struct sheaf_slab *desc; /* descriptor per page */
	/* The free fast paths (percpu/rseq.h, malloc/malloc.h) accept a pointer p with
	 * p - base below this: the blocks reached so far (every entry below it a key or
	 * SHEAF_KEY_NONE, never 0), or 0 while the gate is closed.  With
	 * base and pagemap in the one line those paths read. */
	uintptr_t fast_limit;
	/* Protects everything below.  On a line of its own: every page taken or given
	 * back locks it, and in the line above, each lock took base, pagemap and
	 * fast_limit away from the other CPUs, whose next free missed. */
	pthread_mutex_t lock sheaf_aligned(SHEAF_CACHELINE);
	struct sheaf_list free_area[SHEAF_MAX_NODES][SHEAF_BLOCK_ORDER];
	size_t next_block;     /* bump index of never-used blocks (read racily) */
	uint32_t *free_blocks; /* unmapped whole blocks, reusable by any node; entries
				       with SHEAF_BLOCK_STILL_MAPPED set failed to unmap */
	size_t nr_free_blocks, cap_free_blocks;
	struct sheaf_list dirty_blocks[SHEAF_MAX_NODES]; /* free whole blocks not yet purged */
	size_t dirty_bytes;                              /* free pages with pg_dirty, in bytes */
	size_t dirty_stuck;      /* dirty bytes the last purge could not reach (runs below
				   purge_order): while dirty_bytes stays at or below it no purge
				   walks the lists (page.c maybe_purge_locked) */
	size_t dirty_retry;      /* after a purge that left dirt it could not reach, the
				   dirty bytes at which the bound's purge walks again: one walk
				   per slack freed, not one per page (page.c purge_locked) */
	size_t purge_walks;      /* purges that walked the free lists (tests) */
	size_t dirty_low;        /* the least dirty_bytes since decay_epoch_ns: what stayed
				       unused through the whole epoch (page.c, decay) */
	uint64_t decay_epoch_ns; /* start of the current decay epoch */
	size_t mapped_bytes;     /* pages handed to slabs (read racily) */
	size_t returned_bytes;   /* dirty pages purged over the process life (read racily:
				   written with sheaf_wr under the lock) */
	size_t blocks_mapped;    /* blocks of address space held now (the same) */
	size_t holes;            /* blocks given up: something else was mapped there */
	bool gate_closed;        /* sheaf_page_fast_gate(true): fast frees go slow */
	unsigned purge_order;
	uint64_t purge_ns; /* SHEAF_PURGE_MS: the decay time */
};
#define SHEAF_BLOCK_STILL_MAPPED 0x80000000u
extern struct sheaf_heap sheaf_heap sheaf_hidden; /* hidden: RIP-relative loads on the fast paths */
/* Close (or reopen) the free fast paths: every free then takes the slow path. */
void sheaf_page_fast_gate(bool closed);
int sheaf_page_init(void);
void *sheaf_page_alloc(unsigned order, int nid); /* NULL + ENOMEM on failure */
void sheaf_page_free(void *p, unsigned order, int nid);
void sheaf_page_purge_all(void);     /* purge dirty free blocks */
void sheaf_page_decay_tick(void);    /* purge what stayed unused for an epoch (reaper) */
void sheaf_page_fork_register(void); /* rank HEAP of the fork walk (base/lock.h) */
/* Fault injection for tests: the next @n page allocations succeed, then every one
 * fails (as if the heap were full) until reset with -1. */
void sheaf_os_inject_heap_failure(long n);

/* ---- Keys: what the page map holds ------------------------------------------------------
 * A slab page's entry is the key of its owning cache node, the node's address, and
 * every sheaf carries the key of the node it takes objects of (percpu.h), so "this
 * object may go onto this sheaf" is one compare.  Every other page below
 * sheaf_heap.fast_limit (free pages, pages of released blocks, holes) holds
 * SHEAF_KEY_NONE, the address of sheaf_page_none: read-only zeroes that read as a node
 * with no cache and no objects.  So the free fast paths never find 0 and read the
 * node's fields with no test of the key first (malloc.h sheaf_free_inline: two
 * instructions fewer, tools/fastpath-golden.sh); the page-map slice of every block is
 * filled with it when the block is first reached, fast_limit stays below the blocks
 * reached, and the slices are never purged (one page per 2 MiB block ever used: 0.2 %
 * of the heap's high-water mark, page.c).  Entries above the blocks reached are 0; the
 * slow paths bound their lookups by the covered size and take both 0 and
 * SHEAF_KEY_NONE for "no slab" (sheaf_page_key gives 0 for both).  The same key is the
 * free mark (slab/freecheck.h). */
#define SHEAF_PAGE_NONE_WORDS 32 /* bytes 0..255: every field the fast paths read */
extern const uintptr_t sheaf_page_none[SHEAF_PAGE_NONE_WORDS] sheaf_hidden;
#define SHEAF_KEY_NONE ((uintptr_t)sheaf_page_none)

/* The key of @owner (a cache node), never 0 or SHEAF_KEY_NONE. */
static inline uintptr_t sheaf_key_encode(const void *owner)
{
	return (uintptr_t)owner;
}
/* Is @k a slab's key, not 0 or SHEAF_KEY_NONE? */
static inline bool sheaf_key_is_slab(uintptr_t k)
{
	return k && k != SHEAF_KEY_NONE;
}
/* The cache node whose key is @k, NULL for 0 and SHEAF_KEY_NONE. */
static inline struct sheaf_node *sheaf_key_owner(uintptr_t k)
{
	return sheaf_key_is_slab(k) ? (struct sheaf_node *)k : NULL;
}

/* Is @p inside the heap window's mapped part (a slab, a free or given-back page)?  Its
 * key then in *@key (0 where no slab is), with one test of the window. */
static inline bool sheaf_page_lookup(const void *p, uintptr_t *key)
{
	uintptr_t off = (uintptr_t)p - (uintptr_t)sheaf_heap.base;
	if (sheaf_unlikely(off >= sheaf_rd(sheaf_heap.size)))
		return false;
	uintptr_t k =
		__atomic_load_n(&sheaf_heap.pagemap[off >> SHEAF_PAGE_SHIFT], __ATOMIC_RELAXED);
	*key = k == SHEAF_KEY_NONE ? 0 : k;
	return true;
}
/* O(1) pointer -> key, for any pointer (foreign ones give 0). */
static inline uintptr_t sheaf_page_key(const void *p)
{
	uintptr_t k;
	return sheaf_page_lookup(p, &k) ? k : 0;
}
/* Has the heap used every block of its window (SHEAF_HEAP_GB), with none given back to
 * take again?  Read racily: a hint for callers that would look elsewhere for memory,
 * which an address-space limit (where looking elsewhere takes the room the heap lacks)
 * does not warrant. */
static inline bool sheaf_page_window_full(void)
{
	return (sheaf_rd(sheaf_heap.next_block) + 1) << SHEAF_BLOCK_SHIFT > sheaf_heap.cap &&
	       sheaf_rd(sheaf_heap.nr_free_blocks) == 0;
}
/* Is @p inside the heap window's mapped part (a slab, a free or given-back page)? */
static inline bool sheaf_page_in_heap(const void *p)
{
	return (uintptr_t)p - (uintptr_t)sheaf_heap.base < sheaf_rd(sheaf_heap.size);
}
/* The slab holding @p, or NULL if @p is not inside a live slab of Sheaf. */
static inline struct sheaf_slab *sheaf_page_slab(const void *p)
{
	uintptr_t off = (uintptr_t)p - (uintptr_t)sheaf_heap.base;
	if (sheaf_unlikely(off >= sheaf_rd(sheaf_heap.size)))
		return NULL;
	size_t pg = off >> SHEAF_PAGE_SHIFT;
	if (!sheaf_key_is_slab(__atomic_load_n(&sheaf_heap.pagemap[pg], __ATOMIC_ACQUIRE)))
		return NULL;
	struct sheaf_slab *d = &sheaf_heap.desc[pg];
	if (sheaf_rd(d->pg_kind) == SHEAF_PG_TAIL)
		d -= d->pg_head_delta;
	return d;
}

#endif /* SHEAF_LAYER_PAGE_H */
