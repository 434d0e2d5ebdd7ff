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
	if (m->size == 0 && !sheaf_pcs_replace_empty_main(c, pcs)) {
		sheaf_pcs_unlock(c, pcs);
		return cache_alloc_from_slab(c, caller);
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

/* sheaf_cache_alloc without its restartable attempt, for a caller whose own inline
 * attempt just failed (the malloc front end, malloc/malloc.h): where it failed
 * because the thread has no rseq CPU (per-thread mode, Valgrind), a second attempt
 * would fail the same way (issue 17: a malloc+free pair there made four). */
void *sheaf_cache_alloc_thread(struct sheaf_cache *c)
{
	return alloc_thread(c, __builtin_return_address(0));
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
	if (!cache_free_ptr_ok(c, obj, key, "free"))
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
	if (key != pcs->key && (c->kernel_compat || sheaf_g.node_has_mem[pcs->node])) {
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
	/* A power-of-two slot: an object start is a multiple of it (one test); another
	 * slot size: the reciprocal multiply (slab/freecheck.h). */
	if (sheaf_likely(c->free_mark == SHEAF_MARK_WORD1_P2) && !SHEAF_TRACK_ENABLED) {
		if (sheaf_unlikely((uintptr_t)obj & c->start_mask))
			goto slow;
		if (sheaf_likely(sheaf_cpu_push_mark(c, obj)))
			return;
		goto slow;
	}
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
