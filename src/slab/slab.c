/* SPDX-License-Identifier: MIT */
/*
 * slab.c - slabs and per-node partial lists (K§1.1-1.2, K§2.3, K§2.4, K§2.7; design §3).
 *
 * A slab is 2^order pages from the page heap holding objs_per_slab slots.  Its free
 * slots form a singly linked list of 16-bit indices kept inside the free slots (at
 * cache->freeptr_offset), encoded with a per-cache secret and the slot address so that
 * a stray write into a free object is caught when the list is walked (the kernel's
 * CONFIG_SLAB_FREELIST_HARDENED).  The head index, the in-use count and the object
 * count share one 64-bit word changed with a single compare-and-swap.
 *
 * Who changes what:
 *   - pops (single object, or a whole freelist) run under node->list_lock or on a slab
 *     the caller isolated from the partial list, so no two pops race (no ABA);
 *   - frees push a chain of one or more objects locklessly, taking list_lock only when
 *     the slab goes from full to partial or becomes empty (K§2.7).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "slab/slab.h"

struct sheaf_slab_hooks sheaf_slab_hooks; /* set by sheaf_rcu_init (rcu/) */

#define FC_LOAD(s) atomic_load_explicit(&(s)->sl_fc, memory_order_acquire)

static inline char *slot_at(const struct sheaf_cache *c, const struct sheaf_slab *s, uint32_t i)
{
	return s->sl_base + (size_t)i * c->slot_size;
}
static inline void *obj_at(const struct sheaf_cache *c, const struct sheaf_slab *s, uint32_t i)
{
	return slot_at(c, s, i) + c->obj_offset;
}
static inline uint32_t fp_key(const struct sheaf_cache *c, const char *slot)
{
	return (uint32_t)(c->random ^ ((uintptr_t)slot >> 3)) & 0xffffu;
}
static inline uint32_t fp_get(const struct sheaf_cache *c, const char *slot)
{
	uint16_t v;
	sheaf_track_fp_open(c, slot); /* free slots are poisoned (track.h) */
	memcpy(&v, slot + c->freeptr_offset, sizeof(v));
	sheaf_track_fp_close(c, slot);
	return (uint32_t)v ^ fp_key(c, slot);
}
static inline void fp_set(const struct sheaf_cache *c, char *slot, uint32_t next)
{
	uint16_t v = (uint16_t)((next ^ fp_key(c, slot)) & 0xffffu);
	sheaf_track_fp_open(c, slot);
	memcpy(slot + c->freeptr_offset, &v, sizeof(v));
	sheaf_track_fp_close(c, slot);
}
static inline size_t desc_index(const struct sheaf_slab *s)
{
	return (size_t)(s - sheaf_heap.desc);
}

/* ---- Creating and discarding slabs --------------------------------------------------- */

/* A new slab on memory node @n with its first @take objects already handed to objs[]
 * (take <= objs_per_slab).  Not on any list; the caller publishes it. */
