/* SPDX-License-Identifier: MIT */
/*
 * rseq.c - finding glibc's rseq area, membarrier, and the per-CPU lock sequence
 * (docs/percpu.md, design §6; the fast paths themselves are in rseq.h).
 *
 * The per-CPU lock (design §6) is taken inside a restartable sequence on the CPU it
 * belongs to, whose commit is `lock cmpxchg mainv[cpu + 2], m -> sentinel`.  Because
 * the commit happens only if the thread was not preempted or migrated since it read
 * cpu_id, no fast path of that CPU can be between its read of m and its commit when
 * the lock is taken: any such sequence was preempted by the locker and will restart.
 * The locker may then migrate; threads that later run on that CPU find the sentinel
 * and take the slow path.  The compare-and-exchange (rather than a plain store) makes
 * the local lock safe against a remote locker (percpu.c) doing the same exchange from
 * another CPU, which then uses sheaf_rseq_fence() to restart sequences still running
 * on the CPU with the old main.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "percpu/percpu.h"

/* glibc 2.35+ (weak: absent on older glibc, then per-thread mode). */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

struct sheaf_line_off sheaf_rseq_offset;

/* Stand-in rseq area where glibc has none: cpu_id -2 forever (never registered). */
static __thread struct {
	uint32_t cpu_id_start;
	int32_t cpu_id;
	uint64_t rseq_cs;
} __attribute__((aligned(32))) dummy_area = { 0, -2, 0 };

static bool fence_by_cpu; /* MEMBARRIER_CMD_FLAG_CPU works (Linux 5.10+) */

/* The slots of every sequence (rseq.h SHEAF_RSEQ_TAIL), bounded by the linker. */
extern uintptr_t __start_sheaf_rseq_slots[] __attribute__((weak, visibility("hidden")));
extern uintptr_t __stop_sheaf_rseq_slots[] __attribute__((weak, visibility("hidden")));

struct rseq_cs_copy {
	uint32_t version, flags;
	uint64_t start_ip, post_commit_offset, abort_ip;
} __attribute__((aligned(32)));

/* The copies: n descriptors, then the signature word that defused descriptors name. */
static struct rseq_cs_copy *cs_copy;
static size_t cs_n, cs_len;

/* Copy the descriptors to a page that outlives a dlclose() of libsheaf.so and point
 * the slots at the copies (rseq.h explains why).  Once per load of the library,
 * before any cache exists, so no sequence runs meanwhile; the page (a few hundred
 * bytes used) is deliberately never unmapped. */
static void descriptors_relocate(void)
{
	uintptr_t *b = __start_sheaf_rseq_slots, *e = __stop_sheaf_rseq_slots;
	if (cs_copy || !b || !e || e <= b)
		return;
	size_t n = (size_t)(e - b);
	size_t len = SHEAF_ALIGN_UP((n + 1) * sizeof(struct rseq_cs_copy), SHEAF_PAGE_SIZE);
	struct rseq_cs_copy *copy =
		mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (copy == MAP_FAILED)
		return; /* keep the in-library descriptors: only dlclose is then unsafe */
	*(uint32_t *)&copy[n] = SHEAF_RSEQ_SIG;
	for (size_t i = 0; i < n; i++) {
		memcpy(&copy[i], (const void *)b[i], sizeof(copy[i]));
		__atomic_store_n(&b[i], (uintptr_t)&copy[i], __ATOMIC_RELEASE);
	}
	(void)mprotect(copy, len, PROT_READ);
	cs_copy = copy;
	cs_n = n;
	cs_len = len;
}

/* dlclose() (or exit): a thread whose rseq_cs still names one of our descriptors
 * makes the kernel read the descriptor and the signature before abort_ip at its next
 * preemption, even outside the sequence; with libsheaf.so unmapped the abort handler
 * is gone and the thread would get SIGSEGV.  Defuse every copy: an empty range at
 * address 0 (no thread is ever inside it, so the kernel just clears rseq_cs) whose
 * abort_ip follows a signature word on the same, still mapped, page.  By contract
 * nothing allocates through this library while it is unloaded; at process exit a
 * thread still inside a sequence would lose its restart protection for the last
 * instants of the process. */
