/* SPDX-License-Identifier: MIT */
/*
 * posix.c - the POSIX and glibc allocation calls that are conventions over the malloc
 * front end's own (malloc.c): posix_memalign, memalign, valloc, pvalloc and
 * reallocarray, with the argument rules and errors glibc gives them (malloc/malloc.h).
 */
#include <errno.h>
#include <stdint.h>

#include "malloc/malloc_impl.h"

int sheaf_malloc_posix_memalign(void **memptr, size_t align, size_t size)
{
	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	int e = errno;
	SITE_ENTER();
	void *p = sheaf_aligned_alloc(align, size);
	SITE_LEAVE();
	int r = p ? 0 : errno;
	errno = e;
	if (p)
		*memptr = p;
	return r;
}

void *sheaf_malloc_memalign(size_t align, size_t size)
{
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (align == 0)
		align = 1;
	if (align & (align - 1))
		align = (size_t)1 << (64 - __builtin_clzll((unsigned long long)align));
	return sheaf_aligned_alloc(align, size);
}

void *sheaf_malloc_valloc(size_t size)
{
	return sheaf_aligned_alloc(PAGE, size);
}

void *sheaf_malloc_pvalloc(size_t size)
{
	if (size > SIZE_LIMIT) {
		errno = ENOMEM;
		return NULL;
	}
	return sheaf_aligned_alloc(PAGE, size ? round_up(size, PAGE) : PAGE);
}

void *sheaf_malloc_reallocarray(void *p, size_t nmemb, size_t size)
{
	size_t n;
	if (__builtin_mul_overflow(nmemb, size, &n)) {
		errno = ENOMEM;
		return NULL;
	}
	return sheaf_realloc(p, n);
}
