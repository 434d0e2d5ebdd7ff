/* SPDX-License-Identifier: MIT */
/*
 * rcu_free.c - RCU-deferred free in sheaves with a per-cache barrier (DESIGN §4, D5;
 * K§4.2-4.4).  The only file that includes liburcu (STYLE R12).  docs/rcu.md has the
 * long version of this comment, with the liburcu obligations and the measurements.
 *
 * ==== Path of an object ====
 * sheaf_cache_free_rcu() appends the object to the calling context's rcu_free sheaf
 * (K§4.2).  A full sheaf is detached and handed to call_rcu() as one unit; its
 * rcu_head overlays the sheaf's barn-list link, which a detached sheaf does not use (the
 * kernel's union in struct slab_sheaf), so submitting needs no allocation and cannot
 * fail.  After the grace period the callback (liburcu's call_rcu worker thread) puts it
 * into its node's barn as a *full* sheaf, so the objects are reused without touching
 * slabs, or, over the barn's limit, flushes it to slabs (K§4.3).  When no sheaf can be
 * had (no per-CPU state, no memory, a cache without sheaves) objects go to a per-cache
 * fallback batch of RCU_FALLBACK_BATCH pointers, one call_rcu per batch.  Only when not
 * even a batch can be allocated does free_rcu wait for a grace period itself, and only
 * where that is safe (free_sync()).
 *
 * ==== Per-cache barrier (D5) ====
 * Every unit (sheaf or batch) in flight is counted in rcu_state.inflight[birth & 1],
 * where "birth" is the cache's barrier epoch read when the unit received its first
 * object (stored in sheaf->key, unused while a sheaf collects rcu objects, or in the
 * batch).  sheaf_cache_rcu_barrier() increments the epoch from E to E+1, detaches every
 * pcs's partly filled rcu_free sheaf and the fallback batch (each then counted under its
 * own birth <= E), and waits until inflight[E & 1] drains to zero.  Why that is enough:
 *  - an object whose free_rcu() returned before the barrier began is in a unit born at
 *    an epoch <= E (its birth was read before the object was added);
 *  - units born at E are counted before the barrier's walk has passed their pcs (a
 *    detach and its count happen under pcs->rcu_lock, the walk takes every rcu_lock
 *    after the increment) or by the walk itself;
 *  - units born at E-1 (the other slot) were all counted before the previous barrier's
 *    walk ended, and that barrier, serialised by barrier_mutex, waited for them;
 *  - no unit can be born at E+2 while this barrier holds barrier_mutex, so the slot it
 *    waits on only shrinks once the walk is over.
 * The walk holds sheaf_g.caches_lock so that a thread exiting concurrently (which
 * unlinks its pcs, then drains it, both under caches_lock) is either fully before or
 * fully after the walk.  Nothing here is global: the barrier never calls rcu_barrier()
 * and returns at once when the cache has nothing in flight.
 *
 * For the comparison of seed 000, SHEAF_RCU_BARRIER=global makes the cache barrier
 * (and so destroy) do what kvfree_rcu_barrier() did before the per-cache fix: flush the
 * rcu sheaves of *every* cache, then rcu_barrier(); SHEAF_KERNEL_COMPAT does what Linux
 * 7.0 does (K§4.4): flush this cache's sheaves, then the global rcu_barrier().  Both
 * then also wait for this cache's count, which is zero by then unless a batch raced.
 *
 * ==== liburcu's rules, and how they are kept ====
 *  - call_rcu() may be called without Sheaf locks only the first time: it creates the
 *    flavour's default call_rcu worker (malloc + pthread_create, which re-enter Sheaf
 *    when Sheaf is the process's malloc).  rcu_use() therefore creates that worker
 *    (get_default_call_rcu_data()) before the first submission, outside every lock;
 *    afterwards call_rcu() is a wait-free enqueue plus a futex wake and is called under
 *    pcs->rcu_lock or rcu_state.lock, like the kernel's call_rcu before unlocking.
 *  - liburcu asks call_rcu() callers to be registered (QSBR: online).  The read-side
 *    lock it takes only protects per-CPU call_rcu workers, which liburcu frees only in
 *    free_all_cpu_call_rcu_data(); Sheaf cannot register threads for the program (QSBR
 *    would stall grace periods), so sheaf.h states the same rule as liburcu.
 *  - A barrier never waits inside a read-side critical section (memb/mb: reported as a
 *    caller error, it would deadlock); a QSBR thread that is online is put offline for
 *    the wait, as liburcu's own rcu_barrier() and synchronize_rcu() do.
 *  - rcu_barrier() allocates (calloc); it is only called with no Sheaf lock held.
 *  - Callbacks run on the call_rcu worker and use only barn, slab and metadata
 *    functions, never a pcs, so they are correct in the per-thread and per-CPU modes.
 *
 * Lock order: rcu_state.barrier_mutex -> sheaf_g.caches_lock -> cache->pcs_lock ->
 * pcs->rcu_lock -> barn/list locks (getting an empty sheaf) -> rcu_state.lock ->
 * metadata locks.  Callbacks take barn or list locks and rcu_state.lock, never a pcs.
 *
 * TSan: the hand-off from the submitting thread to the callback goes through liburcu's
 * uninstrumented queue, so it is annotated with __tsan_release/__tsan_acquire on the
 * unit (tsan_release()/tsan_acquire() below).
 */
