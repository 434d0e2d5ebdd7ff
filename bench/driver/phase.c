/* SPDX-License-Identifier: MIT */
/*
 * phase.c - interleaved timing windows: every contender of a phase is warmed up,
 * calibrated to the window length, then run in alternating windows; windows in
 * which a thread of the workload was preempted are marked disturbed.  Progress
 * lines on stderr.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "driver.h"

/* ---- progress ------------------------------------------------------------------ */

static uint64_t progress_last;
static bool progress_open;

void bench_progress(struct bench_ctx *ctx, const char *fmt, ...)
{
	static int tty = -1;
	uint64_t now = bench_now_ns(), el = (now - ctx->t_start) / 1000000000u;
	char line[256];
	va_list ap;

	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (tty) {
		/* Redraw at most ten times a second. */
		if (now - progress_last < 100000000u && progress_open)
			return;
		progress_last = now;
		fprintf(stderr, "\r\033[K[%02u:%02u]%s %s", (unsigned)(el / 60),
			(unsigned)(el % 60), ctx->child ? " (child)" : "", line);
		progress_open = true;
	} else {
		/* A log, not a display: one line every few seconds. */
		if (now - progress_last < 3000000000u && progress_last)
			return;
		progress_last = now;
		fprintf(stderr, "[%02u:%02u]%s %s\n", (unsigned)(el / 60), (unsigned)(el % 60),
			ctx->child ? " (child)" : "", line);
	}
	fflush(stderr);
}

void bench_progress_done(struct bench_ctx *ctx)
{
	(void)ctx;
	if (progress_open) {
		fputc('\n', stderr);
		progress_open = false;
	}
}

/* ---- disturbance -------------------------------------------------------------- */

/* Involuntary context switches of the workload's threads, summed: pair
 * threads add theirs when they finish; the phase adds the main thread's. */
_Atomic unsigned long bench_pair_preempted;

unsigned long bench_thread_preempted(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) ? 0 : (unsigned long)ru.ru_nivcsw;
}

/* ---- phases ----------------------------------------------------------------- */

#define PHASE_MAX 24 /* contenders in one phase (bench_allocs has 16) */

static bool in_list(const char *const *l, const char *name)
{
	if (!l)
		return true;
	for (; *l; l++)
		if (!strcmp(*l, name))
			return true;
	return false;
}

static uint64_t round_up(uint64_t n, uint64_t g)
{
	return (n + g - 1) / g * g;
}

bool bench_is_prev_ratio(const struct bench_result *r)
{
	return !strncmp(r->contender, BENCH_PREV_RATIO, sizeof(BENCH_PREV_RATIO) - 1);
}

/* For each previous-revision contender of the phase whose current counterpart ran
 * too: the ratio current / previous of every round's two windows, over the rounds
 * in which neither window was disturbed when at least 3 and a third of the rounds
 * are such (the rule of the figures themselves), else over every round. */
static void prev_ratios(struct bench_ctx *ctx, const struct bench_phase *ph,
			const struct bench_pool *pools, int np, const bool *ok, double *const *v,
			bool *const *dist)
{
	for (int p = 0; p < np; p++) {
		const char *cur = pools[p].a->prev_of;
		int c = -1;

		for (int i = 0; cur && i < np; i++)
			if (!strcmp(pools[i].a->name, cur))
				c = i;
		if (c < 0 || !ok[p] || !ok[c])
			continue;
		double *r = malloc((size_t)ph->reps * sizeof(double));
		int n = 0, clean = 0;
		if (!r)
			continue;
		for (int k = 0; k < ph->reps; k++)
			clean += !dist[p][k] && !dist[c][k] && v[p][k] > 0;
		bool only_clean = clean >= 3 && 3 * clean >= ph->reps;
		for (int k = 0; k < ph->reps; k++)
			if (v[p][k] > 0 && (!only_clean || (!dist[p][k] && !dist[c][k])))
				r[n++] = v[c][k] / v[p][k];
		struct bench_stat st;
		char name[48];
		bench_stat_compute(r, n, &st);
		st.dropped = only_clean ? ph->reps - n : 0;
		st.disturbed = ph->reps - clean;
		snprintf(name, sizeof(name), "%s%s", BENCH_PREV_RATIO, cur);
		bench_record(ctx, ph->workload, ph->variant, ph->topo, name, "ratio", BH_MEDIAN,
			     &st);
		free(r);
	}
}

