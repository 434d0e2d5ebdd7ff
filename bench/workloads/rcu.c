/* SPDX-License-Identifier: MIT */
/*
 * rcu.c - workload 3 (docs/benchmarks.md, seed 000): many caches with free_rcu traffic,
 * and the latency of sheaf_cache_destroy() with the per-cache RCU barrier (D5)
 * against a global one.
 *
 * Each measurement is a fresh child process (`--child=rcu:<variant>:<mode>:<N>`),
 * because the barrier mode is an option read once per process:
 *  - N "other" caches (object sizes 32..256 B) get free_rcu traffic from a background
 *    thread at a fixed total rate (RCU_BG_RATE objects/s, in short read-side sections
 *    like a real updater/reader), round-robin, so every one of them has a partly filled
 *    rcu_free sheaf and the call_rcu worker always has callbacks to run;
 *  - K "victim" caches had traffic earlier (their full sheaves long done), and are then
 *    destroyed one after another; just before its destroy, each victim gets
 *      variant "partial": 16 more free_rcu objects (a partly filled rcu_free sheaf in
 *                         flight: the seed's case, a cache destroyed with deferred frees)
 *      variant "queued":  256 more (several full sheaves already submitted, with a
 *                         grace-period ticket on liburcu's call_rcu worker);
 *  - each sheaf_cache_destroy() is timed; the child reports the average and the total.
 * Modes (contenders):
 *  - "per-cache": Sheaf's default (D5);
 *  - "global":    SHEAF_RCU_BARRIER=global: the cache barrier flushes the rcu sheaves of
 *                 every cache, then rcu_barrier() -- kvfree_rcu_barrier(), seed 000's
 *                 "before";
 *  - "k7":        victims with SHEAF_KERNEL_COMPAT: this cache's sheaves, then the global
 *                 rcu_barrier() -- Linux 7.0's kvfree_rcu_barrier_on_cache() (K§4.4).
 * The modes alternate within a round (the first rotates), for several rounds per N; the
 * headline is the median over rounds of the per-child average.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "workloads.h"
#include "sheaf.h"

#define RCU_BG_RATE    100000 /* free_rcu per second on the other caches, whatever N */
#define RCU_MAX_ROUNDS 15

/* The library under test: the linked one, or the previous revision's copy (mode "prev",
 * contender sheaf-prev). */
struct rcu_lib {
	struct sheaf_cache *(*create)(const char *, size_t, const struct sheaf_cache_args *);
	void *(*alloc)(struct sheaf_cache *);
	void (*free_rcu)(struct sheaf_cache *, void *);
	void (*destroy)(struct sheaf_cache *);
};

struct rcu_bg {
	const struct rcu_lib *lib;
	struct sheaf_cache **caches;
	int n;
	atomic_int stop;
	atomic_ullong ops;
};

/* Background traffic: alloc + free_rcu, round-robin over the other caches, paced. */
static void *rcu_bg_main(void *arg)
{
	struct rcu_bg *bg = arg;
	uint64_t t0 = bench_now_ns(), done = 0;
	int next = 0;

	urcu_memb_register_thread();
	while (!atomic_load_explicit(&bg->stop, memory_order_relaxed)) {
		uint64_t due = (bench_now_ns() - t0) * RCU_BG_RATE / 1000000000u;

		if (done >= due) {
			bench_sleep_ms(1);
			continue;
		}
		urcu_memb_read_lock();
		for (int k = 0; k < 8 && done < due; k++, done++) {
			struct sheaf_cache *c = bg->caches[next];
			void *o = bg->lib->alloc(c);

			if (o)
				bg->lib->free_rcu(c, o);
			next = next + 1 == bg->n ? 0 : next + 1;
		}
		urcu_memb_read_unlock();
	}
	atomic_store(&bg->ops, done);
	urcu_memb_unregister_thread();
	return NULL;
}

static void record1(struct bench_ctx *ctx, const char *variant, const char *topo, const char *mode,
		    double v)
{
	struct bench_stat
		st = { .n = 1, .min = v, .p10 = v, .p25 = v, .med = v, .p75 = v, .max = v };

	bench_record(ctx, "rcu", variant, topo, mode, "us", BH_VALUE, &st);
}