static struct sheaf_slab *slab_new(struct sheaf_cache *c, struct sheaf_node *n, void **objs,
				   uint32_t take)
{
	char *mem = sheaf_page_alloc(c->order, n->nid);
	if (!mem)
		return NULL;
	size_t pg = (size_t)(mem - sheaf_heap.base) >> SHEAF_PAGE_SHIFT;
	struct sheaf_slab *s = &sheaf_heap.desc[pg];
	uint32_t npages = 1u << c->order, nobj = c->objs_per_slab;
	/* Field by field, not memset: the page heap reads pg_kind of live descriptors
	 * (buddy checks) under its own lock. */
	s->sl_node = n;
	s->sl_base = mem;
	s->pg_head_delta = 0;
	s->pg_order = (uint8_t)c->order;
	s->pg_node = (uint8_t)n->nid;
	s->sl_on_partial = 0;
	sheaf_wr(s->pg_kind, SHEAF_PG_SLAB);
	sheaf_list_init(&s->sl_list);
	for (uint32_t i = 1; i < npages; i++) {
		sheaf_wr(sheaf_heap.desc[pg + i].pg_kind, SHEAF_PG_TAIL);
		sheaf_heap.desc[pg + i].pg_head_delta = i;
	}
	sheaf_track_slab_open(c, mem, SHEAF_PAGE_SIZE << c->order);
	if (c->debug_flags)
		sheaf_debug_slab_init(c, mem, nobj);
	sheaf_assert_internal(((uintptr_t)mem & c->slab_mask) == 0); /* freecheck.h relies on it */
	const uintptr_t key = sheaf_key_encode(n); /* the page map's entry, and the free mark */
	for (uint32_t i = 0; i < nobj; i++) {
		if (c->ctor)
			c->ctor(obj_at(c, s, i));
		fp_set(c, slot_at(c, s, i), i + 1 < nobj ? i + 1 : SHEAF_FL_END);
		/* Free from the start: a free of a slot never handed out is a double free. */
		if (c->free_mark)
			*sheaf_mark_word(c, obj_at(c, s, i)) = key;
	}
	for (uint32_t i = 0; i < take; i++)
		objs[i] = obj_at(c, s, i);
	atomic_store_explicit(&s->sl_fc,
			      SHEAF_FC_MAKE(take < nobj ? take : SHEAF_FL_END, take, nobj, 0),
			      memory_order_relaxed);
	/* Every slot is free from the program's view until handed out (track.h). */
	sheaf_track_slab_close(c, mem, SHEAF_PAGE_SIZE << c->order);
	/* Publish: the descriptor is complete before any pointer into the slab resolves. */
	for (uint32_t i = 0; i < npages; i++)
		__atomic_store_n(&sheaf_heap.pagemap[pg + i], key, __ATOMIC_RELEASE);
	atomic_fetch_add_explicit(&n->nr_slabs, 1, memory_order_relaxed);
	sheaf_stat_atomic(c, SHEAF_STAT_ALLOC_SLAB, 1);
	return s;
}

/* Called under @n's list_lock for an empty slab leaving the node for slab_discard():
 * the slab stops counting now, in the same critical section that took it off the
 * partial list.  Counted until the discard, an empty slab on no list would read as full
 * in sheaf_slab_node_counts() (objects_inuse too high by a slab while another thread,
 * the reaper for one, discards). */
static inline void slab_unaccount_locked(struct sheaf_node *n)
{
	atomic_fetch_sub_explicit(&n->nr_slabs, 1, memory_order_relaxed);
}

/* @s is empty, on no list and no longer counted (slab_unaccount_locked()). */
static void slab_discard(struct sheaf_cache *c, struct sheaf_slab *s)
{
	/* Nobody else can reach an empty slab that is off the lists. */
	sheaf_assert_expensive(sheaf_slab_is_valid(c, s) && SHEAF_FC_INUSE(FC_LOAD(s)) == 0);
	struct sheaf_node *n = s->sl_node;
	size_t pg = desc_index(s);
	uint32_t npages = 1u << s->pg_order;
	unsigned order = s->pg_order;
	char *mem = s->sl_base;
	for (uint32_t i = 0; i < npages; i++)
		__atomic_store_n(&sheaf_heap.pagemap[pg + i], SHEAF_KEY_NONE, __ATOMIC_RELEASE);
	for (uint32_t i = 1; i < npages; i++) {
		sheaf_wr(sheaf_heap.desc[pg + i].pg_kind, SHEAF_PG_UNUSED);
		sheaf_heap.desc[pg + i].pg_head_delta = 0;
	}
	/* Not memset: a racing lookup of a stale pointer (a program's double free) may
	 * still read this descriptor; sl_node stays valid for as long as the cache. */
	atomic_store_explicit(&s->sl_fc, 0, memory_order_relaxed);
	s->sl_on_partial = 0;
	sheaf_wr(s->pg_kind, SHEAF_PG_UNUSED);
	atomic_fetch_add_explicit(&c->bytes_returned, SHEAF_PAGE_SIZE << order,
				  memory_order_relaxed);
	sheaf_stat_atomic(c, SHEAF_STAT_FREE_SLAB, 1);
	sheaf_track_slab_gone(c, mem, SHEAF_PAGE_SIZE << order);
	if (c->flags & SHEAF_TYPESAFE_BY_RCU)
		sheaf_slab_hooks.defer_pages(c, s); /* readers may still look (rcu/) */
	else
		sheaf_page_free(mem, order, n->nid);
}

