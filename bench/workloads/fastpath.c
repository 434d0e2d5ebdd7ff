/* SPDX-License-Identifier: MIT */
/*
 * fastpath.c - workload 1 (docs/benchmarks.md): the single-thread fast path.
 *
 * One thread on bench_cpu[0] (the EAL main lcore, so DPDK's per-lcore cache
 * is in play) allocates a batch of objects, writes one word in each, and frees
 * them in allocation order.  Batches: 1 (an alloc+free pair), 100 (the
 * sheaves' and the thread caches' working range) and 10,000 (beyond every
 * per-CPU cache: refills and flushes through the middle layers).  The unit is
 * one object: ns per alloc+free pair.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "workloads.h"

struct fp_state {
	unsigned batch;
	void **v;
};

static double fp_window(void *state, struct bench_pool *p, uint64_t n)
{
	struct fp_state *s = state;
	unsigned b = s->batch;
	uint64_t t0, t1;

	t0 = bench_now_ns();
	for (uint64_t i = 0; i < n; i += b) {
		for (unsigned j = 0; j < b; j++) {
			void *o = bench_alloc(p);

			if (__builtin_expect(!o, 0))
				return -1;
			*(volatile uint64_t *)o = j;
			s->v[j] = o;
		}
		for (unsigned j = 0; j < b; j++)
			bench_free(p, s->v[j]);
	}
	t1 = bench_now_ns();
	return (double)(t1 - t0) / (double)n;
}

static void fp_target(struct bench_ctx *ctx, const char *variant)
{
	const char *who, *dwho;
	double best = bench_best_peer(ctx, "fastpath", variant, "real", BENCH_API_MALLOC, &who);
	double sm = bench_headline(bench_find(ctx, "fastpath", variant, "real", "sheaf-malloc"));
	double sc = bench_headline(bench_find(ctx, "fastpath", variant, "real", "sheaf"));
	double dp = bench_headline(bench_find(ctx, "fastpath", variant, "real", "dpdk-mempool"));
	char text[160];

	snprintf(text, sizeof(text), "fast path %s: sheaf-malloc <= 1.0x the best malloc", variant);
	if (isnan(best) || isnan(sm))
		bench_target(ctx, "fastpath", -1, text,
			     "not measured (sheaf-malloc %s, best peer %s)",
			     isnan(sm) ? "absent" : "ok", isnan(best) ? "absent" : who);
	else
		bench_target(ctx, "fastpath", sm <= best, text,
			     "%.2f ns vs %s %.2f ns: %.2fx (median)", sm, who, best, sm / best);
	snprintf(text, sizeof(text), "fast path %s: sheaf cache API <= 1.0x the best malloc",
		 variant);
	if (isnan(best) || isnan(sc))
		bench_target(ctx, "fastpath", -1, text, "not measured");
	else
		bench_target(ctx, "fastpath", sc <= best, text,
			     "%.2f ns vs %s %.2f ns: %.2fx (median)", sc, who, best, sc / best);
	snprintf(text, sizeof(text), "fast path %s: sheaf cache API <= 1.25x DPDK mempool",
		 variant);
	dwho = "dpdk-mempool";
	if (isnan(dp) || isnan(sc))
		bench_target(ctx, "fastpath", -1, text, "not measured");
	else
		bench_target(ctx, "fastpath", sc <= 1.25 * dp, text,
			     "%.2f ns vs %s %.2f ns: %.2fx (median)", sc, dwho, dp, sc / dp);
}

/* What the free checks cost (README "Errors"): Sheaf against the same library with
 * SHEAF_FREE_CHECKS=0, measured in the same run; issue 15 allows 5 %.  Both sides are
 * private copies loaded the same way (sheaf-checks, sheaf-nochecks): the linked library
 * and a copy differ by a few per cent with the same settings.  One run compares
 * one placement of each instance's memory, which alone moves the batch100/256 ratio by
 * up to 2x from one process to the next (docs/benchmarks.md, "The cost of the free
 * checks"): the target is judged by the median over many runs, tools/checks-cost.sh. */
static void fp_checks_target(struct bench_ctx *ctx, const char *variant)
{
	static const char *const pairs[][2] = { { "sheaf-checks", "sheaf-nochecks" },
						{ "sheaf-malloc-checks",
						  "sheaf-malloc-nochecks" } };
	for (int i = 0; i < 2; i++) {
		double on =
			bench_headline(bench_find(ctx, "fastpath", variant, "real", pairs[i][0]));
		double off =
			bench_headline(bench_find(ctx, "fastpath", variant, "real", pairs[i][1]));
		char text[160];
		snprintf(text, sizeof(text), "free checks %s: %s <= 1.05x %s", variant, pairs[i][0],
			 pairs[i][1]);
		if (isnan(on) || isnan(off))
			bench_target(ctx, "fastpath", -1, text, "not measured");
		else
			bench_target(ctx, "fastpath", on <= 1.05 * off, text,
				     "%.2f ns vs %.2f ns: %.3fx (median)", on, off, on / off);
	}
}

static void fp_run(struct bench_ctx *ctx)
{
	static const unsigned batches[] = { 1, 100, 10000 };
	static const char *const names[] = { "pair", "batch100", "batch10k" };
	static const size_t sizes_full[] = { 64, 256 }, sizes_quick[] = { 64 };
	const size_t *sizes = ctx->quick ? sizes_quick : sizes_full;
	int nsizes = ctx->quick ? 1 : 2;
	struct fp_state s;

	s.v = malloc(10000 * sizeof(void *));
	if (!s.v)
		return;
	for (int z = 0; z < nsizes; z++) {
		for (int b = 0; b < 3; b++) {
			char variant[40];
			struct bench_phase ph = {
				.workload = "fastpath",
				.variant = variant,
				.topo = "real",
				.unit = "ns/pair",
				.head = BH_MEDIAN,
				/* The checks' cost: the copies with the checks
				 * on and off, pair and batch100. */
				.apis = BENCH_API_MALLOC | BENCH_API_CACHE |
					(b < 2 ? BENCH_API_NOCHECKS | BENCH_API_CHECKSCOPY : 0),
				.size = sizes[z],
				.max_live = batches[b],
				.granule = batches[b],
				/* Short windows: on a shared machine most 20-ms
				 * windows see a preemption, 5-ms ones mostly not. */
				.reps = ctx->quick ? ctx->reps : 31,
				.window_ms = ctx->quick ? 0 : 5,
				.fn = fp_window,
				.state = &s,
			};

			snprintf(variant, sizeof(variant), "%s/%zu", names[b], sizes[z]);
			s.batch = batches[b];
			bench_phase_run(ctx, &ph);
			fp_target(ctx, variant);
			if (b < 2)
				fp_checks_target(ctx, variant);
		}
	}
	free(s.v);
}

static const struct bench_workload wl_fastpath = {
	.name = "fastpath",
	.title = "1. Fast path (one thread)",
	.order = 10,
	.about = "One thread pinned to CPU 0 allocates a batch of objects (1 = an alloc+free "
		 "pair, 100, 10,000), writes one word in each and frees them in order. "
		 "Unit: ns per object (one alloc + one free). Headline: median over 31 "
		 "interleaved 5-ms windows (those no other process preempted, when enough were).",
	.run = fp_run,
};
BENCH_REGISTER(wl_fastpath)
