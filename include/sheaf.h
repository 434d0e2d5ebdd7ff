/* SPDX-License-Identifier: MIT */
/*
 * sheaf.h - the Sheaf object-cache API.
 *
 * Sheaf is a userspace slab allocator with the Linux 7.0 SLUB design: per-CPU
 * sheaves of object pointers, per-node barns of full and empty sheaves, slabs
 * with freelists.  See docs/design.md for the theory statement.
 *
 * All handles are opaque.  Every function is thread-safe unless it says
 * otherwise.  Errors by the caller (freeing a pointer Sheaf did not hand out,
 * a pointer of another cache, a detectable double free) print one line on
 * stderr naming the cache and the address and abort the process, or, with
 * SHEAF_ON_ERROR=warn, report and leak the object.  Allocation failure returns
 * NULL with errno = ENOMEM and leaves the cache usable.
 *
 * RCU (docs/rcu.md): readers must use the liburcu flavour selected with
 * sheaf_rcu_set_flavor() (default: memb) and be registered with it.  Threads
 * that call sheaf_cache_free_rcu() should be registered too (QSBR: online), as
 * liburcu asks of call_rcu() callers; this matters only to programs that
 * create and free per-CPU call_rcu workers.  Barriers and the destroy of a
 * cache with deferred frees wait for a grace period: never call them inside a
 * read-side critical section (reported as an error; an online QSBR thread is
 * taken offline for the wait).
 */
#ifndef SHEAF_H
#define SHEAF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SHEAF_API __attribute__((visibility("default")))
#else
#define SHEAF_API
#endif

struct sheaf_cache;
struct sheaf_prefilled;

/* Cache flags (struct sheaf_cache_args.flags). */
/* Align objects to cache lines (64 B); as the kernel's SLAB_HWCACHE_ALIGN, an object
 * of at most half a line gets the largest power-of-two fraction of a line that still
 * holds it (16 B objects: 16-byte aligned, four to a line, none across two lines). */
#define SHEAF_HWCACHE_ALIGN 0x0001u
#define SHEAF_TYPESAFE_BY_RCU \
	0x0002u                         /* slab memory returns to the OS only after an RCU
                                          grace period; objects may be reused at once */
#define SHEAF_NO_SHEAVES        0x0004u /* no per-CPU sheaves: every operation uses slabs */
#define SHEAF_DEBUG_REDZONE     0x0010u /* red zones around each object */
#define SHEAF_DEBUG_POISON      0x0020u /* poison free objects, check on allocation */
#define SHEAF_DEBUG_STORE_USER  0x0040u /* record allocation and free call sites */
#define SHEAF_DEBUG_CONSISTENCY 0x0080u /* consistency checks on every operation */
#define SHEAF_DEBUG_ALL         0x00f0u
/* Behave like Linux 7.0 (for comparison in benchmarks): size-tier sheaf
 * capacity, barn limits 10/10 and none of D1-D7 (no barn on memoryless
 * nodes, remote-node objects bypass sheaves, fixed barn limits, global RCU
 * barrier on destroy). */
#define SHEAF_KERNEL_COMPAT 0x0100u
/* Every flag above; any other bit makes sheaf_cache_create fail with EINVAL. */
#define SHEAF_CACHE_FLAGS_ALL 0x01f7u

/* The largest sheaf capacity (sheaf_cache_args.sheaf_capacity,
 * sheaf_cache_set_capacity, SHEAF_SHEAF_CAPACITY) and the largest prefill:
 * at most SHEAF_MAX_SHEAF_CAPACITY objects and SHEAF_MAX_SHEAF_BYTES of their
 * slots (each object with what the cache keeps beside it: 16 bytes for a cache
 * with a constructor or SHEAF_TYPESAFE_BY_RCU, more for a debug cache), so that
 * no refill commits more, else EINVAL.  SHEAF_SHEAF_CAPACITY is
 * lowered to a cache's byte bound instead. */
#define SHEAF_MAX_SHEAF_CAPACITY 4096u
#define SHEAF_MAX_SHEAF_BYTES    (64u << 20)

