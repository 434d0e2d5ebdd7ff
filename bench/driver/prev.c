/* SPDX-License-Identifier: MIT */
/*
 * prev.c - the report's section "Against the previous revision" (issue 14): every
 * row in which a previous-revision contender (sheaf-prev, sheaf-malloc-prev; a
 * libsheaf.so of an earlier commit, contenders.c) was measured beside its current
 * counterpart, the ratio current / previous, and whether the current revision is
 * slower beyond noise.  The rule is in docs/benchmarks.md and in prev_rule[].
 *
 *  - Paired rows (the phases of fastpath, bulk, xcpu, mix): both contenders ran in
 *    the same phase, in alternating windows; phase.c recorded the ratio of each
 *    round's two windows (BENCH_PREV_RATIO).  The figure is the median of those
 *    ratios, the spread their p25..p75, and the row is slower beyond noise when
 *    median - 1 > max(p75 - p25, 2 %): the shift is larger than the middle half
 *    of the rounds' own scatter, and not below 2 %.
 *  - Unpaired rows (the child processes of memory, shapes and rcu: one figure, or a
 *    median of a few runs, per contender and process): the ratio of the two
 *    headlines; with a spread on both sides, slower beyond noise when the
 *    quartile ranges do not overlap (current p25 > previous p75) and the ratio is
 *    above 1.02; a single figure (RSS, page faults; a time run once with --quick)
 *    when the ratio is above 1.05 (RSS and faults: and the two differ by more than
 *    256 KiB or faults).
 */
#include <math.h>
#include <string.h>

#include "driver.h"

#define PREV_MIN_SHIFT    0.02 /* paired: below 2 % nothing is called a change */
#define PREV_SINGLE_SHIFT 0.05 /* unpaired single figures */
/* ... and a difference of at least this many units (KiB, page faults): less is
 * within the granularity of a slab, a sheaf of objects or a heap chunk. */
#define PREV_SINGLE_ABS 256.0

static const char prev_rule[] =
	"Noise rule. *Paired rows* (the two contenders in the same phase, windows "
	"alternating): the ratio of each round's two windows (current ÷ previous) is "
	"taken, over the rounds in which no window was preempted when enough were; the "
	"figure is their median, the spread their p25–p75, and a row is **slower beyond "
	"noise** when median − 1 > max(p75 − p25, 0.02) (faster beyond noise: 1 − median "
	"> the same). *Unpaired rows* (memory, shapes, rcu: child processes): "
	"the ratio of the two headlines; slower beyond noise when the current p25 is above "
	"the previous p75 and the ratio above 1.02, or, for a single figure (RSS, page "
	"faults; a time run once with --quick), when the ratio is above 1.05, and for RSS and faults "
	"also the two differ by more than 256 (KiB, faults): less is within the granularity "
	"of a slab, a sheaf or a heap chunk.";

enum prev_verdict {
	PV_NONE, /* not comparable (a figure missing or 0) */
	PV_WITHIN,
	PV_SLOWER,
	PV_FASTER,
};

struct prev_row {
	const struct bench_result *cur, *prev, *pair;
	double ratio, lo, hi; /* lo..hi: the spread, NAN when none */
	enum prev_verdict verdict;
};

static const struct bench_alloc *prev_alloc_of(const char *cur)
{
	for (int i = 0; i < bench_nallocs; i++)
		if (bench_allocs[i].prev_of && !strcmp(bench_allocs[i].prev_of, cur))
			return &bench_allocs[i];
	return NULL;
}

/* A workload of the suite?  The rounds that the shapes and xcpu workloads combine into
 * their own records (shapes-round, xcpu-rounds) are not compared a second time. */
static bool prev_workload_listed(const char *wl)
{
	for (int w = 0; w < bench_nworkloads; w++)
		if (!strcmp(bench_workloads[w]->name, wl))
			return true;
	return false;
}

