/* SPDX-License-Identifier: MIT */
/*
 * report.c - sheaf-bench's output: results.csv, machine.txt and report.md.
 */
#include <dirent.h>
#include <gnu/libc-version.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

#ifndef SHEAF_BENCH_VERSION
#define SHEAF_BENCH_VERSION "unknown"
#endif
#ifndef SHEAF_BENCH_SRCDIR
#define SHEAF_BENCH_SRCDIR "."
#endif
#ifndef SHEAF_BENCH_BUILD
#define SHEAF_BENCH_BUILD "unknown"
#endif

void bench_write_csv(const struct bench_ctx *ctx, const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		perror(path);
		return;
	}
	fprintf(f, "workload,variant,topology,contender,unit,headline_stat,headline,windows,"
		   "min,p10,p25,median,p75,max,dropped_disturbed,disturbed\n");
	for (int i = 0; i < ctx->nres; i++) {
		const struct bench_result *r = &ctx->res[i];
		const struct bench_stat *s = &r->st;

		fprintf(f, "%s,%s,%s,%s,%s,%s,%.4g,%d,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%d,%d\n",
			r->workload, r->variant, r->topo, r->contender, r->unit,
			bench_head_name(r->head), bench_headline(r), s->n, s->min, s->p10, s->p25,
			s->med, s->p75, s->max, s->dropped, s->disturbed);
	}
	fclose(f);
}

/* First line of a command's output, or "?" */
static void cmd_line(const char *cmd, char *buf, size_t len)
{
	FILE *p = popen(cmd, "r");

	snprintf(buf, len, "?");
	if (!p)
		return;
	if (fgets(buf, (int)len, p))
		buf[strcspn(buf, "\n")] = 0;
	else
		snprintf(buf, len, "?");
	pclose(p);
}

static void file_line(const char *path, const char *prefix, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	char line[512];

	snprintf(buf, len, "?");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!prefix || !strncmp(line, prefix, strlen(prefix))) {
			char *v = prefix ? strchr(line, ':') : line;

			v = v ? v + (prefix ? 1 : 0) : line;
			while (*v == ' ' || *v == '\t')
				v++;
			size_t l = strcspn(v, "\n");

			if (l >= len)
				l = len - 1;
			memcpy(buf, v, l);
			buf[l] = 0;
			break;
		}
	}
	fclose(f);
}

struct machine {
	char cpu[256], thp[128], defrag[128], nodes[64], kernel[512], git[128], date[64];
	long ncpu;
};

static void machine_get(struct machine *m)
{
	struct utsname u;
	time_t now = time(NULL);
	struct tm tm;
	char cmd[1024];

	file_line("/proc/cpuinfo", "model name", m->cpu, sizeof(m->cpu));
	file_line("/sys/kernel/mm/transparent_hugepage/enabled", NULL, m->thp, sizeof(m->thp));
	file_line("/sys/kernel/mm/transparent_hugepage/defrag", NULL, m->defrag, sizeof(m->defrag));
	file_line("/sys/devices/system/node/online", NULL, m->nodes, sizeof(m->nodes));
	m->ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (!uname(&u))
		snprintf(m->kernel, sizeof(m->kernel), "%s %s %s", u.sysname, u.release, u.machine);
	snprintf(cmd, sizeof(cmd), "git -C '%s' describe --always --dirty 2>/dev/null",
		 SHEAF_BENCH_SRCDIR);
	cmd_line(cmd, m->git, sizeof(m->git));
	gmtime_r(&now, &tm);
	strftime(m->date, sizeof(m->date), "%Y-%m-%d %H:%M UTC", &tm);
}

