/* SPDX-License-Identifier: MIT */
/*
 * malloc-ops.c - the loop that tools/malloc-callgrind.sh counts: N repetitions of one
 * malloc shape through whatever malloc the process has (LD_PRELOAD picks it).
 *
 *   malloc-ops pair N      malloc(16..128) and free, N times
 *   malloc-ops calloc N    calloc(1, 16..128) and free
 *   malloc-ops realloc N   malloc(24), realloc to 100, realloc to 40, free
 *   malloc-ops batch N     100 mallocs of 16..128 B, then 100 frees, N times
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	static void *v[100];
	void *volatile sink = NULL;
	long n;

	if (argc != 3 || (n = atol(argv[2])) <= 0) {
		fprintf(stderr, "usage: malloc-ops pair|calloc|realloc|batch N\n");
		return 2;
	}
	if (!strcmp(argv[1], "pair")) {
		for (long i = 0; i < n; i++) {
			void *p = malloc(16 + (size_t)(i & 7) * 16);

			sink = p;
			free(p);
		}
	} else if (!strcmp(argv[1], "calloc")) {
		for (long i = 0; i < n; i++) {
			void *p = calloc(1, 16 + (size_t)(i & 7) * 16);

			sink = p;
			free(p);
		}
	} else if (!strcmp(argv[1], "realloc")) {
		for (long i = 0; i < n; i++) {
			void *p = malloc(24), *q;

			if (!p)
				return 1;
			q = realloc(p, 100);
			if (q)
				p = q;
			q = realloc(p, 40);
			if (q)
				p = q;
			sink = p;
			free(p);
		}
	} else if (!strcmp(argv[1], "batch")) {
		for (long i = 0; i < n; i++) {
			for (int j = 0; j < 100; j++)
				v[j] = malloc(16 + (size_t)(j & 7) * 16);
			for (int j = 0; j < 100; j++)
				free(v[j]);
		}
	} else {
		fprintf(stderr, "malloc-ops: unknown shape %s\n", argv[1]);
		return 2;
	}
	(void)sink;
	return 0;
}
