/* SPDX-License-Identifier: MIT */
/*
 * dpdk.c - DPDK's rte_mempool as the object-pool peer (docs/benchmarks.md).
 *
 * The per-lcore cache is used only by EAL lcore threads (rte_lcore_id() !=
 * LCORE_ID_ANY), so the EAL is started in the driver's process with lcores
 * 0-1: the main thread is lcore 0 (on bench_cpu[0]) and runs the producer and
 * the same-CPU workloads, lcore 1 runs the consumer through
 * rte_eal_remote_launch.  Arguments for an unprivileged-style VM: no
 * hugepages, no PCI scan, no telemetry socket, no shared config files, a
 * private file prefix.  (--in-memory is refused together with --no-huge by
 * DPDK 22.11, which turns the latter into legacy memory.)
 *
 * get/put (and their bulk forms) are inline in rte_mempool.h; they are wrapped
 * here in one out-of-line function each so the peer pays one call per operation
 * (per batch for the bulk forms), as the others do.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mempool.h>
#include <rte_version.h>

#include "driver.h"

#define DPDK_CACHE RTE_MEMPOOL_CACHE_MAX_SIZE

static int eal_state; /* 0 not tried, 1 up, -1 failed */
static char eal_why[200];
static char eal_rundir[512];

/* The EAL leaves its (empty, with --no-shconf) runtime directory behind:
 * clean up so that runs do not pile up directories in /var/run/dpdk. */
static void eal_fini(void)
{
	rte_eal_cleanup();
	if (eal_rundir[0])
		rmdir(eal_rundir);
}

int bench_dpdk_init(char *why, size_t whylen)
{
	char prefix[64], lcores[32];
	char *argv[16];
	int argc = 0;

	if (eal_state == 0) {
		snprintf(prefix, sizeof(prefix), "--file-prefix=sheaf-bench-%d", (int)getpid());
		snprintf(lcores, sizeof(lcores), "-l%d,%d", bench_cpu[0], bench_cpu[1]);
		argv[argc++] = (char *)"sheaf-bench";
		argv[argc++] = (char *)"--no-huge";
		argv[argc++] = (char *)"--no-pci";
		argv[argc++] = lcores;
		argv[argc++] = (char *)"--main-lcore";
		argv[argc++] = bench_cpu[0] == 0 ? (char *)"0" : (char *)"1";
		argv[argc++] = (char *)"--no-telemetry";
		argv[argc++] = (char *)"--no-shconf";
		argv[argc++] = prefix;
		argv[argc++] = (char *)"-m";
		argv[argc++] = (char *)"512";
		argv[argc++] = (char *)"--log-level=*:error";
		argv[argc] = NULL;
		if (bench_cpu[0] > 1 || bench_cpu[1] > 1 || bench_cpu[0] == bench_cpu[1]) {
			snprintf(eal_why, sizeof(eal_why), "needs CPUs 0 and 1 (have %d and %d)",
				 bench_cpu[0], bench_cpu[1]);
			eal_state = -1;
		} else if (rte_eal_init(argc, argv) < 0) {
			snprintf(eal_why, sizeof(eal_why), "rte_eal_init: %s",
				 rte_strerror(rte_errno));
			eal_state = -1;
		} else {
			eal_state = 1;
			snprintf(eal_rundir, sizeof(eal_rundir), "%s", rte_eal_get_runtime_dir());
			atexit(eal_fini);
		}
	}
	if (eal_state < 0)
		snprintf(why, whylen, "%s", eal_why);
	return eal_state > 0 ? 0 : -1;
}

void *bench_dpdk_pool_create(size_t size, size_t n, char *why, size_t whylen)
{
	static unsigned seq;
	char name[RTE_MEMPOOL_NAMESIZE];
	size_t total = n + 4 * DPDK_CACHE, pow = 1;
	struct rte_mempool *mp;

	/* The pool holds what the workload keeps alive plus what the two lcore
	 * caches may hold (up to 1.5 x cache size each); 2^k - 1 objects is
	 * the ring's optimum. */
	while (pow - 1 < total)
		pow <<= 1;
	snprintf(name, sizeof(name), "bench%u", seq++);
	mp = rte_mempool_create(name, (unsigned)(pow - 1), (unsigned)size, DPDK_CACHE, 0, NULL,
				NULL, NULL, NULL, SOCKET_ID_ANY, 0);
	if (!mp)
		snprintf(why, whylen, "rte_mempool_create(%zu x %zu B): %s", pow - 1, size,
			 rte_strerror(rte_errno));
	return mp;
}

void bench_dpdk_pool_free(void *mp)
{
	rte_mempool_free(mp);
}

void *bench_dpdk_get(void *mp)
{
	void *o;

	return rte_mempool_get(mp, &o) ? NULL : o;
}

void bench_dpdk_put(void *mp, void *obj)
{
	rte_mempool_put(mp, obj);
}

int bench_dpdk_get_bulk(void *mp, void **objs, unsigned n)
{
	return rte_mempool_get_bulk(mp, objs, n) ? -1 : 0;
}

void bench_dpdk_put_bulk(void *mp, void **objs, unsigned n)
{
	rte_mempool_put_bulk(mp, objs, n);
}

struct remote_arg {
	void (*fn)(void *);
	void *arg;
};

static int remote_main(void *x)
{
	struct remote_arg *r = x;

	r->fn(r->arg);
	return 0;
}

int bench_dpdk_run_pair(void (*local)(void *), void (*remote)(void *), void *arg)
{
	struct remote_arg r = { remote, arg };
	unsigned worker = rte_get_next_lcore(rte_get_main_lcore(), 1, 0);

	if (eal_state <= 0 || rte_lcore_id() != rte_get_main_lcore() || worker >= RTE_MAX_LCORE)
		return -1;
	if (rte_eal_remote_launch(remote_main, &r, worker))
		return -1;
	local(arg);
	return rte_eal_wait_lcore(worker) < 0 ? -1 : 0;
}

const char *bench_dpdk_version(void)
{
	return rte_version();
}
