/* SPDX-License-Identifier: MIT */
/*
 * base/base.h - the base layer's interface (layer 1 of src/README.md).
 *
 * Owns: the operating-system contract (os.c: mappings, time, the current CPU, the
 * allocation-free printer and the assertion handler), the one error reporter
 * (error.c, error.h: kind, cache, address, one line), the table of run-time options
 * (options.c), the CPU and NUMA topology (node.c), and the process-wide facts every
 * layer reads: sheaf_g.  Also the build constants (config.h) and intrusive lists
 * (list.h), which the layers above get through this header.
 *
 * May call: the C library and the kernel only.  Nothing here knows a cache.
 */
#ifndef SHEAF_LAYER_BASE_H
#define SHEAF_LAYER_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/config.h"
#include "base/error.h"
#include "base/list.h"
#include "base/lock.h"
#include "sheaf.h"
#include "sheaf_stats.h"

/* ---- os.c: system calls, printing, time ------------------------------------------- */
/* Fault injection for tests (docs/testing.md, "Fault injection"): the calls Sheaf makes
 * to the kernel, by kind.  Reachable only through these hidden functions (the static
 * library's tests and fuzz targets), never from the environment. */
enum sheaf_fault_kind {
	SHEAF_FAULT_MMAP, /* mmap and mremap */
	SHEAF_FAULT_MUNMAP,
	SHEAF_FAULT_MADVISE,
	SHEAF_FAULT_MEMBARRIER,
	SHEAF_FAULT_THREAD, /* pthread_create */
	SHEAF_FAULT_NR
};
/* Make the @nth next call of kind @k fail (1: the next one; 0: disarm); with
 * @persistent, that call and every later one fail until disarmed. */
void sheaf_fault_arm(enum sheaf_fault_kind k, long nth, bool persistent);
void sheaf_fault_disarm_all(void);
unsigned long sheaf_fault_hits(enum sheaf_fault_kind k);  /* injected failures so far */
unsigned long sheaf_fault_calls(enum sheaf_fault_kind k); /* calls of that kind so far */
bool sheaf_fault_fail(enum sheaf_fault_kind k);           /* the wrappers' test */
/* Failures of munmap and madvise seen (injected or real), by kind: memory that stayed
 * mapped.  Read by tests and the stats line. */
extern atomic_ulong sheaf_os_fail_counts[SHEAF_FAULT_NR];

/* The system calls, each wrapped once.  mmap/mremap return MAP_FAILED with errno set;
 * munmap/madvise return 0 or -errno and report the first failure of the process on
 * stderr; thread_create returns 0 or an error number, as pthread_create does. */
void *sheaf_sys_mmap(void *addr, size_t len, int prot, int flags);
void *sheaf_sys_mremap(void *old, size_t len, size_t nlen, int flags, void *new_addr);
int sheaf_sys_munmap(void *p, size_t len);
int sheaf_sys_madvise(void *p, size_t len, int advice);
int sheaf_sys_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);
/* Can a thread with the default attributes be created now?  One is created and joined
 * (for libraries that abort when they cannot create theirs: liburcu); errno is kept. */
bool sheaf_sys_thread_probe(void);

void *sheaf_os_map(size_t size);          /* zeroed RW pages, NULL + ENOMEM on failure */
int sheaf_os_unmap(void *p, size_t size); /* 0, or -errno (reported; the address range
                                               stays mapped, its memory purged) */
int sheaf_os_purge(void *p, size_t size); /* madvise(MADV_DONTNEED): 0 or -errno */
uint64_t sheaf_os_now_ns(void);
int sheaf_os_getcpu(void); /* current CPU (rseq cpu_id via glibc) */
/* Write a formatted line to stderr without allocating. */
void sheaf_os_print(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* strerror() without the locale (it may allocate: os.c); for reports made at any time. */
const char *sheaf_os_errstr(int e);
/* The start of a small file (sysfs, /proc) into @buf, at most @n - 1 bytes and a NUL:
 * the count read, or -1.  open/read, not stdio: fopen allocates its FILE with malloc,
 * which under the preload is ours.  Cancellation points (open, read, close). */
ssize_t sheaf_os_read_file(const char *path, char *buf, size_t n);

/* ---- options.c: one table of options (docs/options.md) ---------------------------- */
enum sheaf_option_id {
	SHEAF_OPT_STATS,
	SHEAF_OPT_ON_ERROR,
	SHEAF_OPT_SHEAF_CAPACITY,
	SHEAF_OPT_FAKE_NUMA,
	SHEAF_OPT_PERCPU,
	SHEAF_OPT_HEAP_GB,
	SHEAF_OPT_PURGE_ORDER,
	SHEAF_OPT_PURGE_MS,
	SHEAF_OPT_BARN_MAX_FULL,
	SHEAF_OPT_BARN_MAX_EMPTY,
	SHEAF_OPT_BARN_BYTES,
	SHEAF_OPT_BARN_EWMA,
	SHEAF_OPT_KERNEL_COMPAT,
	SHEAF_OPT_SLAB_DEBUG,
	SHEAF_OPT_RCU_BARRIER,
	SHEAF_OPT_VERBOSE,
	SHEAF_OPT_DEBUG_OBJECTS,
	SHEAF_OPT_DEBUG_OBJECTS_POOL,
	SHEAF_OPT_REAP_MS,
	SHEAF_OPT_FREE_CHECKS,
	SHEAF_OPT_NR
};
void sheaf_options_init(void);
bool sheaf_options_secure(void); /* AT_SECURE: the environment is ignored */
long sheaf_option_long(enum sheaf_option_id id);
const char *sheaf_option_str(enum sheaf_option_id id);
void sheaf_options_print(FILE *f);

/* ---- Process-wide facts (defined in os.c) ------------------------------------------ */
struct sheaf_globals {
	atomic_int init_state; /* 0 none, 1 in progress, 2 done; written by sheaf_init
				       (cache/), read by every layer */
	int ncpus;             /* possible CPUs (node.c) */
	int nnodes;            /* nodes, real or fake (node.c) */
	int node_has_mem[SHEAF_MAX_NODES];
	int node_has_cpu[SHEAF_MAX_NODES];
	int node_mem_nid[SHEAF_MAX_NODES]; /* nearest node with memory */
	int *cpu_node;                     /* [ncpus] */
	bool fake_numa;
};
extern struct sheaf_globals sheaf_g;

/* ---- node.c: topology (D3) --------------------------------------------------------- */
int sheaf_node_topology_init(void);
static inline int sheaf_cpu_to_node(int cpu)
{
	return (cpu >= 0 && cpu < sheaf_g.ncpus) ? sheaf_g.cpu_node[cpu] : 0;
}
int sheaf_node_current(void); /* node of the calling thread's CPU */

#endif /* SHEAF_LAYER_BASE_H */
