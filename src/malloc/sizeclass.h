/* SPDX-License-Identifier: MIT */
/*
 * sizeclass.h - the malloc front end's size classes (docs/malloc.md).
 *
 * 45 classes from 8 B to 64 KiB, like kmalloc's up to 32 KiB: 8, 16, then every 16 B up
 * to 128 B (the 16-byte quantum keeps every object of 16 B or more aligned to
 * max_align_t), then four classes per power of two (160, 192, 224, 256, 320,
 * ..., 57344, 65536).  The four above 32 KiB (since 2026-11-29) take blocks of
 * 32-64 KiB off the extent path: a program that keeps replacing such blocks
 * ran 5-8x as long as with tcmalloc or mimalloc through the extent cache's
 * locks and bins (docs/benchmarks.md, eleventh session).  Their slabs hold one
 * object each (cache/create.c calculate_order), so a freed object's pages go
 * back with its slab, as an extent's would.  They are not used (their sizes stay
 * extents, as before) in per-thread mode, where every idle thread would keep two
 * sheaves of each, or where address space is limited (a 40 KiB object takes a 64 KiB
 * slab, an extent its own pages); calloc of more than 32 KiB stays an extent too (a
 * fresh mapping is zero, where a class object is cleared page by page)
 * (bigclass.c), nor once half the heap window is in slabs.
 *
 * Worst-case internal fragmentation: a request of n > 128 B gets a class of
 * less than 1.25 n (four steps per doubling: n just above 2^k gets
 * 2^k + 2^k/4); a request of n <= 128 B wastes at most 15 B (the quantum),
 * and 0 < n <= 8 gets 8 B.
 *
 * Lookup is a few instructions: a byte table indexed by (n + 7) / 8 up to
 * 1 KiB, the position of the highest set bit of n - 1 above.
 */
#ifndef SHEAF_SIZECLASS_H
#define SHEAF_SIZECLASS_H

#include <stddef.h>
#include <stdint.h>

#define SHEAF_SC_COUNT     45u
#define SHEAF_SC_MAX       65536u /* largest class; larger requests are extents */
#define SHEAF_SC_TABLE_MAX 1024u  /* sizes up to this use the byte table */
#define SHEAF_SC_ALIGN_MAX 4096u  /* alignment passed to a class cache is capped here */
/* The classes above 32 KiB ("big": 40, 48, 56 and 64 KiB, from index 41) are used only
 * where bigclass.c says so; otherwise their sizes are extents. */
#define SHEAF_SC_BIG_ABOVE 32768u
#define SHEAF_SC_BIG_FIRST 41u

/* Byte size of each class. */
extern const uint32_t sheaf_sc_size[SHEAF_SC_COUNT];
/* Class index for sizes 0..1024, indexed by (n + 7) >> 3. */
extern const uint8_t sheaf_sc_small[SHEAF_SC_TABLE_MAX / 8 + 1];

/* Index of the smallest class that holds @n bytes; @n <= SHEAF_SC_MAX. */
static inline unsigned int sheaf_sc_index(size_t n)
{
	if (n <= SHEAF_SC_TABLE_MAX)
		return sheaf_sc_small[(n + 7) >> 3];
	/* n in (2^k, 2^(k+1)]: four classes 2^k + s * 2^(k-2), s = 1..4.
	 * Classes 0..8 are the quantum classes; group k = 7 starts at 9. */
	unsigned int k = 63u - (unsigned int)__builtin_clzll((unsigned long long)(n - 1));
	unsigned int s = (unsigned int)((n - 1) >> (k - 2)) - 4u;
	return 9u + (k - 7u) * 4u + s;
}

/* The alignment every object of class @i has (and that its cache is created
 * with): the largest power of two dividing the class size, capped at 4 KiB.
 * Objects then sit at multiples of it inside an aligned slab, at no cost in
 * space; aligned allocations use it to pick a class (see malloc.c). */
static inline size_t sheaf_sc_align(unsigned int i)
{
	size_t sz = sheaf_sc_size[i];
	size_t a = sz & (~sz + 1);
	return a > SHEAF_SC_ALIGN_MAX ? SHEAF_SC_ALIGN_MAX : a;
}

#endif /* SHEAF_SIZECLASS_H */
