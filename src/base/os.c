/* SPDX-License-Identifier: MIT */
/*
 * os.c - the operating-system contract: mappings, time, the current CPU, and the error
 * printer.  Nothing here allocates: the printer formats on the stack and write(2)s,
 * because it runs when the heap may be corrupt.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

struct sheaf_globals sheaf_g; /* base/base.h */

/* ---- Fault injection (tests only: reached through the hidden sheaf_fault_arm, never
 * through the environment, so a shipped library cannot be made to fail) ------------- */

/* Calls of each kind left before the one that fails (1: the next); 0: off.  A persistent
 * fault keeps failing every call from that one on, until disarmed. */
static atomic_long fault_left[SHEAF_FAULT_NR];
static atomic_bool fault_persist[SHEAF_FAULT_NR];
static atomic_ulong fault_hits[SHEAF_FAULT_NR];

void sheaf_fault_arm(enum sheaf_fault_kind k, long nth, bool persistent)
{
	atomic_store(&fault_persist[k], persistent);
	atomic_store(&fault_left[k], nth > 0 ? nth : 0);
}

void sheaf_fault_disarm_all(void)
{
	for (int k = 0; k < SHEAF_FAULT_NR; k++)
		atomic_store(&fault_left[k], 0);
}

unsigned long sheaf_fault_hits(enum sheaf_fault_kind k)
{
	return atomic_load(&fault_hits[k]);
}

static atomic_ulong fault_calls[SHEAF_FAULT_NR];

unsigned long sheaf_fault_calls(enum sheaf_fault_kind k)
{
	return atomic_load(&fault_calls[k]);
}

bool sheaf_fault_fail(enum sheaf_fault_kind k)
{
	atomic_fetch_add_explicit(&fault_calls[k], 1, memory_order_relaxed);
	if (sheaf_likely(atomic_load_explicit(&fault_left[k], memory_order_relaxed) == 0))
		return false;
	long v = atomic_fetch_sub(&fault_left[k], 1);
	if (v <= 0) { /* disarmed meanwhile, or past a one-shot fault: undo */
		atomic_fetch_add(&fault_left[k], 1);
		return false;
	}
	if (v != 1)
		return false;
	if (atomic_load(&fault_persist[k]))
		atomic_store(&fault_left[k], 1); /* the next call fails too */
	atomic_fetch_add(&fault_hits[k], 1);
	return true;
}

/* ---- System calls, each checked (or its failure injected) in one place --------------- */

void *sheaf_sys_mmap(void *addr, size_t len, int prot, int flags)
{
	if (sheaf_fault_fail(SHEAF_FAULT_MMAP)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return mmap(addr, len, prot, flags, -1, 0);
}

void *sheaf_sys_mremap(void *old, size_t len, size_t nlen, int flags, void *new_addr)
{
	if (sheaf_fault_fail(SHEAF_FAULT_MMAP)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return mremap(old, len, nlen, flags, new_addr);
}

/* munmap and madvise of ranges Sheaf mapped itself fail only when the kernel cannot
 * split a mapping (ENOMEM: the process is at vm.max_map_count) or on a bug (EINVAL).
 * Either way the memory stays where it is: the caller keeps or counts it, and the
 * first such failure of a process is reported on stderr, since nothing else would
 * show it (the error path must not allocate, so there is no more than one line). */
static atomic_bool sys_fail_reported;

static void sys_report(const char *call, const void *p, size_t len, int err)
{
	if (!atomic_exchange(&sys_fail_reported, true))
		sheaf_os_print(
			"sheaf: %s(%p, %zu) failed: %s; the memory stays mapped (reported once)",
			call, p, len, sheaf_os_errstr(err));
}

/* strerror() translates: in a program that called setlocale() with a translated locale,
 * its first call loads the C library's message catalog with malloc (11 KiB for
 * de_DE), and a report made under the heap's lock (a purge whose madvise failed)
 * re-entered Sheaf's malloc from inside it under the preload.  The errors Sheaf reports
 * are few: their English text, from no table that allocates. */
const char *sheaf_os_errstr(int e)
{
	switch (e) {
	case ENOMEM:
		return "Cannot allocate memory";
	case EINVAL:
		return "Invalid argument";
	case EAGAIN:
		return "Resource temporarily unavailable";
	case EPERM:
		return "Operation not permitted";
	case EACCES:
		return "Permission denied";
	case EFAULT:
		return "Bad address";
	case EBUSY:
		return "Device or resource busy";
	case ENOSYS:
		return "Function not implemented";
	default:
		return "an unexpected error";
	}
}

ssize_t sheaf_os_read_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r;
	do
		r = read(fd, buf, n - 1);
	while (r < 0 && errno == EINTR);
	close(fd);
	if (r < 0)
		return -1;
	buf[r] = '\0';
	return r;
}

int sheaf_sys_munmap(void *p, size_t len)
{
	int r = sheaf_fault_fail(SHEAF_FAULT_MUNMAP) ? (errno = ENOMEM, -1) : munmap(p, len);
	if (r != 0) {
		int e = errno;
		atomic_fetch_add(&sheaf_os_fail_counts[SHEAF_FAULT_MUNMAP], 1);
		sys_report("munmap", p, len, e);
		errno = e;
		return -e;
	}
	return 0;
}

int sheaf_sys_madvise(void *p, size_t len, int advice)
{
	int r = sheaf_fault_fail(SHEAF_FAULT_MADVISE) ? (errno = ENOMEM, -1) :
							madvise(p, len, advice);
	if (r != 0) {
		int e = errno;
		atomic_fetch_add(&sheaf_os_fail_counts[SHEAF_FAULT_MADVISE], 1);
		sys_report("madvise", p, len, e);
		errno = e;
		return -e;
	}
	return 0;
}

/* pthread_create reports by its result, but glibc's failed mmap of the stack leaves
 * ENOMEM in errno: kept as it was, since the reaper is started from inside malloc,
 * whose success must not change errno (a 2 MiB malloc under ulimit -v returned its
 * block with errno ENOMEM until 2026-11-29; adversarial run). */
int sheaf_sys_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
	if (sheaf_fault_fail(SHEAF_FAULT_THREAD))
		return EAGAIN;
	int e = errno;
	int r = pthread_create(t, NULL, fn, arg);
	errno = e;
	return r;
}

