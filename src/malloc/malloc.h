/* SPDX-License-Identifier: MIT */
/*
 * malloc/malloc.h - the malloc front end's interface (layer 9 of src/README.md): its
 * functions shared with the preload library (preload/) and the unit tests.
 *
 * Owns: the size classes (sizeclass.h, sizeclass.c) and their caches, the inline
 * malloc and free fast paths, large extents and their cache, the bootstrap arena,
 * and the POSIX and glibc conventions; preload/ puts them under the C library's
 * names.
 *
 * May call: every layer below (cache/ for the class caches, percpu/ for the fast
 * paths, page/ for the page map).  Nothing calls it but preload/ and programs.
 *
 * The POSIX and glibc
 * entry points with their exact error conventions live here, so that the
 * preload library is a thin layer of names and counters and the conventions
 * are unit-tested without LD_PRELOAD.
 */
#ifndef SHEAF_LAYER_MALLOC_H
#define SHEAF_LAYER_MALLOC_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "malloc/sizeclass.h"
#include "sheaf_malloc.h"

/* ---- malloc.c: the fast paths, inline (no call before the sheaf pop or push) ----- */

/* One cache per class, created on first use; written once (release). */
extern struct sheaf_cache *_Atomic sheaf_malloc_classes[SHEAF_SC_COUNT];
/* The same caches indexed by (n + 7) >> 3 for n <= SHEAF_SC_TABLE_MAX: the
 * common malloc does one load to find its cache instead of two (byte table,
 * then class table).  Written with sheaf_malloc_classes, under sc_lock. */
extern struct sheaf_cache *_Atomic sheaf_malloc_small[SHEAF_SC_TABLE_MAX / 8 + 1];
/* The inline malloc's one compare for both "a table size" and "the table is ready":
 * SHEAF_SC_TABLE_MAX + 1 once every entry of sheaf_malloc_small holds its class cache or
 * sheaf_malloc_unmade, 0 before (every request then goes to sheaf_malloc_slow, which
 * makes the class).  So the fast path has no test for a NULL entry (issue 14: the
 * golden count of sheaf_malloc).  Written once, under sc_lock (release). */
extern struct sheaf_line_u64 sheaf_malloc_small_limit;
/* The entry of a class not made yet (cache.h sheaf_cache_placeholder_new): its pops
 * miss, and the miss path sends the request to sheaf_malloc_slow.  Set once, under
 * sc_lock; read on the miss path, by identity only (relaxed). */
extern struct sheaf_cache *_Atomic sheaf_malloc_unmade;
/* errno's address, cached per thread: `errno` is a call to __errno_location()
 * in every use outside libc, which cost about a third of a malloc+free pair
 * when free saved and restored it.  A thread's errno never moves (the child
 * of fork keeps the forking thread's), and zero-initialised TLS makes every
 * new thread look it up once. */
extern __thread int *sheaf_malloc_tls_errno;
int *sheaf_malloc_errno_slow(void);
/* Start the reaper thread (cache/reaper.c) once Sheaf holds SHEAF_REAP_MALLOC_START:
 * called from allocations only, never from a free, and with no lock of ours held.
 * glibc frees memory (a thread's dtv, when it reclaims cached thread stacks) while it
 * holds its stack-cache lock, which pthread_create takes: a free that started the
 * reaper there deadlocked (test_preload_rlimit, seen once in this project). */
void sheaf_malloc_reaper_start(void) __attribute__((noinline));
/* The same, then the allocation from @c's slow path: a tail call from the inline
 * malloc, which so needs no stack frame of its own. */
void *sheaf_malloc_alloc_reaper(struct sheaf_cache *c) __attribute__((noinline));
void *sheaf_malloc_slow(size_t n);
/* free of anything but a size-class object: extents, bootstrap memory,
 * glibc's memory (preload), errors.  @c: the owning cache if not malloc's. */
void sheaf_malloc_free_slow(void *p, struct sheaf_cache *c, const char *fn)
	__attribute__((noinline));

static inline int *sheaf_malloc_errno_ptr(void)
{
	int *e = sheaf_malloc_tls_errno;
	if (sheaf_unlikely(e == NULL))
		e = sheaf_malloc_errno_slow();
	return e;
}

/* sheaf_cache_of() inlined: the page map gives the owning cache node of any
 * pointer in O(1), 0 for pointers outside Sheaf's slabs. */
static inline struct sheaf_cache *sheaf_malloc_cache_of(const void *p)
{
	/* Before initialisation the heap range is empty (size 0): every key is 0. */
	uintptr_t k = sheaf_page_key(p);
	return k ? sheaf_key_owner(k)->cache : NULL;
}

/* The class of a cache if it is one of malloc's, else -1: its object size
 * maps back to its class (checked when the class is created). */
