/* SPDX-License-Identifier: MIT */
/*
 * meta.c - the internal metadata allocator: sheaves, per-thread tables and pcs.
 *
 * Sheaves are themselves slab objects, as in the kernel (K§1.4), taken from a few
 * internal caches without sheaves ("sheaf-meta-N"), so Sheaf never calls malloc (it
 * may *be* malloc, under LD_PRELOAD) and never recurses: a cache without sheaves only
 * uses the slab path.  Sheaves of every capacity come from these caches: the classes
 * above 4 KiB exist for sheaves of more than 505 objects (up to SHEAF_MAX_SHEAF_CAPACITY),
 * so that every sheaf lives in a slab the page map knows.  A prefilled sheaf's return
 * and refill then find it in O(1) (cache/prefill.c prefilled_held), and a call with a
 * sheaf returned already reads no unmapped memory: until 2026-11-30 such sheaves had a
 * mapping each, unmapped at their return, found by a walk of the cache's lent sheaves
 * (8,000 sheaves of 506 objects returned oldest first: 19.8 s) and read after their
 * return by alloc_from (SIGSEGV).  Other requests over the largest class, and any
 * whose class has no memory (the heap window full), are mapped directly.
 */
#include <errno.h>
#include <string.h>

#include "cache/cache.h"

/* The largest sheaf, in bytes, rounded up to the classes' alignment. */
#define META_SHEAF_MAX \
	SHEAF_ALIGN_UP(SHEAF_SHEAF_HDR + SHEAF_MAX_SHEAF_CAPACITY * sizeof(void *), 64)
static const uint32_t meta_sizes[] = { 64,   128,  192,  256,  384,  512,   768,           1024,
				       1536, 2048, 3072, 4096, 8192, 16384, META_SHEAF_MAX };
#define META_NR (sizeof(meta_sizes) / sizeof(meta_sizes[0]))
static struct sheaf_cache *meta_caches[META_NR];
static atomic_size_t meta_big_bytes;

static void *meta_alloc(size_t size);
static void meta_free(void *p, size_t size);

/* The layers below allocate their metadata through sheaf_percpu_hooks: registered
 * first thing in sheaf_init.  Until sheaf_meta_init has created the caches, requests
 * are mapped directly. */
void sheaf_meta_register(void)
{
	sheaf_percpu_hooks.meta_alloc = meta_alloc;
	sheaf_percpu_hooks.meta_free = meta_free;
}

void sheaf_meta_init(void)
{
	for (size_t i = 0; i < META_NR; i++) {
		char name[32];
		snprintf(name, sizeof(name), "sheaf-meta-%u", meta_sizes[i]);
		struct sheaf_cache_args a = { .align = meta_sizes[i] >= 64 ? 64 : 16 };
		if (meta_sizes[i] % 64)
			a.align = 64; /* keep sheaves on their own cache lines */
		meta_caches[i] = sheaf_cache_create_internal(name, meta_sizes[i], &a, true);
	}
}

static inline int meta_class(size_t size)
{
	for (size_t i = 0; i < META_NR; i++)
		if (size <= meta_sizes[i])
			return (int)i;
	return -1;
}

static void *meta_map(size_t size)
{
	size_t len = SHEAF_ALIGN_UP(size, SHEAF_PAGE_SIZE);
	void *p = sheaf_os_map(len);
	if (p)
		atomic_fetch_add(&meta_big_bytes, len);
	return p;
}

static void *meta_alloc(size_t size)
{
	int k = meta_class(size);
	if (k < 0 || !meta_caches[k])
		return meta_map(size);
	int e = errno;
	void *p = sheaf_cache_alloc(meta_caches[k]);
	if (p) {
		memset(p, 0, meta_sizes[k]);
	} else if (sheaf_page_window_full()) {
		/* The heap window is full (SHEAF_HEAP_GB): a mapping of its own, a page at
		 * least, so that a prefill served from the cache's free objects, a new
		 * thread's table or a cache still work there (a prefill of 20 objects
		 * with 100 free failed with ENOMEM while alloc_bulk of 20 worked, until
		 * 2026-11-30).  Not under an address-space limit: there each failed
		 * refill's sheaf took a page of the room the program had left
		 * (test_malloc_as_hole). */
		p = meta_map(size);
		if (p)
			errno = e;
	}
	return p;
}

/* Freed where it came from, which the page map tells: a metadata slab, or a mapping of
 * its own (a request before sheaf_meta_init, over the largest class, or made when its
 * class had no memory). */
static void meta_free(void *p, size_t size)
{
	if (!p)
		return;
	uintptr_t key = 0; /* stays 0 outside the heap */
	bool in_heap = sheaf_page_lookup(p, &key);
	if (key) {
		struct sheaf_cache *m = sheaf_key_owner(key)->cache;
		sheaf_assert_internal(m->is_meta);
		sheaf_cache_free(m, p);
		return;
	}
	/* Heap memory no slab holds (metadata freed twice, a bug of ours): never unmapped
	 * from here, which would leave a hole in the window. */
	sheaf_assert_internal(!in_heap);
	if (sheaf_unlikely(in_heap))
		return;
	size_t len = SHEAF_ALIGN_UP(size, SHEAF_PAGE_SIZE);
	sheaf_os_unmap(p, len);
	atomic_fetch_sub(&meta_big_bytes, len);
}

bool sheaf_cache_is_meta(const struct sheaf_cache *c)
{
	for (size_t i = 0; i < META_NR; i++)
		if (meta_caches[i] == c)
			return true;
	return false;
}

size_t sheaf_meta_bytes(void)
{
	size_t b = atomic_load(&meta_big_bytes);
	for (size_t i = 0; i < META_NR; i++) {
		struct sheaf_cache *c = meta_caches[i];
		if (!c)
			continue;
		uint64_t slabs = 0, part = 0, inuse = 0;
		for (int n = 0; n < sheaf_g.nnodes; n++)
			sheaf_slab_node_counts(c->node[n], &slabs, &part, &inuse);
		b += slabs * (SHEAF_PAGE_SIZE << c->order);
	}
	return b;
}
