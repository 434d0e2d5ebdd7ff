/* SPDX-License-Identifier: MIT */
/*
 * driver.h - the sheaf-bench driver: timing windows, pinned threads, child
 * processes, results and the workload registry (docs/benchmarks.md).
 *
 * bench/ has three parts: the driver (bench/driver: options, phases, results,
 * the report), the contenders (bench/contenders: the allocators under test,
 * contenders.h) and the workloads (bench/workloads: one file each, registered
 * with BENCH_REGISTER, workloads.h).
 *
 * Method (see docs/benchmarks.md):
 *  - Every contender (an allocator bound to one object size, a "pool") runs
 *    the same fixed amount of work per window; the amount is calibrated once
 *    per contender so a window lasts about ctx->window_ms (or the phase's).
 *  - Windows of the contenders of one phase alternate (the starting contender
 *    rotates every round), so slow drifts of the host hit all of them alike.
 *  - Each window yields ns per unit of work; a phase records min, p10, p25,
 *    median, p75 and max over its windows.  Same-CPU figures are judged by
 *    the median, cross-CPU figures by the minimum (the fastest window),
 *    because this VM's host moves vCPUs in bursts and a cross-CPU round trip
 *    then jumps from ~100 ns to microseconds: the fastest windows are the
 *    figure of the code, the rest the figure of the host.  A window cannot
 *    come out faster than the code allows (fixed work, wall time), so the
 *    minimum is a sound estimate; p10 is in the tables beside it.
 *
 * Other processes share this machine (other builds and tests).  A window in
 * which a thread of the workload was preempted (its involuntary context
 * switches rose, getrusage(RUSAGE_THREAD)) is "disturbed"; when enough
 * undisturbed windows remain, the statistics are over those only, and the
 * number left out is recorded.
 *
 * Each workload file registers itself (BENCH_REGISTER below); CMake picks up
 * every .c file in bench/workloads.
 */
#ifndef SHEAF_BENCH_H
#define SHEAF_BENCH_H

#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "contenders.h"

#define BENCH_FMT(a, b) __attribute__((format(printf, a, b)))

/* ---- time and CPUs ------------------------------------------------------- */

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void bench_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Wait politely: pause, and every 1024 spins give the CPU away.  Other
 * processes may share the machine; a pinned spinner would otherwise hold its
 * CPU while the thread it waits for is not running. */
static inline void bench_spin(unsigned *spins)
{
	if (++*spins & 1023)
		bench_relax();
	else
		sched_yield();
}

/* The two CPUs the workloads use: the producer's and the consumer's. */
extern int bench_cpu[2];
/* Pin the calling thread to @cpu (-1: to every CPU it may use).  0 or -errno. */
int bench_pin_self(int cpu);
void bench_sleep_ms(unsigned ms);

/* ---- two pinned threads -------------------------------------------------------- */

/* Run prod(arg) on bench_cpu[0] and cons(arg) on bench_cpu[1] and wait for
 * both.  DPDK pools run on EAL lcores (the caller is the main lcore).  0 or -1. */
int bench_run_pair(const struct bench_pool *p, void (*prod)(void *), void (*cons)(void *),
		   void *arg);

/* Single-producer single-consumer ring of pointers, cache-line separated. */
#define BENCH_RING_SLOTS 256u
struct bench_ring {
	_Alignas(64) _Atomic size_t head; /* written by the producer */
	_Alignas(64) _Atomic size_t tail; /* written by the consumer */
	_Alignas(64) void *slot[BENCH_RING_SLOTS];
};

/* Involuntary context switches of the workload's threads, summed: pair threads
 * add theirs when they finish (threads.c); a phase adds the main thread's and
 * marks a window disturbed when the sum moved (phase.c). */
extern _Atomic unsigned long bench_pair_preempted;
unsigned long bench_thread_preempted(void);

/* ---- statistics and results ---------------------------------------------------- */

struct bench_stat {
	int n;
	double min, p10, p25, med, p75, max;
	int dropped;   /* windows left out as disturbed (bench_phase_run) */
	int disturbed; /* windows disturbed; kept when too few were clean */
};
void bench_stat_compute(double *v, int n, struct bench_stat *s);

enum bench_head {
	BH_MEDIAN,
	BH_P10,
	BH_VALUE,
	BH_MIN
};

struct bench_result {
	char workload[24], variant[40], topo[24], contender[24], unit[16];
	enum bench_head head;
	struct bench_stat st;
};
double bench_headline(const struct bench_result *r);
const char *bench_head_name(enum bench_head h);

struct bench_target {
	char workload[24];
	char text[200];
	int met; /* 1 met, 0 not met, -1 not measurable in this run */
	char detail[400];
};

struct bench_ctx {
	bool quick;
	bool child; /* a child process: records go to stdout */
	bool plots;
	const char *only;   /* comma list of workloads, or NULL */
	const char *allocs; /* comma list of contenders, or NULL */
	char out[4096];
	double window_ms; /* target length of one window */
	int reps;         /* windows per contender, same-CPU phases */
	int reps_xcpu;    /* windows per contender, cross-CPU phases */
	const char *self_exe;
	FILE *profile; /* Sheaf statistics per phase, or NULL */
	uint64_t t_start;
	char load_start[64], load_end[64]; /* /proc/loadavg */
	/* CPU time over the run, clock ticks: the machine's busy, idle and
	 * steal time, and this process's own (with its children's). */
	unsigned long long cpu_busy, cpu_total, cpu_steal, cpu_self;

