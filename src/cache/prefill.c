/* SPDX-License-Identifier: MIT */
/*
 * prefill.c - prefilled sheaves (K§5): a sheaf lent to the program, from which it
 * allocates without failing inside a critical section.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_impl.h"

/* ---- Prefilled sheaves (K§5) ------------------------------------------------------- */

static inline struct sheaf_sheaf *to_sheaf(struct sheaf_prefilled *p)
{
	return (struct sheaf_sheaf *)p;
}

/* A sheaf lent to the program as prefilled: on c->prefilled, where the double-free
 * search finds its objects (they are free until alloc_from hands them out).  Marked
 * under the lock, as prefilled_held takes it off. */
static void prefilled_lend(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	sheaf_mutex_lock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	s->flags |= SHEAF_SH_PREFILLED;
	sheaf_list_add(&s->link, &c->prefilled);
	sheaf_mutex_unlock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
}

/* May @s, in a slab of cache @m, be read as a sheaf?  Only if @m is a metadata cache and
 * @s is the start of one of its objects that is not free.  A sheaf the first return freed
 * (an oversize one of up to 505 objects, or one of an old capacity) was read by a second
 * return or a refill after it: stale bytes, whose flag the return had cleared, so no
 * wrong answer, but ASan builds died of use-after-poison there instead of the report
 * (found by fuzz_cache, tests/fuzz/fuzz_model_more.h).  An interior address (the objects
 * of a sheaf of another size) is no sheaf either, and its fields could lie in a slot's
 * poisoned padding. */
static bool meta_slot_live(const struct sheaf_cache *m, const void *s)
{
	if (!m->is_meta || !sheaf_obj_is_start(m, s))
		return false;
	return !(sheaf_track_cache(m) && sheaf_track_asan_ok(m) && sheaf_track_is_poisoned(s));
}

/* May @s be read as a sheaf?  Every sheaf lives in a metadata slab (cache/meta.c), so
 * in the heap only where the page map says one holds @s as a live slot (mapped while
 * that slab lives: its mark and cache tell, in O(1)).  A returned sheaf's slot is free,
 * or its slab gone and its pages perhaps unmapped; reading it died of SIGSEGV (a sheaf
 * of more than 505 objects had a mapping of its own until 2026-11-30) or, under ASan,
 * of use-after-poison.  Outside the heap, never: the only sheaves there were mapped when
 * their class had no memory (the heap window full) and are unmapped when freed, so they
 * are found by address among the lent ones first (prefilled_held, prefilled_owner); a
 * returned one was read there (SIGSEGV), and so was a garbage handle (NULL + 8, an
 * unmapped address, a small glibc block under ASan). */
static bool prefilled_readable(const struct sheaf_sheaf *s)
{
	uintptr_t k;
	return sheaf_page_lookup(s, &k) && k && meta_slot_live(sheaf_key_owner(k)->cache, s);
}

/* The same for alloc_from, which a program calls once per object: without the slot-start
 * test (an address inside a live metadata slab is mapped; the flag test that follows
 * turns down what is no lent sheaf), inline: alloc_from went from 33 to 48
 * instructions an object (callgrind, a loop of 32 alloc_from per refill,
 * 2026-11-30), where the full test, a call, took it to 63. */
static inline bool prefilled_mapped(const struct sheaf_sheaf *s)
{
	uintptr_t k;
	if (!sheaf_page_lookup(s, &k) || !k)
		return false; /* outside the heap: prefilled_ok looks for it by address */
	const struct sheaf_cache *m = sheaf_key_owner(k)->cache;
	/* Under ASan the full test: an address inside a live sheaf, past its objects, lies
	 * in its slot's poisoned padding, and the reads that follow died there of
	 * use-after-poison instead of the report.  Constant false elsewhere. */
	if (sheaf_track_cache(m) && sheaf_track_asan_ok(m))
		return meta_slot_live(m, s);
	return m->is_meta;
}

/* Is @s a sheaf @c lent and the program still holds?  Taken off c->prefilled and
 * unmarked (@take) when it is.  @s is read only if prefilled_readable; a sheaf outside
 * the heap (mapped on its own, and perhaps unmapped at its return) is looked for in
 * c->prefilled by address, one step per sheaf the program holds. */
