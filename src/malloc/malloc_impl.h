/* SPDX-License-Identifier: MIT */
/*
 * malloc_impl.h - what the files of the malloc front end share among themselves
 * (private to src/malloc/; preload/ and the tests use malloc/malloc.h).
 */
#ifndef SHEAF_MALLOC_IMPL_H
#define SHEAF_MALLOC_IMPL_H

#include "malloc/malloc.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define PAGE 4096u
/* Requests above PTRDIFF_MAX fail as in glibc: pointer differences inside
 * the block must be representable. */
#define SIZE_LIMIT ((size_t)PTRDIFF_MAX)

static inline size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) & ~(a - 1);
}

/* The program's call site of the entry point this thread is in, for a debug class's
 * tracks (docs/debugging.md "Sites"), where that entry point reaches the class caches
 * through a call of its own (calloc, realloc, posix_memalign): the slow paths below
 * otherwise take their own return address, the program's when they are tail-called,
 * but an address inside Sheaf from these (shown as sheaf_calloc+0x1c until 2026-11-29,
 * adversarial run).  NULL outside them; malloc.c. */
extern __thread const void *malloc_site;
#define SITE_ENTER()                           \
	const void *site_outer_ = malloc_site; \
	malloc_site = site_outer_ ? site_outer_ : __builtin_return_address(0)
#define SITE_LEAVE() (malloc_site = site_outer_)
#define SITE_OR(ra)  (malloc_site ? malloc_site : (ra))

/* malloc.c: counters of the front end's own paths (sheaf_malloc_counters_get). */
struct malloc_counters {
	_Atomic uint64_t extent_maps, extent_reuses, extent_gathers, extent_moves, extent_merges,
		extent_unmaps, extent_remaps;
	_Atomic uint64_t boot_allocs, foreign_frees, errors;
	/* Blocks outside the size classes handed out and taken back by the program's own
	 * calls (a realloc's internal move is neither): sheaf_malloc_served().  The
	 * preload's glibc blocks when the core could not start count too, as their frees
	 * (foreign_frees) do. */
	_Atomic uint64_t extent_allocs, extent_frees, boot_frees, fallback_allocs;
	_Atomic uint64_t reclaims; /* sheaf_malloc_reclaim() after an ENOMEM */
};
extern struct malloc_counters malloc_ctr;
#define CTR_INC(f) atomic_fetch_add_explicit(&malloc_ctr.f, 1, memory_order_relaxed)

/* Non-zero while this thread creates a class cache or initialises the core (malloc.c):
 * its allocations then come from the bootstrap arena. */
extern __thread unsigned int malloc_tls_creating;

/* The fork handlers are registered (before the first extent lock is taken). */
void malloc_fork_handlers_ensure(void);

/* Report an invalid use of the malloc API through the one reporter (base/error.h). */
void malloc_report(enum sheaf_error_kind kind, const char *fn, const char *what, const void *ptr,
		   const char *cache, size_t size) __attribute__((cold, noinline));

/* An extent's kernel mappings (VMAs) as extent.c estimates them (XC_VMAS_MAX): their
 * number in the low bits; LO_SHARED and HI_SHARED tell that its first or last mapping
 * goes on into the neighbour it was split from (so that the two, merged again, count it
 * once: only when both neighbours say so, as a flag left behind by a neighbour that
 * moved away never meets a partner's). */
#define EXT_VMAS_LO_SHARED (1u << 30)
#define EXT_VMAS_HI_SHARED (1u << 31)

/* extent_registry.c: the live extents, by address. */
/* Record the new extent @p of @len bytes and its kernel mappings @vmas (EXT_VMAS_*);
 * false when no memory is left for the table. */
bool malloc_extent_register(void *p, size_t len, unsigned int vmas);
/* The registered extent at @p now has @len bytes (realloc in place: its end no
 * longer meets the neighbour it may have been split from). */
void malloc_extent_set_len(const void *p, size_t len);
/* The length of the live extent at @p (0: not an extent); @remove takes it out of the
 * registry. */
size_t malloc_extent_lookup(const void *p, bool remove);
/* malloc_extent_lookup(@p, true), and the kernel mappings it was registered with. */
size_t malloc_extent_remove(const void *p, unsigned int *vmas);
void malloc_extent_registry_fork_register(void); /* rank MALLOC_SHARD */

/* extent.c: the cache of freed extents. */
/* At most this many cached extents are moved into one request's mapping. */
#define MALLOC_EXTENT_GATHER_MAX 16u
/* What the cache hands out for one request: a single extent that holds it
 * (n == 1 and one), or up to MALLOC_EXTENT_GATHER_MAX smaller ones for extent_alloc.c to
 * move into one new mapping (n of them, maybe none). */
struct malloc_extent_pick {
	bool one;
	unsigned int n;
	struct {
		char *p;
		size_t len;
		unsigned int vmas;
	} piece[MALLOC_EXTENT_GATHER_MAX];
};

/* The length of a new mapping for a request of @n bytes: its size step. */
size_t malloc_extent_len(size_t n);
/* Cached memory for a request of @need (whole pages) bytes aligned to @align, into *@pk
 * (taken out of the cache). */
void malloc_extent_take(size_t need, size_t align, struct malloc_extent_pick *pk);
/* Unmap the extent @p of @len bytes (counted; a failure is reported). */
void malloc_extent_unmap(void *p, size_t len);
/* RLIMIT_AS or RLIMIT_DATA is set (asked of the kernel). */
bool malloc_address_space_limited(void);
/* A freed extent into the cache (or back to the OS). */
void malloc_extent_free(void *p, size_t len, unsigned int vmas);
void malloc_extent_fork_register(void); /* ranks MALLOC_EXTENTS, then MALLOC_SHARD */

/* bigclass.c: where the classes above 32 KiB are used. */
/* The classes above 32 KiB are used (per-CPU mode, no limit of address space; decided
 * once, after the core started). */
bool malloc_big_classes_ok(void);
/* Class cache @c is one of the classes above 32 KiB. */
static inline bool malloc_is_big_class(const struct sheaf_cache *c)
{
	return c->object_size > SHEAF_SC_BIG_ABOVE;
}
/* Class @c is one of them and half the heap window is in slabs: its block is an extent. */
bool malloc_big_class_spills(const struct sheaf_cache *c);
/* Sizes that are extents: above the classes, and above 32 KiB where the classes above
 * 32 KiB are not used. */
static inline bool malloc_is_extent_size(size_t n)
{
	return n > SHEAF_SC_MAX || (n > SHEAF_SC_BIG_ABOVE && !malloc_big_classes_ok());
}

/* [@p, @p + @len) of an extent leaves the program (a free, the tail of a shrink, the old
 * place of a move): the checker that wants every free (debug objects) sees it, as it
 * sees a class object's in sheaf_cache_free.  Before the memory goes: a fix-up may
 * still touch it.  Until 2026-11-29 extents were not checked, and an active tracked
 * object in a freed block above 64 KiB stayed tracked, unreported. */
static inline void malloc_extent_free_check(const void *p, size_t len)
{
	void (*hook)(const void *, size_t) = sheaf_free_check_hook_get();
	if (hook)
		hook(p, len);
}

/* extent_alloc.c: large blocks. */
/* A new extent of @n bytes aligned to @align (zeroed with @zero), from the cache or the
 * OS; NULL with errno set. */
void *malloc_large_alloc(size_t n, size_t align, bool zero);
/* realloc of the extent @p of @len bytes to @n bytes. */
void *malloc_extent_resize(void *p, size_t len, size_t n);

#endif /* SHEAF_MALLOC_IMPL_H */
