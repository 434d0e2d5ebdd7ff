/* SPDX-License-Identifier: MIT */
/*
 * malloc.c - the malloc front end (docs/malloc.md).
 *
 * Three kinds of memory, told apart on free in this order:
 *
 *  1. Size-class objects (<= 64 KiB, sizeclass.h): one Sheaf cache per class,
 *     created on first use, so malloc and free are the caches' per-CPU sheaf
 *     fast paths (K§2.1-2.6) plus a table lookup (inline, in
 *     malloc/malloc.h).  The page map finds the owning cache of any
 *     pointer in O(1), and a pointer whose cache is not one of
 *     ours is reported, never followed.
 *  2. Extents (> 64 KiB; > 32 KiB for calloc and where the classes above 32 KiB
 *     are not used, bigclass.c; or alignment > 4 KiB): page-aligned anonymous
 *     mappings recorded in a sharded hash table keyed by address (no header,
 *     so a foreign pointer is never dereferenced).  Freed extents wait in a
 *     cache (64-512 MiB, in size bins; best fit, split and merged, or
 *     several gathered into one mapping with mremap) for reuse and are
 *     unmapped once they have been idle for 1 s, checked by the reaper and
 *     on later large operations: prompt unmapping of large blocks is what
 *     made jemalloc and mimalloc slow on a large-allocation benchmark,
 *     keeping them forever is what users of allocators complain about most.
 *  3. Bootstrap memory: an allocation made while this thread is inside the
 *     creation of a class cache (the core's first initialisation read /sys
 *     with stdio, which called malloc, until 2026-11-29) is served by a bump allocator over
 *     a static arena and never reused.  This is what makes early start-up and
 *     re-entry safe without dlsym (dlsym itself may allocate).
 *
 * Anything else is foreign: in libsheaf-malloc.so it may be glibc's (see
 * src/malloc/preload/preload.c), otherwise it is reported.
 *
 * Locks (none is held while calling into the core except sc_lock):
 *   sc_lock      class-cache creation; taken before the core's locks.
 *   xc.lock      the extent cache.
 *   shard locks  the extent registry, one per shard; never nested.
 * They are ranks MALLOC_CLASS, MALLOC_EXTENTS and MALLOC_SHARD of the lock table
 * (base/lock.h, docs/locking.md), all taken by the fork walk, so that a child never inherits a
 * lock held by a thread that did not survive the fork.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "malloc/malloc_impl.h"

__thread int *sheaf_malloc_tls_errno;

int *sheaf_malloc_errno_slow(void)
{
	return sheaf_malloc_tls_errno = &errno;
}

/* ---- Counters and error reports ---------------------------------------------- */

/* Non-zero while this thread creates a class cache (holding sc_lock) or
 * initialises the core: allocations it makes meanwhile come from the
 * bootstrap arena.  Zero-initialised TLS, so it reads 0 even before the
 * loader has copied the TLS image (malloc may run that early). */
__thread unsigned int malloc_tls_creating;
/* Non-zero while this thread reclaims (sheaf_malloc_reclaim), or starts the reaper,
 * whose pthread_create may allocate under the reaper's lock, under which a trim must
 * not run. */
static __thread unsigned int malloc_no_reclaim;

struct malloc_counters malloc_ctr;

void sheaf_malloc_counters_get(struct sheaf_malloc_counters *out)
{
	out->extent_maps = atomic_load_explicit(&malloc_ctr.extent_maps, memory_order_relaxed);
	out->extent_reuses = atomic_load_explicit(&malloc_ctr.extent_reuses, memory_order_relaxed);
	out->extent_gathers =
		atomic_load_explicit(&malloc_ctr.extent_gathers, memory_order_relaxed);
	out->extent_moves = atomic_load_explicit(&malloc_ctr.extent_moves, memory_order_relaxed);
	out->extent_merges = atomic_load_explicit(&malloc_ctr.extent_merges, memory_order_relaxed);
	out->extent_unmaps = atomic_load_explicit(&malloc_ctr.extent_unmaps, memory_order_relaxed);
	out->extent_remaps = atomic_load_explicit(&malloc_ctr.extent_remaps, memory_order_relaxed);
	out->boot_allocs = atomic_load_explicit(&malloc_ctr.boot_allocs, memory_order_relaxed);
	out->foreign_frees = atomic_load_explicit(&malloc_ctr.foreign_frees, memory_order_relaxed);
	out->errors = atomic_load_explicit(&malloc_ctr.errors, memory_order_relaxed);
	out->reclaims = atomic_load_explicit(&malloc_ctr.reclaims, memory_order_relaxed);
}

