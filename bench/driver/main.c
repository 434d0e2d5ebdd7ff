/* SPDX-License-Identifier: MIT */
/*
 * main.c - sheaf-bench: Sheaf against glibc, jemalloc, mimalloc, tcmalloc
 * and DPDK's mempool, in one run, into a dated results folder (issue 8).
 *
 *   sheaf-bench [--quick] [--only=wl,...] [--allocs=a,...] [--out=DIR] [--no-plots]
 *               [--prev-lib=PATH]
 *   sheaf-bench --list
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(SHEAF_BENCH_SANITIZED)
#define BENCH_SANITIZED 1
#else
#define BENCH_SANITIZED 0
#endif

#ifndef SHEAF_BENCH_RESULTS
#define SHEAF_BENCH_RESULTS "bench/results"
#endif
#ifndef SHEAF_BENCH_PLOT
#define SHEAF_BENCH_PLOT "plot.py"
#endif
#ifndef SHEAF_BENCH_PLOT_INSTALLED
#define SHEAF_BENCH_PLOT_INSTALLED "/usr/local/share/sheaf/plot.py"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sheaf-bench [options]\n"
		"  --quick          short smoke run (~30 s): fewer sizes, windows and repetitions\n"
		"  --only=W[,W...]  run only these workloads (see --list)\n"
		"  --allocs=A[,...] run only these contenders (see --list)\n"
		"  --out=DIR        results folder (default: %s/<YYYY-MM-DD-HHMM>\n"
		"                   where that source tree is, else\n"
		"                   ./sheaf-bench-results/<YYYY-MM-DD-HHMM>)\n"
		"  --no-plots       do not run the plotting script\n"
		"  --prev-lib=PATH  libsheaf.so of an earlier revision (scripts/build-prev.sh):\n"
		"                   adds the sheaf-prev and sheaf-malloc-prev contenders and the\n"
		"                   report's \"Against the previous revision\" (default: the\n"
		"                   environment's SHEAF_BENCH_PREV_LIB; none: they are absent)\n"
		"  --list           list workloads and contenders, then exit\n",
		SHEAF_BENCH_RESULTS);
}

/* jemalloc's initial-exec TLS needs static TLS surplus when dlopen'd (see
 * contenders.c): restart once with the glibc tunable raised. */
static void reexec_for_tls(char **argv)
{
	const char *t = getenv("GLIBC_TUNABLES");
	char buf[1024];

	if (getenv("SHEAF_BENCH_REEXEC") || (t && strstr(t, "optional_static_tls")))
		return;
	snprintf(buf, sizeof(buf), "%s%sglibc.rtld.optional_static_tls=65536", t ? t : "",
		 t && *t ? ":" : "");
	setenv("GLIBC_TUNABLES", buf, 1);
	setenv("SHEAF_BENCH_REEXEC", "1", 1);
	execv("/proc/self/exe", argv);
	/* Not fatal: jemalloc will then report why it could not be loaded. */
}

static void pick_cpus(void)
{
	cpu_set_t set;
	int found = 0;

	/* A child inherits the parent's main-thread mask (one CPU, set by us or
	 * by DPDK's EAL): widen it first; the kernel keeps it inside the cpuset. */
	bench_pin_self(-1);
	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
		if (CPU_ISSET(c, &set))
			bench_cpu[found++] = c;
	if (found == 1)
		bench_cpu[1] = bench_cpu[0];
}

static int mkdir_p(const char *path)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0755) && errno != EEXIST)
				return -1;
			*p = '/';
		}
	}
	return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static void default_out(struct bench_ctx *ctx)
{
	char stamp[32], base[2048];
	time_t now = time(NULL);
	struct tm tm;
	struct stat st;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d-%H%M", &tm);
	/* bench/results of the source tree this driver was built from, when that
	 * tree is here and writable (a build from a clone); else the current
	 * directory (an installed driver). */
	snprintf(base, sizeof(base), "%s", SHEAF_BENCH_RESULTS);
	if (strrchr(base, '/'))
		*strrchr(base, '/') = 0;
	if ((!stat(SHEAF_BENCH_RESULTS, &st) && S_ISDIR(st.st_mode) &&
	     !access(SHEAF_BENCH_RESULTS, W_OK)) ||
	    (!stat(base, &st) && S_ISDIR(st.st_mode) && !access(base, W_OK)))
		snprintf(base, sizeof(base), "%s", SHEAF_BENCH_RESULTS);
	else
		snprintf(base, sizeof(base), "sheaf-bench-results");
	snprintf(ctx->out, sizeof(ctx->out), "%s/%s", base, stamp);
	/* Two runs in one minute: do not overwrite the first. */
	for (int i = 2; !stat(ctx->out, &st) && i < 100; i++)
		snprintf(ctx->out, sizeof(ctx->out), "%s/%s-%d", base, stamp, i);
}

