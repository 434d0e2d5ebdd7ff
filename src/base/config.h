/* SPDX-License-Identifier: MIT */
/*
 * config.h - build ladders, constants and compiler helpers.
 *
 * SHEAF_DEBUG (CMake -DSHEAF_DEBUG=n):
 *   0  public checks only (bad pointers, double free where cheap)
 *   1  + internal asserts (sheaf_assert_internal)
 *   2  + expensive invariant walkers on slow paths (sheaf_assert_expensive)
 * The ladder is exposed as `static const` values so that debug code is compiled and
 * type-checked in every build (jemalloc's config_debug) and dropped by the optimiser.
 */
#ifndef SHEAF_CONFIG_H
#define SHEAF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef SHEAF_DEBUG
#define SHEAF_DEBUG 0
#endif
static const int sheaf_config_debug = SHEAF_DEBUG;

#define sheaf_likely(x)   __builtin_expect(!!(x), 1)
#define sheaf_unlikely(x) __builtin_expect(!!(x), 0)
#define sheaf_noinline    __attribute__((noinline))
#define sheaf_cold        __attribute__((cold, noinline))
#define sheaf_hidden      __attribute__((visibility("hidden")))
#define sheaf_aligned(n)  __attribute__((aligned(n)))
#define SHEAF_CACHELINE   64

/* A word that every fast-path call reads and only start-up (or a rare event) writes, in
 * a cache line of its own: sizeof is the line, so the linker cannot place a variable
 * that something writes often (a lock, a counter) beside it, whose every write would
 * take the line from the other CPUs and make their next fast-path call miss.  The
 * assembly reads .v as the symbol itself (offset 0). */
struct sheaf_line_u64 {
	uint64_t v;
} sheaf_aligned(SHEAF_CACHELINE);
struct sheaf_line_off {
	ptrdiff_t v;
} sheaf_aligned(SHEAF_CACHELINE);

/* Tests of a field against a constant or a register, written as one x86 instruction
 * with the field as its memory operand (test or cmp, then the branch): GCC loads such a
 * byte or word into a register first (movzbl, cmp; mov, and) when it may need the value
 * again on another path, one instruction more on each fast path (tools/fastpath-golden.sh).
 * The flags come out through asm flag outputs (GCC 6, clang 9); elsewhere, plain C. */
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
/* *@m & @bits is not 0. */
static inline bool sheaf_u8_any(const uint8_t *m, uint8_t bits)
{
	bool nz;
	/* "ir" and %b: an immediate where inlined with a constant, a byte register at -O0. */
	asm("testb %b[b], %[m]" : "=@ccnz"(nz) : [m] "m"(*m), [b] "ir"(bits));
	return nz;
}
/* *@m == @v. */
static inline bool sheaf_u8_is(const uint8_t *m, uint8_t v)
{
	bool eq;
	asm("cmpb %b[v], %[m]" : "=@cce"(eq) : [m] "m"(*m), [v] "ir"(v));
	return eq;
}
/* (@x & *@m) == 0. */
static inline bool sheaf_and_zero(uintptr_t x, const uintptr_t *m)
{
	bool z;
	asm("test %[x], %[m]" : "=@ccz"(z) : [m] "m"(*m), [x] "r"(x));
	return z;
}
/* @x < *@m, unsigned (*@m written once by another thread: an aligned load, which x86
 * orders before the loads after it). */
static inline bool sheaf_u64_below(uint64_t x, const uint64_t *m)
{
	bool b;
	asm("cmp %[m], %[x]" : "=@ccb"(b) : [m] "m"(*m), [x] "r"(x));
	return b;
}
#else
static inline bool sheaf_u8_any(const uint8_t *m, uint8_t bits)
{
	return (*m & bits) != 0;
}
static inline bool sheaf_u8_is(const uint8_t *m, uint8_t v)
{
	return *m == v;
}
static inline bool sheaf_and_zero(uintptr_t x, const uintptr_t *m)
{
	return (x & *m) == 0;
}
static inline bool sheaf_u64_below(uint64_t x, const uint64_t *m)
{
	return x < __atomic_load_n(m, __ATOMIC_ACQUIRE);
}
#endif