void bench_write_machine(const struct bench_ctx *ctx, const char *path)
{
	FILE *f = fopen(path, "w");
	struct machine m;
	FILE *p;
	char line[512];

	if (!f) {
		perror(path);
		return;
	}
	machine_get(&m);
	fprintf(f, "date: %s\n", m.date);
	fprintf(f, "cpu: %s\n", m.cpu);
	fprintf(f, "cpus online: %ld (workloads use CPU %d and CPU %d)\n", m.ncpu, bench_cpu[0],
		bench_cpu[1]);
	fprintf(f, "numa nodes online: %s\n", m.nodes);
	fprintf(f, "kernel: %s\n", m.kernel);
	fprintf(f, "glibc: %s\n", gnu_get_libc_version());
	fprintf(f, "compiler: gcc-compatible %s\n", __VERSION__);
	fprintf(f, "thp enabled: %s\n", m.thp);
	fprintf(f, "thp defrag: %s\n", m.defrag);
	fprintf(f, "sheaf: %s (git %s), build %s, per-CPU mode %s\n", SHEAF_BENCH_VERSION, m.git,
		SHEAF_BENCH_BUILD, bench_sheaf_mode());
	fprintf(f, "load average (/proc/loadavg) at start: %s; at end: %s\n", ctx->load_start,
		ctx->load_end);
	fprintf(f,
		"cpu ticks during the run: machine busy %llu of %llu (steal %llu), "
		"this run's own %llu\n",
		ctx->cpu_busy, ctx->cpu_total, ctx->cpu_steal, ctx->cpu_self);
	fprintf(f,
		"run: %s, windows %s; %d windows per contender across CPUs, %d on the fast "
		"path, %d for the others\n",
		ctx->quick ? "--quick" : "full",
		ctx->quick ? "4 ms" : "5 ms (fast path), 10 ms (cross-CPU), 20 ms (others)",
		ctx->reps_xcpu, ctx->quick ? ctx->reps : 31, ctx->reps);
	fprintf(f, "packages (dpkg-query):\n");
	p = popen("dpkg-query -W -f='${Package} ${Version}\\n' libc6 libjemalloc2 "
		  "libmimalloc2.0 libtcmalloc-minimal4 dpdk-dev librte-mempool23 liburcu8 "
		  "2>/dev/null",
		  "r");
	if (p) {
		while (fgets(line, sizeof(line), p))
			fprintf(f, "  %s", line);
		pclose(p);
	}
	fprintf(f, "contenders:\n");
	for (int i = 0; i < bench_nallocs; i++)
		fprintf(f, "  %-13s %s: %s\n", bench_allocs[i].name,
			bench_allocs[i].available ? "yes" : "no", bench_allocs[i].how);
	fclose(f);
}

/* ---- report.md ---------------------------------------------------------------- */

/* Contenders with a record in @wl, in bench_allocs order. */
static int columns(const struct bench_ctx *ctx, const char *wl, const char **col)
{
	int n = 0;

	for (int i = 0; i < bench_nallocs; i++) {
		for (int j = 0; j < ctx->nres; j++) {
			if (!strcmp(ctx->res[j].workload, wl) &&
			    !strcmp(ctx->res[j].contender, bench_allocs[i].name)) {
				col[n++] = bench_allocs[i].name;
				break;
			}
		}
	}
	return n;
}

/* Distinct (variant, topo) rows of @wl in record order. */
static int rows(const struct bench_ctx *ctx, const char *wl, int *first)
{
	int n = 0;

	for (int j = 0; j < ctx->nres; j++) {
		const struct bench_result *r = &ctx->res[j];
		bool seen = false;

		if (strcmp(r->workload, wl))
			continue;
		for (int k = 0; k < n && !seen; k++)
			seen = !strcmp(ctx->res[first[k]].variant, r->variant) &&
			       !strcmp(ctx->res[first[k]].topo, r->topo);
		if (!seen)
			first[n++] = j;
	}
	return n;
}

static void fmt_num(char *b, size_t n, double v)
{
	if (isnan(v))
		snprintf(b, n, "–");
	else if (fabs(v) >= 100)
		snprintf(b, n, "%.0f", v);
	else if (fabs(v) >= 10)
		snprintf(b, n, "%.1f", v);
	else if (fabs(v) >= 0.1 || v == 0)
		snprintf(b, n, "%.2f", v);
	else
		snprintf(b, n, "%.3f", v);
}

enum cell {
	CELL_HEAD,
	CELL_X_MI,
	CELL_X_BEST,
	CELL_ABOVE_FLOOR
};

static void matrix(FILE *f, const struct bench_ctx *ctx, const char *wl, const char **col, int ncol,
		   const int *first, int nrow, enum cell what)
{
	fprintf(f, "| variant | series |");
	for (int c = 0; c < ncol; c++)
		fprintf(f, " %s |", col[c]);
	fprintf(f, "\n|---|---|");
	for (int c = 0; c < ncol; c++)
		fprintf(f, "---:|");
	fprintf(f, "\n");
	for (int r = 0; r < nrow; r++) {
		const struct bench_result *rr = &ctx->res[first[r]];
		double mi = bench_headline(bench_find(ctx, wl, rr->variant, rr->topo, "mimalloc"));
		double fl = bench_headline(bench_find(ctx, wl, rr->variant, rr->topo, "floor"));
		double best = bench_best_peer(ctx, wl, rr->variant, rr->topo, 0, NULL);

		fprintf(f, "| %s | %s |", rr->variant, rr->topo);
		for (int c = 0; c < ncol; c++) {
			double h =
				bench_headline(bench_find(ctx, wl, rr->variant, rr->topo, col[c]));
			char b[32];

			switch (what) {
			case CELL_X_MI:
				h = h / mi;
				break;
			case CELL_X_BEST:
				h = h / best;
				break;
			case CELL_ABOVE_FLOOR:
				h = strcmp(col[c], "floor") ? h - fl : NAN;
				break;
			case CELL_HEAD:
			default:
				break;
			}
			fmt_num(b, sizeof(b), h);
			fprintf(f, " %s%s |", b,
				!isnan(h) && (what == CELL_X_MI || what == CELL_X_BEST) ? "×" : "");
		}
		fprintf(f, "\n");
	}
	fprintf(f, "\n");
}

