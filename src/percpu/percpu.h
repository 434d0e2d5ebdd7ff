/* SPDX-License-Identifier: MIT */
/*
 * percpu/percpu.h - the per-CPU layer's interface (layer 5 of src/README.md).
 *
 * Owns: a CPU's (or, in per-thread mode, a thread's) main, spare and rcu_free sheaves
 * (struct sheaf_pcs), the per-CPU lock and the restartable sequences (rseq.h, rseq.c),
 * the slow paths that exchange sheaves with the barn and refill or flush them from
 * and to slabs (sheaf.c), thread exit and fork (percpu.c), and the registry of caches
 * and threads (sheaf_reg).
 *
 * May call: barn/, slab/, page/, base/.  Calls up only through sheaf_percpu_hooks:
 * metadata allocation (set by the cache layer) and the RCU hand-off (set by the RCU
 * layer), both registered at init before any cache exists.
 */
#ifndef SHEAF_LAYER_PERCPU_H
#define SHEAF_LAYER_PERCPU_H

#include "barn/barn.h"

/* ---- Per-CPU (or per-thread) sheaves (K§1.5) ---------------------------------------- */

struct sheaf_pcs {
	struct sheaf_sheaf *main;     /* never NULL; per-CPU mode: valid only while locked */
	struct sheaf_sheaf *spare;    /* may be NULL; protected by the pcs lock / owner */
	struct sheaf_sheaf *rcu_free; /* may be NULL; protected by the pcs lock / owner */
	uint64_t nalloc_base;         /* stat harvest: main->nalloc at last unlock */
	uint32_t size_base;           /* stat harvest: main->size at last unlock */
	int32_t slot;                 /* CPU number (per-CPU mode) or -1 (per-thread mode) */
	int node;                     /* node whose barn this pcs uses */
	uintptr_t key;                /* pagemap key accepted by the fast path */
	struct sheaf_cache *cache;
	struct sheaf_list link;       /* cache->pcs_list; protected by cache->pcs_lock */
	atomic_int flush_req;         /* per-thread mode: shrink asked the owner to flush */
	uint32_t cached;              /* gauge: objects in main+spare at last unlock (racy) */
	uint64_t last_refill_ns;      /* D6: when main was last refilled from slabs
					 (sheaf.c refill_budget); protected by the pcs lock */
	uint32_t refill_part;         /* D6: objects of a part refill not yet followed by
					 a quick one (0: none); protected by the pcs lock */
	pthread_mutex_t rcu_lock;     /* protects rcu_free: free_rcu (owner) against barriers */
	uint64_t stat[SHEAF_STAT_NR]; /* written by the owner/lock holder, read racily */
};

/* ---- Per-thread state (per-thread mode, and bookkeeping in both modes) -------------- */

struct sheaf_tcache {
	uint32_t n;             /* entries in pcs[] */
	struct sheaf_pcs **pcs; /* by cache id; NULL until first use */
	struct sheaf_list link; /* sheaf_reg.threads; protected by sheaf_reg.threads_lock */
	pthread_t owner;
	int in_setup; /* re-entrancy guard while creating state */
};

enum sheaf_mode {
	SHEAF_MODE_PERTHREAD = 0,
	SHEAF_MODE_PERCPU = 1
};

/* The registry of caches and threads (defined in percpu.c).  The cache layer adds and
 * removes caches; this layer walks them at thread exit and fork. */
struct sheaf_registry {
	enum sheaf_mode mode; /* chosen once by sheaf_percpu_init */
	pthread_mutex_t caches_lock;
	struct sheaf_list caches; /* protected by caches_lock */
	uint32_t next_id;         /* protected by caches_lock */
	uint8_t *id_used;         /* protected by caches_lock */
	uint32_t id_cap;
	pthread_mutex_t threads_lock;
	struct sheaf_list threads; /* protected by threads_lock */
	pthread_key_t tkey;
};
extern struct sheaf_registry sheaf_reg;

/* ---- Statistics (design §8) ----------------------------------------------------------- */
static inline void sheaf_stat_add(struct sheaf_pcs *pcs, enum sheaf_stat_item it, uint64_t v)
{
	sheaf_wr(pcs->stat[it], sheaf_rd(pcs->stat[it]) + v);
}
/* Add to pcs when one is held, else to the atomic counters. */
static inline void sheaf_stat(struct sheaf_cache *c, struct sheaf_pcs *pcs, enum sheaf_stat_item it,
			      uint64_t v)
{
	if (pcs)
		sheaf_stat_add(pcs, it, v);
	else
		sheaf_stat_atomic(c, it, v);
}

