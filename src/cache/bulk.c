/* SPDX-License-Identifier: MIT */
/*
 * bulk.c - bulk allocation and free (K§2.8): whole runs of objects through the
 * calling CPU's sheaves, the rest straight from and to slabs.  The copy to and from
 * the current main is one restartable sequence per run, no lock (issue 18,
 * percpu/fastpath.h); the free checks are made for a run before it is copied.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_impl.h"

/* ---- Bulk (K§2.8) ------------------------------------------------------------------ */

/* Should a bulk call of @n objects step the adaptive capacity up (D2)?  When it is
 * larger than main but within twice its capacity, so that one step makes the call fit
 * (128 on a 64-byte cache: 121 -> 249).  Much larger calls (512) move sheaves and slabs
 * either way, and larger sheaves made them slower: bulk512/64 1.4-1.6x the previous
 * revision with the step taken for every size (2026-11-27, AMD EPYC, three runs). */
static inline bool bulk_wants_step(struct sheaf_cache *c, const struct sheaf_pcs *pcs, size_t n)
{
	uint32_t cap = pcs->main->capacity;
	return n > cap && n <= 2 * (size_t)cap &&
	       atomic_load_explicit(&c->capacity_adaptive, memory_order_relaxed);
}

/* Step 1: as many objects as the calling CPU's main, spare and barn have: first what
 * main holds, in one restartable sequence (or one memcpy per-thread), no lock (issue
 * 18); then under its lock; returns how many went into @objs. */
static size_t bulk_from_sheaves(struct sheaf_cache *c, size_t n, void **objs)
{
	if (!atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) || c->debug_flags)
		return 0;
	uint64_t want = SHEAF_MIN(n, (size_t)SHEAF_BULK_BATCH_MAX);
	uint32_t got = sheaf_cpu_pop_n(c, objs, want);
	if (!got)
		got = sheaf_thread_pop_n(c, objs, want);
	size_t done = got;
	if (done == n)
		return done;
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (!pcs)
		return done;
	/* Larger than a sheaf, on a cache whose capacity adapts (D2): after the loop. */
	bool larger = bulk_wants_step(c, pcs, n);
	while (done < n) {
		struct sheaf_sheaf *m = pcs->main;
		uint32_t take = (uint32_t)SHEAF_MIN((size_t)m->size, n - done);
		if (take) { /* never write to the shared sentinel */
			sheaf_sheaf_pop_n(m, objs + done, take);
			done += take;
			sheaf_stat_add(pcs, SHEAF_STAT_ALLOC_FASTPATH, take);
		}
		if (done == n)
			break;
		/* Swap in a spare or a barn sheaf, but do not refill a sheaf only to copy it
		 * out again: the rest comes from slabs directly (K§2.8). */
		struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
		if (!(pcs->spare && pcs->spare->size) && !(b->enabled && sheaf_rd(b->nr_full)))
			break;
		if (!sheaf_pcs_swap_or_barn(c, pcs) || !pcs->main->size)
			break;
	}
	if (larger)
		sheaf_pcs_bulk_fit(c, pcs, n);
	sheaf_pcs_unlock(c, pcs);
	return done;
}

/* Step 2: up to @rest objects straight from slabs; returns how many.  @caller: the
 * program's call site, for debug caches. */
static size_t bulk_from_slabs(struct sheaf_cache *c, size_t rest, void **objs, const void *caller)
{
	struct sheaf_node *nd = local_mem_node(c);
	size_t got = 0;
	while (got < rest) {
		unsigned want = (unsigned)SHEAF_MIN(rest - got, (size_t)1u << 30);
		unsigned k;
		if (c->debug_flags) {
			void *o = cache_alloc_from_slab(c, caller);
			k = o ? 1 : 0;
			if (o)
				objs[got] = o;
		} else {
			k = sheaf_slab_refill(c, nd, objs + got, want, want);
			sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_SLOWPATH, k);
		}
		if (!k)
			break;
		got += k;
	}
	return got;
}

