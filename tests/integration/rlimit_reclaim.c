/* SPDX-License-Identifier: MIT */
/*
 * rlimit_reclaim.c - the program of test_preload_reclaim.sh: memory a program has
 * freed serves its next allocation under a limit at once, whatever Sheaf keeps for
 * reuse (free slab pages waiting for their decay, cached large extents) giving way
 * (malloc/malloc.c sheaf_malloc_reclaim).  One case per run, named by argv[1]:
 *
 *   small-then-large   (run under `ulimit -v`) count the 1 MiB blocks that fit, free
 *                      them; allocate and free 2 M blocks of 16 B; count again at once.
 *                      Prints "fresh A after B"; exit 0 when B >= A - 8.
 *   large-then-small   (no limit needed) allocate, write and free 200 blocks of 1 MiB;
 *                      take what the allocator keeps of them (mallinfo2's keepcost),
 *                      set RLIMIT_AS to the address space in use plus 16 MiB, and
 *                      allocate blocks of 100 B worth 8 MiB plus half of what is kept.
 *                      Prints "kept K KiB small N of W"; exit 0 when all were served.
 *   data-large-then-small (run under `ulimit -d`) the same without setting a limit:
 *                      RLIMIT_DATA counts the private mappings.
 *
 * Blocks are chained through their first word: the program needs no memory of its own
 * beyond a fixed array.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void *big[2000];

static int fill_mb(void)
{
	int k = 0;
	while (k < 2000 && (big[k] = malloc(1 << 20)) != NULL) {
		memset(big[k], 1, 4096);
		k++;
	}
	for (int i = 0; i < k; i++)
		free(big[i]);
	return k;
}

static long vm_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmSize:", 7) == 0)
			kib = atol(line + 7);
	fclose(f);
	return kib;
}

/* Allocate @n blocks of @size, then free them; returns how many were served. */
static long chain(long n, size_t size)
{
	void *head = NULL;
	long got = 0;
	for (; got < n; got++) {
		void **p = malloc(size);
		if (!p)
			break;
		p[0] = head;
		head = p;
	}
	while (head) {
		void *next = *(void **)head;
		free(head);
		head = next;
	}
	return got;
}

static int large_then_small(int set_limit)
{
	for (int i = 0; i < 200; i++) {
		big[i] = malloc(1 << 20);
		if (!big[i]) {
			printf("could not allocate the large blocks\n");
			return 2;
		}
		memset(big[i], 1, 1 << 20);
	}
	for (int i = 0; i < 200; i++)
		free(big[i]);
	/* What the allocator keeps of them (glibc: the top of its heap; Sheaf: the
	 * extent cache), still address space in use. */
	size_t keep = mallinfo2().keepcost;
	if (set_limit) {
		long kib = vm_kib();
		rlim_t lim = ((rlim_t)kib + 16 * 1024) * 1024;
		struct rlimit r = { lim, lim };
		if (kib < 0 || setrlimit(RLIMIT_AS, &r) != 0) {
			printf("could not set RLIMIT_AS\n");
			return 2;
		}
	}
	/* 16 MiB plus half of what is kept, in blocks of 100 B (128 with their slot):
	 * more than the limit leaves unless what is kept serves them. */
	long want = (long)((keep / 2 + (8u << 20)) / 128);
	long n = chain(want, 100);
	printf("kept %zu KiB small %ld of %ld\n", keep >> 10, n, want);
	return n == want ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 2 && strcmp(argv[1], "small-then-large") == 0) {
		int fresh = fill_mb();
		long small = chain(2L << 20, 16);
		int after = fill_mb();
		printf("fresh %d after %d (small %ld)\n", fresh, after, small);
		return fresh > 16 && small == 2L << 20 && after >= fresh - 8 ? 0 : 1;
	}
	if (argc == 2 && strcmp(argv[1], "large-then-small") == 0)
		return large_then_small(1);
	if (argc == 2 && strcmp(argv[1], "data-large-then-small") == 0)
		return large_then_small(0);
	fprintf(stderr, "usage: %s small-then-large|large-then-small|data-large-then-small\n",
		argv[0]);
	return 2;
}
