/* SPDX-License-Identifier: MIT */
/*
 * barn.c - per-node depot of full and empty sheaves (K§1.3, D6).
 *
 * Every operation takes barn->lock once and moves whole sheaves (a middle layer that
 * moves single objects under one lock is what makes allocators collapse when objects
 * cross CPUs).  nr_full and nr_empty are read racily by callers to fail fast without
 * the lock.
 *
 * D6, working-set trimming: Linux 7.0 caps a barn at 10 full and 10 empty sheaves and
 * empties it only on shrink.  Sheaf keeps those caps as upper bounds but, like Bonwick's
 * depot reaping, measures what was not needed: every interval of 256 barn operations
 * the lowest nr_full (and nr_empty) seen in it is the number of sheaves that sat in the
 * barn, unused, through the whole interval (sheaves are taken from the head and the
 * untouched ones stay at the tail).  An EWMA (weight 1/4) smooths that count; that many
 * of the coldest sheaves are handed back, at most two full and four empty ones per
 * interval, so memory is returned gradually and never in a burst on a hot path.  A barn
 * that is drained and refilled every interval (a batch of thousands, a producer and a
 * consumer) has a low of 0 and is left alone, however many sheaves it holds at times.
 *
 * Synchronisation matrix (who may call what concurrently): every function may run
 * concurrently with every other; the lock serialises them.  Callers never hold a
 * list_lock while calling in (design §4).
 */
#include <errno.h>

#include "barn/barn.h"

/* Size 0, capacity 0, key 0: "empty" to pop, "full" to push, matches no object
 * (K§1.5 bootstrap sheaf; design §6 per-CPU lock). */
struct sheaf_sheaf sheaf_sentinel_sheaf;

#define BARN_INTERVAL_OPS 256u
#define BARN_TRIM_MAX     2u
/* 256 barn exchanges in under 10 ms (25,600 a second, each moving one or two sheaves):
 * the CPUs of this node trade sheaves fast enough that larger ones pay; in over 1 s,
 * slowly enough to step back. */
#define BARN_ADAPT_FAST_NS (10ull * 1000 * 1000)
#define BARN_ADAPT_SLOW_NS (1000ull * 1000 * 1000)

/* The stacks (barn.h): push and pop at the top; the bottom is the coldest sheaf. */
static inline void stk_push(struct sheaf_sheaf **top, struct sheaf_sheaf *s)
{
	s->link.next = *top ? &(*top)->link : NULL;
	s->link.prev = NULL;
	*top = s;
}

static inline struct sheaf_sheaf *stk_next(const struct sheaf_sheaf *s)
{
	return s->link.next ? sheaf_container_of(s->link.next, struct sheaf_sheaf, link) : NULL;
}

static inline struct sheaf_sheaf *stk_pop(struct sheaf_sheaf **top)
{
	struct sheaf_sheaf *s = *top;
	if (s)
		*top = stk_next(s);
	return s;
}

/* Move the bottom (coldest) @n sheaves of a stack of @count onto @out, a caller's
 * list; returns how many moved. */
static unsigned stk_take_bottom(struct sheaf_sheaf **top, unsigned count, unsigned n,
				struct sheaf_list *out)
{
	if (n > count)
		n = count;
	if (!n)
		return 0;
	struct sheaf_sheaf *s;
	if (n == count) {
		s = *top;
		*top = NULL;
	} else {
		struct sheaf_sheaf *keep = *top;
		for (unsigned i = 1; i < count - n; i++)
			keep = stk_next(keep);
		s = stk_next(keep);
		keep->link.next = NULL;
	}
	unsigned moved = 0;
	while (s) {
		struct sheaf_sheaf *next = stk_next(s);
		sheaf_list_add(&s->link, out);
		s = next;
		moved++;
	}
	return moved;
}

void sheaf_barn_init(struct sheaf_barn *b, bool enabled, bool compat)
{
	pthread_mutex_init(&b->lock, NULL);
	b->full = b->empty = NULL;
	b->nr_full = b->nr_empty = 0;
	b->enabled = enabled;
	if (compat) {
		b->max_full = SHEAF_MAX_FULL_SHEAVES;
		b->max_empty = SHEAF_MAX_EMPTY_SHEAVES;
	} else {
		/* Set by sheaf_barn_set_limits() once the cache's geometry is known. */
		b->max_full = SHEAF_MAX_FULL_SHEAVES;
		b->max_empty = SHEAF_MAX_EMPTY_SHEAVES;
	}
	b->ewma_low = b->ewma_low_empty = 0;
	b->interval_low = b->interval_low_empty = ~0u;
	b->interval_ops = 0;
}