void bench_phase_run(struct bench_ctx *ctx, const struct bench_phase *ph)
{
	struct bench_pool pools[PHASE_MAX];
	uint64_t n[PHASE_MAX];
	double *v[PHASE_MAX];
	bool *dist[PHASE_MAX];
	bool ok[PHASE_MAX];
	double window_ns = (ph->window_ms > 0 ? ph->window_ms : ctx->window_ms) * 1e6;
	uint64_t g = ph->granule ? ph->granule : 1;
	int np = 0;
	char why[256];

	for (int i = 0; i < bench_nallocs && np < PHASE_MAX; i++) {
		const struct bench_alloc *a = &bench_allocs[i];

		if (!a->available)
			continue;
		if (a->kind == BK_FLOOR ? !ph->with_floor : !(a->apis & ph->apis))
			continue;
		if (!in_list(ph->only_allocs, a->name) || !bench_alloc_selected(ctx, a->name))
			continue;
		if (ph->needs_bulk && a->kind == BK_SHEAF && !a->c_alloc_bulk) {
			bench_note(ctx, ph->workload,
				   "%s %s: %s skipped: its library has no "
				   "sheaf_cache_alloc_bulk/free_bulk",
				   ph->variant, ph->topo, a->name);
			continue;
		}
		if (bench_pool_open(&pools[np], a, ph->size, ph->max_live, why, sizeof(why))) {
			bench_note(ctx, ph->workload, "%s %s (%s): %s skipped: %s", ph->variant,
				   ph->topo, ph->unit, a->name, why);
			continue;
		}
		np++;
	}

	/* Calibrate: grow n until a window lasts a quarter of the target, then
	 * scale.  The amount of work is then fixed for every window.  One granule
	 * is run first and thrown away: a first run pays for faulting in memory
	 * (a fresh cache's slabs, a peer's arenas), and calibrating on it gave
	 * that contender windows ten times shorter than the others', so its
	 * figure carried ten times the per-window cold start (docs/benchmarks.md,
	 * batch10k/256). */
	for (int i = 0; i < np; i++) {
		uint64_t m = g;
		double ns = -1;

		ok[i] = true;
		v[i] = NULL;
		dist[i] = NULL;
		bench_progress(ctx, "%s %s %s: warming up %s", ph->workload, ph->variant, ph->topo,
			       pools[i].a->name);
		(void)ph->fn(ph->state, &pools[i], g);
		for (;;) {
			bench_progress(ctx, "%s %s %s: calibrating %s", ph->workload, ph->variant,
				       ph->topo, pools[i].a->name);
			ns = ph->fn(ph->state, &pools[i], m);
			if (ns < 0 || ns * (double)m >= window_ns / 4 || m >= (1ull << 34))
				break;
			m *= 4;
		}
		if (ns < 0) {
			ok[i] = false;
			bench_note(ctx, ph->workload, "%s %s: %s failed (allocation returned NULL)",
				   ph->variant, ph->topo, pools[i].a->name);
			continue;
		}
		if (ns <= 0)
			ns = 0.01;
		n[i] = round_up((uint64_t)(window_ns / ns) + 1, g);
		v[i] = calloc((size_t)ph->reps, sizeof(double));
		dist[i] = calloc((size_t)ph->reps, sizeof(bool));
		if (!v[i] || !dist[i])
			ok[i] = false;
	}

	/* Interleave: round r starts with contender r mod np. */
	for (int r = 0; r < ph->reps; r++) {
		for (int k = 0; k < np; k++) {
			int i = (r + k) % np;

			if (!ok[i])
				continue;
			bench_progress(ctx, "%s %s %s: window %d/%d %s", ph->workload, ph->variant,
				       ph->topo, r + 1, ph->reps, pools[i].a->name);
			unsigned long pre =
				bench_thread_preempted() + atomic_load(&bench_pair_preempted);

			v[i][r] = ph->fn(ph->state, &pools[i], n[i]);
			dist[i][r] =
				bench_thread_preempted() + atomic_load(&bench_pair_preempted) !=
				pre;
			if (v[i][r] < 0) {
				ok[i] = false;
				bench_note(ctx, ph->workload, "%s %s: %s failed in window %d",
					   ph->variant, ph->topo, pools[i].a->name, r + 1);
			}
		}
	}

	prev_ratios(ctx, ph, pools, np, ok, v, dist);
	for (int i = 0; i < np; i++) {
		if (ok[i]) {
			struct bench_stat st;
			double *use = malloc((size_t)ph->reps * sizeof(double));
			int clean = 0;

			/* Keep the undisturbed windows when there are enough of
			 * them: a third of the windows, and at least 3. */
			for (int r = 0; use && r < ph->reps; r++)
				if (!dist[i][r])
					use[clean++] = v[i][r];
			if (use && clean >= 3 && 3 * clean >= ph->reps) {
				bench_stat_compute(use, clean, &st);
				st.dropped = ph->reps - clean;
			} else {
				/* Too few clean windows: keep them all, and say so
				 * (report.c counts these rows). */
				bench_stat_compute(v[i], ph->reps, &st);
				st.dropped = 0;
			}
			st.disturbed = ph->reps - clean;
			free(use);
			bench_record(ctx, ph->workload, ph->variant, ph->topo, pools[i].a->name,
				     ph->unit, ph->head, &st);
		}
		free(v[i]);
		free(dist[i]);
		if (ok[i] && pools[i].kind == BK_SHEAF) {
			char cells[512];

			if (!bench_pool_profile(&pools[i], cells, sizeof(cells)))
				bench_profile(ctx, ph->workload, ph->variant, ph->topo,
					      pools[i].a->name, cells);
		}
		if (ctx->profile && pools[i].kind == BK_SHEAF) {
			char h[200];

			snprintf(h, sizeof(h), "%s %s %s: %s", ph->workload, ph->variant, ph->topo,
				 pools[i].a->name);
			bench_pool_dump_stats(&pools[i], ctx->profile, h);
		}
		bench_pool_close(&pools[i]);
	}
}
