/* SPDX-License-Identifier: MIT */
/*
 * memory.c - workload 4 (docs/benchmarks.md): peak RSS, and RSS one second after
 * the program has freed everything.
 *
 * RSS belongs to a process, so each (allocator, workload) pair runs in a fresh
 * child process of the driver (`--child=memory:<variant>:<allocator>`) that
 * loads only that allocator.  The child touches its own bookkeeping arrays
 * first, resets the peak (VmHWM, /proc/self/clear_refs "5") and takes the RSS
 * as its baseline; the figures are VmHWM - baseline after the workload, and
 * VmRSS - baseline one second after the last free (0.2 s with --quick).
 * Nobody is asked to trim: no malloc_trim, no sheaf_cache_shrink, no purge
 * call; Sheaf's caches stay alive (empty), as a program's would.
 *
 * Workloads: hold1M/64 (1M objects of 64 B live at once, then freed),
 * batch10k/256 (10,000 objects of 256 B allocated and freed, 100 times),
 * xcpu-burst64/256 (500,000 objects through the cross-CPU hand-off of xcpu.c)
 * and mix-wide (the malloc mix of mix.c, malloc contenders only).
 * DPDK's mempool is left out: its memory is a fixed pool sized at creation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "workloads.h"

struct mem_variant {
	const char *name;
	size_t size;
	unsigned apis;
	uint64_t count, quick_count; /* objects, or operations per thread for mix */
};

static const struct mem_variant mem_variants[] = {
	{ "hold1M/64", 64, BENCH_API_MALLOC | BENCH_API_CACHE, 1000000, 100000 },
	{ "batch10k/256", 256, BENCH_API_MALLOC | BENCH_API_CACHE, 100, 10 },
	{ "xcpu-burst64/256", 256, BENCH_API_MALLOC | BENCH_API_CACHE, 500000, 100000 },
	{ "mix-wide", 0, BENCH_API_MALLOC, 300000, 50000 },
};
#define MEM_NVARIANTS (sizeof(mem_variants) / sizeof(mem_variants[0]))

static const char *const mem_allocs[] = { "glibc",    "jemalloc",          "mimalloc",
					  "tcmalloc", "sheaf-malloc",      "sheaf",
					  "sheaf-k7", "sheaf-malloc-prev", "sheaf-prev",
					  NULL };

static void mem_run(struct bench_ctx *ctx)
{
	for (size_t v = 0; v < MEM_NVARIANTS; v++) {
		const struct mem_variant *mv = &mem_variants[v];

		for (const char *const *n = mem_allocs; *n; n++) {
			const struct bench_alloc *a = bench_alloc_find(*n);
			char arg[128];

			if (!a || !a->available || !(a->apis & mv->apis) ||
			    !bench_alloc_selected(ctx, a->name))
				continue;
			bench_progress(ctx, "memory %s: %s (child process)", mv->name, a->name);
			snprintf(arg, sizeof(arg), "%s:%s", mv->name, a->name);
			bench_spawn_child(ctx, "memory", arg, NULL);
		}
		for (int w = 0; w < 2; w++) {
			static const char *const who[] = { "sheaf-malloc", "sheaf" };
			double mi = bench_headline(
				bench_find(ctx, "memory", mv->name, "peak", "mimalloc"));
			double sh =
				bench_headline(bench_find(ctx, "memory", mv->name, "peak", who[w]));
			char text[160];

			if (!(mv->apis & BENCH_API_CACHE) && w == 1)
				continue;
			snprintf(text, sizeof(text), "peak RSS %s: %s <= 1.2x mimalloc's", mv->name,
				 who[w]);
			if (isnan(mi) || isnan(sh))
				bench_target(ctx, "memory", -1, text, "not measured (%s absent)",
					     isnan(sh) ? who[w] : "mimalloc");
			else
				bench_target(ctx, "memory", sh <= 1.2 * mi, text,
					     "%.0f KiB vs %.0f KiB: %.2fx", sh, mi,
					     mi > 0 ? sh / mi : INFINITY);
		}
	}
}