static inline void add_partial(struct sheaf_node *n, struct sheaf_slab *s, bool tail)
{
	if (tail)
		sheaf_list_add_tail(&s->sl_list, &n->partial);
	else
		sheaf_list_add(&s->sl_list, &n->partial);
	s->sl_on_partial = 1;
	sheaf_wr(n->nr_partial, n->nr_partial + 1);
}
static inline void remove_partial(struct sheaf_node *n, struct sheaf_slab *s)
{
	sheaf_list_del(&s->sl_list);
	s->sl_on_partial = 0;
	sheaf_wr(n->nr_partial, n->nr_partial - 1);
}

/* ---- Freeing chains to slabs (K§2.7 __slab_free) ------------------------------------- */

/* Free the chain head..tail (@cnt objects already linked head->...->tail) to @s. */
static void slab_free_chain(struct sheaf_cache *c, struct sheaf_slab *s, uint32_t head,
			    uint32_t tail, uint32_t cnt)
{
	struct sheaf_node *n = s->sl_node;
	bool locked = false;
	uint64_t old, nw;
	uint32_t new_inuse;
	bool was_full;
	for (;;) {
		old = FC_LOAD(s);
		uint32_t inuse = SHEAF_FC_INUSE(old);
		if (sheaf_unlikely(cnt > inuse || SHEAF_FC_HEAD(old) == head)) {
			if (locked)
				sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
			sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, obj_at(c, s, head),
				    "the slab has fewer objects in use than are freed to it");
			return;
		}
		new_inuse = inuse - cnt;
		was_full = SHEAF_FC_HEAD(old) == SHEAF_FL_END;
		if ((was_full || new_inuse == 0) && !locked) {
			/* Take list_lock before the update so that no allocation can pick
			 * this slab between our update and the list change (K§2.7 step 1). */
			sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
			locked = true;
			continue;
		}
		fp_set(c, slot_at(c, s, tail), SHEAF_FC_HEAD(old));
		nw = SHEAF_FC_MAKE(head, new_inuse, SHEAF_FC_OBJECTS(old), SHEAF_FC_FROZEN(old));
		if (atomic_compare_exchange_weak_explicit(&s->sl_fc, &old, nw, memory_order_release,
							  memory_order_relaxed))
			break;
		sheaf_stat_atomic(c, SHEAF_STAT_CMPXCHG_DOUBLE_FAIL, 1);
	}
	if (!locked)
		return;
	if (SHEAF_FC_FROZEN(old)) {
		sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
		return;
	}
	if (new_inuse == 0 && (s->sl_on_partial || was_full) && n->nr_partial >= c->min_partial) {
		if (s->sl_on_partial)
			remove_partial(n, s);
		slab_unaccount_locked(n);
		sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_REMOVE_PARTIAL, 1);
		slab_discard(c, s);
		return;
	}
	if (was_full && !s->sl_on_partial) {
		add_partial(n, s, true);
		sheaf_stat_atomic(c, SHEAF_STAT_FREE_ADD_PARTIAL, 1);
	}
	sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
}

/* Index of @q in @s if @q is exactly the start of one of its objects (no division:
 * the reciprocal gives the candidate index, one multiply confirms it; freecheck.h). */
static inline bool index_in_slab(const struct sheaf_cache *c, const struct sheaf_slab *s,
				 const void *q, uint32_t *idx)
{
	size_t off = (size_t)((const char *)q - s->sl_base);
	if (off >= (SHEAF_PAGE_SIZE << s->pg_order) || off < c->obj_offset)
		return false;
	off -= c->obj_offset;
	uint32_t i = (uint32_t)(((uint64_t)off * c->slot_recip) >> 32);
	if (i >= c->objs_per_slab || (size_t)i * c->slot_size != off)
		return false;
	*idx = i;
	return true;
}

