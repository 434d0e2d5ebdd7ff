/* SPDX-License-Identifier: MIT */
/*
 * sheaf_malloc.h - a malloc built on Sheaf caches (docs/malloc.md).
 *
 * Small requests are served by size-class caches (each a Sheaf cache with
 * sheaves); large requests by mmap'd extents with a small cache of recently
 * freed extents.  The same functions back libsheaf-malloc.so, the LD_PRELOAD
 * replacement of the system malloc.  Semantics follow C11/POSIX: failure
 * returns NULL with errno = ENOMEM; sheaf_free(NULL) does nothing and
 * preserves errno.
 */
#ifndef SHEAF_MALLOC_H
#define SHEAF_MALLOC_H

#include <stddef.h>
#include "sheaf.h"

#ifdef __cplusplus
extern "C" {
#endif

SHEAF_API void *sheaf_malloc(size_t size);
SHEAF_API void sheaf_free(void *ptr);
SHEAF_API void *sheaf_calloc(size_t nmemb, size_t size);
SHEAF_API void *sheaf_realloc(void *ptr, size_t size);
SHEAF_API void *sheaf_aligned_alloc(size_t alignment, size_t size);
SHEAF_API size_t sheaf_usable_size(const void *ptr);
/* Free with the size given at allocation (any size between the request and
 * sheaf_usable_size()); a mismatch is reported as an error. */
SHEAF_API void sheaf_free_sized(void *ptr, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* SHEAF_MALLOC_H */