/* The workload proper; returns 0, or -1 when an allocation failed. */
static int mem_work(struct bench_ctx *ctx, const struct mem_variant *mv, struct bench_pool *p,
		    void **v, uint64_t count)
{
	if (!strcmp(mv->name, "hold1M/64")) {
		for (uint64_t i = 0; i < count; i++) {
			v[i] = bench_alloc(p);
			if (!v[i])
				return -1;
			*(uint64_t *)v[i] = i;
		}
		for (uint64_t i = 0; i < count; i++)
			bench_free(p, v[i]);
	} else if (!strcmp(mv->name, "batch10k/256")) {
		for (uint64_t r = 0; r < count; r++) {
			for (unsigned i = 0; i < 10000; i++) {
				v[i] = bench_alloc(p);
				if (!v[i])
					return -1;
				*(uint64_t *)v[i] = i;
			}
			for (unsigned i = 0; i < 10000; i++)
				bench_free(p, v[i]);
		}
	} else if (!strcmp(mv->name, "xcpu-burst64/256")) {
		struct bench_ring *ring = aligned_alloc(64, sizeof(*ring));
		double ns;

		if (!ring)
			return -1;
		ns = bench_xcpu_window(p, ring, count / 64 * 64, 64, 0);
		free(ring);
		if (ns < 0)
			return -1;
	} else if (!strcmp(mv->name, "mix-wide")) {
		if (bench_mix_window(p, count, true, 7, 0) < 0)
			return -1;
	}
	(void)ctx;
	return 0;
}

static int mem_child(struct bench_ctx *ctx, const char *arg)
{
	char vname[64];
	const char *colon = strrchr(arg, ':');
	const struct mem_variant *mv = NULL;
	const struct bench_alloc *a;
	struct bench_pool p;
	struct bench_stat st;
	long base, hwm, after;
	uint64_t count;
	size_t vbytes;
	char why[256];
	void **v;

	if (!colon || (size_t)(colon - arg) >= sizeof(vname))
		return 2;
	memcpy(vname, arg, (size_t)(colon - arg));
	vname[colon - arg] = 0;
	for (size_t i = 0; i < MEM_NVARIANTS; i++)
		if (!strcmp(mem_variants[i].name, vname))
			mv = &mem_variants[i];
	a = bench_alloc_find(colon + 1);
	if (!mv || !a)
		return 2;
	if (!a->available)
		return 3;
	count = ctx->quick ? mv->quick_count : mv->count;

	/* Our own bookkeeping is mapped and touched before the baseline. */
	vbytes = (strcmp(mv->name, "hold1M/64") ? 10000 : count) * sizeof(void *);
	v = mmap(NULL, vbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (v == MAP_FAILED)
		return 1;
	memset(v, 1, vbytes);
	if (bench_pool_open(&p, a, mv->size, 10000, why, sizeof(why))) {
		bench_note(ctx, "memory", "%s %s: %s", vname, a->name, why);
		return 1;
	}
	if (bench_hwm_reset())
		bench_note(ctx, "memory", "could not reset VmHWM: peak includes start-up");
	base = bench_rss_kib();
	if (mem_work(ctx, mv, &p, v, count)) {
		bench_note(ctx, "memory", "%s %s: allocation failed", vname, a->name);
		return 1;
	}
	hwm = bench_hwm_kib();
	bench_sleep_ms(ctx->quick ? 200 : 1000);
	after = bench_rss_kib();

	memset(&st, 0, sizeof(st));
	st.n = 1;
	st.min = st.p10 = st.p25 = st.med = st.p75 = st.max = (double)(hwm - base);
	bench_record(ctx, "memory", vname, "peak", a->name, "KiB", BH_VALUE, &st);
	st.min = st.p10 = st.p25 = st.med = st.p75 = st.max = (double)(after - base);
	bench_record(ctx, "memory", vname, ctx->quick ? "after-0.2s" : "after-1s", a->name, "KiB",
		     BH_VALUE, &st);
	bench_pool_close(&p);
	munmap(v, vbytes);
	return 0;
}

static const struct bench_workload wl_memory = {
	.name = "memory",
	.title = "4. Memory: peak RSS and RSS after everything is freed",
	.order = 40,
	.about = "Each allocator and workload runs in a fresh child process. Peak = VmHWM - "
		 "baseline RSS taken just before the workload; after = VmRSS - baseline one "
		 "second after the last free (0.2 s with --quick). No trim, purge or shrink "
		 "call is made for anyone; Sheaf's caches stay alive. hold1M/64: 1M objects "
		 "of 64 B live at once; batch10k/256: 10,000 x 256 B allocated and freed 100 "
		 "times; xcpu-burst64/256: 500,000 objects through the cross-CPU hand-off; "
		 "mix-wide: the malloc mix (malloc contenders only). DPDK's mempool is left "
		 "out (a fixed pool sized at creation). Unit: KiB.",
	.run = mem_run,
	.child = mem_child,
};
BENCH_REGISTER(wl_memory)