/* Every acquisition is counted: the gauge barn_locks is what a cross-CPU workload pays
 * in shared-lock traffic (issue 3 point 3). */
static inline void barn_lock(struct sheaf_barn *b)
{
	sheaf_mutex_lock(&b->lock, SHEAF_LOCK_BARN);
	sheaf_wr(b->nr_locks, b->nr_locks + 1);
}

static inline void note_op_locked(struct sheaf_barn *b)
{
	if (b->nr_full < b->interval_low)
		b->interval_low = b->nr_full;
	if (b->nr_empty < b->interval_low_empty)
		b->interval_low_empty = b->nr_empty;
	if (++b->interval_ops >= BARN_INTERVAL_OPS) {
		/* Adaptive capacity (docs/design.md, D2): an interval of BARN_INTERVAL_OPS
		 * exchanges that took under BARN_ADAPT_FAST_NS asks for larger sheaves, one
		 * that took over BARN_ADAPT_SLOW_NS for smaller ones. */
		uint64_t now = sheaf_os_now_ns();
		uint64_t took = now - b->interval_start_ns;
		if (b->interval_start_ns && took < BARN_ADAPT_FAST_NS)
			atomic_store_explicit(&b->adapt_due, 1, memory_order_relaxed);
		else if (b->interval_start_ns && took > BARN_ADAPT_SLOW_NS)
			atomic_store_explicit(&b->adapt_due, -1, memory_order_relaxed);
		b->interval_start_ns = now;
		/* Scaled by 16; new = 3/4 old + 1/4 sample. */
		b->ewma_low = (b->ewma_low * 3 + b->interval_low * 16) / 4;
		b->ewma_low_empty = (b->ewma_low_empty * 3 + b->interval_low_empty * 16) / 4;
		b->interval_ops = 0;
		b->interval_low = b->nr_full;
		b->interval_low_empty = b->nr_empty;
		if ((b->ewma_low >= 16 && b->nr_full) ||
		    (b->ewma_low_empty >= 32 && b->nr_empty > 1))
			sheaf_wr(b->trim_due, 1);
	}
}

struct sheaf_sheaf *sheaf_barn_get_empty(struct sheaf_barn *b)
{
	if (!b->enabled || !sheaf_rd(b->nr_empty))
		return NULL;
	struct sheaf_sheaf *s = NULL;
	barn_lock(b);
	s = stk_pop(&b->empty);
	if (s)
		sheaf_wr(b->nr_empty, b->nr_empty - 1);
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return s;
}

struct sheaf_sheaf *sheaf_barn_get_full(struct sheaf_barn *b, uint32_t min_size)
{
	if (!b->enabled || !sheaf_rd(b->nr_full))
		return NULL;
	struct sheaf_sheaf *s = NULL;
	barn_lock(b);
	if (b->full && b->full->size >= min_size) {
		s = stk_pop(&b->full);
		sheaf_wr(b->nr_full, b->nr_full - 1);
		sheaf_wr(b->nr_objects, b->nr_objects + s->size);
		note_op_locked(b);
	}
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return s;
}

void sheaf_barn_put_empty(struct sheaf_barn *b, struct sheaf_sheaf *s)
{
	barn_lock(b);
	stk_push(&b->empty, s);
	sheaf_wr(b->nr_empty, b->nr_empty + 1);
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
}

void sheaf_barn_put_full(struct sheaf_barn *b, struct sheaf_sheaf *s)
{
	/* Ignores the limit: race and undo paths (K§1.3). */
	barn_lock(b);
	stk_push(&b->full, s);
	sheaf_wr(b->nr_full, b->nr_full + 1);
	sheaf_wr(b->nr_objects, b->nr_objects + s->size);
	note_op_locked(b);
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
}

