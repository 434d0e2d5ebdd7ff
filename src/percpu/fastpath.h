/* SPDX-License-Identifier: MIT */
/*
 * fastpath.h - the per-CPU layer's pop and push, written once (design §6).
 *
 * Every entry that takes an object from, or gives one to, a main sheaf goes through
 * these: the object API's single and bulk paths (cache/cache.c, cache/bulk.c), the malloc front
 * end's inline paths (malloc/malloc.h), prefilled sheaves, the RCU layer's rcu_free
 * sheaf, and the slow paths that run with the pcs locked.  Three levels:
 *
 *   sheaf_sheaf_pop / _push / _pop_n   a sheaf its caller owns: the pcs lock is held,
 *                                      or the sheaf is not installed anywhere;
 *   sheaf_cpu_pop / sheaf_cpu_push_*   the calling CPU's main in per-CPU mode: one
 *                                      restartable sequence each (rseq.h), no lock;
 *   sheaf_thread_pop / _push           the calling thread's main in per-thread mode:
 *                                      its owner, no lock.
 *
 * and their bulk forms (issue 18), sheaf_cpu_pop_n / _push_n (one restartable sequence
 * that copies as many pointers as main has, or has room for, and commits with one store
 * of the new size) and sheaf_thread_pop_n / _push_n (one memcpy), with
 * sheaf_free_batch_check, which makes every check of a single free for a whole run of
 * objects before any of them is copied.
 *
 * The cpu and thread functions return false when the fast path does not apply (main
 * empty or full, locked, another node's object, the other mode, an aborted sequence,
 * a check that wants the slow path); the caller then takes its slow path.  They are
 * always inlined, so that a miss is a jump to the caller's slow path, as if the
 * sequence were written in the caller (tools/fastpath-golden.sh counts the result).
 */
#ifndef SHEAF_PERCPU_FASTPATH_H
#define SHEAF_PERCPU_FASTPATH_H

#include <string.h>

#include "percpu/percpu.h"

#define sheaf_fast_inline static inline __attribute__((always_inline))

/* ---- A sheaf its caller owns ---------------------------------------------------------- */

/* The top object of @s, taken off; @s is not empty. */
sheaf_fast_inline void *sheaf_sheaf_pop(struct sheaf_sheaf *s)
{
	uint32_t n = s->size;
	sheaf_wr(s->size, n - 1); /* size is read racily by gauges and searches */
	return s->objects[n - 1];
}

/* @obj on top of @s; @s is not full. */
sheaf_fast_inline void sheaf_sheaf_push(struct sheaf_sheaf *s, void *obj)
{
	uint32_t n = s->size;
	s->objects[n] = obj;
	sheaf_wr(s->size, n + 1);
}

/* The top @n objects of @s (n <= size) into @objs, in the order they were pushed. */
sheaf_fast_inline void sheaf_sheaf_pop_n(struct sheaf_sheaf *s, void **objs, uint32_t n)
{
	memcpy(objs, s->objects + (s->size - n), n * sizeof(void *));
	sheaf_wr(s->size, s->size - n);
}

/* Is @obj the top of @s (the cheap double-free test when there is no free mark)? */
sheaf_fast_inline bool sheaf_sheaf_top_is(const struct sheaf_sheaf *s, const void *obj)
{
	return s->size && s->objects[s->size - 1] == obj;
}

/* ---- The calling CPU's main sheaf, per-CPU mode ------------------------------------- */

/* Pop into *@obj from the calling CPU's main of @c (non-NULL). */
sheaf_fast_inline bool sheaf_cpu_pop(struct sheaf_cache *c, void **obj)
{
#if SHEAF_HAVE_RSEQ
	void *o;
	SHEAF_RSEQ_POP(c, o, miss);
	*obj = o;
	return true;
miss:
#endif
	(void)c;
	(void)obj;
	return false;
}

