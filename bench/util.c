/* SPDX-License-Identifier: MIT */
/*
 * util.c - sheaf-bench plumbing: pinning, statistics, the result store,
 * progress, interleaved phases, pinned thread pairs and child processes.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

int bench_cpu[2] = { 0, 1 };

int bench_pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	if (cpu < 0) {
		long n = sysconf(_SC_NPROCESSORS_CONF);

		for (long i = 0; i < n && i < CPU_SETSIZE; i++)
			CPU_SET((int)i, &set);
	} else {
		CPU_SET(cpu, &set);
	}
	return -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void bench_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

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
				      const char *variant, const char *topo,
				      const char *contender)
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
	size_t need = strlen(wl) + strlen(variant) + strlen(topo) + strlen(contender) +
		      strlen(cells) + 8;

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
	ctx->prof_len += (size_t)sprintf(ctx->profiles + ctx->prof_len, "%s\t%s\t%s\t%s\t%s\n",
					 wl, variant, topo, contender, cells);
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
		fprintf(stderr, "\r\033[K[%02u:%02u]%s %s", (unsigned)(el / 60), (unsigned)(el % 60),
			ctx->child ? " (child)" : "", line);
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
static _Atomic unsigned long pair_preempted;

static unsigned long thread_preempted(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) ? 0 : (unsigned long)ru.ru_nivcsw;
}

/* ---- phases ----------------------------------------------------------------- */

#define PHASE_MAX 16

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
			unsigned long pre = thread_preempted() + atomic_load(&pair_preempted);

			v[i][r] = ph->fn(ph->state, &pools[i], n[i]);
			dist[i][r] = thread_preempted() + atomic_load(&pair_preempted) != pre;
			if (v[i][r] < 0) {
				ok[i] = false;
				bench_note(ctx, ph->workload, "%s %s: %s failed in window %d",
					   ph->variant, ph->topo, pools[i].a->name, r + 1);
			}
		}
	}

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

/* ---- pinned pairs ------------------------------------------------------------ */

struct pair_thread {
	void (*fn)(void *);
	void *arg;
	int cpu;
};

static void *pair_main(void *x)
{
	struct pair_thread *t = x;
	unsigned long before;

	bench_pin_self(t->cpu);
	before = thread_preempted();
	t->fn(t->arg);
	atomic_fetch_add(&pair_preempted, thread_preempted() - before);
	return NULL;
}

int bench_run_pair(const struct bench_pool *p, void (*prod)(void *), void (*cons)(void *),
		   void *arg)
{
	struct pair_thread t[2] = { { prod, arg, bench_cpu[0] }, { cons, arg, bench_cpu[1] } };
	pthread_t th[2];

	if (p && p->kind == BK_DPDK) {
#ifdef SHEAF_BENCH_DPDK
		return bench_dpdk_run_pair(prod, cons, arg);
#else
		return -1;
#endif
	}
	for (int i = 0; i < 2; i++) {
		if (pthread_create(&th[i], NULL, pair_main, &t[i])) {
			if (i == 1)
				pthread_join(th[0], NULL);
			return -1;
		}
	}
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	return 0;
}

/* ---- children ---------------------------------------------------------------- */

static int parse_record(struct bench_ctx *ctx, char *line)
{
	char *f[16];
	int nf = 0;
	struct bench_stat st;

	for (char *s = line, *save = NULL; nf < 16; s = NULL) {
		char *tok = strtok_r(s, "\t\n", &save);

		if (!tok)
			break;
		f[nf++] = tok;
	}
	if (nf == 3 && !strcmp(f[0], "N")) {
		bench_note(ctx, f[1], "%s", f[2]);
		return 0;
	}
	if (nf == 6 && !strcmp(f[0], "P")) {
		bench_profile(ctx, f[1], f[2], f[3], f[4], f[5]);
		return 0;
	}
	if (nf != 16 || strcmp(f[0], "R"))
		return -1;
	st.dropped = atoi(f[14]);
	st.disturbed = atoi(f[15]);
	st.n = atoi(f[7]);
	st.min = strtod(f[8], NULL);
	st.p10 = strtod(f[9], NULL);
	st.p25 = strtod(f[10], NULL);
	st.med = strtod(f[11], NULL);
	st.p75 = strtod(f[12], NULL);
	st.max = strtod(f[13], NULL);
	bench_record(ctx, f[1], f[2], f[3], f[4], f[5], (enum bench_head)atoi(f[6]), &st);
	return 0;
}

int bench_spawn_child(struct bench_ctx *ctx, const char *wl, const char *arg,
		      const char *const *env)
{
	char childarg[512], allocs[1024];
	int fd[2], status = 0;
	FILE *in;
	char line[2048];
	pid_t pid;

	snprintf(childarg, sizeof(childarg), "--child=%s:%s", wl, arg ? arg : "");
	snprintf(allocs, sizeof(allocs), "--allocs=%s", ctx->allocs ? ctx->allocs : "");
	if (pipe(fd))
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (pid == 0) {
		char *argv[6];
		int a = 0;

		dup2(fd[1], STDOUT_FILENO);
		close(fd[0]);
		close(fd[1]);
		for (const char *const *e = env; e && *e; e++)
			putenv((char *)*e);
		argv[a++] = (char *)ctx->self_exe;
		argv[a++] = childarg;
		if (ctx->quick)
			argv[a++] = (char *)"--quick";
		if (ctx->allocs)
			argv[a++] = allocs;
		argv[a] = NULL;
		execv(ctx->self_exe, argv);
		_exit(127);
	}
	close(fd[1]);
	in = fdopen(fd[0], "r");
	if (!in) {
		close(fd[0]);
		waitpid(pid, &status, 0);
		return -1;
	}
	while (fgets(line, sizeof(line), in))
		parse_record(ctx, line);
	fclose(in);
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		bench_note(ctx, wl, "child %s:%s ended with %s %d", wl, arg ? arg : "",
			   WIFEXITED(status) ? "status" : "signal",
			   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return -1;
	}
	return 0;
}

/* ---- memory ------------------------------------------------------------------ */

static long status_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kl = strlen(key);
	long v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			v = strtol(line + kl + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

long bench_rss_kib(void)
{
	return status_kib("VmRSS");
}

long bench_hwm_kib(void)
{
	return status_kib("VmHWM");
}

int bench_hwm_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	int rc;

	if (!f)
		return -1;
	rc = fputs("5", f) < 0 ? -1 : 0;
	if (fclose(f))
		rc = -1;
	return rc;
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
