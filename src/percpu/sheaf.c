/* SPDX-License-Identifier: MIT */
/*
 * sheaf.c - sheaves, refill and flush, and the per-CPU slow paths (K§2.2, K§2.6).
 *
 * The slow paths run with the pcs locked (design §6: per-CPU mode swapped main for the
 * sentinel; per-thread mode the owner runs them) and pcs->main valid.  They may take
 * one barn lock or one list_lock at a time, never both (design §4).  Unlike the kernel
 * they do not drop the pcs lock around a refill: other threads that land on this CPU
 * meanwhile find the lock taken and use the slab path (K§2.4) instead of waiting.
 */
#include <errno.h>
#include <string.h>

#include "percpu/percpu.h"

struct sheaf_sheaf *sheaf_sheaf_new(struct sheaf_cache *c, uint32_t capacity)
{
	struct sheaf_sheaf *s =
		sheaf_meta_alloc(SHEAF_SHEAF_HDR + (size_t)capacity * sizeof(void *));
	if (!s)
		return NULL;
	s->capacity = capacity;
	s->cache = c;
	sheaf_list_init(&s->link);
	sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_ALLOC, 1);
	return s;
}

void sheaf_sheaf_free(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	if (!s || s == &sheaf_sentinel_sheaf)
		return;
	sheaf_assert_internal(s->size == 0);
	if (sheaf_unlikely(s->size))
		sheaf_sheaf_flush(c, s, NULL); /* never lose objects, even on a bug */
	sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_FREE, 1);
	sheaf_meta_free(s, SHEAF_SHEAF_HDR + (size_t)s->capacity * sizeof(void *));
}

void sheaf_sheaf_flush(struct sheaf_cache *c, struct sheaf_sheaf *s, uint64_t *stat)
{
	uint32_t n = s->size;
	if (!n)
		return;
	sheaf_wr(s->size, 0);
	if (stat)
		sheaf_wr(stat[SHEAF_STAT_SHEAF_FLUSH], sheaf_rd(stat[SHEAF_STAT_SHEAF_FLUSH]) + n);
	else
		sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_FLUSH, n);
	sheaf_slab_free_bulk(c, s->objects, n);
}

/* Refill @s from @n's slabs with at most @max objects (at least one). */
static unsigned sheaf_refill_upto(struct sheaf_cache *c, struct sheaf_node *n,
				  struct sheaf_sheaf *s, uint64_t *stat, uint32_t max)
{
	uint32_t want = SHEAF_MIN(s->capacity - s->size, max);
	if (!want)
		return 0;
	unsigned got = sheaf_slab_refill(c, n, s->objects + s->size, want, want);
	sheaf_wr(s->size, s->size + got);
	if (stat)
		sheaf_wr(stat[SHEAF_STAT_SHEAF_REFILL],
			 sheaf_rd(stat[SHEAF_STAT_SHEAF_REFILL]) + got);
	else
		sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_REFILL, got);
	return got;
}

unsigned sheaf_sheaf_refill(struct sheaf_cache *c, struct sheaf_node *n, struct sheaf_sheaf *s,
			    uint64_t *stat)
{
	return sheaf_refill_upto(c, n, s, stat, UINT32_MAX);
}

/* ---- Statistics harvest (design §8) ------------------------------------------------- */

void sheaf_pcs_harvest(struct sheaf_pcs *pcs)
{
	struct sheaf_sheaf *m = pcs->main;
	uint64_t d_alloc = m->nalloc - pcs->nalloc_base;
	int64_t d_free = (int64_t)m->size - (int64_t)pcs->size_base + (int64_t)d_alloc;
	if (d_alloc)
		sheaf_stat_add(pcs, SHEAF_STAT_ALLOC_FASTPATH, d_alloc);
	if (d_free > 0)
		sheaf_stat_add(pcs, SHEAF_STAT_FREE_FASTPATH, (uint64_t)d_free);
	pcs->nalloc_base = m->nalloc;
	pcs->size_base = m->size;
}

/* A pcs that goes away keeps its event counts: they move to the cache's atomic ones.
 * A thread's exit does it under pcs_lock as its pcs leaves the list, the lock under
 * which sheaf_pcs_stats_events reads both: a reader between the two steps saw the
 * counts nowhere, and counters went back (a thread's 300 allocations, 2026-11-29).
 * What its drain adds after that joins in pcs_free: new events, late, never taken
 * back. */