struct sheaf_sheaf *sheaf_barn_replace_empty(struct sheaf_barn *b, struct sheaf_sheaf *empty)
{
	if (!b->enabled || !sheaf_rd(b->nr_full))
		return NULL;
	struct sheaf_sheaf *full = NULL;
	barn_lock(b);
	full = stk_pop(&b->full);
	if (full) {
		sheaf_wr(b->nr_full, b->nr_full - 1);
		sheaf_wr(b->nr_objects, b->nr_objects + full->size);
		note_op_locked(b);
		/* The empty limit is soft; excess empties are trimmed later (D6). */
		stk_push(&b->empty, empty);
		sheaf_wr(b->nr_empty, b->nr_empty + 1);
	}
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return full;
}

int sheaf_barn_replace_full(struct sheaf_barn *b, struct sheaf_sheaf *full,
			    struct sheaf_sheaf **empty)
{
	*empty = NULL;
	if (!b->enabled)
		return -ENOENT;
	if (sheaf_rd(b->nr_full) >= sheaf_rd(b->max_full))
		return -E2BIG;
	barn_lock(b);
	if (b->nr_full >= sheaf_rd(b->max_full)) {
		sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
		return -E2BIG;
	}
	stk_push(&b->full, full);
	sheaf_wr(b->nr_full, b->nr_full + 1);
	sheaf_wr(b->nr_objects, b->nr_objects + full->size);
	note_op_locked(b);
	*empty = stk_pop(&b->empty);
	if (*empty)
		sheaf_wr(b->nr_empty, b->nr_empty - 1);
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return 0;
}

void sheaf_barn_take_all(struct sheaf_barn *b, struct sheaf_list *full, struct sheaf_list *empty)
{
	barn_lock(b);
	stk_take_bottom(&b->full, b->nr_full, b->nr_full, full);
	stk_take_bottom(&b->empty, b->nr_empty, b->nr_empty, empty);
	sheaf_wr(b->nr_full, 0);
	sheaf_wr(b->nr_empty, 0);
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
}

void sheaf_barn_trim(struct sheaf_barn *b, struct sheaf_list *full, struct sheaf_list *empty)
{
	if (!b->enabled)
		return;
	barn_lock(b);
	sheaf_wr(b->trim_due, 0);
	/* Give back the coldest of the sheaves that went unused (see the top of the file),
	 * and take them off the estimate so the next slow paths do not trim them again
	 * before the next interval has measured anew.  One empty sheaf is always kept. */
	unsigned n = SHEAF_MIN(b->ewma_low / 16, BARN_TRIM_MAX);
	n = stk_take_bottom(&b->full, b->nr_full, n, full);
	sheaf_wr(b->nr_full, b->nr_full - n);
	b->ewma_low -= 16 * n;
	if (b->ewma_low_empty >= 32 && b->nr_empty > 1) {
		n = SHEAF_MIN(b->ewma_low_empty / 16 - 1, 2 * BARN_TRIM_MAX);
		n = stk_take_bottom(&b->empty, b->nr_empty, SHEAF_MIN(n, b->nr_empty - 1), empty);
		sheaf_wr(b->nr_empty, b->nr_empty - n);
		b->ewma_low_empty -= 16 * n;
	}
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
}

bool sheaf_sheaf_is_valid(const struct sheaf_cache *c, const struct sheaf_sheaf *s)
{
	if (s == &sheaf_sentinel_sheaf)
		return s->size == 0 && s->capacity == 0 && s->key == 0;
	if (s->cache != c || s->size > s->capacity)
		return false;
	for (uint32_t i = 0; i < s->size; i++) {
		uintptr_t k = sheaf_page_key(s->objects[i]);
		if (!k || sheaf_key_owner(k)->cache != c)
			return false;
	}
	return true;
}

bool sheaf_barn_is_valid(struct sheaf_barn *b, const struct sheaf_cache *c)
{
	bool ok = true;
	unsigned nf = 0, ne = 0;
	sheaf_mutex_lock(&b->lock, SHEAF_LOCK_BARN);
	for (struct sheaf_sheaf *s = b->full; s; s = stk_next(s)) {
		nf++;
		if (!sheaf_sheaf_is_valid(c, s) || s->size == 0)
			ok = false;
	}
	for (struct sheaf_sheaf *s = b->empty; s; s = stk_next(s)) {
		ne++;
		if (!sheaf_sheaf_is_valid(c, s) || s->size != 0)
			ok = false;
	}
	if (nf != b->nr_full || ne != b->nr_empty)
		ok = false;
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return ok;
}