void sheaf_malloc_served(uint64_t *mallocs, uint64_t *frees)
{
	uint64_t m = atomic_load_explicit(&malloc_ctr.extent_allocs, memory_order_relaxed) +
		     atomic_load_explicit(&malloc_ctr.boot_allocs, memory_order_relaxed) +
		     atomic_load_explicit(&malloc_ctr.fallback_allocs, memory_order_relaxed);
	uint64_t f = atomic_load_explicit(&malloc_ctr.extent_frees, memory_order_relaxed) +
		     atomic_load_explicit(&malloc_ctr.boot_frees, memory_order_relaxed) +
		     atomic_load_explicit(&malloc_ctr.foreign_frees, memory_order_relaxed);
	for (unsigned int i = 0; i < SHEAF_SC_COUNT; i++) {
		struct sheaf_cache *c =
			atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
		struct sheaf_stats st = { .size = sizeof(st) };
		if (!c || sheaf_stats_get(c, &st) != 0)
			continue;
		m += st.events[SHEAF_STAT_ALLOC_FASTPATH] + st.events[SHEAF_STAT_ALLOC_SLOWPATH];
		f += st.events[SHEAF_STAT_FREE_FASTPATH] + st.events[SHEAF_STAT_FREE_SLOWPATH];
	}
	*mallocs = m;
	*frees = f;
}

/* Report an invalid use of the malloc API through the one reporter (base/error.h):
 * "sheaf: <kind>: cache '<class cache, or malloc>' address <ptr>: <fn>: <what>".
 * Aborts unless SHEAF_ON_ERROR=warn.  Never allocates. */
void __attribute__((cold, noinline))
malloc_report(enum sheaf_error_kind kind, const char *fn, const char *what, const void *ptr,
	      const char *cache, size_t size)
{
	CTR_INC(errors);
	if (size != (size_t)-1)
		sheaf_error(kind, cache ? cache : "malloc", ptr, "%s: %s (size %zu)", fn, what,
			    size);
	else
		sheaf_error(kind, cache ? cache : "malloc", ptr, "%s: %s", fn, what);
}

/* malloc_impl.h: the program's call site of the entry point this thread is in. */
__thread const void *malloc_site;

/* ---- Class caches -------------------------------------------------------------- */

struct sheaf_cache *_Atomic sheaf_malloc_classes[SHEAF_SC_COUNT];
struct sheaf_cache *_Atomic sheaf_malloc_small[SHEAF_SC_TABLE_MAX / 8 + 1];
struct sheaf_line_u64 sheaf_malloc_small_limit;  /* 0: not ready (malloc.h) */
struct sheaf_cache *_Atomic sheaf_malloc_unmade; /* set once, under sc_lock */
static pthread_mutex_t sc_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int fork_handlers_registered; /* 0, -pid while registering, 2 */
/* The core could not start (no address space for its heap): when it last failed
 * (CLOCK_MONOTONIC ns, never 0), so the start-up is not retried on every
 * allocation; 0 while it has not failed. */
static _Atomic uint64_t core_failed;

/* Whether size-class requests skip the core.  The preload, once it has sent them to
 * glibc's allocator, stays with it; the direct API tries the start-up again a second
 * after it failed, so a process whose address-space limit was raised, or whose
 * failing mmap was transient, gets its small blocks again -- at once if the core has
 * started meanwhile through the object API (sheaf_cache_create). */
static bool core_down(void)
{
	uint64_t t = atomic_load_explicit(&core_failed, memory_order_relaxed);
	if (sheaf_likely(t == 0))
		return false;
	if (sheaf_preload_fallback_alloc)
		return true;
	if (atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) == 2)
		return false;
	return sheaf_os_now_ns() - t < 1000000000ull;
}

static void class_name(char *buf, size_t cap, unsigned int i)
{
	sheaf_fmt(buf, cap, "malloc-%u", (unsigned)sheaf_sc_size[i]);
}