void sheaf_pcs_fold_stats(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	for (int i = 0; i < SHEAF_STAT_NR; i++) {
		uint64_t v = sheaf_rd(pcs->stat[i]);
		if (v) {
			sheaf_stat_atomic(c, (enum sheaf_stat_item)i, v);
			sheaf_wr(pcs->stat[i], 0);
		}
	}
}

void sheaf_pcs_rebase(struct sheaf_pcs *pcs)
{
	/* SHEAF_DEBUG=2: every slow path ends with the walkers. */
	sheaf_assert_expensive(sheaf_sheaf_is_valid(pcs->cache, pcs->main));
	sheaf_assert_expensive(!pcs->spare || sheaf_sheaf_is_valid(pcs->cache, pcs->spare));
	sheaf_assert_expensive(pcs->main == &sheaf_sentinel_sheaf ||
			       sheaf_barn_is_valid(pcs->cache->node[pcs->node]->barn, pcs->cache));
	pcs->nalloc_base = pcs->main->nalloc;
	pcs->size_base = pcs->main->size;
	sheaf_wr(pcs->cached, pcs->main->size + (pcs->spare ? pcs->spare->size : 0));
}

/* ---- Helpers ------------------------------------------------------------------------ */

struct sheaf_barn *sheaf_pcs_barn(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	return c->node[pcs->node]->barn;
}

struct sheaf_node *sheaf_pcs_mem_node(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	return c->node[sheaf_g.node_mem_nid[pcs->node]];
}

static inline void install_main(struct sheaf_pcs *pcs, struct sheaf_sheaf *s)
{
	s->key = pcs->key;
	pcs->main = s;
}

static inline bool is_sentinel(const struct sheaf_sheaf *s)
{
	return s == &sheaf_sentinel_sheaf;
}

static inline uint32_t cur_capacity(const struct sheaf_cache *c)
{
	return atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
}

/* Free a now-empty sheaf whose capacity is stale (D2), or hand it to the barn. */
static void retire_empty(struct sheaf_cache *c, struct sheaf_barn *b, struct sheaf_sheaf *s)
{
	if (is_sentinel(s))
		return;
	if (s->capacity != cur_capacity(c) || !b->enabled ||
	    sheaf_rd(b->nr_empty) >= sheaf_rd(b->max_empty))
		sheaf_sheaf_free(c, s);
	else
		sheaf_barn_put_empty(b, s);
}

/* An empty sheaf of the current capacity: from the barn, else a new one. */
static struct sheaf_sheaf *get_empty(struct sheaf_cache *c, struct sheaf_barn *b)
{
	uint32_t cap = cur_capacity(c);
	for (int tries = 0; tries < 4; tries++) {
		struct sheaf_sheaf *e = sheaf_barn_get_empty(b);
		if (!e)
			break;
		if (e->capacity == cap)
			return e;
		sheaf_sheaf_free(c, e); /* D2: old capacity drains lazily */
	}
	return sheaf_sheaf_new(c, cap);
}

/* D6: after an interval of barn use, give back what the working set did not need --
 * at most a few sheaves, from the slow path that noticed, never in a burst. */
/* Adaptive capacity (docs/design.md, D2; the ladder is set at creation, cache/create.c):
 * move one step, or to the default (@dir == -2). */
void sheaf_capacity_adapt(struct sheaf_cache *c, int dir)
{
	if (!atomic_load_explicit(&c->capacity_adaptive, memory_order_relaxed))
		return;
	unsigned cur = atomic_load_explicit(&c->capacity_step, memory_order_relaxed), next;
	do {
		if (dir > 0) /* the rate (1) within its steps, a bulk call (2) beyond */
			next = cur + 1 < (dir == 2 ? c->capacity_steps : c->capacity_steps_rate) ?
				       cur + 1 :
				       cur;
		else
			next = dir == -2 || cur == 0 ? 0 : cur - 1;
		if (next == cur)
			return;
	} while (!atomic_compare_exchange_weak_explicit(
		&c->capacity_step, &cur, next, memory_order_relaxed, memory_order_relaxed));
	uint32_t cap = c->capacity_ladder[next];
	/* The barns' limits are in bytes of objects: fewer, larger sheaves (D6). */
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		struct sheaf_barn *b = c->node[i]->barn;
		sheaf_mutex_lock(&b->lock, SHEAF_LOCK_BARN);
		sheaf_barn_set_limits(b, (size_t)cap * c->slot_size);
		sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	}
	/* D2: sheaves of the old capacity drain lazily. */
	atomic_store_explicit(&c->sheaf_capacity, cap, memory_order_relaxed);
	atomic_fetch_add_explicit(next > cur ? &c->capacity_grows : &c->capacity_shrinks, 1,
				  memory_order_relaxed);
}

