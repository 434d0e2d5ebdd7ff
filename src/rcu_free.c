/* SPDX-License-Identifier: MIT */
/*
 * rcu_free.c - RCU-deferred free in sheaves with a per-cache barrier (DESIGN §4, D5;
 * K§4.2-4.4).  The only file that includes liburcu (STYLE R12).
 *
 * free_rcu appends to the calling context's rcu_free sheaf; a full one is handed to
 * call_rcu as one unit and, after the grace period, enters its node's barn as a full
 * sheaf (objects reusable without touching slabs) or, over the barn's limit, is flushed.
 * When no sheaf can be had (no memory, or a cache without sheaves) objects are batched
 * in a per-cache fallback array, one call_rcu per batch.
 *
 * Per-cache barrier (D5): submissions count into one of two epochs of the cache
 * (inflight[epoch & 1]).  sheaf_cache_rcu_barrier() flips the epoch, then flushes every
 * pcs's partly filled rcu_free sheaf into the *old* epoch, then waits until the old
 * epoch's count drains to zero -- this cache's sheaves only, never a global
 * rcu_barrier().  A submission holds pcs->rcu_lock while it reads the epoch and counts
 * itself, and the barrier takes every pcs->rcu_lock after the flip, so no submission
 * from before the barrier can slip into the new epoch unseen.
 *
 * Lock order: rcu_state.barrier_mutex -> pcs->rcu_lock -> rcu_state.lock; callbacks
 * (liburcu's call_rcu thread) take barn or list locks and rcu_state.lock, never a pcs.
 */
#include <errno.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "internal.h"

#define RCU_FALLBACK_BATCH 64

/* Each flavour's header maps the generic names (call_rcu, ...) to its own, so only one
 * can be included per file; the other flavours' three entry points are declared here
 * with the signatures of liburcu's ABI (liburcu-mb.so, liburcu-qsbr.so). */
void urcu_mb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
void urcu_mb_barrier(void);
void urcu_mb_register_thread(void);
void urcu_qsbr_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
void urcu_qsbr_barrier(void);
void urcu_qsbr_register_thread(void);

struct rcu_ops {
	void (*call_rcu)(struct rcu_head *head, void (*func)(struct rcu_head *head));
	void (*barrier)(void);
	void (*register_thread)(void);
};

static const struct rcu_ops flavors[] = {
	[SHEAF_RCU_MEMB] = { urcu_memb_call_rcu, urcu_memb_barrier, urcu_memb_register_thread },
	[SHEAF_RCU_MB] = { urcu_mb_call_rcu, urcu_mb_barrier, urcu_mb_register_thread },
	[SHEAF_RCU_QSBR] = { urcu_qsbr_call_rcu, urcu_qsbr_barrier, urcu_qsbr_register_thread },
};
static const struct rcu_ops *rcu = &flavors[SHEAF_RCU_MEMB];
static atomic_int rcu_used;

/* A sheaf or a fallback batch on its way through a grace period. */
struct rcu_unit {
	struct rcu_head head;        /* first: liburcu hands it back */
	struct sheaf_cache *cache;
	struct sheaf_sheaf *sheaf;   /* NULL for a fallback batch */
	uint32_t epoch;
	uint32_t n;                  /* fallback batch: objects */
	void *objs[RCU_FALLBACK_BATCH];
};

struct rcu_state {
	pthread_mutex_t lock;           /* protects fb, epoch, inflight; cv waits on it */
	pthread_cond_t cv;
	pthread_mutex_t barrier_mutex;  /* serialises barriers of this cache */
	uint32_t epoch;
	long inflight[2];               /* units submitted and not yet completed, by epoch */
	struct rcu_unit *fb;            /* fallback batch being filled */
};

struct deferred_pages {
	struct rcu_head head;
	void *mem;
	unsigned order;
	int nid;
};

SHEAF_API int sheaf_rcu_set_flavor(enum sheaf_rcu_flavor f)
{
	if ((unsigned)f > SHEAF_RCU_QSBR)
		return -EINVAL;
	if (atomic_load(&rcu_used))
		return -EBUSY;
	rcu = &flavors[f];
	return 0;
}

