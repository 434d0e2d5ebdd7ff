/* SPDX-License-Identifier: MIT */
/*
 * bulk.c - the bulk workload (issue 18, docs/benchmarks.md): one thread on
 * bench_cpu[0] (the EAL main lcore, so DPDK's per-lcore cache is in play)
 * allocates a batch of 8, 32, 128 or 512 objects in one call, writes one word in
 * each, and frees the batch in one call: sheaf_cache_alloc_bulk/_free_bulk against
 * rte_mempool_get_bulk/put_bulk; the mallocs, which have no bulk call, allocate
 * and free the batch one object at a time.  Unit: ns per object (one alloc + one
 * free).
 */
#include <math.h>
#include <stdlib.h>

#include "workloads.h"

#define BULK_MAX 512

struct bulk_state {
	unsigned batch;
	void *v[BULK_MAX];
};

static double bulk_window(void *state, struct bench_pool *p, uint64_t n)
{
	struct bulk_state *s = state;
	unsigned b = s->batch;
	uint64_t t0, t1;

	t0 = bench_now_ns();
	for (uint64_t i = 0; i < n; i += b) {
		if (__builtin_expect(bench_alloc_bulk(p, s->v, b) != 0, 0))
			return -1;
		for (unsigned j = 0; j < b; j++)
			*(volatile uint64_t *)s->v[j] = j;
		bench_free_bulk(p, s->v, b);
	}
	t1 = bench_now_ns();
	return (double)(t1 - t0) / (double)n;
}

/* Issue 18, "done when" 1: the object API's bulk calls at most 1.0x DPDK's mempool per
 * object for batches of 32 and 128; reported for every batch. */
static void bulk_target(struct bench_ctx *ctx, const char *variant)
{
	double sc = bench_headline(bench_find(ctx, "bulk", variant, "real", "sheaf"));
	double dp = bench_headline(bench_find(ctx, "bulk", variant, "real", "dpdk-mempool"));
	char text[160];

	snprintf(text, sizeof(text), "bulk %s: sheaf cache API <= 1.0x DPDK mempool", variant);
	if (isnan(dp) || isnan(sc))
		bench_target(ctx, "bulk", -1, text, "not measured");
	else
		bench_target(ctx, "bulk", sc <= dp, text,
			     "%.2f ns vs dpdk-mempool %.2f ns: %.2fx (median)", sc, dp, sc / dp);
}

static void bulk_run(struct bench_ctx *ctx)
{
	static const unsigned batches_full[] = { 8, 32, 128, 512 }, batches_quick[] = { 32 };
	static const size_t sizes_full[] = { 64, 256 }, sizes_quick[] = { 64 };
	const unsigned *batches = ctx->quick ? batches_quick : batches_full;
	const size_t *sizes = ctx->quick ? sizes_quick : sizes_full;
	int nbatches = ctx->quick ? 1 : 4, nsizes = ctx->quick ? 1 : 2;
	struct bulk_state *s = malloc(sizeof(*s));

	if (!s)
		return;
	for (int z = 0; z < nsizes; z++) {
		for (int b = 0; b < nbatches; b++) {
			char variant[40];
			struct bench_phase ph = {
				.workload = "bulk",
				.variant = variant,
				.topo = "real",
				.unit = "ns/object",
				.head = BH_MEDIAN,
				/* With the nochecks copies: how much of the
				 * difference to DPDK is the free checks, which
				 * DPDK does not make (issue 18, docs/benchmarks.md). */
				.apis = BENCH_API_MALLOC | BENCH_API_CACHE | BENCH_API_NOCHECKS,
				.size = sizes[z],
				.max_live = batches[b],
				.granule = batches[b],
				/* Short windows, as in the fast-path workload: most 5-ms
				 * windows of a shared machine see no preemption. */
				.reps = ctx->quick ? ctx->reps : 31,
				.window_ms = ctx->quick ? 0 : 5,
				.fn = bulk_window,
				.state = s,
				.needs_bulk = true,
			};

			snprintf(variant, sizeof(variant), "bulk%u/%zu", batches[b], sizes[z]);
			s->batch = batches[b];
			bench_phase_run(ctx, &ph);
			bulk_target(ctx, variant);
		}
	}
	free(s);
}

static const struct bench_workload wl_bulk = {
	.name = "bulk",
	.title = "1b. Bulk (one thread)",
	.order = 15,
	.about = "One thread pinned to CPU 0 allocates a batch of 8, 32, 128 or 512 objects in "
		 "one call (sheaf_cache_alloc_bulk, rte_mempool_get_bulk; the mallocs one object "
		 "at a time), writes one word in each and frees the batch in one call. Unit: ns "
		 "per object (one alloc + one free). Headline: median over 31 interleaved 5-ms "
		 "windows.",
	.run = bulk_run,
};
BENCH_REGISTER(wl_bulk)