void sheaf_barn_maybe_trim(struct sheaf_cache *c, struct sheaf_barn *b, struct sheaf_pcs *pcs)
{
	/* Adaptive capacity (D2): the barn measured its exchange rate (barn.c). */
	if (sheaf_unlikely(atomic_load_explicit(&b->adapt_due, memory_order_relaxed))) {
		int dir = atomic_exchange_explicit(&b->adapt_due, 0, memory_order_relaxed);
		if (dir)
			sheaf_capacity_adapt(c, dir);
	}
	if (sheaf_likely(!sheaf_rd(b->trim_due)) || !c->policy.barn_trim ||
	    !sheaf_option_long(SHEAF_OPT_BARN_EWMA))
		return;
	struct sheaf_list full, empty, *pos, *tmp;
	sheaf_list_init(&full);
	sheaf_list_init(&empty);
	sheaf_barn_trim(b, &full, &empty);
	uint64_t n = 0;
	sheaf_list_for_each_safe(pos, tmp, &full) {
		struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
		sheaf_list_del(&s->link);
		sheaf_sheaf_flush(c, s, pcs ? pcs->stat : NULL);
		sheaf_sheaf_free(c, s);
		n++;
	}
	sheaf_list_for_each_safe(pos, tmp, &empty) {
		struct sheaf_sheaf *s = sheaf_container_of(pos, struct sheaf_sheaf, link);
		sheaf_list_del(&s->link);
		sheaf_sheaf_free(c, s);
		n++;
	}
	if (n)
		sheaf_stat(c, pcs, SHEAF_STAT_BARN_TRIM, n);
}

/* ---- Main empty (K§2.2) ------------------------------------------------------------- */

static bool replace_empty(struct sheaf_cache *c, struct sheaf_pcs *pcs, bool refill);

bool sheaf_pcs_replace_empty_main(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	return replace_empty(c, pcs, true);
}

bool sheaf_pcs_swap_or_barn(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	return replace_empty(c, pcs, false);
}

/* Step 2 of replace-empty: the empty main (and an empty spare of the same capacity)
 * given to the barn for full sheaves, in one visit; returns the full sheaf for main, or
 * NULL (the barn had none).  Two full sheaves come back when the spare was given too:
 * the next miss is then a swap, and a producer CPU pays one barn lock per
 * 2 x capacity objects (issue 3 point 3). */
static struct sheaf_sheaf *barn_full_for_main(struct sheaf_cache *c, struct sheaf_pcs *pcs,
					      struct sheaf_barn *b)
{
	struct sheaf_sheaf *m = pcs->main, *full = NULL;
	if (is_sentinel(m) || m->capacity != cur_capacity(c)) {
		full = sheaf_barn_get_full(b, 1);
		if (full)
			retire_empty(c, b, m);
		return full;
	}
	struct sheaf_sheaf *give[2] = { m, NULL }, *got[2] = { NULL, NULL };
	unsigned ng = 1;
	if (pcs->spare && pcs->spare->size == 0 && pcs->spare->capacity == m->capacity)
		give[ng++] = pcs->spare;
	unsigned n = sheaf_barn_swap_empties(b, give, ng, got, 2);
	if (!n)
		return NULL;
	full = got[0];
	if (ng == 2)
		pcs->spare = NULL;
	if (n == 2) {
		if (pcs->spare) {
			/* spare was NULL-or-given; keep the second full one */
			sheaf_barn_put_full(b, got[1]);
		} else {
			pcs->spare = got[1];
		}
	}
	return full;
}

