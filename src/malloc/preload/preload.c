/* SPDX-License-Identifier: MIT */
/*
 * preload.c - libsheaf-malloc.so: the malloc front end (src/malloc/malloc.c) under
 * the names of the C library and of the C++ runtime, for LD_PRELOAD
 * (docs/malloc.md).  The library also contains the whole core (built from the same
 * objects as libsheaf), so a preloaded process has exactly one Sheaf.
 *
 * What replacement mallocs are known to trip over (from their issue trackers),
 * and the answer here:
 *  - Allocation before initialisation and during dlsym: nothing here calls
 *    dlsym on the allocation path; the class caches are created on first use
 *    and any allocation made while one is being created comes from malloc.c's
 *    bootstrap arena.
 *  - Memory of glibc's own allocator reaching free: Sheaf never uses brk, so
 *    a pointer inside the program break that looks like an in-use chunk of
 *    glibc's main arena is glibc's and goes back through __libc_free; any
 *    other unknown pointer is reported (sheaf_preload_foreign_size below).
 *  - The core cannot start (no address space for its heap): glibc serves the
 *    small requests instead of every one failing (sheaf_preload_fallback_alloc).
 *  - Initial-exec TLS: all TLS of the library is initial-exec and
 *    zero-initialised (a preloaded library gets static TLS; dlopen of this
 *    library after start-up is not supported, as for every replacement).
 *  - fork from a multi-threaded parent: malloc.c and the core register
 *    pthread_atfork handlers that hold every lock across fork.
 *  - Threads that exit holding cached objects: the core flushes a thread's
 *    sheaves at exit (sheaf_thread_flush); objects stay valid for any thread.
 *  - errno: free and delete preserve it (malloc.c).
 *
 * C++: operator new/delete are defined here in C under their Itanium-ABI
 * names, so that C programs do not load libstdc++.  Failure follows the
 * standard: the new_handler loop, then std::bad_alloc thrown through the
 * C++ runtime, both looked up only when memory has run out.
 *
 * Proof of service: SHEAF_MALLOC_STATS=1 prints "sheaf-malloc: N mallocs, M frees"
 * on stderr at exit, SHEAF_MALLOC_STATS=/path appends the line (with pid and program
 * name) to that file, which also works for programs that close stderr or whose
 * children's stderr is compared by tests.  The counts are read off the core's
 * statistics at exit (sheaf_malloc_served), not counted on the calls: a thread-local
 * count on every malloc and free was six of the 27 instructions of malloc's fast path
 * (issue 17).  A child of fork prints its own blocks: the counts at the fork are
 * read in the child as it starts, when a line is asked for (counts_base_in_child).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/auxv.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "malloc/malloc.h"
#include "preload.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define EXPORT      __attribute__((visibility("default")))

/* ---- Counts ------------------------------------------------------------------------- */

void sheaf_preload_counts(uint64_t *mallocs, uint64_t *frees)
{
	sheaf_malloc_served(mallocs, frees);
}

/* ---- glibc's memory ------------------------------------------------------------- */

extern void __libc_free(void *ptr);
extern void *__libc_malloc(size_t n);
extern void *__libc_memalign(size_t align, size_t n);

/* Set when the core could not start and glibc serves the small requests:
 * every pointer that is not Sheaf's is then glibc's (sheaf_preload_fallback_alloc). */
static atomic_int fallback_active;
static size_t (*glibc_usable_size)(void *);

/* Start of the program break (field 47 of /proc/self/stat), 1 if unknown. */
static uintptr_t brk_start;

static uintptr_t read_brk_start(void)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = 0;
	char *s = strrchr(buf, ')'); /* the command name may contain spaces */
	if (!s)
		return 1;
	/* After ")" comes field 3; start_brk is field 47. */
	for (int field = 2; field < 47 && s; field++)
		s = strchr(s + 1, ' ');
	if (!s)
		return 1;
	uintptr_t v = (uintptr_t)strtoull(s + 1, NULL, 10);
	return v ? v : 1;
}

