/* SPDX-License-Identifier: MIT */
/*
 * test_fork_early_atfork - a program's own pthread_atfork handlers, registered before
 * Sheaf starts, allocate and free through Sheaf (the object API and sheaf_malloc).
 *
 * glibc runs prepare handlers in the reverse order of registration and parent and child
 * handlers in order.  Sheaf registered its handlers when it started (its first cache),
 * so a handler registered earlier ran its prepare after Sheaf's, with every lock of
 * Sheaf held, and its parent and child handlers before Sheaf's released them: the first
 * allocation there waited for a lock its own thread held, and every fork hung.  Sheaf now
 * registers when it is loaded.  Each mode in a child process, with an alarm; a busy
 * thread keeps the caches' locks in use meanwhile.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_malloc.h"

static struct sheaf_cache *cache;
static void *held;
static atomic_int stop;

static void prepare(void)
{
	if (cache)
		held = sheaf_cache_alloc(cache);
}

static void release(void)
{
	if (cache) {
		sheaf_cache_free(cache, held);
		sheaf_free(sheaf_malloc(50));
	}
}

static void *busy(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		sheaf_cache_free(cache, sheaf_cache_alloc(cache));
	return NULL;
}

static void forks(void *arg)
{
	alarm(20); /* a fork that waits for its own lock never returns */
	setenv("SHEAF_PERCPU", arg, 1);
	/* Registered before anything of Sheaf ran in this process (the harness forked it
	 * from a parent that never called Sheaf). */
	if (pthread_atfork(prepare, release, release))
		_exit(2);
	cache = sheaf_cache_create("early-atfork", 64, NULL);
	pthread_t t;
	if (!cache || pthread_create(&t, NULL, busy, NULL))
		_exit(3);
	for (int i = 0; i < 50; i++) {
		pid_t p = fork();
		if (p == 0) {
			sheaf_cache_free(cache, sheaf_cache_alloc(cache));
			_exit(0);
		}
		int st;
		if (p < 0 || waitpid(p, &st, 0) != p || st != 0)
			_exit(4);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	_exit(0);
}

static void handlers_allocate(void)
{
	const char *modes[] = { "auto", "thread" };
	for (int i = 0; i < 2; i++) {
		struct th_child r;
		th_run_child(forks, (void *)modes[i], &r);
		CHECKF(r.exited && r.status == 0, "SHEAF_PERCPU=%s: %s %d (SIGALRM %d: hung)",
		       modes[i], r.exited ? "exit" : "signal", r.exited ? r.status : r.sig,
		       SIGALRM);
	}
}

int main(void)
{
	RUN(handlers_allocate);
	return th_done();
}
