/* SPDX-License-Identifier: MIT */
/*
 * workload.c - a program for tests/integration/test_sheafinfo.sh to inspect: it
 * allocates and frees on command, so that sheafinfo's figures can be seen to move.
 *
 * Commands on stdin, one per line; each is answered with "ok" on stdout:
 *   a N   allocate N blocks of 100 bytes (kept)
 *   f     free every block kept
 *   s     (linked build) print the cache's statistics as the library sums them
 *         (sheaf_stats_print_json, one line) before "ok"
 *   q     quit
 * Built twice: sheafinfo-workload uses malloc (run it under the preload library),
 * sheafinfo-workload-linked (-DWORKLOAD_LINKED, linked with libsheaf.a) uses its
 * own cache "workload-100", and with SHEAF_TEST_CACHE_NAME set, also a cache of that
 * name holding 7 objects (a name sheafinfo must show whatever bytes it holds).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WORKLOAD_LINKED
#include <sheaf.h>
#include <sheaf_stats.h>
static struct sheaf_cache *cache;
#define ALLOC() sheaf_cache_alloc(cache)
#define FREE(p) sheaf_cache_free(cache, (p))
#else
#define ALLOC() malloc(100)
#define FREE(p) free(p)
#endif

#define MAX_BLOCKS (1u << 20) /* a bound: the test asks for far fewer */

int main(void)
{
	static void *blocks[MAX_BLOCKS];
	size_t n = 0;
	char line[64];
#ifdef WORKLOAD_LINKED
	cache = sheaf_cache_create("workload-100", 100, NULL);
	if (!cache) {
		perror("sheaf_cache_create");
		return 1;
	}
	const char *odd = getenv("SHEAF_TEST_CACHE_NAME");
	struct sheaf_cache *named = odd ? sheaf_cache_create(odd, 24, NULL) : NULL;
	for (int i = 0; named && i < 7; i++)
		if (!sheaf_cache_alloc(named))
			return 1;
#endif
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin)) {
		if (line[0] == 'a') {
			unsigned long k = strtoul(line + 1, NULL, 10);
			for (unsigned long i = 0; i < k && n < MAX_BLOCKS; i++) {
				void *p = ALLOC();
				if (!p) {
					fprintf(stderr, "workload: allocation failed\n");
					return 1;
				}
				memset(p, 0x5a, 100);
				blocks[n++] = p;
			}
		} else if (line[0] == 'f') {
			while (n)
				FREE(blocks[--n]);
		} else if (line[0] == 's') {
#ifdef WORKLOAD_LINKED
			sheaf_stats_print_json(cache, stdout);
#else
			printf("{}\n");
#endif
		} else if (line[0] == 'q') {
			break;
		}
		printf("ok\n");
	}
	while (n)
		FREE(blocks[--n]);
	return 0;
}