/* Push @obj, whose page-map key the caller looked up (@key), on the calling CPU's main
 * of @c: the key must be the main's (this cache, this node, not the sentinel).  With
 * @mark (a constant where this is inlined) the sequence also tests and writes the free
 * mark of a SHEAF_MARK_WORD1 cache (rseq.h SHEAF_RSEQ_PUSH_SEQ_MARK). */
sheaf_fast_inline bool sheaf_cpu_push_key(struct sheaf_cache *c, void *obj, uintptr_t key,
					  bool mark)
{
#if SHEAF_HAVE_RSEQ
	if (mark)
		SHEAF_RSEQ_PUSH_KEY_MARK(c, obj, key, miss);
	else
		SHEAF_RSEQ_PUSH_KEY(c, obj, key, miss);
	return true;
miss:
#endif
	(void)c;
	(void)obj;
	(void)key;
	(void)mark;
	return false;
}

/* The same, looking the key up inside the sequence (the page map, bounded by
 * sheaf_heap.fast_limit), with the free mark of a SHEAF_MARK_WORD1 cache when @mark
 * (a constant where this is inlined), without for a cache whose checks are off. */
sheaf_fast_inline bool sheaf_cpu_push(struct sheaf_cache *c, void *obj, bool mark)
{
#if SHEAF_HAVE_RSEQ
	if (mark)
		SHEAF_RSEQ_PUSH_MARK(c, obj, miss);
	else
		SHEAF_RSEQ_PUSH(c, obj, miss);
	return true;
miss:
#endif
	(void)c;
	(void)obj;
	(void)mark;
	return false;
}

/* The page-map key of @obj if @obj lies in a slab of @c, else 0: what makes the
 * object's bytes safe to read before the sequence. */
sheaf_fast_inline uintptr_t sheaf_cpu_key_of(struct sheaf_cache *c, const void *obj)
{
	uintptr_t off = (uintptr_t)obj - (uintptr_t)sheaf_heap.base;
	if (sheaf_unlikely(off >= __atomic_load_n(&sheaf_heap.fast_limit, __ATOMIC_RELAXED)))
		return 0;
	uintptr_t key =
		__atomic_load_n(&sheaf_heap.pagemap[off >> SHEAF_PAGE_SHIFT], __ATOMIC_RELAXED);
	/* A raw entry: SHEAF_KEY_NONE reads as a node with no cache (page.h "Keys"). */
	if (sheaf_unlikely(!key || ((const struct sheaf_node *)key)->cache != c))
		return 0;
	return key;
}

/* Valgrind/ASan builds (SHEAF_TRACK_ENABLED): mark the object free for the tool before
 * it can enter a sheaf, and undo that if the sequence fails (the slow path marks it
 * again).  True when done (pushed, or a double free the tool saw, reported). */
sheaf_fast_inline bool sheaf_cpu_free_tracked(struct sheaf_cache *c, void *obj, uintptr_t key)
{
	if (sheaf_reg.mode != SHEAF_MODE_PERCPU || !sheaf_track_cache(c) || c->free_mark ||
	    (c->free_checks && !sheaf_obj_is_start(c, obj)))
		return false;
	if (sheaf_unlikely(sheaf_track_obj_free(c, obj))) {
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
		return true;
	}
	if (sheaf_likely(sheaf_cpu_push_key(c, obj, key, false)))
		return true;
	/* The contents stay as they were: defined (the slow path reads sheaf metadata
	 * objects, and the hook reads the object). */
	if (sheaf_track_asan_ok(c))
		sheaf_track_asan_unpoison(obj, c->object_size);
	sheaf_track_vg_malloc(obj, c->object_size, 1);
	return false;
}

/* A constructor or TYPESAFE_BY_RCU cache: the free mark past the object, written
 * before the sequence and put back if it fails. */
