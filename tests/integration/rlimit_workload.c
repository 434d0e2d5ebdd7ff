/* SPDX-License-Identifier: MIT */
/*
 * rlimit_workload.c - the program of test_preload_rlimit.sh (issue 16, "Done when" 1):
 * run under `ulimit -v`, once with glibc's malloc and once under the preload.
 *
 *   1. start 8 threads, each of which allocates and frees a little, and keep them
 *      alive (their stacks hold address space while the rest runs);
 *   2. allocate blocks of mixed sizes until malloc returns NULL (it must set ENOMEM),
 *      writing into every block; the blocks are chained through their first word, so
 *      the program needs no memory of its own;
 *   3. let the threads finish, free every block, call malloc_trim(0), and start 8
 *      threads again (the address space must have come back).
 *
 * Prints "allocated BYTES blocks N threads T1 T2 enomem E" on stdout.  The sizes come
 * from a fixed pseudo-random sequence: 70 % of 16..256 bytes, 25 % of 257..4096 and
 * 5 % of 8 KiB..256 KiB (large blocks: extents under the preload).
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_barrier_t gate;

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100; i++) {
		void *p = malloc((size_t)(16 + i * 8));
		if (p)
			memset(p, i, 16);
		free(p);
	}
	pthread_barrier_wait(&gate); /* started */
	pthread_barrier_wait(&gate); /* the main thread has run out */
	return NULL;
}

static int start_threads(pthread_t *t)
{
	int n = 0;
	pthread_attr_t a;
	pthread_attr_init(&a);
	for (int i = 0; i < 8; i++)
		if (pthread_create(&t[n], &a, worker, NULL) == 0)
			n++;
	pthread_attr_destroy(&a);
	return n;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static size_t next_size(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	unsigned r = (unsigned)(rng % 100);
	uint64_t v = rng >> 20;
	if (r < 70)
		return 16 + v % 241;
	if (r < 95)
		return 257 + v % 3840;
	return 8192 + v % (256 * 1024 - 8192);
}

int main(void)
{
	pthread_t t[8];
	/* Round 1: 8 threads alive while the main thread allocates. */
	pthread_barrier_init(&gate, NULL, 9);
	int t1 = start_threads(t);
	if (t1 != 8) {
		printf("allocated 0 blocks 0 threads %d 0 enomem 0\n", t1);
		return 1;
	}
	pthread_barrier_wait(&gate);
	void *head = NULL;
	size_t total = 0, blocks = 0;
	int enomem = 0;
	for (;;) {
		size_t n = next_size();
		errno = 0;
		void **p = malloc(n);
		if (!p) {
			enomem = errno == ENOMEM;
			break;
		}
		memset(p, 0x5a, n < 64 ? n : 64);
		p[0] = head;
		head = p;
		total += n;
		blocks++;
	}
	pthread_barrier_wait(&gate);
	for (int i = 0; i < t1; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&gate);
	while (head) {
		void *next = *(void **)head;
		free(head);
		head = next;
	}
	malloc_trim(0);
	/* Round 2: the address space is back, threads start again. */
	pthread_barrier_init(&gate, NULL, 9);
	int t2 = start_threads(t);
	printf("allocated %zu blocks %zu threads %d %d enomem %d\n", total, blocks, t1, t2, enomem);
	if (t2 != 8)
		return 1; /* exit ends the threads waiting at the gate */
	pthread_barrier_wait(&gate);
	pthread_barrier_wait(&gate);
	for (int i = 0; i < t2; i++)
		pthread_join(t[i], NULL);
	return enomem ? 0 : 1;
}
