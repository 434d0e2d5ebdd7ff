/* SPDX-License-Identifier: MIT */
/*
 * rcu_free.c - RCU-deferred free in sheaves with a per-cache barrier (D5;
 * K§4.2-4.4).  The RCU layer (rcu_free.c, barrier.c, through rcu_impl.h) is the only
 * code that includes liburcu, so that the RCU flavour is one layer's choice; the
 * barriers are in barrier.c.  docs/rcu.md has the
 * long version of this comment, with the liburcu obligations and the measurements.
 *
 * ==== Path of an object ====
 * sheaf_cache_free_rcu() appends the object to the calling context's rcu_free sheaf
 * (K§4.2).  A full sheaf is detached and submitted: it joins the cache's "next" list,
 * and whenever the cache has no grace-period ticket in flight, a ticket takes the whole
 * next list and is handed to call_rcu() as one unit.  After the grace period the ticket's
 * callback (liburcu's call_rcu worker thread) puts each sheaf into its node's barn as a
 * *full* sheaf, so the objects are reused without touching slabs, or, over the barn's
 * limit, flushes it to slabs (K§4.3); then it launches the next ticket if sheaves queued
 * up meanwhile.  When no sheaf can be had (no per-CPU state, no memory, a cache without
 * sheaves) objects go to a per-cache fallback batch of RCU_FALLBACK_BATCH pointers, which
 * is submitted like a sheaf: batched, never one call_rcu per object.  Only when not even
 * a batch can be allocated does free_rcu wait for a grace period itself, and only where
 * that is safe (free_sync()).
 *
 * Why tickets and not one call_rcu per sheaf (the kernel's way): a unit given to
 * call_rcu() belongs to liburcu until its callback runs, and liburcu's worker runs its
 * callbacks in batches at least 10 ms apart (it sleeps 10 ms after each batch, to
 * batch).  A barrier that had to wait for those callbacks would cost ~10 ms whatever the
 * cache.  With tickets, the sheaves stay on Sheaf's own lists, so the barrier can take
 * them back.
 *
 * ==== Per-cache barrier (D5) ====
 * sheaf_cache_rcu_barrier(c) takes, under the locks that guard them, everything of @c
 * that waits for a grace period: every pcs's partly filled rcu_free sheaf (walk under
 * pcs->rcu_lock), the fallback batch and the next list (rcu_state.lock), and the ticket
 * in flight if its callback has not started: the ticket's state goes OPEN -> CLAIMING
 * by compare-and-swap, the barrier moves the ticket's units out, then stores ORPHANED;
 * a callback that lost the compare-and-swap waits for ORPHANED and only frees the
 * ticket, never touching the cache.  Every object taken was freed before it was taken,
 * so one synchronize_rcu() in the calling thread, started afterwards, is a grace period
 * for all of them; the barrier then returns them itself.  If the ticket's callback won
 * the race (RUNNING), the barrier waits for it to finish.  Nothing here is global: no
 * rcu_barrier(), no other cache is looked at, and the barrier returns at once when the
 * cache has nothing in flight.  The walk holds sheaf_reg.caches_lock so that a thread
 * exiting concurrently (which unlinks its pcs, then drains it, both under caches_lock)
 * is either fully before or fully after it.
 *
 * For the comparison of seed 000, SHEAF_RCU_BARRIER=global makes the cache barrier (and
 * so destroy) do what kvfree_rcu_barrier() did before the per-cache fix: submit the rcu
 * sheaves of *every* cache, then rcu_barrier(); SHEAF_KERNEL_COMPAT does what Linux 7.0
 * does (K§4.4): submit this cache's sheaves, then the global rcu_barrier().  Both then
 * also run the per-cache steps above, which find (almost) nothing left.
 *
 * ==== liburcu's rules, and how they are kept ====
 *  - call_rcu() may be called without Sheaf locks only the first time: it creates the
 *    flavour's default call_rcu worker (malloc + pthread_create, which re-enter Sheaf
 *    when Sheaf is the process's malloc).  rcu_use() therefore creates that worker
 *    (get_default_call_rcu_data()) before the first submission, outside every lock;
 *    afterwards call_rcu() is a wait-free enqueue plus a futex wake and is called under
 *    rcu_state.lock.
 *  - liburcu asks call_rcu() callers to be registered (QSBR: online).  The read-side
 *    lock it takes only protects per-CPU call_rcu workers, which liburcu frees only in
 *    free_all_cpu_call_rcu_data(); Sheaf cannot register threads for the program (QSBR
 *    would stall grace periods), so sheaf.h states the same rule as liburcu.
 *  - A barrier never waits inside a read-side critical section (memb/mb: reported as a
 *    caller error, it would deadlock); a QSBR thread that is online is put offline for
 *    the wait, as liburcu's own rcu_barrier() and synchronize_rcu() do.
 *  - rcu_barrier() and synchronize_rcu() are only called with no Sheaf lock held
 *    (rcu_barrier() allocates).
 *  - Callbacks run on the call_rcu worker and use only barn, slab and metadata
 *    functions, never a pcs, so they are correct in the per-thread and per-CPU modes.
 *
 * Lock order (ranks of base/lock.h): RCU_BARRIER -> CACHES -> PCS_LIST / PERCPU ->
 * PCS_RCU -> BARN / LIST (getting an empty sheaf) -> RCU_STATE -> META_LIST.  Callbacks
 * take barn or list locks, then rcu_state.lock, never a pcs.
 *
 * TSan: the hand-off from the submitting thread to the callback goes through liburcu's
 * uninstrumented queue, so it is annotated with __tsan_release/__tsan_acquire on the
 * ticket (tsan_release()/tsan_acquire() below).
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "rcu/rcu_impl.h"

const struct rcu_ops rcu_flavors[] = {
	[SHEAF_RCU_MEMB] = { urcu_memb_call_rcu, urcu_memb_barrier, urcu_memb_synchronize_rcu,
			     urcu_memb_read_ongoing, urcu_memb_get_default_call_rcu_data, NULL,
			     NULL, urcu_memb_call_rcu_before_fork,
			     urcu_memb_call_rcu_after_fork_parent,
			     urcu_memb_call_rcu_after_fork_child },
	[SHEAF_RCU_MB] = { urcu_mb_call_rcu, urcu_mb_barrier, urcu_mb_synchronize_rcu,
			   urcu_mb_read_ongoing, urcu_mb_get_default_call_rcu_data, NULL, NULL,
			   urcu_mb_call_rcu_before_fork, urcu_mb_call_rcu_after_fork_parent,
			   urcu_mb_call_rcu_after_fork_child },
	[SHEAF_RCU_QSBR] = { urcu_qsbr_call_rcu, urcu_qsbr_barrier, urcu_qsbr_synchronize_rcu,
			     urcu_qsbr_read_ongoing, urcu_qsbr_get_default_call_rcu_data,
			     urcu_qsbr_thread_offline, urcu_qsbr_thread_online,
			     urcu_qsbr_call_rcu_before_fork, urcu_qsbr_call_rcu_after_fork_parent,
			     urcu_qsbr_call_rcu_after_fork_child },
};

/* The flavour (low byte) and whether it is in use (FLAVOR_USED): one word, so that
 * sheaf_rcu_set_flavor() and the first use cannot interleave.  FLAVOR_WARM is set once
 * the flavour's call_rcu worker exists. */