static void spread_table(FILE *f, const struct bench_ctx *ctx, const char *wl)
{
	fprintf(f, "<details><summary>Spread over the windows (all figures)</summary>\n\n");
	fprintf(f, "| variant | series | contender | unit | windows used | "
		   "min | p10 | p25 | median | p75 | max |\n"
		   "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (int j = 0; j < ctx->nres; j++) {
		const struct bench_result *r = &ctx->res[j];
		char b[6][32], used[64];

		if (strcmp(r->workload, wl) || bench_is_prev_ratio(r))
			continue;
		if (r->st.dropped)
			snprintf(used, sizeof(used), "%d (%d disturbed left out)", r->st.n,
				 r->st.dropped);
		else if (r->st.disturbed)
			snprintf(used, sizeof(used), "%d (%d disturbed, kept)", r->st.n,
				 r->st.disturbed);
		else
			snprintf(used, sizeof(used), "%d", r->st.n);
		fmt_num(b[0], 32, r->st.min);
		fmt_num(b[1], 32, r->st.p10);
		fmt_num(b[2], 32, r->st.p25);
		fmt_num(b[3], 32, r->st.med);
		fmt_num(b[4], 32, r->st.p75);
		fmt_num(b[5], 32, r->st.max);
		fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r->variant,
			r->topo, r->contender, r->unit, used, b[0], b[1], b[2], b[3], b[4], b[5]);
	}
	fprintf(f, "\n</details>\n\n");
}

static void notes_of(FILE *f, const struct bench_ctx *ctx, const char *wl)
{
	const char *s = ctx->notes;
	size_t wl_len = strlen(wl);
	bool any = false;
	int kept = 0, rowsn = 0;

	for (int j = 0; j < ctx->nres; j++) {
		if (strcmp(ctx->res[j].workload, wl) || ctx->res[j].head == BH_VALUE ||
		    bench_is_prev_ratio(&ctx->res[j]))
			continue;
		rowsn++;
		if (!ctx->res[j].st.dropped && ctx->res[j].st.disturbed)
			kept++;
	}
	if (kept) {
		fprintf(f,
			"Notes:\n\n- %d of %d figures had fewer than a third of their windows "
			"free of preemption by other processes; they are over all their windows "
			"(see the spread table).\n",
			kept, rowsn);
		any = true;
	}

	while (s && *s) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) : strlen(s);

		if (len > wl_len && !strncmp(s, wl, wl_len) && s[wl_len] == '\t') {
			if (!any)
				fprintf(f, "Notes:\n\n");
			any = true;
			fprintf(f, "- %.*s\n", (int)(len - wl_len - 1), s + wl_len + 1);
		}
		s = nl ? nl + 1 : s + len;
	}
	if (any)
		fprintf(f, "\n");
}