/* Fill @row for the record @cur when a previous-revision figure exists beside it. */
static bool prev_row_get(const struct bench_ctx *ctx, const struct bench_result *cur,
			 struct prev_row *row)
{
	const struct bench_alloc *pa = prev_alloc_of(cur->contender);
	char name[48];

	memset(row, 0, sizeof(*row));
	if (!pa || bench_is_prev_ratio(cur) || !prev_workload_listed(cur->workload))
		return false;
	row->cur = cur;
	row->prev = bench_find(ctx, cur->workload, cur->variant, cur->topo, pa->name);
	if (!row->prev)
		return false;
	snprintf(name, sizeof(name), "%s%s", BENCH_PREV_RATIO, cur->contender);
	row->pair = bench_find(ctx, cur->workload, cur->variant, cur->topo, name);
	row->lo = row->hi = NAN;
	if (row->pair && row->pair->st.n > 0) {
		double iqr;

		row->ratio = row->pair->st.med;
		row->lo = row->pair->st.p25;
		row->hi = row->pair->st.p75;
		iqr = fmax(row->hi - row->lo, PREV_MIN_SHIFT);
		row->verdict = row->ratio - 1 > iqr ? PV_SLOWER :
			       1 - row->ratio > iqr ? PV_FASTER :
						      PV_WITHIN;
		return true;
	}
	double c = bench_headline(cur), p = bench_headline(row->prev);

	if (isnan(c) || isnan(p) || p <= 0) {
		row->ratio = c == 0 && p == 0 ? 1.0 : NAN;
		row->verdict = c == 0 && p == 0 ? PV_WITHIN : PV_NONE;
		return true;
	}
	row->ratio = c / p;
	if (cur->st.n > 1 && row->prev->st.n > 1) {
		if (row->prev->st.p25 > 0)
			row->hi = cur->st.p75 / row->prev->st.p25;
		if (row->prev->st.p75 > 0)
			row->lo = cur->st.p25 / row->prev->st.p75;
		row->verdict = cur->st.p25 > row->prev->st.p75 && row->ratio > 1 + PREV_MIN_SHIFT ?
				       PV_SLOWER :
			       cur->st.p75 < row->prev->st.p25 && row->ratio < 1 - PREV_MIN_SHIFT ?
				       PV_FASTER :
				       PV_WITHIN;
	} else {
		/* A count (BH_VALUE: KiB, faults) also needs the absolute floor; a
		 * time run once (--quick) only the ratio. */
		bool big = cur->head != BH_VALUE || fabs(c - p) > PREV_SINGLE_ABS;

		row->verdict = big && row->ratio > 1 + PREV_SINGLE_SHIFT ? PV_SLOWER :
			       big && row->ratio < 1 - PREV_SINGLE_SHIFT ? PV_FASTER :
									   PV_WITHIN;
	}
	return true;
}

void bench_prev_summary(const struct bench_ctx *ctx, int *rows, int *slower, int *faster)
{
	struct prev_row row;

	*rows = *slower = *faster = 0;
	for (int j = 0; j < ctx->nres; j++) {
		if (!prev_row_get(ctx, &ctx->res[j], &row))
			continue;
		++*rows;
		*slower += row.verdict == PV_SLOWER;
		*faster += row.verdict == PV_FASTER;
	}
}

static void fmt_ratio(char *b, size_t n, double v)
{
	if (isnan(v))
		snprintf(b, n, "–");
	else if (isinf(v))
		snprintf(b, n, "∞");
	else
		snprintf(b, n, "%.3f", v);
}

static void fmt_fig(char *b, size_t n, double v)
{
	if (isnan(v))
		snprintf(b, n, "–");
	else if (fabs(v) >= 100)
		snprintf(b, n, "%.0f", v);
	else
		snprintf(b, n, "%.3g", v);
}

