/* SPDX-License-Identifier: MIT */
/*
 * debugobjects.c - workload 6 (docs/benchmarks.md, seed 002): debug-objects churn.
 *
 * Several threads each track a burst of objects (init + activate), then end
 * them (deactivate + destroy + free), over and over: the pattern of timers
 * and work items in a busy program.  What is measured is the tracker's
 * record pool: how many records it takes from and gives back to its backing
 * Sheaf cache, and the time per tracked object life cycle (5 hook calls),
 * with the batched pool (per-thread pools, a global stack of batches, frees
 * throttled by an EWMA of use) against the one-record-at-a-time pool.
 *
 * The pool is chosen once per process, so every window is a fresh child
 * process (`--child=debugobjects:<pool>`); the two pools alternate, the
 * first one rotating every round, and the headline is the median over the
 * rounds.  A window starts with an empty pool in both modes, so its counts
 * include the initial fill.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "workloads.h"
#include "sheaf_debug.h"

#define DO_THREADS 4
#define DO_BURST   1024

struct do_thread {
	pthread_t tid;
	unsigned bursts;
	long pad[8];
	struct do_obj {
		long payload[4];
	} objs[DO_BURST];
};

static const struct sheaf_debug_obj_descr do_descr = { .name = "bench_obj" };

static void *do_churn(void *arg)
{
	struct do_thread *t = arg;

	for (unsigned b = 0; b < t->bursts; b++) {
		for (unsigned i = 0; i < DO_BURST; i++) {
			sheaf_debug_object_init(&t->objs[i], &do_descr);
			sheaf_debug_object_activate(&t->objs[i], &do_descr);
		}
		for (unsigned i = 0; i < DO_BURST; i++) {
			sheaf_debug_object_deactivate(&t->objs[i], &do_descr);
			sheaf_debug_object_destroy(&t->objs[i], &do_descr);
			sheaf_debug_object_free(&t->objs[i], &do_descr);
		}
	}
	return NULL;
}

static void record1(struct bench_ctx *ctx, const char *topo, const char *pool, const char *unit,
		    double v)
{
	struct bench_stat
		st = { .n = 1, .min = v, .p10 = v, .p25 = v, .med = v, .p75 = v, .max = v };

	bench_record(ctx, "debugobjects", "raw", topo, pool, unit, BH_VALUE, &st);
}

static int do_child(struct bench_ctx *ctx, const char *arg)
{
	enum sheaf_debug_pool_mode m;
	struct do_thread *t;
	struct sheaf_debug_objects_stats st = { .size = sizeof(st) };
	unsigned bursts = ctx->quick ? 60 : 1500;
	uint64_t t0, t1;

	if (!strcmp(arg, "single"))
		m = SHEAF_DEBUG_POOL_SINGLE;
	else if (!strcmp(arg, "batched"))
		m = SHEAF_DEBUG_POOL_BATCHED;
	else
		return 2;
	if (sheaf_debug_objects_set_pool(m))
		return 3;
	t = calloc(DO_THREADS, sizeof(*t));
	if (!t)
		return 1;
	t0 = bench_now_ns();
	for (int i = 0; i < DO_THREADS; i++) {
		t[i].bursts = bursts;
		if (pthread_create(&t[i].tid, NULL, do_churn, &t[i]))
			return 1;
	}
	for (int i = 0; i < DO_THREADS; i++)
		pthread_join(t[i].tid, NULL);
	t1 = bench_now_ns();
	if (sheaf_debug_objects_stats_get(&st) || st.warnings)
		return 4;
	double objs = (double)DO_THREADS * bursts * DO_BURST;
	record1(ctx, "time", arg, "ns/obj", (double)(t1 - t0) / objs);
	record1(ctx, "allocs", arg, "records", (double)st.cache_allocs);
	record1(ctx, "frees", arg, "records", (double)st.cache_frees);
	record1(ctx, "window", arg, "ms", (double)(t1 - t0) / 1e6);
	free(t);
	return 0;
}

#define DO_MAX_ROUNDS 16
static const char *const do_pools[2] = { "single", "batched" };
static const char *const do_topos[4] = { "time", "allocs", "frees", "window" };

static void do_run(struct bench_ctx *ctx)
{
	int rounds = ctx->quick ? 3 : 9;
	double v[2][4][DO_MAX_ROUNDS];
	int got[2] = { 0, 0 };

	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < 2; k++) {
			int p = (r + k) % 2; /* the first pool rotates every round */
			int n0 = ctx->nres;
			const struct bench_result *res[4];
			bool ok = true;

			bench_progress(ctx, "debugobjects: round %d/%d, %s pool", r + 1, rounds,
				       do_pools[p]);
			if (bench_spawn_child(ctx, "debugobjects", do_pools[p], NULL))
				ok = false;
			for (int q = 0; q < 4 && ok; q++) {
				res[q] = bench_find(ctx, "debugobjects", "raw", do_topos[q],
						    do_pools[p]);
				ok = res[q] && res[q] - ctx->res >= n0;
			}
			if (ok) {
				for (int q = 0; q < 4; q++)
					v[p][q][got[p]] = res[q]->st.med;
				got[p]++;
			}
			/* The per-window records are folded into the medians below. */
			ctx->nres = n0;
		}
	}
	bench_progress_done(ctx);

	char variant[40];
	struct bench_stat st[2][4];

	snprintf(variant, sizeof(variant), "%dthr-x-%d", DO_THREADS, DO_BURST);
	for (int p = 0; p < 2; p++) {
		for (int q = 0; q < 4 && got[p]; q++) {
			static const char *const units[4] = { "ns/obj", "records", "records",
							      "ms" };

			bench_stat_compute(v[p][q], got[p], &st[p][q]);
			bench_record(ctx, "debugobjects", variant, do_topos[q], do_pools[p],
				     units[q], BH_MEDIAN, &st[p][q]);
		}
	}
	if (!got[0] || !got[1]) {
		bench_target(ctx, "debugobjects", -1, "batched pool vs one-at-a-time",
			     "not measured (a child failed)");
		return;
	}
	double a_red = 1 - st[1][1].med / st[0][1].med;
	double f_red = st[0][2].med > 0 ? 1 - st[1][2].med / st[0][2].med : NAN;

	bench_target(ctx, "debugobjects", a_red >= 0.55,
		     "batched pool: >= 55% fewer backing-cache allocations than one-at-a-time",
		     "%.0f vs %.0f records: %.1f%% fewer (median of %d rounds)", st[1][1].med,
		     st[0][1].med, 100 * a_red, got[1]);
	bench_target(ctx, "debugobjects", isnan(f_red) ? -1 : f_red >= 0.64,
		     "batched pool: >= 64% fewer backing-cache frees than one-at-a-time",
		     "%.0f vs %.0f records: %.1f%% fewer (median of %d rounds)", st[1][2].med,
		     st[0][2].med, 100 * f_red, got[1]);
	bench_target(ctx, "debugobjects", st[1][0].med <= st[0][0].med,
		     "batched pool: throughput not lower than one-at-a-time",
		     "%.1f vs %.1f ns per object life cycle (median; min %.1f vs %.1f)",
		     st[1][0].med, st[0][0].med, st[1][0].min, st[0][0].min);
	bench_note(ctx, "debugobjects",
		   "one-at-a-time pool (SHEAF_DEBUG_OBJECTS_POOL=single): one global list under "
		   "one lock, records moved singly, refilled by any thread below 256, records "
		   "beyond 1024 freed at once");
}

static const struct bench_workload wl_debugobjects = {
	.name = "debugobjects",
	.title = "6. Debug-objects churn (seed 002)",
	.order = 45,
	.about = "4 threads each track bursts of 1,024 objects (init + activate), then end them "
		 "(deactivate + destroy + free), repeatedly; each window is a fresh child process "
		 "with one record pool, the two pools alternating. Counts are records taken from "
		 "and given back to the tracker's backing Sheaf cache per window; time is ns per "
		 "object life cycle (5 hook calls) over all threads. Headline: median over rounds.",
	.run = do_run,
	.child = do_child,
};
BENCH_REGISTER(wl_debugobjects)