__attribute__((destructor)) static void descriptors_defuse(void)
{
	if (!cs_copy || mprotect(cs_copy, cs_len, PROT_READ | PROT_WRITE) != 0)
		return;
	for (size_t i = 0; i < cs_n; i++) {
		struct rseq_cs_copy d = { 0, 0, 0, 0,
					  (uint64_t)(uintptr_t)&cs_copy[cs_n] + sizeof(uint32_t) };
		__atomic_store_n(&cs_copy[i].abort_ip, d.abort_ip, __ATOMIC_RELAXED);
		__atomic_store_n(&cs_copy[i].post_commit_offset, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&cs_copy[i].start_ip, 0, __ATOMIC_RELAXED);
	}
	(void)mprotect(cs_copy, cs_len, PROT_READ);
}

static long membarrier(int cmd, unsigned flags, int cpu)
{
	if (sheaf_fault_fail(SHEAF_FAULT_MEMBARRIER)) {
		errno = ENOMEM;
		return -1;
	}
	return syscall(__NR_membarrier, cmd, flags, cpu);
}

static char *thread_pointer(void)
{
#if defined(__x86_64__)
	char *tp;
	__asm__("mov %%fs:0, %0" : "=r"(tp));
	return tp;
#else
	return __builtin_thread_pointer();
#endif
}

int sheaf_rseq_cpu(void)
{
#if defined(__x86_64__)
	int32_t cpu;
	__asm__ volatile("movl %%fs:4(%1), %0" : "=r"(cpu) : "r"(sheaf_rseq_offset.v));
	return cpu;
#else
	return -2;
#endif
}

int sheaf_rseq_init(char *why, size_t len)
{
	bool glibc_area = &__rseq_offset != NULL && &__rseq_size != NULL;
	if (glibc_area)
		sheaf_rseq_offset.v = __rseq_offset;
	else
		sheaf_rseq_offset.v = (char *)&dummy_area - thread_pointer();
	descriptors_relocate();
#if !SHEAF_HAVE_RSEQ
	snprintf(why, len, "%s",
		 SHEAF_RSEQ_TSAN ? "ThreadSanitizer build (cannot follow rseq restarts)" :
				   "no restartable-sequence fast path for this architecture");
	return -ENOSYS;
#else
	if (!glibc_area) {
		snprintf(
			why, len,
			"glibc older than 2.35 has no rseq area (Sheaf does not register its own)");
		return -ENOSYS;
	}
	if (__rseq_size < 20) {
		snprintf(
			why, len,
			"glibc did not register rseq (__rseq_size %u): GLIBC_TUNABLES=glibc.pthread.rseq=0, "
			"Valgrind, or a kernel without rseq",
			__rseq_size);
		return -ENOSYS;
	}
	if (sheaf_rseq_cpu() < 0) {
		snprintf(why, len, "rseq area not registered for this thread");
		return -ENOSYS;
	}
	long q = membarrier(MEMBARRIER_CMD_QUERY, 0, 0);
	if (q < 0 || !(q & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)) {
		snprintf(why, len,
			 "kernel lacks membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)");
		return -ENOSYS;
	}
	if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) != 0) {
		snprintf(why, len, "membarrier rseq registration failed: %s", strerror(errno));
		return -errno;
	}
	fence_by_cpu = membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU,
				  sheaf_rseq_cpu()) == 0;
	if (!fence_by_cpu && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0) != 0) {
		snprintf(why, len, "membarrier rseq fence failed: %s", strerror(errno));
		return -errno;
	}
	snprintf(why, len, "glibc rseq area (size %u), membarrier rseq%s", __rseq_size,
		 fence_by_cpu ? " per CPU" : " (all CPUs)");
	return 0;
#endif
}

void sheaf_rseq_fork_child(void)
{
	(void)membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0);
}