struct sheaf_cache_args {
	size_t align;                /* 0: natural (8, or 16 for sizes >= 16); else a
					power of two up to 4096 (EINVAL otherwise),
					at least 8 for sizes >= 8 */
	unsigned int sheaf_capacity; /* 0: default (D1); otherwise exactly this (a cache
					without sheaves, SHEAF_NO_SHEAVES or a debug
					cache, ignores it: its capacity is 0) */
	unsigned int flags;          /* SHEAF_* above */
	void (*ctor)(void *);        /* run once per object when its slab is created */
};

/* Create a cache of objects of @size bytes.  @args may be NULL.  @name is
 * copied (at most 47 bytes kept).  Returns NULL with errno set on failure
 * (EINVAL for size 0, a size whose slot is over SHEAF_MAX_OBJECT_SIZE (the object
 * with what the cache keeps beside it: a constructor or SHEAF_TYPESAFE_BY_RCU cache
 * takes objects up to 1 MiB - 16 bytes, a debug cache less), a bad alignment, a
 * sheaf_capacity over SHEAF_MAX_SHEAF_CAPACITY or whose sheaf would hold more than
 * SHEAF_MAX_SHEAF_BYTES of objects, or an undefined flag; ENOMEM);
 * on success errno is left as it was.
 *
 * Misuse (README "Errors"): a NULL or destroyed cache, an interior, foreign or
 * already free pointer, an object or prefilled sheaf of another cache is
 * reported on one line and aborts (SHEAF_ON_ERROR=warn: reported and leaked). */
SHEAF_API struct sheaf_cache *sheaf_cache_create(const char *name, size_t size,
						 const struct sheaf_cache_args *args);

/* Destroy a cache.  Waits for the cache's own RCU-deferred frees (never the
 * global barrier).  Objects still allocated are reported (name, count) on
 * stderr and their memory is kept, never freed under the program; the handle
 * is dead all the same (any later call on it is a destroyed cache).  Prefilled
 * sheaves not returned are reported (count) and their objects, never handed out,
 * taken back: only objects the program holds count as still allocated. */
SHEAF_API void sheaf_cache_destroy(struct sheaf_cache *c);

SHEAF_API void *sheaf_cache_alloc(struct sheaf_cache *c);
SHEAF_API void sheaf_cache_free(struct sheaf_cache *c, void *obj);

/* All or nothing: returns @n with objs[0..n-1] filled, or 0 (errno ENOMEM; at
 * once for more than half the machine's memory; EINVAL for a NULL @objs or a bad
 * handle, which is also reported).  @n of 0 returns 0 and leaves errno. */
SHEAF_API size_t sheaf_cache_alloc_bulk(struct sheaf_cache *c, size_t n, void **objs);
/* Frees objs[0..n-1] (NULL entries ignored); a NULL @objs with @n above 0 is reported
 * ("invalid pointer"), @n of 0 does nothing. */
SHEAF_API void sheaf_cache_free_bulk(struct sheaf_cache *c, size_t n, void **objs);

/* Prefilled sheaves (kernel: kmem_cache_prefill_sheaf).  A prefilled sheaf
 * with at least @n objects guarantees @n successful sheaf_cache_alloc_from()
 * calls; alloc_from returns NULL once the sheaf is empty, never falling back
 * to the cache.  prefill returns NULL (errno ENOMEM, or EINVAL for n == 0 or
 * n > SHEAF_MAX_SHEAF_CAPACITY).  A prefilled sheaf belongs to its cache:
 * passing it with another cache is reported ("wrong sheaf"). */
SHEAF_API struct sheaf_prefilled *sheaf_cache_prefill(struct sheaf_cache *c, unsigned int n);
SHEAF_API void *sheaf_cache_alloc_from(struct sheaf_cache *c, struct sheaf_prefilled *s);
/* Make *s hold at least @n objects; may replace *s.  0, -EINVAL, -ENOMEM
 * (on -ENOMEM *s is the same sheaf, with every object it held and perhaps some
 * the refill could get, still fewer than @n: sheaf_prefilled_size() tells). */