/* sheaf_cache_check's usual answer without its call (a dozen instructions on every bulk
 * call, issue 18); anything else goes there to be reported. */
static inline bool bulk_cache_ok(const struct sheaf_cache *c)
{
	return sheaf_likely(c &&
			    __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) == SHEAF_CACHE_LIVE) ||
	       sheaf_cache_check(c);
}

/* Objects handed out: the free mark cleared, the memory tools told. */
static inline void bulk_hand_out(struct sheaf_cache *c, void **objs, size_t n)
{
	if (sheaf_likely(c->free_mark >= SHEAF_MARK_WORD1) && !SHEAF_TRACK_ENABLED) {
		/* The usual cache: one store per object, the mark's place a constant
		 * (sheaf_mark_clear's first case), the mark kind tested once per call;
		 * four objects per round to spread the loop's own instructions. */
		size_t i = 0;
		for (; i + 4 <= n; i += 4) {
			*(sheaf_mark_t *)((uintptr_t)objs[i] + 8) = 0;
			*(sheaf_mark_t *)((uintptr_t)objs[i + 1] + 8) = 0;
			*(sheaf_mark_t *)((uintptr_t)objs[i + 2] + 8) = 0;
			*(sheaf_mark_t *)((uintptr_t)objs[i + 3] + 8) = 0;
		}
		for (; i < n; i++)
			*(sheaf_mark_t *)((uintptr_t)objs[i] + 8) = 0;
		return;
	}
	/* No mark (SHEAF_FREE_CHECKS=0) and no tool: nothing to do.  The loop below would
	 * still test the mark kind for every object (it is reloaded after each store):
	 * 12 instructions per object against 6 with the checks on (issue 18, callgrind,
	 * bulk of 32). */
	if (!c->free_mark && !SHEAF_TRACK_ENABLED)
		return;
	for (size_t i = 0; i < n; i++) {
		sheaf_mark_clear(c, objs[i]);
		sheaf_track_obj_alloc(c, objs[i]);
	}
}

SHEAF_API size_t sheaf_cache_alloc_bulk(struct sheaf_cache *c, size_t n, void **objs)
{
	if (n == 0)
		return 0;
	/* 0 means failure here, and a caller tells why by errno (sheaf.h): a NULL array
	 * or a bad handle (reported) left it as it was, perhaps an old ENOMEM. */
	if (!objs || !bulk_cache_ok(c)) {
		errno = EINVAL;
		return 0;
	}
	/* All or nothing: a request for more than half the machine's memory fails at once
	 * instead of filling it first.  A multiply, not a division (n > limit / slot is
	 * the same test): a 64-bit divide takes tens of cycles on older x86 cores, on
	 * every call. */
	size_t bytes;
	if (__builtin_mul_overflow(n, (size_t)c->slot_size, &bytes) || bytes > sheaf_bulk_limit) {
		errno = ENOMEM;
		return 0;
	}
	int e = errno; /* kept on success: a failed step on the way may set it (sheaf.h) */
	size_t done = bulk_from_sheaves(c, n, objs);
	bulk_hand_out(c, objs, done);
	if (done < n) {
		size_t got = bulk_from_slabs(c, n - done, objs + done, __builtin_return_address(0));
		bulk_hand_out(c, objs + done, got);
		if (got < n - done) {
			/* All or nothing (K§2.8 step 4). */
			sheaf_cache_free_bulk(c, done + got, objs);
			errno = ENOMEM;
			return 0;
		}
	}
	errno = e;
	return n;
}

/* Objects that passed sheaf_free_batch_check (they carry the free mark), all with
 * page-map key @key, that the fast path did not take (the last @k of a run of @run):
 * onto the calling CPU's (or thread's) sheaves under the pcs lock, exchanging a full
 * main with the barn as often as needed, or to their slabs (another node's objects,
 * K§2.5; no pcs). */