void *sheaf_preload_fallback_alloc(size_t n, size_t align)
{
	if (!atomic_exchange(&fallback_active, 1)) {
		static const char m[] =
			"sheaf-malloc: Sheaf could not start (no address space for "
			"its heap? see SHEAF_HEAP_GB); small blocks come from glibc's malloc\n";
		ssize_t w = write(2, m, sizeof(m) - 1);
		(void)w;
		/* glibc's own malloc_usable_size (this library's hides it);
		 * dlsym may allocate: that comes back here, to glibc. */
		*(void **)&glibc_usable_size = dlsym(RTLD_NEXT, "malloc_usable_size");
	}
	return align > 16 ? __libc_memalign(align, n) : __libc_malloc(n);
}

bool sheaf_preload_fallback_on(void)
{
	return atomic_load_explicit(&fallback_active, memory_order_acquire) != 0;
}

size_t sheaf_preload_foreign_size(const void *ptr)
{
	uintptr_t a = (uintptr_t)ptr;
	if (atomic_load_explicit(&fallback_active, memory_order_acquire) && glibc_usable_size) {
		size_t u = glibc_usable_size((void *)ptr);
		return u ? u : 1; /* glibc's free diagnoses a bad pointer itself */
	}
	if (!brk_start)
		brk_start = read_brk_start();
	uintptr_t lo = brk_start, hi = (uintptr_t)sbrk(0);
	/* glibc's main arena is the only user of brk in a process where Sheaf
	 * is the malloc (Sheaf maps everything), and its chunks are 16-byte
	 * aligned with the size word just before the pointer. */
	if (lo <= 1 || a < lo + 16 || a >= hi || (a & 15))
		return 0;
	size_t sz = ((const size_t *)ptr)[-1];
	if (sz & 6) /* IS_MMAPPED or NON_MAIN_ARENA: not a brk chunk */
		return 0;
	sz &= ~(size_t)7;
	if (sz < 32 || sz > hi - a + 8)
		return 0;
	return sz - 8; /* an in-use chunk's payload overlaps the next prev_size */
}

void sheaf_preload_foreign_free(void *ptr)
{
	__libc_free(ptr);
}

/* ---- The C library's names ------------------------------------------------------------ */

EXPORT void *malloc(size_t n)
{
	return sheaf_malloc_inline(n);
}

EXPORT void free(void *p)
{
	sheaf_free_inline(p);
}

/* C23's sized free: the size is checked against the block's class (README "Errors",
 * size mismatch), as sized operator delete is. */
EXPORT void free_sized(void *p, size_t n)
{
	sheaf_free_sized(p, n);
}

/* C23's sized free of an aligned block (aligned_alloc): the alignment adds nothing to
 * the check, a size from which an aligned allocation reaches the block's class being a
 * right one (docs/malloc.md, "Errors").  Without it, a program built for a C library
 * that has it passed Sheaf's block to that library's free under the preload. */
EXPORT void free_aligned_sized(void *p, size_t align, size_t n)
{
	(void)align;
	sheaf_free_sized(p, n);
}

EXPORT void *calloc(size_t nmemb, size_t size)
{
	return sheaf_calloc(nmemb, size);
}

EXPORT void *realloc(void *p, size_t n)
{
	return sheaf_realloc(p, n);
}

EXPORT void *reallocarray(void *p, size_t nmemb, size_t size)
{
	return sheaf_malloc_reallocarray(p, nmemb, size);
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
	return sheaf_aligned_alloc(align, n);
}

EXPORT int posix_memalign(void **memptr, size_t align, size_t n)
{
	return sheaf_malloc_posix_memalign(memptr, align, n);
}

EXPORT void *memalign(size_t align, size_t n)
{
	return sheaf_malloc_memalign(align, n);
}

EXPORT void *valloc(size_t n)
{
	return sheaf_malloc_valloc(n);
}

EXPORT void *pvalloc(size_t n)
{
	return sheaf_malloc_pvalloc(n);
}

EXPORT size_t malloc_usable_size(void *p)
{
	return sheaf_usable_size(p);
}

EXPORT int malloc_trim(size_t pad)
{
	(void)pad; /* nothing is kept at a heap top: there is no top */
	return sheaf_malloc_trim();
}

/* ---- C++ ----------------------------------------------------------------------------- */

typedef void (*new_handler_fn)(void);

