/* SPDX-License-Identifier: MIT */
/*
 * rseq.h - restartable sequences for the per-CPU sheaves (docs/percpu.md, design §6).
 *
 * The fast paths of sheaf_cache_alloc/sheaf_cache_free are restartable sequences on
 * the current CPU's main sheaf, cache->mainv[cpu + 2]:
 *
 *   alloc:  cpu = rseq->cpu_id; m = mainv[cpu + 2]; if (!m->size) slow;
 *           obj = m->objects[m->size - 1]; m->nalloc++;  commit: m->size--
 *   free:   key = pagemap key of obj (one subtract, one compare, one load);
 *           cpu = rseq->cpu_id; m = mainv[cpu + 2];
 *           if (key != m->key || m->size >= m->capacity) slow;
 *           m->objects[m->size] = obj;                    commit: m->size++
 *
 * Each commit is one instruction (`subl`/`addl` on m->size), so a sequence either
 * happened entirely on one CPU with nothing else of that CPU in between, or is aborted
 * by the kernel (preemption, migration, signal, membarrier IPI) and jumps to the slow
 * path.  No atomic instruction, no lock prefix.  The per-CPU lock is "main swapped for
 * the sentinel" (size 0, capacity 0, key 0), so the same tests that send an empty or a
 * full main to the slow path also send a locked CPU there.  mainv[0] and mainv[1] hold
 * the sentinel for rseq cpu_id values -2 (registration failed) and -1 (not yet
 * registered), so a thread without rseq takes the slow path with no extra test.
 *
 * Statistics (design §8): the alloc sequence increments m->nalloc before its commit.
 * If the sequence is aborted after that increment and before the commit, nalloc counts
 * one pop that did not happen: ALLOC_FASTPATH and FREE_FASTPATH (derived from the
 * size change) are then both one too high.  This is the documented price of keeping
 * the counter out of the commit; it never affects the objects themselves.
 *
 * The rseq area is glibc's (__rseq_offset, __rseq_size, glibc 2.35+).  Sheaf never
 * registers its own: where glibc did not register one (older glibc, the tunable
 * glibc.pthread.rseq=0, Valgrind, a kernel without rseq) the per-thread mode is used.
 *
 * x86-64 only.  ThreadSanitizer cannot see the ordering that a restartable sequence
 * gets from running on one CPU (an object freed by one thread and reallocated by
 * another on the same CPU has no happens-before edge it knows of), so TSan builds use
 * the per-thread mode: SHEAF_HAVE_RSEQ is 0 there.
 */
#ifndef SHEAF_RSEQ_H
#define SHEAF_RSEQ_H

#include <stddef.h>
#include <stdint.h>

#include "barn/barn.h" /* struct sheaf_heap, sheaf_cache, sheaf_sheaf for the offsets */

#define SHEAF_RSEQ_TSAN SHEAF_TSAN

#if defined(__x86_64__) && defined(__linux__) && !SHEAF_RSEQ_TSAN && !defined(SHEAF_NO_RSEQ)
#define SHEAF_HAVE_RSEQ 1
#else
#define SHEAF_HAVE_RSEQ 0
#endif

/* struct rseq (linux/rseq.h): cpu_id at 4, rseq_cs at 8.  glibc registers its area
 * with this signature on x86; the kernel checks it before every abort handler. */
#define SHEAF_RSEQ_OFF_CPU_ID 4
#define SHEAF_RSEQ_OFF_CS     8
#define SHEAF_RSEQ_SIG        0x53053053

/* Offset of the calling thread's rseq area from the thread pointer, read once at
 * init (a hidden global: one RIP-relative load on the fast path, not two through the
 * GOT).  Where glibc has no rseq area it points at a per-thread dummy whose cpu_id is
 * -2, so the fast path stays harmless in per-thread mode. */