sheaf_fast_inline bool sheaf_cpu_free_mark_at(struct sheaf_cache *c, void *obj, uintptr_t key)
{
	if (sheaf_unlikely(!sheaf_obj_is_start(c, obj)))
		return false;
	uint64_t *mk = sheaf_mark_word(c, obj);
	uint64_t old = *mk;
	if (sheaf_unlikely(old == key))
		return false;
	*mk = key;
	if (sheaf_likely(sheaf_cpu_push_key(c, obj, key, false)))
		return true;
	*mk = old;
	return false;
}

/* Free @obj onto the calling CPU's main of @c (non-NULL) after the checks of every
 * free (slab/freecheck.h): the object start, then the free mark.  The usual case, a
 * plain cache (SHEAF_MARK_WORD1), is pure arithmetic and one sequence that looks the
 * key up, compares it with the main's ("this cache, this node, not the sentinel"),
 * tests and writes the mark and pushes; the other cases look the key up first, so
 * that the mark is safe to read. */
sheaf_fast_inline bool sheaf_cpu_free(struct sheaf_cache *c, void *obj)
{
	/* The usual cache (plain, a power-of-two slot, checks on) and an object start of it
	 * (a multiple of the slot), in one test: free_p2_mask is the slot mask there and all
	 * ones elsewhere, which any pointer but NULL fails (NULL then fails the sequence's
	 * heap bound, before the mark is touched).  Two instructions fewer than testing the
	 * kind of mark first (issue 14, tools/fastpath-golden.sh). */
	if (!SHEAF_TRACK_ENABLED && sheaf_likely(sheaf_and_zero((uintptr_t)obj, &c->free_p2_mask)))
		return sheaf_cpu_push(c, obj, true);
	/* Another slot size: the reciprocal multiply (slab/freecheck.h).  Tested before the
	 * failed mask's own case below, so that this case and the unchecked one make as many
	 * tests as before the mask (the kind of mark was tested first then). */
	if (sheaf_likely(c->free_mark == SHEAF_MARK_WORD1) && !SHEAF_TRACK_ENABLED)
		return sheaf_likely(sheaf_obj_is_start(c, obj)) && sheaf_cpu_push(c, obj, true);
	/* The checks turned off (SHEAF_FREE_CHECKS=0): nothing of the object is read, so
	 * its key need not be known before the sequence, whose one compare of the key with
	 * main's still sends a foreign pointer to the slow path.  Looking the key up first
	 * (the general case below: page map, then the node's cache) made the unchecked
	 * free 1.3x as slow as the checked one (docs/benchmarks.md, 2026-11-28). */
	if (!c->free_checks && !SHEAF_TRACK_ENABLED)
		return sheaf_cpu_push(c, obj, false);
	/* The usual cache, and not an object start: the slow path reports it. */
	if (sheaf_u8_is(&c->free_mark, SHEAF_MARK_WORD1_P2) && !SHEAF_TRACK_ENABLED)
		return false;
	uintptr_t key = sheaf_cpu_key_of(c, obj);
	if (sheaf_unlikely(!key))
		return false;
	if (SHEAF_TRACK_ENABLED)
		return sheaf_cpu_free_tracked(c, obj, key);
	if (c->free_mark)
		return sheaf_cpu_free_mark_at(c, obj, key);
	/* A checked cache without a mark (the unchecked ones left above). */
	if (sheaf_unlikely(!sheaf_obj_is_start(c, obj)))
		return false;
	return sheaf_cpu_push_key(c, obj, key, false);
}

/* ---- The calling thread's main sheaf, per-thread mode -------------------------------- */

/* Pop into *@obj from the calling thread's main of @c (non-NULL).  The pop is counted
 * in main->nalloc, harvested into the statistics at the next slow path (design §8). */
sheaf_fast_inline bool sheaf_thread_pop(struct sheaf_cache *c, void **obj)
{
	struct sheaf_pcs *pcs = sheaf_pcs_current(c);
	if (sheaf_unlikely(!pcs))
		return false;
	struct sheaf_sheaf *m = pcs->main;
	if (sheaf_unlikely(!m->size))
		return false;
	m->nalloc++;
	*obj = sheaf_sheaf_pop(m);
	return true;
}

