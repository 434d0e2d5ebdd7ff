/* SPDX-License-Identifier: MIT */
/*
 * workloads.h - what the workloads share: the driver's interface and the
 * pieces one workload runs for another (the memory workload reuses the mix and
 * the cross-CPU hand-off).
 *
 * Adding a workload: write bench/workloads/<name>.c with a static struct
 * bench_workload and BENCH_REGISTER(it); CMake picks up every .c file in
 * bench/workloads.
 */
#ifndef SHEAF_BENCH_WORKLOADS_H
#define SHEAF_BENCH_WORKLOADS_H

#include "driver.h"

/* ---- shared workload pieces ------------------------------------------------------ */

/* The malloc mix (mix.c), also run by the memory workload: two pinned
 * threads, @ops malloc+free pairs each with random sizes, a quarter of the
 * frees done by the other thread.  @wide: sizes up to 64 KiB instead of 1 KiB.
 * Returns ns per pair per thread, <0 on failure. */
double bench_mix_window(struct bench_pool *p, uint64_t ops, bool wide, uint64_t seed,
			uint64_t max_ns);

/* The producer/consumer hand-off (xcpu.c), also run by the memory
 * workload: @n objects (a multiple of @burst <= 64) allocated on
 * bench_cpu[0], freed on bench_cpu[1].  ns per object, <0 on failure.
 * @max_ns (0: none; the phases use 3x the window) cuts a window short when
 * the machine stalls it (other processes, vCPU moves): the figure is then
 * over the objects handed off so far, and such a window is among the slow
 * ones anyway.  bench_mix_window() takes the same cap. */
double bench_xcpu_window(struct bench_pool *p, struct bench_ring *ring, uint64_t n, unsigned burst,
			 uint64_t max_ns);

#endif /* SHEAF_BENCH_WORKLOADS_H */