atomic_uint rcu_flavor_word = SHEAF_RCU_MEMB;

/* Callbacks of this library queued in liburcu and not finished (tickets, deferred page
 * frees): the library destructor waits for them (see rcu_free_unload()). */
atomic_long rcu_cbs_pending;
atomic_int rcu_warm_pid; /* the process whose call_rcu worker exists (not a fork child) */
/* Serialises the creation of the flavour's call_rcu worker (rcu_use) against fork: a
 * fork while another thread is inside get_default_call_rcu_data() would give the child
 * liburcu's call_rcu mutex held by a thread it does not have. */
static pthread_mutex_t warm_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- Flavour ----------------------------------------------------------------------- */

SHEAF_API int sheaf_rcu_set_flavor(enum sheaf_rcu_flavor f)
{
	if ((unsigned)f > SHEAF_RCU_QSBR)
		return -EINVAL;
	unsigned w = atomic_load(&rcu_flavor_word);
	for (;;) {
		if (w & FLAVOR_USED)
			return (w & FLAVOR_MASK) == (unsigned)f ? 0 : -EBUSY;
		if (atomic_compare_exchange_weak(&rcu_flavor_word, &w, (unsigned)f))
			return 0;
	}
}

/* The flavour, fixed from now on; its call_rcu worker exists when this returns, unless
 * no thread could be created for it (FLAVOR_WARM clear: nothing may be handed to
 * call_rcu(), the caller waits for the grace period itself; the next call tries
 * again).  Must be called with no Sheaf lock held unless FLAVOR_WARM is already set
 * (see the top). */