static int rcu_child(struct bench_ctx *ctx, const char *arg)
{
	char variant[16], mode[16];
	int n = 0, k = ctx->quick ? 8 : 32, extra;
	unsigned victim_flags = 0;
	struct rcu_bg bg;
	pthread_t bt;
	char topo[24];

	if (sscanf(arg, "%15[^:]:%15[^:]:%d", variant, mode, &n) != 3 || n < 1)
		return 2;
	struct rcu_lib lib = { sheaf_cache_create, sheaf_cache_alloc, sheaf_cache_free_rcu,
			       sheaf_cache_destroy };
	if (!strcmp(mode, "prev")) {
		/* The parent runs this mode only when the copy has these (rcu_run). */
		const struct bench_alloc *a = bench_alloc_find("sheaf-prev");

		if (!a || !a->available || !a->c_free_rcu)
			return 3;
		lib = (struct rcu_lib){ a->c_create, a->c_alloc, a->c_free_rcu, a->c_destroy };
	}
	extra = !strcmp(variant, "queued") ? 256 : 16;
	if (!strcmp(mode, "k7"))
		victim_flags = SHEAF_KERNEL_COMPAT;
	memset(&bg, 0, sizeof(bg));
	bg.lib = &lib;
	bg.n = n;
	bg.caches = calloc((size_t)n, sizeof(*bg.caches));
	struct sheaf_cache **victims = calloc((size_t)k, sizeof(*victims));
	void **objs = calloc((size_t)k * (size_t)extra, sizeof(void *));
	if (!bg.caches || !victims || !objs)
		return 1;
	for (int i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof(name), "rcu-other-%d", i);
		bg.caches[i] = lib.create(name, 32u << (i % 4), NULL);
		if (!bg.caches[i])
			return 1;
	}
	struct sheaf_cache_args va = { .flags = victim_flags };
	for (int i = 0; i < k; i++) {
		char name[32];

		snprintf(name, sizeof(name), "rcu-victim-%d", i);
		victims[i] = lib.create(name, 64u << (i % 3), &va);
		if (!victims[i])
			return 1;
		/* Earlier traffic: full sheaves through the worker, long done by the destroy. */
		for (int j = 0; j < 512; j++) {
			void *o = lib.alloc(victims[i]);

			if (!o)
				return 1;
			lib.free_rcu(victims[i], o);
		}
		for (int j = 0; j < extra; j++) {
			objs[(size_t)i * (size_t)extra + (size_t)j] = lib.alloc(victims[i]);
			if (!objs[(size_t)i * (size_t)extra + (size_t)j])
				return 1;
		}
	}
	if (pthread_create(&bt, NULL, rcu_bg_main, &bg))
		return 1;
	bench_sleep_ms(150); /* traffic established; the victims' own sheaves are done */

	double total = 0, mx = 0;
	for (int i = 0; i < k; i++) {
		for (int j = 0; j < extra; j++)
			lib.free_rcu(victims[i], objs[(size_t)i * (size_t)extra + (size_t)j]);
		uint64_t t0 = bench_now_ns();
		lib.destroy(victims[i]);
		double us = (double)(bench_now_ns() - t0) / 1e3;

		total += us;
		mx = us > mx ? us : mx;
		bench_sleep_ms(2);
	}
	atomic_store(&bg.stop, 1);
	pthread_join(bt, NULL);
	snprintf(topo, sizeof(topo), "N=%d", n);
	record1(ctx, "raw-avg", topo, mode, total / k);
	record1(ctx, "raw-total", topo, mode, total);
	record1(ctx, "raw-max", topo, mode, mx);
	record1(ctx, "raw-bgops", topo, mode, (double)atomic_load(&bg.ops));
	/* The other caches are left to process exit: destroying them one by one in the
	 * global modes would cost N rcu_barrier() calls (~10 ms each) per child. */
	free(bg.caches);
	free(victims);
	free(objs);
	return 0;
}