/* ---- Calls up, registered at init ---------------------------------------------------- */
struct sheaf_percpu_hooks {
	/* Metadata (sheaves, per-thread tables, pcs): zeroed, NULL on failure.  Set by
	 * sheaf_init (cache/meta.c) first thing, before any other layer runs. */
	void *(*meta_alloc)(size_t size);
	void (*meta_free)(void *p, size_t size);
	/* Submit a pcs's partly filled rcu_free sheaf (rcu/, set by sheaf_rcu_init);
	 * called only for a pcs whose rcu_free is set, which only the RCU layer does. */
	void (*rcu_flush_pcs)(struct sheaf_cache *c, struct sheaf_pcs *pcs);
	/* Does @obj wait for a grace period (rcu/, set by sheaf_rcu_init)?  Part of the
	 * double-free confirmation (freecheck.c). */
	bool (*rcu_pending)(struct sheaf_cache *c, const void *obj);
};
extern struct sheaf_percpu_hooks sheaf_percpu_hooks;

static inline void *sheaf_meta_alloc(size_t size)
{
	return sheaf_percpu_hooks.meta_alloc(size);
}
static inline void sheaf_meta_free(void *p, size_t size)
{
	sheaf_percpu_hooks.meta_free(p, size);
}

/* ---- sheaf.c: sheaves and the per-CPU/per-thread slow paths (K§2.2, K§2.6) ---------- */
struct sheaf_sheaf *sheaf_sheaf_new(struct sheaf_cache *c, uint32_t capacity);
void sheaf_sheaf_free(struct sheaf_cache *c, struct sheaf_sheaf *s);
/* Flush all objects of an unused sheaf to slabs (SHEAF_FLUSH); the sheaf stays. */
void sheaf_sheaf_flush(struct sheaf_cache *c, struct sheaf_sheaf *s, uint64_t *stat);
/* Refill to capacity from @n's slabs; returns objects added. */
unsigned sheaf_sheaf_refill(struct sheaf_cache *c, struct sheaf_node *n, struct sheaf_sheaf *s,
			    uint64_t *stat);
void sheaf_barn_maybe_trim(struct sheaf_cache *c, struct sheaf_barn *b, struct sheaf_pcs *pcs);
/* Adaptive capacity (docs/design.md, D2): one step up or down (@dir < 0) the cache's
 * capacity ladder, if it is adaptive: up within the exchange rate's steps (@dir == 1,
 * the barn), or also into the bulk-only steps above them (@dir == 2, a bulk call larger
 * than a sheaf); to the default with @dir == -2 (the reaper, for an idle cache).
 * Called with no barn lock held. */
void sheaf_capacity_adapt(struct sheaf_cache *c, int dir);
/* Slow paths, called with the pcs locked (design §6) and pcs->main valid. */
bool sheaf_pcs_replace_empty_main(struct sheaf_cache *c, struct sheaf_pcs *pcs);
bool sheaf_pcs_swap_or_barn(struct sheaf_cache *c, struct sheaf_pcs *pcs); /* no refill */
bool sheaf_pcs_replace_full_main(struct sheaf_cache *c, struct sheaf_pcs *pcs);
/* A bulk call of @n objects needed more than main (issue 18): the capacity steps up if
 * @n is larger (D2), and empty main or spare sheaves of a smaller capacity are renewed. */
void sheaf_pcs_bulk_fit(struct sheaf_cache *c, struct sheaf_pcs *pcs, size_t n);
/* Flush everything the pcs caches into barns (thread exit) or slabs (@to_slabs). */
void sheaf_pcs_drain(struct sheaf_cache *c, struct sheaf_pcs *pcs, bool to_slabs);
void sheaf_pcs_harvest(struct sheaf_pcs *pcs); /* fold fast-path counts into pcs->stat */
void sheaf_pcs_fold_stats(struct sheaf_cache *c, struct sheaf_pcs *pcs); /* into the cache's */
void sheaf_pcs_rebase(struct sheaf_pcs *pcs);                            /* after changing main */
struct sheaf_barn *sheaf_pcs_barn(struct sheaf_cache *c, struct sheaf_pcs *pcs);
struct sheaf_node *sheaf_pcs_mem_node(struct sheaf_cache *c, struct sheaf_pcs *pcs);

/* ---- freecheck.c: the free mark (slab/freecheck.h) ---------------------------------- */
/* The free mark of @obj, a start of an object of @c: false after reporting a confirmed
 * double free (searched in every sheaf, barn and slab, and the RCU layer's pending
 * objects); _take also marks it free.  No lock held. */
