/* SPDX-License-Identifier: MIT */
/*
 * preload.h - what libsheaf-malloc.so exports beyond <stdlib.h> and
 * <malloc.h>: the C++ allocation functions under their Itanium-ABI names
 * (written in C so that C programs do not load libstdc++; see preload.c),
 * and the call counters.
 */
#ifndef SHEAF_PRELOAD_H
#define SHEAF_PRELOAD_H

#include <stddef.h>
#include <stdint.h>

#define SHEAF_PRELOAD_API __attribute__((visibility("default")))

/* Blocks served since the program started (a fork child's counts include its
 * parent's up to the fork): every block an allocating call (malloc, calloc, realloc,
 * aligned forms, operator new) handed out counts in *mallocs, every block a free,
 * delete or realloc took back in *frees, and a free of another allocator's pointer
 * too; a realloc in place counts nothing, a moving one a malloc and a free.  Read off
 * the core's statistics (a few microseconds per size class), nothing is counted on
 * the calls.  In per-thread mode (SHEAF_PERCPU=thread, or no rseq) the fast-path
 * counts of another thread still running join at its next slow path, so they may be
 * a little behind; the calling thread's own are exact. */
SHEAF_PRELOAD_API void sheaf_preload_counts(uint64_t *mallocs, uint64_t *frees);

/* C23's free_sized and free_aligned_sized (glibc 2.36's <stdlib.h> declares neither). */
SHEAF_PRELOAD_API void free_sized(void *p, size_t n);
SHEAF_PRELOAD_API void free_aligned_sized(void *p, size_t align, size_t n);

/* Opaque stand-ins for std::nothrow_t and std::align_val_t. */
typedef struct sheaf_nothrow sheaf_nothrow_t;
typedef size_t sheaf_align_val_t;

/* operator new / new[]: plain, nothrow, aligned, aligned + nothrow. */
SHEAF_PRELOAD_API void *_Znwm(size_t n);
SHEAF_PRELOAD_API void *_Znam(size_t n);
SHEAF_PRELOAD_API void *_ZnwmRKSt9nothrow_t(size_t n, const sheaf_nothrow_t *nt);
SHEAF_PRELOAD_API void *_ZnamRKSt9nothrow_t(size_t n, const sheaf_nothrow_t *nt);
SHEAF_PRELOAD_API void *_ZnwmSt11align_val_t(size_t n, sheaf_align_val_t al);
SHEAF_PRELOAD_API void *_ZnamSt11align_val_t(size_t n, sheaf_align_val_t al);
SHEAF_PRELOAD_API void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, sheaf_align_val_t al,
							   const sheaf_nothrow_t *nt);
SHEAF_PRELOAD_API void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, sheaf_align_val_t al,
							   const sheaf_nothrow_t *nt);

/* operator delete / delete[]: plain, sized, nothrow, aligned, sized + aligned,
 * aligned + nothrow. */
SHEAF_PRELOAD_API void _ZdlPv(void *p);
SHEAF_PRELOAD_API void _ZdaPv(void *p);
SHEAF_PRELOAD_API void _ZdlPvm(void *p, size_t n);
SHEAF_PRELOAD_API void _ZdaPvm(void *p, size_t n);
SHEAF_PRELOAD_API void _ZdlPvRKSt9nothrow_t(void *p, const sheaf_nothrow_t *nt);
SHEAF_PRELOAD_API void _ZdaPvRKSt9nothrow_t(void *p, const sheaf_nothrow_t *nt);
SHEAF_PRELOAD_API void _ZdlPvSt11align_val_t(void *p, sheaf_align_val_t al);
SHEAF_PRELOAD_API void _ZdaPvSt11align_val_t(void *p, sheaf_align_val_t al);
SHEAF_PRELOAD_API void _ZdlPvmSt11align_val_t(void *p, size_t n, sheaf_align_val_t al);
SHEAF_PRELOAD_API void _ZdaPvmSt11align_val_t(void *p, size_t n, sheaf_align_val_t al);
SHEAF_PRELOAD_API void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, sheaf_align_val_t al,
							   const sheaf_nothrow_t *nt);
SHEAF_PRELOAD_API void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, sheaf_align_val_t al,
							   const sheaf_nothrow_t *nt);

#endif /* SHEAF_PRELOAD_H */