/* Push @obj (page-map key @key) on the calling thread's main of @c (non-NULL), after
 * the checks of every free (slab/freecheck.h): one compare covers "this cache, this
 * node, not the sentinel", then the object start (unless the caller's own test has
 * shown it: @start_known, a constant where this is inlined), the free mark, and for
 * a cache without one the top of main (the cheap immediate double-free test).  No
 * free-check hook test: for a caller that read sheaf_heap.fast_limit, which is 0
 * while a hook is set (the malloc front end, malloc.h).  Returns false for the slow
 * path, which reports what is wrong; a double free seen by ASan is reported here and
 * counts as done. */
sheaf_fast_inline bool sheaf_thread_push_gated(struct sheaf_cache *c, void *obj, uintptr_t key,
					       bool start_known)
{
	struct sheaf_pcs *pcs = sheaf_pcs_current(c);
	if (sheaf_unlikely(!pcs))
		return false;
	struct sheaf_sheaf *m = pcs->main;
	if (sheaf_unlikely(key != m->key || m->size >= m->capacity ||
			   (!start_known && c->free_checks && !sheaf_obj_is_start(c, obj))))
		return false;
	if (c->free_mark) {
		if (sheaf_unlikely(*sheaf_mark_word(c, obj) == key))
			return false;
	} else if (sheaf_unlikely(sheaf_sheaf_top_is(m, obj))) {
		return false;
	}
	if (sheaf_unlikely(sheaf_track_obj_free(c, obj))) {
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
		return true;
	}
	if (c->free_mark)
		*sheaf_mark_word(c, obj) = key;
	sheaf_sheaf_push(m, obj);
	return true;
}

/* The same for any caller: a free-check hook sends every free to the slow path. */
sheaf_fast_inline bool sheaf_thread_push(struct sheaf_cache *c, void *obj, uintptr_t key)
{
	if (sheaf_unlikely(sheaf_free_check_hook_get()))
		return false;
	return sheaf_thread_push_gated(c, obj, key, false);
}

/* ---- Bulk (issue 18): a batch per sequence --------------------------------------------- */

/* The largest batch one bulk sequence moves: a sheaf never holds more (the capacity is
 * a uint32_t), and the count travels in one register. */
#define SHEAF_BULK_BATCH_MAX UINT32_MAX

/* Pop up to @want (>= 1) objects off the calling CPU's main of @c into @objs in one
 * restartable sequence (rseq.h SHEAF_RSEQ_POP_N); returns how many (0: the fast path
 * does not apply: main empty or locked, another mode, an aborted sequence). */
sheaf_fast_inline uint32_t sheaf_cpu_pop_n(struct sheaf_cache *c, void **objs, uint64_t want)
{
#if SHEAF_HAVE_RSEQ
	uint64_t got;
	SHEAF_RSEQ_POP_N(c, objs, want, got, miss);
	return (uint32_t)got;
miss:
#endif
	(void)c;
	(void)objs;
	(void)want;
	return 0;
}

/* Push up to @k (>= 1) objects of @objs, all with page-map key @key and all through
 * sheaf_free_batch_check, on the calling CPU's main of @c in one restartable sequence
 * (rseq.h SHEAF_RSEQ_PUSH_N); returns how many (as many as main had room for; 0: the
 * key is not main's, main is full or locked, another mode, an aborted sequence). */
sheaf_fast_inline uint32_t sheaf_cpu_push_n(struct sheaf_cache *c, void *const *objs, uint64_t k,
					    uintptr_t key)
{
#if SHEAF_HAVE_RSEQ
	uint64_t got;
	SHEAF_RSEQ_PUSH_N(c, objs, k, key, got, miss);
	return (uint32_t)got;
miss:
#endif
	(void)c;
	(void)objs;
	(void)k;
	(void)key;
	return 0;
}

