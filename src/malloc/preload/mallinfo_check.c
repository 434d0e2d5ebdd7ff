/* SPDX-License-Identifier: MIT */
/*
 * mallinfo_check.c - run under libsheaf-malloc.so by
 * tests/integration/test_preload_mallinfo.sh: mallinfo2().uordblks follows the
 * program's allocations up and down, extents show in hblks/hblkhd, mallinfo agrees,
 * malloc_info writes glibc's XML shape with Sheaf's size classes, and a bad option
 * gives EINVAL.  Prints one "ok" line per check; exits 1 at the first failure.
 * With the argument "fallback" (the core could not start, glibc serves the small
 * blocks), only that uordblks follows the allocations.
 * Without the preload glibc's arena would not see Sheaf's objects at all, so the
 * first check fails if the replacement goes away.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N    20000
#define SIZE 200 /* class 224 */
#define BIG  (4u << 20)

static int fails;

static void check(int cond, const char *what, long long a, long long b)
{
	printf("%s %s (%lld, %lld)\n", cond ? "ok" : "not ok", what, a, b);
	if (!cond)
		fails++;
}

/* malloc_info: glibc's XML with Sheaf's classes; another option is refused as glibc does. */
static void check_malloc_info(void)
{
	char *xml = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&xml, &len);
	int r = f ? malloc_info(0, f) : -1;
	if (f)
		fclose(f);
	check(r == 0 && xml && strstr(xml, "<malloc version=\"1\">") && strstr(xml, "</malloc>") &&
		      strstr(xml, "<total type=\"mmap\"") && strstr(xml, " to=\"224\""),
	      "malloc_info writes glibc's XML with Sheaf's classes", r, (long long)len);
	free(xml);
	errno = 0;
	r = malloc_info(1, stdout);
	/* glibc returns the code itself and leaves errno alone (until 2026-11-29 Sheaf
	 * returned -1 with errno, as the manual page says but glibc does not). */
	check(r == EINVAL && errno == 0, "malloc_info(1, ...) returns EINVAL, errno untouched", r,
	      errno);
}

/* sheaf_stats_print_all (exported by the preload library too) into a stream whose
 * buffer is allocated as it is written: the stream's mallocs may create size classes,
 * which the printer must not block (it held the cache list's lock while writing and hung
 * for good until 2026-11-29).  In a child with an alarm, so that a hang fails the check. */
static void check_print_all(void)
{
	void (*print_all)(FILE *) = (void (*)(FILE *))dlsym(RTLD_DEFAULT, "sheaf_stats_print_all");
	pid_t pid = print_all ? fork() : -1;
	if (pid == 0) {
		alarm(10);
		char *txt = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&txt, &len);
		if (!f)
			_exit(2);
		print_all(f);
		fclose(f);
		_exit(txt && strstr(txt, "cache malloc-224 (") ? 0 : 3);
	}
	int st = -1;
	if (pid > 0)
		waitpid(pid, &st, 0);
	check(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "sheaf_stats_print_all into an open_memstream (exit 0, not killed by the alarm)",
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int main(int argc, char **argv)
{
	static void *v[N];
	/* "fallback": run under SHEAF_HEAP_GB=0, where glibc serves the small blocks;
	 * only the figures that follow them are checked (no size class exists). */
	bool fallback = argc > 1 && !strcmp(argv[1], "fallback");
	struct mallinfo2 m0 = mallinfo2();
	for (int i = 0; i < N; i++) {
		v[i] = malloc(SIZE);
		if (!v[i])
			return 1;
		memset(v[i], 1, SIZE);
	}
	struct mallinfo2 m1 = mallinfo2();
	long long grew = (long long)m1.uordblks - (long long)m0.uordblks;
	/* Each 200-byte block takes a 224-byte slot of its class. */
	check(grew >= (long long)N * SIZE && grew <= (long long)N * 256 + 65536,
	      "uordblks grew by the blocks allocated", grew, (long long)N * SIZE);
	check(m1.arena >= m1.uordblks && m1.fordblks == m1.arena - m1.uordblks,
	      "arena = uordblks + fordblks", (long long)m1.arena, (long long)m1.uordblks);

	if (fallback) /* (glibc's chunk of a 200-byte block, 208 bytes, is within the bound) */
		return fails ? 1 : 0;
	for (int i = 0; i < N / 2; i++)
		free(v[i]);
	struct mallinfo2 m2 = mallinfo2();
	long long fell = (long long)m1.uordblks - (long long)m2.uordblks;
	check(fell >= (long long)(N / 2) * SIZE && fell <= (long long)(N / 2) * 256 + 65536,
	      "uordblks fell by the blocks freed", fell, (long long)(N / 2) * SIZE);
	for (int i = N / 2; i < N; i++)
		free(v[i]);
	struct mallinfo2 m3 = mallinfo2();
	long long back = (long long)m3.uordblks - (long long)m0.uordblks;
	check(back > -65536 && back < 65536, "uordblks back where it started", back, 0);

	void *big = malloc(BIG);
	struct mallinfo2 m4 = mallinfo2();
	check(big && m4.hblks >= m3.hblks + 1 && m4.hblkhd >= m3.hblkhd + BIG,
	      "a large block shows in hblks and hblkhd", (long long)m4.hblks, (long long)m4.hblkhd);

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
	long long d = (long long)old.uordblks - (long long)m4.uordblks;
	check(d > -65536 && d < 65536 && old.hblks == (int)m4.hblks,
	      "mallinfo agrees with mallinfo2", (long long)old.uordblks, (long long)m4.uordblks);
	free(big);

	check_malloc_info();
	check_print_all();
	malloc_stats();
	return fails ? 1 : 0;
}