void sheaf_rcu_cache_init(struct sheaf_cache *c)
{
	struct rcu_state *st = sheaf_meta_alloc(sizeof(*st));
	if (!st)
		return; /* free_rcu then falls back to a synchronous grace period */
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cv, NULL);
	pthread_mutex_init(&st->barrier_mutex, NULL);
	c->rcu_priv = st;
}

void sheaf_rcu_cache_fini(struct sheaf_cache *c)
{
	struct rcu_state *st = c->rcu_priv;
	if (!st)
		return;
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cv);
	pthread_mutex_destroy(&st->barrier_mutex);
	sheaf_meta_free(st, sizeof(*st));
	c->rcu_priv = NULL;
}

static void unit_done(struct sheaf_cache *c, uint32_t epoch, long objs)
{
	struct rcu_state *st = c->rcu_priv;
	atomic_fetch_sub(&c->rcu_inflight_sheaves, 1);
	atomic_fetch_sub(&c->rcu_inflight_objects, objs);
	sheaf_stat_atomic(c, SHEAF_STAT_RCU_SHEAF_DONE, 1);
	pthread_mutex_lock(&st->lock);
	if (--st->inflight[epoch & 1] == 0)
		pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->lock);
}

/* After the grace period (K§4.3): the sheaf joins its barn as a full sheaf. */
static void rcu_unit_cb(struct rcu_head *head)
{
	struct rcu_unit *u = (struct rcu_unit *)head;
	struct sheaf_cache *c = u->cache;
	uint32_t epoch = u->epoch;
	long objs;
	if (u->sheaf) {
		struct sheaf_sheaf *s = u->sheaf;
		objs = s->size;
		s->flags &= ~SHEAF_SH_RCU;
		struct sheaf_barn *b = &c->node[s->node]->barn;
		if (b->enabled && s->capacity == atomic_load(&c->sheaf_capacity) && sheaf_rd(b->nr_full) < b->max_full) {
			sheaf_barn_put_full(b, s);
			sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT, 1);
		} else {
			sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT_FAIL, 1);
			sheaf_sheaf_flush(c, s, NULL);
			if (b->enabled && sheaf_rd(b->nr_empty) < b->max_empty &&
			    s->capacity == atomic_load(&c->sheaf_capacity))
				sheaf_barn_put_empty(b, s);
			else
				sheaf_sheaf_free(c, s);
		}
	} else {
		objs = u->n;
		sheaf_slab_free_bulk(c, u->objs, u->n);
	}
	sheaf_meta_free(u, sizeof(*u));
	unit_done(c, epoch, objs);
}

/* Hand a sheaf or a batch to call_rcu, counted in the current epoch (or @epoch). */
static void submit_locked_epoch(struct sheaf_cache *c, struct rcu_unit *u, long objs)
{
	struct rcu_state *st = c->rcu_priv;
	pthread_mutex_lock(&st->lock);
	st->inflight[u->epoch & 1]++;
	pthread_mutex_unlock(&st->lock);
	atomic_fetch_add(&c->rcu_inflight_sheaves, 1);
	(void)objs;
	sheaf_stat_atomic(c, u->sheaf ? SHEAF_STAT_RCU_SHEAF_QUEUED : SHEAF_STAT_RCU_FALLBACK_BATCH, 1);
	rcu->call_rcu(&u->head, rcu_unit_cb);
}

static uint32_t cur_epoch(struct sheaf_cache *c)
{
	struct rcu_state *st = c->rcu_priv;
	pthread_mutex_lock(&st->lock);
	uint32_t e = st->epoch;
	pthread_mutex_unlock(&st->lock);
	return e;
}

static bool submit_sheaf(struct sheaf_cache *c, struct sheaf_sheaf *s, int node, uint32_t epoch)
{
	struct rcu_unit *u = sheaf_meta_alloc(offsetof(struct rcu_unit, objs));
	if (!u)
		return false;
	u->cache = c;
	u->sheaf = s;
	u->epoch = epoch;
	s->node = node;
	submit_locked_epoch(c, u, s->size);
	return true;
}