static void profiles_of(FILE *f, const struct bench_ctx *ctx, const char *wl)
{
	const char *s = ctx->profiles;
	size_t wl_len = strlen(wl);
	bool any = false;

	while (s && *s) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) : strlen(s);

		if (len > wl_len && !strncmp(s, wl, wl_len) && s[wl_len] == '\t') {
			char row[1024];
			char *tok, *save = NULL, *fld[4];
			int k = 0;

			snprintf(row, sizeof(row), "%.*s", (int)(len - wl_len - 1), s + wl_len + 1);
			for (tok = strtok_r(row, "\t", &save); tok && k < 4;
			     tok = strtok_r(NULL, "\t", &save))
				fld[k++] = tok;
			if (k == 4) {
				if (!any)
					fprintf(f,
						"**Sheaf's counters per 1,000 allocations** "
						"(sheaf_stats_get after the phase; full dumps in "
						"[sheaf-stats.txt](sheaf-stats.txt)):\n\n"
						"| variant | series | contender %s\n"
						"|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
						"---:|---:|---:|---:|\n",
						bench_profile_header);
				any = true;
				fprintf(f, "| %s | %s | %s %s\n", fld[0], fld[1], fld[2], fld[3]);
			}
		}
		s = nl ? nl + 1 : s + len;
	}
	if (any)
		fprintf(f, "\n");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void plots_of(FILE *f, const struct bench_ctx *ctx, const char *wl)
{
	DIR *d = opendir(ctx->out);
	struct dirent *e;
	char *names[64];
	int n = 0;
	size_t wl_len = strlen(wl);

	if (!d)
		return;
	while ((e = readdir(d)) && n < 64) {
		size_t l = strlen(e->d_name);

		if (l > 4 && !strcmp(e->d_name + l - 4, ".png") &&
		    !strncmp(e->d_name, wl, wl_len) &&
		    (e->d_name[wl_len] == '.' || e->d_name[wl_len] == '-'))
			names[n++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
	for (int i = 0; i < n; i++) {
		if (names[i])
			fprintf(f, "![%s](%s)\n\n", names[i], names[i]);
		free(names[i]);
	}
}

static double other_pct(const struct bench_ctx *ctx)
{
	double other = (double)ctx->cpu_busy - (double)ctx->cpu_self;

	if (!ctx->cpu_total)
		return NAN;
	return other < 0 ? 0 : 100.0 * other / (double)ctx->cpu_total;
}

void bench_write_report(const struct bench_ctx *ctx, const char *path, double elapsed_s)
{
	FILE *f = fopen(path, "w");
	struct machine m;
	int met = 0, missed = 0, na = 0;

	if (!f) {
		perror(path);
		return;
	}
	machine_get(&m);
	fprintf(f, "# Sheaf benchmark report, %s\n\n", m.date);
	fprintf(f, "- Machine: %s, %ld CPUs online (workloads on CPU %d and %d), NUMA nodes %s\n",
		m.cpu, m.ncpu, bench_cpu[0], bench_cpu[1], m.nodes);
	fprintf(f, "- Kernel %s, glibc %s, THP `%s`\n", m.kernel, gnu_get_libc_version(), m.thp);
	fprintf(f, "- Sheaf %s (git %s), build %s, per-CPU mode `%s`\n", SHEAF_BENCH_VERSION, m.git,
		SHEAF_BENCH_BUILD, bench_sheaf_mode());
	fprintf(f,
		"- Run: %s, %.0f s; windows: %s, %d per contender across CPUs, %d for the "
		"others. Versions of the peers: [machine.txt](machine.txt). Raw figures: "
		"[results.csv](results.csv). Sheaf's own counters per phase: "
		"[sheaf-stats.txt](sheaf-stats.txt).\n",
		ctx->quick ? "`--quick` (smoke run: few windows, figures are rough)" : "full suite",
		elapsed_s,
		ctx->quick ? "4 ms" :
			     "5 ms for the fast path (31 per contender), 10 ms across "
			     "CPUs, 20 ms for the others",
		ctx->reps_xcpu, ctx->reps);

	fprintf(f,
		"- Other processes' CPU use during the run: %.0f%% of the machine (steal "
		"%.0f%%); load average at start `%s`. Anything above a few per cent means "
		"other work shared the two CPUs and disturbed the figures.\n\n",
		other_pct(ctx),
		ctx->cpu_total ? 100.0 * (double)ctx->cpu_steal / (double)ctx->cpu_total : 0.0,
		ctx->load_start);
	fprintf(f,
		"## Method\n\n"
		"Each contender does a fixed amount of work per window, calibrated once so a "
		"window lasts about %.0f ms%s; the windows of all contenders of one row "
		"alternate (the first contender rotates each round), so drifts of the host "
		"hit all alike. Timing: CLOCK_MONOTONIC; threads pinned with "
		"pthread_setaffinity_np. Same-CPU rows are judged by the **median** window "
		"(over the windows no other process preempted, when enough were), cross-CPU "
		"rows by the **fastest** window (min; p10 is in the spread table): this VM's "
		"host moves vCPUs in bursts and a cross-CPU round trip then jumps from "
		"~100 ns to microseconds, so the fastest windows measure the code and the "
		"rest the host; with fixed work per window, none can be faster than the "
		"code allows. Every "
		"allocator is called through one indirect call per operation. "
		"\"× mimalloc\" divides by mimalloc's headline in the same row; \"× best "
		"peer\" by the lowest of glibc, jemalloc, mimalloc, tcmalloc and DPDK's "
		"mempool in that row. `sheaf` is Sheaf's object-cache API with its defaults, "
		"`sheaf-k7` the same with SHEAF_KERNEL_COMPAT (configured like Linux 7.0), "
		"`sheaf-c512` the same with sheaves of 512 objects (DPDK's per-lcore cache "
		"size, for the mempool comparison at equal per-CPU caching), "
		"`sheaf-malloc` Sheaf's malloc front end; `sheaf-nochecks` and "
		"`sheaf-malloc-nochecks` the same two with the free checks off "
		"(SHEAF_FREE_CHECKS=0, a private copy of the library in the same process), "
		"in the fast-path pair and batch100 rows and the bulk rows only, for the cost "
		"of the checks, against `sheaf-checks` and `sheaf-malloc-checks` (a private "
		"copy loaded the same way with the checks on, fast-path pair and batch100 rows: "
		"the linked library and a copy differ by a few per cent with the same settings; "
		"one process compares one placement of each instance's memory, "
		"which alone moves batch100/256 by up to 2x: judge the checks by the median "
		"over many processes, tools/checks-cost.sh); "
		"`sheaf-prev` and `sheaf-malloc-prev` the same two of an earlier revision's "
		"library (--prev-lib), where one was given (\"Against the previous "
		"revision\" below).\n\n",
		ctx->window_ms, ctx->quick ? "" : " (5 ms for the fast path, 10 ms across CPUs)");

	fprintf(f, "## Contenders\n\n| contender | loaded |\n|---|---|\n");
	for (int i = 0; i < bench_nallocs; i++)
		fprintf(f, "| %s | %s%s |\n", bench_allocs[i].name,
			bench_allocs[i].available ? "" : "**absent**: ", bench_allocs[i].how);
	fprintf(f, "\n");

	for (int i = 0; i < ctx->ntg; i++)
		ctx->tg[i].met > 0 ? met++ : ctx->tg[i].met == 0 ? missed++ : na++;
	fprintf(f,
		"## Targets (issue 8)\n\n%d met, %d **not met**, %d not measured or for "
		"information.\n\n| result | target | measured |\n|---|---|---|\n",
		met, missed, na);
	for (int i = 0; i < ctx->ntg; i++) {
		const struct bench_target *t = &ctx->tg[i];

		fprintf(f, "| %s | %s | %s |\n",
			t->met > 0  ? "met" :
			t->met == 0 ? "**NOT MET**" :
				      "–",
			t->text, t->detail);
	}
	fprintf(f, "\n");
	bench_write_prev(f, ctx);

	for (int w = 0; w < bench_nworkloads; w++) {
		const struct bench_workload *wl = bench_workloads[w];
		const char *col[32];
		int first[512];
		int ncol = columns(ctx, wl->name, col), nrow = rows(ctx, wl->name, first);
		bool xcpu, mem;

		if (!nrow) {
			bool noted = false;

			for (const char *s = ctx->notes; s && (s = strstr(s, wl->name)); s++)
				noted = true;
			if (noted) {
				fprintf(f, "## %s\n\n", wl->title);
				notes_of(f, ctx, wl->name);
			}
			continue;
		}
		xcpu = ctx->res[first[0]].head == BH_P10 || ctx->res[first[0]].head == BH_MIN;
		mem = ctx->res[first[0]].head == BH_VALUE;
		fprintf(f, "## %s\n\n%s\n\n", wl->title, wl->about ? wl->about : "");
		fprintf(f, "**%s, %s** (lower is better):\n\n", ctx->res[first[0]].unit,
			bench_head_name(ctx->res[first[0]].head));
		matrix(f, ctx, wl->name, col, ncol, first, nrow, CELL_HEAD);
		fprintf(f, "**× mimalloc**:\n\n");
		matrix(f, ctx, wl->name, col, ncol, first, nrow, CELL_X_MI);
		if (!mem) {
			fprintf(f, "**× best peer**:\n\n");
			matrix(f, ctx, wl->name, col, ncol, first, nrow, CELL_X_BEST);
		}
		if (xcpu) {
			fprintf(f,
				"**Cost above the floor** (%s minus the no-allocator hand-off, "
				"ns/obj):\n\n",
				bench_head_name(ctx->res[first[0]].head));
			matrix(f, ctx, wl->name, col, ncol, first, nrow, CELL_ABOVE_FLOOR);
		}
		if (!mem)
			spread_table(f, ctx, wl->name);
		profiles_of(f, ctx, wl->name);
		notes_of(f, ctx, wl->name);
		plots_of(f, ctx, wl->name);
	}
	if (ctx->notes && strstr(ctx->notes, "plots\t")) {
		fprintf(f, "## Plots\n\n");
		notes_of(f, ctx, "plots");
	}
	fclose(f);
}