static bool prefilled_held(struct sheaf_cache *c, struct sheaf_sheaf *s, bool take)
{
	bool in_heap = sheaf_page_in_heap(s);
	if (in_heap && !prefilled_readable(s))
		return false; /* an object of a cache, or no live sheaf: not one lent */
	bool found = false;
	sheaf_mutex_lock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	if (in_heap)
		found = s->cache == c && (s->flags & SHEAF_SH_PREFILLED);
	for (struct sheaf_list *pos = c->prefilled.next; !in_heap && pos != &c->prefilled;
	     pos = pos->next)
		if (pos == &s->link) {
			found = true;
			break;
		}
	if (found && take) {
		sheaf_list_del(&s->link);
		s->flags &= ~SHEAF_SH_PREFILLED;
	}
	sheaf_mutex_unlock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	return found;
}

#define OWNER_MAX sizeof(((struct sheaf_cache *)0)->name)

/* The live cache other than @skip that lent @s and whose program holds it, its name in
 * @owner (of OWNER_MAX bytes, "" if none); found as prefilled_held finds it. */
static bool prefilled_owner(const struct sheaf_cache *skip, struct sheaf_sheaf *s, char *owner)
{
	owner[0] = 0;
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	struct sheaf_list *pos;
	for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches && !owner[0]; pos = pos->next) {
		struct sheaf_cache *d = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		if (d != skip && !d->is_meta && prefilled_held(d, s, false))
			snprintf(owner, OWNER_MAX, "%s", d->name);
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	return owner[0] != 0;
}

/* @s is not a sheaf @c lent: reported, naming the live cache that lent it if one did
 * (found the same way, without reading @s), else as returned already. */
static void prefilled_report(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	char owner[OWNER_MAX];
	if (prefilled_owner(c, s, owner))
		sheaf_error(SHEAF_ERR_WRONG_SHEAF, c->name, s, "a prefilled sheaf of cache '%s'",
			    owner);
	else
		sheaf_error(SHEAF_ERR_WRONG_SHEAF, c->name, s,
			    "not a prefilled sheaf of this cache (returned already?)");
}

/* A live cache and a prefilled sheaf of that cache (reported otherwise: a sheaf knows
 * its cache, and one of another cache would mix their objects).  For alloc_from, whose
 * caller holds the sheaf: lock-free (a walk of c->prefilled there would put a lock on
 * every guaranteed allocation), reading @s once the page map says it may. */
static bool prefilled_ok(struct sheaf_cache *c, struct sheaf_sheaf *s)
{
	if (!sheaf_cache_check(c))
		return false;
	if (sheaf_unlikely(!prefilled_mapped(s))) {
		/* Outside the heap a sheaf mapped on its own (the heap window full), which
		 * is read only once it is found among those @c lent: one step per sheaf
		 * the program holds, and a lock, there only. */
		if (sheaf_page_in_heap(s) || !prefilled_held(c, s, false)) {
			prefilled_report(c, s);
			return false;
		}
		return true;
	}
	if (sheaf_unlikely(s->cache != c || !(s->flags & SHEAF_SH_PREFILLED))) {
		/* The owner is named as return names it, never through s->cache: @s may be
		 * inside a sheaf, or a slot reused for other metadata, whose word there is
		 * no cache (an address 8 bytes into a lent sheaf died of SIGSEGV reading
		 * its "name", one further in printed bytes of an object). */
		if (s->cache != c)
			prefilled_report(c, s);
		else
			sheaf_error(SHEAF_ERR_WRONG_SHEAF, c->name, s,
				    "not a prefilled sheaf (returned already?)");
		return false;
	}
	return true;
}

/* The same for return and refill, without reading @s before it is found among the
 * sheaves @c lent; taken off the list (@take) for a return. */
static bool prefilled_held_ok(struct sheaf_cache *c, struct sheaf_sheaf *s, bool take)
{
	if (!sheaf_cache_check(c))
		return false;
	if (sheaf_unlikely(!prefilled_held(c, s, take))) {
		prefilled_report(c, s);
		return false;
	}
	return true;
}

/* Refill @s from slabs, to its full capacity (K§5 step 2: not just to @n).  Short of
 * @n (no memory for new slabs), the cache's free objects in its CPUs' (or, per-thread,
 * the caller's) sheaves and in its barns serve, as they serve alloc and alloc_bulk: at
 * the heap's cap, a prefill of 20 objects with 100 free in the barn failed with ENOMEM
 * until 2026-11-30, and one of 10 with 15 free in the caller's sheaves after that (of up
 * to 8,192 with SHEAF_SHEAF_CAPACITY=4096; test_prefill_heap_cap). */
static void prefilled_refill(struct sheaf_cache *c, struct sheaf_sheaf *s, unsigned int n)
{
	sheaf_sheaf_refill(c, local_mem_node(c), s, NULL);
	if (s->size < n) {
		sheaf_pcs_shrink_all(c);
		cache_barns_flush(c);
		sheaf_sheaf_refill(c, local_mem_node(c), s, NULL);
	}
}