/* Once the core is up (a class cache exists): the entries of the classes not made yet
 * get the placeholder, then the inline malloc's bound opens the table (malloc.h
 * sheaf_malloc_small_limit).  Without memory for the placeholder the bound stays 0 and
 * every request takes sheaf_malloc_slow: slower, never wrong.  Under sc_lock. */
static void small_table_ready_locked(void)
{
	if (atomic_load_explicit(&sheaf_malloc_unmade, memory_order_relaxed))
		return;
	struct sheaf_cache *u = sheaf_cache_placeholder_new();
	if (!u)
		return;
	atomic_store_explicit(&sheaf_malloc_unmade, u, memory_order_release);
	for (unsigned int j = 0; j <= SHEAF_SC_TABLE_MAX / 8; j++) {
		struct sheaf_cache *_Atomic *e = &sheaf_malloc_small[j];
		if (!atomic_load_explicit(e, memory_order_relaxed))
			atomic_store_explicit(e, u, memory_order_release);
	}
	__atomic_store_n(&sheaf_malloc_small_limit.v, (uint64_t)SHEAF_SC_TABLE_MAX + 1,
			 __ATOMIC_RELEASE);
}

/* Create class @i's cache; NULL if it cannot be created or if this thread is
 * already creating one (the caller then uses the bootstrap arena). */
static struct sheaf_cache *__attribute__((noinline)) class_create(unsigned int i)
{
	/* Inside the core's initialisation (stdio, atexit, pthread_atfork allocate), the
	 * core cannot be entered again and init_lock ranks after sc_lock (base/lock.h). */
	if (malloc_tls_creating || sheaf_init_running_here())
		return NULL;
	/* sc_lock is taken only once the fork walk knows it: a fork while a class was
	 * created with no handler for sc_lock yet left the child with sc_lock held. */
	malloc_fork_handlers_ensure();
	int e = errno;
	sheaf_mutex_lock(&sc_lock, SHEAF_LOCK_MALLOC_CLASS);
	struct sheaf_cache *c =
		atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
	if (!c) {
		char name[32];
		struct sheaf_cache_args args = {
			.align = sheaf_sc_align(i),
			.sheaf_capacity = 0,
			.flags = SHEAF_CACHE_MALLOC_CLASS,
			.ctor = NULL,
		};
		class_name(name, sizeof(name), i);
		malloc_tls_creating++;
		c = sheaf_cache_create_class(name, sheaf_sc_size[i], &args);
		malloc_tls_creating--;
		if (!c && atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) != 2)
			atomic_store_explicit(&core_failed, sheaf_os_now_ns() | 1,
					      memory_order_relaxed);
		if (c) {
			size_t osz = c->object_size;
			/* sheaf_malloc_class_of() depends on this; the core only rounds
			 * sizes up to the alignment, which divides ours. */
			if (osz < sheaf_sc_size[i] || sheaf_sc_index(osz) != i) {
				malloc_report(SHEAF_ERR_CORRUPTION, "malloc",
					      "class cache has an unexpected object size", c, name,
					      osz);
				c = NULL;
			} else {
				atomic_store_explicit(&core_failed, 0, memory_order_relaxed);
				atomic_store_explicit(&sheaf_malloc_classes[i], c,
						      memory_order_release);
				for (unsigned int j = 0; j <= SHEAF_SC_TABLE_MAX / 8; j++)
					if (sheaf_sc_small[j] == i)
						atomic_store_explicit(&sheaf_malloc_small[j], c,
								      memory_order_release);
				small_table_ready_locked();
			}
		}
	}
	sheaf_mutex_unlock(&sc_lock, SHEAF_LOCK_MALLOC_CLASS);
	if (c) {
		errno = e;
		malloc_fork_handlers_ensure();
	}
	return c;
}

static void fork_take_class(void)
{
	sheaf_mutex_lock(&sc_lock, SHEAF_LOCK_MALLOC_CLASS);
}

static void fork_release_class(bool child)
{
	(void)child;
	sheaf_mutex_unlock(&sc_lock, SHEAF_LOCK_MALLOC_CLASS);
}

/* fork: the front end's locks are ranks MALLOC_CLASS, MALLOC_EXTENTS and MALLOC_SHARD
 * of the core's one table (base/lock.h), walked by the core's fork handlers with the
 * rest, so that a child never inherits one that a thread which does not exist there was
 * holding.  They are registered on the first allocation, also in a process whose core
 * could not start (the extents still need them).  pthread_atfork allocates: never under
 * sc_lock and never while this thread initialises the core. */