static bool selected(const char *list, const char *name)
{
	if (list && !*list)
		return false; /* an explicitly empty --only selects nothing */
	return bench_name_in_csv(list, name);
}

static const char *plot_script(void)
{
	const char *e = getenv("SHEAF_BENCH_PLOT");

	if (e && !access(e, R_OK))
		return e;
	if (!access(SHEAF_BENCH_PLOT, R_OK))
		return SHEAF_BENCH_PLOT;
	if (!access(SHEAF_BENCH_PLOT_INSTALLED, R_OK))
		return SHEAF_BENCH_PLOT_INSTALLED;
	/* A relocated install: share/sheaf/plot.py beside this driver's bin/. */
	static char rel[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", rel, PATH_MAX);
	if (n > 0) {
		rel[n] = 0;
		char *slash = strrchr(rel, '/');
		if (slash) {
			snprintf(slash, sizeof(rel) - (size_t)(slash - rel),
				 "/../share/sheaf/plot.py");
			if (!access(rel, R_OK))
				return rel;
		}
	}
	return NULL;
}

static void run_plots(struct bench_ctx *ctx)
{
	const char *script = plot_script();
	char cmd[16384];
	int rc;

	if (!script) {
		bench_note(ctx, "plots", "plot.py not found: no plots");
		return;
	}
	/* Debian's python3-matplotlib is for the system interpreter; a python3
	 * earlier on PATH (pyenv, a venv) may lack it. */
	const char *py = access("/usr/bin/python3", X_OK) ? "python3" : "/usr/bin/python3";

	bench_progress(ctx, "plots: %s %s", py, script);
	snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' >'%s/plot.log' 2>&1", py, script, ctx->out,
		 ctx->out);
	rc = system(cmd);
	if (rc)
		bench_note(ctx, "plots", "%s %s failed (status %d, see plot.log): no plots", py,
			   script, rc);
}

static void loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "r");

	snprintf(buf, len, "?");
	if (f) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\n")] = 0;
		fclose(f);
	}
}

/* Busy, total and steal ticks of the machine, and this process's own ticks
 * including reaped children: the difference is other processes' load. */
static void cpu_ticks(unsigned long long *busy, unsigned long long *total,
		      unsigned long long *steal, unsigned long long *self)
{
	unsigned long long v[10] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	char buf[1024];

	*busy = *total = *steal = *self = 0;
	if (f) {
		if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
			for (int i = 0; i < 8; i++)
				*total += v[i];
			*busy = *total - v[3] - v[4] - v[7];
			*steal = v[7];
		}
		fclose(f);
	}
	f = fopen("/proc/self/stat", "r");
	if (f) {
		if (fgets(buf, sizeof(buf), f)) {
			/* Fields after the command name, which may hold spaces. */
			char *p = strrchr(buf, ')');
			unsigned long long ut, st, cut, cst;

			if (p && sscanf(p + 2,
					"%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
					"%llu %llu %llu %llu",
					&ut, &st, &cut, &cst) == 4)
				*self = ut + st + cut + cst;
		}
		fclose(f);
	}
}

static void list(void)
{
	printf("workloads:\n");
	for (int i = 0; i < bench_nworkloads; i++)
		printf("  %-10s %s\n", bench_workloads[i]->name, bench_workloads[i]->title);
	printf("contenders:\n");
	for (int i = 0; i < bench_nallocs; i++)
		printf("  %-13s %-3s %s\n", bench_allocs[i].name,
		       bench_allocs[i].available ? "yes" : "no", bench_allocs[i].how);
}

