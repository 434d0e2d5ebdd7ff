/* SPDX-License-Identifier: MIT */
/*
 * extent_registry.c - the registry of the malloc front end's live extents (docs/malloc.md):
 * a sharded hash table keyed by address, so that no header is read from a pointer before
 * it is known to be ours.  The extent cache and the extents themselves are extent.c's.
 *
 * Locks: one shard lock at a time (SHEAF_LOCK_MALLOC_SHARD), below the extent cache's
 * xc.lock; the fork walk of the lock table (base/lock.h) takes every shard's through
 * malloc_extent_registry_fork_register().
 */
#include <pthread.h>
#include <stdatomic.h>

#include "malloc/malloc_impl.h"

#define EXT_SHARDS 16u
#define EXT_EMPTY  0u
#define EXT_DEAD   1u

struct ext_slot {
	uintptr_t addr;    /* EXT_EMPTY, EXT_DEAD or the extent's address */
	size_t len;        /* mapped bytes, a multiple of PAGE */
	unsigned int vmas; /* its kernel mappings, estimated (EXT_VMAS_*) */
};

struct ext_shard {
	pthread_mutex_t lock;
	struct ext_slot *tab; /* mmap'd, cap slots; protected by lock */
	size_t cap, live, dead;
} __attribute__((aligned(64)));

static struct ext_shard ext_shards[EXT_SHARDS] = {
	[0 ... EXT_SHARDS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER },
};

static uint64_t ext_hash(uintptr_t a)
{
	return (uint64_t)(a >> 12) * 0x9e3779b97f4a7c15ull;
}

static struct ext_shard *ext_shard_of(uint64_t h)
{
	return &ext_shards[h >> 60];
}

/* Find @a's slot, or the empty slot that ends its probe sequence. */
static struct ext_slot *ext_find_locked(struct ext_shard *s, uintptr_t a, uint64_t h)
{
	size_t mask = s->cap - 1;
	for (size_t i = (h >> 16) & mask;; i = (i + 1) & mask) {
		struct ext_slot *e = &s->tab[i];
		if (e->addr == a || e->addr == EXT_EMPTY)
			return e;
	}
}

/* Rebuild the table so that one more insertion keeps it at most 3/4 full,
 * tombstones included.  The table lives in its own mapping: the registry
 * must not depend on malloc. */
static bool ext_grow_locked(struct ext_shard *s)
{
	size_t cap = s->cap ? s->cap : 256;
	while ((s->live + 1) * 2 > cap)
		cap *= 2;
	struct ext_slot *t = sheaf_os_map(cap * sizeof(*t));
	if (!t)
		return false;
	struct ext_slot *old = s->tab;
	size_t oldcap = s->cap;
	s->tab = t;
	s->cap = cap;
	s->dead = 0;
	for (size_t i = 0; i < oldcap; i++) {
		if (old[i].addr > EXT_DEAD)
			*ext_find_locked(s, old[i].addr, ext_hash(old[i].addr)) = old[i];
	}
	if (old)
		(void)sheaf_os_unmap(old, oldcap * sizeof(*old)); /* reported if it fails */
	return true;
}

/* Bytes of live extents (registered, not cached): the extent cache's bound
 * grows with them (extent.c, xc_bound). */
static _Atomic size_t ext_live_bytes;

size_t malloc_extent_live_bytes(void)
{
	return atomic_load_explicit(&ext_live_bytes, memory_order_relaxed);
}

bool malloc_extent_register(void *p, size_t len, unsigned int vmas)
{
	uintptr_t a = (uintptr_t)p;
	uint64_t h = ext_hash(a);
	struct ext_shard *s = ext_shard_of(h);
	bool ok = true;
	sheaf_mutex_lock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
	/* Growing fails only when no memory is left; the table then fills
	 * further, as long as an empty slot remains to end every probe. */
	if ((s->live + s->dead + 1) * 4 > s->cap * 3 && !ext_grow_locked(s))
		ok = s->live + s->dead + 2 <= s->cap;
	if (ok) {
		/* @a is not in the table (it is a live mapping of ours): take
		 * the first tombstone on its probe sequence, else the empty
		 * slot that ends it. */
		size_t mask = s->cap - 1;
		struct ext_slot *e;
		for (size_t i = (h >> 16) & mask;; i = (i + 1) & mask) {
			e = &s->tab[i];
			if (e->addr == EXT_DEAD) {
				s->dead--;
				break;
			}
			if (e->addr == EXT_EMPTY)
				break;
		}
		e->addr = a;
		e->len = len;
		e->vmas = vmas;
		s->live++;
		atomic_fetch_add_explicit(&ext_live_bytes, len, memory_order_relaxed);
	}
	sheaf_mutex_unlock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
	return ok;
}