#include <errno.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "internal.h"
#include "track.h"

#define RCU_FALLBACK_BATCH 64

/* Each flavour's header maps the generic names (call_rcu, ...) to its own, so only one
 * can be included per file; the other flavours' entry points are declared here with
 * the signatures of liburcu's ABI (liburcu-mb.so, liburcu-qsbr.so, 0.13). */
void urcu_mb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
void urcu_mb_barrier(void);
void urcu_mb_synchronize_rcu(void);
int urcu_mb_read_ongoing(void);
struct call_rcu_data *urcu_mb_get_default_call_rcu_data(void);
void urcu_qsbr_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
void urcu_qsbr_barrier(void);
void urcu_qsbr_synchronize_rcu(void);
int urcu_qsbr_read_ongoing(void);
struct call_rcu_data *urcu_qsbr_get_default_call_rcu_data(void);
void urcu_qsbr_thread_offline(void);
void urcu_qsbr_thread_online(void);

struct rcu_ops {
	void (*call)(struct rcu_head *head, void (*func)(struct rcu_head *head));
	void (*barrier_all)(void);          /* rcu_barrier(): every callback of the flavour */
	void (*sync)(void);                 /* synchronize_rcu() */
	int (*ongoing)(void);               /* memb/mb: inside a read-side section; qsbr: online */
	struct call_rcu_data *(*warm)(void); /* get_default_call_rcu_data() */
	void (*offline)(void);              /* QSBR only */
	void (*online)(void);
};

static const struct rcu_ops flavors[] = {
	[SHEAF_RCU_MEMB] = { urcu_memb_call_rcu, urcu_memb_barrier, urcu_memb_synchronize_rcu,
			     urcu_memb_read_ongoing, urcu_memb_get_default_call_rcu_data, NULL, NULL },
	[SHEAF_RCU_MB] = { urcu_mb_call_rcu, urcu_mb_barrier, urcu_mb_synchronize_rcu, urcu_mb_read_ongoing,
			   urcu_mb_get_default_call_rcu_data, NULL, NULL },
	[SHEAF_RCU_QSBR] = { urcu_qsbr_call_rcu, urcu_qsbr_barrier, urcu_qsbr_synchronize_rcu,
			     urcu_qsbr_read_ongoing, urcu_qsbr_get_default_call_rcu_data, urcu_qsbr_thread_offline,
			     urcu_qsbr_thread_online },
};