static void *probe_thread(void *arg)
{
	return arg;
}

/* The probe's stack stays in glibc's cache of stacks after the join, where the next
 * pthread_create (the library's own) finds it. */
bool sheaf_sys_thread_probe(void)
{
	pthread_t t;
	if (sheaf_sys_thread_create(&t, probe_thread, NULL) != 0)
		return false;
	pthread_join(t, NULL);
	return true;
}

atomic_ulong sheaf_os_fail_counts[SHEAF_FAULT_NR];

void *sheaf_os_map(size_t size)
{
	void *p = sheaf_sys_mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	if (p == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	return p;
}

int sheaf_os_unmap(void *p, size_t size)
{
	if (!p)
		return 0;
	int r = sheaf_sys_munmap(p, size);
	/* Still mapped (reported, counted): the caller forgets it, so give the memory
	 * back at least, as the page provider does with a block it cannot unmap.  Only the
	 * address space stays.  Before, every failed munmap of a large block or a cache
	 * descriptor kept its pages resident for good (the malloc fuzz target, with
	 * munmap failures injected, grew by 1.6 MB per input). */
	if (r != 0)
		(void)sheaf_os_purge(p, size);
	return r;
}

int sheaf_os_purge(void *p, size_t size)
{
	/* MADV_DONTNEED, not MADV_FREE: RSS must drop at once, or users see "memory not
	 * returned", the complaint most often filed against other allocators. */
	return sheaf_sys_madvise(p, size, MADV_DONTNEED);
}

uint64_t sheaf_os_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int sheaf_os_getcpu(void)
{
	/* glibc 2.35+ reads the registered rseq area here: a few nanoseconds. */
	int cpu = sched_getcpu();
	return cpu < 0 ? 0 : cpu;
}

static __attribute__((format(printf, 1, 0))) void os_vprint(const char *fmt, va_list ap)
{
	/* 1 KiB: an option's line shows two values of up to 48 bytes, each byte of them up
	 * to four when escaped (options.c shown()), and the choices. */
	char buf[1024];
	int n = (int)sheaf_vfmt(buf, sizeof(buf) - 1, fmt,
				ap); /* base/error.h: no stdio, no malloc */
	if (n == 0 || buf[n - 1] != '\n')
		buf[n++] = '\n';
	ssize_t off = 0;
	while (off < n) {
		ssize_t k = write(2, buf + off, (size_t)(n - off));
		if (k <= 0)
			break;
		off += k;
	}
}

void sheaf_os_print(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	os_vprint(fmt, ap);
	va_end(ap);
}

void sheaf_assert_fail(const char *expr, const char *file, int line)
{
	sheaf_os_print("sheaf: internal assertion failed: %s (%s:%d)", expr, file, line);
	abort();
}