bool sheaf_free_mark_check(struct sheaf_cache *c, const void *obj);
/* Is @obj, whose free mark holds the key, really free (the same search, no report)? */
bool sheaf_free_mark_confirmed(struct sheaf_cache *c, const void *obj);
bool sheaf_free_mark_take(struct sheaf_cache *c, void *obj);

/* ---- percpu.c: per-CPU/per-thread state, locking, thread exit, fork ---------------- */
int sheaf_percpu_init(void);
/* Lock the calling context's pcs of @c (per-CPU: on the current CPU; per-thread: the
 * thread's own, created on first use).  NULL when it cannot (held by another, or no
 * memory): the caller falls back to the slab path (K§2.4). */
struct sheaf_pcs *sheaf_pcs_lock(struct sheaf_cache *c);
/* Per-thread mode: the calling thread's fast-path counts of @c folded in (statistics). */
void sheaf_pcs_harvest_self(struct sheaf_cache *c);
void sheaf_pcs_unlock(struct sheaf_cache *c, struct sheaf_pcs *pcs);
/* The calling thread's tables (NULL until its first slow path); written only by the
 * thread itself (and cleared at its exit), so read without a lock. */
extern __thread struct sheaf_tcache *sheaf_tls_tc;
/* The calling thread's existing pcs of @c, or NULL: the per-thread fast path's lookup,
 * inline (a call here was a fifth of a per-thread malloc+free pair, issue 17). */
static inline struct sheaf_pcs *sheaf_pcs_current(const struct sheaf_cache *c)
{
	struct sheaf_tcache *tc = sheaf_tls_tc;
	if (sheaf_likely(tc && c->id < tc->n))
		return tc->pcs[c->id];
	return NULL;
}
void sheaf_pcs_shrink_all(struct sheaf_cache *c);
void sheaf_pcs_stats_gauge(struct sheaf_cache *c, uint64_t *in_pcs, uint64_t *slots);
/* Every event count of @c, summed as no reader can see one twice or lose one. */
void sheaf_pcs_stats_events(struct sheaf_cache *c, uint64_t ev[SHEAF_STAT_NR]);
/* Run fn on every pcs of @c with that pcs locked (shrink, destroy, barrier, stats). */
void sheaf_pcs_for_each(struct sheaf_cache *c,
			void (*fn)(struct sheaf_cache *, struct sheaf_pcs *, void *), void *arg);
int sheaf_pcs_setup_cache(struct sheaf_cache *c);     /* at create */
void sheaf_pcs_teardown_cache(struct sheaf_cache *c); /* at destroy, after draining */
/* Run fn on every cache of the registry, under caches_lock. */
void sheaf_cache_for_each(void (*fn)(struct sheaf_cache *, void *), void *arg);
/* Clear entry @id of the pcs table of every tcache on @list (threads_lock held). */
void sheaf_tcaches_forget(struct sheaf_list *list, uint32_t id);
/* fork: this layer's ranks THREADS, PCS_LIST and PERCPU of the lock table
 * (base/lock.h), registered by the initialisation. */
void sheaf_percpu_fork_register(void);
/* Why the active mode was chosen ("forced by SHEAF_PERCPU=thread", "glibc rseq ..."). */
const char *sheaf_percpu_mode_reason(void);
/* Set when a checker wants to see every free (debug objects); frees then take the
 * slow path (per-thread) or the checker is called before the object enters a sheaf. */
extern void (*volatile sheaf_free_check_hook)(const void *obj, size_t size);
/* Install (or with NULL remove) sheaf_free_check_hook.  Use this, not a plain store:
 * in per-CPU mode it also closes the free fast path, which has no hook test of its
 * own (rseq.h), so that every free reaches the hook. */
void sheaf_free_check_hook_set(void (*fn)(const void *obj, size_t size));
/* The hook as it is now: a relaxed atomic load (the set above is a release store; a
 * plain read of the volatile pointer was a C11 data race TSan reported when debug
 * objects started tracking while other threads freed).  The same one mov on x86. */
static inline void (*sheaf_free_check_hook_get(void))(const void *, size_t)
{
	return __atomic_load_n(&sheaf_free_check_hook, __ATOMIC_RELAXED);
}
/* The reaper's probe (cache/reaper.c): a signature of the cache's per-CPU activity. */
uint64_t sheaf_pcs_reap_signature(struct sheaf_cache *c);
/* Mixing step of the reaper's activity signatures (FNV-1a style). */
static inline uint64_t sheaf_sig_mix(uint64_t sig, uint64_t v)
{
	return (sig ^ v) * 0x100000001B3ull;
}

#include "percpu/rseq.h"     /* the restartable sequences of the fast paths */
#include "percpu/fastpath.h" /* pop and push, written once */

#endif /* SHEAF_LAYER_PERCPU_H */
