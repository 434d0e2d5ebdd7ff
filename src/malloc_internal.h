/* SPDX-License-Identifier: MIT */
/*
 * malloc_internal.h - the malloc front end's functions shared with the
 * preload library (src/preload/) and the unit tests.  The POSIX and glibc
 * entry points with their exact error conventions live here, so that the
 * preload library is a thin layer of names and counters and the conventions
 * are unit-tested without LD_PRELOAD.
 */
#ifndef SHEAF_MALLOC_INTERNAL_H
#define SHEAF_MALLOC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sheaf_malloc.h"

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

/* Counters of the front end's own paths (not per call: see the preload
 * library for call counts).  Read racily; for tests and the stats line. */
struct sheaf_malloc_counters {
	uint64_t extent_maps;     /* extents mapped from the OS */
	uint64_t extent_reuses;   /* large requests served from the extent cache */
	uint64_t extent_unmaps;   /* extents given back to the OS */
	uint64_t extent_remaps;   /* realloc of an extent through mremap */
	uint64_t boot_allocs;     /* re-entrant allocations served by the bootstrap arena */
	uint64_t foreign_frees;   /* pointers of another allocator passed to free */
	uint64_t errors;          /* invalid pointers or size mismatches reported */
};
void sheaf_malloc_counters_get(struct sheaf_malloc_counters *out);

/* Give every cached extent back to the OS now (tests; the normal path waits
 * SHEAF_MALLOC_EXTENT_DELAY_NS after the free). */
void sheaf_malloc_extent_cache_drain(void);
/* Number and bytes of extents currently cached. */
void sheaf_malloc_extent_cache_stat(size_t *count, size_t *bytes);

#define SHEAF_MALLOC_EXTENT_DELAY_NS 1000000000ull /* cached extents age out after 1 s */
#define SHEAF_MALLOC_EXTENT_CACHE_SLOTS 16u
#define SHEAF_MALLOC_EXTENT_CACHE_BYTES (64u << 20)  /* at most 64 MiB cached */
#define SHEAF_MALLOC_EXTENT_CACHE_ONE (32u << 20)    /* larger extents are never cached */

/* ---- src/preload/preload.c: memory of the system allocator ------------------- */

/* Defined only in libsheaf-malloc.so (weak here, NULL in libsheaf): a pointer
 * that is neither a Sheaf object, an extent nor bootstrap memory may belong
 * to glibc's allocator (memory glibc allocated before the preload took over,
 * or through __libc_malloc).  foreign_size returns its usable size, or 0 when
 * it is not glibc's either; foreign_free gives it back to glibc. */
size_t sheaf_preload_foreign_size(const void *ptr) __attribute__((weak));
void sheaf_preload_foreign_free(void *ptr) __attribute__((weak));

#endif /* SHEAF_MALLOC_INTERNAL_H */
