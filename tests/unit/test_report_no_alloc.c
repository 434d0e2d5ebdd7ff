/* SPDX-License-Identifier: MIT */
/*
 * test_report_no_alloc.c - the report of a failed madvise (or munmap) allocates
 * nothing, also in a program that runs in a translated locale.  The report is made
 * where it fails, under the page heap's lock (a purge); it named the error with
 * strerror(), whose first call in a translated locale loads the C library's message
 * catalog with malloc (11 KiB for de_DE): under the preload library that malloc was
 * Sheaf's own, entered from under its heap lock (until 2026-11-29; adversarial run).
 *
 * malloc, calloc and realloc are replaced here by counting wrappers of glibc's; the
 * locale is de_DE.UTF-8, built with localedef into a scratch directory when the system
 * has not got it (skipped, exit 77, without localedef or glibc's German messages).
 */
#include <locale.h>
#include <sys/stat.h>

#include "harness.h"
#include "base/base.h"
#include "sheaf.h"

static atomic_int counting, counted;

/* Not in sanitizer builds, whose runtime owns malloc: a replacement there broke the
 * runtime's own start (ASan: CHECK failed in asan_posix.cpp) before main could skip. */
#if !SANITIZE_ADDRESS && !SANITIZE_THREAD
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t k);
extern void *__libc_realloc(void *p, size_t n);

void *malloc(size_t n)
{
	if (atomic_load(&counting))
		atomic_fetch_add(&counted, 1);
	return __libc_malloc(n);
}
void *calloc(size_t n, size_t k)
{
	if (atomic_load(&counting))
		atomic_fetch_add(&counted, 1);
	return __libc_calloc(n, k);
}
void *realloc(void *p, size_t n)
{
	if (atomic_load(&counting))
		atomic_fetch_add(&counted, 1);
	return __libc_realloc(p, n);
}
#endif

static bool german(void)
{
	struct stat st;
	if (stat("/usr/share/locale/de/LC_MESSAGES/libc.mo", &st) != 0)
		return false; /* no catalog: strerror would not allocate anyway */
	if (setlocale(LC_ALL, "de_DE.UTF-8"))
		return true;
	static char dir[] = "/tmp/sheaf-locale.XXXXXX";
	if (!mkdtemp(dir))
		return false;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1",
		 dir);
	bool ok = system(cmd) == 0 && setenv("LOCPATH", dir, 1) == 0 &&
		  setlocale(LC_ALL, "de_DE.UTF-8");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0) {
		/* a scratch directory left behind: harmless */
	}
	return ok;
}

static void t_report_no_alloc(void)
{
	REQUIRE(sheaf_option_set("PURGE_MS", "0") == 0); /* purge at every free */
	struct sheaf_cache *c = sheaf_cache_create("report-no-alloc", 4096, NULL);
	REQUIRE(c);
	static void *v[2048];
	for (int i = 0; i < 2048; i++)
		REQUIRE((v[i] = sheaf_cache_alloc(c)) != NULL);
	sheaf_fault_arm(SHEAF_FAULT_MADVISE, 1, true);
	atomic_store(&counting, 1);
	for (int i = 0; i < 2048; i++)
		sheaf_cache_free(c, v[i]);
	sheaf_cache_shrink(c); /* purges: madvise fails, reported once */
	atomic_store(&counting, 0);
	sheaf_fault_disarm_all();
	CHECK(sheaf_fault_hits(SHEAF_FAULT_MADVISE) > 0);
	CHECKF(atomic_load(&counted) == 0, "%d allocations while reporting\n",
	       atomic_load(&counted));
	sheaf_cache_destroy(c);
}

int main(void)
{
	if (SANITIZE_ADDRESS || SANITIZE_THREAD) {
		printf("skipped: the sanitizer runtime replaces malloc\n");
		return 77;
	}
	if (!german()) {
		printf("skipped: no translated locale (de_DE.UTF-8 and glibc's German messages)\n");
		return 77;
	}
	RUN(t_report_no_alloc);
	return th_done();
}