void malloc_fork_handlers_ensure(void)
{
	if (sheaf_likely(atomic_load_explicit(&fork_handlers_registered, memory_order_acquire) ==
			 2) ||
	    malloc_tls_creating || sheaf_init_running_here())
		return;
	/* While a thread registers, the state holds minus its process's pid: a child forked
	 * meanwhile inherits the state but not that thread, sees a pid that is not its own
	 * and takes the registration over instead of waiting for ever. */
	const int me = -(int)getpid();
	for (;;) {
		int expected = 0;
		if (atomic_compare_exchange_strong(&fork_handlers_registered, &expected, me))
			break;
		if (expected == 2)
			return;
		if (expected != me) {
			/* The registrant was in the parent: it does not exist here. */
			atomic_compare_exchange_strong(&fork_handlers_registered, &expected, 0);
			continue;
		}
		/* Another thread of this process is registering: its locks are usable once
		 * it is done. */
		sched_yield();
	}
	static const struct sheaf_fork_ops cls = { fork_take_class, fork_release_class };
	sheaf_fork_register(SHEAF_LOCK_MALLOC_CLASS, &cls);
	malloc_extent_fork_register();
	/* pthread_atfork allocates: from the bootstrap arena (as while creating a class),
	 * not through class_create, which would wait for this very registration. */
	malloc_tls_creating++;
	int r = sheaf_fork_handlers_install();
	malloc_tls_creating--;
	sheaf_fork_settle();
	atomic_store_explicit(&fork_handlers_registered, 2, memory_order_release);
	if (r != 0) {
		/* The extent locks would be copied held into a child: say so. */
		sheaf_os_print("sheaf: malloc: pthread_atfork failed (error %d): a child of fork "
			       "may hang in malloc",
			       r);
		atomic_store(&fork_handlers_registered, 0);
	}
}

/* ---- Bootstrap arena ------------------------------------------------------------ */

#define BOOT_SIZE (1u << 20)
#define BOOT_HDR  16u /* keeps 16-byte alignment; holds the size */
static char boot_mem[BOOT_SIZE] __attribute__((aligned(PAGE)));
static _Atomic size_t boot_used;

static bool is_boot(const void *p)
{
	return (const char *)p >= boot_mem && (const char *)p < boot_mem + BOOT_SIZE;
}

static size_t boot_size(const void *p)
{
	return *(const size_t *)((const char *)p - BOOT_HDR);
}

/* Bump allocation, lock-free; the memory is never reused (it is a few KiB
 * for the core's start-up).  When the arena is exhausted, extents. */
static void *boot_alloc(size_t n, size_t align)
{
	if (align < BOOT_HDR)
		align = BOOT_HDR;
	if (n <= BOOT_SIZE && align <= PAGE) {
		size_t old = atomic_load_explicit(&boot_used, memory_order_relaxed);
		for (;;) {
			size_t start = round_up(old + BOOT_HDR, align);
			size_t end = round_up(start + n, BOOT_HDR);
			if (end > BOOT_SIZE)
				break;
			if (atomic_compare_exchange_weak(&boot_used, &old, end)) {
				*(size_t *)(boot_mem + start - BOOT_HDR) = n;
				CTR_INC(boot_allocs);
				return boot_mem + start;
			}
		}
	}
	return malloc_large_alloc(n ? n : 1, align, false);
}

/* ---- Foreign pointers ------------------------------------------------------------- */

/* Free of a pointer that is no size-class object: an extent, bootstrap memory,
 * glibc's memory (preload only) or an error. */
void sheaf_malloc_free_slow(void *p, struct sheaf_cache *c, const char *fn)
{
	if (c) {
		malloc_report(SHEAF_ERR_WRONG_CACHE, fn, "pointer of a cache that is not malloc's",
			      p, c->name, (size_t)-1);
		return;
	}
	if (is_boot(p)) {
		CTR_INC(boot_frees);
		return; /* bootstrap memory is never reused */
	}
	unsigned int vmas;
	size_t len = malloc_extent_remove(p, &vmas);
	if (len) {
		CTR_INC(extent_frees);
		malloc_extent_free_check(p, len);
		malloc_extent_free(p, len, vmas);
		return;
	}
	if (sheaf_preload_foreign_size && sheaf_preload_foreign_size(p)) {
		CTR_INC(foreign_frees);
		sheaf_preload_foreign_free(p);
		return;
	}
	malloc_report(SHEAF_ERR_INVALID_POINTER, fn,
		      "not allocated by sheaf_malloc, or a large block freed twice", p, NULL,
		      (size_t)-1);
}

