/* SPDX-License-Identifier: MIT */
/*
 * freecheck.h - the checks every free makes before a pointer can reach a sheaf
 * (README "Errors", docs/debugging.md "Checks on every free").  Slab layer: the slab's
 * geometry answers "is this the start of an object", the free mark "is it already
 * free".
 *
 * Object start, without a division: slabs are aligned to their size, so a pointer's
 * offset in its slab is `p & slab_mask`, and it is a multiple of the slot size iff its
 * product with ceil(2^64 / slot_size), modulo 2^64, is below that factor (Lemire, Kaser
 * and Kurz's divisibility test; sheaf_obj_is_start).  The slot index itself (slab.c)
 * is the offset times ceil(2^32 / slot_size) shifted down by 32 (the kernel's
 * obj_to_index with reciprocal_value(), docs/kernel.md), exact for every offset below
 * 2^20 and slot sizes up to 1 MiB.
 * When the slot size is a power of two the fast paths test p & start_mask (slot - 1)
 * instead: the same answer, since the slab's size is a multiple of the slot's.
 * Debug caches (obj_offset != 0) never take these paths: they check on their slab path.
 *
 * Free mark (glibc's tcache key): a free writes the key of the object's cache node
 * (the word the page map holds for its slab, page/page.h "Keys") into the freed object
 * at mark_offset, and an allocation clears it.  A free that finds its key there may be
 * a double free; it is confirmed by a search of everywhere a free object can be
 * (sheaf_free_confirm) before anything is reported, so a live object that happens to
 * hold the key is never reported, only searched for.  The key rather than one random
 * word per process (until 2026-11-29): the fast paths hold it in a register already,
 * one load fewer per free (tools/fastpath-golden.sh).  A key is the address of an
 * internal structure (the cache node), a value a program has no reason to store in an
 * object's second word (it never sees it); the mark is not a secret and guards against
 * mistakes, not an adversary (docs/debugging.md): a read after free can see it.  Plain
 * caches keep the mark in the object's second word (every slot is at least 16 bytes);
 * caches whose free objects must keep their bytes (a constructor,
 * SHEAF_TYPESAFE_BY_RCU) keep it in a word past the object.
 */
#ifndef SHEAF_SLAB_FREECHECK_H
#define SHEAF_SLAB_FREECHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "slab/slab.h"

/* sheaf_cache.free_mark: no mark; the mark in the second word (mark_offset 8: every
 * plain cache, which lets the fast paths use a constant offset); elsewhere. */
#define SHEAF_MARK_NONE  0
#define SHEAF_MARK_AT    1
#define SHEAF_MARK_WORD1 2
#define SHEAF_MARK_WORD1_P2 \
	3 /* the same, and the slot size is a power of two: an object
				 start is any multiple of it (sheaf_cache.start_mask) */

/* The free mark of @obj, an object inside a slab: its page-map key (never 0). */
static inline uintptr_t sheaf_mark_value(const void *obj)
{
	return sheaf_page_key(obj);
}

/* @p (known to lie in a slab of @c) is exactly the start of one of its objects: its
 * offset in the slab is a multiple of the slot size exactly when the product of the two,
 * offset times ceil(2^64 / slot_size) modulo 2^64, is below that factor (Lemire, Kaser
 * and Kurz's divisibility test, exact for offsets below 2^32 and slot sizes from 2 up;
 * sheaf_cache.slot_div_c).  A multiple of the slot size is not enough: when the slot size
 * does not divide the slab (every size that is not a power of two) the slab ends in a
 * tail of fewer than slot_size bytes whose first byte, objs_per_slab * slot_size, is a
 * multiple and no object; the product of a multiple q * slot_size is q * e, with
 * e = slot_size * slot_div_c mod 2^64, so the bound slot_div_lim = objs_per_slab * e
 * accepts exactly the object starts (slot_div_c itself when the slot is a power of
 * two: no tail).  Until 2026-11-29 the tail's first byte passed, and a free of it put
 * the tail on the freelist, handed out later over the next slab (found by review).
 * Three instructions with the bound in memory, where the index and its product with the
 * slot size took five (issue 17, docs/benchmarks.md ninth session). */
static inline bool sheaf_obj_is_start(const struct sheaf_cache *c, const void *p)
{
	uint64_t off = (uintptr_t)p & c->slab_mask;
	return sheaf_u64_below(off * c->slot_div_c, &c->slot_div_lim);
}

/* The mark is read and written through this type: in a cache whose slot size is not a
 * multiple of 8 (objects of 1-byte alignment, e.g. 15 bytes), p + mark_offset is not
 * 8-byte aligned, and a plain uint64_t access there is undefined (UBSan reported the
 * store in slab_new, found by fuzz_cache: tests/fuzz/corpus/fuzz_cache/found-misaligned-mark).
 * On x86-64 the access is the same single mov. */
typedef uint64_t sheaf_mark_t __attribute__((aligned(1), may_alias));

static inline sheaf_mark_t *sheaf_mark_word(const struct sheaf_cache *c, const void *p)
{
	return (sheaf_mark_t *)((uintptr_t)p + c->mark_offset);
}

/* WORD1 and WORD1_P2 are the kinds with this bit set, so "the mark is the second word"
 * is one test of it in memory (config.h sheaf_u8_any). */
#define SHEAF_MARK_IN_WORD1 2u
_Static_assert(((SHEAF_MARK_WORD1 & SHEAF_MARK_WORD1_P2) & SHEAF_MARK_IN_WORD1) != 0 &&
		       ((SHEAF_MARK_AT | SHEAF_MARK_NONE) & SHEAF_MARK_IN_WORD1) == 0,
	       "sheaf_mark_clear tests SHEAF_MARK_IN_WORD1 of the kind");

/* An allocation: the object is no longer free. */
static inline void sheaf_mark_clear(const struct sheaf_cache *c, void *p)
{
	if (sheaf_likely(sheaf_u8_any(&c->free_mark, SHEAF_MARK_IN_WORD1)))
		*(sheaf_mark_t *)((uintptr_t)p + 8) = 0;
	else if (c->free_mark)
		*sheaf_mark_word(c, p) = 0;
}

#endif /* SHEAF_SLAB_FREECHECK_H */
