/* SPDX-License-Identifier: MIT */
/*
 * test_errno_kept.c - a successful sheaf_cache_alloc, alloc_bulk, prefill or refill
 * leaves errno as it was (sheaf.h, README "Bad input"), also when a step on the way
 * failed: the N-th mmap fails, once or from then on, for every N the workload reaches.
 * Until 2026-11-29 a refill that could not map a heap block left ENOMEM in errno while
 * the slab path (or the part of the refill that worked) served the call: an adversarial
 * sweep saw alloc, bulk and prefill succeed with errno 12.
 *
 * t_barrier_signals: the RCU barriers keep errno while a timer signal interrupts their
 * waits (liburcu's futex and poll, usleep, which leave EINTR and retry): until
 * 2026-11-29 sheaf_rcu_barrier returned with errno EINTR every time under a 200 us
 * SIGALRM timer (found by fuzz_cache: libFuzzer's -timeout runs one).
 */
#include <signal.h>
#include <string.h>
#include <sys/time.h>

#include "harness.h"
#include "base/base.h"
#include "sheaf.h"

#define MAGIC 4242

static int bad; /* in the child */

static void check_errno(const void *ok, const char *what, size_t size)
{
	if (ok && errno != MAGIC) {
		fprintf(stderr, "%s (%zu B) succeeded with errno %d\n", what, size, errno);
		bad++;
	}
}

static void ctor(void *p)
{
	*(char *)p = 0;
}

static void workload(struct sheaf_cache *c, size_t size)
{
	void *v[64];
	for (int k = 0; k < 12; k++) {
		errno = MAGIC;
		void *p = sheaf_cache_alloc(c);
		check_errno(p, "sheaf_cache_alloc", size);
	}
	size_t n = size > 100000 ? 3 : 64;
	errno = MAGIC;
	size_t got = sheaf_cache_alloc_bulk(c, n, v);
	check_errno(got ? v : NULL, "sheaf_cache_alloc_bulk", size);
	errno = MAGIC;
	struct sheaf_prefilled *pf = sheaf_cache_prefill(c, size > 100000 ? 2 : 20);
	check_errno(pf, "sheaf_cache_prefill", size);
	if (pf) {
		errno = MAGIC;
		int r = sheaf_cache_refill(c, &pf, size > 100000 ? 3 : 40);
		check_errno(r == 0 ? pf : NULL, "sheaf_cache_refill", size);
		sheaf_cache_return(c, pf);
	}
	/* The objects stay allocated: the next call needs new memory. */
}

static void run(void *arg)
{
	long nth = (long)(intptr_t)arg;
	static const size_t sizes[] = { 64, 4096, 40000, (1u << 20) - 16 };
	struct sheaf_cache *c[4];
	for (int i = 0; i < 4; i++) {
		struct sheaf_cache_args a = { .ctor = i == 3 ? ctor : NULL };
		c[i] = sheaf_cache_create("errno-kept", sizes[i], &a);
		REQUIRE(c[i]);
	}
	sheaf_fault_arm(SHEAF_FAULT_MMAP, nth > 0 ? nth : -nth, nth < 0);
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 4; i++)
			workload(c[i], sizes[i]);
	sheaf_fault_disarm_all();
	fflush(NULL);
	_exit(bad ? 1 : 0);
}

static void t_errno_kept(void)
{
	int failed = 0;
	for (long nth = 1; nth <= 40; nth++) {
		for (int persistent = 0; persistent < 2; persistent++) {
			struct th_child r;
			th_run_child(run, (void *)(intptr_t)(persistent ? -nth : nth), &r);
			if (!r.exited || r.status != 0) {
				if (failed++ < 3)
					fprintf(stderr,
						"# mmap %ld failing (%s): exit %d signal %d: %s",
						nth, persistent ? "from then on" : "once", r.status,
						r.sig, r.err);
			}
		}
	}
	CHECKF(failed == 0, "%d runs saw a success that changed errno\n", failed);
}

static void on_alarm(int sig)
{
	(void)sig;
}

static void barriers(void *arg)
{
	(void)arg;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm; /* no SA_RESTART: interrupted waits see EINTR */
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { { 0, 200 }, { 0, 200 } };
	setitimer(ITIMER_REAL, &it, NULL);
	struct sheaf_cache *c = sheaf_cache_create("errno-barrier", 64, NULL);
	REQUIRE(c);
	int per_cache = 0, global = 0;
	for (int i = 0; i < 100; i++) {
		void *p = sheaf_cache_alloc(c);
		REQUIRE(p);
		sheaf_cache_free_rcu(c, p);
		errno = MAGIC;
		sheaf_cache_rcu_barrier(c);
		per_cache += errno != MAGIC;
		p = sheaf_cache_alloc(c);
		REQUIRE(p);
		sheaf_cache_free_rcu(c, p);
		errno = MAGIC;
		sheaf_rcu_barrier();
		global += errno != MAGIC;
	}
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	sheaf_cache_destroy(c);
	if (per_cache || global)
		fprintf(stderr,
			"errno changed by %d of 100 sheaf_cache_rcu_barrier, %d of 100 "
			"sheaf_rcu_barrier\n",
			per_cache, global);
	fflush(NULL);
	_exit(per_cache || global ? 1 : 0);
}

static void t_barrier_signals(void)
{
	struct th_child r;
	th_run_child(barriers, NULL, &r);
	CHECKF(r.exited && r.status == 0, "exit %d signal %d: %s", r.status, r.sig, r.err);
}

int main(void)
{
	RUN(t_errno_kept);
	RUN(t_barrier_signals);
	return th_done();
}