/* Per-thread mode: pop up to @want objects off the calling thread's main (one memcpy);
 * returns how many (0: no pcs yet, main empty, or the other mode). */
sheaf_fast_inline uint32_t sheaf_thread_pop_n(struct sheaf_cache *c, void **objs, uint64_t want)
{
	struct sheaf_pcs *pcs = sheaf_pcs_current(c);
	if (sheaf_unlikely(!pcs))
		return 0;
	struct sheaf_sheaf *m = pcs->main;
	uint32_t take = (uint32_t)SHEAF_MIN((uint64_t)m->size, want);
	if (!take)
		return 0;
	m->nalloc += take; /* harvested like the single pop's (design §8) */
	sheaf_sheaf_pop_n(m, objs, take);
	return take;
}

/* Per-thread mode: push up to @k checked objects of key @key on the calling thread's
 * main (one memcpy); returns how many (0: no pcs, another key, main full, a free-check
 * hook, or the other mode). */
sheaf_fast_inline uint32_t sheaf_thread_push_n(struct sheaf_cache *c, void *const *objs, uint64_t k,
					       uintptr_t key)
{
	struct sheaf_pcs *pcs = sheaf_pcs_current(c);
	if (sheaf_unlikely(!pcs || sheaf_free_check_hook_get()))
		return 0;
	struct sheaf_sheaf *m = pcs->main;
	if (sheaf_unlikely(key != m->key || m->size >= m->capacity))
		return 0;
	uint32_t take = (uint32_t)SHEAF_MIN((uint64_t)(m->capacity - m->size), k);
	memcpy(m->objects + m->size, objs, take * sizeof(void *));
	sheaf_wr(m->size, m->size + take);
	return take;
}

/* Why sheaf_free_batch_check stopped before objs[k]. */
enum sheaf_batch_stop {
	SHEAF_BATCH_END,    /* k == n: every object passed */
	SHEAF_BATCH_OTHER,  /* objs[k] untouched: NULL, not an object start or not of @c
			       (the single free's slow path reports it), another key (the
			       next run), or seen free by ASan (reported by the slow path) */
	SHEAF_BATCH_MARKED, /* objs[k] has key *@key and passed the pointer checks, is
			       marked free for Valgrind/ASan, but holds the free mark:
			       maybe a double free, to confirm (sheaf_free_mark_check) once
			       objs[0..k) are where the search can see them */
};

/* sheaf_batch_check_p2's rounds, for a plain cache whose mark is the second word: from
 * objs[@i] on, four objects a round while they stay in one slab, with one slab-and-start
 * test (@test) for the four, then each mark (@fkey) tested and written in order, so that
 * a pointer given twice within the four finds the mark its first visit wrote.  @slab is
 * the slab of an object that has passed (its page-map key is the run's).  7.5
 * instructions an object against 11 (issue 18, callgrind, bulk of 32).  Returns where it
 * stopped: n, or fewer than four left, or a round with another slab, not a start, or a
 * mark (sheaf_batch_check_rest_p2 goes on from there one object at a time: it finds the
 * same again and says why, or moves to the next slab). */
sheaf_fast_inline size_t sheaf_batch_check_rounds(void *const *objs, size_t n, size_t i,
						  uintptr_t slab, uintptr_t test, uintptr_t fkey)
{
	for (; i + 4 <= n; i += 4) {
		uintptr_t o0 = (uintptr_t)objs[i], o1 = (uintptr_t)objs[i + 1];
		uintptr_t o2 = (uintptr_t)objs[i + 2], o3 = (uintptr_t)objs[i + 3];
		if (sheaf_unlikely((((o0 ^ slab) | (o1 ^ slab)) | ((o2 ^ slab) | (o3 ^ slab))) &
				   test))
			return i;
		if (sheaf_unlikely(*(sheaf_mark_t *)(o0 + 8) == fkey))
			return i;
		*(sheaf_mark_t *)(o0 + 8) = fkey;
		if (sheaf_unlikely(*(sheaf_mark_t *)(o1 + 8) == fkey))
			return i + 1;
		*(sheaf_mark_t *)(o1 + 8) = fkey;
		if (sheaf_unlikely(*(sheaf_mark_t *)(o2 + 8) == fkey))
			return i + 2;
		*(sheaf_mark_t *)(o2 + 8) = fkey;
		if (sheaf_unlikely(*(sheaf_mark_t *)(o3 + 8) == fkey))
			return i + 3;
		*(sheaf_mark_t *)(o3 + 8) = fkey;
	}
	return i;
}