static void *__attribute__((noinline)) cxx_new_failed(size_t n, size_t al, bool nothrow)
{
	for (;;) {
		/* The C++ runtime is looked up only now: a C program never
		 * needs it, and dlsym may allocate (memory may be back by then). */
		new_handler_fn (*get)(void) =
			(new_handler_fn(*)(void))dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv");
		new_handler_fn h = get ? get() : NULL;
		if (!h) {
			if (nothrow)
				return NULL;
			void (*thr)(void) =
				(void (*)(void))dlsym(RTLD_DEFAULT, "_ZSt17__throw_bad_allocv");
			if (thr)
				thr(); /* throws std::bad_alloc through this frame */
			static const char m[] = "sheaf-malloc: operator new: out of memory "
						"and no C++ runtime to throw std::bad_alloc\n";
			ssize_t w = write(2, m, sizeof(m) - 1);
			(void)w;
			abort();
		}
		h();
		void *p = al ? sheaf_aligned_alloc(al, n) : sheaf_malloc(n);
		if (p)
			return p;
	}
}

static inline void *cxx_new(size_t n, size_t al, bool nothrow)
{
	void *p = al ? sheaf_aligned_alloc(al, n) : sheaf_malloc_inline(n);
	if (likely(p != NULL))
		return p;
	return cxx_new_failed(n, al, nothrow);
}

static inline void cxx_delete(void *p)
{
	sheaf_free_inline(p);
}

static inline void cxx_delete_sized(void *p, size_t n)
{
	/* Checked against the class: a mismatch is a bug worth reporting. */
	sheaf_free_sized(p, n);
}

void *_Znwm(size_t n)
{
	return cxx_new(n, 0, false);
}
void *_Znam(size_t n)
{
	return cxx_new(n, 0, false);
}
void *_ZnwmRKSt9nothrow_t(size_t n, const sheaf_nothrow_t *nt)
{
	(void)nt;
	return cxx_new(n, 0, true);
}
void *_ZnamRKSt9nothrow_t(size_t n, const sheaf_nothrow_t *nt)
{
	(void)nt;
	return cxx_new(n, 0, true);
}
void *_ZnwmSt11align_val_t(size_t n, sheaf_align_val_t al)
{
	return cxx_new(n, al, false);
}
void *_ZnamSt11align_val_t(size_t n, sheaf_align_val_t al)
{
	return cxx_new(n, al, false);
}
void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, sheaf_align_val_t al, const sheaf_nothrow_t *nt)
{
	(void)nt;
	return cxx_new(n, al, true);
}
void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, sheaf_align_val_t al, const sheaf_nothrow_t *nt)
{
	(void)nt;
	return cxx_new(n, al, true);
}

void _ZdlPv(void *p)
{
	cxx_delete(p);
}
void _ZdaPv(void *p)
{
	cxx_delete(p);
}
void _ZdlPvm(void *p, size_t n)
{
	cxx_delete_sized(p, n);
}
void _ZdaPvm(void *p, size_t n)
{
	cxx_delete_sized(p, n);
}
void _ZdlPvRKSt9nothrow_t(void *p, const sheaf_nothrow_t *nt)
{
	(void)nt;
	cxx_delete(p);
}
void _ZdaPvRKSt9nothrow_t(void *p, const sheaf_nothrow_t *nt)
{
	(void)nt;
	cxx_delete(p);
}
void _ZdlPvSt11align_val_t(void *p, sheaf_align_val_t al)
{
	(void)al;
	cxx_delete(p);
}
void _ZdaPvSt11align_val_t(void *p, sheaf_align_val_t al)
{
	(void)al;
	cxx_delete(p);
}
void _ZdlPvmSt11align_val_t(void *p, size_t n, sheaf_align_val_t al)
{
	(void)al;
	cxx_delete_sized(p, n);
}
void _ZdaPvmSt11align_val_t(void *p, size_t n, sheaf_align_val_t al)
{
	(void)al;
	cxx_delete_sized(p, n);
}
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, sheaf_align_val_t al, const sheaf_nothrow_t *nt)
{
	(void)al;
	(void)nt;
	cxx_delete(p);
}
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, sheaf_align_val_t al, const sheaf_nothrow_t *nt)
{
	(void)al;
	(void)nt;
	cxx_delete(p);
}

/* ---- Start and exit ---------------------------------------------------------------- */

static char stats_dest[512]; /* SHEAF_MALLOC_STATS, copied at start */