const struct rcu_ops *rcu_use(void)
{
	unsigned w = atomic_load_explicit(&rcu_flavor_word, memory_order_acquire);
	if (sheaf_likely(w & FLAVOR_WARM))
		return &rcu_flavors[w & FLAVOR_MASK];
	/* No cancellation while warm_lock is held: the probe's pthread_join is a
	 * cancellation point, and a thread with a cancel pending that made the process's
	 * first free_rcu died there holding the lock; every later free_rcu and fork() hung
	 * (until 2026-11-29). */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	sheaf_mutex_lock(&warm_lock, SHEAF_LOCK_RCU_WARM);
	w = atomic_fetch_or(&rcu_flavor_word, FLAVOR_USED) | FLAVOR_USED;
	const struct rcu_ops *ops = &rcu_flavors[w & FLAVOR_MASK];
	if (!(w & FLAVOR_WARM) && sheaf_sys_thread_probe()) {
		/* liburcu cannot fail to create its worker: it aborts the process
		 * (urcu_die) when pthread_create fails, e.g. at an address-space limit
		 * with no room for a stack.  Hence the probe. */
		(void)ops->warm(); /* thread-safe and idempotent in liburcu */
		atomic_store(&rcu_warm_pid, (int)getpid());
		atomic_fetch_or(&rcu_flavor_word, FLAVOR_WARM);
	}
	sheaf_mutex_unlock(&warm_lock, SHEAF_LOCK_RCU_WARM);
	pthread_setcancelstate(cancel_state, NULL);
	return ops;
}

bool sheaf_rcu_worker_start(void)
{
	(void)rcu_use();
	return rcu_worker_started();
}

/* Before waiting for a grace period: a QSBR thread that is online goes offline (else the
 * wait could never end), as liburcu's own synchronize_rcu() does; a memb/mb thread
 * inside a read-side section would deadlock: a caller error.  Returns -1 for that
 * error (reported), else whether the thread must be put back online afterwards. */
int rcu_wait_prepare(const struct rcu_ops *ops, const struct sheaf_cache *c)
{
	if (!ops->ongoing())
		return 0;
	if (rcu_is_qsbr(ops)) {
		ops->offline();
		return 1;
	}
	/* @c is NULL for the global barrier (sheaf_rcu_barrier): the line names no cache
	 * ("?") and no address. */
	sheaf_error(
		SHEAF_ERR_RCU, c ? c->name : NULL, c,
		"RCU barrier called inside an RCU read-side critical section (it would deadlock)");
	return -1;
}

void rcu_wait_finish(const struct rcu_ops *ops, int was_online)
{
	if (was_online > 0)
		ops->online();
}

/* ---- Double-free search (cache.c's sheaf_free_confirm) ------------------------------- */

static bool units_hold(const struct rcu_units *u, const void *obj)
{
	const struct sheaf_list *pos;
	for (pos = u->sheaves.next; pos != &u->sheaves; pos = pos->next) {
		const struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
		for (uint32_t i = 0; i < s->size; i++)
			if (s->objects[i] == obj)
				return true;
	}
	for (const struct rcu_batch *b = u->batches; b; b = b->next)
		for (uint32_t i = 0; i < b->n; i++)
			if (b->objs[i] == obj)
				return true;
	return false;
}

struct pending_arg {
	const void *obj;
	bool found;
};

static void pending_in_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	(void)c;
	struct pending_arg *a = arg;
	if (a->found)
		return;
	sheaf_mutex_lock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
	const struct sheaf_sheaf *s = pcs->rcu_free;
	for (uint32_t i = 0; s && i < s->size && !a->found; i++)
		a->found = s->objects[i] == a->obj;
	sheaf_mutex_unlock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
}

/* Does @obj wait for a grace period after a free_rcu?  Every place of the path at the
 * top except units a barrier took back (they are in its hands until it returns them)
 * and a ticket whose callback already runs. */
bool sheaf_rcu_pending(struct sheaf_cache *c, const void *obj)
{
	struct rcu_state *st = c->rcu_priv;
	if (!st)
		return false;
	struct pending_arg a = { obj, false };
	sheaf_pcs_for_each(c, pending_in_pcs, &a);
	if (a.found)
		return true;
	sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	a.found = units_hold(&st->next, obj);
	for (uint32_t i = 0; st->fb && i < st->fb->n && !a.found; i++)
		a.found = st->fb->objs[i] == obj;
	struct rcu_ticket *t = st->ticket;
	int open = TICKET_OPEN;
	if (!a.found && t && atomic_compare_exchange_strong(&t->state, &open, TICKET_SEARCHING)) {
		/* Frozen: its callback waits until the state is OPEN again. */
		a.found = units_hold(&t->u, obj);
		atomic_store(&t->state, TICKET_OPEN);
	}
	sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
	return a.found;
}

