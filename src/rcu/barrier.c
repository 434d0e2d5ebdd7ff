/* SPDX-License-Identifier: MIT */
/*
 * barrier.c - the per-cache and the global RCU barriers (K§4.4, D5) and the deferred
 * page frees of SHEAF_TYPESAFE_BY_RCU caches (rcu_free.c has the path of an object
 * and the rules of liburcu that both files keep).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "rcu/rcu_impl.h"

/* ---- Barriers (K§4.4, D5) ------------------------------------------------------------ */

atomic_ulong rcu_take_seq;
/* This thread is returning objects a barrier took (their free hooks, such as a debug
 * object's fix-up, may call a barrier): sheaf_rcu_barrier() must not wait for itself. */
static __thread int returning_taken; /* nesting depth */

/* What a barrier took back: units it returns itself after its own grace period.  The
 * partly filled pcs sheaves were never submitted (not in rcu_inflight_sheaves). */
struct taken {
	struct rcu_units u;
	long submitted;
	bool running; /* a ticket's callback was running: wait for it */
	uint64_t running_seq;
};

static void take_one(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	struct taken *tk = arg;
	sheaf_mutex_lock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
	struct sheaf_sheaf *s = pcs->rcu_free;
	pcs->rcu_free = NULL;
	if (s && s->size) {
		sheaf_stat_atomic(c, SHEAF_STAT_RCU_SHEAF_QUEUED, 1);
		sheaf_list_add_tail(&s->link, &tk->u.sheaves);
		tk->u.units++;
	} else if (s) {
		s->flags &= ~SHEAF_SH_RCU;
		sheaf_sheaf_free(c, s);
	}
	sheaf_mutex_unlock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
}

/* Take back everything of @c that waits for a grace period (see the top). */
static void cache_take(struct sheaf_cache *c, struct taken *tk)
{
	struct rcu_state *st = c->rcu_priv;
	units_init(&tk->u);
	tk->submitted = 0;
	tk->running = false;
	/* Before anything is taken: a global barrier that finds no unit of @c left
	 * waits for this one to return what it took (sheaf_rcu_barrier). */
	atomic_store(&st->taker, atomic_fetch_add(&rcu_take_seq, 1) + 1);
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	sheaf_pcs_for_each(c, take_one, tk);
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);

	sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	if (st->fb) {
		struct rcu_batch *b = st->fb;
		st->fb = NULL;
		sheaf_stat_atomic(c, SHEAF_STAT_RCU_FALLBACK_BATCH, 1);
		b->next = tk->u.batches;
		tk->u.batches = b;
		tk->u.units++;
	}
	tk->submitted = st->next.units;
	units_splice(&tk->u, &st->next);
	struct rcu_ticket *t = st->ticket;
	if (t) {
		int expect = TICKET_OPEN;
		if (atomic_compare_exchange_strong(&t->state, &expect, TICKET_CLAIMING)) {
			/* The callback will only free the ticket, once it reads ORPHANED: the
			 * last touch of @t here is that store. */
			tk->submitted += t->u.units;
			units_splice(&tk->u, &t->u);
			st->ticket = NULL;
			atomic_store_explicit(&t->state, TICKET_ORPHANED, memory_order_release);
		} else {
			tk->running = true;
			tk->running_seq = st->ticket_seq;
		}
	}
	sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
}

/* One grace period in this thread, then return what was taken. */
static void taken_finish(struct sheaf_cache *c, const struct rcu_ops *ops, struct taken *tk)
{
	if (tk->u.units) {
		ops->sync();
		returning_taken++;
		long objs = rcu_units_gp_done(c, &tk->u);
		returning_taken--;
		atomic_fetch_sub(&c->rcu_inflight_sheaves, tk->submitted);
		atomic_fetch_sub(&c->rcu_inflight_objects, objs);
	}
	atomic_store(&((struct rcu_state *)c->rcu_priv)->taker, 0);
	if (tk->running) {
		struct rcu_state *st = c->rcu_priv;
		sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
		while (st->ticket && st->ticket_seq == tk->running_seq)
			pthread_cond_wait(&st->cv, &st->lock);
		sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
	}
}