/* Geometry. */
#define SHEAF_PAGE_SHIFT    12
#define SHEAF_PAGE_SIZE     (1ul << SHEAF_PAGE_SHIFT)
#define SHEAF_BLOCK_ORDER   9 /* 2 MiB blocks of the page heap */
#define SHEAF_BLOCK_SHIFT   (SHEAF_PAGE_SHIFT + SHEAF_BLOCK_ORDER)
#define SHEAF_BLOCK_SIZE    (1ul << SHEAF_BLOCK_SHIFT)
#define SHEAF_BLOCK_PAGES   (1u << SHEAF_BLOCK_ORDER)
#define SHEAF_MAX_ORDER     8 /* largest slab: 1 MiB */
#define SHEAF_DEF_MAX_ORDER 3 /* slub_max_order (K§1.6) */
#define SHEAF_MAX_NODES     64
#define SHEAF_MAX_OBJS      65534u /* 16-bit freelist index, 0xffff = end */
#define SHEAF_FL_END        0xffffu

/* K§1.2: min_partial = clamp(ilog2(size)/2, MIN_PARTIAL, MAX_PARTIAL). */
#define SHEAF_MIN_PARTIAL 5
#define SHEAF_MAX_PARTIAL 10
/* K§1.3: barn soft limits of Linux 7.0 (used as the starting point of D6). */
#define SHEAF_MAX_FULL_SHEAVES  10
#define SHEAF_MAX_EMPTY_SHEAVES 10
/* D1 byte floor of the default capacity (cache/create.c): a sheaf holds at least this many
 * bytes of objects, but never more than SHEAF_SHEAF_FLOOR_MAX objects from the floor. */
#define SHEAF_SHEAF_MIN_BYTES (32u << 10)
#define SHEAF_SHEAF_FLOOR_MAX 120u
/* D6 refill by demand (percpu/sheaf.c refill_budget): a refill of a CPU's main from slabs
 * more than SHEAF_REFILL_QUIET_NS after that CPU's previous one takes at most
 * SHEAF_REFILL_QUIET_BYTES of objects (at least one) when the whole sheaf would hold more
 * than SHEAF_SHEAF_MIN_BYTES (the D1 floor: objects of 512 B and more with the default
 * capacities); a sooner one fills the sheaf (after a part refill, up to one sheaf taken in
 * all), and a smaller sheaf, or a capacity the caller chose, is always filled. */
#define SHEAF_REFILL_QUIET_BYTES (16u << 10)
#define SHEAF_REFILL_QUIET_NS    1000000ull /* 1 ms */
/* K§2.7: flush batch. */
#define SHEAF_PCS_BATCH 32

/* Assertions: the handler formats on the stack and never allocates, since it runs when the
 * heap may be corrupt. */
void sheaf_assert_fail(const char *expr, const char *file, int line)
	__attribute__((noreturn, cold));
#define sheaf_assert(e) \
	((void)(sheaf_likely(e) ? 0 : (sheaf_assert_fail(#e, __FILE__, __LINE__), 0)))
#define sheaf_assert_internal(e)                              \
	((void)((sheaf_config_debug < 1 || sheaf_likely(e)) ? \
			0 :                                   \
			(sheaf_assert_fail(#e, __FILE__, __LINE__), 0)))
#define sheaf_assert_expensive(e)                             \
	((void)((sheaf_config_debug < 2 || sheaf_likely(e)) ? \
			0 :                                   \
			(sheaf_assert_fail(#e, __FILE__, __LINE__), 0)))

/* ThreadSanitizer builds: no restartable sequences (percpu/rseq.h) and no reaper by
 * default (base/options.c). */
#if defined(__SANITIZE_THREAD__)
#define SHEAF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHEAF_TSAN 1
#endif
#endif
#ifndef SHEAF_TSAN
#define SHEAF_TSAN 0
#endif

#define SHEAF_MIN(a, b)      ((a) < (b) ? (a) : (b))
#define SHEAF_MAX(a, b)      ((a) > (b) ? (a) : (b))
#define SHEAF_ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))

/* Relaxed atomics for fields read racily by statistics (TSan-visible, plain moves on x86). */
#define sheaf_rd(x)    __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define sheaf_wr(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

#endif /* SHEAF_CONFIG_H */
