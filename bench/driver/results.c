/* SPDX-License-Identifier: MIT */
/*
 * results.c - the driver's result store: window statistics (min, quantiles, max),
 * records, targets, notes and profile rows that the report is written from, and
 * the --allocs selection.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* ---- statistics ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Linear interpolation between closest ranks. */
static double quantile(const double *s, int n, double q)
{
	double pos = q * (n - 1);
	int lo = (int)pos;

	if (lo + 1 >= n)
		return s[n - 1];
	return s[lo] + (pos - lo) * (s[lo + 1] - s[lo]);
}

void bench_stat_compute(double *v, int n, struct bench_stat *s)
{
	memset(s, 0, sizeof(*s));
	s->n = n;
	if (n <= 0) {
		s->min = s->p10 = s->p25 = s->med = s->p75 = s->max = NAN;
		return;
	}
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	s->min = v[0];
	s->max = v[n - 1];
	s->p10 = quantile(v, n, 0.10);
	s->p25 = quantile(v, n, 0.25);
	s->med = quantile(v, n, 0.50);
	s->p75 = quantile(v, n, 0.75);
}

double bench_headline(const struct bench_result *r)
{
	if (!r)
		return NAN;
	switch (r->head) {
	case BH_P10:
		return r->st.p10;
	case BH_MIN:
		return r->st.min;
	case BH_MEDIAN:
	case BH_VALUE:
	default:
		return r->st.med;
	}
}

const char *bench_head_name(enum bench_head h)
{
	switch (h) {
	case BH_P10:
		return "p10";
	case BH_MIN:
		return "min";
	case BH_VALUE:
		return "value";
	case BH_MEDIAN:
	default:
		return "median";
	}
}

/* ---- the result store ------------------------------------------------------- */

static void copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

void bench_record(struct bench_ctx *ctx, const char *wl, const char *variant, const char *topo,
		  const char *contender, const char *unit, enum bench_head head,
		  const struct bench_stat *st)
{
	struct bench_result *r;

	if (ctx->nres == ctx->capres) {
		int cap = ctx->capres ? 2 * ctx->capres : 256;
		void *nr = realloc(ctx->res, (size_t)cap * sizeof(*ctx->res));

		if (!nr)
			return;
		ctx->res = nr;
		ctx->capres = cap;
	}
	r = &ctx->res[ctx->nres++];
	memset(r, 0, sizeof(*r));
	copy(r->workload, sizeof(r->workload), wl);
	copy(r->variant, sizeof(r->variant), variant);
	copy(r->topo, sizeof(r->topo), topo);
	copy(r->contender, sizeof(r->contender), contender);
	copy(r->unit, sizeof(r->unit), unit);
	r->head = head;
	r->st = *st;
	if (ctx->child) {
		/* The parent parses this (bench_spawn_child). */
		printf("R\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%d\t%d\n",
		       r->workload, r->variant, r->topo, r->contender, r->unit, (int)head, st->n,
		       st->min, st->p10, st->p25, st->med, st->p75, st->max, st->dropped,
		       st->disturbed);
		fflush(stdout);
	}
}

const struct bench_result *bench_find(const struct bench_ctx *ctx, const char *wl,
				      const char *variant, const char *topo, const char *contender)
{
	for (int i = ctx->nres - 1; i >= 0; i--) {
		const struct bench_result *r = &ctx->res[i];

		if (!strcmp(r->workload, wl) && !strcmp(r->variant, variant) &&
		    !strcmp(r->topo, topo) && !strcmp(r->contender, contender))
			return r;
	}
	return NULL;
}

double bench_best_peer(const struct bench_ctx *ctx, const char *wl, const char *variant,
		       const char *topo, unsigned api, const char **who)
{
	double best = NAN;

	if (who)
		*who = NULL;
	for (int i = 0; i < bench_nallocs; i++) {
		const struct bench_alloc *a = &bench_allocs[i];
		double h;

		if (!a->peer || (api && !(a->apis & api)))
			continue;
		h = bench_headline(bench_find(ctx, wl, variant, topo, a->name));
		if (!isnan(h) && (isnan(best) || h < best)) {
			best = h;
			if (who)
				*who = a->name;
		}
	}
	return best;
}

void bench_target(struct bench_ctx *ctx, const char *wl, int met, const char *text,
		  const char *detail_fmt, ...)
{
	struct bench_target *t;
	va_list ap;

	if (ctx->ntg == ctx->captg) {
		int cap = ctx->captg ? 2 * ctx->captg : 32;
		void *nt = realloc(ctx->tg, (size_t)cap * sizeof(*ctx->tg));

		if (!nt)
			return;
		ctx->tg = nt;
		ctx->captg = cap;
	}
	t = &ctx->tg[ctx->ntg++];
	copy(t->workload, sizeof(t->workload), wl);
	copy(t->text, sizeof(t->text), text);
	t->met = met;
	va_start(ap, detail_fmt);
	vsnprintf(t->detail, sizeof(t->detail), detail_fmt, ap);
	va_end(ap);
}

void bench_note(struct bench_ctx *ctx, const char *wl, const char *fmt, ...)
{
	char line[1024];
	size_t need;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	for (char *c = line; *c; c++)
		if (*c == '\n' || *c == '\t')
			*c = ' ';
	if (ctx->child) {
		printf("N\t%s\t%s\n", wl, line);
		fflush(stdout);
		return;
	}
	need = strlen(wl) + strlen(line) + 3;
	if (ctx->notes_len + need + 1 > ctx->notes_cap) {
		size_t cap = (ctx->notes_cap + need) * 2 + 1024;
		char *n = realloc(ctx->notes, cap);

		if (!n)
			return;
		ctx->notes = n;
		ctx->notes_cap = cap;
	}
	ctx->notes_len += (size_t)sprintf(ctx->notes + ctx->notes_len, "%s\t%s\n", wl, line);
}

void bench_profile(struct bench_ctx *ctx, const char *wl, const char *variant, const char *topo,
		   const char *contender, const char *cells)
{
	size_t need =
		strlen(wl) + strlen(variant) + strlen(topo) + strlen(contender) + strlen(cells) + 8;

	if (ctx->child) {
		printf("P\t%s\t%s\t%s\t%s\t%s\n", wl, variant, topo, contender, cells);
		fflush(stdout);
		return;
	}
	if (ctx->prof_len + need + 1 > ctx->prof_cap) {
		size_t cap = (ctx->prof_cap + need) * 2 + 1024;
		char *n = realloc(ctx->profiles, cap);

		if (!n)
			return;
		ctx->profiles = n;
		ctx->prof_cap = cap;
	}
	ctx->prof_len += (size_t)sprintf(ctx->profiles + ctx->prof_len, "%s\t%s\t%s\t%s\t%s\n", wl,
					 variant, topo, contender, cells);
}

bool bench_name_in_csv(const char *list, const char *name)
{
	if (!list || !*list)
		return true; /* no list: everything is selected */
	size_t len = strlen(name);
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l == len && !strncmp(p, name, len))
			return true;
		if (!e)
			break;
		p = e + 1;
	}
	return false;
}

bool bench_alloc_selected(const struct bench_ctx *ctx, const char *name)
{
	return bench_name_in_csv(ctx->allocs, name);
}