/* Refill @s to its full capacity from slabs (K§5 step 2: not just to @n); if it still
 * holds fewer than @n objects, give everything back and fail with ENOMEM. */
static bool prefill_to_capacity(struct sheaf_cache *c, struct sheaf_sheaf *s, unsigned int n)
{
	if (s->size >= n)
		return true;
	/* A refill that stopped short of full capacity (no memory for one more slab) has
	 * set errno; enough for @n is a success, which keeps the caller's errno. */
	int e = errno;
	prefilled_refill(c, s, n);
	if (s->size >= n) {
		errno = e;
		return true;
	}
	sheaf_sheaf_flush(c, s, NULL);
	sheaf_sheaf_free(c, s);
	errno = ENOMEM;
	return false;
}

static struct sheaf_prefilled *prefill_oversize(struct sheaf_cache *c, unsigned int n)
{
	struct sheaf_sheaf *s = sheaf_sheaf_new(c, n);
	if (!s)
		return NULL;
	s->flags = SHEAF_SH_OVERSIZE;
	/* K§5: an oversize sheaf is filled straight from slabs. */
	if (!prefill_to_capacity(c, s, n))
		return NULL;
	prefilled_lend(c, s);
	sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_PREFILL_OVERSIZE, 1);
	return (struct sheaf_prefilled *)s;
}

SHEAF_API struct sheaf_prefilled *sheaf_cache_prefill(struct sheaf_cache *c, unsigned int n)
{
	if (!sheaf_cache_check(c) || !cache_capacity_ok(c, n)) {
		errno = EINVAL;
		return NULL;
	}
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	if (cap == 0 || n > cap)
		return prefill_oversize(c, n);
	struct sheaf_sheaf *s = NULL;
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (pcs) {
		if (pcs->spare) {
			s = pcs->spare;
			pcs->spare = NULL;
			sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_PREFILL_FAST, 1);
		} else {
			struct sheaf_barn *b = sheaf_pcs_barn(c, pcs);
			s = sheaf_barn_get_full(b, 1);
			sheaf_stat_add(pcs, s ? SHEAF_STAT_BARN_GET : SHEAF_STAT_BARN_GET_FAIL, 1);
			if (!s)
				s = sheaf_barn_get_empty(b);
			sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_PREFILL_SLOW, 1);
		}
		sheaf_pcs_unlock(c, pcs);
	} else {
		sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_PREFILL_SLOW, 1);
	}
	if (s && s->capacity != cap) {
		sheaf_sheaf_flush(c, s, NULL);
		sheaf_sheaf_free(c, s);
		s = NULL;
	}
	if (!s)
		s = sheaf_sheaf_new(c, cap);
	if (!s || !prefill_to_capacity(c, s, n))
		return NULL;
	prefilled_lend(c, s);
	return (struct sheaf_prefilled *)s;
}

SHEAF_API void *sheaf_cache_alloc_from(struct sheaf_cache *c, struct sheaf_prefilled *p)
{
	struct sheaf_sheaf *s = to_sheaf(p);
	void *o;
	if (!s || !prefilled_ok(c, s))
		return NULL;
	do {
		if (s->size == 0)
			return NULL;
		o = sheaf_sheaf_pop(s);
		/* Counted like any allocation from a sheaf (K§6.1 ALLOC_FASTPATH). */
		sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_FASTPATH, 1);
		/* A debug cache's prefilled objects come straight from its slabs, still
		 * free: check and mark them as every other allocation (corrupt: leaked). */
	} while (sheaf_unlikely(c->debug_flags) &&
		 sheaf_debug_slab_alloc(c, o, __builtin_return_address(0)) != 0);
	sheaf_mark_clear(c, o);
	sheaf_track_obj_alloc(c, o); /* track.h */
	return o;
}

SHEAF_API unsigned int sheaf_prefilled_size(const struct sheaf_prefilled *p)
{
	const struct sheaf_sheaf *s = (const struct sheaf_sheaf *)p;
	if (!s)
		return 0;
	char owner[OWNER_MAX];
	if (!sheaf_page_in_heap(s) && prefilled_owner(NULL, (struct sheaf_sheaf *)s, owner))
		return s->size; /* mapped on its own, and lent (prefilled_readable) */
	if (sheaf_unlikely(!prefilled_readable(s) || !(s->flags & SHEAF_SH_PREFILLED))) {
		/* No cache to name: the call has none, and a returned sheaf's may be stale.
		 * The flag, which the return clears, is past the words a free writes. */
		sheaf_error(SHEAF_ERR_WRONG_SHEAF, "?", s,
			    "not a prefilled sheaf (returned already?)");
		return 0;
	}
	return s->size;
}