static inline int sheaf_malloc_class_of(const struct sheaf_cache *c)
{
	size_t sz = c->object_size;
	if (sheaf_unlikely(sz > SHEAF_SC_MAX))
		return -1;
	unsigned int i = sheaf_sc_index(sz);
	if (sheaf_likely(atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_relaxed) == c))
		return (int)i;
	return -1;
}

/* sheaf_malloc(): one table load gives the class cache (up to 1 KiB; the
 * class index above), then the cache's per-CPU pop, inline. */
/* A class cache's slow path, after the inline pops missed; ASan and Valgrind builds
 * (track.h) take sheaf_cache_alloc, which tracks the object its own pop returns. */
/* Memory exhaustion: sheaf_malloc_reclaim(), then one more try of class cache @c; @e is
 * errno before the first try (kept on success), @caller the program's call site (for a
 * debug cache).  malloc.c; cold. */
void *sheaf_malloc_class_retry(struct sheaf_cache *c, int e, const void *caller);
/* The class cache's slow path with that retry; out of line (malloc.c), so that the
 * inline paths keep one tail call and no saved register (tools/fastpath-golden.sh). */
void *sheaf_malloc_class_miss(struct sheaf_cache *c);
static inline void *sheaf_malloc_class_slow(struct sheaf_cache *c)
{
	return sheaf_malloc_class_miss(c);
}

sheaf_fast_inline void *sheaf_malloc_inline(size_t n)
{
	struct sheaf_cache *c;
	/* One cmp with the bound in memory (config.h); its store was made after the
	 * table's entries. */
	if (sheaf_likely(sheaf_u64_below(n, &sheaf_malloc_small_limit.v))) {
		/* A class cache or sheaf_malloc_unmade, never NULL. */
		c = atomic_load_explicit(&sheaf_malloc_small[(n + 7) >> 3], memory_order_acquire);
	} else {
		if (n > SHEAF_SC_TABLE_MAX && n <= SHEAF_SC_MAX)
			c = atomic_load_explicit(&sheaf_malloc_classes[sheaf_sc_index(n)],
						 memory_order_acquire);
		else
			c = NULL; /* a large block, or the table not ready */
		if (sheaf_unlikely(c == NULL))
			return sheaf_malloc_slow(n);
	}
	if (!SHEAF_TRACK_ENABLED) {
		/* The class cache's per-CPU pop inlined here (fastpath.h): no call; where it
		 * misses for want of an rseq CPU (per-thread mode), the thread's own pop,
		 * inline too (issue 17: the call to the cache layer cost a third of a
		 * per-thread malloc). */
		void *o;
		if (sheaf_likely(sheaf_cpu_pop(c, &o)) || sheaf_likely(sheaf_thread_pop(c, &o))) {
			/* The free mark cleared without testing its kind: a class cache is a
			 * plain cache, whose slot is at least 16 bytes with the mark, if any,
			 * in the second word (cache/create.c), and a debug class cache has no
			 * sheaves to pop from; with SHEAF_FREE_CHECKS=0 the word is simply not
			 * read (3 fewer instructions than sheaf_mark_clear, issue 17). */
			*(sheaf_mark_t *)((uintptr_t)o + 8) = 0;
			return o;
		}
	}
	/* A class not made yet; then the slow path, where the heap grows, and the reaper's
	 * start (a call only until it has started). */
	if (sheaf_unlikely(c == atomic_load_explicit(&sheaf_malloc_unmade, memory_order_relaxed)))
		return sheaf_malloc_slow(n);
	if (sheaf_unlikely(sheaf_reaper_wanted_by_malloc()))
		return sheaf_malloc_alloc_reaper(c);
	return sheaf_malloc_class_slow(c);
}

/* Everything sheaf_free_inline() does not do inline: NULL, a free-check hook, a full
 * or locked main, extents, foreign pointers, errors. */
void sheaf_free_slowpath(void *p) __attribute__((noinline));

/* Is @p an object start of a size class with the free mark, @k being its page-map key?
 * Then *@fc is the class cache.  The node's fields are read with no test of the key
 * first: a page that is not a slab's holds SHEAF_KEY_NONE (page.h "Keys"), zeroes
 * whose bound of 0 no product is below.  The same five instructions for every class
 * and the cache's load, with no branch on the kind of slot size (slab.h malloc_div_c:
 * the offset in the slab times ceil(2^64 / slot) is below malloc_div_lim exactly for
 * the multiples of the slot that start an object, not the slab's tail;
 * slab/freecheck.h); false for every other node. */
sheaf_fast_inline bool sheaf_malloc_start_ok(uintptr_t k, const void *p, struct sheaf_cache **fc)
{
	const struct sheaf_node *n = (const struct sheaf_node *)k;
	*fc = n->malloc_cache;
	uint64_t off = (uintptr_t)p & n->malloc_slab_mask;
	/* The multiply and the compare with their operands in memory (config.h). */
	return sheaf_u64_below(off * n->malloc_div_c, &n->malloc_div_lim);
}