struct sheaf_slab *sheaf_slab_check_obj(struct sheaf_cache *c, const void *obj, const char *op)
{
	struct sheaf_slab *s = sheaf_page_slab(obj);
	if (sheaf_unlikely(!s || sheaf_rd(s->pg_kind) != SHEAF_PG_SLAB)) {
		/* Inside the heap, on a page no slab holds: an object whose slab was
		 * emptied and given back (a double free after a shrink), or a stray
		 * pointer; which one cannot be told. */
		if ((uintptr_t)obj - (uintptr_t)sheaf_heap.base < sheaf_rd(sheaf_heap.size))
			sheaf_error(SHEAF_ERR_INVALID_POINTER, c->name, obj,
				    "%s of a pointer into memory Sheaf holds free (freed "
				    "before, its slab since given back: a double free?)",
				    op);
		else
			sheaf_error(SHEAF_ERR_INVALID_POINTER, c->name, obj,
				    "%s of a pointer Sheaf did not allocate", op);
		return NULL;
	}
	struct sheaf_cache *owner = s->sl_node->cache;
	if (sheaf_unlikely(owner != c)) {
		/* No program holds an object of Sheaf's own metadata caches: such a pointer
		 * was freed before, and its slab given back and taken again for metadata
		 * (a double free after a shrink, most likely).  It was named only as an
		 * object of cache 'sheaf-meta-...' until 2026-11-29 (adversarial review). */
		if (owner->is_meta)
			sheaf_error(SHEAF_ERR_WRONG_CACHE, c->name, obj,
				    "%s of a pointer into Sheaf's own metadata (freed before, its "
				    "slab since given back and reused: a double free?)",
				    op);
		else
			sheaf_error(SHEAF_ERR_WRONG_CACHE, c->name, obj,
				    "%s of an object of cache '%s'", op, owner->name);
		return NULL;
	}
	uint32_t idx;
	if (sheaf_unlikely(!index_in_slab(c, s, obj, &idx))) {
		sheaf_error(SHEAF_ERR_INTERIOR, c->name, obj,
			    "%s of a pointer that is not the start of an object", op);
		return NULL;
	}
	return s;
}

bool sheaf_slab_holds_free(struct sheaf_cache *c, const void *obj)
{
	struct sheaf_slab *s = sheaf_page_slab(obj);
	uint32_t want;
	if (!s || sheaf_rd(s->pg_kind) != SHEAF_PG_SLAB || s->sl_node->cache != c ||
	    !index_in_slab(c, s, obj, &want))
		return false;
	/* Under list_lock no pop runs on a listed slab; a lockless free only pushes in
	 * front.  The walk is bounded by the object count whatever the list holds. */
	struct sheaf_node *n = s->sl_node;
	bool found = false;
	sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
	uint64_t fc = FC_LOAD(s);
	uint32_t objects = SHEAF_FC_OBJECTS(fc), steps = 0;
	for (uint32_t i = SHEAF_FC_HEAD(fc); i != SHEAF_FL_END && i < objects && steps <= objects;
	     steps++) {
		if (i == want) {
			found = true;
			break;
		}
		i = fp_get(c, slot_at(c, s, i));
	}
	sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
	return found;
}

void sheaf_slab_free_bulk(struct sheaf_cache *c, void **objs, unsigned cnt)
{
	/* K§2.7 build_detached_freelist: take the last object, gather the other objects of
	 * its slab with a look-ahead of 3 mismatches, free them as one chain. */
	while (cnt) {
		void *p = objs[cnt - 1];
		objs[--cnt] = NULL;
		if (!p)
			continue;
		struct sheaf_slab *s = sheaf_page_slab(p);
		uint32_t head;
		if (sheaf_unlikely(!s || sheaf_rd(s->pg_kind) != SHEAF_PG_SLAB ||
				   s->sl_node->cache != c || !index_in_slab(c, s, p, &head))) {
			sheaf_slab_check_obj(c, p, "free"); /* reports what is wrong */
			continue;
		}
		uint32_t tail = head, k = 1;
		int miss = 3;
		char *lo = s->sl_base, *hi = s->sl_base + (SHEAF_PAGE_SIZE << s->pg_order);
		for (unsigned i = cnt; i-- > 0;) {
			void *q = objs[i];
			if (!q)
				continue;
			if ((char *)q < lo || (char *)q >= hi) {
				if (--miss == 0)
					break;
				continue;
			}
			uint32_t qi;
			if (sheaf_unlikely(!index_in_slab(c, s, q, &qi))) {
				sheaf_slab_check_obj(c, q, "free"); /* interior pointer: reported */
				objs[i] = NULL;
				continue;
			}
			if (sheaf_unlikely(qi == head || qi == tail)) {
				sheaf_error(SHEAF_ERR_DOUBLE_FREE, c->name, q,
					    "the object is freed twice in one batch");
				objs[i] = NULL;
				continue;
			}
			fp_set(c, slot_at(c, s, qi), head);
			head = qi;
			k++;
			objs[i] = NULL;
		}
		slab_free_chain(c, s, head, tail, k);
		while (cnt && !objs[cnt - 1])
			cnt--;
	}
}