/* ---- The API ---------------------------------------------------------------------- */

/* No class cache for a request: re-entry while creating one (bootstrap
 * arena), the core could not start (in the preload: glibc's allocator, see
 * sheaf_preload_fallback_alloc), or no memory. */
static void *__attribute__((noinline)) no_class(size_t n, size_t align)
{
	if (malloc_tls_creating)
		return boot_alloc(n, align);
	if (atomic_load_explicit(&core_failed, memory_order_relaxed) &&
	    sheaf_preload_fallback_alloc) {
		malloc_fork_handlers_ensure();
		/* Counted (SHEAF_MALLOC_STATS): their frees were, as glibc's pointers, and
		 * until 2026-11-29 the line said '0 mallocs, 6001 frees'. */
		void *p = sheaf_preload_fallback_alloc(n, align);
		if (p)
			CTR_INC(fallback_allocs);
		return p;
	}
	errno = ENOMEM;
	return NULL;
}

/* Slow path of sheaf_malloc_inline(): the class has no cache yet, or the
 * request is an extent. */
void sheaf_malloc_reaper_start(void)
{
	if (!malloc_tls_creating) {
		malloc_no_reclaim++;
		sheaf_reaper_kick();
		malloc_no_reclaim--;
	}
}

void *sheaf_malloc_alloc_reaper(struct sheaf_cache *c)
{
	sheaf_malloc_reaper_start();
	return sheaf_malloc_class_slow(c);
}

sheaf_noinline void *sheaf_malloc_slow(size_t n)
{
	if (malloc_is_extent_size(n))
		return malloc_large_alloc(n, 0, false);
	unsigned int i = sheaf_sc_index(n);
	struct sheaf_cache *c = core_down() ? NULL : class_create(i);
	if (!c)
		return no_class(n, 0);
	/* A tail call: its return address stays the program's (for a debug cache). */
	return sheaf_malloc_class_miss(c);
}

/* sheaf_malloc and sheaf_free each start a 64-byte line, so that where their paths
 * fall in the instruction-fetch lines does not move with every edit elsewhere in the
 * library: an edit of slow paths alone (2492b10) made the fast-path rows of
 * sheaf-malloc 1.03-1.07x slower with byte-identical fast paths (tools/prev-ratios.sh,
 * seven processes, AMD EPYC, 2026-11-28). */
__attribute__((aligned(64))) void *sheaf_malloc(size_t n)
{
	return sheaf_malloc_inline(n);
}

void sheaf_free_slowpath(void *p)
{
	if (sheaf_unlikely(p == NULL))
		return;
	/* The fast path's test (node->malloc_cache), with the owner kept for errors. */
	struct sheaf_node *n = sheaf_key_owner(sheaf_page_key(p));
	struct sheaf_cache *fc = n != NULL ? n->malloc_cache : NULL;
	/* The per-thread push was tried inline (malloc.h); in ASan and Valgrind builds
	 * sheaf_cache_free below makes it, tracking the object. */
	int *ep = sheaf_malloc_errno_ptr();
	int e = *ep;
	if (sheaf_likely(fc != NULL)) {
		/* Both fast paths failed; ASan and Valgrind builds (track.h) take
		 * sheaf_cache_free, whose per-CPU push tracks the object. */
		if (SHEAF_TRACK_ENABLED)
			sheaf_cache_free(fc, p);
		else /* free and sheaf_free tail-call us (malloc.h): our return
			* address is the program's call site, for a debug cache */
			sheaf_cache_free_caller(fc, p, SITE_OR(__builtin_return_address(0)));
	} else {
		sheaf_malloc_free_slow(p, n ? n->cache : NULL, "free");
	}
	*ep = e;
}

__attribute__((aligned(64))) void sheaf_free(void *p)
{
	sheaf_free_inline(p);
}

