/* SPDX-License-Identifier: MIT */
/*
 * node.c - CPU and NUMA topology (D3; SHEAF_FAKE_NUMA in docs/options.md).
 *
 * Real topology comes from sysfs (/sys/devices/system/{cpu,node}); a fake one from
 * SHEAF_FAKE_NUMA so that tests and benchmarks exercise remote-node frees and memoryless
 * nodes on a one-node machine: "N" puts CPU i on node i % N; "N:memoryless=1,3" also
 * makes nodes 1 and 3 memoryless (node 0 always keeps memory).  Every node with CPUs
 * gets a barn (D3); a memoryless node's slabs come from its nearest memory node.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

/* Parse a sysfs CPU/node list ("0-3,8,10-11") into a bitmap of @max bits. */
static int parse_list(const char *s, unsigned char *bits, int max)
{
	int hi = -1;
	while (*s && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b = a;
		if (end == s)
			return -1;
		s = end;
		if (*s == '-') {
			b = strtol(s + 1, &end, 10);
			s = end;
		}
		for (long i = a; i <= b && i < max; i++) {
			bits[i] = 1;
			if (i > hi)
				hi = (int)i;
		}
		if (*s == ',')
			s++;
	}
	return hi;
}

/* The first line of a sysfs file into @buf (sheaf_os_read_file: no allocation). */
static int read_line(const char *path, char *buf, size_t n)
{
	if (sheaf_os_read_file(path, buf, n) <= 0)
		return -1;
	char *nl = strchr(buf, '\n');
	if (nl)
		nl[1] = '\0';
	return 0;
}

static int node_distance(int a, int b)
{
	if (sheaf_g.fake_numa)
		return a > b ? a - b : b - a;
	char path[128], buf[512];
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/distance", a);
	if (read_line(path, buf, sizeof(buf)) != 0)
		return a == b ? 10 : 20;
	char *s = buf;
	for (int i = 0; i < b; i++) {
		strtol(s, &s, 10);
	}
	return (int)strtol(s, NULL, 10);
}

/* SHEAF_FAKE_NUMA="N[:memoryless=list]": CPU c on node c % N.  The value was checked
 * when it was read (base/options.c fake_numa_ok: N in 1..SHEAF_MAX_NODES, memoryless
 * nodes in 1..N-1); the bounds below only keep the arrays safe. */
static void topology_fake(const char *fake, int ncpus)
{
	char *end;
	long n = strtol(fake, &end, 10);
	if (n < 1 || n > SHEAF_MAX_NODES)
		n = 1;
	sheaf_g.fake_numa = true;
	sheaf_g.nnodes = (int)n;
	for (int i = 0; i < n; i++)
		sheaf_g.node_has_mem[i] = 1;
	const char *ml = strstr(fake, "memoryless=");
	if (ml) {
		unsigned char bits[SHEAF_MAX_NODES] = { 0 };
		parse_list(ml + strlen("memoryless="), bits, SHEAF_MAX_NODES);
		for (int i = 1; i < n; i++) /* node 0 always keeps memory */
			if (bits[i])
				sheaf_g.node_has_mem[i] = 0;
	}
	for (int c = 0; c < ncpus; c++)
		sheaf_g.cpu_node[c] = (int)(c % n);
}

/* The real topology from sysfs: each node's CPUs, and which nodes have memory. */
static void topology_sysfs(int ncpus)
{
	char buf[4096];
	int nn = 1;
	/* Only the nodes the kernel lists as online: probing node0..node63 in turn cost
	 * 63 failed opens on a one-node machine, 0.6 ms at the start of every process
	 * under the preload (a shell script of 6,000 fork/execs: twice glibc's user
	 * time).  Without the list (a kernel without NUMA), every possible node id. */
	unsigned char online[SHEAF_MAX_NODES];
	if (read_line("/sys/devices/system/node/online", buf, sizeof(buf)) == 0) {
		memset(online, 0, sizeof(online));
		parse_list(buf, online, SHEAF_MAX_NODES);
	} else {
		memset(online, 1, sizeof(online));
	}
	for (int nid = 0; nid < SHEAF_MAX_NODES; nid++) {
		char path[128];
		if (!online[nid])
			continue;
		snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", nid);
		if (read_line(path, buf, sizeof(buf)) != 0)
			continue;
		unsigned char bits[4096] = { 0 };
		parse_list(buf, bits, 4096);
		for (int c = 0; c < ncpus && c < 4096; c++)
			if (bits[c])
				sheaf_g.cpu_node[c] = nid;
		if (nid + 1 > nn)
			nn = nid + 1;
	}
	sheaf_g.nnodes = nn;
	unsigned char mem[SHEAF_MAX_NODES] = { 0 };
	if (read_line("/sys/devices/system/node/has_memory", buf, sizeof(buf)) == 0)
		parse_list(buf, mem, SHEAF_MAX_NODES);
	else
		mem[0] = 1;
	int any = 0;
	for (int i = 0; i < nn; i++) {
		sheaf_g.node_has_mem[i] = mem[i];
		any |= mem[i];
	}
	if (!any)
		sheaf_g.node_has_mem[0] = 1;
}

/* D3: a memoryless node's slabs come from its nearest node with memory. */
static void topology_mem_nodes(int ncpus)
{
	for (int c = 0; c < ncpus; c++)
		sheaf_g.node_has_cpu[sheaf_g.cpu_node[c]] = 1;
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		if (sheaf_g.node_has_mem[i]) {
			sheaf_g.node_mem_nid[i] = i;
			continue;
		}
		int best = -1, bestd = 1 << 30;
		for (int j = 0; j < sheaf_g.nnodes; j++) {
			if (!sheaf_g.node_has_mem[j])
				continue;
			int d = node_distance(i, j);
			if (d < bestd) {
				bestd = d;
				best = j;
			}
		}
		sheaf_g.node_mem_nid[i] = best < 0 ? 0 : best;
	}
}

int sheaf_node_topology_init(void)
{
	static unsigned char cpus[4096];
	char buf[4096];
	int ncpus = 0;
	if (read_line("/sys/devices/system/cpu/possible", buf, sizeof(buf)) == 0)
		ncpus = parse_list(buf, cpus, 4096) + 1;
	if (ncpus <= 0) {
		long n = sysconf(_SC_NPROCESSORS_CONF);
		ncpus = n > 0 ? (int)n : 1;
	}
	sheaf_g.ncpus = ncpus;
	sheaf_g.cpu_node =
		sheaf_os_map(SHEAF_ALIGN_UP(sizeof(int) * (size_t)ncpus, SHEAF_PAGE_SIZE));
	if (!sheaf_g.cpu_node)
		return -ENOMEM;
	const char *fake = sheaf_option_str(SHEAF_OPT_FAKE_NUMA);
	if (fake && *fake)
		topology_fake(fake, ncpus);
	else
		topology_sysfs(ncpus);
	topology_mem_nodes(ncpus);
	return 0;
}

int sheaf_node_current(void)
{
	return sheaf_cpu_to_node(sheaf_os_getcpu());
}