	struct bench_result *res;
	int nres, capres;
	struct bench_target *tg;
	int ntg, captg;
	char *notes; /* "workload\tline\n"... */
	size_t notes_len, notes_cap;
	char *profiles; /* "workload\tvariant\ttopo\tcontender\tcells\n"... */
	size_t prof_len, prof_cap;
};

void bench_record(struct bench_ctx *ctx, const char *wl, const char *variant, const char *topo,
		  const char *contender, const char *unit, enum bench_head head,
		  const struct bench_stat *st);
const struct bench_result *bench_find(const struct bench_ctx *ctx, const char *wl,
				      const char *variant, const char *topo, const char *contender);
/* Lowest headline among the peers measured in this (wl, variant, topo);
 * @api selects malloc peers (BENCH_API_MALLOC) or all peers (0).  NAN if none;
 * *who gets the peer's name. */
double bench_best_peer(const struct bench_ctx *ctx, const char *wl, const char *variant,
		       const char *topo, unsigned api, const char **who);
void bench_target(struct bench_ctx *ctx, const char *wl, int met, const char *text,
		  const char *detail_fmt, ...) BENCH_FMT(5, 6);
void bench_note(struct bench_ctx *ctx, const char *wl, const char *fmt, ...) BENCH_FMT(3, 4);
/* Keep one row of Sheaf's counters (bench_pool_profile) for the report. */
void bench_profile(struct bench_ctx *ctx, const char *wl, const char *variant, const char *topo,
		   const char *contender, const char *cells);
/* True when @name is selected by --allocs (or no --allocs was given). */
/* Is @name in the comma-separated @list?  An empty or absent list selects everything. */
bool bench_name_in_csv(const char *list, const char *name);
bool bench_alloc_selected(const struct bench_ctx *ctx, const char *name);

/* Progress on stderr. */
void bench_progress(struct bench_ctx *ctx, const char *fmt, ...) BENCH_FMT(2, 3);
void bench_progress_done(struct bench_ctx *ctx);

/* ---- phases: interleaved windows -------------------------------------------- */

/* One window: do @n units of work with @p and return ns per unit (<0: failed). */
typedef double (*bench_window_fn)(void *state, struct bench_pool *p, uint64_t n);

struct bench_phase {
	const char *workload, *variant, *topo, *unit;
	enum bench_head head;
	unsigned apis;   /* contenders with any of these APIs take part */
	bool with_floor; /* the no-allocator floor takes part too */
	size_t size, max_live;
	uint64_t granule; /* n is a multiple of this */
	int reps;
	double window_ms; /* 0: ctx->window_ms */
	bench_window_fn fn;
	void *state;
	const char *const *only_allocs; /* NULL-terminated subset, or NULL */
	/* A Sheaf contender without the bulk calls is left out (with a note) instead
	 * of running the per-object fallback of bench_alloc_bulk under its name. */
	bool needs_bulk;
};
/* Runs the phase and records a figure per contender.  For a previous-revision
 * contender (bench_alloc.prev_of) measured beside its current counterpart, it
 * also records the ratio current / previous of each round's two windows (the
 * same round: adjacent windows), as contender BENCH_PREV_RATIO "<current>",
 * unit "ratio" (report.c, "Against the previous revision"). */
void bench_phase_run(struct bench_ctx *ctx, const struct bench_phase *ph);
#define BENCH_PREV_RATIO "prev-ratio:"
bool bench_is_prev_ratio(const struct bench_result *r);

/* ---- children ------------------------------------------------------------------ */

/* Run `self --child=<wl>:<arg>` with the extra environment @env (NULL or
 * "K=V" strings, NULL-terminated), merge the records it prints.  0 or -1. */
int bench_spawn_child(struct bench_ctx *ctx, const char *wl, const char *arg,
		      const char *const *env);

/* ---- memory -------------------------------------------------------------------- */

/* Resident set (VmRSS) and its peak (VmHWM) of this process, KiB. */
long bench_rss_kib(void);
long bench_hwm_kib(void);
/* Reset VmHWM to the current RSS (/proc/self/clear_refs "5").  0 or -1. */
int bench_hwm_reset(void);

/* ---- registry ------------------------------------------------------------------ */

/*
 * Orders in use (bench/workloads/): 10 fastpath.c, 20 xcpu.c, 30 rcu.c (seed
 * 000, written with the RCU code), 40 memory.c, 45 debugobjects.c (seed 002),
 * 50 mix.c, 60 shapes.c.
 */

struct bench_workload {
	const char *name;  /* --only=<name> */
	const char *title; /* section heading in the report */
	int order;         /* run and report order */
	const char *about; /* one paragraph for the report */
	void (*run)(struct bench_ctx *ctx);
	/* Entry of `--child=<name>:<arg>`; returns the exit status. */
	int (*child)(struct bench_ctx *ctx, const char *arg);
};
void bench_register(const struct bench_workload *w);
extern const struct bench_workload *bench_workloads[];
extern int bench_nworkloads;

#define BENCH_REGISTER(w)                                                 \
	__attribute__((constructor)) static void bench_register_##w(void) \
	{                                                                 \
		bench_register(&(w));                                     \
	}

/* ---- output (report.c) -------------------------------------------------------- */

void bench_write_csv(const struct bench_ctx *ctx, const char *path);
void bench_write_machine(const struct bench_ctx *ctx, const char *path);
void bench_write_report(const struct bench_ctx *ctx, const char *path, double elapsed_s);
/* The report's "Against the previous revision" (prev.c), and its counts: rows with
 * both figures, rows slower and faster beyond noise. */
void bench_write_prev(FILE *f, const struct bench_ctx *ctx);
void bench_prev_summary(const struct bench_ctx *ctx, int *rows, int *slower, int *faster);

#endif /* SHEAF_BENCH_H */