extern struct sheaf_line_off sheaf_rseq_offset; /* .v; a line of its own (config.h) */
/* The free fast path accepts pointers below sheaf_heap.base + sheaf_heap.fast_limit
 * (page layer): the part of the heap window covered so far, or 0 once a free-check hook
 * is installed (sheaf_free_check_hook_set closes the gate), so that every free then
 * reaches the slow path and the hook without a test of its own. */

/* 0 when per-CPU mode can be used (glibc registered rseq, membarrier with rseq
 * restarts registered); otherwise -errno and a reason in @why.  Always sets
 * sheaf_rseq_offset. */
int sheaf_rseq_init(char *why, size_t len);
/* The rseq cpu_id of the calling thread: >= 0, or -1/-2 without rseq. */
int sheaf_rseq_cpu(void);
/* Take the per-CPU lock of the calling thread's current CPU: inside a restartable
 * sequence on that CPU, mainv[cpu + 2] is swapped for @locked with one `lock cmpxchg`
 * (the commit; the CPU number scaled to the slot's size first, slab.h struct
 * sheaf_mainv_slot).  Returns the CPU and sets *@m to the main it replaced; -1 without an
 * rseq CPU; -2 when the lock is held (the caller takes the slab path, never spins). */
struct sheaf_mainv_slot;
int sheaf_rseq_lock(struct sheaf_mainv_slot *mainv, struct sheaf_sheaf *locked,
		    struct sheaf_sheaf **m);
/* Restart every restartable sequence running on @cpu (-1: on every CPU) with
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ); on return none is still using
 * what it read before the call. */
void sheaf_rseq_fence(int cpu);
/* Re-register membarrier in the child of fork (cheap and idempotent). */
void sheaf_rseq_fork_child(void);

#if SHEAF_HAVE_RSEQ

/* The sequences below are assembly text, one instruction per line, in columns that a
 * reader checks against the ABI; clang-format would join and re-wrap the strings. */
/* clang-format off */

/* Common tail of a sequence @p: its descriptor (struct rseq_cs: version, flags,
 * start_ip, post_commit_offset, abort_ip), a slot holding the descriptor's address, and
 * its abort handler, preceded by the signature (encoded as the operand of a ud1 so
 * disassemblers stay in step), out of line in .text.unlikely: an abort leaves for @slow.
 *
 * The sequence publishes the address found in its slot (one RIP-relative load, like the
 * lea it replaces).  sheaf_rseq_init() copies every descriptor to a page that is never
 * unmapped and points the slots there: a thread's rseq_cs keeps pointing at the last
 * descriptor it used until the kernel clears it, and if that descriptor were inside
 * libsheaf.so, a dlclose() would leave the kernel reading unmapped memory at that
 * thread's next preemption (SIGSEGV).  The copy outlives the library; the kernel then
 * finds the thread outside the (stale) range and clears rseq_cs. */
#define SHEAF_RSEQ_TAIL(p, slow)                                              \
	".pushsection __rseq_cs, \"aw\"\n\t"                                  \
	".balign 32\n" p "_cs%=:\n\t"                                         \
	".long 0, 0\n\t"                                                      \
	".quad " p "_start%=, " p "_end%= - " p "_start%=, " p "_abort%=\n\t" \
	".popsection\n\t"                                                     \
	".pushsection sheaf_rseq_slots, \"aw\"\n\t"                           \
	".balign 8\n" p "_slot%=:\n\t"                                        \
	".quad " p "_cs%=\n\t"                                                \
	".popsection\n\t"                                                     \
	".pushsection .text.unlikely.sheaf_rseq, \"ax\"\n\t"                  \
	".byte 0x0f, 0xb9, 0x3d\n\t"                                          \
	".long 0x53053053\n" p "_abort%=:\n\t"                                \
	"jmp %l[" #slow "]\n\t"                                               \
	".popsection\n"

#define SHEAF_RSEQ_MAINV_DISP \
	(offsetof(struct sheaf_cache, mainv) + 2 * sizeof(struct sheaf_mainv_slot))

/* %rcx = the cache's main sheaf of CPU %rcx: its entry is a line of its own (slab.h
 * struct sheaf_mainv_slot), so the CPU number is scaled by a shift first. */