/* sheaf_free(): one page-map load gives the key of the owning cache node, whose
 * malloc_slab_mask and malloc_div_c test "a class with the free mark, and an object
 * start of it" (sheaf_malloc_start_ok: the usual case), and whose malloc_cache is its
 * cache if that is one of malloc's classes, then the per-CPU push (rseq.h).  Where
 * that misses for want of an rseq CPU (per-thread mode: SHEAF_PERCPU=thread, no rseq,
 * Valgrind), the thread's own push with the same key and cache, inline
 * (fastpath.h sheaf_thread_push: every check of a free), instead of a slow path
 * that looked them up again (issue 17).
 * Everything else is one tail call, so the fast path needs no stack frame and
 * never touches errno (POSIX 2024 requires free to preserve it).  NULL fails the bound test
 * (NULL - base wraps above the limit) and leaves through the slow path. */
sheaf_fast_inline void sheaf_free_inline(void *p)
{
	if (!SHEAF_TRACK_ENABLED) {
		uintptr_t off = (uintptr_t)p - (uintptr_t)sheaf_heap.base;
		/* The covered heap size, 0 while a free-check hook is set (page layer);
		 * an unordered load: the heap only grows, and a pointer of a new part
		 * reaches us after the growth that made it (release).  One cmp with the
		 * bound in memory (config.h): GCC loads an atomic into a register first. */
		if (sheaf_likely(sheaf_u64_below(off, &sheaf_heap.fast_limit))) {
			uintptr_t k = __atomic_load_n(&sheaf_heap.pagemap[off >> SHEAF_PAGE_SHIFT],
						      __ATOMIC_RELAXED);
			/* A node's cache pointer and mask are set before its key is published.
			 * The usual case (slab.h malloc_div_c): p is an object start of a
			 * class with the free mark in the object; the sequence tests and
			 * writes the mark (slab/freecheck.h, fastpath.h). */
			struct sheaf_cache *fc;
			if (sheaf_likely(sheaf_malloc_start_ok(k, p, &fc))) {
				if (sheaf_likely(sheaf_cpu_push_key(fc, p, k, true)) ||
				    sheaf_likely(sheaf_thread_push_gated(fc, p, k, true)))
					return;
				goto slow_free;
			}
			/* Not a class (SHEAF_KEY_NONE among them), a class without checks
			 * (SHEAF_FREE_CHECKS=0: no test at all), or not an object start of a
			 * checked class (the slow path reports it). */
			if (sheaf_unlikely(fc == NULL))
				goto slow_free;
			if (!fc->free_checks && sheaf_likely(sheaf_cpu_push_key(fc, p, k, false)))
				return;
			if (sheaf_likely(sheaf_thread_push_gated(fc, p, k, false)))
				return;
		}
	}
slow_free:
	sheaf_free_slowpath(p);
}

/* ---- malloc.c: POSIX / glibc conventions over the sheaf_* API ---------------- */

/* posix_memalign: EINVAL unless @align is a power of two multiple of
 * sizeof(void *); ENOMEM on failure; *@memptr written only on success; errno
 * left alone. */
int sheaf_malloc_posix_memalign(void **memptr, size_t align, size_t size);
/* memalign (glibc): a non-power-of-two @align is rounded up; > SIZE_MAX / 2
 * is EINVAL. */
void *sheaf_malloc_memalign(size_t align, size_t size);
void *sheaf_malloc_valloc(size_t size);
/* pvalloc: size rounded up to whole pages (0 gives one page). */
void *sheaf_malloc_pvalloc(size_t size);
/* reallocarray: nmemb * size overflow is ENOMEM, the old block kept. */
void *sheaf_malloc_reallocarray(void *ptr, size_t nmemb, size_t size);

/* malloc_trim (glibc): give cached extents back and shrink every class cache
 * (sheaves, barns and empty slabs back to the OS).  1 if extents were
 * released, else 0 (the core does not report what shrinking freed). */
int sheaf_malloc_trim(void);
/* An allocation failed with ENOMEM (the kernel refused a mapping: RLIMIT_AS,
 * RLIMIT_DATA, the commit limit): what Sheaf keeps for reuse goes back at once, as
 * sheaf_malloc_trim() gives it (the extent cache, every class cache's sheaves, barns
 * and empty slabs, the page heap's free blocks, which otherwise wait for the decay,
 * SHEAF_PURGE_MS), so that memory a program freed serves its next allocation.  True
 * when anything went back (the caller then tries once more); false without trying
 * when re-entered, or from inside the core's start or a class's creation.  Allocates
 * nothing. */
bool sheaf_malloc_reclaim(void);