/* "prev": the per-cache mode (Sheaf's default) with the previous revision's library
 * (--prev-lib), recorded as contender sheaf-prev under the series of "per-cache", so the
 * report sets it against the current library ("Against the previous revision"). */
static const char *const rcu_modes[4] = { "per-cache", "global", "k7", "prev" };
static const char *const rcu_env_global[] = { "SHEAF_RCU_BARRIER=global", NULL };

static void rcu_run(struct bench_ctx *ctx)
{
	static const int ns_full[] = { 10, 100, 1000 }, ns_quick[] = { 10, 1000 };
	static const char *const variants[2] = { "partial", "queued" };
	const int *ns = ctx->quick ? ns_quick : ns_full;
	int nn = ctx->quick ? 2 : 3;
	/* The seed's case gets most rounds: its per-cache figure (~40 us) is the one the
	 * growth target compares, on a machine whose noise is of the same order. */
	int rounds_of[2] = { ctx->quick ? 3 : 15, ctx->quick ? 2 : 5 };
	int k = ctx->quick ? 8 : 32;
	double med[2][3][4]; /* variant, N, mode: median over rounds of the average, us */
	/* Per (variant, N, mode): the child's average, total and maximum, by round. */
	static double val[2][3][4][3][RCU_MAX_ROUNDS];
	int got[2][3][4];
	const struct bench_alloc *prev = bench_alloc_find("sheaf-prev");
	int nm = 3; /* modes run: the fourth, "prev", with a previous revision's library */

	memset(got, 0, sizeof(got));
	if (prev && prev->available && bench_alloc_selected(ctx, prev->name)) {
		if (prev->c_free_rcu)
			nm = 4;
		else
			bench_note(ctx, "rcu",
				   "sheaf-prev left out: its library has no sheaf_cache_free_rcu");
	}
	/* --quick (the CI smoke run) measures the seed's case only. */
	int nvar = ctx->quick ? 1 : 2;
	/* Every round runs every (N, mode) pair of a variant, N and mode both rotating, so
	 * that drifts of this shared, noisy machine hit all of them alike. */
	for (int v = 0; v < nvar; v++) {
		int rounds = rounds_of[v];

		for (int r = 0; r < rounds; r++) {
			for (int i = 0; i < nn; i++) {
				int ni = (r + i) % nn;
				char topo[24], arg[64];

				snprintf(topo, sizeof(topo), "N=%d", ns[ni]);
				for (int j = 0; j < nm; j++) {
					int m = (r + j) % nm;
					int n0 = ctx->nres;
					const struct bench_result *rr[3];
					static const char *const raw[3] = { "raw-avg", "raw-total",
									    "raw-max" };
					bool ok = true;

					bench_progress(ctx, "rcu %s: round %d/%d, N=%d, %s",
						       variants[v], r + 1, rounds, ns[ni],
						       rcu_modes[m]);
					snprintf(arg, sizeof(arg), "%s:%s:%d", variants[v],
						 rcu_modes[m], ns[ni]);
					if (bench_spawn_child(ctx, "rcu", arg,
							      m == 1 ? rcu_env_global : NULL))
						ok = false;
					for (int q = 0; q < 3 && ok; q++) {
						rr[q] = bench_find(ctx, "rcu", raw[q], topo,
								   rcu_modes[m]);
						ok = rr[q] && rr[q] - ctx->res >= n0;
					}
					if (ok) {
						for (int q = 0; q < 3; q++)
							val[v][ni][m][q][got[v][ni][m]] =
								rr[q]->st.med;
						got[v][ni][m]++;
					}
					/* The per-child records are folded into the medians below. */
					ctx->nres = n0;
				}
			}
		}
		/* Report rows: variant "partial N=10", series "<mode> avg|total|max", contender
		 * "sheaf" (the report's columns are allocators). */
		for (int ni = 0; ni < nn; ni++) {
			for (int m = 0; m < nm; m++) {
				static const char *const what[3] = { "avg", "total", "max" };
				char var[40], ser[24];

				med[v][ni][m] = NAN;
				if (!got[v][ni][m])
					continue;
				snprintf(var, sizeof(var), "%s N=%d", variants[v], ns[ni]);
				for (int q = 0; q < 3; q++) {
					struct bench_stat st;

					bench_stat_compute(val[v][ni][m][q], got[v][ni][m], &st);
					if (q == 0)
						med[v][ni][m] = st.med;
					snprintf(ser, sizeof(ser), "%s %s",
						 rcu_modes[m == 3 ? 0 : m], what[q]);
					bench_record(ctx, "rcu", var, ser,
						     m == 3 ? "sheaf-prev" : "sheaf", "us",
						     BH_MEDIAN, &st);
				}
			}
		}
	}
	bench_progress_done(ctx);

	/* Targets, on the seed's case ("partial"): per-cache vs global at every N, and the
	 * growth of the per-cache average from the fewest to the most other caches. */
	for (int ni = 0; ni < nn; ni++) {
		double pc = med[0][ni][0], gl = med[0][ni][1];
		char text[200];

		snprintf(
			text, sizeof(text),
			"destroy, %d other caches with traffic: per-cache barrier average >= 1.8x lower "
			"than the global one",
			ns[ni]);
		bench_target(
			ctx, "rcu", isnan(pc) || isnan(gl) ? -1 : gl >= 1.8 * pc, text,
			"%.0f us vs %.0f us: %.1fx (median over rounds of the average of %d destroys; "
			"Linux 7.0 mode %.0f us)",
			pc, gl, gl / pc, k, med[0][ni][2]);
	}
	double lo = med[0][0][0], hi = med[0][nn - 1][0];
	bench_target(
		ctx, "rcu", isnan(lo) || isnan(hi) ? -1 : hi < 1.10 * lo,
		"per-cache destroy average grows < 10% from 10 to 1,000 other caches with traffic",
		"%.1f us -> %.1f us (%+.1f%%)", lo, hi, 100 * (hi / lo - 1));
	for (int ni = 0; ni < nn && nvar > 1; ni++)
		bench_note(
			ctx, "rcu",
			"variant 'queued' (256 frees just before each destroy: full sheaves already "
			"submitted, a grace-period ticket in flight), N=%d: per-cache %.0f us, global "
			"%.0f us, Linux 7.0 mode %.0f us",
			ns[ni], med[1][ni][0], med[1][ni][1], med[1][ni][2]);
	bench_note(
		ctx, "rcu",
		"why the global modes cost ~10 ms: rcu_barrier() waits for liburcu's call_rcu "
		"worker, which sleeps 10 ms after each batch of callbacks; the per-cache barrier "
		"takes its cache's sheaves back and waits for one synchronize_rcu() instead "
		"(docs/rcu.md)");
}