/* ---- Cache state ------------------------------------------------------------------- */

void sheaf_rcu_cache_init(struct sheaf_cache *c)
{
	struct rcu_state *st = sheaf_meta_alloc(sizeof(*st));
	if (st) {
		pthread_mutex_init(&st->lock, NULL);
		pthread_cond_init(&st->cv, NULL);
		pthread_mutex_init(&st->barrier_mutex, NULL);
		units_init(&st->next);
		atomic_init(&st->taker, 0);
		c->rcu_priv = st;
	}
	/* Without st, free_rcu still works through free_sync().  A TYPESAFE_BY_RCU cache
	 * submits page frees from slab_discard(), under list_lock: its creation started
	 * the worker (sheaf_rcu_worker_start), or failed. */
}

void sheaf_rcu_cache_fini(struct sheaf_cache *c)
{
	struct rcu_state *st = c->rcu_priv;
	if (!st)
		return;
	/* Also waits for the last callback to leave st->lock (ticket_cb()). */
	sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	sheaf_assert(!st->ticket && !st->next.units && !st->fb);
	sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cv);
	pthread_mutex_destroy(&st->barrier_mutex);
	sheaf_meta_free(st, sizeof(*st));
	c->rcu_priv = NULL;
}

/* ---- After the grace period (K§4.3) -------------------------------------------------- */

/* K§4.3 step 1 (__rcu_free_sheaf_prepare): the free hooks run now that the grace period
 * has ended, on objects whose contents are final.  The debug-objects check (it must see
 * every free), the sanitizers (the object becomes free for them now, track.h; one that
 * already was free is a double free), and a debug cache's checks and poison.  An object
 * a hook rejects (reported; SHEAF_ON_ERROR=warn leaks it) is dropped from @objs by
 * swapping in the last entry.  Returns the objects left. */
static bool mark_in_object(const struct sheaf_cache *c)
{
	return c->free_mark && c->mark_offset < c->object_size;
}

/* The free mark of an object whose grace period ended, in a cache that keeps the mark
 * in the object (free_rcu could not write it: readers may still read the object).
 * @kept: the objects of this unit already accepted.  False: a double free, reported. */
static bool mark_after_gp(struct sheaf_cache *c, void *o, void *const *kept, uint32_t nkept)
{
	const uintptr_t mark = sheaf_mark_value(o);
	if (sheaf_unlikely(*sheaf_mark_word(c, o) == mark)) {
		for (uint32_t j = 0; j < nkept; j++) {
			if (kept[j] == o) {
				sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, o,
					    "free_rcu of an object already free");
				return false;
			}
		}
		if (!sheaf_free_mark_check(c, o))
			return false;
	}
	*sheaf_mark_word(c, o) = mark;
	return true;
}

static uint32_t objs_prepare(struct sheaf_cache *c, void **objs, uint32_t n)
{
	void (*hook)(const void *, size_t) = sheaf_free_check_hook_get();
	if (!hook && !SHEAF_TRACK_ENABLED && !c->debug_flags && !mark_in_object(c))
		return n;
	for (uint32_t i = 0; i < n;) {
		void *o = objs[i];
		int drop = 0;
		if (hook)
			hook(o, c->object_size);
		if (sheaf_unlikely(sheaf_track_obj_free(c, o))) {
			sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, o,
				    "free_rcu of an object already free");
			drop = 1;
		} else if (mark_in_object(c)) {
			drop = !mark_after_gp(c, o, objs, i);
		} else if (c->debug_flags) {
			drop = sheaf_debug_slab_free(c, o, (const void *)sheaf_cache_free_rcu) != 0;
		}
		if (drop) {
			objs[i] = objs[--n];
			continue;
		}
		i++;
	}
	return n;
}

/* A sheaf whose grace period ended joins its barn as a full sheaf (K§4.3).  Returns
 * the objects it carried. */