/* ---- Allocation from slabs ----------------------------------------------------------- */

/* Pop one object from a partial slab; list_lock held.  NULL when the slab turned out
 * to be corrupt (it is then frozen and taken off the list). */
static void *slab_pop_locked(struct sheaf_cache *c, struct sheaf_node *n, struct sheaf_slab *s)
{
	for (;;) {
		uint64_t old = FC_LOAD(s);
		uint32_t head = SHEAF_FC_HEAD(old), objects = SHEAF_FC_OBJECTS(old);
		if (head == SHEAF_FL_END) { /* cannot happen on the partial list */
			remove_partial(n, s);
			return NULL;
		}
		uint32_t next = fp_get(c, slot_at(c, s, head));
		if (sheaf_unlikely(next != SHEAF_FL_END && next >= objects)) {
			remove_partial(n, s);
			atomic_fetch_or_explicit(&s->sl_fc, SHEAF_FC_MAKE(0, 0, 0, 1),
						 memory_order_relaxed);
			sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
			sheaf_error(SHEAF_ERR_CORRUPTION, c->name, obj_at(c, s, head),
				    "free list corrupted in this free object (write after free?)");
			sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
			return NULL;
		}
		uint64_t nw = SHEAF_FC_MAKE(next, SHEAF_FC_INUSE(old) + 1, objects, 0);
		if (atomic_compare_exchange_weak_explicit(&s->sl_fc, &old, nw, memory_order_acquire,
							  memory_order_relaxed)) {
			if (next == SHEAF_FL_END)
				remove_partial(n, s);
			return obj_at(c, s, head);
		}
		sheaf_stat_atomic(c, SHEAF_STAT_CMPXCHG_DOUBLE_FAIL, 1);
	}
}

void *sheaf_slab_alloc_one(struct sheaf_cache *c, struct sheaf_node *n)
{
	if (sheaf_rd(n->nr_partial)) {
		sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
		while (!sheaf_list_empty(&n->partial)) {
			struct sheaf_slab *s =
				sheaf_list_first(&n->partial, struct sheaf_slab, sl_list);
			void *obj = slab_pop_locked(c, n, s);
			if (obj) {
				sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
				return obj;
			}
		}
		sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
	}
	void *obj;
	struct sheaf_slab *s = slab_new(c, n, &obj, 1);
	if (!s)
		return NULL;
	if (c->objs_per_slab > 1) {
		sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
		add_partial(n, s, false);
		sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
	}
	return obj;
}

/* Refill step 1 (K§2.3): isolate enough partial slabs of @n onto @iso under one
 * list_lock hold: at least @min free objects when there are, at most @max. */
static void refill_isolate(struct sheaf_node *n, struct sheaf_list *iso, unsigned min, unsigned max)
{
	unsigned est = 0;
	sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
	while (!sheaf_list_empty(&n->partial) && est < max) {
		struct sheaf_slab *s = sheaf_list_first(&n->partial, struct sheaf_slab, sl_list);
		uint64_t fc = FC_LOAD(s);
		unsigned freecnt = SHEAF_FC_OBJECTS(fc) - SHEAF_FC_INUSE(fc);
		if (est >= min && est + freecnt > max)
			break;
		remove_partial(n, s);
		sheaf_list_add_tail(&s->sl_list, iso);
		est += freecnt;
	}
	sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
}

/* Refill step 2: take the isolated slab @s's whole freelist in one CAS, hand out up to
 * @room objects into @objs, and give the surplus back with one free (K§2.3 step 2).
 * Returns the objects handed out. */