int main(int argc, char **argv)
{
	static struct bench_ctx ctx;
	static char exe[PATH_MAX];
	const char *child = NULL;
	bool do_list = false;
	char path[4200];
	ssize_t n;
	int met = 0, missed = 0, na = 0;

	reexec_for_tls(argv);
	ctx.plots = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--quick"))
			ctx.quick = true;
		else if (!strncmp(a, "--only=", 7))
			ctx.only = a + 7;
		else if (!strncmp(a, "--allocs=", 9))
			ctx.allocs = a[9] ? a + 9 : NULL;
		else if (!strncmp(a, "--out=", 6))
			snprintf(ctx.out, sizeof(ctx.out), "%s", a + 6);
		else if (!strcmp(a, "--no-plots"))
			ctx.plots = false;
		else if (!strncmp(a, "--prev-lib=", 11))
			/* Through the environment, so child processes load it too. */
			setenv("SHEAF_BENCH_PREV_LIB", a + 11, 1);
		else if (!strcmp(a, "--list"))
			do_list = true;
		else if (!strncmp(a, "--child=", 8))
			child = a + 8;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "sheaf-bench: unknown argument '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	ctx.self_exe = n > 0 ? (exe[n] = 0, exe) : argv[0];
	ctx.window_ms = ctx.quick ? 4 : 20;
	ctx.reps = ctx.quick ? 3 : 21;
	ctx.reps_xcpu = ctx.quick ? 5 : 80;
	ctx.t_start = bench_now_ns();

	/* Same-CPU workloads run on the main thread, on bench_cpu[0] (where
	 * DPDK's EAL puts its main lcore too). */
	pick_cpus();
	bench_pin_self(bench_cpu[0]);
	bench_allocs_init(BENCH_SANITIZED, getenv("SHEAF_BENCH_PREV_LIB"));

	if (do_list) {
		list();
		return 0;
	}
	if (child) {
		const char *colon = strchr(child, ':');
		size_t wl = colon ? (size_t)(colon - child) : strlen(child);

		ctx.child = true;
		for (int i = 0; i < bench_nworkloads; i++) {
			const struct bench_workload *w = bench_workloads[i];

			if (strlen(w->name) == wl && !strncmp(w->name, child, wl) && w->child)
				return w->child(&ctx, colon ? colon + 1 : "");
		}
		return 2;
	}

	if (!ctx.out[0])
		default_out(&ctx);
	if (mkdir_p(ctx.out)) {
		fprintf(stderr, "sheaf-bench: cannot create %s: %s\n", ctx.out, strerror(errno));
		return 1;
	}
	fprintf(stderr, "sheaf-bench: %s run, results in %s\n", ctx.quick ? "quick" : "full",
		ctx.out);
	for (int i = 0; i < bench_nallocs; i++)
		fprintf(stderr, "  %-13s %s\n", bench_allocs[i].name,
			bench_allocs[i].available ? bench_allocs[i].how : "(absent)");
	loadavg(ctx.load_start, sizeof(ctx.load_start));
	cpu_ticks(&ctx.cpu_busy, &ctx.cpu_total, &ctx.cpu_steal, &ctx.cpu_self);
	snprintf(path, sizeof(path), "%s/sheaf-stats.txt", ctx.out);
	ctx.profile = fopen(path, "w");

	for (int i = 0; i < bench_nworkloads; i++) {
		const struct bench_workload *w = bench_workloads[i];

		if (!selected(ctx.only, w->name))
			continue;
		bench_progress(&ctx, "%s: starting", w->title);
		w->run(&ctx);
		bench_progress_done(&ctx);
	}
	if (ctx.profile)
		fclose(ctx.profile);
	loadavg(ctx.load_end, sizeof(ctx.load_end));
	{
		unsigned long long b, t, s, me;

		cpu_ticks(&b, &t, &s, &me);
		ctx.cpu_busy = b - ctx.cpu_busy;
		ctx.cpu_total = t - ctx.cpu_total;
		ctx.cpu_steal = s - ctx.cpu_steal;
		ctx.cpu_self = me - ctx.cpu_self;
	}

	snprintf(path, sizeof(path), "%s/results.csv", ctx.out);
	bench_write_csv(&ctx, path);
	snprintf(path, sizeof(path), "%s/machine.txt", ctx.out);
	bench_write_machine(&ctx, path);
	if (ctx.plots)
		run_plots(&ctx);
	bench_progress_done(&ctx);
	snprintf(path, sizeof(path), "%s/report.md", ctx.out);
	bench_write_report(&ctx, path, (double)(bench_now_ns() - ctx.t_start) / 1e9);

	for (int i = 0; i < ctx.ntg; i++) {
		if (ctx.tg[i].met > 0)
			met++;
		else if (ctx.tg[i].met == 0)
			missed++;
		else
			na++;
	}
	printf("sheaf-bench: %.0f s; targets met %d, not met %d, not measured %d\n",
	       (double)(bench_now_ns() - ctx.t_start) / 1e9, met, missed, na);
	if (bench_alloc_find("sheaf-prev")->available ||
	    bench_alloc_find("sheaf-malloc-prev")->available) {
		int rows, slower, faster;

		bench_prev_summary(&ctx, &rows, &slower, &faster);
		printf("sheaf-bench: against the previous revision: %d rows, %d slower (or "
		       "larger) beyond noise, %d faster (or smaller)\n",
		       rows, slower, faster);
	}
	printf("sheaf-bench: report %s\n", path);
	return 0;
}

/* ---- registry ------------------------------------------------------------------ */

#define BENCH_MAX_WORKLOADS 32
const struct bench_workload *bench_workloads[BENCH_MAX_WORKLOADS];
int bench_nworkloads;

void bench_register(const struct bench_workload *w)
{
	int i;

	if (bench_nworkloads == BENCH_MAX_WORKLOADS)
		return;
	/* Keep them sorted by order (constructors run in link order). */
	for (i = bench_nworkloads; i > 0 && bench_workloads[i - 1]->order > w->order; i--)
		bench_workloads[i] = bench_workloads[i - 1];
	bench_workloads[i] = w;
	bench_nworkloads++;
}