static long sheaf_gp_done(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	long objs = s->size;
	s->flags &= ~SHEAF_SH_RCU;
	sheaf_list_init(&s->link);
	sheaf_stat_atomic(c, SHEAF_STAT_RCU_SHEAF_DONE, 1);
	s->size = objs_prepare(c, s->objects, s->size);
	struct sheaf_barn *b = c->node[s->node]->barn;
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	if (s->size && b->enabled && s->capacity == cap &&
	    sheaf_rd(b->nr_full) < sheaf_rd(b->max_full)) {
		/* A sheaf that lost objects in objs_prepare still counts as full (K§4.3). */
		sheaf_barn_put_full(b, s);
		sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT, 1);
	} else {
		if (s->size)
			sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT_FAIL, 1);
		sheaf_sheaf_flush(c, s, NULL);
		if (b->enabled && s->capacity == cap &&
		    sheaf_rd(b->nr_empty) < sheaf_rd(b->max_empty))
			sheaf_barn_put_empty(b, s);
		else
			sheaf_sheaf_free(c, s);
	}
	return objs;
}

static long batch_gp_done(struct sheaf_cache *c, struct rcu_batch *u)
{
	long objs = u->n;
	uint32_t n = objs_prepare(c, u->objs, u->n);
	sheaf_slab_free_bulk(c, u->objs, n);
	sheaf_meta_free(u, sizeof(*u));
	return objs;
}

/* Return every unit of @u to the allocator (their grace period has ended); returns the
 * objects they carried. */
long rcu_units_gp_done(struct sheaf_cache *c, struct rcu_units *u)
{
	long objs = 0;
	struct sheaf_list *pos, *tmp;
	sheaf_list_for_each_safe(pos, tmp, &u->sheaves) {
		struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
		sheaf_list_del(&s->link);
		objs += sheaf_gp_done(c, s);
	}
	while (u->batches) {
		struct rcu_batch *b = u->batches;
		u->batches = b->next;
		objs += batch_gp_done(c, b);
	}
	return objs;
}

static void ticket_cb(struct rcu_head *head);

/* Called with st->lock held: hand everything on the next list to a new ticket.  Without
 * memory for a ticket the units stay on the list until the next submission, callback or
 * barrier tries again. */
static void ticket_launch_locked(struct sheaf_cache *c, struct rcu_state *st)
{
	if (st->ticket || !st->next.units)
		return;
	struct rcu_ticket *t = sheaf_meta_alloc(sizeof(*t));
	if (!t)
		return;
	t->cache = c;
	atomic_init(&t->state, TICKET_OPEN);
	units_init(&t->u);
	units_splice(&t->u, &st->next);
	st->ticket = t;
	st->ticket_seq++;
	atomic_fetch_add(&rcu_cbs_pending, 1);
	tsan_release(t);
	rcu_ops_cur()->call(&t->head, ticket_cb);
}

static void ticket_cb(struct rcu_head *head)
{
	struct rcu_ticket *t = sheaf_container_of(head, struct rcu_ticket, head);
	tsan_acquire(t);
	int expect = TICKET_OPEN;
	while (!atomic_compare_exchange_strong(&t->state, &expect, TICKET_RUNNING) &&
	       expect == TICKET_SEARCHING) {
		sched_yield(); /* a double-free search reads the units: a few loads */
		expect = TICKET_OPEN;
	}
	if (expect != TICKET_OPEN) {
		/* A barrier took the units and returns them itself; the cache may be gone.
		 * Wait until the barrier is done with the ticket (a few stores under its
		 * lock), then free it. */
		while (atomic_load_explicit(&t->state, memory_order_acquire) != TICKET_ORPHANED)
			sched_yield();
		sheaf_meta_free(t, sizeof(*t));
		atomic_fetch_sub(&rcu_cbs_pending, 1);
		return;
	}
	struct sheaf_cache *c = t->cache;
	struct rcu_state *st = c->rcu_priv;
	long units = t->u.units;
	long objs = rcu_units_gp_done(c, &t->u);
	/* Everything that touches @c under st->lock, and nothing after it: a barrier that
	 * sees this ticket finish (or the gauges drop, for its early return) may destroy the
	 * cache at once, and sheaf_rcu_cache_fini() takes st->lock first. */
	sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	atomic_fetch_sub(&c->rcu_inflight_objects, objs);
	atomic_fetch_sub(&c->rcu_inflight_sheaves, units);
	st->ticket = NULL;
	ticket_launch_locked(c, st);
	pthread_cond_broadcast(&st->cv);
	sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
	sheaf_meta_free(t, sizeof(*t));
	atomic_fetch_sub(&rcu_cbs_pending, 1);
}

/* ---- Submission ---------------------------------------------------------------------- */