static void *calloc_at(size_t nmemb, size_t size);

void *sheaf_calloc(size_t nmemb, size_t size)
{
	SITE_ENTER();
	void *p = calloc_at(nmemb, size);
	SITE_LEAVE();
	return p;
}

static void *calloc_at(size_t nmemb, size_t size)
{
	size_t n;
	if (unlikely(__builtin_mul_overflow(nmemb, size, &n))) {
		errno = ENOMEM;
		return NULL;
	}
	/* Above 32 KiB an extent: a fresh mapping needs no clearing, where a class object
	 * would be cleared page by page, each page then resident (10,000 blocks of 60,000 B
	 * with one byte written: 597 MiB against 39 MiB). */
	if (n > SHEAF_SC_BIG_ABOVE)
		return malloc_large_alloc(n, 0, true);
	void *p = sheaf_malloc(n);
	if (likely(p != NULL))
		memset(p, 0, n);
	return p;
}

/* @p of class @c is known free (not through the mark): a free or a realloc of it is a
 * double free, malloc_usable_size of it a use after free. */
static void report_freed(struct sheaf_cache *c, const void *p, const char *fn)
{
	if (strcmp(fn, "malloc_usable_size") != 0)
		malloc_report(SHEAF_ERR_DOUBLE_FREE, fn, "the block is already free", p, c->name,
			      (size_t)-1);
	else
		malloc_report(SHEAF_ERR_INVALID_POINTER, fn, "the block is free (a use after free)",
			      p, c->name, (size_t)-1);
}

/* A class object @p of @c that the program may use: the start of an object (the
 * slab geometry) and not free (its mark, confirmed).  Reported otherwise. */
static bool class_ptr_ok(struct sheaf_cache *c, const void *p, const char *fn)
{
	/* A debug class (SHEAF_SLAB_DEBUG) has no mark: its slab geometry and state word
	 * tell (until 2026-11-29 such a pointer passed unchecked, so that
	 * malloc_usable_size answered for an interior or freed pointer and realloc copied
	 * from one; adversarial run). */
	if (unlikely(c->debug_flags)) {
		if (!sheaf_slab_check_obj(c, p, fn)) {
			CTR_INC(errors); /* reported there */
			return false;
		}
		if (likely(!sheaf_debug_slab_is_free(c, p)))
			return true;
		report_freed(c, p, fn);
		return false;
	}
	if (unlikely(c->free_checks && !sheaf_obj_is_start(c, p))) {
		malloc_report(SHEAF_ERR_INTERIOR, fn, "not the start of an allocated block", p,
			      c->name, (size_t)-1);
		return false;
	}
	if (c->free_mark && unlikely(*sheaf_mark_word(c, p) == sheaf_mark_value(p))) {
		CTR_INC(errors);
		/* Only a free, or a realloc (which frees), of a free block is a double
		 * free; malloc_usable_size of one is a use after free. */
		if (strcmp(fn, "malloc_usable_size") != 0)
			return sheaf_free_mark_check(c, p);
		if (!sheaf_free_mark_confirmed(c, p))
			return true;
		malloc_report(SHEAF_ERR_INVALID_POINTER, fn, "the block is free (a use after free)",
			      p, c->name, (size_t)-1);
		return false;
	}
	/* ASan builds track freed objects themselves instead of the mark (slab/track.h). */
	if (SHEAF_TRACK_ASAN && sheaf_track_cache(c) && sheaf_track_asan_ok(c) &&
	    unlikely(sheaf_track_is_poisoned(p))) {
		report_freed(c, p, fn);
		return false;
	}
	return true;
}

/* The usable size of @p, 0 if it is not ours (reported unless glibc's). */
static size_t usable_size(const void *p, const char *fn)
{
	struct sheaf_cache *c = sheaf_malloc_cache_of(p);
	if (likely(c != NULL)) {
		if (likely(sheaf_malloc_class_of(c) >= 0))
			return class_ptr_ok(c, p, fn) ? c->object_size : 0;
		malloc_report(SHEAF_ERR_WRONG_CACHE, fn, "pointer of a cache that is not malloc's",
			      p, c->name, (size_t)-1);
		return 0;
	}
	size_t len = malloc_extent_lookup(p, false);
	if (len)
		return len;
	if (is_boot(p))
		return boot_size(p);
	if (sheaf_preload_foreign_size && (len = sheaf_preload_foreign_size(p)) != 0)
		return len;
	malloc_report(SHEAF_ERR_INVALID_POINTER, fn, "not allocated by sheaf_malloc", p, NULL,
		      (size_t)-1);
	return 0;
}

