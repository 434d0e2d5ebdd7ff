/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the public single-object entry points, sheaf_cache_alloc and
 * sheaf_cache_free, with their slow paths (creation is in create.c, bulk in bulk.c,
 * prefilled sheaves in prefill.c, initialisation in init.c).
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

#include "cache/cache_impl.h"

/* Half the machine's memory (set at initialisation): the most one bulk call takes. */
size_t sheaf_bulk_limit = SIZE_MAX;

/* ---- Single-object allocation and free ------------------------------------------------ */

void *cache_alloc_from_slab(struct sheaf_cache *c, const void *caller)
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
		return cache_alloc_from_slab(c, caller);
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (!pcs) {
		sheaf_stat_atomic(c, SHEAF_STAT_PCS_LOCK_FAIL, 1);
		return cache_alloc_from_slab(c, caller);
	}
	struct sheaf_sheaf *m = pcs->main;
	/* A refill that found no memory (a heap block or a sheaf that could not be mapped)
	 * leaves ENOMEM in errno, and the slab path may still succeed: a successful
	 * allocation keeps the caller's errno (sheaf.h). */
	int e = errno;
	if (m->size == 0 && !sheaf_pcs_replace_empty_main(c, pcs)) {
		sheaf_pcs_unlock(c, pcs);
		void *o = cache_alloc_from_slab(c, caller);
		if (o)
			errno = e;
		return o;
	}
	errno = e;
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

/* sheaf_cache_alloc without its restartable attempt, for a caller whose own inline
 * attempt just failed (the malloc front end, malloc/malloc.h): where it failed
 * because the thread has no rseq CPU (per-thread mode, Valgrind), a second attempt
 * would fail the same way (issue 17: a malloc+free pair there made four). */
void *sheaf_cache_alloc_thread(struct sheaf_cache *c)
{
	return alloc_thread(c, __builtin_return_address(0));
}

void *sheaf_cache_alloc_caller(struct sheaf_cache *c, const void *caller)
{
	return alloc_thread(c, caller);
}

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

void cache_free_to_slab(struct sheaf_cache *c, void *obj)
{
	sheaf_slab_free_bulk(c, &obj, 1);
	sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, 1);
}

/* The pointer checks of every free: @obj lies in a slab of @c and is the start of an
 * object (reported otherwise).  @key is its page-map key. */
bool cache_free_ptr_ok(struct sheaf_cache *c, const void *obj, uintptr_t key, const char *op)
{
	const struct sheaf_node *n = sheaf_key_owner(key);
	if (sheaf_unlikely(!n || n->cache != c || c->debug_flags))
		return sheaf_slab_check_obj(c, obj, op) != NULL;
	if (sheaf_unlikely(c->free_checks && !sheaf_obj_is_start(c, obj))) {
		sheaf_error(SHEAF_ERR_INTERIOR, c->name, obj,
			    "%s of a pointer that is not the start of an object", op);
		return false;
	}
	return true;
}

void sheaf_cache_free_slowpath(struct sheaf_cache *c, void *obj, struct sheaf_pcs *unused)
{
	(void)unused;
	/* Reached by a tail call from the public free: our return address is the
	 * program's call site, which a debug cache records. */
	sheaf_cache_free_caller(c, obj, __builtin_return_address(0));
}

void sheaf_cache_free_caller(struct sheaf_cache *c, void *obj, const void *caller)
{
	if (!obj)
		return;
	if (!sheaf_cache_check(c))
		return;
	uintptr_t key = sheaf_page_key(obj);
	if (!cache_free_ptr_ok(c, obj, key, "free"))
		return; /* reported; with SHEAF_ON_ERROR=warn the object is leaked */
	void (*hook)(const void *, size_t) = sheaf_free_check_hook_get();
	if (hook)
		hook(obj, c->object_size);
	/* After the hook: fix-ups may still touch the object. */
	if (sheaf_unlikely(sheaf_track_obj_free(c, obj))) {
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
		return;
	}
	if (c->debug_flags) {
		if (sheaf_debug_slab_free(c, obj, caller) != 0)
			return;
		cache_free_to_slab(c, obj);
		return;
	}
	if (c->free_mark && !sheaf_free_mark_take(c, obj))
		return;
	if (atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) == 0) {
		cache_free_to_slab(c, obj);
		return;
	}
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (!pcs) {
		sheaf_stat_atomic(c, SHEAF_STAT_PCS_LOCK_FAIL, 1);
		cache_free_to_slab(c, obj);
		return;
	}
	if (key != pcs->key &&
	    (!c->policy.cache_remote_on_memoryless || sheaf_g.node_has_mem[pcs->node])) {
		/* K§2.5: remote-node objects bypass the sheaves -- except on a memoryless node,
		 * where every object is remote and is cached anyway (D3). */
		sheaf_pcs_unlock(c, pcs);
		cache_free_to_slab(c, obj);
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
		cache_free_to_slab(c, obj);
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
static sheaf_noinline void free_thread_noinline(struct sheaf_cache *c, void *obj)
{
	free_thread(c, obj);
}
#endif

SHEAF_API void sheaf_cache_free(struct sheaf_cache *c, void *obj)
{
#if SHEAF_HAVE_RSEQ
	/* Per-CPU fast path (fastpath.h, sheaf_cpu_free): the checks of every free, then a
	 * restartable sequence that pushes onto the current CPU's main.  A NULL cache, a
	 * foreign pointer, a destroyed cache or an installed free-check hook go slow. */
	if (sheaf_likely(c != NULL) && sheaf_likely(sheaf_cpu_free(c, obj)))
		return;
	free_thread_noinline(c, obj);
#else
	free_thread(c, obj);
#endif
}