/* Submit a detached, non-empty sheaf (K§4.2 step 4, "before unlocking": the caller holds
 * pcs->rcu_lock, so a barrier's walk finds the sheaf either there or submitted). */
static void submit_sheaf(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	struct rcu_state *st = c->rcu_priv;
	sheaf_stat_atomic(c, SHEAF_STAT_RCU_SHEAF_QUEUED, 1);
	sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	sheaf_list_add_tail(&s->link, &st->next.sheaves);
	st->next.units++;
	atomic_fetch_add(&c->rcu_inflight_sheaves, 1);
	ticket_launch_locked(c, st);
	sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
}

/* Called under st->lock: submit a fallback batch. */
static void submit_batch_locked(struct sheaf_cache *c, struct rcu_state *st, struct rcu_batch *u)
{
	sheaf_stat_atomic(c, SHEAF_STAT_RCU_FALLBACK_BATCH, 1);
	u->next = st->next.batches;
	st->next.batches = u;
	st->next.units++;
	atomic_fetch_add(&c->rcu_inflight_sheaves, 1);
	ticket_launch_locked(c, st);
}

/* Last resort when not even a batch can be allocated: wait for a grace period here (the
 * kernel's head-less kvfree_rcu does the same), unless the caller is itself a reader
 * (memb/mb: inside a read-side section; QSBR: online), where waiting would deadlock or
 * end the caller's own protection.  Then the object is leaked, with a report: memory
 * that a reader may still use is never freed. */
static void free_sync(struct sheaf_cache *c, const struct rcu_ops *ops, void *obj)
{
	if (ops->ongoing()) {
		sheaf_os_print(
			"sheaf: cache '%s': no memory to defer free_rcu of %p inside an RCU reader; "
			"object leaked",
			c->name, obj);
	} else {
		int e = errno; /* a signal in the wait leaves EINTR: kept, as by the barriers */
		ops->sync();
		errno = e;
		if (objs_prepare(c, &obj, 1))
			sheaf_slab_free_bulk(c, &obj, 1);
	}
	atomic_fetch_sub(&c->rcu_inflight_objects, 1);
}

/* The fallback (K§4.1's classic batching): batched, one unit per batch. */
static void fallback_add(struct sheaf_cache *c, const struct rcu_ops *ops, void *obj)
{
	struct rcu_state *st = c->rcu_priv;
	if (!st) {
		atomic_fetch_add(&c->rcu_inflight_objects, 1);
		free_sync(c, ops, obj);
		return;
	}
	sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	atomic_fetch_add(&c->rcu_inflight_objects, 1); /* see sheaf_cache_free_rcu */
	struct rcu_batch *u = st->fb;
	if (!u) {
		/* Metadata allocation under st->lock: meta caches never take rcu locks. */
		u = sheaf_meta_alloc(sizeof(*u));
		st->fb = u;
	}
	if (u) {
		u->objs[u->n++] = obj;
		if (u->n == RCU_FALLBACK_BATCH) {
			st->fb = NULL;
			submit_batch_locked(c, st, u);
		}
	}
	sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
	if (!u)
		free_sync(c, ops, obj);
}

static void fallback_flush(struct sheaf_cache *c)
{
	struct rcu_state *st = c->rcu_priv;
	sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	struct rcu_batch *u = st->fb;
	st->fb = NULL;
	if (u)
		submit_batch_locked(c, st, u);
	sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
}

/* An empty sheaf for rcu_free (K§4.2 step 2): the empty spare, an empty barn sheaf, or a
 * new one.  Called with the pcs locked and pcs->rcu_lock held. */
static struct sheaf_sheaf *rcu_sheaf_get(struct sheaf_cache *c, struct sheaf_pcs *pcs, uint32_t cap)
{
	struct sheaf_sheaf *s = pcs->spare;
	if (s && s->size == 0 && s->capacity == cap) {
		pcs->spare = NULL;
		return s;
	}
	for (int tries = 0; tries < 4; tries++) {
		s = sheaf_barn_get_empty(sheaf_pcs_barn(c, pcs));
		if (!s)
			break;
		if (s->capacity == cap)
			return s;
		sheaf_sheaf_free(c, s); /* D2: sheaves of an old capacity drain lazily */
	}
	return sheaf_sheaf_new(c, cap);
}

/* The checks free_rcu makes before it takes the object: a caller error is reported
 * and false returned (nothing is taken). */