size_t sheaf_usable_size(const void *p)
{
	return p ? usable_size(p, "malloc_usable_size") : 0;
}

static void *realloc_at(void *p, size_t n);

void *sheaf_realloc(void *p, size_t n)
{
	SITE_ENTER();
	void *q = realloc_at(p, n);
	SITE_LEAVE();
	return q;
}

static void *realloc_at(void *p, size_t n)
{
	if (!p)
		return sheaf_malloc(n);
	if (n == 0) {
		/* glibc's choice, which Linux programs expect: free and
		 * return NULL (C17 leaves it implementation-defined). */
		sheaf_free(p);
		return NULL;
	}
	struct sheaf_cache *c = sheaf_malloc_cache_of(p);
	size_t cur;
	if (likely(c != NULL)) {
		int i = sheaf_malloc_class_of(c);
		if (unlikely(i < 0)) {
			malloc_report(SHEAF_ERR_WRONG_CACHE, "realloc",
				      "pointer of a cache that is not malloc's", p, c->name,
				      (size_t)-1);
			errno = EINVAL;
			return NULL;
		}
		if (unlikely(!class_ptr_ok(c, p, "realloc"))) {
			errno = EINVAL; /* reported; under warn the block is left alone */
			return NULL;
		}
		/* Same class: nothing to do, growing or shrinking. */
		if (n <= SHEAF_SC_MAX && sheaf_sc_index(n) == (unsigned int)i)
			return p;
		cur = c->object_size;
	} else {
		size_t len = malloc_extent_lookup(p, false);
		if (len) {
			if (malloc_is_extent_size(n))
				return malloc_extent_resize(p, len, n);
			cur = len; /* shrinking below the extent threshold: move */
		} else {
			cur = usable_size(p, "realloc");
			if (!cur) {
				errno = EINVAL;
				return NULL;
			}
		}
	}
	void *q = sheaf_malloc(n);
	if (unlikely(!q)) {
		/* NULL (ENOMEM), the block as it was, a shrink too (as mimalloc does for a
		 * shrink below half).  Keeping the block under the smaller request would
		 * leave it in a class that free_sized(p, n) then reports as a size mismatch:
		 * a correct program aborted (found by fuzz_cache with mmap failures). */
		return NULL;
	}
	memcpy(q, p, n < cur ? n : cur);
	sheaf_free(p);
	return q;
}

/* Class @i reached from class @from by the aligned-allocation search for
 * some alignment, i.e. no class in [from, i) is aligned as much as @i. */
static bool align_reachable(unsigned int from, unsigned int i)
{
	for (unsigned int j = from; j < i; j++)
		if (sheaf_sc_align(j) >= sheaf_sc_align(i))
			return false;
	return true;
}

void *sheaf_aligned_alloc(size_t align, size_t n)
{
	if (unlikely(align == 0 || (align & (align - 1)) != 0)) {
		errno = EINVAL;
		return NULL;
	}
	if (align <= SHEAF_SC_ALIGN_MAX && !malloc_is_extent_size(n)) {
		/* The smallest class that holds n and whose objects are all
		 * aligned to align; the largest, 64 KiB, is 4 KiB-aligned, so the search
		 * always ends (and n <= 32 KiB ends at the 32 KiB class at the latest). */
		unsigned int i = sheaf_sc_index(n);
		while (sheaf_sc_align(i) < align)
			i++;
		struct sheaf_cache *c =
			atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
		if (unlikely(!c)) {
			c = core_down() ? NULL : class_create(i);
			if (!c)
				return no_class(n, align);
		}
		return sheaf_malloc_class_miss(c); /* a tail call, as above */
	}
	return malloc_large_alloc(n ? n : 1, align, false);
}