SHEAF_API void sheaf_cache_return(struct sheaf_cache *c, struct sheaf_prefilled *p)
{
	struct sheaf_sheaf *s = to_sheaf(p);
	if (!s || !prefilled_held_ok(c, s, true))
		return; /* reported; under warn the sheaf and its objects are leaked */
	sheaf_list_init(&s->link);
	uint32_t cap = atomic_load_explicit(&c->sheaf_capacity, memory_order_relaxed);
	if ((s->flags & SHEAF_SH_OVERSIZE) || s->capacity != cap) {
		sheaf_sheaf_flush(c, s, NULL);
		sheaf_sheaf_free(c, s);
		return;
	}
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	if (pcs && !pcs->spare) {
		pcs->spare = s;
		sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_RETURN_FAST, 1);
		sheaf_pcs_unlock(c, pcs);
		return;
	}
	struct sheaf_barn *b = pcs ? sheaf_pcs_barn(c, pcs) : local_mem_node(c)->barn;
	if (pcs) {
		sheaf_stat_add(pcs, SHEAF_STAT_SHEAF_RETURN_SLOW, 1);
		sheaf_pcs_unlock(c, pcs);
	} else {
		sheaf_stat_atomic(c, SHEAF_STAT_SHEAF_RETURN_SLOW, 1);
	}
	if (b->enabled && sheaf_rd(b->nr_full) < sheaf_rd(b->max_full)) {
		sheaf_sheaf_refill(c, local_mem_node(c), s, NULL);
		if (s->size) {
			sheaf_barn_put_full(b, s);
			sheaf_stat_atomic(c, SHEAF_STAT_BARN_PUT, 1);
			return;
		}
	}
	sheaf_sheaf_flush(c, s, NULL);
	sheaf_sheaf_free(c, s);
}

SHEAF_API int sheaf_cache_refill(struct sheaf_cache *c, struct sheaf_prefilled **pp, unsigned int n)
{
	if (!pp || !*pp || !prefilled_held_ok(c, to_sheaf(*pp), false))
		return -EINVAL;
	if (!cache_capacity_ok(c, n))
		return -EINVAL;
	struct sheaf_sheaf *s = to_sheaf(*pp);
	if (s->size >= n)
		return 0;
	if (s->capacity >= n) {
		/* Regular sheaves refill to full capacity, oversize ones too (capacity == their
		 * original request). */
		int e = errno; /* as in prefill_to_capacity */
		prefilled_refill(c, s, n);
		errno = e;
		return s->size >= n ? 0 : -ENOMEM;
	}
	struct sheaf_prefilled *np = sheaf_cache_prefill(c, n);
	if (!np)
		return -ENOMEM;
	sheaf_cache_return(c, *pp);
	*pp = np;
	return 0;
}

/* Destroy: the prefilled sheaves the program did not return.  Their objects were never
 * handed out: they go back to their slabs, so that the leak count that follows is of
 * objects the program holds (a forgotten sheaf of 8 was reported as 121 objects still
 * allocated, its whole capacity, and kept the cache's memory, until 2026-11-29).  Each
 * sheaf is kept, empty and no longer lent: the program's handle still reads as a
 * returned sheaf.  Returns how many sheaves there were; @objs: their objects. */
unsigned long cache_prefilled_reclaim(struct sheaf_cache *c, unsigned long *objs)
{
	struct sheaf_list held;
	unsigned long n = 0;
	*objs = 0;
	sheaf_list_init(&held);
	sheaf_mutex_lock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	while (!sheaf_list_empty(&c->prefilled)) {
		struct sheaf_sheaf *s =
			sheaf_container_of(c->prefilled.next, struct sheaf_sheaf, link);
		sheaf_list_del(&s->link);
		s->flags &= ~SHEAF_SH_PREFILLED;
		sheaf_list_add(&s->link, &held);
	}
	sheaf_mutex_unlock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	/* Flushed with no lock held: list_lock ranks before prefilled_lock (base/lock.h). */
	while (!sheaf_list_empty(&held)) {
		struct sheaf_sheaf *s = sheaf_container_of(held.next, struct sheaf_sheaf, link);
		sheaf_list_del(&s->link);
		sheaf_list_init(&s->link);
		*objs += s->size;
		sheaf_sheaf_flush(c, s, NULL);
		n++;
	}
	return n;
}