#define SHEAF_RSEQ_STR_(x) #x
#define SHEAF_RSEQ_STR(x)  SHEAF_RSEQ_STR_(x)
#define SHEAF_RSEQ_LOAD_MAIN                                 \
	"shl $" SHEAF_RSEQ_STR(SHEAF_MAINV_SHIFT) ", %%rcx\n\t" \
	"mov %c[mv](%[cache],%%rcx), %%rcx\n\t"

/* Alloc fast path: pops into @obj, or jumps to label @slow (used by fastpath.h
 * only).  12 instructions (11 until 2026-11-28: the shift of SHEAF_RSEQ_LOAD_MAIN). */
#define SHEAF_RSEQ_POP(c, obj, slow)                                           \
	asm goto("mov sheaf_rseq_offset(%%rip), %%rdx\n\t"                     \
		 "mov .Lsheaf_pop_slot%=(%%rip), %%rcx\n\t"                    \
		 "mov %%rcx, %%fs:8(%%rdx)\n"                                  \
		 ".Lsheaf_pop_start%=:\n\t"                                    \
		 "movslq %%fs:4(%%rdx), %%rcx\n\t"                             \
		 SHEAF_RSEQ_LOAD_MAIN                                          \
		 "mov %c[size](%%rcx), %%edx\n\t"                              \
		 "test %%edx, %%edx\n\t"                                       \
		 "jz %l[" #slow "]\n\t"                                        \
		 "mov %c[objs]-8(%%rcx,%%rdx,8), %[o]\n\t"                     \
		 "addq $1, %c[nalloc](%%rcx)\n\t"                              \
		 "subl $1, %c[size](%%rcx)\n"                                  \
		 ".Lsheaf_pop_end%=:\n\t" SHEAF_RSEQ_TAIL(".Lsheaf_pop", slow) \
		 : [o] "=&a"(obj)                                              \
		 : [cache] "r"(c), [mv] "i"(SHEAF_RSEQ_MAINV_DISP),            \
		   [size] "i"(offsetof(struct sheaf_sheaf, size)),             \
		   [objs] "i"(offsetof(struct sheaf_sheaf, objects)),          \
		   [nalloc] "i"(offsetof(struct sheaf_sheaf, nalloc))          \
		 : "rcx", "rdx", "cc", "memory"                                \
		 : slow)

/* The push itself, from the pagemap key in %rdx on: publish the descriptor, compare the
 * key with the main's, test the room, run @mark (empty, or the free-mark test below),
 * push, commit.  Written once; @p names the sequence's labels. */
#define SHEAF_RSEQ_PUSH_BODY(p, mark, slow)                                          \
	"mov sheaf_rseq_offset(%%rip), %%rax\n\t"                                  \
	"mov " p "_slot%=(%%rip), %%rcx\n\t"                                       \
	"mov %%rcx, %%fs:8(%%rax)\n" p "_start%=:\n\t"                              \
	"movslq %%fs:4(%%rax), %%rcx\n\t"                                          \
	SHEAF_RSEQ_LOAD_MAIN                                                       \
	"cmp %c[key](%%rcx), %%rdx\n\t"                                            \
	"jne %l[" #slow "]\n\t"                                                    \
	"mov %c[size](%%rcx), %%eax\n\t"                                           \
	"cmp %c[cap](%%rcx), %%eax\n\t"                                            \
	"jae %l[" #slow "]\n\t" mark                                               \
	"mov %[o], %c[objs](%%rcx,%%rax,8)\n\t"                                    \
	"addl $1, %c[size](%%rcx)\n" p "_end%=:\n\t" SHEAF_RSEQ_TAIL(p, slow)