/* D6, refill by demand (docs/design.md): how many objects a refill of main from slabs
 * may take.  A CPU's first refill of the cache, or one more than SHEAF_REFILL_QUIET_NS
 * after its previous one, takes SHEAF_REFILL_QUIET_BYTES of objects where the whole sheaf
 * would hold more than the D1 floor.  A class the program uses now and then, a block of
 * 8 KiB here and there, then puts one or two objects into circulation instead of a
 * sheaf's worth (9 of 24 KiB, 216 KiB): each object a sheaf holds is, sooner or later,
 * handed out, written and resident.  A refill sooner than that means the CPU is using the
 * class: it fills the sheaf, as the kernel's always does (K§2.2 step 3), but after a part
 * refill only up to one sheaf's worth taken in all (capacity - part).  Taking a whole
 * sheaf on top of the part left batches between the two sizes (20 objects of 1 KiB, a
 * capacity of 41) with part + capacity objects, more than a sheaf holds, so that main
 * and spare were swapped twice a batch for as long as the loop ran (adversarial review,
 * 2026-11-29: 1.5x the time).  Sheaves within the floor are always filled: a batch larger
 * than a part refill of them (100 objects of 256 B) would swap the same way.  Not for a
 * capacity the caller chose (c->refill_demand).  The malloc shape `thread` (random sizes
 * of 4 B to 32 KiB, two threads) peaked at 1,992-2,132 KiB with whole refills and about
 * 1,300-1,450 with this (mimalloc 1,300), in the same time (docs/benchmarks.md). */
static uint32_t refill_budget(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	if (!atomic_load_explicit(&c->refill_demand, memory_order_relaxed))
		return UINT32_MAX;
	uint32_t cap = cur_capacity(c);
	if ((uint64_t)cap * c->slot_size <= SHEAF_SHEAF_MIN_BYTES)
		return UINT32_MAX;
	uint64_t now = sheaf_os_now_ns(), last = pcs->last_refill_ns;
	uint32_t part = pcs->refill_part;
	pcs->last_refill_ns = now;
	pcs->refill_part = 0;
	if (last && now - last < SHEAF_REFILL_QUIET_NS)
		return part && part < cap ? cap - part : UINT32_MAX;
	uint32_t n = (uint32_t)(SHEAF_REFILL_QUIET_BYTES / c->slot_size);
	pcs->refill_part = n ? n : 1;
	return pcs->refill_part;
}

/* Step 3 of replace-empty: refill main from slabs (D4: always allowed; the caller can
 * spin), first replacing a sentinel or stale-capacity main by an empty sheaf. */
static bool refill_main(struct sheaf_cache *c, struct sheaf_pcs *pcs, struct sheaf_barn *b)
{
	struct sheaf_sheaf *m = pcs->main;
	if (is_sentinel(m) || m->capacity != cur_capacity(c)) {
		struct sheaf_sheaf *e = get_empty(c, b);
		if (!e)
			return false;
		if (!is_sentinel(m))
			sheaf_sheaf_free(c, m);
		install_main(pcs, e);
		m = e;
	}
	return sheaf_refill_upto(c, sheaf_pcs_mem_node(c, pcs), m, pcs->stat,
				 refill_budget(c, pcs)) > 0;
}

static bool replace_empty(struct sheaf_cache *c, struct sheaf_pcs *pcs, bool refill)
{
	struct sheaf_sheaf *m = pcs->main;
	struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);

	/* 1. A non-empty spare: swap, no barn access. */
	if (pcs->spare && pcs->spare->size) {
		struct sheaf_sheaf *sp = pcs->spare;
		pcs->spare = is_sentinel(m) ? NULL : m;
		install_main(pcs, sp);
		sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_SWAP, 1);
		return true;
	}
	/* 2. Exchange the empty main for a full sheaf of the barn. */
	if (b->enabled) {
		struct sheaf_sheaf *full = barn_full_for_main(c, pcs, b);
		if (full) {
			install_main(pcs, full);
			sheaf_stat_add(pcs, SHEAF_STAT_BARN_GET, 1);
			sheaf_barn_maybe_trim(c, b, pcs);
			return true;
		}
		sheaf_stat_add(pcs, SHEAF_STAT_BARN_GET_FAIL, 1);
	} else if (c->policy.slab_path_without_barn) {
		/* Linux 7.0: no barn on a memoryless node, so no refill either (K§2.2 step 3);
		 * every miss takes the single-object slab path (seed 001). */
		return false;
	}
	/* 3. Refill from slabs. */
	return refill && refill_main(c, pcs, b);
}