void sheaf_free_sized(void *p, size_t size)
{
	if (unlikely(!p))
		return;
	int *ep = sheaf_malloc_errno_ptr();
	int e = *ep;
	struct sheaf_cache *c = sheaf_malloc_cache_of(p);
	int i;
	if (likely(c != NULL) && likely((i = sheaf_malloc_class_of(c)) >= 0)) {
		/* Valid sizes: those whose class is i, and those from which an
		 * aligned allocation reaches class i. */
		if (likely(size <= SHEAF_SC_MAX && sheaf_sc_index(size) == (unsigned int)i) ||
		    (size <= sheaf_sc_size[i] &&
		     align_reachable(sheaf_sc_index(size), (unsigned int)i))) {
			/* A debug class records the program's call site (ours from here). */
			if (unlikely(c->debug_flags))
				sheaf_cache_free_caller(c, p, __builtin_return_address(0));
			else
				sheaf_cache_free(c, p);
		} else if (class_ptr_ok(c, p, "sheaf_free_sized"))
			malloc_report(SHEAF_ERR_SIZE_MISMATCH, "sheaf_free_sized",
				      "size does not match the allocation", p, c->name, size);
	} else if (!c && !is_boot(p)) {
		size_t len = malloc_extent_lookup(p, false);
		if (len && size > len)
			malloc_report(SHEAF_ERR_SIZE_MISMATCH, "sheaf_free_sized",
				      "size does not match the allocation", p, NULL, size);
		else
			sheaf_malloc_free_slow(p, c, "sheaf_free_sized");
	} else {
		sheaf_malloc_free_slow(p, c, "sheaf_free_sized");
	}
	*ep = e;
}

/* ---- POSIX and glibc conventions (malloc/malloc.h) -------------------------------- */

bool sheaf_malloc_reclaim(void)
{
	if (malloc_no_reclaim || malloc_tls_creating || sheaf_init_running_here())
		return false;
	malloc_no_reclaim++;
	size_t count, bytes;
	sheaf_malloc_extent_cache_stat(&count, &bytes);
	size_t mapped = sheaf_rd(sheaf_heap.blocks_mapped);
	size_t returned = sheaf_rd(sheaf_heap.returned_bytes);
	(void)sheaf_malloc_trim();
	bool gave = count != 0 || sheaf_rd(sheaf_heap.blocks_mapped) != mapped ||
		    sheaf_rd(sheaf_heap.returned_bytes) != returned;
	CTR_INC(reclaims);
	malloc_no_reclaim--;
	return gave;
}

sheaf_noinline void *sheaf_malloc_class_miss(struct sheaf_cache *c)
{
	/* Tail-called by the inline paths: the return address is the program's call
	 * site, which a debug cache records. */
	const void *caller = SITE_OR(__builtin_return_address(0));
	int e = errno;
	void *o = NULL;
	if (sheaf_likely(!malloc_big_class_spills(c)))
		o = SHEAF_TRACK_ENABLED ? sheaf_cache_alloc(c) :
					  sheaf_cache_alloc_caller(c, caller);
	if (sheaf_likely(o != NULL)) {
		/* A refill that failed part of the way still hands out an object, with
		 * errno set by the part that failed: malloc keeps errno when it succeeds. */
		errno = e;
		return o;
	}
	return sheaf_malloc_class_retry(c, e, caller);
}

void *sheaf_malloc_class_retry(struct sheaf_cache *c, int e, const void *caller)
{
	void *o = NULL;
	if (malloc_is_big_class(c)) {
		/* A big class's block as an extent instead, outside the heap window (full,
		 * or half of it taken: bigclass.c), with no reclaim first: the extent
		 * path reclaims when mapping fails (each such malloc trimmed every cache,
		 * 15-37 us, until 2026-11-29's review). */
		o = malloc_large_alloc(c->object_size, 0, false);
	} else if (errno == ENOMEM && sheaf_malloc_reclaim()) {
		o = sheaf_cache_alloc_caller(c, caller);
	}
	errno = o ? e : ENOMEM;
	return o;
}

int sheaf_malloc_trim(void)
{
	size_t count, bytes;
	sheaf_malloc_extent_cache_stat(&count, &bytes);
	sheaf_malloc_extent_cache_drain();
	for (unsigned int i = 0; i < SHEAF_SC_COUNT; i++) {
		struct sheaf_cache *c =
			atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
		if (c)
			sheaf_cache_shrink(c);
	}
	/* The core does not say what shrink released: report the extents. */
	return count != 0;
}