static bool free_rcu_checks(struct sheaf_cache *c, void *obj)
{
	if (!sheaf_cache_check(c) || !sheaf_slab_check_obj(c, obj, "free_rcu"))
		return false; /* reported (interior, foreign, wrong cache, bad handle) */
	if (SHEAF_TRACK_ASAN && sheaf_track_cache(c) && sheaf_track_asan_ok(c) &&
	    sheaf_track_is_poisoned(obj)) {
		/* Already free (ASan builds know it): a double free, caught before the grace
		 * period so the report names the caller. */
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj,
			    "free_rcu of an object already free");
		return false;
	}
	if (c->free_mark) {
		/* Already free (its mark, confirmed): a free then a free_rcu, or, where the
		 * mark lives past the object, a second free_rcu.  Only there can free_rcu
		 * mark the object now: a plain cache's readers may still read every byte
		 * of it until the grace period ends, when objs_prepare marks it. */
		if (!sheaf_free_mark_check(c, obj))
			return false;
		if (!mark_in_object(c))
			*sheaf_mark_word(c, obj) = sheaf_mark_value(obj);
	}
	return true;
}

/* The pcs's rcu_free sheaf, taken or made now (pcs and its rcu_lock held); NULL when
 * none can be had. */
static struct sheaf_sheaf *free_rcu_sheaf(struct sheaf_cache *c, struct sheaf_pcs *pcs,
					  uint32_t cap)
{
	struct sheaf_sheaf *s = pcs->rcu_free;
	if (!s) {
		s = rcu_sheaf_get(c, pcs, cap);
		if (s) {
			s->flags |= SHEAF_SH_RCU;
			s->node = pcs->node;
			pcs->rcu_free = s;
		}
	}
	return s;
}

SHEAF_API void sheaf_cache_free_rcu(struct sheaf_cache *c, void *obj)
{
	if (!obj || !free_rcu_checks(c, obj))
		return;
	const struct rcu_ops *ops = rcu_use();
	if (sheaf_unlikely(!rcu_worker_started())) {
		/* No thread could be made for the call_rcu worker: nothing can be deferred,
		 * the grace period is waited for here (as without memory for a batch). */
		atomic_fetch_add(&c->rcu_inflight_objects, 1);
		free_sync(c, ops, obj);
		return;
	}
	struct rcu_state *st = c->rcu_priv;
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	struct sheaf_pcs *pcs = (st && cap) ? sheaf_pcs_lock(c) : NULL;
	struct sheaf_sheaf *s = NULL;
	if (pcs) {
		sheaf_mutex_lock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
		s = free_rcu_sheaf(c, pcs, cap);
		if (!s) {
			sheaf_mutex_unlock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
			sheaf_pcs_unlock(c, pcs);
		}
	}
	if (!s) {
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_RCU_SHEAF_FAIL, 1);
		fallback_add(c, ops, obj);
		return;
	}
	if (sheaf_unlikely(sheaf_sheaf_top_is(s, obj))) {
		sheaf_mutex_unlock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
		sheaf_pcs_unlock(c, pcs);
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj,
			    "free_rcu of an object already free");
		return;
	}
	/* Counted under locks a fork's handlers hold (here and in fallback_add): counted
	 * earlier, a fork child could keep one object in flight for good (2026-11-29). */
	atomic_fetch_add(&c->rcu_inflight_objects, 1);
	sheaf_sheaf_push(s, obj);
	sheaf_stat_add(pcs, SHEAF_STAT_FREE_RCU_SHEAF, 1);
	if (s->size == s->capacity) {
		/* K§4.2 step 4: detach and submit before unlocking. */
		pcs->rcu_free = NULL;
		submit_sheaf(c, s);
	}
	sheaf_mutex_unlock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
	sheaf_pcs_unlock(c, pcs);
}

/* Detach and submit the pcs's partly filled rcu_free sheaf (under its rcu_lock). */
static void flush_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	sheaf_mutex_lock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
	struct sheaf_sheaf *s = pcs->rcu_free;
	pcs->rcu_free = NULL;
	if (s && s->size) {
		submit_sheaf(c, s);
	} else if (s) {
		s->flags &= ~SHEAF_SH_RCU;
		sheaf_sheaf_free(c, s);
	}
	sheaf_mutex_unlock(&pcs->rcu_lock, SHEAF_LOCK_PCS_RCU);
}

void sheaf_rcu_flush_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	if (c->rcu_priv)
		flush_pcs(c, pcs);
}

static void flush_one(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	(void)arg;
	flush_pcs(c, pcs);
}