/* The flavour (low byte) and whether it is in use (FLAVOR_USED): one word, so that
 * sheaf_rcu_set_flavor() and the first use cannot interleave.  FLAVOR_WARM is set once
 * the flavour's call_rcu worker exists. */
#define FLAVOR_MASK 0xffu
#define FLAVOR_USED 0x100u
#define FLAVOR_WARM 0x200u
static atomic_uint flavor_word = SHEAF_RCU_MEMB;

#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define tsan_acquire(p) __tsan_acquire(p)
#define tsan_release(p) __tsan_release(p)
#else
#define tsan_acquire(p) ((void)(p))
#define tsan_release(p) ((void)(p))
#endif

/* A fallback batch on its way through a grace period. */
struct rcu_batch {
	struct rcu_head head; /* first: liburcu hands it back */
	struct sheaf_cache *cache;
	uint32_t epoch;       /* birth epoch */
	uint32_t n;
	void *objs[RCU_FALLBACK_BATCH];
};

struct rcu_state {
	pthread_mutex_t lock;          /* protects inflight[] and fb; cv waits on it */
	pthread_cond_t cv;
	pthread_mutex_t barrier_mutex; /* serialises this cache's barriers */
	atomic_uint epoch;             /* changed under lock and barrier_mutex, read anywhere */
	long inflight[2];              /* units in flight by birth epoch parity; under lock */
	struct rcu_batch *fb;          /* fallback batch being filled; under lock */
};

/* A sheaf in flight (or collecting) keeps its birth epoch in ->key and its rcu_head over
 * ->link: neither is used by a sheaf that is not installed as main nor on a barn list. */
_Static_assert(sizeof(struct rcu_head) <= sizeof(struct sheaf_list), "rcu_head must fit over sheaf->link");
_Static_assert(_Alignof(struct rcu_head) <= _Alignof(struct sheaf_list), "rcu_head alignment");

static inline struct rcu_head *sheaf_rcu_head(struct sheaf_sheaf *s)
{
	return (struct rcu_head *)(void *)&s->link;
}
static inline struct sheaf_sheaf *rcu_head_sheaf(struct rcu_head *h)
{
	return sheaf_container_of((struct sheaf_list *)(void *)h, struct sheaf_sheaf, link);
}

struct deferred_pages {
	struct rcu_head head;
	void *mem;
	unsigned order;
	int nid;
};

/* ---- Flavour ----------------------------------------------------------------------- */

SHEAF_API int sheaf_rcu_set_flavor(enum sheaf_rcu_flavor f)
{
	if ((unsigned)f > SHEAF_RCU_QSBR)
		return -EINVAL;
	unsigned w = atomic_load(&flavor_word);
	for (;;) {
		if (w & FLAVOR_USED)
			return (w & FLAVOR_MASK) == (unsigned)f ? 0 : -EBUSY;
		if (atomic_compare_exchange_weak(&flavor_word, &w, (unsigned)f))
			return 0;
	}
}

/* The flavour, fixed from now on; its call_rcu worker exists when this returns.  Must
 * be called with no Sheaf lock held unless FLAVOR_WARM is already set (see the top). */
static const struct rcu_ops *rcu_use(void)
{
	unsigned w = atomic_load_explicit(&flavor_word, memory_order_acquire);
	if (sheaf_likely(w & FLAVOR_WARM))
		return &flavors[w & FLAVOR_MASK];
	w = atomic_fetch_or(&flavor_word, FLAVOR_USED) | FLAVOR_USED;
	const struct rcu_ops *ops = &flavors[w & FLAVOR_MASK];
	(void)ops->warm(); /* thread-safe and idempotent in liburcu */
	atomic_fetch_or(&flavor_word, FLAVOR_WARM);
	return ops;
}