/* The loop of sheaf_free_batch_check from objs[@i] on (objs[0] has key @run, so its slab
 * is known; every object before objs[@i] passed in that slab), every invariant in a
 * register.  Objects come in runs from one slab, and
 * slabs are aligned to their size with every page of a slab under the slab's key
 * (slab/slab.c), so an object in the slab of the last one looked up has key @run: the
 * page-map load is made only when the slab changes, (obj ^ slab) & ~slab_mask != 0.  A
 * power-of-two slot (@p2 the start mask, else 0) folds the object-start test (one AND,
 * as sheaf_cpu_free, slab/freecheck.h) into that same test; another slot size makes
 * the reciprocal one (@recip).  @mark_word1 (a constant where this is inlined): the
 * mark is the second word.  Returns the prefix length, the reason in *@stop. */
sheaf_fast_inline size_t sheaf_batch_check_loop(const struct sheaf_cache *c, void *const *objs,
						size_t n, size_t i, uintptr_t run, uintptr_t p2,
						bool recip, bool mark_word1,
						enum sheaf_batch_stop *stop)
{
	/* Locals, not fields: the mark stores may alias them (they would be reloaded for
	 * every object).  The heap's size is read once: every object of the call was
	 * allocated before it began. */
	const uintptr_t base = (uintptr_t)sheaf_heap.base, limit = sheaf_rd(sheaf_heap.size);
	const uintptr_t *pagemap = sheaf_heap.pagemap;
	const uintptr_t hi = ~c->slab_mask, test = hi | p2, fkey = run; /* the mark: the key */
	const uintptr_t mark_off = mark_word1 ? 8 : (c->free_mark ? c->mark_offset : 0);
	/* objs[0]'s slab, never objs[i]'s: objs[i] may be what stopped the rounds. */
	uintptr_t slab = (uintptr_t)objs[0] & hi;
	for (; i < n; i++) {
		uintptr_t obj = (uintptr_t)objs[i], x = obj ^ slab;
		if (sheaf_unlikely(x & test)) {
			if (x & hi) { /* another slab: its key */
				uintptr_t off = obj - base;
				if (off >= limit ||
				    __atomic_load_n(&pagemap[off >> SHEAF_PAGE_SHIFT],
						    __ATOMIC_RELAXED) != run)
					break;
				slab = obj & hi;
			}
			if (obj & p2)
				break;
		}
		if (recip && sheaf_unlikely(!sheaf_obj_is_start(c, (void *)obj)))
			break;
		if (sheaf_unlikely(sheaf_track_obj_free(c, (void *)obj)))
			break;
		if (mark_off) {
			sheaf_mark_t *mk = (sheaf_mark_t *)(obj + mark_off);
			if (sheaf_unlikely(*mk == fkey)) {
				*stop = SHEAF_BATCH_MARKED;
				return i;
			}
			*mk = fkey;
		}
	}
	*stop = i == n ? SHEAF_BATCH_END : SHEAF_BATCH_OTHER;
	return i;
}

/* The rest of a usual cache's run from objs[@i] (which stopped a round of
 * sheaf_batch_check_rounds, or one of the last three): the stopping round one object at
 * a time (a new slab's key looked up, a mark or a bad pointer found again and named),
 * then rounds again in the new slab.  Out of line (percpu/freecheck.c), so that the
 * rounds before it keep their registers (issue 18). */