static const struct bench_workload wl_rcu = {
	.name = "rcu",
	.title = "3. Many caches, RCU churn, destroy latency (seed 000)",
	.order = 30,
	.about =
		"A background thread keeps free_rcu traffic (100,000 objects/s, round-robin) on N "
		"other caches; then 32 caches (8 with --quick), each with deferred frees in flight "
		"(16 objects in its rcu_free sheaf; variant 'queued', not run with --quick: 256, "
		"so full sheaves are already submitted), are destroyed one by one and each "
		"sheaf_cache_destroy() is timed. Contenders are barrier modes: per-cache (D5 in "
		"docs/design.md, default), global (SHEAF_RCU_BARRIER=global: every cache's rcu sheaves "
		"flushed, then rcu_barrier(), as kvfree_rcu_barrier() before seed 000's fix) and "
		"k7 (SHEAF_KERNEL_COMPAT: this cache's sheaves, then rcu_barrier(), as Linux "
		"7.0). Each run is a fresh child process; every round runs every (N, mode) pair, "
		"both rotating. Rows: variant and N; series: mode and statistic (avg = average "
		"destroy latency of a run, total = sum over its destroys, max = its slowest "
		"destroy); value: median over rounds. With a previous revision's library "
		"(--prev-lib), a fourth mode runs the per-cache one with it (column sheaf-prev).",
	.run = rcu_run,
	.child = rcu_child,
};
BENCH_REGISTER(wl_rcu)