static void prev_table_row(FILE *f, const struct prev_row *row)
{
	/* Times are slower or faster; RSS and faults (BH_VALUE) larger or smaller. */
	static const char *const verdict[2][4] = {
		{ "–", "within noise", "**SLOWER beyond noise**", "faster beyond noise" },
		{ "–", "within noise", "**LARGER beyond noise**", "smaller beyond noise" },
	};
	const struct bench_result *c = row->cur;
	char cf[32], pf[32], rf[32], lo[32], hi[32], used[48];

	fmt_fig(cf, sizeof(cf), bench_headline(c));
	fmt_fig(pf, sizeof(pf), bench_headline(row->prev));
	fmt_ratio(rf, sizeof(rf), row->ratio);
	fmt_ratio(lo, sizeof(lo), row->lo);
	fmt_ratio(hi, sizeof(hi), row->hi);
	if (row->pair)
		snprintf(used, sizeof(used), "%d paired", row->pair->st.n);
	else
		snprintf(used, sizeof(used), "%d vs %d (unpaired)", c->st.n, row->prev->st.n);
	fprintf(f, "| %s | %s | %s | %s | %s, %s | %s | %s | %s | %s%s%s | %s | %s |\n",
		c->workload, c->variant, c->topo, c->contender, c->unit, bench_head_name(c->head),
		cf, pf, rf, isnan(row->lo) ? "–" : lo, isnan(row->lo) ? "" : "–",
		isnan(row->lo) ? "" : hi, used, verdict[c->head == BH_VALUE][row->verdict]);
}

void bench_write_prev(FILE *f, const struct bench_ctx *ctx)
{
	const struct bench_alloc *sp = bench_alloc_find("sheaf-prev"),
				 *smp = bench_alloc_find("sheaf-malloc-prev");
	int rows, slower, faster;

	fprintf(f, "## Against the previous revision\n\n");
	if (!sp->available && !smp->available) {
		fprintf(f, "Not measured: %s.\n\n", sp->how);
		return;
	}
	bench_prev_summary(ctx, &rows, &slower, &faster);
	fprintf(f,
		"`sheaf-prev` and `sheaf-malloc-prev` are Sheaf's object-cache API and "
		"sheaf_malloc/sheaf_free of an earlier revision's libsheaf.so (`sheaf-prev`: "
		"%s; `sheaf-malloc-prev`: %s), run in the same process and the same phases as "
		"`sheaf` and `sheaf-malloc`. Compared: the fast path, bulk, cross-CPU (real and "
		"fake topology) and malloc-mix rows in alternating windows (paired); memory, "
		"the malloc program shapes and the RCU destroy latency (per-cache mode) in child "
		"processes (unpaired). Not compared: the debug-objects workload, which measures "
		"the linked library's debug-objects tracker rather than a contender; and no "
		"workload runs a program under LD_PRELOAD (the shapes call sheaf_malloc "
		"directly), so the previous libsheaf-malloc.so is not used.\n\n"
		"**%d rows compared: %d slower (or, for RSS and faults, larger) beyond noise, %d "
		"faster (smaller) beyond noise.**\n\n%s\n\n",
		sp->how, smp->how, rows, slower, faster, prev_rule);
	if (!rows) {
		fprintf(f, "No row had both figures.\n\n");
		return;
	}
	fprintf(f, "| workload | variant | series | contender | unit, headline | current | "
		   "previous | current ÷ previous | spread (p25–p75) | windows or runs | "
		   "verdict |\n|---|---|---|---|---|---:|---:|---:|---:|---|---|\n");
	for (int w = 0; w < bench_nworkloads; w++) {
		for (int j = 0; j < ctx->nres; j++) {
			struct prev_row row;

			if (strcmp(ctx->res[j].workload, bench_workloads[w]->name) ||
			    !prev_row_get(ctx, &ctx->res[j], &row))
				continue;
			prev_table_row(f, &row);
		}
	}
	fprintf(f, "\n");
}