static void free_checked_locked(struct sheaf_cache *c, void *const *objs, size_t k, uintptr_t key,
				size_t run)
{
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (!pcs)
		sheaf_stat_atomic(c, SHEAF_STAT_PCS_LOCK_FAIL, 1);
	else if (key == pcs->key ||
		 (c->policy.cache_remote_on_memoryless && !sheaf_g.node_has_mem[pcs->node])) {
		/* K§2.5: remote objects bypass the sheaves, except on a memoryless node (D3). */
		bool larger = bulk_wants_step(c, pcs, run); /* D2 */
		while (k) {
			struct sheaf_sheaf *m = pcs->main;
			if (m->size >= m->capacity && !sheaf_pcs_replace_full_main(c, pcs))
				break;
			m = pcs->main;
			uint32_t take = (uint32_t)SHEAF_MIN((size_t)(m->capacity - m->size), k);
			memcpy(m->objects + m->size, objs, take * sizeof(void *));
			sheaf_wr(m->size, m->size + take);
			sheaf_stat_add(pcs, SHEAF_STAT_FREE_FASTPATH, take);
			objs += take;
			k -= take;
		}
		if (larger)
			sheaf_pcs_bulk_fit(c, pcs, run);
	}
	if (pcs)
		sheaf_pcs_unlock(c, pcs);
	while (k) {
		unsigned part = (unsigned)SHEAF_MIN(k, (size_t)SHEAF_PCS_BATCH);
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, part);
		sheaf_slab_free_bulk(c, (void **)objs, part);
		objs += part;
		k -= part;
	}
}

/* One step of free_checked, no lock: as many of @objs[0..@k) (checked, key @key) as the
 * CPU's (or the thread's) main takes in one sequence (one memcpy per-thread); returns
 * how many. */
static inline uint32_t free_checked_push(struct sheaf_cache *c, void *const *objs, size_t k,
					 uintptr_t key)
{
	uint64_t want = SHEAF_MIN(k, (size_t)SHEAF_BULK_BATCH_MAX);
	uint32_t got = sheaf_cpu_push_n(c, objs, want, key);
	return got ? got : sheaf_thread_push_n(c, objs, want, key);
}

/* A checked run of @k objects of key @key: the fast path (one restartable sequence per
 * main's worth, or one memcpy per-thread), then the locked path for the rest.  Always
 * inlined: GCC kept it a function of its own, whose call saved six registers; inlined,
 * bulk8 took 0.97x the time of the revision before, bulk32 and larger within noise
 * (five processes, tools/prev-ratios.sh, AMD EPYC, 2026-11-28). */
static inline __attribute__((always_inline)) void
free_checked(struct sheaf_cache *c, void *const *objs, size_t k, uintptr_t key)
{
	size_t run = k;
	while (k) {
		uint32_t got = free_checked_push(c, objs, k, key);
		if (!got)
			break;
		objs += got;
		k -= got;
	}
	if (k)
		free_checked_locked(c, objs, k, key, run);
}

/* sheaf_free_batch_check in a function of its own, starting on a 64-byte line: where
 * its loop falls relative to the instruction-fetch lines then depends on this function
 * alone, not on every edit of the code around it (issue 18: the same loop ran 15-20 %
 * slower on AMD EPYC when an unrelated change moved it across a 64-byte boundary). */
static sheaf_noinline __attribute__((aligned(64))) size_t bulk_check(struct sheaf_cache *c,
								     void *const *objs, size_t n,
								     uintptr_t *key,
								     enum sheaf_batch_stop *stop)
{
	return sheaf_free_batch_check(c, objs, n, key, stop);
}

/* The object that stopped a run holding the free mark (maybe a double free), once the
 * run before it is in sheaves: true when it is live after all (its mark taken), false
 * when a double free was reported.  Its slab may have gone meanwhile: the run may have
 * filled sheaves that went back to slabs, and emptied and released the object's own
 * (when the object was free: [a, ..., a] or an object freed before the call).  A live
 * object keeps its slab, so a key that is no longer the one checked means the object
 * was free: reported without reading it (its page may belong to another slab now, or
 * to none).  Until 2026-11-28 the mark was read there and, found nowhere, the object
 * was taken for a live one and freed again (an adversarial run, 2,000 objects of 4 KB). */