bool rcu_barrier_in_reader(const struct sheaf_cache *c)
{
	const struct rcu_ops *ops = rcu_ops_cur();
	if (rcu_is_qsbr(ops) || !ops->ongoing())
		return false;
	return rcu_wait_prepare(ops, c) < 0; /* reports it */
}

/* The global modes' part of a cache's barrier: its rcu sheaves (@all_caches: every
 * cache's) handed to call_rcu, then liburcu's rcu_barrier().  With no barrier mutex
 * held: rcu_barrier() takes liburcu's call_rcu mutex, which a fork's prepare holds
 * (before_fork, rank RCU_WARM) while it waits for every cache's barrier mutex (rank
 * RCU_BARRIER); called under the mutex, a SHEAF_KERNEL_COMPAT cache's barrier or
 * destroy, or any under SHEAF_RCU_BARRIER=global, hung a concurrent fork() and itself
 * for good (until 2026-11-29). */
static void global_flush(struct sheaf_cache *c, const struct rcu_ops *ops, bool all_caches)
{
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	if (all_caches) {
		/* Seed 000 "before" (kvfree_rcu_barrier): every cache's rcu sheaves. */
		struct sheaf_list *pos;
		for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next)
			rcu_cache_flush_locked(
				sheaf_container_of(pos, struct sheaf_cache, cache_list), NULL);
		if (sheaf_list_empty(&c->cache_list))
			rcu_cache_flush_locked(c, NULL); /* not linked (any more) */
	} else {
		rcu_cache_flush_locked(c, NULL); /* Linux 7.0: this cache's sheaves */
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	/* K§4.4: the global rcu_barrier().  liburcu's returns at once inside a read-side
	 * section; rcu_wait_prepare() excluded that and took an online QSBR thread
	 * offline. */
	ops->barrier_all();
}

/* Both barriers keep errno: liburcu's waits (futex, poll) and usleep leave EINTR in it
 * when a signal interrupts them, and retry; the barrier cannot fail, and a call that
 * succeeds leaves errno as it was (README "Errors").  Under a timer signal,
 * sheaf_rcu_barrier returned with errno EINTR every time until 2026-11-29 (found by
 * fuzz_cache, whose libFuzzer runs a SIGALRM timer). */
SHEAF_API void sheaf_cache_rcu_barrier(struct sheaf_cache *c)
{
	if (!c || !sheaf_cache_check(c) || !c->rcu_priv)
		return; /* NULL: nothing to wait for; destroyed or foreign: reported */
	if (rcu_barrier_in_reader(c))
		return;
	struct rcu_state *st = c->rcu_priv;
	const char *mode = sheaf_option_str(SHEAF_OPT_RCU_BARRIER);
	bool all_caches = mode && !strcmp(mode, "global");
	bool global = all_caches || !c->policy.per_cache_rcu_barrier;
	/* D5: nothing in flight anywhere for this cache: return at once.  (The kernel's
	 * barrier always waits; so do the comparison modes.) */
	if (!global && atomic_load(&c->rcu_inflight_objects) == 0 &&
	    atomic_load(&c->rcu_inflight_sheaves) == 0)
		return;
	if (!(atomic_load(&rcu_flavor_word) & FLAVOR_WARM))
		return; /* no unit was ever submitted (rcu_use() comes first) */
	const struct rcu_ops *ops = rcu_ops_cur();
	int online = rcu_wait_prepare(ops, c);
	if (online < 0)
		return;
	int e = errno; /* kept (above) */

	/* No cancellation while the barrier holds its locks: pthread_cond_wait (a ticket's
	 * callback running, taken_finish) is a cancellation point, and a thread cancelled
	 * there (as sheaf_cache_destroy's caller can be) died holding st->lock and the barrier
	 * mutex; every later free_rcu, barrier, reaper pass and fork then hung. */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	if (global)
		global_flush(c, ops, all_caches);
	sheaf_mutex_lock(&st->barrier_mutex, SHEAF_LOCK_RCU_BARRIER);
	struct taken tk;
	cache_take(c, &tk);
	taken_finish(c, ops, &tk);
	sheaf_mutex_unlock(&st->barrier_mutex, SHEAF_LOCK_RCU_BARRIER);
	pthread_setcancelstate(cancel_state, NULL);
	rcu_wait_finish(ops, online);
	errno = e;
}