/* The free mark of a cache whose mark is the object's second word (slab/freecheck.h,
 * SHEAF_MARK_WORD1), inside the sequence: once the key test has shown that @obj lies in
 * a slab of this cache (so reading it is safe), a mark equal to the key (%rdx: the
 * mark is the key, freecheck.h) sends the free to the slow path (maybe a double free:
 * confirmed there), otherwise the key is written into the mark before the commit.  An
 * abort after that store leaves the mark set on an object that is not in any sheaf: the
 * slow path then finds the mark, searches, finds nothing and frees it (a rare extra
 * search, never a false report). */
#define SHEAF_RSEQ_MARK(slow)                                                        \
	"cmp %%rdx, 8(%[o])\n\t"                                                   \
	"je %l[" #slow "]\n\t"                                                     \
	"mov %%rdx, 8(%[o])\n\t"

#define SHEAF_RSEQ_PUSH_SEQ(slow)      SHEAF_RSEQ_PUSH_BODY(".Lsheaf_push", "", slow)
#define SHEAF_RSEQ_PUSH_SEQ_MARK(slow) SHEAF_RSEQ_PUSH_BODY(".Lsheaf_pushm", SHEAF_RSEQ_MARK(slow), slow)

#define SHEAF_RSEQ_PUSH_OPERANDS                                                               \
	[mv] "i"(SHEAF_RSEQ_MAINV_DISP), [size] "i"(offsetof(struct sheaf_sheaf, size)),       \
		[cap] "i"(offsetof(struct sheaf_sheaf, capacity)),                             \
		[key] "i"(offsetof(struct sheaf_sheaf, key)),                                  \
		[objs] "i"(offsetof(struct sheaf_sheaf, objects))

/* The page-map key of @obj into %rdx (sheaf_page_key() with the bound taken from
 * sheaf_heap.fast_limit), then @seq. */
#define SHEAF_RSEQ_LOOKUP_THEN(c, obj, seq, slow)                                      \
	asm goto("mov %[o], %%rax\n\t"                                                 \
		 "sub sheaf_heap+%c[hbase](%%rip), %%rax\n\t"                          \
		 "cmp sheaf_heap+%c[hlim](%%rip), %%rax\n\t"                          \
		 "jae %l[" #slow "]\n\t"                                               \
		 "shr %[pshift], %%rax\n\t"                                            \
		 "mov sheaf_heap+%c[hmap](%%rip), %%rdx\n\t"                           \
		 "mov (%%rdx,%%rax,8), %%rdx\n\t" seq                                  \
		 :                                                                       \
		 : [cache] "r"(c), [o] "r"(obj),                                         \
		   [hbase] "i"(offsetof(struct sheaf_heap, base)),                       \
		   [hlim] "i"(offsetof(struct sheaf_heap, fast_limit)),                  \
		   [hmap] "i"(offsetof(struct sheaf_heap, pagemap)),                     \
		   [pshift] "i"(SHEAF_PAGE_SHIFT), SHEAF_RSEQ_PUSH_OPERANDS              \
		 : "rax", "rcx", "rdx", "cc", "memory"                                   \
		 : slow)

/* @seq for a caller that has already looked @k up in the page map (one page-map load
 * per free instead of two). */
#define SHEAF_RSEQ_KEY_THEN(c, obj, k, seq, slow)                                      \
	asm goto(seq                                                                     \
		 :                                                                       \
		 : [cache] "r"(c), [o] "r"(obj), "d"(k), SHEAF_RSEQ_PUSH_OPERANDS        \
		 : "rax", "rcx", "cc", "memory"                                          \
		 : slow)

/* Free fast paths: push @obj, or jump to label @slow (used by fastpath.h only).
 * SHEAF_RSEQ_PUSH is 20 instructions (19 before the shift of SHEAF_RSEQ_LOAD_MAIN). */
#define SHEAF_RSEQ_PUSH(c, obj, slow) SHEAF_RSEQ_LOOKUP_THEN(c, obj, SHEAF_RSEQ_PUSH_SEQ(slow), slow)
#define SHEAF_RSEQ_PUSH_MARK(c, obj, slow) \
	SHEAF_RSEQ_LOOKUP_THEN(c, obj, SHEAF_RSEQ_PUSH_SEQ_MARK(slow), slow)
