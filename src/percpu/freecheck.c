/* SPDX-License-Identifier: MIT */
/*
 * freecheck.c - the free mark's confirmation (slab/freecheck.h has the checks), and
 * the out-of-line part of the bulk free's batch check (fastpath.h).
 *
 * A free that finds the free mark in the object may be a double free, or a live object
 * that happens to hold the key.  Before anything is reported, the object is searched
 * for everywhere a free object of its cache can be: the sheaves of every CPU (or
 * thread), every barn, its slab's free list, the prefilled sheaves the program holds,
 * and the RCU layer's pending objects
 * (through sheaf_percpu_hooks.rcu_pending).  Per-CPU layer: it is the lowest layer that
 * sees all of these but the last.
 */
#include "percpu/percpu.h"

struct find_arg {
	const void *obj;
	bool found;
};

static bool sheaf_holds(const struct sheaf_sheaf *s, const void *obj);

static bool prefilled_hold(struct sheaf_cache *c, const void *obj)
{
	bool found = false;
	sheaf_mutex_lock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	const struct sheaf_list *pos;
	for (pos = c->prefilled.next; pos != &c->prefilled && !found; pos = pos->next)
		found = sheaf_holds(sheaf_container_of(pos, struct sheaf_sheaf, link), obj);
	sheaf_mutex_unlock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	return found;
}

static bool sheaf_holds(const struct sheaf_sheaf *s, const void *obj)
{
	if (!s)
		return false;
	uint32_t n = SHEAF_MIN(sheaf_rd(s->size), s->capacity);
	for (uint32_t i = 0; i < n; i++)
		if (__atomic_load_n(&s->objects[i], __ATOMIC_RELAXED) == obj)
			return true;
	return false;
}

static void find_in_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	(void)c;
	struct find_arg *f = arg;
	if (f->found)
		return;
	f->found = sheaf_holds(pcs->main, f->obj) || sheaf_holds(pcs->spare, f->obj);
}

/* Is @obj, whose free mark holds the key, really free?  Searched everywhere a free
 * object of @c can be: every CPU's (or thread's) sheaves, every barn, its slab's free
 * list, the prefilled sheaves the program holds, and the RCU layer's pending objects.  Called with no Sheaf lock held; slow,
 * and only reached by a double free or by a live object that holds the key.  An
 * object that another thread is moving between these places at this very moment
 * (a flush, a refill) is not seen: docs/debugging.md. */
static sheaf_noinline bool sheaf_free_confirm(struct sheaf_cache *c, const void *obj)
{
	struct find_arg f = { obj, false };
	sheaf_pcs_for_each(c, find_in_pcs, &f);
	/* A metadata cache keeps no sheaves and lends none: its barn and prefilled locks
	 * are never taken, and fork leaves them out (cache/init.c walk_locks). */
	for (int i = 0; !f.found && !c->is_meta && i < sheaf_g.nnodes; i++)
		f.found = !sheaf_barn_is_alias(c, i) && sheaf_barn_holds(c->node[i]->barn, obj);
	if (!f.found)
		f.found = sheaf_slab_holds_free(c, obj);
	if (!f.found && !c->is_meta)
		f.found = prefilled_hold(c, obj);
	if (!f.found && sheaf_percpu_hooks.rcu_pending) /* rcu/, registered at init */
		f.found = sheaf_percpu_hooks.rcu_pending(c, obj);
	return f.found;
}

bool sheaf_free_mark_check(struct sheaf_cache *c, const void *obj)
{
	if (sheaf_unlikely(*sheaf_mark_word(c, obj) == sheaf_mark_value(obj)) &&
	    sheaf_free_confirm(c, obj)) {
		sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
		return false;
	}
	return true;
}

bool sheaf_free_mark_confirmed(struct sheaf_cache *c, const void *obj)
{
	return *sheaf_mark_word(c, obj) == sheaf_mark_value(obj) && sheaf_free_confirm(c, obj);
}

bool sheaf_free_mark_take(struct sheaf_cache *c, void *obj)
{
	if (!sheaf_free_mark_check(c, obj))
		return false;
	*sheaf_mark_word(c, obj) = sheaf_mark_value(obj);
	return true;
}

/* fastpath.h sheaf_batch_check_p2's continuation, from objs[@i] (every object before
 * it passed).  Until the seventh session of 2026-11-28 the general loop took every
 * object from the first stopped round to the end, so a batch spread over several slabs
 * was checked one object at a time after its first slab change: 36 % of a bulk of
 * 128 x 256 B (perf, AMD EPYC).  Now the loop takes the round that stopped (up to four
 * objects) and the rounds go on in the slab of the last object that passed.  A batch
 * whose objects change slabs every few (a bulk of 512, which passes through slabs) would
 * then leave the rounds at once again and again: each time the rounds pass fewer than
 * four rounds' worth, the loop's stretch doubles. */
size_t sheaf_batch_check_rest_p2(const struct sheaf_cache *c, void *const *objs, size_t n, size_t i,
				 uintptr_t run, enum sheaf_batch_stop *stop)
{
	const uintptr_t hi = ~c->slab_mask, test = hi | c->start_mask;
	const uintptr_t fkey = run; /* the free mark of the run's objects: their key */
	size_t stretch = 4;
	for (;;) {
		/* The loop takes its slab from its objs[0]: one that passed (or objs[0]
		 * itself, whose key the caller found to be @run). */
		size_t b = i ? i - 1 : 0, end = i + SHEAF_MIN(n - i, stretch);
		size_t j = b + sheaf_batch_check_loop(c, objs + b, end - b, i - b, run,
						      c->start_mask, false, true, stop);
		if (j < end)
			return j; /* *stop says why */
		if (end == n)
			break;
		i = sheaf_batch_check_rounds(objs, n, end, (uintptr_t)objs[end - 1] & hi, test,
					     fkey);
		if (i == n)
			break;
		stretch = i - end >= 16 ? 4 : 2 * stretch;
	}
	*stop = SHEAF_BATCH_END;
	return n;
}