/* Counters of the front end's own paths (not per call: see the preload
 * library for call counts).  Read racily; for tests and the stats line. */
struct sheaf_malloc_counters {
	uint64_t extent_maps;    /* extents mapped from the OS */
	uint64_t extent_reuses;  /* large requests served from the extent cache */
	uint64_t extent_gathers; /* large requests that no single cached extent held, served
				   * by moving smaller cached ones into a new mapping with
				   * mremap (their pages move unfaulted, the rest is new) */
	uint64_t extent_moves;   /* cached extents so moved */
	uint64_t extent_merges;  /* freed extents merged with a cached neighbour */
	uint64_t extent_unmaps;  /* extents given back to the OS */
	uint64_t extent_remaps;  /* realloc of an extent through mremap */
	uint64_t boot_allocs;    /* re-entrant allocations served by the bootstrap arena */
	uint64_t foreign_frees;  /* pointers of another allocator passed to free */
	uint64_t errors;         /* invalid pointers or size mismatches reported */
	uint64_t reclaims;       /* allocations that failed with ENOMEM and gave back what
				   * Sheaf kept before they tried again (sheaf_malloc_reclaim) */
};
void sheaf_malloc_counters_get(struct sheaf_malloc_counters *out);
/* Blocks served since the process image started: *@mallocs handed out, *@frees taken
 * back, size classes (their caches' allocation and free events, docs/stats.md) and
 * large and bootstrap blocks alike; a free of another allocator's pointer (preload)
 * counts as a free.  Read off the statistics, so it costs the calls nothing and a
 * call of this a few microseconds per class (it locks each CPU of each class in turn,
 * as sheaf_stats_get does). */
void sheaf_malloc_served(uint64_t *mallocs, uint64_t *frees);

/* Give every cached extent back to the OS now (tests; the normal path waits
 * SHEAF_MALLOC_EXTENT_DELAY_NS after the free). */
void sheaf_malloc_extent_cache_drain(void);
/* Number and bytes of extents currently cached. */
void sheaf_malloc_extent_cache_stat(size_t *count, size_t *bytes);
/* Give back cached extents older than SHEAF_MALLOC_EXTENT_DELAY_NS (the reaper's
 * tick, through sheaf_cache_hooks). */
void sheaf_malloc_extent_cache_age(void);
/* Extents in use: count and mapped bytes (src/malloc/preload/mallinfo.c). */
void sheaf_malloc_extent_live_stat(size_t *count, size_t *bytes);
/* The running count of the live extents' bytes, which the extent cache's bound follows
 * (extent_registry.c; read racily): the bytes of sheaf_malloc_extent_live_stat, kept
 * without a walk (the tests compare the two). */
size_t malloc_extent_live_bytes(void);

#define SHEAF_MALLOC_EXTENT_DELAY_NS 1000000000ull /* cached extents age out after 1 s */
/* The extent cache holds as many bytes as the live extents took at their peak (renewed
 * while the cache serves requests, forgotten after SHEAF_MALLOC_EXTENT_DELAY_NS without)
 * and a quarter more, at least SHEAF_MALLOC_EXTENT_CACHE_BYTES and at most
 * SHEAF_MALLOC_EXTENT_CACHE_MAX: a working set freed as a whole and built again is not
 * faulted in again; idle, it goes back after the delay (extent.c, xc_bound_locked). */
#define SHEAF_MALLOC_EXTENT_CACHE_BYTES (64u << 20)
#define SHEAF_MALLOC_EXTENT_CACHE_MAX   (512u << 20)
#define SHEAF_MALLOC_EXTENT_CACHE_ONE   (32u << 20) /* larger extents are never cached */

/* ---- src/malloc/preload/preload.c: memory of the system allocator ------------------- */

/* Defined only in libsheaf-malloc.so (weak here, NULL in libsheaf): a pointer
 * that is neither a Sheaf object, an extent nor bootstrap memory may belong
 * to glibc's allocator (memory glibc allocated before the preload took over,
 * or through __libc_malloc).  foreign_size returns its usable size, or 0 when
 * it is not glibc's either; foreign_free gives it back to glibc. */
size_t sheaf_preload_foreign_size(const void *ptr) __attribute__((weak));
void sheaf_preload_foreign_free(void *ptr) __attribute__((weak));
/* Called when the core cannot start (no address space for its heap, e.g.
 * under a low `ulimit -v`): the preload then serves size-class requests
 * with glibc's allocator, after one line on stderr, instead of failing
 * every small malloc; from then on every unknown pointer is glibc's. */
void *sheaf_preload_fallback_alloc(size_t n, size_t align) __attribute__((weak));
/* Whether it has (glibc then holds blocks the program allocated: mallinfo.c). */
bool sheaf_preload_fallback_on(void) __attribute__((weak));

#endif /* SHEAF_LAYER_MALLOC_H */
