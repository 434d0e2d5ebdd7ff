/* SPDX-License-Identifier: MIT */
/*
 * test_rcu_qsbr.c - the liburcu flavour is the program's choice (issue 5): with
 * sheaf_rcu_set_flavor(SHEAF_RCU_QSBR) the grace periods are QSBR's, so a registered
 * online thread that has not announced a quiescent state holds back the reuse of
 * free_rcu objects; and a barrier called from an online QSBR thread goes offline for
 * the wait instead of deadlocking on itself.
 */
#include <pthread.h>
#include <stdatomic.h>

#include <urcu/urcu-qsbr.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_stats.h"

static struct sheaf_stats stats(struct sheaf_cache *c)
{
	struct sheaf_stats st = { .size = sizeof(st) };
	sheaf_stats_get(c, &st);
	return st;
}

static atomic_int reader_online, reader_quiesce, barrier_done;

static void *qsbr_reader(void *arg)
{
	(void)arg;
	urcu_qsbr_register_thread(); /* online, and in QSBR "inside" until it quiesces */
	atomic_store(&reader_online, 1);
	while (!atomic_load(&reader_quiesce))
		usleep(1000);
	urcu_qsbr_quiescent_state();
	urcu_qsbr_unregister_thread();
	return NULL;
}

static void *barrier_thread(void *arg)
{
	sheaf_cache_rcu_barrier(arg);
	atomic_store(&barrier_done, 1);
	return NULL;
}

static void test_qsbr(void)
{
	CHECK(sheaf_rcu_set_flavor(SHEAF_RCU_QSBR) == 0);
	struct sheaf_cache_args a = { .sheaf_capacity = 8 };
	struct sheaf_cache *c = sheaf_cache_create("rcu-qsbr", 64, &a);
	REQUIRE(c);
	enum {
		N = 100
	};
	void *o[N];
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
	}
	/* The main thread is a registered, online QSBR thread, as in a QSBR program. */
	urcu_qsbr_register_thread();
	for (int i = 0; i < N; i++)
		sheaf_cache_free_rcu(c, o[i]);
	CHECK(sheaf_rcu_set_flavor(SHEAF_RCU_MEMB) == -EBUSY);
	/* A barrier from this online thread: it must go offline to wait, else no grace
	 * period could ever end (this would hang; the ctest timeout would catch it). */
	sheaf_cache_rcu_barrier(c);
	CHECK(stats(c).rcu_inflight_objects == 0);
	CHECK(urcu_qsbr_read_ongoing()); /* back online afterwards */

	/* A reader that stays online without a quiescent state holds reuse back. */
	for (int i = 0; i < N; i++) {
		o[i] = sheaf_cache_alloc(c);
		REQUIRE(o[i]);
	}
	pthread_t r, b;
	REQUIRE(pthread_create(&r, NULL, qsbr_reader, NULL) == 0);
	while (!atomic_load(&reader_online))
		usleep(200);
	for (int i = 0; i < N; i++)
		sheaf_cache_free_rcu(c, o[i]);
	urcu_qsbr_thread_offline(); /* this thread must not hold the grace period itself */
	REQUIRE(pthread_create(&b, NULL, barrier_thread, c) == 0);
	usleep(100 * 1000);
	CHECKF(!atomic_load(&barrier_done), "barrier ended while a QSBR reader was online");
	CHECK(stats(c).rcu_inflight_objects == N);
	atomic_store(&reader_quiesce, 1);
	pthread_join(r, NULL);
	pthread_join(b, NULL);
	CHECK(atomic_load(&barrier_done));
	CHECK(stats(c).rcu_inflight_objects == 0);
	urcu_qsbr_thread_online();

	/* The global barrier from an online thread, and destroy with frees in flight. */
	void *x = sheaf_cache_alloc(c);
	sheaf_cache_free_rcu(c, x);
	sheaf_rcu_barrier();
	CHECK(stats(c).rcu_inflight_objects == 0);
	sheaf_cache_free_rcu(c, sheaf_cache_alloc(c));
	sheaf_cache_destroy(c);
	urcu_qsbr_unregister_thread();
}

int main(void)
{
	RUN(test_qsbr);
	return th_done();
}