static unsigned refill_take_slab(struct sheaf_cache *c, struct sheaf_slab *s, void **objs,
				 unsigned room)
{
	unsigned got = 0;
	uint64_t old = FC_LOAD(s);
	for (;;) {
		uint64_t nw = SHEAF_FC_MAKE(SHEAF_FL_END, SHEAF_FC_OBJECTS(old),
					    SHEAF_FC_OBJECTS(old), SHEAF_FC_FROZEN(old));
		/* acq_rel: a free that sees this slab full next takes list_lock and puts it
		 * on the partial list; the caller's list_del must happen before that. */
		if (atomic_compare_exchange_weak_explicit(&s->sl_fc, &old, nw, memory_order_acq_rel,
							  memory_order_relaxed))
			break;
	}
	uint32_t objects = SHEAF_FC_OBJECTS(old);
	uint32_t taken_free = objects - SHEAF_FC_INUSE(old);
	uint32_t idx = SHEAF_FC_HEAD(old), walked = 0;
	while (idx != SHEAF_FL_END && got < room) {
		if (sheaf_unlikely(idx >= objects || walked >= taken_free)) {
			sheaf_error(
				SHEAF_ERR_CORRUPTION, c->name, s->sl_base,
				"free list corrupted in the slab at this address (write after free?)");
			return got;
		}
		objs[got++] = obj_at(c, s, idx);
		walked++;
		idx = fp_get(c, slot_at(c, s, idx));
	}
	if (idx != SHEAF_FL_END) {
		/* Surplus: the rest of the chain goes back with one free. */
		uint32_t head = idx, tail = idx, k = 1;
		uint32_t nx = fp_get(c, slot_at(c, s, tail));
		while (nx != SHEAF_FL_END && k < taken_free - walked) {
			if (sheaf_unlikely(nx >= objects))
				break;
			tail = nx;
			k++;
			nx = fp_get(c, slot_at(c, s, tail));
		}
		slab_free_chain(c, s, head, tail, k);
	}
	return got;
}

/* Refill step 5: new slabs of @n until @min objects are in @objs (@got already). */
static unsigned refill_new_slabs(struct sheaf_cache *c, struct sheaf_node *n, void **objs,
				 unsigned got, unsigned min, unsigned max)
{
	while (got < min) {
		uint32_t take = SHEAF_MIN(max - got, c->objs_per_slab);
		struct sheaf_slab *s = slab_new(c, n, objs + got, take);
		if (!s)
			break;
		got += take;
		if (take < c->objs_per_slab) {
			sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
			add_partial(n, s, false);
			sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
		}
	}
	return got;
}

unsigned sheaf_slab_refill(struct sheaf_cache *c, struct sheaf_node *n, void **objs, unsigned min,
			   unsigned max)
{
	unsigned got = 0;
	struct sheaf_list iso, unused;
	sheaf_list_init(&iso);
	sheaf_list_init(&unused);
	if (sheaf_rd(n->nr_partial))
		refill_isolate(n, &iso, min, max);
	/* Step 2: each isolated slab's whole freelist; slabs not needed stay unused. */
	struct sheaf_list *pos, *tmp;
	sheaf_list_for_each_safe(pos, tmp, &iso) {
		struct sheaf_slab *s = sheaf_container_of(pos, struct sheaf_slab, sl_list);
		sheaf_list_del(&s->sl_list);
		if (got >= max)
			sheaf_list_add_tail(&s->sl_list, &unused);
		else
			got += refill_take_slab(c, s, objs + got, max - got);
	}
	if (!sheaf_list_empty(&unused)) {
		/* Step 3: unused isolated slabs go back to the head of the list. */
		sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
		sheaf_list_for_each_safe(pos, tmp, &unused) {
			struct sheaf_slab *s = sheaf_container_of(pos, struct sheaf_slab, sl_list);
			sheaf_list_del(&s->sl_list);
			add_partial(n, s, false);
		}
		sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
	}
	return refill_new_slabs(c, n, objs, got, min, max);
}

/* ---- Shrink, release, gauges, walkers ------------------------------------------------ */

void sheaf_slab_node_shrink(struct sheaf_node *n, unsigned long keep)
{
	struct sheaf_cache *c = n->cache;
	struct sheaf_list victims;
	sheaf_list_init(&victims);
	struct sheaf_list *pos, *tmp;
	unsigned long kept = 0;
	sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
	sheaf_list_for_each_safe(pos, tmp, &n->partial) {
		struct sheaf_slab *s = sheaf_container_of(pos, struct sheaf_slab, sl_list);
		if (SHEAF_FC_INUSE(FC_LOAD(s)) != 0)
			continue;
		if (kept < keep) {
			kept++;
			continue;
		}
		remove_partial(n, s);
		slab_unaccount_locked(n);
		sheaf_list_add(&s->sl_list, &victims);
	}
	sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
	sheaf_list_for_each_safe(pos, tmp, &victims) {
		struct sheaf_slab *s = sheaf_container_of(pos, struct sheaf_slab, sl_list);
		sheaf_list_del(&s->sl_list);
		slab_discard(c, s);
	}
}

