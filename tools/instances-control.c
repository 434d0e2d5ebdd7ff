/* SPDX-License-Identifier: MIT */
/*
 * instances-control.c - the control for the free checks' benchmark (docs/benchmarks.md,
 * "The cost of the free checks", 2026-11-25): how much two instances of the same
 * libsheaf.so differ with the same settings, in one process and interleaved windows,
 * as sheaf-bench compares `sheaf-malloc` with `sheaf-malloc-nochecks`.
 *
 * It runs the fast-path workload (a batch of B allocations, one word written in each,
 * then B frees in order) on three instances: the linked library (its options from the
 * environment), and two private copies of it loaded like sheaf-bench's (copied to a new
 * name, dlopen RTLD_LOCAL | RTLD_DEEPBIND) with SHEAF_FREE_CHECKS set to A and B.
 * Windows alternate between the three; it prints each instance's median ns per pair,
 * the ratios, and the same ratios for the first and the second half of the windows (a
 * ratio that is stable within the process but changes from process to process is a
 * property of the instance, not of the code or of the time of the run).
 *
 * Build (from the source root, after the release preset):
 *   cc -O2 -Iinclude tools/instances-control.c -o /tmp/instances-control -ldl \
 *      -Lbuild/release -lsheaf -Wl,-rpath,$PWD/build/release
 * Run:  /tmp/instances-control SIZE BATCH PAIRS API A B
 *   e.g. /tmp/instances-control 256 100 500000 malloc 1 0   (API: malloc or cache)
 * Run it several times: each run is a new process.  Timings: on a quiet machine.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sheaf.h"
#include "sheaf_malloc.h"

struct inst {
	void *(*m_alloc)(size_t);
	void (*m_free)(void *);
	void *(*c_alloc)(struct sheaf_cache *);
	void (*c_free)(struct sheaf_cache *, void *);
	struct sheaf_cache *c;
};

static void *objs[10000];

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void *load_copy(const char *checks)
{
	Dl_info di;
	if (!dladdr((void *)sheaf_cache_create, &di) || !di.dli_fname)
		return NULL;
	char tmp[] = "/tmp/instances-control-XXXXXX";
	int out = mkstemp(tmp), in = open(di.dli_fname, O_RDONLY | O_CLOEXEC);
	char buf[1 << 16];
	ssize_t k;
	int ok = out >= 0 && in >= 0;
	while (ok && (k = read(in, buf, sizeof(buf))) > 0)
		ok = write(out, buf, (size_t)k) == k;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	void *h = ok ? dlopen(tmp, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) : NULL;
	if (out >= 0)
		unlink(tmp);
	int (*set)(const char *, const char *) =
		h ? (int (*)(const char *, const char *))dlsym(h, "sheaf_option_set") : NULL;
	if (!set || set("FREE_CHECKS", checks) != 0)
		return NULL;
	return h;
}

static double window(const struct inst *s, int malloc_api, size_t size, unsigned batch, long pairs)
{
	double t0 = now_ns();
	for (long i = 0; i < pairs; i += batch) {
		for (unsigned j = 0; j < batch; j++) {
			void *o = malloc_api ? s->m_alloc(size) : s->c_alloc(s->c);
			if (!o)
				return -1;
			*(volatile uint64_t *)o = j;
			objs[j] = o;
		}
		for (unsigned j = 0; j < batch; j++) {
			if (malloc_api)
				s->m_free(objs[j]);
			else
				s->c_free(s->c, objs[j]);
		}
	}
	return (now_ns() - t0) / (double)pairs;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s SIZE BATCH PAIRS malloc|cache A B\n", argv[0]);
		return 2;
	}
	size_t size = strtoul(argv[1], NULL, 0);
	unsigned batch = (unsigned)strtoul(argv[2], NULL, 0);
	long pairs = atol(argv[3]);
	int malloc_api = !strcmp(argv[4], "malloc");
	if (!size || size > 4096 || !batch || batch > 10000 || pairs < batch) {
		fprintf(stderr, "SIZE 1..4096, BATCH 1..10000, PAIRS >= BATCH\n");
		return 2;
	}
	cpu_set_t cs;
	CPU_ZERO(&cs);
	CPU_SET(0, &cs);
	sched_setaffinity(0, sizeof(cs), &cs);
	struct inst in[3] = { { sheaf_malloc, sheaf_free, sheaf_cache_alloc, sheaf_cache_free,
				NULL } };
	for (int k = 1; k < 3; k++) {
		void *h = load_copy(argv[4 + k]);
		if (!h) {
			fprintf(stderr, "cannot load a private copy with FREE_CHECKS=%s\n",
				argv[4 + k]);
			return 1;
		}
		in[k].m_alloc = (void *(*)(size_t))dlsym(h, "sheaf_malloc");
		in[k].m_free = (void (*)(void *))dlsym(h, "sheaf_free");
		in[k].c_alloc = (void *(*)(struct sheaf_cache *))dlsym(h, "sheaf_cache_alloc");
		in[k].c_free = (void (*)(struct sheaf_cache *, void *))dlsym(h, "sheaf_cache_free");
		struct sheaf_cache *(*create)(const char *, size_t,
					      const struct sheaf_cache_args *) =
			(struct sheaf_cache *
			 (*)(const char *, size_t, const struct sheaf_cache_args *))
				dlsym(h, "sheaf_cache_create");
		in[k].c = create("control", size, NULL);
	}
	in[0].c = sheaf_cache_create("control", size, NULL);
	enum {
		R = 62
	};
	double r[3][R], med[3], half[2][3];
	for (int k = 0; k < 3; k++)
		if (!in[k].c || window(&in[k], malloc_api, size, batch, pairs) < 0)
			return 1;
	for (int w = 0; w < R; w++)
		for (int j = 0; j < 3; j++) {
			int k = (w + j) % 3;
			r[k][w] = window(&in[k], malloc_api, size, batch, pairs);
		}
	for (int k = 0; k < 3; k++) {
		qsort(r[k], R / 2, sizeof(double), cmp_double);
		qsort(r[k] + R / 2, R / 2, sizeof(double), cmp_double);
		half[0][k] = r[k][R / 4];
		half[1][k] = r[k][R / 2 + R / 4];
		qsort(r[k], R, sizeof(double), cmp_double);
		med[k] = r[k][R / 2];
	}
	printf("linked %.3f  copy(%s) %.3f  copy(%s) %.3f ns/pair | copy(%s)/linked %.3f (halves %.3f %.3f) "
	       "copy(%s)/copy(%s) %.3f (halves %.3f %.3f)\n",
	       med[0], argv[5], med[1], argv[6], med[2], argv[5], med[1] / med[0],
	       half[0][1] / half[0][0], half[1][1] / half[1][0], argv[6], argv[5], med[2] / med[1],
	       half[0][2] / half[0][1], half[1][2] / half[1][1]);
	return 0;
}