/* Is a per-cache barrier that took its units with take number @seq or earlier still
 * holding them?  Under caches_lock: a cache's rcu_state lives while it is listed. */
static bool takers_busy(unsigned long seq)
{
	bool busy = false;
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches && !busy; pos = pos->next) {
		struct rcu_state *st =
			sheaf_container_of(pos, struct sheaf_cache, cache_list)->rcu_priv;
		unsigned long t = st ? atomic_load(&st->taker) : 0;
		busy = t && t <= seq;
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	return busy;
}

SHEAF_API void sheaf_rcu_barrier(void)
{
	if (atomic_load(&sheaf_g.init_state) != 2)
		return;
	if (rcu_barrier_in_reader(NULL))
		return;
	if (!(atomic_load(&rcu_flavor_word) & FLAVOR_WARM))
		return;
	const struct rcu_ops *ops = rcu_ops_cur();
	int online = rcu_wait_prepare(ops, NULL);
	if (online < 0)
		return;
	int e = errno; /* kept, as in sheaf_cache_rcu_barrier */
	/* Every cache's units are handed to call_rcu now or, behind a ticket in flight, by
	 * that ticket's callback; two rcu_barrier() calls wait for both generations (the
	 * second ticket is queued before the first rcu_barrier() returns).  This also waits
	 * for the deferred page frees of TYPESAFE_BY_RCU caches. */
	int cancel_state; /* as in sheaf_cache_rcu_barrier: liburcu's barrier takes its locks */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	sheaf_cache_for_each(rcu_cache_flush_locked, NULL);
	ops->barrier_all();
	ops->barrier_all();
	/* A per-cache barrier of another thread may have taken units back before they
	 * reached liburcu (or claimed a ticket, whose callback then only frees it): they
	 * are back only when that barrier has returned them, after its own grace period.
	 * Those that took after this point found nothing of before the call.  Until
	 * 2026-11-29 this returned while such a barrier still held the objects. */
	unsigned long seq = atomic_load(&rcu_take_seq);
	while (!returning_taken && takers_busy(seq))
		usleep(100);
	pthread_setcancelstate(cancel_state, NULL);
	rcu_wait_finish(ops, online);
	errno = e;
}

/* ---- SHEAF_TYPESAFE_BY_RCU: slab pages go back after a grace period ------------------ */

/* The rcu_head is kept in the discarded slab's descriptor, which nothing else uses until
 * the pages are freed (its kind is UNUSED, so no buddy merges with it, and its page-map
 * entries are 0).  So deferring allocates nothing and cannot fail: before, a failed
 * allocation of a separate record kept the pages for good, silently. */
_Static_assert(sizeof(struct rcu_head) <= sizeof(((struct sheaf_slab *)0)->sl_rcu),
	       "rcu_head fits in a slab descriptor");

/* Deferred page frees issued and done, and the count of done ones at which a shrink's
 * purge is owed (0: none).  sheaf_cache_shrink() gives free pages to the OS at once, but
 * those of a TYPESAFE_BY_RCU cache reach the page heap only after the grace period, and
 * then waited for the decay (SHEAF_PURGE_MS, or for good with SHEAF_REAP_MS=0 in an idle
 * program): until 2026-11-29 shrink and sheaf_rcu_barrier() left 27 MB resident that the
 * program had freed.  The callback that brings back the last page of a shrink purges. */
static atomic_ulong pages_deferred, pages_back, purge_at;