/* Submit every partly filled rcu sheaf and the fallback batch of @c.  Caller holds
 * sheaf_reg.caches_lock (see the top: thread exit). */
void rcu_cache_flush_locked(struct sheaf_cache *c, void *arg)
{
	(void)arg;
	if (!c->rcu_priv)
		return;
	sheaf_pcs_for_each(c, flush_one, NULL);
	fallback_flush(c);
}

/* ---- Hooks in the layers below -------------------------------------------------------- */

void sheaf_rcu_init(void)
{
	sheaf_slab_hooks.defer_pages = sheaf_rcu_defer_pages;
	sheaf_percpu_hooks.rcu_flush_pcs = sheaf_rcu_flush_pcs;
	sheaf_percpu_hooks.rcu_pending = sheaf_rcu_pending;
}

/* ---- fork: liburcu's call_rcu worker, and ranks RCU_BARRIER, RCU_STATE (base/lock.h) --------
 *
 * liburcu's rule for fork (urcu/call-rcu.h): a process that uses call_rcu() calls
 * call_rcu_before_fork() before fork, and call_rcu_after_fork_parent() /
 * call_rcu_after_fork_child() after it.  Sheaf is the one calling call_rcu(), so it does
 * this itself.  Without it the worker may be inside synchronize_rcu() when fork copies
 * the process -- liburcu's reader registry then sits half moved onto the worker's stack,
 * and the child's first grace period crashed in wait_for_readers() -- and the child has
 * no worker, so its tickets would never come back.  before_fork waits until the worker
 * is paused between callbacks; after_fork_child unlocks liburcu's call_rcu mutex and
 * starts a new worker in the child, which takes over the callbacks queued in the parent.
 *
 * This is rank RCU_WARM, the first: the worker is paused before any Sheaf lock is
 * taken (its callbacks take barn, list, rcu_state and metadata locks), and the child's
 * worker is started after every other lock of the table is released in the child.  A
 * program must then not also register liburcu's call_rcu fork functions itself (they
 * take a mutex that stays held from before_fork to after_fork). */
static int fork_paused; /* written by the forking thread only, around fork() */

static void fork_take_warm(void)
{
	sheaf_mutex_lock(&warm_lock, SHEAF_LOCK_RCU_WARM);
	unsigned w = atomic_load(&rcu_flavor_word);
	fork_paused = (w & FLAVOR_WARM) && atomic_load(&rcu_warm_pid) == (int)getpid();
#if defined(__SANITIZE_THREAD__)
	/* ThreadSanitizer kills a child of a multi-threaded fork that starts a thread
	 * (die_after_fork), and after_fork_child starts the worker: TSan builds keep the
	 * worker running across fork, so their children must not wait for an RCU grace
	 * period (tests/stress/test_fork_modes.c does not in TSan builds). */
	fork_paused = 0;
#endif
	if (fork_paused)
		rcu_flavors[w & FLAVOR_MASK].before_fork();
}

static void fork_release_warm(bool child)
{
	if (fork_paused && child) {
		rcu_ops_cur()->after_fork_child();
		atomic_store(&rcu_warm_pid, (int)getpid());
	} else if (fork_paused) {
		rcu_ops_cur()->after_fork_parent();
	}
	fork_paused = 0;
	sheaf_mutex_unlock(&warm_lock, SHEAF_LOCK_RCU_WARM);
}

/* Rank RCU_STATE: every cache's rcu_state.lock (caches_lock is held by the walk). */
static void fork_take_state(void)
{
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next) {
		struct rcu_state *st =
			sheaf_container_of(pos, struct sheaf_cache, cache_list)->rcu_priv;
		if (st)
			sheaf_mutex_lock(&st->lock, SHEAF_LOCK_RCU_STATE);
	}
}

static void fork_release_state(bool child)
{
	(void)child;
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.prev; pos != &sheaf_reg.caches; pos = pos->prev) {
		struct rcu_state *st =
			sheaf_container_of(pos, struct sheaf_cache, cache_list)->rcu_priv;
		if (st)
			sheaf_mutex_unlock(&st->lock, SHEAF_LOCK_RCU_STATE);
	}
}

void sheaf_rcu_fork_register(void)
{
	static const struct sheaf_fork_ops warm = { fork_take_warm, fork_release_warm };
	static const struct sheaf_fork_ops state = { fork_take_state, fork_release_state };
	sheaf_fork_register(SHEAF_LOCK_RCU_WARM, &warm);
	sheaf_fork_register(SHEAF_LOCK_RCU_STATE, &state);
}
