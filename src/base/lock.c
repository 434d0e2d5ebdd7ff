/* SPDX-License-Identifier: MIT */
/*
 * lock.c - the lock-rank table's witness and the fork handlers that walk it (lock.h,
 * docs/locking.md).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/base.h"

static const char *const lock_names[SHEAF_LOCK_NR] = {
#define SHEAF_LOCK_NAME(id, name, file, protects, fork) [SHEAF_LOCK_##id] = name,
	SHEAF_LOCK_TABLE(SHEAF_LOCK_NAME)
#undef SHEAF_LOCK_NAME
};

const char *sheaf_lock_name(enum sheaf_lock_id id)
{
	return (unsigned)id < SHEAF_LOCK_NR ? lock_names[id] : "?";
}

/* The forking thread is inside the walk (see sheaf_fork_walking()). */
static __thread int tls_fork_walk;

bool sheaf_fork_walking(void)
{
	return tls_fork_walk != 0;
}

/* ---- Witness ----------------------------------------------------------------------- */

#if SHEAF_WITNESS
/* Locks of each rank the thread holds.  Zero-initialised TLS: valid even in a malloc
 * called before the thread's TLS image was copied (as malloc.c's tls_creating). */
static __thread unsigned tls_held[SHEAF_LOCK_NR];

static __attribute__((noreturn, cold, noinline)) void
witness_fail(const char *what, enum sheaf_lock_id id, enum sheaf_lock_id held)
{
	sheaf_os_print("sheaf: lock order violation: %s %s (rank %d) while holding %s (rank %d); "
		       "the order is in docs/locking.md",
		       what, sheaf_lock_name(id), (int)id + 1, sheaf_lock_name(held),
		       (int)held + 1);
	abort();
}

void sheaf_witness_acquire(enum sheaf_lock_id id)
{
	/* Every lock of rank >= id that is held is a violation, except in the fork walk,
	 * which takes many locks of one rank (in the order of its lists) on purpose. */
	int from = tls_fork_walk ? (int)id + 1 : (int)id;
	for (int r = SHEAF_LOCK_NR - 1; r >= from; r--)
		if (tls_held[r])
			witness_fail("taking", id, (enum sheaf_lock_id)r);
	tls_held[id]++;
}

void sheaf_witness_acquired_try(enum sheaf_lock_id id)
{
	tls_held[id]++;
}

void sheaf_witness_release(enum sheaf_lock_id id)
{
	if (sheaf_unlikely(tls_held[id] == 0)) {
		sheaf_os_print("sheaf: lock witness: releasing %s, which this thread does not hold",
			       sheaf_lock_name(id));
		abort();
	}
	tls_held[id]--;
}

bool sheaf_witness_holds(enum sheaf_lock_id id)
{
	return tls_held[id] != 0;
}
#else
bool sheaf_witness_holds(enum sheaf_lock_id id)
{
	(void)id;
	return false;
}
#endif

/* ---- fork ---------------------------------------------------------------------------- */

/* Set once per rank by its layer, before that rank can be used; read by the handlers. */
static const struct sheaf_fork_ops *_Atomic fork_ops[SHEAF_LOCK_NR];
/* The ranks the prepare handler took, so that parent and child release exactly those
 * (a layer registering between prepare and release is released only from then on). */
static bool fork_taken[SHEAF_LOCK_NR];

void sheaf_fork_register(enum sheaf_lock_id id, const struct sheaf_fork_ops *ops)
{
	atomic_store_explicit(&fork_ops[id], ops, memory_order_release);
}

/* Rank FORK: held across the whole walk (see sheaf_fork_settle()). */
static pthread_mutex_t fork_walk_lock = PTHREAD_MUTEX_INITIALIZER;

void sheaf_fork_settle(void)
{
	sheaf_mutex_lock(&fork_walk_lock, SHEAF_LOCK_FORK);
	sheaf_mutex_unlock(&fork_walk_lock, SHEAF_LOCK_FORK);
}

static void fork_prepare(void)
{
	sheaf_mutex_lock(&fork_walk_lock, SHEAF_LOCK_FORK);
	tls_fork_walk = 1;
	for (int r = 0; r < SHEAF_LOCK_NR; r++) {
		const struct sheaf_fork_ops *ops =
			atomic_load_explicit(&fork_ops[r], memory_order_acquire);
		fork_taken[r] = ops && ops->take;
		if (fork_taken[r])
			ops->take();
	}
}

static void fork_release(bool child)
{
	for (int r = SHEAF_LOCK_NR - 1; r >= 0; r--) {
		const struct sheaf_fork_ops *ops =
			atomic_load_explicit(&fork_ops[r], memory_order_acquire);
		if (fork_taken[r] && ops->release)
			ops->release(child);
		fork_taken[r] = false;
	}
	tls_fork_walk = 0;
	sheaf_mutex_unlock(&fork_walk_lock, SHEAF_LOCK_FORK);
}

static void fork_parent(void)
{
	fork_release(false);
}

static void fork_child(void)
{
	fork_release(true);
}

int sheaf_fork_handlers_install(void)
{
	static atomic_int state; /* 0 not yet, 1 being installed or done */
	if (atomic_load_explicit(&state, memory_order_acquire) || atomic_exchange(&state, 1))
		return 0;
	/* One registration for every lock of Sheaf: the order between ranks is the
	 * table's, whatever order the layers started in. */
	int r = pthread_atfork(fork_prepare, fork_parent, fork_child);
	if (r != 0)
		atomic_store(&state, 0);
	return r;
}

/* Registered when the library is loaded, not only when Sheaf starts: glibc runs the
 * prepare handlers in the reverse order of registration and the others in order, so a
 * handler the program registered before Sheaf's ran its prepare with every lock of
 * Sheaf held (and its parent and child handlers before they were let go): one that
 * allocated from Sheaf hung every fork.  Registered first, Sheaf's handlers are the last
 * prepare and the first release.  Before Sheaf starts the walk finds no rank registered. */
static void __attribute__((constructor)) fork_handlers_at_load(void)
{
	(void)sheaf_fork_handlers_install(); /* a failure is retried at start, as before */
}