/* ---- Bulk calls larger than a sheaf (issue 18) ----------------------------------------- */

/* D2 for bulk callers: a call for @n objects, more than the current capacity, moves the
 * adaptive capacity one step up; then an empty main or spare of a smaller capacity gives
 * way at once (main to an empty sheaf of the current capacity, the spare to none).
 * Without that, main and spare of the old capacity would swap under the pcs lock on every
 * such call and never pass through the barn, where stale sheaves are retired (a batch of
 * 128 on capacity 121: two lock round trips per alloc/free pair).  A cache that does not
 * adapt (a capacity given, SHEAF_KERNEL_COMPAT, the top step) keeps its sheaves. */
void sheaf_pcs_bulk_fit(struct sheaf_cache *c, struct sheaf_pcs *pcs, size_t n)
{
	if (n > cur_capacity(c))
		sheaf_capacity_adapt(c, 2);
	uint32_t cap = cur_capacity(c);
	struct sheaf_sheaf *m = pcs->main, *sp = pcs->spare;
	if (sp && !sp->size && sp->capacity < cap) {
		sheaf_sheaf_free(c, sp);
		pcs->spare = NULL;
	}
	if (!is_sentinel(m) && !m->size && m->capacity < cap) {
		struct sheaf_sheaf *e = get_empty(c, sheaf_pcs_barn(c, pcs));
		if (e) {
			sheaf_sheaf_free(c, m);
			install_main(pcs, e);
		}
	}
}

/* ---- Main full (K§2.6) -------------------------------------------------------------- */

/* Step 4 of replace-full, both main and spare full: both go to the barn in one visit
 * and two empty sheaves come back (the consumer side of issue 3 point 3: one barn lock
 * per 2 x capacity objects).  Returns 0 with *@e the empty sheaf for main (or NULL:
 * none came back), or -E2BIG (the barn is over its limit) or -ENOENT (no barn). */
static int both_full_to_barn(struct sheaf_cache *c, struct sheaf_pcs *pcs, struct sheaf_barn *b,
			     struct sheaf_sheaf **e)
{
	struct sheaf_sheaf *m = pcs->main;
	*e = NULL;
	if (!b->enabled)
		return -ENOENT;
	struct sheaf_sheaf *give[2] = { m, pcs->spare }, *got[2] = { NULL, NULL };
	unsigned put = 0;
	unsigned ne = sheaf_barn_swap_fulls(b, give, pcs->spare->capacity == m->capacity ? 2 : 1,
					    got, &put);
	if (!put)
		return -E2BIG;
	sheaf_stat_add(pcs, SHEAF_STAT_BARN_PUT, put);
	*e = ne ? got[0] : NULL;
	if (put == 2) {
		pcs->spare = ne == 2 ? got[1] : NULL;
	} else if (ne == 2) {
		sheaf_barn_put_empty(b, got[1]);
	}
	if (pcs->spare && pcs->spare->size == 0 && pcs->spare->capacity != cur_capacity(c)) {
		sheaf_sheaf_free(c, pcs->spare);
		pcs->spare = NULL;
	}
	return 0;
}

/* After step 4 put sheaves in the barn: install @e (of the current capacity, else a
 * new one) as main.  Without memory for a sheaf, flush the full spare and use it as
 * main, or, when the spare went to the barn too, leave the sentinel (false: the
 * caller frees to slabs). */
static bool install_after_put(struct sheaf_cache *c, struct sheaf_pcs *pcs, struct sheaf_barn *b,
			      struct sheaf_sheaf *e)
{
	if (e && e->capacity != cur_capacity(c)) {
		sheaf_sheaf_free(c, e);
		e = NULL;
	}
	if (!e)
		e = sheaf_sheaf_new(c, cur_capacity(c));
	sheaf_barn_maybe_trim(c, b, pcs);
	if (e) {
		install_main(pcs, e);
		return true;
	}
	if (!pcs->spare) {
		pcs->main = &sheaf_sentinel_sheaf;
		return false;
	}
	struct sheaf_sheaf *sp = pcs->spare;
	pcs->spare = NULL;
	sheaf_sheaf_flush(c, sp, pcs->stat);
	install_main(pcs, sp);
	return true;
}