void sheaf_slab_node_counts(struct sheaf_node *n, uint64_t *slabs, uint64_t *partial,
			    uint64_t *inuse)
{
	struct sheaf_cache *c = n->cache;
	uint64_t part_inuse = 0, part = 0;
	sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
	long total = atomic_load_explicit(&n->nr_slabs, memory_order_relaxed);
	struct sheaf_list *pos;
	for (pos = n->partial.next; pos != &n->partial; pos = pos->next) {
		struct sheaf_slab *s = sheaf_container_of(pos, struct sheaf_slab, sl_list);
		part_inuse += SHEAF_FC_INUSE(FC_LOAD(s));
		part++;
	}
	sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
	/* Slabs on no list are full (or briefly isolated by a refill: counted as full). */
	uint64_t off_list = total > (long)part ? (uint64_t)total - part : 0;
	*slabs += (uint64_t)(total > 0 ? total : 0);
	*partial += part;
	*inuse += part_inuse + off_list * c->objs_per_slab;
}

uint64_t sheaf_slab_node_release(struct sheaf_node *n)
{
	sheaf_slab_node_shrink(n, 0);
	uint64_t slabs = 0, partial = 0, inuse = 0;
	sheaf_slab_node_counts(n, &slabs, &partial, &inuse);
	return inuse;
}

bool sheaf_slab_is_valid(struct sheaf_cache *c, struct sheaf_slab *s)
{
	if (sheaf_rd(s->pg_kind) != SHEAF_PG_SLAB || s->sl_node == NULL || s->sl_node->cache != c)
		return false;
	uint64_t fc = FC_LOAD(s);
	uint32_t objects = SHEAF_FC_OBJECTS(fc), inuse = SHEAF_FC_INUSE(fc);
	if (objects != c->objs_per_slab || inuse > objects)
		return false;
	uint32_t want = objects - inuse, seen = 0;
	for (uint32_t i = SHEAF_FC_HEAD(fc); i != SHEAF_FL_END; i = fp_get(c, slot_at(c, s, i))) {
		if (i >= objects || ++seen > want)
			return false;
	}
	if (seen != want)
		return false;
	size_t pg = desc_index(s);
	for (uint32_t i = 0; i < (1u << s->pg_order); i++)
		if (sheaf_heap.pagemap[pg + i] != sheaf_key_encode(s->sl_node))
			return false;
	return true;
}

bool sheaf_slab_node_is_valid(struct sheaf_node *n)
{
	bool ok = true;
	unsigned long cnt = 0;
	sheaf_mutex_lock(&n->list_lock, sheaf_node_lock_id(n));
	struct sheaf_list *pos;
	for (pos = n->partial.next; pos != &n->partial; pos = pos->next) {
		struct sheaf_slab *s = sheaf_container_of(pos, struct sheaf_slab, sl_list);
		cnt++;
		if (!s->sl_on_partial || !sheaf_slab_is_valid(n->cache, s) ||
		    SHEAF_FC_HEAD(FC_LOAD(s)) == SHEAF_FL_END)
			ok = false;
	}
	if (cnt != n->nr_partial)
		ok = false;
	sheaf_mutex_unlock(&n->list_lock, sheaf_node_lock_id(n));
	return ok;
}

/* ---- Free checks and handles (freecheck.h) -------------------------------------- */

/* Is @c a live cache?  Reports a NULL, destroyed or foreign handle (README "Errors"):
 * the caller then does nothing. */
bool sheaf_cache_check(const struct sheaf_cache *c)
{
	if (sheaf_likely(c && __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) == SHEAF_CACHE_LIVE))
		return true;
	if (!c)
		sheaf_error(SHEAF_ERR_INVALID_CACHE, NULL, NULL, "NULL cache handle");
	else if (c->magic == SHEAF_CACHE_DEAD)
		sheaf_error(SHEAF_ERR_DESTROYED_CACHE, c->name, c, "the cache was destroyed");
	else
		sheaf_error(SHEAF_ERR_INVALID_CACHE, NULL, c, "not a cache handle");
	return false;
}
