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
	size_t done = 0;
	struct sheaf_pcs *pcs = NULL;
	if (atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed) && !c->debug_flags)
		pcs = sheaf_pcs_lock(c);
	if (pcs) {
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
			/* Swap in a spare or a barn sheaf, but do not refill a sheaf only to
			 * copy it out again: the rest comes from slabs directly (K§2.8). */
			struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
			if (!(pcs->spare && pcs->spare->size) && !(b->enabled && sheaf_rd(b->nr_full)))
				break;
			if (!sheaf_pcs_swap_or_barn(c, pcs) || !pcs->main->size)
				break;
		}
		sheaf_pcs_unlock(c, pcs);
	}
	for (size_t i = 0; i < done; i++) {
		sheaf_mark_clear(c, objs[i]);
		sheaf_track_obj_alloc(c, objs[i]);
	}
	if (done < n) {
		size_t rest = n - done;
		struct sheaf_node *nd = local_mem_node(c);
		size_t got = 0;
		while (got < rest) {
			unsigned want = (unsigned)SHEAF_MIN(rest - got, (size_t)1u << 30);
			unsigned k;
			if (c->debug_flags) {
				void *o = cache_alloc_from_slab(c, __builtin_return_address(0));
				k = o ? 1 : 0;
				if (o)
					objs[done + got] = o;
			} else {
				k = sheaf_slab_refill(c, nd, objs + done + got, want, want);
				sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_SLOWPATH, k);
			}
			if (!k)
				break;
			got += k;
		}
		for (size_t i = done; i < done + got; i++) {
			sheaf_mark_clear(c, objs[i]);
			sheaf_track_obj_alloc(c, objs[i]);
		}
		if (got < rest) {
			/* All or nothing (K§2.8 step 4). */
			sheaf_cache_free_bulk(c, done + got, objs);
			errno = ENOMEM;
			return 0;
		}
	}
	return n;
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
	void *remote[SHEAF_PCS_BATCH];
	unsigned nremote = 0;
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
		if (c->free_mark) {
			uint64_t *mk = sheaf_mark_word(c, obj);
			if (sheaf_unlikely(*mk == sheaf_free_key)) {
				/* Maybe a double free: confirm with no lock held and with this
				 * call's earlier objects where the search can see them. */
				if (pcs)
					sheaf_pcs_unlock(c, pcs);
				if (nremote) {
					sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, nremote);
					sheaf_slab_free_bulk(c, remote, nremote);
					nremote = 0;
				}
				bool ok = sheaf_free_mark_check(c, obj);
				pcs = sheaf_pcs_lock(c);
				if (!ok)
					continue; /* reported */
			}
			*mk = sheaf_free_key;
		}
		bool local = pcs && (key == pcs->key || (!c->kernel_compat && !sheaf_g.node_has_mem[pcs->node]));
		if (local) {
			struct sheaf_sheaf *m = pcs->main;
			if (m->size >= m->capacity && !sheaf_pcs_replace_full_main(c, pcs))
				local = false;
		}
		if (local) {
			sheaf_sheaf_push(pcs->main, obj);
			sheaf_stat_add(pcs, SHEAF_STAT_FREE_FASTPATH, 1);
			continue;
		}
		remote[nremote++] = obj;
		if (nremote == SHEAF_PCS_BATCH) {
			sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, nremote);
			sheaf_slab_free_bulk(c, remote, nremote);
			nremote = 0;
		}
	}
	if (pcs)
		sheaf_pcs_unlock(c, pcs);
	if (nremote) {
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLOWPATH, nremote);
		sheaf_slab_free_bulk(c, remote, nremote);
	}
}