bool sheaf_pcs_replace_full_main(struct sheaf_cache *c, struct sheaf_pcs *pcs)
{
	struct sheaf_sheaf *m = pcs->main;
	struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);

	if (!b->enabled && c->policy.slab_path_without_barn)
		return false; /* K§2.6 step 1: no barn, free to the slab */
	if (is_sentinel(m)) {
		struct sheaf_sheaf *e = get_empty(c, b);
		if (!e)
			return false;
		install_main(pcs, e);
		return true;
	}
	/* D2: a full main of a stale capacity is handed on like any full sheaf. */
	if (!pcs->spare) {
		/* 2. No spare: main becomes the spare, an empty sheaf the main. */
		struct sheaf_sheaf *e = get_empty(c, b);
		if (!e) {
			/* 6. Nothing at all: flush main to slabs (K§2.6 step 6). */
			sheaf_sheaf_flush(c, m, pcs->stat);
			return true;
		}
		pcs->spare = m;
		install_main(pcs, e);
		return true;
	}
	if (pcs->spare->size < pcs->spare->capacity) {
		/* 3. Spare has room: swap. */
		struct sheaf_sheaf *sp = pcs->spare;
		pcs->spare = m;
		install_main(pcs, sp);
		sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_SWAP, 1);
		return true;
	}
	/* 4. Both full: both to the barn, empty sheaves back. */
	struct sheaf_sheaf *e;
	if (both_full_to_barn(c, pcs, b, &e) == 0)
		return install_after_put(c, pcs, b, e);
	/* 5. Barn over its limit (or none): flush the full spare, reuse it (K§2.6 step 5). */
	sheaf_stat_add(pcs, SHEAF_STAT_BARN_PUT_FAIL, 1);
	struct sheaf_sheaf *sp = pcs->spare;
	sheaf_sheaf_flush(c, sp, pcs->stat);
	pcs->spare = m;
	install_main(pcs, sp);
	return true;
}

/* ---- Drain (thread exit, shrink, destroy; K§2.9) ------------------------------------ */

static void drain_sheaf(struct sheaf_cache *c, struct sheaf_pcs *pcs, struct sheaf_sheaf *s,
			bool to_slabs)
{
	struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
	if (s->size && !to_slabs && b->enabled && s->capacity == cur_capacity(c) &&
	    sheaf_rd(b->nr_full) < sheaf_rd(b->max_full)) {
		sheaf_barn_put_full(b, s);
		sheaf_stat_add(pcs, SHEAF_STAT_BARN_PUT, 1);
		return;
	}
	sheaf_sheaf_flush(c, s, pcs->stat);
	if (to_slabs)
		sheaf_sheaf_free(c, s);
	else
		retire_empty(c, b, s);
}

void sheaf_pcs_drain(struct sheaf_cache *c, struct sheaf_pcs *pcs, bool to_slabs)
{
	sheaf_pcs_harvest(pcs);
	/* rcu_free is the RCU layer's, under pcs->rcu_lock, which a barrier may hold
	 * right now: the hook looks under that lock (an unlocked test of it here was a
	 * data race TSan reported against the barrier's take, 2026-11-29). */
	if (sheaf_percpu_hooks.rcu_flush_pcs)
		sheaf_percpu_hooks.rcu_flush_pcs(c, pcs); /* rcu/ */
	if (pcs->spare) {
		drain_sheaf(c, pcs, pcs->spare, to_slabs);
		pcs->spare = NULL;
	}
	struct sheaf_sheaf *m = pcs->main;
	if (!is_sentinel(m)) {
		/* Main stays allocated only in per-CPU mode; the caller frees a thread's. */
		if (m->size) {
			struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
			if (!to_slabs && b->enabled &&
			    sheaf_rd(b->nr_full) < sheaf_rd(b->max_full) &&
			    m->capacity == cur_capacity(c)) {
				sheaf_barn_put_full(b, m);
				sheaf_stat_add(pcs, SHEAF_STAT_BARN_PUT, 1);
				pcs->main = &sheaf_sentinel_sheaf;
			} else {
				sheaf_sheaf_flush(c, m, pcs->stat);
			}
		}
	}
	sheaf_pcs_rebase(pcs);
}
