/* SPDX-License-Identifier: MIT */
/*
 * test_lock_witness - the lock-rank table (src/lock.h, docs/locking.md) and its witness.
 *
 * In witness builds (SHEAF_DEBUG >= 1, the debug preset) a deliberate out-of-order
 * acquisition -- caches_lock (rank CACHES) taken while holding the page heap's lock
 * (rank HEAP) -- must abort with a report naming both locks; taking them in order, a
 * try-lock out of order and nested same-rank locks inside the fork walk must not.  In
 * other builds the checks compile away: the test then only checks the table itself.
 */
#include <pthread.h>

#include "harness.h"
#include "cache/cache.h"
#include "sheaf.h"

static void table_is_sane(void)
{
	/* Every rank has a distinct, non-empty name. */
	for (int i = 0; i < SHEAF_LOCK_NR; i++) {
		const char *a = sheaf_lock_name((enum sheaf_lock_id)i);
		CHECKF(a && *a && strcmp(a, "?"), "rank %d has no name", i);
		for (int j = 0; j < i; j++)
			CHECKF(strcmp(a, sheaf_lock_name((enum sheaf_lock_id)j)),
			       "ranks %d and %d share the name %s", i, j, a);
	}
	CHECK(SHEAF_LOCK_CACHES < SHEAF_LOCK_HEAP);
	CHECK(SHEAF_LOCK_LIST < SHEAF_LOCK_META_LIST);
	CHECK(SHEAF_LOCK_MALLOC_CLASS < SHEAF_LOCK_INIT);
	CHECK(!strcmp(sheaf_lock_name(SHEAF_LOCK_CACHES), "sheaf_reg.caches_lock"));
}

/* In a child: heap lock, then caches_lock -- the wrong order. */
static void wrong_order(void *arg)
{
	(void)arg;
	sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	fprintf(stderr, "took both\n");
	_exit(0);
}

/* In a child: the same two in order, a try-lock against the order, then releases. */
static void right_order(void *arg)
{
	(void)arg;
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	if (!sheaf_mutex_trylock(&m, SHEAF_LOCK_INIT)) /* never waits: allowed */
		_exit(3);
	sheaf_mutex_unlock(&m, SHEAF_LOCK_INIT);
	sheaf_mutex_unlock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	/* After releasing, anything goes again. */
	sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	sheaf_mutex_unlock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
	_exit(0);
}

/* In a child: two locks of one rank outside the fork walk. */
static void same_rank(void *arg)
{
	(void)arg;
	pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
	sheaf_mutex_lock(&a, SHEAF_LOCK_BARN);
	sheaf_mutex_lock(&b, SHEAF_LOCK_BARN);
	_exit(0);
}

/* In a child: releasing a lock the thread does not hold. */
static void release_unheld(void *arg)
{
	(void)arg;
	sheaf_witness_release(SHEAF_LOCK_BARN);
	_exit(0);
}

static void test_witness(void)
{
	REQUIRE(sheaf_cache_create("witness", 64, NULL)); /* the core is up */
	struct th_child r;
	th_run_child(right_order, NULL, &r);
	CHECKF(r.exited && r.status == 0, "in-order locking: exited %d status %d: %s", r.exited,
	       r.status, r.err);
	if (!SHEAF_WITNESS) {
		/* No check: the wrong order goes through (nothing else holds the locks);
		 * TSan's own detector would report it, rightly, so not under TSan. */
		if (!SANITIZE_THREAD) {
			th_run_child(wrong_order, NULL, &r);
			CHECKF(r.exited && r.status == 0 && strstr(r.err, "took both"), "%s",
			       r.err);
		}
		printf("# not a witness build (SHEAF_DEBUG=%d): out-of-order checks skipped\n",
		       SHEAF_DEBUG);
		return;
	}
	th_run_child(wrong_order, NULL, &r);
	CHECKF(r.signaled && r.sig == SIGABRT, "out-of-order: signaled %d sig %d exited %d: %s",
	       r.signaled, r.sig, r.exited, r.err);
	CHECKF(strstr(r.err, "lock order violation") &&
		       strstr(r.err, "taking sheaf_reg.caches_lock") &&
		       strstr(r.err, "while holding sheaf_heap.lock"),
	       "report names both locks: %s", r.err);
	CHECK(!strstr(r.err, "took both"));
	printf("# reported: %.*s", (int)strcspn(r.err, "\n") + 1, r.err);
	th_run_child(same_rank, NULL, &r);
	CHECKF(r.signaled && r.sig == SIGABRT && strstr(r.err, "taking barn->lock") &&
		       strstr(r.err, "while holding barn->lock"),
	       "same rank twice: %s", r.err);
	th_run_child(release_unheld, NULL, &r);
	CHECKF(r.signaled && r.sig == SIGABRT && strstr(r.err, "releasing barn->lock"),
	       "release of an unheld lock: %s", r.err);
}

/* A fork with caches in use goes through the whole walk (thousands of locks of a few
 * ranks) without a report, and the child can lock again. */
static void test_fork_walk(void)
{
	struct sheaf_cache *c = sheaf_cache_create("witness-fork", 128, NULL);
	REQUIRE(c);
	void *o = sheaf_cache_alloc(c);
	sheaf_cache_free_rcu(c, o);
	fflush(NULL);
	pid_t p = fork();
	REQUIRE(p >= 0);
	if (p == 0) {
		alarm(20);
		void *q = sheaf_cache_alloc(c);
		sheaf_cache_free(c, q);
		if (!SANITIZE_THREAD) /* TSan: no RCU worker in a child (src/rcu/rcu_free.c) */
			sheaf_cache_rcu_barrier(c);
		_exit(q ? 0 : 1);
	}
	int st;
	REQUIRE(waitpid(p, &st, 0) == p);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	sheaf_cache_rcu_barrier(c);
	sheaf_cache_destroy(c);
}

int main(void)
{
	RUN(table_is_sane);
	RUN(test_witness);
	RUN(test_fork_walk);
	return th_done();
}
