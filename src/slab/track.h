/* SPDX-License-Identifier: MIT */
/*
 * track.h - tell Valgrind's memcheck and AddressSanitizer which Sheaf memory
 * the program may touch (after mimalloc's track.h).
 *
 * Without these, both tools see only big mmap'd slabs: a use after free or
 * an overflow into a neighbouring object of a Sheaf cache goes unnoticed.
 * With them, an object is accessible exactly while the program owns it:
 *
 *   slab created          whole slab NOACCESS (after the core wrote it)
 *   object handed out     sheaf_track_alloc: memcheck MALLOCLIKE_BLOCK (a heap
 *                         block, with the allocation stack), ASan unpoisoned
 *   object taken back     sheaf_track_free: memcheck FREELIKE_BLOCK (later
 *                         accesses and a second free are reported with the
 *                         free stack), ASan poisoned
 *   free-list link        sheaf_track_mem_defined before the core reads it,
 *                         sheaf_track_mem_noaccess after
 *   slab discarded        sheaf_track_mem_undefined (back to the page heap)
 *
 * Objects cached in sheaves, barns and prefilled sheaves are free from the
 * program's view, so they stay poisoned.  Caches with SHEAF_TYPESAFE_BY_RCU
 * are not tracked: RCU readers may legitimately read a freed object.
 *
 * Selection, at compile time only, so that a normal build compiles every
 * macro to nothing (the fast-path golden counts do not change):
 *   - memcheck: -DSHEAF_VALGRIND=1 (CMake -DSHEAF_VALGRIND=ON); the client
 *     requests cost a few instructions when not running under Valgrind.
 *   - ASan: automatic when the library is compiled with -fsanitize=address.
 * Both may be on at once.  The headers are the system's
 * (<valgrind/memcheck.h>, <sanitizer/asan_interface.h>).
 */
#ifndef SHEAF_TRACK_H
#define SHEAF_TRACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(SHEAF_VALGRIND) && SHEAF_VALGRIND
#include <valgrind/memcheck.h>
#define SHEAF_TRACK_VALGRIND 1
#else
#define SHEAF_TRACK_VALGRIND 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define SHEAF_TRACK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHEAF_TRACK_ASAN 1
#endif
#endif
#ifndef SHEAF_TRACK_ASAN
#define SHEAF_TRACK_ASAN 0
#endif
#if SHEAF_TRACK_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* True when any tool is told about Sheaf memory (for tests and for code that
 * must skip a check the tools make redundant). */
#define SHEAF_TRACK_ENABLED (SHEAF_TRACK_VALGRIND || SHEAF_TRACK_ASAN)

#if SHEAF_TRACK_VALGRIND
#define sheaf_track_vg_malloc(p, n, defined) VALGRIND_MALLOCLIKE_BLOCK((p), (n), 0, (defined))
#define sheaf_track_vg_free(p)               VALGRIND_FREELIKE_BLOCK((p), 0)
#define sheaf_track_vg_noaccess(p, n)        VALGRIND_MAKE_MEM_NOACCESS((p), (n))
#define sheaf_track_vg_undefined(p, n)       VALGRIND_MAKE_MEM_UNDEFINED((p), (n))
#define sheaf_track_vg_defined(p, n)         VALGRIND_MAKE_MEM_DEFINED((p), (n))
#else
#define sheaf_track_vg_malloc(p, n, defined) ((void)(p), (void)(n), (void)(defined))
#define sheaf_track_vg_free(p)               ((void)(p))
#define sheaf_track_vg_noaccess(p, n)        ((void)(p), (void)(n))
#define sheaf_track_vg_undefined(p, n)       ((void)(p), (void)(n))
#define sheaf_track_vg_defined(p, n)         ((void)(p), (void)(n))
#endif

#if SHEAF_TRACK_ASAN
#define sheaf_track_asan_poison(p, n) __asan_poison_memory_region((const volatile void *)(p), (n))
#define sheaf_track_asan_unpoison(p, n) \
	__asan_unpoison_memory_region((const volatile void *)(p), (n))
#define sheaf_track_asan_is_poisoned(p) __asan_address_is_poisoned((const volatile void *)(p))
#else
#define sheaf_track_asan_poison(p, n)   ((void)(p), (void)(n))
#define sheaf_track_asan_unpoison(p, n) ((void)(p), (void)(n))
#define sheaf_track_asan_is_poisoned(p) ((void)(p), 0)
#endif

/* An object of @size bytes at @p is handed to the program.  @defined: its
 * contents are meaningful (a constructor ran, or it was zeroed), otherwise
 * memcheck treats them as uninitialised, as it does malloc's. */
#define sheaf_track_alloc(p, size, defined)                    \
	do {                                                   \
		sheaf_track_asan_unpoison((p), (size));        \
		sheaf_track_vg_malloc((p), (size), (defined)); \
	} while (0)

/* The object at @p (@size bytes, or its whole slot) is taken back. */
#define sheaf_track_free(p, size)                     \
	do {                                          \
		sheaf_track_vg_free((p));             \
		sheaf_track_asan_poison((p), (size)); \
	} while (0)

/* Raw state changes of memory that is not a program's object. */
#define sheaf_track_mem_noaccess(p, n)             \
	do {                                       \
		sheaf_track_vg_noaccess((p), (n)); \
		sheaf_track_asan_poison((p), (n)); \
	} while (0)