/* The line of a fork child counts its own blocks: the counts as of the fork are read in
 * the child, as it starts, and subtracted (only when a line is asked for: it costs a few
 * microseconds per size class).  Registered after the core's handlers, so this child
 * handler runs after the core's have released its locks and folded in the counts of the
 * threads the child lost.  Until 2026-11-29 the parent read them in its prepare handler,
 * while its other threads still ran, and in per-thread mode without their fast-path
 * operations since their latest slow path: those showed in the child's line (a thread's
 * 5,000 malloc/free pairs, test_preload_api.sh). */
static uint64_t base_mallocs, base_frees; /* this process's at its start */

static void counts_base_in_child(void)
{
	sheaf_malloc_served(&base_mallocs, &base_frees);
}

/* One line on stderr, written as it is (no allocation: the core may not have started). */
static void stats_say(const char *a, const char *b, const char *c)
{
	const char *part[3] = { a, b, c };
	for (int i = 0; i < 3; i++) {
		ssize_t w = write(2, part[i], strlen(part[i]));
		(void)w;
	}
}

/* SHEAF_MALLOC_STATS: "1" prints the line on stderr, an absolute path appends it to the
 * file.  A value that is neither was taken for "1" without a word (a relative path
 * printed on stderr), and one too long for the copy was dropped silently: both are
 * said now, in the options' style (docs/options.md). */
static void stats_dest_set(const char *v)
{
	size_t n = strlen(v);
	if (n >= sizeof(stats_dest)) {
		stats_say("sheaf: SHEAF_MALLOC_STATS ignored: longer than 511 bytes", "", "\n");
		return;
	}
	memcpy(stats_dest, v, n + 1);
	bool plain = n <= 48; /* shown only if short and printable: one line */
	for (size_t i = 0; i < n && plain; i++)
		plain = (unsigned char)v[i] >= 0x20 && v[i] != 0x7f;
	if (v[0] != '/' && strcmp(v, "1") != 0)
		stats_say("sheaf: SHEAF_MALLOC_STATS='", plain ? v : "(value not shown)",
			  "': accepted 0, 1 or an absolute path (printing on stderr)\n");
}

static void __attribute__((constructor)) preload_start(void)
{
	/* Not in a setuid/setgid program (AT_SECURE): a path here would let anyone
	 * append to a file with the program's privileges (base/options.c). */
	const char *v = getauxval(AT_SECURE) ? NULL : getenv("SHEAF_MALLOC_STATS");
	if (v && *v && strcmp(v, "0") != 0)
		stats_dest_set(v);
	/* Create the first class now, while the process is most likely still
	 * single-threaded, so the core's start-up is out of the way. */
	sheaf_free(sheaf_malloc(1)); /* (malloc/free would be elided as builtins) */
	if (stats_dest[0])
		pthread_atfork(NULL, NULL, counts_base_in_child);
	/* The reaper starts later, once the heap is big (sheaf_malloc_reaper_start). */
}

static void __attribute__((destructor)) preload_exit(void)
{
	if (!stats_dest[0])
		return;
	uint64_t m, f;
	sheaf_preload_counts(&m, &f);
	/* The classes' counters are the caches' statistics: a sheaf_stats_reset() of a class
	 * (the handle sheaf_cache_of gives) lowers them, below a forked child's base too,
	 * where the difference wrapped to 18 quintillion. */
	m = m > base_mallocs ? m - base_mallocs : 0;
	f = f > base_frees ? f - base_frees : 0;
	char line[640];
	int fd = 2, n;
	if (stats_dest[0] == '/') {
		n = snprintf(line, sizeof(line),
			     "sheaf-malloc: %llu mallocs, %llu frees (pid %d, %s)\n",
			     (unsigned long long)m, (unsigned long long)f, (int)getpid(),
			     program_invocation_short_name);
		fd = open(stats_dest, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		/* A file that cannot be opened (no such directory, no permission) gave no
		 * line anywhere, without a word: say so, and print the line on stderr. */
		if (fd < 0) {
			char why[24];
			snprintf(why, sizeof(why), " (errno %d)", errno);
			stats_say("sheaf: SHEAF_MALLOC_STATS: cannot open the file", why,
				  "; the line is on stderr\n");
			fd = 2;
		}
	} else {
		n = snprintf(line, sizeof(line), "sheaf-malloc: %llu mallocs, %llu frees\n",
			     (unsigned long long)m, (unsigned long long)f);
	}
	if (fd >= 0 && n > 0) {
		ssize_t w =
			write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
		(void)w;
	}
	if (fd > 2)
		close(fd);
}
