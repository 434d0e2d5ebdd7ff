/* SPDX-License-Identifier: MIT */
/*
 * meta.c - the internal metadata allocator: sheaves, per-thread tables and pcs.
 *
 * Sheaves are themselves slab objects, as in the kernel (K§1.4), taken from a few
 * internal caches without sheaves ("sheaf-meta-N"), so Sheaf never calls malloc (it
 * may *be* malloc, under LD_PRELOAD) and never recurses: a cache without sheaves only
 * uses the slab path.  Requests over 4 KiB are mapped directly.
 */
#include <string.h>

#include "cache/cache.h"

static const uint32_t meta_sizes[] = { 64,  128,  192,  256,  384,  512,
				       768, 1024, 1536, 2048, 3072, 4096 };
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

static void *meta_alloc(size_t size)
{
	int k = meta_class(size);
	if (k < 0 || !meta_caches[k]) {
		size_t len = SHEAF_ALIGN_UP(size, SHEAF_PAGE_SIZE);
		void *p = sheaf_os_map(len);
		if (p)
			atomic_fetch_add(&meta_big_bytes, len);
		return p;
	}
	void *p = sheaf_cache_alloc(meta_caches[k]);
	if (p)
		memset(p, 0, meta_sizes[k]);
	return p;
}

static void meta_free(void *p, size_t size)
{
	if (!p)
		return;
	int k = meta_class(size);
	if (k < 0 || !meta_caches[k]) {
		size_t len = SHEAF_ALIGN_UP(size, SHEAF_PAGE_SIZE);
		sheaf_os_unmap(p, len);
		atomic_fetch_sub(&meta_big_bytes, len);
		return;
	}
	sheaf_cache_free(meta_caches[k], p);
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