#define sheaf_track_mem_undefined(p, n)              \
	do {                                         \
		sheaf_track_asan_unpoison((p), (n)); \
		sheaf_track_vg_undefined((p), (n));  \
	} while (0)
#define sheaf_track_mem_defined(p, n)                \
	do {                                         \
		sheaf_track_asan_unpoison((p), (n)); \
		sheaf_track_vg_defined((p), (n));    \
	} while (0)

/* ASan only: true if the first byte at @p is poisoned (a free object); 0
 * without ASan.  Lets the core report a double free of an object that sits
 * in a sheaf, where nothing else can see it. */
#define sheaf_track_is_poisoned(p) sheaf_track_asan_is_poisoned(p)

/* ---- Cache-level helpers: where the core calls them ------------------------------- *
 *
 *   sheaf_track_obj_alloc  every object returned to the program: cache alloc fast and
 *                          slow paths, alloc_bulk, alloc_from (prefilled sheaves)
 *   sheaf_track_obj_free   every object the program gives back, first thing after the
 *                          NULL test: cache free, free_bulk; free_rcu objects only when
 *                          their grace period has ended
 *   sheaf_track_slab_open  slab_new, before the slab is written (debug init, ctor, links)
 *   sheaf_track_slab_close slab_new, after it is written, before it is published
 *   sheaf_track_slab_gone  slab_discard, before the memory goes back to the page heap
 *   sheaf_track_fp_open/close  around every read or write of a free slot's link
 *
 * All are empty inline functions unless a tool is selected. */
#include "slab/slab.h"

/* ASan shadow has 8-byte granules: slots that share one cannot be told apart. */
static inline bool sheaf_track_asan_ok(const struct sheaf_cache *c)
{
	return SHEAF_TRACK_ASAN && (c->slot_size & 7) == 0;
}

static inline bool sheaf_track_cache(const struct sheaf_cache *c)
{
	/* RCU readers may read freed objects of a TYPESAFE_BY_RCU cache. */
	return SHEAF_TRACK_ENABLED && !(c->flags & SHEAF_TYPESAFE_BY_RCU);
}

static inline void sheaf_track_obj_alloc(const struct sheaf_cache *c, void *p)
{
	if (!SHEAF_TRACK_ENABLED || !c || !p || !sheaf_track_cache(c))
		return;
	if (sheaf_track_asan_ok(c))
		sheaf_track_asan_unpoison(p, c->object_size);
	sheaf_track_vg_malloc(p, c->object_size, c->ctor != NULL);
}

/* Returns true (ASan builds only) when the object is already poisoned, that
 * is free: the caller reports a double free and drops the call.  memcheck
 * reports a second FREELIKE_BLOCK by itself ("Invalid free()"). */
static inline bool sheaf_track_obj_free(const struct sheaf_cache *c, void *p)
{
	if (!SHEAF_TRACK_ENABLED || !c || !p || !sheaf_track_cache(c))
		return false;
	/* Debug caches check their state word instead, with a fuller report. */
	if (sheaf_track_asan_ok(c) && !c->debug_flags && sheaf_track_asan_is_poisoned(p))
		return true;
	sheaf_track_vg_free(p);
	/* The whole rest of the slot: padding after the object stays poisoned
	 * while it is allocated too, so small overflows are caught. */
	if (sheaf_track_asan_ok(c))
		sheaf_track_asan_poison(p, c->slot_size - c->obj_offset);
	return false;
}

static inline void sheaf_track_slab_open(const struct sheaf_cache *c, void *mem, size_t bytes)
{
	if (sheaf_track_cache(c))
		sheaf_track_mem_undefined(mem, bytes);
}

static inline void sheaf_track_slab_close(const struct sheaf_cache *c, void *mem, size_t bytes)
{
	if (!sheaf_track_cache(c))
		return;
	sheaf_track_vg_noaccess(mem, bytes);
	if (sheaf_track_asan_ok(c))
		sheaf_track_asan_poison(mem, bytes);
}

static inline void sheaf_track_slab_gone(const struct sheaf_cache *c, void *mem, size_t bytes)
{
	if (sheaf_track_cache(c))
		sheaf_track_mem_undefined(mem, bytes);
}

/* The link of a free slot: memcheck exactly (2 bytes), ASan by its granule,
 * which lies wholly inside the free slot (slots are 8-aligned when tracked). */
static inline void sheaf_track_fp_open(const struct sheaf_cache *c, const char *slot)
{
	if (!sheaf_track_cache(c))
		return;
	const char *fp = slot + c->freeptr_offset;
	sheaf_track_vg_defined(fp, 2);
	if (sheaf_track_asan_ok(c))
		sheaf_track_asan_unpoison((const char *)((uintptr_t)fp & ~(uintptr_t)7), 8);
}

static inline void sheaf_track_fp_close(const struct sheaf_cache *c, const char *slot)
{
	if (!sheaf_track_cache(c))
		return;
	const char *fp = slot + c->freeptr_offset;
	sheaf_track_vg_noaccess(fp, 2);
	if (sheaf_track_asan_ok(c))
		sheaf_track_asan_poison((const char *)((uintptr_t)fp & ~(uintptr_t)7), 8);
}

#endif /* SHEAF_TRACK_H */
