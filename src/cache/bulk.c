/* SPDX-License-Identifier: MIT */
/*
 * bulk.c - bulk allocation and free (K§2.8): whole runs of objects through the
 * calling CPU's sheaves, the rest straight from and to slabs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_impl.h"

/* ---- Bulk (K§2.8) ------------------------------------------------------------------ */

/* Step 1: as many objects as the calling CPU's main, spare and barn have, under its
 * lock; returns how many went into @objs. */
static size_t bulk_from_sheaves(struct sheaf_cache *c, size_t n, void **objs)
{
	size_t done = 0;
	struct sheaf_pcs *pcs = NULL;
	if (atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) && !c->debug_flags)
		pcs = sheaf_pcs_lock(c);
	if (!pcs)
		return 0;
	while (done < n) {
		struct sheaf_sheaf *m = pcs->main;
		uint32_t take = (uint32_t)SHEAF_MIN((size_t)m->size, n - done);
		if (take) { /* never write to the shared sentinel */
			sheaf_sheaf_pop_n(m, objs + done, take);
			done += take;
			sheaf_stat_add(pcs, SHEAF_STAT_ALLOC_FASTPATH, take);
		}
		if (done == n)
			break;
		/* Swap in a spare or a barn sheaf, but do not refill a sheaf only to copy it
		 * out again: the rest comes from slabs directly (K§2.8). */
		struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
		if (!(pcs->spare && pcs->spare->size) && !(b->enabled && sheaf_rd(b->nr_full)))
			break;
		if (!sheaf_pcs_swap_or_barn(c, pcs) || !pcs->main->size)
			break;
	}
	sheaf_pcs_unlock(c, pcs);
	return done;
}

/* Step 2: up to @rest objects straight from slabs; returns how many.  @caller: the
 * program's call site, for debug caches. */
static size_t bulk_from_slabs(struct sheaf_cache *c, size_t rest, void **objs, const void *caller)
{
	struct sheaf_node *nd = local_mem_node(c);
	size_t got = 0;
	while (got < rest) {
		unsigned want = (unsigned)SHEAF_MIN(rest - got, (size_t)1u << 30);
		unsigned k;
		if (c->debug_flags) {
			void *o = cache_alloc_from_slab(c, caller);
			k = o ? 1 : 0;
			if (o)
				objs[got] = o;
		} else {
			k = sheaf_slab_refill(c, nd, objs + got, want, want);
			sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_SLOWPATH, k);
		}
		if (!k)
			break;
		got += k;
	}
	return got;
}

/* Objects handed out: the free mark cleared, the memory tools told. */
static void bulk_hand_out(struct sheaf_cache *c, void **objs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sheaf_mark_clear(c, objs[i]);
		sheaf_track_obj_alloc(c, objs[i]);
	}
}

SHEAF_API size_t sheaf_cache_alloc_bulk(struct sheaf_cache *c, size_t n, void **objs)
{
	if (!objs || n == 0)
		return 0;
	if (!sheaf_cache_check(c))
		return 0;
	/* All or nothing: a request for more than half the machine's memory fails at once
	 * instead of filling it first. */
	if (n > sheaf_bulk_limit / c->slot_size) {
		errno = ENOMEM;
		return 0;
	}
	size_t done = bulk_from_sheaves(c, n, objs);
	bulk_hand_out(c, objs, done);
	if (done < n) {
		size_t got = bulk_from_slabs(c, n - done, objs + done, __builtin_return_address(0));
		bulk_hand_out(c, objs + done, got);
		if (got < n - done) {
			/* All or nothing (K§2.8 step 4). */
			sheaf_cache_free_bulk(c, done + got, objs);
			errno = ENOMEM;
			return 0;
		}
	}
	return n;
}

/* Objects that go straight to their slabs, gathered in batches. */
struct bulk_remote {
	void *objs[SHEAF_PCS_BATCH];
	unsigned n;
};

static void bulk_remote_flush(struct sheaf_cache *c, struct bulk_remote *r)
{
	if (!r->n)
		return;
	sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, r->n);
	sheaf_slab_free_bulk(c, r->objs, r->n);
	r->n = 0;
}

/* The free mark of @obj: a set mark is maybe a double free, confirmed with no lock held
 * and with this call's earlier objects where the search can see them (so *@pcs is
 * dropped and retaken).  False: reported, skip the object. */
static bool bulk_mark(struct sheaf_cache *c, void *obj, struct sheaf_pcs **pcs, struct bulk_remote *r)
{
	uint64_t *mk = sheaf_mark_word(c, obj);
	if (sheaf_unlikely(*mk == sheaf_free_key)) {
		if (*pcs)
			sheaf_pcs_unlock(c, *pcs);
		bulk_remote_flush(c, r);
		bool ok = sheaf_free_mark_check(c, obj);
		*pcs = sheaf_pcs_lock(c);
		if (!ok)
			return false;
	}
	*mk = sheaf_free_key;
	return true;
}

/* One checked object: onto the locked CPU's main when it is local (K§2.5, D3), else
 * into the batch for the slabs. */
static void bulk_free_one(struct sheaf_cache *c, void *obj, uintptr_t key, struct sheaf_pcs *pcs,
			  struct bulk_remote *r)
{
	bool local = pcs && (key == pcs->key || (!c->kernel_compat && !sheaf_g.node_has_mem[pcs->node]));
	if (local) {
		struct sheaf_sheaf *m = pcs->main;
		if (m->size >= m->capacity && !sheaf_pcs_replace_full_main(c, pcs))
			local = false;
	}
	if (local) {
		sheaf_sheaf_push(pcs->main, obj);
		sheaf_stat_add(pcs, SHEAF_STAT_FREE_FASTPATH, 1);
		return;
	}
	r->objs[r->n++] = obj;
	if (r->n == SHEAF_PCS_BATCH)
		bulk_remote_flush(c, r);
}

SHEAF_API void sheaf_cache_free_bulk(struct sheaf_cache *c, size_t n, void **objs)
{
	if (!objs || !n)
		return;
	if (!sheaf_cache_check(c))
		return;
	if (c->debug_flags || sheaf_free_check_hook ||
	    atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) == 0) {
		for (size_t i = 0; i < n; i++)
			sheaf_cache_free_slowpath(c, objs[i], NULL);
		return;
	}
	struct bulk_remote r = { .n = 0 };
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	for (size_t i = 0; i < n; i++) {
		void *obj = objs[i];
		if (!obj)
			continue;
		uintptr_t key = sheaf_page_key(obj);
		if (sheaf_unlikely(!cache_free_ptr_ok(c, obj, key, "free_bulk")))
			continue; /* reported */
		if (sheaf_unlikely(sheaf_track_obj_free(c, obj))) {
			sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj, "the object is already free");
			continue;
		}
		if (c->free_mark && !bulk_mark(c, obj, &pcs, &r))
			continue; /* reported */
		bulk_free_one(c, obj, key, pcs, &r);
	}
	if (pcs)
		sheaf_pcs_unlock(c, pcs);
	bulk_remote_flush(c, &r);
}
