/* SPDX-License-Identifier: MIT */
/*
 * os.c - the operating-system contract: mappings, time, the current CPU, and the error
 * reporter.  Nothing here allocates: the reporter formats on the stack and write(2)s,
 * because it runs when the heap may be corrupt.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

void *sheaf_os_map(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	return p;
}

void sheaf_os_unmap(void *p, size_t size)
{
	if (p)
		munmap(p, size);
}

void sheaf_os_purge(void *p, size_t size)
{
	/* MADV_DONTNEED, not MADV_FREE: RSS must drop at once, or users see "memory not
	 * returned", the complaint most often filed against other allocators. */
	madvise(p, size, MADV_DONTNEED);
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
	char buf[512];
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
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

void sheaf_report_error(const struct sheaf_cache *c, const void *addr, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	int warn = sheaf_g.on_error_warn;
	sheaf_os_print("sheaf: cache '%s': %s %p%s", c ? c->name : "?", what, addr,
		       warn ? " (object leaked, continuing: SHEAF_ON_ERROR=warn)" : "");
	if (!warn)
		abort();
}

void sheaf_assert_fail(const char *expr, const char *file, int line)
{
	sheaf_os_print("sheaf: internal assertion failed: %s (%s:%d)", expr, file, line);
	abort();
}