static void deferred_pages_cb(struct rcu_head *head)
{
	struct sheaf_slab *s = sheaf_container_of((void *)head, struct sheaf_slab, sl_rcu);
	tsan_acquire(s);
	sheaf_page_free(s->sl_base, s->pg_order, s->pg_node);
	unsigned long done = atomic_fetch_add(&pages_back, 1) + 1;
	unsigned long at = atomic_load(&purge_at);
	if (at && done >= at && atomic_compare_exchange_strong(&purge_at, &at, 0))
		sheaf_page_purge_all();
	atomic_fetch_sub(&rcu_cbs_pending, 1);
}

void sheaf_rcu_shrunk(void)
{
	unsigned long target = atomic_load(&pages_deferred);
	unsigned long at = atomic_load(&purge_at);
	while (at < target && !atomic_compare_exchange_weak(&purge_at, &at, target))
		;
	/* Every page already back (maybe before purge_at was set): purge now, once. */
	at = target;
	if (atomic_load(&pages_back) >= target && atomic_compare_exchange_strong(&purge_at, &at, 0))
		sheaf_page_purge_all();
}

void sheaf_rcu_defer_pages(struct sheaf_cache *c, struct sheaf_slab *s)
{
	(void)c;
	atomic_fetch_add(&rcu_cbs_pending, 1);
	atomic_fetch_add(&pages_deferred, 1);
	tsan_release(s);
	/* The flavour was warmed when the cache was created (sheaf_rcu_cache_init). */
	rcu_use()->call((struct rcu_head *)(void *)s->sl_rcu, deferred_pages_cb);
}

/* liburcu's rule for libraries that use call_rcu(): callbacks must not outlive the
 * library's code (dlclose).  sheaf_cache_destroy() does not call rcu_barrier()
 * (D5), and a ticket a barrier orphaned still has its callback queued, so the library
 * waits here, at unload or process exit, and only when one of its callbacks is pending
 * (a program that just freed with free_rcu pays one rcu_barrier(), 10-20 ms, at exit).
 * Not inside a read-side critical section, where rcu_barrier() cannot wait; not in the
 * child of a fork, where liburcu's worker does not exist unless the program ran
 * liburcu's fork handlers (rcu_barrier() would never return); and a bounded number of
 * times, since other threads may still be freeing while the process exits. */
__attribute__((destructor)) static void rcu_free_unload(void)
{
	if (!atomic_load(&rcu_cbs_pending) || !(atomic_load(&rcu_flavor_word) & FLAVOR_WARM) ||
	    atomic_load(&rcu_warm_pid) != (int)getpid())
		return;
	const struct rcu_ops *ops = rcu_ops_cur();
	bool online = false;
	if (ops->ongoing()) {
		if (!rcu_is_qsbr(ops))
			return;
		ops->offline();
		online = true;
	}
	for (int i = 0; i < 3 && atomic_load(&rcu_cbs_pending); i++)
		ops->barrier_all(); /* a callback may queue the next ticket */
	if (online)
		ops->online();
}

/* Rank RCU_BARRIER, from cache.c's CACHES walk (caches_lock held): try-lock every
 * cache's barrier mutex; false (nothing held) when a barrier is running. */
bool sheaf_rcu_fork_trylock_barriers(void)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next) {
		struct rcu_state *st =
			sheaf_container_of(pos, struct sheaf_cache, cache_list)->rcu_priv;
		if (!st || sheaf_mutex_trylock(&st->barrier_mutex, SHEAF_LOCK_RCU_BARRIER))
			continue;
		/* Let go of those taken so far. */
		for (pos = pos->prev; pos != &sheaf_reg.caches; pos = pos->prev) {
			st = sheaf_container_of(pos, struct sheaf_cache, cache_list)->rcu_priv;
			if (st)
				sheaf_mutex_unlock(&st->barrier_mutex, SHEAF_LOCK_RCU_BARRIER);
		}
		return false;
	}
	return true;
}

void sheaf_rcu_fork_unlock_barriers(void)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.prev; pos != &sheaf_reg.caches; pos = pos->prev) {
		struct rcu_state *st =
			sheaf_container_of(pos, struct sheaf_cache, cache_list)->rcu_priv;
		if (st)
			sheaf_mutex_unlock(&st->barrier_mutex, SHEAF_LOCK_RCU_BARRIER);
	}
}
