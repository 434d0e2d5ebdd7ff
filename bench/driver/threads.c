/* SPDX-License-Identifier: MIT */
/*
 * threads.c - pinning, sleeping, and the producer/consumer pair of pinned
 * threads (on EAL lcores for DPDK pools).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

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
	before = bench_thread_preempted();
	t->fn(t->arg);
	atomic_fetch_add(&bench_pair_preempted, bench_thread_preempted() - before);
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