SHEAF_API int sheaf_cache_refill(struct sheaf_cache *c, struct sheaf_prefilled **s, unsigned int n);
SHEAF_API void sheaf_cache_return(struct sheaf_cache *c, struct sheaf_prefilled *s);
SHEAF_API unsigned int sheaf_prefilled_size(const struct sheaf_prefilled *s);

/* Flush every CPU's sheaves and the barns, discard empty slabs and give their
 * memory back to the OS.  In per-thread mode only the calling thread's sheaves
 * are flushed; other threads' go at their next slow path, sheaf_thread_flush()
 * or exit (README "Limitations"). */
SHEAF_API void sheaf_cache_shrink(struct sheaf_cache *c);

/* ---- Extensions ---------------------------------------------------------- */

/* Change the sheaf capacity at run time (D2).  Sheaves of the old
 * capacity drain lazily; the barns' limits, in bytes of objects (D6,
 * SHEAF_BARN_BYTES), become as many sheaves of the new capacity.  The cache then keeps this capacity: it no longer
 * adapts its own (docs/design.md, D2).  Returns 0 or -EINVAL (0, above
 * SHEAF_MAX_SHEAF_CAPACITY, a sheaf of more than SHEAF_MAX_SHEAF_BYTES of objects, or a
 * cache without sheaves). */
SHEAF_API int sheaf_cache_set_capacity(struct sheaf_cache *c, unsigned int capacity);
/* The cache's name and object size; a NULL, destroyed or foreign handle is reported
 * (README "Errors") and gives NULL and 0 (under SHEAF_ON_ERROR=warn). */
SHEAF_API const char *sheaf_cache_name(const struct sheaf_cache *c);
SHEAF_API size_t sheaf_cache_object_size(const struct sheaf_cache *c);
/* The cache whose slab holds @obj (any address in it: an object, inside one, or free),
 * or NULL if no cache's slab holds it, Sheaf's own metadata (a prefilled sheaf) included.
 * For a malloc block its size class ("malloc-112"), which sheaf_cache_destroy refuses
 * ("invalid cache"). */
SHEAF_API struct sheaf_cache *sheaf_cache_of(const void *obj);

/* RCU-deferred free (docs/rcu.md).  The object keeps its contents until a grace
 * period of the selected liburcu flavour has ended, then returns to the
 * cache (as part of a full sheaf in the barn when possible). */
SHEAF_API void sheaf_cache_free_rcu(struct sheaf_cache *c, void *obj);
/* Returns once every object of @c passed to free_rcu before the call is back
 * in the allocator.  Returns at once when the cache has none in flight, else
 * waits one grace period (it never waits for other caches). */
SHEAF_API void sheaf_cache_rcu_barrier(struct sheaf_cache *c);
/* The same for every cache. */
SHEAF_API void sheaf_rcu_barrier(void);

enum sheaf_rcu_flavor {
	SHEAF_RCU_MEMB = 0, /* liburcu default flavour (urcu_memb_*) */
	SHEAF_RCU_MB,       /* urcu_mb_* */
	SHEAF_RCU_QSBR,     /* urcu_qsbr_* */
};
/* Select the flavour the program's readers use.  Must be called before the
 * first sheaf_cache_free_rcu() and before creating a SHEAF_TYPESAFE_BY_RCU
 * cache; afterwards returns -EBUSY for another flavour (0 for the same). */
SHEAF_API int sheaf_rcu_set_flavor(enum sheaf_rcu_flavor f);

/* Options (docs/options.md): set one by name before the first allocation.
 * Returns 0, -ENOENT (unknown name), -EINVAL (bad value) or -EBUSY. */
SHEAF_API int sheaf_option_set(const char *name, const char *value);

/* Which per-CPU mode is active: "percpu-rseq" or "per-thread"; "not started" before
 * Sheaf starts (the first cache, or the first allocation under the malloc front end),
 * when the mode is not chosen yet. */
SHEAF_API const char *sheaf_percpu_mode(void);

/* Flush the calling thread's sheaves (per-thread mode) to the barns; in
 * per-CPU mode a no-op.  Called automatically at thread exit. */
SHEAF_API void sheaf_thread_flush(void);

#define SHEAF_MAX_OBJECT_SIZE (1u << 20)

#ifdef __cplusplus
}
#endif
#endif /* SHEAF_H */