size_t sheaf_batch_check_rest_p2(const struct sheaf_cache *c, void *const *objs, size_t n, size_t i,
				 uintptr_t run, enum sheaf_batch_stop *stop);

/* sheaf_batch_check_loop for the usual cache (plain, power-of-two slot, the mark in the
 * second word): rounds of four while the objects stay in one slab, then the rest out
 * of line.  Inlined with the rounds, the rest's page-map lookup kept the heap's bounds
 * in registers through them, and GCC saved five of the rounds' registers on the stack
 * on every call.  The check of a bulk of 8 took 134 instructions, now 117; of 32, 344 and
 * now 327 (callgrind, per-thread mode); bulk rows 0.89-0.98x the revision before
 * (tools/prev-ratios.sh -n 7, AMD EPYC, 2026-11-28). */
sheaf_fast_inline size_t sheaf_batch_check_p2(const struct sheaf_cache *c, void *const *objs,
					      size_t n, uintptr_t run, enum sheaf_batch_stop *stop)
{
	const uintptr_t hi = ~c->slab_mask;
	size_t i = sheaf_batch_check_rounds(objs, n, 0, (uintptr_t)objs[0] & hi, hi | c->start_mask,
					    run);
	if (sheaf_likely(i == n)) {
		*stop = SHEAF_BATCH_END;
		return n;
	}
	return sheaf_batch_check_rest_p2(c, objs, n, i, run, stop);
}

/* The checks every single free makes (sheaf_thread_push, the slow path's
 * cache_free_ptr_ok and sheaf_free_mark_take; slab/freecheck.h), made for a run of
 * objects before any of them is copied into a sheaf: the longest prefix of @objs whose
 * objects lie in slabs of @c with one page-map key (stored in *@key: one node, so one
 * compare with main's key covers the run), are object starts, and do not hold the free
 * mark; each gets the mark as it passes, so a pointer given twice in one call ([a, b, a])
 * finds the mark on its second visit.  Returns the prefix length k and why it stopped
 * in *@stop.  Per-thread and per-CPU mode alike; never called for a debug cache or with
 * a free-check hook (bulk.c sends those object by object to the slow path). */
sheaf_fast_inline size_t sheaf_free_batch_check(struct sheaf_cache *c, void *const *objs, size_t n,
						uintptr_t *key, enum sheaf_batch_stop *stop)
{
	uintptr_t run = sheaf_page_key(objs[0]); /* NULL: 0 */
	*key = run;
	if (sheaf_unlikely(!run || sheaf_key_owner(run)->cache != c)) {
		*stop = SHEAF_BATCH_OTHER;
		return 0;
	}
	/* The usual cache (plain, power-of-two slot, checks on) gets its own copy of the
	 * loop, with no test of the cases it is not. */
	if (sheaf_likely(c->free_mark == SHEAF_MARK_WORD1_P2) && !SHEAF_TRACK_ENABLED)
		return sheaf_batch_check_p2(c, objs, n, run, stop);
	const bool checks = c->free_checks;
	/* Checks off (SHEAF_FREE_CHECKS=0, no mark): the slab-change test alone, with the
	 * loop's parameters constants; the general loop below tests each one per object
	 * and was slower than the checked loop (issue 18, 2026-11-28). */
	if (!checks && !c->free_mark && !SHEAF_TRACK_ENABLED)
		return sheaf_batch_check_loop(c, objs, n, 0, run, 0, false, false, stop);
	const uintptr_t p2 = checks ? c->start_mask : 0;
	return sheaf_batch_check_loop(c, objs, n, 0, run, p2, checks && !p2,
				      c->free_mark >= SHEAF_MARK_WORD1, stop);
}

#endif /* SHEAF_PERCPU_FASTPATH_H */