/* The fallback: batched, one call_rcu per RCU_FALLBACK_BATCH objects. */
static void fallback_add(struct sheaf_cache *c, void *obj)
{
	struct rcu_state *st = c->rcu_priv;
	struct rcu_unit *full = NULL;
	pthread_mutex_lock(&st->lock);
	if (!st->fb) {
		/* Metadata allocation under st->lock: meta caches never take rcu locks. */
		st->fb = sheaf_meta_alloc(sizeof(struct rcu_unit));
		if (st->fb) {
			st->fb->cache = c;
		}
	}
	struct rcu_unit *u = st->fb;
	if (u) {
		u->objs[u->n++] = obj;
		if (u->n == RCU_FALLBACK_BATCH) {
			full = u;
			st->fb = NULL;
			full->epoch = st->epoch;
		}
	}
	pthread_mutex_unlock(&st->lock);
	if (!u) {
		/* No memory even for a batch: wait for a grace period here (the kernel's
		 * head-less kvfree_rcu does the same), then free. */
		atomic_fetch_sub(&c->rcu_inflight_objects, 1);
		rcu->barrier();
		sheaf_slab_free_bulk(c, &obj, 1);
		return;
	}
	if (full)
		submit_locked_epoch(c, full, full->n);
}

static void fallback_flush(struct sheaf_cache *c, uint32_t epoch)
{
	struct rcu_state *st = c->rcu_priv;
	pthread_mutex_lock(&st->lock);
	struct rcu_unit *u = st->fb;
	st->fb = NULL;
	pthread_mutex_unlock(&st->lock);
	if (u) {
		u->epoch = epoch;
		submit_locked_epoch(c, u, u->n);
	}
}

SHEAF_API void sheaf_cache_free_rcu(struct sheaf_cache *c, void *obj)
{
	if (!c || !obj)
		return;
	if (!sheaf_slab_check_obj(c, obj, "free_rcu"))
		return;
	atomic_store_explicit(&rcu_used, 1, memory_order_relaxed);
	struct rcu_state *st = c->rcu_priv;
	atomic_fetch_add(&c->rcu_inflight_objects, 1);
	if (!st) {
		atomic_fetch_sub(&c->rcu_inflight_objects, 1);
		rcu->barrier();
		sheaf_slab_free_bulk(c, &obj, 1);
		return;
	}
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	struct sheaf_pcs *pcs = cap ? sheaf_pcs_lock(c) : NULL;
	if (!pcs) {
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_RCU_SHEAF_FAIL, 1);
		fallback_add(c, obj);
		return;
	}
	/* K§4.2: get an rcu_free sheaf: an empty spare, an empty barn sheaf, or a new one. */
	pthread_mutex_lock(&pcs->rcu_lock);
	struct sheaf_sheaf *s = pcs->rcu_free;
	if (!s) {
		if (pcs->spare && pcs->spare->size == 0 && pcs->spare->capacity == cap) {
			s = pcs->spare;
			pcs->spare = NULL;
		} else {
			s = sheaf_barn_get_empty(sheaf_pcs_barn(c, pcs));
			if (s && s->capacity != cap) {
				sheaf_sheaf_free(c, s);
				s = NULL;
			}
			if (!s)
				s = sheaf_sheaf_new(c, cap);
		}
		if (s) {
			s->flags |= SHEAF_SH_RCU;
			pcs->rcu_free = s;
		}
	}
	if (!s) {
		pthread_mutex_unlock(&pcs->rcu_lock);
		sheaf_pcs_unlock(c, pcs);
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_RCU_SHEAF_FAIL, 1);
		fallback_add(c, obj);
		return;
	}
	s->objects[s->size++] = obj;
	sheaf_stat_add(pcs, SHEAF_STAT_FREE_RCU_SHEAF, 1);
	if (s->size == s->capacity) {
		/* Submit before unlocking, so that a concurrent barrier cannot miss it. */
		pcs->rcu_free = NULL;
		if (!submit_sheaf(c, s, pcs->node, cur_epoch(c))) {
			/* No memory for the unit: the objects go through the fallback. */
			uint32_t n = s->size;
			s->size = 0;
			for (uint32_t i = 0; i < n; i++)
				fallback_add(c, s->objects[i]);
			sheaf_sheaf_free(c, s);
		}
	}
	pthread_mutex_unlock(&pcs->rcu_lock);
	sheaf_pcs_unlock(c, pcs);
}