/* The fallback when membarrier fails after init (it can: ENOMEM for the IPI masks):
 * run on CPU @k.  Our thread getting onto @k preempts whatever ran there, and a preempted
 * restartable sequence aborts before it resumes, so once sched_getcpu() says @k, no
 * sequence that started on @k before the call is still between its read and its
 * commit.  A CPU that no thread may run on (offline, outside the cpuset: EINVAL) has
 * nothing to fence.  Returns false only when the move did not happen. */
static bool fence_by_migration(int k, const cpu_set_t *home)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(k, &one);
	if (sched_setaffinity(0, sizeof(one), &one) != 0)
		return errno == EINVAL;
	bool ok = false;
	for (int i = 0; i < 1000 && !ok; i++) {
		ok = sched_getcpu() == k;
		if (!ok)
			sched_yield();
	}
	(void)sched_setaffinity(0, sizeof(*home), home);
	return ok;
}

void sheaf_rseq_fence(int cpu)
{
	if (cpu >= 0 && fence_by_cpu &&
	    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU, cpu) == 0)
		return;
	if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0)
		return;
	int err = errno;
	cpu_set_t home;
	if (sched_getaffinity(0, sizeof(home), &home) == 0) {
		bool ok = true;
		int lo = cpu >= 0 ? cpu : 0, hi = cpu >= 0 ? cpu + 1 : sheaf_g.ncpus;
		for (int k = lo; ok && k < hi && k < CPU_SETSIZE; k++)
			ok = fence_by_migration(k, &home);
		if (ok)
			return;
	}
	/* Neither works: a sequence may still be running on a sheaf we are about to
	 * change.  Nothing safe remains. */
	sheaf_os_print("sheaf: membarrier(PRIVATE_EXPEDITED_RSEQ) failed: %s, and the fallback "
		       "(running on the CPU) failed too",
		       sheaf_os_errstr(err));
	abort();
}

int sheaf_rseq_lock(struct sheaf_mainv_slot *mainv, struct sheaf_sheaf *locked,
		    struct sheaf_sheaf **m)
{
#if SHEAF_HAVE_RSEQ
	/* An abort (preempted between reading cpu_id and the commit) retries; a few
	 * aborts in a row mean a very busy CPU: take the slab path rather than spin. */
	for (int tries = 0; tries < 4; tries++) {
		long cpu, idx;
		struct sheaf_sheaf *old;
		asm goto("mov sheaf_rseq_offset(%%rip), %%rdx\n\t"
			 "mov .Lsheaf_lock_slot%=(%%rip), %%r8\n\t"
			 "mov %%r8, %%fs:8(%%rdx)\n"
			 ".Lsheaf_lock_start%=:\n\t"
			 "movslq %%fs:4(%%rdx), %[cpu]\n\t"
			 "test %[cpu], %[cpu]\n\t"
			 "js %l[nocpu]\n\t"
			 "mov %[cpu], %[idx]\n\t"
			 "shl %[sh], %[idx]\n\t"
			 "mov %c[two](%[mv],%[idx]), %%rax\n\t"
			 "cmp %[lk], %%rax\n\t"
			 "je %l[held]\n\t"
			 "lock cmpxchg %[lk], %c[two](%[mv],%[idx])\n"
			 ".Lsheaf_lock_end%=:\n\t"
			 "jne %l[held]\n\t" SHEAF_RSEQ_TAIL(".Lsheaf_lock", aborted)
			 : [cpu] "=&r"(cpu), [idx] "=&r"(idx), "=&a"(old)
			 : [mv] "r"(mainv), [lk] "r"(locked), [sh] "i"(SHEAF_MAINV_SHIFT),
			   [two] "i"(2 * sizeof(struct sheaf_mainv_slot))
			 : "rdx", "r8", "cc", "memory"
			 : nocpu, held, aborted);
		*m = old;
		return (int)cpu;
aborted:
		continue;
	}
	return -2;
nocpu:
	return -1;
held:
	return -2;
#else
	(void)mainv;
	(void)locked;
	(void)m;
	return -1;
#endif
}