/* Only after rcu_use() ran once (units exist). */
static inline const struct rcu_ops *rcu_ops_cur(void)
{
	return &flavors[atomic_load_explicit(&flavor_word, memory_order_relaxed) & FLAVOR_MASK];
}

static inline bool is_qsbr(const struct rcu_ops *ops) { return ops->offline != NULL; }

/* Before waiting for a grace period: a QSBR thread that is online goes offline (else the
 * wait could never end), as liburcu's own synchronize_rcu() does; a memb/mb thread
 * inside a read-side section would deadlock: a caller error.  Returns -1 for that
 * error (reported), else whether the thread must be put back online afterwards. */
static int wait_prepare(const struct rcu_ops *ops, const struct sheaf_cache *c)
{
	if (!ops->ongoing())
		return 0;
	if (is_qsbr(ops)) {
		ops->offline();
		return 1;
	}
	sheaf_report_error(c, c, "RCU barrier called inside an RCU read-side critical section (it would deadlock);"
				 " skipped, cache");
	return -1;
}

static void wait_finish(const struct rcu_ops *ops, int was_online)
{
	if (was_online > 0)
		ops->online();
}

/* ---- Cache state ------------------------------------------------------------------- */

void sheaf_rcu_cache_init(struct sheaf_cache *c)
{
	struct rcu_state *st = sheaf_meta_alloc(sizeof(*st));
	if (st) {
		pthread_mutex_init(&st->lock, NULL);
		pthread_cond_init(&st->cv, NULL);
		pthread_mutex_init(&st->barrier_mutex, NULL);
		c->rcu_priv = st;
	}
	/* Without st, free_rcu still works through free_sync().  A TYPESAFE_BY_RCU cache
	 * submits page frees from slab_discard(), under list_lock: start the worker now. */
	if (c->flags & SHEAF_TYPESAFE_BY_RCU)
		(void)rcu_use();
}

