/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_no_worker.c - free_rcu at an address-space limit that leaves no room for a
 * thread's stack.  liburcu aborts the process when it cannot create its call_rcu
 * worker ("Unrecoverable error: Resource temporarily unavailable", urcu_die), and the
 * first free_rcu of a process creates it: until 2026-11-29 that free_rcu (and the
 * creation of a TYPESAFE_BY_RCU cache) killed the program.  Now free_rcu waits for the
 * grace period itself, the TYPESAFE_BY_RCU cache's creation fails with ENOMEM, and
 * both work as usual once the limit is raised.
 */
#include <sys/resource.h>

#include "harness.h"
#include "sheaf.h"

#define MiB (1ul << 20)

static void no_worker(void *arg)
{
	(void)arg;
	struct sheaf_cache *c = sheaf_cache_create("rcu-nw", 64, NULL);
	REQUIRE(c);
	void *p = sheaf_cache_alloc(c);
	REQUIRE(p);
	struct rlimit saved, r;
	REQUIRE(getrlimit(RLIMIT_AS, &saved) == 0);
	r = saved;
	r.rlim_cur = th_vm_size() + 4 * MiB; /* less than a thread's 8 MiB stack */
	REQUIRE(setrlimit(RLIMIT_AS, &r) == 0);

	errno = 1234;
	sheaf_cache_free_rcu(c, p); /* aborted here */
	CHECK(errno == 1234);
	sheaf_cache_rcu_barrier(c);
	struct sheaf_cache_args a = { .flags = SHEAF_TYPESAFE_BY_RCU };
	errno = 0;
	struct sheaf_cache *t = sheaf_cache_create("rcu-nw-typesafe", 64, &a);
	CHECK(!t && errno == ENOMEM);

	REQUIRE(setrlimit(RLIMIT_AS, &saved) == 0);
	t = sheaf_cache_create("rcu-nw-typesafe", 64, &a);
	REQUIRE(t);
	void *q = sheaf_cache_alloc(t);
	REQUIRE(q);
	sheaf_cache_free_rcu(t, q);
	p = sheaf_cache_alloc(c);
	REQUIRE(p);
	sheaf_cache_free_rcu(c, p);
	sheaf_cache_destroy(t);
	sheaf_cache_destroy(c);
	fflush(NULL);
	_exit(th_done());
}

static void t_no_worker(void)
{
	/* A fresh process: the worker must not exist yet. */
	struct th_child r;
	th_run_child(no_worker, NULL, &r);
	CHECKF(r.exited && r.status == 0, "child: exit %d, signal %d, stderr: %s\n", r.status,
	       r.sig, r.err);
}

int main(void)
{
	if (SANITIZE_ADDRESS || SANITIZE_THREAD) {
		printf("skipped: the sanitizer's shadow memory does not fit an address-space limit\n");
		return 77;
	}
	RUN(t_no_worker);
	return th_done();
}