static bool bulk_marked_ok(struct sheaf_cache *c, void *obj, uintptr_t key)
{
	if (sheaf_unlikely(sheaf_page_key(obj) != key)) {
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj,
			    "the object is already free (its slab was emptied by this call)");
		return false;
	}
	return sheaf_free_mark_take(c, obj); /* otherwise a double free, reported */
}

/* What follows a run's check: @objs[@done..@k) of that run still to be put on sheaves
 * (checked, key @key), then the object that stopped it (@stop), then the runs after
 * it, each checked as a whole (every check of a single free, slab/freecheck.h) and
 * copied in one sequence.  An object that stops a run holding the free mark is dealt
 * with alone once the run before it is in a sheaf, where the double-free search can see
 * it; one of the run's slab that stopped it for another reason, before. */
static sheaf_noinline void free_bulk_runs(struct sheaf_cache *c, size_t n, void **objs, size_t done,
					  size_t k, uintptr_t key, enum sheaf_batch_stop stop)
{
	size_t i = 0;
	for (;;) {
		/* An object of the run's own slab that stopped it for itself (not an object
		 * start; seen free by ASan) is dealt with alone before the run goes into
		 * sheaves: that may release its slab, and then it could only be named an
		 * invalid pointer (an ASan build reported [a, ..., a] so, 2026-11-28). */
		bool alone = stop == SHEAF_BATCH_OTHER && k > 0 && i + k < n &&
			     sheaf_page_key(objs[i + k]) == key;
		if (alone)
			sheaf_cache_free_slowpath(c, objs[i + k], NULL);
		if (k > done)
			free_checked(c, objs + i + done, k - done, key);
		i += k;
		if (alone) {
			i++;
		} else if (stop == SHEAF_BATCH_OTHER) {
			/* NULL, a bad pointer (reported there), or the start of the next run. */
			if (k == 0) {
				sheaf_cache_free_slowpath(c, objs[i], NULL);
				i++;
			}
		} else if (stop == SHEAF_BATCH_MARKED) {
			void *obj = objs[i++];
			if (bulk_marked_ok(c, obj, key))
				free_checked(c, &obj, 1, key);
		}
		if (i >= n)
			return;
		k = bulk_check(c, objs + i, n - i, &key, &stop);
		done = 0;
	}
}

SHEAF_API void sheaf_cache_free_bulk(struct sheaf_cache *c, size_t n, void **objs)
{
	if (!n)
		return;
	if (!bulk_cache_ok(c))
		return;
	if (sheaf_unlikely(!objs)) {
		/* A NULL array of @n objects: the program lost them somewhere (it did nothing,
		 * silently, until 2026-11-30; alloc_bulk fails with EINVAL there). */
		sheaf_error(SHEAF_ERR_INVALID_POINTER, c->name, NULL,
			    "free_bulk of %zu objects from a NULL array", n);
		return;
	}
	if (c->debug_flags || sheaf_free_check_hook_get() ||
	    atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) == 0) {
		/* Object by object; a debug cache records the program's call site (it
		 * recorded this function until 2026-11-29). */
		const void *caller = __builtin_return_address(0);
		for (size_t i = 0; i < n; i++)
			sheaf_cache_free_caller(c, objs[i], caller);
		return;
	}
	/* Issue 18: the usual call, a run of one node that passes the checks and fits on
	 * the CPU's main, straight through: one check, one sequence; everything else in
	 * free_bulk_runs (GCC had kept that loop's state on the stack around every call). */
	uintptr_t key;
	enum sheaf_batch_stop stop;
	size_t k = bulk_check(c, objs, n, &key, &stop);
	size_t done = 0;
	if (sheaf_likely(k)) {
		done = free_checked_push(c, objs, k, key);
		if (sheaf_likely(done == n))
			return;
	}
	free_bulk_runs(c, n, objs, done, k, key, stop);
}