void sheaf_rcu_cache_fini(struct sheaf_cache *c)
{
	struct rcu_state *st = c->rcu_priv;
	if (!st)
		return;
	/* Also waits for the last callback's unit_done() to leave st->lock. */
	pthread_mutex_lock(&st->lock);
	sheaf_assert(st->inflight[0] == 0 && st->inflight[1] == 0 && !st->fb);
	pthread_mutex_unlock(&st->lock);
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
static uint32_t objs_prepare(struct sheaf_cache *c, void **objs, uint32_t n)
{
	void (*hook)(const void *, size_t) = sheaf_free_check_hook;
	if (!hook && !SHEAF_TRACK_ENABLED && !c->debug_flags)
		return n;
	for (uint32_t i = 0; i < n;) {
		void *o = objs[i];
		int drop = 0;
		if (hook)
			hook(o, c->object_size);
		if (sheaf_unlikely(sheaf_track_obj_free(c, o))) {
			sheaf_report_error(c, o, "double free (free_rcu) of");
			drop = 1;
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

static void unit_done(struct sheaf_cache *c, uint32_t epoch, long objs)
{
	struct rcu_state *st = c->rcu_priv;
	/* Everything under st->lock, and nothing after it: a barrier that sees the counts
	 * drop (waiting on inflight[], or reading the gauges for its early return) may
	 * destroy the cache at once, and sheaf_rcu_cache_fini() takes st->lock first, so
	 * it cannot free st before this critical section has ended. */
	pthread_mutex_lock(&st->lock);
	atomic_fetch_sub(&c->rcu_inflight_objects, objs);
	atomic_fetch_sub(&c->rcu_inflight_sheaves, 1);
	if (--st->inflight[epoch & 1] == 0)
		pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->lock);
}

/* A sheaf whose grace period ended joins its barn as a full sheaf (K§4.3).  Returns
 * the objects it carried. */
static long sheaf_gp_done(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	long objs = s->size;
	s->key = 0;
	s->flags &= ~SHEAF_SH_RCU;
	sheaf_list_init(&s->link);
	sheaf_stat_atomic(c, SHEAF_STAT_RCU_SHEAF_DONE, 1);
	s->size = objs_prepare(c, s->objects, s->size);
	struct sheaf_barn *b = &c->node[s->node]->barn;
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	if (s->size && b->enabled && s->capacity == cap && sheaf_rd(b->nr_full) < b->max_full) {
		/* A sheaf that lost objects in objs_prepare still counts as full (K§4.3). */
		sheaf_barn_put_full(b, s);
		sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT, 1);
	} else {
		if (s->size)
			sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT_FAIL, 1);
		sheaf_sheaf_flush(c, s, NULL);
		if (b->enabled && s->capacity == cap && sheaf_rd(b->nr_empty) < b->max_empty)
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

static void rcu_sheaf_cb(struct rcu_head *head)
{
	struct sheaf_sheaf *s = rcu_head_sheaf(head);
	tsan_acquire(s);
	struct sheaf_cache *c = s->cache;
	uint32_t epoch = (uint32_t)s->key;
	long objs = sheaf_gp_done(c, s);
	unit_done(c, epoch, objs);
}

static void rcu_batch_cb(struct rcu_head *head)
{
	struct rcu_batch *u = sheaf_container_of(head, struct rcu_batch, head);
	tsan_acquire(u);
	struct sheaf_cache *c = u->cache;
	uint32_t epoch = u->epoch;
	long objs = batch_gp_done(c, u);
	unit_done(c, epoch, objs);
}

/* ---- Submission ---------------------------------------------------------------------- */

/* Count a detached, non-empty sheaf under its birth epoch and hand it to call_rcu.
 * Called with pcs->rcu_lock held (see the top: counting under that lock is what the
 * barrier relies on; call_rcu under it is safe once rcu_use() warmed the flavour). */
static void submit_sheaf(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	struct rcu_state *st = c->rcu_priv;
	uint32_t epoch = (uint32_t)s->key;
	pthread_mutex_lock(&st->lock);
	st->inflight[epoch & 1]++;
	pthread_mutex_unlock(&st->lock);
	atomic_fetch_add(&c->rcu_inflight_sheaves, 1);
	sheaf_stat_atomic(c, SHEAF_STAT_RCU_SHEAF_QUEUED, 1);
	tsan_release(s);
	rcu_ops_cur()->call(sheaf_rcu_head(s), rcu_sheaf_cb);
}

/* Called under st->lock: count @u and hand it to call_rcu. */
static void submit_batch_locked(struct sheaf_cache *c, struct rcu_state *st, struct rcu_batch *u)
{
	st->inflight[u->epoch & 1]++;
	atomic_fetch_add(&c->rcu_inflight_sheaves, 1);
	sheaf_stat_atomic(c, SHEAF_STAT_RCU_FALLBACK_BATCH, 1);
	tsan_release(u);
	rcu_ops_cur()->call(&u->head, rcu_batch_cb);
}

/* Last resort when not even a batch can be allocated: wait for a grace period here (the
 * kernel's head-less kvfree_rcu does the same), unless the caller is itself a reader
 * (memb/mb: inside a read-side section; QSBR: online), where waiting would deadlock or
 * end the caller's own protection.  Then the object is leaked, with a report: memory
 * that a reader may still use is never freed. */
static void free_sync(struct sheaf_cache *c, const struct rcu_ops *ops, void *obj)
{
	if (ops->ongoing()) {
		sheaf_os_print("sheaf: cache '%s': no memory to defer free_rcu of %p inside an RCU reader; "
			       "object leaked",
			       c->name, obj);
	} else {
		ops->sync();
		if (objs_prepare(c, &obj, 1))
			sheaf_slab_free_bulk(c, &obj, 1);
	}
	atomic_fetch_sub(&c->rcu_inflight_objects, 1);
}

/* The fallback (K§4.1's classic batching): batched, one call_rcu per batch. */
static void fallback_add(struct sheaf_cache *c, const struct rcu_ops *ops, void *obj)
{
	struct rcu_state *st = c->rcu_priv;
	if (!st) {
		free_sync(c, ops, obj);
		return;
	}
	pthread_mutex_lock(&st->lock);
	struct rcu_batch *u = st->fb;
	if (!u) {
		/* Metadata allocation under st->lock: meta caches never take rcu locks. */
		u = sheaf_meta_alloc(sizeof(*u));
		if (u) {
			u->cache = c;
			u->epoch = atomic_load(&st->epoch);
			st->fb = u;
		}
	}
	if (u) {
		u->objs[u->n++] = obj;
		if (u->n == RCU_FALLBACK_BATCH) {
			st->fb = NULL;
			submit_batch_locked(c, st, u);
		}
	}
	pthread_mutex_unlock(&st->lock);
	if (!u)
		free_sync(c, ops, obj);
}

static void fallback_flush(struct sheaf_cache *c)
{
	struct rcu_state *st = c->rcu_priv;
	pthread_mutex_lock(&st->lock);
	struct rcu_batch *u = st->fb;
	st->fb = NULL;
	if (u)
		submit_batch_locked(c, st, u);
	pthread_mutex_unlock(&st->lock);
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

SHEAF_API void sheaf_cache_free_rcu(struct sheaf_cache *c, void *obj)
{
	if (!c || !obj)
		return;
	if (!sheaf_slab_check_obj(c, obj, "free_rcu"))
		return;
	if (SHEAF_TRACK_ASAN && sheaf_track_cache(c) && sheaf_track_asan_ok(c) && sheaf_track_is_poisoned(obj)) {
		/* Already free (ASan builds know it): a double free, caught before the grace
		 * period so the report names the caller. */
		sheaf_report_error(c, obj, "double free (free_rcu) of");
		return;
	}
	const struct rcu_ops *ops = rcu_use();
	atomic_fetch_add(&c->rcu_inflight_objects, 1);
	struct rcu_state *st = c->rcu_priv;
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	struct sheaf_pcs *pcs = (st && cap) ? sheaf_pcs_lock(c) : NULL;
	if (!pcs) {
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_RCU_SHEAF_FAIL, 1);
		fallback_add(c, ops, obj);
		return;
	}
	pthread_mutex_lock(&pcs->rcu_lock);
	struct sheaf_sheaf *s = pcs->rcu_free;
	if (!s) {
		s = rcu_sheaf_get(c, pcs, cap);
		if (s) {
			s->flags |= SHEAF_SH_RCU;
			s->node = pcs->node;
			s->key = atomic_load(&st->epoch); /* birth epoch, read under rcu_lock */
			pcs->rcu_free = s;
		}
	}
	if (!s) {
		pthread_mutex_unlock(&pcs->rcu_lock);
		sheaf_pcs_unlock(c, pcs);
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_RCU_SHEAF_FAIL, 1);
		fallback_add(c, ops, obj);
		return;
	}
	if (sheaf_unlikely(s->size && s->objects[s->size - 1] == obj)) {
		pthread_mutex_unlock(&pcs->rcu_lock);
		sheaf_pcs_unlock(c, pcs);
		atomic_fetch_sub(&c->rcu_inflight_objects, 1);
		sheaf_report_error(c, obj, "double free (free_rcu) of");
		return;
	}
	s->objects[s->size++] = obj;
	sheaf_stat_add(pcs, SHEAF_STAT_FREE_RCU_SHEAF, 1);
	if (s->size == s->capacity) {
		/* K§4.2 step 4: detach and submit before unlocking. */
		pcs->rcu_free = NULL;
		submit_sheaf(c, s);
	}
	pthread_mutex_unlock(&pcs->rcu_lock);
	sheaf_pcs_unlock(c, pcs);
}

/* Detach and submit the pcs's partly filled rcu_free sheaf (under its rcu_lock). */
static void flush_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	pthread_mutex_lock(&pcs->rcu_lock);
	struct sheaf_sheaf *s = pcs->rcu_free;
	pcs->rcu_free = NULL;
	if (s && s->size) {
		submit_sheaf(c, s);
	} else if (s) {
		s->flags &= ~SHEAF_SH_RCU;
		s->key = 0;
		sheaf_sheaf_free(c, s);
	}
	pthread_mutex_unlock(&pcs->rcu_lock);
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
 * sheaf_g.caches_lock (see the top: thread exit). */
static void cache_flush_locked(struct sheaf_cache *c, void *arg)
{
	(void)arg;
	if (!c->rcu_priv)
		return;
	sheaf_pcs_for_each(c, flush_one, NULL);
	fallback_flush(c);
}

/* What the per-cache barrier detached itself instead of submitting (see below). */
struct claimed {
	struct sheaf_list sheaves; /* through sheaf->link (a detached sheaf's link is free) */
	struct rcu_batch *batch;
	long objs;
};

static void claim_one(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	struct claimed *cl = arg;
	pthread_mutex_lock(&pcs->rcu_lock);
	struct sheaf_sheaf *s = pcs->rcu_free;
	pcs->rcu_free = NULL;
	if (s && s->size) {
		sheaf_list_add_tail(&s->link, &cl->sheaves);
		cl->objs += s->size;
	} else if (s) {
		s->flags &= ~SHEAF_SH_RCU;
		s->key = 0;
		sheaf_sheaf_free(c, s);
	}
	pthread_mutex_unlock(&pcs->rcu_lock);
}

/*
 * The per-cache barrier does not hand the partly filled sheaves it detaches to call_rcu:
 * liburcu's worker runs its callbacks in batches at least 10 ms apart (it sleeps 10 ms
 * after each batch, to batch), so waiting for it would cost ~10 ms per destroy whatever
 * the cache.  Every object in them was freed before the detach, so one synchronize_rcu()
 * in the calling thread, started after the detach, is a full grace period for all of
 * them; the barrier then returns them itself.  Units submitted earlier (full sheaves) are
 * still in liburcu's queue and are waited for through the epoch count.
 */
static void claimed_finish(struct sheaf_cache *c, const struct rcu_ops *ops, struct claimed *cl)
{
	if (sheaf_list_empty(&cl->sheaves) && !cl->batch)
		return;
	ops->sync();
	struct sheaf_list *pos, *tmp;
	sheaf_list_for_each_safe(pos, tmp, &cl->sheaves)
	{
		struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
		sheaf_list_del(&s->link);
		sheaf_stat_atomic(c, SHEAF_STAT_RCU_SHEAF_QUEUED, 1); /* queued on this thread's GP */
		sheaf_gp_done(c, s);
	}
	if (cl->batch) {
		sheaf_stat_atomic(c, SHEAF_STAT_RCU_FALLBACK_BATCH, 1);
		cl->objs += batch_gp_done(c, cl->batch);
	}
	atomic_fetch_sub(&c->rcu_inflight_objects, cl->objs);
}

/* ---- Barriers (K§4.4, D5) ------------------------------------------------------------ */

SHEAF_API void sheaf_cache_rcu_barrier(struct sheaf_cache *c)
{
	if (!c || !c->rcu_priv)
		return;
	struct rcu_state *st = c->rcu_priv;
	const char *mode = sheaf_option_str(SHEAF_OPT_RCU_BARRIER);
	bool all_caches = mode && !strcmp(mode, "global");
	bool global = all_caches || c->kernel_compat;
	/* D5: nothing in flight anywhere for this cache: return at once.  (The kernel's
	 * barrier always waits; so do the comparison modes.) */
	if (!global && atomic_load(&c->rcu_inflight_objects) == 0 && atomic_load(&c->rcu_inflight_sheaves) == 0)
		return;
	if (!(atomic_load(&flavor_word) & FLAVOR_USED))
		return; /* no free_rcu ever ran: nothing can be in flight */
	const struct rcu_ops *ops = rcu_ops_cur();
	int online = wait_prepare(ops, c);
	if (online < 0)
		return;

	pthread_mutex_lock(&st->barrier_mutex);
	pthread_mutex_lock(&st->lock);
	uint32_t old = atomic_load(&st->epoch);
	atomic_store(&st->epoch, old + 1);
	pthread_mutex_unlock(&st->lock);

	struct claimed cl = { .batch = NULL, .objs = 0 };
	sheaf_list_init(&cl.sheaves);
	pthread_mutex_lock(&sheaf_g.caches_lock);
	if (all_caches) {
		/* Seed 000 "before" (kvfree_rcu_barrier): flush the rcu sheaves of every cache. */
		struct sheaf_list *pos;
		for (pos = sheaf_g.caches.next; pos != &sheaf_g.caches; pos = pos->next)
			cache_flush_locked(sheaf_container_of(pos, struct sheaf_cache, cache_list), NULL);
		if (sheaf_list_empty(&c->cache_list))
			cache_flush_locked(c, NULL); /* not linked (any more) */
	} else if (global) {
		cache_flush_locked(c, NULL); /* Linux 7.0: this cache's sheaves, via call_rcu */
	} else {
		sheaf_pcs_for_each(c, claim_one, &cl);
		pthread_mutex_lock(&st->lock);
		cl.batch = st->fb;
		st->fb = NULL;
		pthread_mutex_unlock(&st->lock);
	}
	pthread_mutex_unlock(&sheaf_g.caches_lock);
	claimed_finish(c, ops, &cl);

	/* K§4.4: the global rcu_barrier().  liburcu's returns at once inside a read-side
	 * section; wait_prepare() excluded that and took an online QSBR thread offline. */
	if (global)
		ops->barrier_all();

	pthread_mutex_lock(&st->lock);
	while (st->inflight[old & 1] != 0)
		pthread_cond_wait(&st->cv, &st->lock);
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_unlock(&st->barrier_mutex);
	wait_finish(ops, online);
}

SHEAF_API void sheaf_rcu_barrier(void)
{
	if (atomic_load(&sheaf_g.init_state) != 2)
		return;
	if (!(atomic_load(&flavor_word) & FLAVOR_USED))
		return;
	const struct rcu_ops *ops = rcu_ops_cur();
	int online = wait_prepare(ops, NULL);
	if (online < 0)
		return;
	/* Every unit of every cache is handed to call_rcu under a lock this walk takes (or
	 * before its free_rcu returned), so rcu_barrier() afterwards waits for all. */
	sheaf_cache_for_each(cache_flush_locked, NULL);
	ops->barrier_all();
	wait_finish(ops, online);
}

/* ---- SHEAF_TYPESAFE_BY_RCU: slab pages go back after a grace period ------------------ */

static void deferred_pages_cb(struct rcu_head *head)
{
	struct deferred_pages *d = sheaf_container_of(head, struct deferred_pages, head);
	tsan_acquire(d);
	sheaf_page_free(d->mem, d->order, d->nid);
	sheaf_meta_free(d, sizeof(*d));
}

void sheaf_rcu_defer_pages(struct sheaf_cache *c, void *mem, unsigned order, int nid)
{
	(void)c;
	struct deferred_pages *d = sheaf_meta_alloc(sizeof(*d));
	if (!d) {
		/* Cannot defer: keep the pages rather than purge them under a reader. */
		return;
	}
	d->mem = mem;
	d->order = order;
	d->nid = nid;
	tsan_release(d);
	/* The flavour was warmed when the cache was created (sheaf_rcu_cache_init). */
	rcu_use()->call(&d->head, deferred_pages_cb);
}