/* Length of the extent at @p, 0 if @p is not an extent's address, and in
 * *@vmas its kernel mappings.  With @remove, it stops being one (so a second
 * free of it is detected). */
static size_t ext_lookup(const void *p, bool remove, unsigned int *vmas)
{
	uintptr_t a = (uintptr_t)p;
	uint64_t h = ext_hash(a);
	struct ext_shard *s = ext_shard_of(h);
	size_t len = 0;
	sheaf_mutex_lock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
	if (s->cap) {
		struct ext_slot *e = ext_find_locked(s, a, h);
		if (e->addr == a) {
			len = e->len;
			*vmas = e->vmas;
			if (remove) {
				atomic_fetch_sub_explicit(&ext_live_bytes, len,
							  memory_order_relaxed);
				e->addr = EXT_DEAD;
				s->live--;
				s->dead++;
			}
		}
	}
	sheaf_mutex_unlock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
	return len;
}

size_t malloc_extent_lookup(const void *p, bool remove)
{
	unsigned int vmas;
	return ext_lookup(p, remove, &vmas);
}

size_t malloc_extent_remove(const void *p, unsigned int *vmas)
{
	return ext_lookup(p, true, vmas);
}

void malloc_extent_set_len(const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p;
	uint64_t h = ext_hash(a);
	struct ext_shard *s = ext_shard_of(h);
	sheaf_mutex_lock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
	struct ext_slot *e = ext_find_locked(s, a, h);
	if (e->addr == a) {
		/* The live bytes follow the new length: a free subtracts e->len (until
		 * 2026-11-29 an in-place growth made that wrap, and the extent cache's
		 * bound, which grows with the live bytes, went to its maximum). */
		if (len >= e->len)
			atomic_fetch_add_explicit(&ext_live_bytes, len - e->len,
						  memory_order_relaxed);
		else
			atomic_fetch_sub_explicit(&ext_live_bytes, e->len - len,
						  memory_order_relaxed);
		e->len = len;
		e->vmas &= ~EXT_VMAS_HI_SHARED;
	}
	sheaf_mutex_unlock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
}

/* Extents the program holds: how many and their mapped bytes (mallinfo's hblks and
 * hblkhd).  Walks every shard's table under its lock: for introspection only. */
void sheaf_malloc_extent_live_stat(size_t *count, size_t *bytes)
{
	*count = *bytes = 0;
	for (unsigned int i = 0; i < EXT_SHARDS; i++) {
		struct ext_shard *s = &ext_shards[i];
		sheaf_mutex_lock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
		for (size_t k = 0; k < s->cap; k++)
			if (s->tab[k].addr > EXT_DEAD)
				*bytes += s->tab[k].len;
		*count += s->live;
		sheaf_mutex_unlock(&s->lock, SHEAF_LOCK_MALLOC_SHARD);
	}
}

/* ---- fork (malloc.c's handlers) ------------------------------------------------------ */

/* fork: rank MALLOC_SHARD of the lock table (base/lock.h), every shard in order. */
static void fork_take_shards(void)
{
	for (unsigned int i = 0; i < EXT_SHARDS; i++)
		sheaf_mutex_lock(&ext_shards[i].lock, SHEAF_LOCK_MALLOC_SHARD);
}

static void fork_release_shards(bool child)
{
	(void)child;
	for (unsigned int i = EXT_SHARDS; i-- > 0;)
		sheaf_mutex_unlock(&ext_shards[i].lock, SHEAF_LOCK_MALLOC_SHARD);
}

void malloc_extent_registry_fork_register(void)
{
	static const struct sheaf_fork_ops shards = { fork_take_shards, fork_release_shards };
	sheaf_fork_register(SHEAF_LOCK_MALLOC_SHARD, &shards);
}