#define SHEAF_RSEQ_PUSH_KEY(c, obj, k, slow) SHEAF_RSEQ_KEY_THEN(c, obj, k, SHEAF_RSEQ_PUSH_SEQ(slow), slow)
#define SHEAF_RSEQ_PUSH_KEY_MARK(c, obj, k, slow) \
	SHEAF_RSEQ_KEY_THEN(c, obj, k, SHEAF_RSEQ_PUSH_SEQ_MARK(slow), slow)

/* Copy %r8 pointers from %rsi to %rdi (%r8 > 0): an odd last one, then a last pair if
 * the count is 2 mod 4 (one 16-byte move), then four at a time (two 16-byte moves: half
 * the loop overhead of pairs, issue 18); uses %r9, %r10, %xmm0, %xmm1.  Part of the bulk
 * sequences below: the copy must lie inside the sequence, so it cannot be a call to
 * memcpy.  An abort in the middle leaves a partial copy that nothing has committed. */
#define SHEAF_RSEQ_COPY_N                                                      \
	"test $1, %%r8b\n\t"                                                   \
	"jz 1f\n\t"                                                            \
	"mov -8(%%rsi,%%r8,8), %%r9\n\t"                                       \
	"mov %%r9, -8(%%rdi,%%r8,8)\n"                                         \
	"1:\n\t"                                                               \
	"mov %%r8, %%r9\n\t"                                                   \
	"and $-2, %%r9\n\t"                                                    \
	"test $2, %%r8b\n\t"                                                   \
	"jz 2f\n\t"                                                            \
	"movdqu -16(%%rsi,%%r9,8), %%xmm0\n\t"                                 \
	"movdqu %%xmm0, -16(%%rdi,%%r9,8)\n"                                   \
	"2:\n\t"                                                               \
	"and $-4, %%r9\n\t"                                                    \
	"jz 4f\n\t"                                                            \
	"xor %%r10d, %%r10d\n\t"                                               \
	".p2align 6\n"                                                         \
	"3:\n\t"                                                               \
	"movdqu (%%rsi,%%r10,8), %%xmm0\n\t"                                   \
	"movdqu 16(%%rsi,%%r10,8), %%xmm1\n\t"                                 \
	"movdqu %%xmm0, (%%rdi,%%r10,8)\n\t"                                   \
	"movdqu %%xmm1, 16(%%rdi,%%r10,8)\n\t"                                 \
	"add $4, %%r10\n\t"                                                    \
	"cmp %%r9, %%r10\n\t"                                                  \
	"jb 3b\n"                                                              \
	"4:\n\t"

/* Bulk alloc (issue 18): pops min(size, @want) objects (@want >= 1) off the top of the
 * calling CPU's main into @dst, in the order they were pushed, and sets @got to that
 * count; jumps to @slow when main is empty (or the sentinel) or the sequence aborts.
 * The count of pops goes to m->nalloc just before the commit, the one store of the new
 * size (the single pop's price on an abort between them, applied to the batch). */
