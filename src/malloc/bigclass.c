/* SPDX-License-Identifier: MIT */
/*
 * bigclass.c - where the malloc front end's classes above 32 KiB are used (sizeclass.h:
 * 40, 48, 56 and 64 KiB, one object per slab; docs/malloc.md "Size classes").  They
 * took blocks of 32-64 KiB off the extent path (a loop replacing such blocks ran 8x as
 * fast), but an adversarial review of them (2026-11-29) found where they cost more than
 * the extents they replaced; there their sizes stay extents.  No lock: one decision,
 * stored atomically, and racy reads of the heap's counters.
 */
#include "malloc/malloc_impl.h"

/* 0: not decided, 1: used, 2: not. */
static atomic_int big_classes_state;

/* Not in per-thread mode, where each idle thread keeps two sheaves of up to nine objects
 * of each class (128 threads kept 240 MiB after malloc_trim, against 32 MiB with
 * extents), nor where address space is limited (RLIMIT_AS, RLIMIT_DATA): a 33 KiB block
 * took a 64 KiB slab there, and a program under ulimit -v got half the bytes glibc gives
 * it (an extent takes the request's pages).  Decided once, at the first such block after
 * the core has started (before, the mode is not known: such blocks are extents
 * meanwhile); a class made before a limit is set stays.  Two threads deciding at once
 * both ask the kernel and store the same answer, unless a limit is set between the two. */
bool malloc_big_classes_ok(void)
{
	int s = atomic_load_explicit(&big_classes_state, memory_order_relaxed);
	if (sheaf_likely(s))
		return s == 1;
	if (atomic_load_explicit(&sheaf_g.init_state, memory_order_acquire) != 2)
		return false;
	bool ok = sheaf_reg.mode == SHEAF_MODE_PERCPU && !malloc_address_space_limited();
	atomic_store_explicit(&big_classes_state, ok ? 1 : 2, memory_order_relaxed);
	return ok;
}

/* A big class whose sheaves are empty takes no more slabs once half the heap window is
 * in slabs: its blocks are extents from then on, outside the window, so that they never
 * take the last of it from the small classes (SHEAF_HEAP_GB=1: 24,000 blocks of
 * 40,000 B filled the window, and every malloc(256) after them failed; as extents those
 * sizes never took heap space). */
bool malloc_big_class_spills(const struct sheaf_cache *c)
{
	return malloc_is_big_class(c) && sheaf_rd(sheaf_heap.mapped_bytes) >= sheaf_heap.cap / 2;
}