static void flush_pcs_epoch(struct sheaf_cache *c, struct sheaf_pcs *pcs, bool use_epoch, uint32_t epoch)
{
	pthread_mutex_lock(&pcs->rcu_lock);
	struct sheaf_sheaf *s = pcs->rcu_free;
	pcs->rcu_free = NULL;
	if (s && s->size) {
		if (!submit_sheaf(c, s, pcs->node, use_epoch ? epoch : cur_epoch(c))) {
			uint32_t n = s->size;
			s->size = 0;
			for (uint32_t i = 0; i < n; i++)
				fallback_add(c, s->objects[i]);
			sheaf_sheaf_free(c, s);
		}
	} else if (s) {
		s->flags &= ~SHEAF_SH_RCU;
		sheaf_sheaf_free(c, s);
	}
	pthread_mutex_unlock(&pcs->rcu_lock);
}

void sheaf_rcu_flush_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	if (c->rcu_priv)
		flush_pcs_epoch(c, pcs, false, 0);
}

struct flush_arg {
	uint32_t epoch;
};

static void barrier_flush_one(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	struct flush_arg *a = arg;
	flush_pcs_epoch(c, pcs, true, a->epoch);
}

SHEAF_API void sheaf_cache_rcu_barrier(struct sheaf_cache *c)
{
	if (!c || !c->rcu_priv)
		return;
	if (!strcmp(sheaf_option_str(SHEAF_OPT_RCU_BARRIER), "global") || c->kernel_compat) {
		/* Linux 7.0 (K§4.4): flush this cache's sheaves, then a global barrier. */
		sheaf_pcs_for_each(c, barrier_flush_one, &(struct flush_arg){ cur_epoch(c) });
		fallback_flush(c, cur_epoch(c));
		if (atomic_load(&rcu_used))
			rcu->barrier();
		return;
	}
	struct rcu_state *st = c->rcu_priv;
	/* Nothing anywhere: return at once (D5). */
	if (atomic_load(&c->rcu_inflight_objects) == 0 && atomic_load(&c->rcu_inflight_sheaves) == 0)
		return;
	pthread_mutex_lock(&st->barrier_mutex);
	pthread_mutex_lock(&st->lock);
	uint32_t old = st->epoch;
	st->epoch++;
	pthread_mutex_unlock(&st->lock);
	struct flush_arg a = { old };
	sheaf_pcs_for_each(c, barrier_flush_one, &a);
	fallback_flush(c, old);
	pthread_mutex_lock(&st->lock);
	while (st->inflight[old & 1] != 0)
		pthread_cond_wait(&st->cv, &st->lock);
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_unlock(&st->barrier_mutex);
}

static void barrier_cache(struct sheaf_cache *c, void *arg)
{
	(void)arg;
	if (!c->rcu_priv)
		return;
	struct rcu_state *st = c->rcu_priv;
	pthread_mutex_lock(&st->lock);
	uint32_t e = st->epoch;
	pthread_mutex_unlock(&st->lock);
	sheaf_pcs_for_each(c, barrier_flush_one, &(struct flush_arg){ e });
	fallback_flush(c, e);
}

SHEAF_API void sheaf_rcu_barrier(void)
{
	if (atomic_load(&sheaf_g.init_state) != 2)
		return;
	sheaf_cache_for_each(barrier_cache, NULL);
	if (atomic_load(&rcu_used))
		rcu->barrier();
}

static void deferred_pages_cb(struct rcu_head *head)
{
	struct deferred_pages *d = (struct deferred_pages *)head;
	sheaf_page_free(d->mem, d->order, d->nid);
	sheaf_meta_free(d, sizeof(*d));
}

void sheaf_rcu_defer_pages(struct sheaf_cache *c, void *mem, unsigned order, int nid)
{
	(void)c;
	struct deferred_pages *d = sheaf_meta_alloc(sizeof(*d));
	if (!d) {
		/* Cannot defer: keep the pages rather than unmap them under a reader. */
		return;
	}
	d->mem = mem;
	d->order = order;
	d->nid = nid;
	atomic_store_explicit(&rcu_used, 1, memory_order_relaxed);
	rcu->call_rcu(&d->head, deferred_pages_cb);
}