#define SHEAF_RSEQ_POP_N(c, p_dst, p_want, p_got, slow)                                  \
	asm goto("mov sheaf_rseq_offset(%%rip), %%rdx\n\t"                         \
		 "mov .Lsheaf_popn_slot%=(%%rip), %%rcx\n\t"                       \
		 "mov %%rcx, %%fs:8(%%rdx)\n"                                      \
		 ".Lsheaf_popn_start%=:\n\t"                                       \
		 "movslq %%fs:4(%%rdx), %%rcx\n\t"                                 \
		 SHEAF_RSEQ_LOAD_MAIN                                              \
		 "mov %c[size](%%rcx), %%eax\n\t"                                  \
		 "test %%eax, %%eax\n\t"                                           \
		 "jz %l[" #slow "]\n\t"                                            \
		 "mov %[want], %%r8\n\t"                                           \
		 "cmp %%rax, %%r8\n\t"                                             \
		 "cmova %%rax, %%r8\n\t"                                           \
		 "sub %%r8, %%rax\n\t"                                             \
		 "lea %c[objs](%%rcx,%%rax,8), %%rsi\n\t"                          \
		 "mov %[dst], %%rdi\n\t" SHEAF_RSEQ_COPY_N                         \
		 "mov %%r8, %[n]\n\t"                                              \
		 "add %%r8, %c[nalloc](%%rcx)\n\t"                                 \
		 "mov %%eax, %c[size](%%rcx)\n"                                    \
		 ".Lsheaf_popn_end%=:\n\t" SHEAF_RSEQ_TAIL(".Lsheaf_popn", slow)   \
		 : [n] "=&r"(p_got)                                                \
		 : [cache] "r"(c), [dst] "r"(p_dst), [want] "r"(p_want),           \
		   [mv] "i"(SHEAF_RSEQ_MAINV_DISP),                                \
		   [size] "i"(offsetof(struct sheaf_sheaf, size)),                 \
		   [objs] "i"(offsetof(struct sheaf_sheaf, objects)),              \
		   [nalloc] "i"(offsetof(struct sheaf_sheaf, nalloc))              \
		 : "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "xmm0",   \
		   "xmm1", "cc", "memory"                                          \
		 : slow)

/* Bulk free (issue 18): @src[0..@k) (@k >= 1), objects that all have the page-map key
 * @key and have passed every free check (fastpath.h sheaf_free_batch_check), pushed on
 * the calling CPU's main as far as it has room; @got is the count pushed.  Jumps to
 * @slow when the key is not main's (another node, the sentinel, a destroyed cache),
 * main is full, or the sequence aborts.  Commit: one store of the new size. */
#define SHEAF_RSEQ_PUSH_N(c, p_src, p_k, p_key, p_got, slow)                               \
	asm goto("mov sheaf_rseq_offset(%%rip), %%rax\n\t"                         \
		 "mov .Lsheaf_pushn_slot%=(%%rip), %%rcx\n\t"                      \
		 "mov %%rcx, %%fs:8(%%rax)\n"                                      \
		 ".Lsheaf_pushn_start%=:\n\t"                                      \
		 "movslq %%fs:4(%%rax), %%rcx\n\t"                                 \
		 SHEAF_RSEQ_LOAD_MAIN                                              \
		 "cmp %c[key](%%rcx), %[kv]\n\t"                                   \
		 "jne %l[" #slow "]\n\t"                                           \
		 "mov %c[size](%%rcx), %%eax\n\t"                                  \
		 "mov %c[cap](%%rcx), %%r8d\n\t"                                   \
		 "sub %%eax, %%r8d\n\t"                                            \
		 "jbe %l[" #slow "]\n\t"                                           \
		 "cmp %[k], %%r8\n\t"                                              \
		 "cmova %[k], %%r8\n\t"                                            \
		 "lea %c[objs](%%rcx,%%rax,8), %%rdi\n\t"                          \
		 "mov %[src], %%rsi\n\t" SHEAF_RSEQ_COPY_N                         \
		 "mov %%r8, %[n]\n\t"                                              \
		 "add %%r8d, %%eax\n\t"                                            \
		 "mov %%eax, %c[size](%%rcx)\n"                                    \
		 ".Lsheaf_pushn_end%=:\n\t" SHEAF_RSEQ_TAIL(".Lsheaf_pushn", slow) \
		 : [n] "=&r"(p_got)                                                \
		 : [cache] "r"(c), [src] "r"(p_src), [k] "r"(p_k), [kv] "r"(p_key), \
		   SHEAF_RSEQ_PUSH_OPERANDS                                        \
		 : "rax", "rcx", "rsi", "rdi", "r8", "r9", "r10", "xmm0", "xmm1",  \
		   "cc", "memory"                                                  \
		 : slow)

/* clang-format on */

#endif /* SHEAF_HAVE_RSEQ */

#endif /* SHEAF_RSEQ_H */