/* The double-free confirmation (percpu/freecheck.c): is @obj in one of the barn's full sheaves?
 * Empty sheaves hold nothing. */
bool sheaf_barn_holds(struct sheaf_barn *b, const void *obj)
{
	bool found = false;
	sheaf_mutex_lock(&b->lock, SHEAF_LOCK_BARN);
	for (struct sheaf_sheaf *s = b->full; s && !found; s = stk_next(s))
		for (uint32_t i = 0; i < s->size && !found; i++)
			found = s->objects[i] == obj;
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return found;
}

void sheaf_barn_counts(struct sheaf_barn *b, uint64_t *full, uint64_t *empty, uint64_t *objs,
		       uint64_t *locks, uint64_t *moved)
{
	sheaf_mutex_lock(&b->lock, SHEAF_LOCK_BARN);
	*moved += b->nr_objects;
	for (struct sheaf_sheaf *s = b->full; s; s = stk_next(s))
		*objs += s->size;
	*full += b->nr_full;
	*locks += b->nr_locks;
	*empty += b->nr_empty;
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
}

unsigned sheaf_barn_swap_fulls(struct sheaf_barn *b, struct sheaf_sheaf **full, unsigned nfull,
			       struct sheaf_sheaf **empty_out, unsigned *put)
{
	*put = 0;
	if (!b->enabled || sheaf_rd(b->nr_full) >= sheaf_rd(b->max_full))
		return 0;
	unsigned got = 0;
	barn_lock(b);
	while (*put < nfull && b->nr_full < sheaf_rd(b->max_full)) {
		stk_push(&b->full, full[*put]);
		sheaf_wr(b->nr_full, b->nr_full + 1);
		sheaf_wr(b->nr_objects, b->nr_objects + full[*put]->size);
		note_op_locked(b);
		(*put)++;
	}
	while (got < *put && b->empty) {
		empty_out[got++] = stk_pop(&b->empty);
		sheaf_wr(b->nr_empty, b->nr_empty - 1);
	}
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return got;
}

unsigned sheaf_barn_swap_empties(struct sheaf_barn *b, struct sheaf_sheaf **empty, unsigned nempty,
				 struct sheaf_sheaf **full_out, unsigned want)
{
	if (!b->enabled || !sheaf_rd(b->nr_full))
		return 0;
	unsigned got = 0;
	barn_lock(b);
	while (got < want && b->full) {
		full_out[got] = stk_pop(&b->full);
		sheaf_wr(b->nr_full, b->nr_full - 1);
		sheaf_wr(b->nr_objects, b->nr_objects + full_out[got]->size);
		got++;
	}
	if (got) {
		note_op_locked(b);
		for (unsigned i = 0; i < nempty; i++) {
			stk_push(&b->empty, empty[i]);
			sheaf_wr(b->nr_empty, b->nr_empty + 1);
		}
	}
	sheaf_mutex_unlock(&b->lock, SHEAF_LOCK_BARN);
	return got;
}

void sheaf_barn_set_limits(struct sheaf_barn *b, size_t sheaf_bytes)
{
	/* D6: the soft limit is a ceiling for the EWMA working set, not the working set
	 * itself, so it may be generous: by default as many full sheaves as hold
	 * SHEAF_BARN_BYTES of objects, between Linux 7.0's 10 and 256.  A producer/consumer
	 * pair or a batch of thousands then cycles through the barn instead of the slabs;
	 * the trimmer gives back what a quieter phase does not use. */
	long full = sheaf_option_long(SHEAF_OPT_BARN_MAX_FULL);
	long empty = sheaf_option_long(SHEAF_OPT_BARN_MAX_EMPTY);
	if (full <= 0) {
		size_t fit = sheaf_bytes ?
				     (size_t)sheaf_option_long(SHEAF_OPT_BARN_BYTES) / sheaf_bytes :
				     0;
		full = (long)SHEAF_MIN(SHEAF_MAX(fit, (size_t)SHEAF_MAX_FULL_SHEAVES), (size_t)256);
	}
	if (empty <= 0)
		empty = full;
	sheaf_wr(b->max_full, (unsigned)full); /* read racily by the fail-fast tests */
	sheaf_wr(b->max_empty, (unsigned)empty);
}
