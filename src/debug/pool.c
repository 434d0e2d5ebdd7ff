/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the tracker's record pool (seed 002): per-thread pools and the global pool
 * move records in batches, refills are throttled, frees follow an EWMA of use; and the
 * pool's control and statistics (debug_objects.c has the design).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "debug/debug_impl.h"

/* ---- Batches and pools ---------------------------------------------------- */

/* Counts are written under dobj_pool.lock but read without it as a hint
 * (fill_pool, housekeeping), so they are stored atomically. */
static void cnt_set(unsigned long *c, unsigned long v)
{
	__atomic_store_n(c, v, __ATOMIC_RELAXED);
}

static void stack_push_batch(struct batch_stack *s, struct dobj *first)
{
	first->batch_last->next = s->head;
	s->head = first;
	cnt_set(&s->cnt, s->cnt + first->batch_cnt);
}

static struct dobj *stack_pop_batch(struct batch_stack *s)
{
	struct dobj *first = s->head;
	if (!first)
		return NULL;
	s->head = first->batch_last->next;
	first->batch_last->next = NULL;
	cnt_set(&s->cnt, s->cnt - first->batch_cnt);
	return first;
}

static void note_global_level_locked(void)
{
	if (dobj_pool.global.cnt < dobj_pool.min_global)
		dobj_pool.min_global = dobj_pool.global.cnt;
}

static void pcp_push(struct pcpool *p, struct dobj *o)
{
	/* A record that starts a group of 16 (from the bottom) ends its batch. */
	o->batch_last = (p->cnt % BATCH == 0) ? o : p->head->batch_last;
	o->next = p->head;
	p->head = o;
	p->cnt++;
}

static struct dobj *pcp_pop(struct pcpool *p)
{
	struct dobj *o = p->head;
	p->head = o->next;
	p->cnt--;
	return o;
}

/* Detach the top group (a whole batch when cnt % BATCH == 0). */
static struct dobj *pcp_take_group(struct pcpool *p)
{
	struct dobj *first = p->head;
	unsigned int n = p->cnt % BATCH ? p->cnt % BATCH : BATCH;
	p->head = first->batch_last->next;
	first->batch_last->next = NULL;
	first->batch_cnt = n;
	p->cnt -= n;
	return first;
}

static void pcp_take_batch_from(struct pcpool *p, struct dobj *first)
{
	/* The thread pool is empty: the batch becomes its bottom group. */
	p->head = first;
	p->cnt = first->batch_cnt;
	if (!p->registered) {
		p->registered = true;
		pthread_setspecific(dobj_exit_key, p);
	}
}

/* Put a detached batch in the global pool, or the to-free pool when full. */
static void park_batch(struct dobj *first)
{
	sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	if (dobj_pool.global.cnt + first->batch_cnt <= POOL_MAX)
		stack_push_batch(&dobj_pool.global, first);
	else
		stack_push_batch(&dobj_pool.to_free, first);
	sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	ADD(batches_moved, 1);
}

void dobj_thread_exit(void *arg)
{
	struct pcpool *p = arg;
	while (p->cnt)
		park_batch(pcp_take_group(p));
	p->registered = false;
}

static void backing_free_list(struct dobj *o)
{
	unsigned long n = 0;
	dobj_in_tracker++;
	while (o) {
		struct dobj *next = o->next;
		sheaf_cache_free(dobj_backing, o);
		o = next;
		n++;
	}
	dobj_in_tracker--;
	ADD(cache_frees, n);
}

/* Allocate one batch of up to BATCH records from the backing cache, with
 * batch_last valid in every record.  NULL if the cache has none. */
static struct dobj *backing_alloc_batch(void)
{
	void *objs[BATCH];
	size_t got;
	dobj_in_tracker++;
	got = sheaf_cache_alloc_bulk(dobj_backing, BATCH, objs);
	if (got == 0) {
		/* All or nothing failed: try single objects. */
		while (got < BATCH && (objs[got] = sheaf_cache_alloc(dobj_backing)) != NULL)
			got++;
	}
	dobj_in_tracker--;
	if (got == 0)
		return NULL;
	ADD(cache_allocs, got);
	struct dobj *last = objs[got - 1];
	for (size_t i = 0; i < got; i++) {
		struct dobj *o = objs[i];
		o->next = i + 1 < got ? objs[i + 1] : NULL;
		o->batch_last = last;
	}
	((struct dobj *)objs[0])->batch_cnt = (uint32_t)got;
	return objs[0];
}

/* Single mode: every thread that sees a low level refills, one record at a time: the
 * behaviour the batched pool is measured against. */
static void fill_pool_single(void)
{
	while (__atomic_load_n(&dobj_pool.global.cnt, __ATOMIC_RELAXED) < POOL_MIN) {
		dobj_in_tracker++;
		struct dobj *o = sheaf_cache_alloc(dobj_backing);
		dobj_in_tracker--;
		if (!o)
			return;
		ADD(cache_allocs, 1);
		ADD(refills, 1);
		sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		o->next = dobj_pool.global.head;
		dobj_pool.global.head = o;
		cnt_set(&dobj_pool.global.cnt, dobj_pool.global.cnt + 1);
		sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	}
}

/* Make sure the pools can serve a record without the backing cache; called
 * with no lock held. */
void dobj_fill_pool(void)
{
	struct pcpool *p = &dobj_tl_pool;
	if (dobj_pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		fill_pool_single();
		return;
	}

	if (p->cnt)
		return;
	unsigned long level = __atomic_load_n(&dobj_pool.global.cnt, __ATOMIC_RELAXED);
	if (level >= POOL_MIN)
		return;

	/* Records waiting in the to-free pool come back first: cheap, and no
	 * backing-cache traffic. */
	sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	while (dobj_pool.global.cnt < POOL_MIN && dobj_pool.to_free.head) {
		stack_push_batch(&dobj_pool.global, stack_pop_batch(&dobj_pool.to_free));
		ADD(batches_moved, 1);
	}
	level = dobj_pool.global.cnt;
	sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	if (level >= POOL_MIN)
		return;

	/* Seed point 1: one refiller at a time unless the level is critical. */
	if (__atomic_fetch_add(&dobj_st.refilling, 1, __ATOMIC_ACQ_REL) > 0 && level >= POOL_CRIT) {
		__atomic_fetch_sub(&dobj_st.refilling, 1, __ATOMIC_RELEASE);
		ADD(refills_skipped, 1);
		return;
	}
	ADD(refills, 1);
	for (;;) {
		struct dobj *b = backing_alloc_batch();
		if (!b)
			break;
		/* Seed point 2: the lock is taken once per batch, not held
		 * across the backing-cache allocations. */
		sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		stack_push_batch(&dobj_pool.global, b);
		level = dobj_pool.global.cnt;
		sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		if (level >= POOL_MIN)
			break;
	}
	__atomic_fetch_sub(&dobj_st.refilling, 1, __ATOMIC_RELEASE);
}

void dobj_note_in_use(void)
{
	if (!__atomic_load_n(&dobj_pool_started, __ATOMIC_RELAXED))
		__atomic_store_n(&dobj_pool_started, true, __ATOMIC_RELAXED);
	unsigned long n = ADD(in_use, 1) + 1;
	unsigned long m = GET(max_in_use);
	while (n > m && !__atomic_compare_exchange_n(&dobj_st.max_in_use, &m, n, true,
						     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* Take one record from the pools; called with a bucket lock held, so it
 * never calls the backing cache.  NULL: the caller unlocks and refills. */
struct dobj *dobj_rec_alloc(void)
{
	struct dobj *o = NULL;
	if (dobj_pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		o = dobj_pool.global.head;
		if (o) {
			dobj_pool.global.head = o->next;
			cnt_set(&dobj_pool.global.cnt, dobj_pool.global.cnt - 1);
			note_global_level_locked();
		}
		sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	} else {
		struct pcpool *p = &dobj_tl_pool;
		if (!p->cnt) {
			sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
			struct dobj *b = stack_pop_batch(&dobj_pool.global);
			if (!b)
				b = stack_pop_batch(&dobj_pool.to_free);
			note_global_level_locked();
			sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
			if (!b)
				return NULL;
			ADD(batches_moved, 1);
			pcp_take_batch_from(p, b);
		}
		o = pcp_pop(p);
	}
	if (o)
		dobj_note_in_use();
	return o;
}

/* A record straight from the backing cache, with no lock held: for when the
 * pools ran dry between the refill and the bucket lock (other threads took
 * what was refilled).  Not counted in use until it is inserted. */
struct dobj *dobj_backing_alloc_one(void)
{
	dobj_in_tracker++;
	struct dobj *o = sheaf_cache_alloc(dobj_backing);
	dobj_in_tracker--;
	if (o)
		ADD(cache_allocs, 1);
	return o;
}

/* Give back a record that was never in use, with a bucket lock held: never
 * calls the backing cache (single mode may overshoot POOL_MAX by one). */
void dobj_rec_put_locked(struct dobj *o)
{
	if (dobj_pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		o->next = dobj_pool.global.head;
		dobj_pool.global.head = o;
		cnt_set(&dobj_pool.global.cnt, dobj_pool.global.cnt + 1);
		sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		return;
	}
	struct pcpool *p = &dobj_tl_pool;
	pcp_push(p, o);
	if (!p->registered) {
		p->registered = true;
		pthread_setspecific(dobj_exit_key, p);
	}
	if (p->cnt >= PCPU_MAX && p->cnt % BATCH == 0)
		park_batch(pcp_take_group(p));
}

static void ewma_sample(unsigned long long now)
{
	unsigned long long next = __atomic_load_n(&dobj_st.ewma_next, __ATOMIC_RELAXED);
	if (now < next ||
	    !__atomic_compare_exchange_n(&dobj_st.ewma_next, &next, now + EWMA_PERIOD_NS, false,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	/* One thread per period wins the exchange, so the update is not racy. */
	long cur = (long)(GET(in_use) << EWMA_FRAC);
	long avg = (long)GET(avg_fp);
	avg += (cur - avg) >> EWMA_SHIFT;
	__atomic_store_n(&dobj_st.avg_fp, (unsigned long)(avg < 0 ? 0 : avg), __ATOMIC_RELAXED);
}

/* The throttled free work (the kernel runs it from a delayed work item). */
static void free_work(unsigned long long now)
{
	unsigned long long next = __atomic_load_n(&dobj_st.work_next, __ATOMIC_RELAXED);
	if (now < next || __atomic_exchange_n(&dobj_st.working, 1, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&dobj_st.work_next, now + 1000000000ull / FREE_HZ, __ATOMIC_RELAXED);

	unsigned long avg = GET(avg_fp) >> EWMA_FRAC;
	unsigned long cur = GET(in_use);
	unsigned long keep = POOL_MAX + (avg > cur ? avg - cur : 0);
	unsigned long freed = 0;
	bool demand = false;
	while (freed < FREE_MAX) {
		struct dobj *b = NULL;
		bool moved = false;
		sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		if (!dobj_pool.to_free.head) {
			sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
			break;
		}
		if (dobj_pool.global.cnt + dobj_pool.to_free.head->batch_cnt <= POOL_MAX) {
			/* Room in the global pool: there is demand, keep it. */
			stack_push_batch(&dobj_pool.global, stack_pop_batch(&dobj_pool.to_free));
			moved = demand = true;
		} else if (!demand && dobj_pool.global.cnt + dobj_pool.to_free.cnt >=
					      keep + dobj_pool.to_free.head->batch_cnt) {
			b = stack_pop_batch(&dobj_pool.to_free);
		}
		sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		if (b) {
			/* The lock is dropped for every batch given back. */
			freed += b->batch_cnt;
			backing_free_list(b);
		} else if (moved) {
			ADD(batches_moved, 1);
		} else {
			break;
		}
	}
	__atomic_store_n(&dobj_st.working, 0, __ATOMIC_RELEASE);
}

/* Give a record back to the pools; called with no lock held. */
void dobj_rec_free(struct dobj *o)
{
	SUB(in_use, 1);
	if (dobj_pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		if (dobj_pool.global.cnt < POOL_MAX) {
			o->next = dobj_pool.global.head;
			dobj_pool.global.head = o;
			cnt_set(&dobj_pool.global.cnt, dobj_pool.global.cnt + 1);
			o = NULL;
		}
		sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		if (o) {
			o->next = NULL;
			backing_free_list(o);
		}
		return;
	}
	struct pcpool *p = &dobj_tl_pool;
	pcp_push(p, o);
	if (!p->registered) {
		p->registered = true;
		pthread_setspecific(dobj_exit_key, p);
	}
	if (p->cnt >= PCPU_MAX && p->cnt % BATCH == 0)
		park_batch(pcp_take_group(p));
}

/* Housekeeping after an operation, outside every lock: sample the EWMA and
 * run the free work now and then (every 64 operations of a thread at most
 * one clock read). */
void dobj_housekeeping(void)
{
	struct pcpool *p = &dobj_tl_pool;
	if (dobj_pool_mode == SHEAF_DEBUG_POOL_SINGLE || (++p->ops & 63))
		return;
	unsigned long long now = dobj_now_ns();
	ewma_sample(now);
	if (__atomic_load_n(&dobj_pool.to_free.cnt, __ATOMIC_RELAXED))
		free_work(now);
}

/* ---- Pool control and statistics ------------------------------------------ */

SHEAF_API int sheaf_debug_objects_set_pool(enum sheaf_debug_pool_mode m)
{
	if (m != SHEAF_DEBUG_POOL_BATCHED && m != SHEAF_DEBUG_POOL_SINGLE)
		return -EINVAL;
	pthread_once(&dobj_init_once, dobj_tracker_init);
	if (__atomic_load_n(&dobj_pool_started, __ATOMIC_RELAXED) || GET(cache_allocs))
		return (int)m == dobj_pool_mode ? 0 : -EBUSY;
	dobj_pool_mode = m;
	return 0;
}

SHEAF_API void sheaf_debug_objects_shrink(void)
{
	if (!dobj_tracker_ready())
		return;
	/* The calling thread's pool goes back first, so that it can be freed. */
	struct pcpool *p = &dobj_tl_pool;
	while (dobj_pool_mode == SHEAF_DEBUG_POOL_BATCHED && p->cnt)
		park_batch(pcp_take_group(p));
	for (;;) {
		struct dobj *b = NULL;
		sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		if (dobj_pool.to_free.head) {
			b = dobj_pool_mode == SHEAF_DEBUG_POOL_SINGLE ?
				    NULL :
				    stack_pop_batch(&dobj_pool.to_free);
		} else if (dobj_pool.global.cnt > POOL_MIN) {
			if (dobj_pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
				b = dobj_pool.global.head;
				dobj_pool.global.head = b->next;
				cnt_set(&dobj_pool.global.cnt, dobj_pool.global.cnt - 1);
				b->next = NULL;
			} else if (dobj_pool.global.cnt - dobj_pool.global.head->batch_cnt >=
				   POOL_MIN) {
				b = stack_pop_batch(&dobj_pool.global);
			}
		}
		sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
		if (!b)
			break;
		backing_free_list(b);
	}
}

SHEAF_API int sheaf_debug_objects_stats_get(struct sheaf_debug_objects_stats *out)
{
	struct sheaf_debug_objects_stats s;
	if (!out)
		return -EINVAL;
	size_t size = out->size ? out->size : sizeof(s);
	if (size < offsetof(struct sheaf_debug_objects_stats, reserved))
		return -EINVAL;
	if (size > sizeof(s))
		size = sizeof(s);
	pthread_once(&dobj_init_once, dobj_tracker_init);
	memset(&s, 0, sizeof(s));
	s.size = (uint32_t)size;
	s.version = SHEAF_DEBUG_OBJECTS_STATS_VERSION;
	s.pool_mode = (uint32_t)dobj_pool_mode;
	s.enabled = dobj_enabled;
	sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	s.pool_global = dobj_pool.global.cnt;
	s.pool_to_free = dobj_pool.to_free.cnt;
	s.pool_min_free = dobj_pool.min_global == ~0ul ? dobj_pool.global.cnt :
							 dobj_pool.min_global;
	sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	s.objs_in_use = GET(in_use);
	s.objs_max_in_use = GET(max_in_use);
	s.cache_allocs = GET(cache_allocs);
	s.cache_frees = GET(cache_frees);
	uint64_t held = s.cache_allocs - s.cache_frees;
	uint64_t accounted = s.objs_in_use + s.pool_global + s.pool_to_free;
	s.pool_percpu = held > accounted ? held - accounted : 0; /* racy reads: approximate */
	s.refills = GET(refills);
	s.refills_skipped = GET(refills_skipped);
	s.batches_moved = GET(batches_moved);
	s.avg_usage = GET(avg_fp) >> EWMA_FRAC;
	s.warnings = GET(warnings);
	s.reports_suppressed = GET(suppressed);
	s.fixups = GET(fixups);
	memcpy(out, &s, size);
	return 0;
}

SHEAF_API void sheaf_debug_objects_stats_print(FILE *f)
{
	/* A NULL stream prints nothing, as for sheaf_stats_print (it was passed to
	 * fprintf and the program died of SIGSEGV). */
	if (!f)
		return;
	struct sheaf_debug_objects_stats s = { .size = sizeof(s) };
	sheaf_debug_objects_stats_get(&s);
#define P(name, v) fprintf(f, "%-20s: %" PRIu64 "\n", name, (uint64_t)(v))
	fprintf(f, "%-20s: %s\n", "pool_mode",
		s.pool_mode == SHEAF_DEBUG_POOL_SINGLE ? "single" : "batched");
	P("enabled", s.enabled);
	P("objs_in_use", s.objs_in_use);
	P("objs_max_in_use", s.objs_max_in_use);
	P("pool_global", s.pool_global);
	P("pool_to_free", s.pool_to_free);
	P("pool_percpu", s.pool_percpu);
	P("pool_min_free", s.pool_min_free);
	P("cache_allocs", s.cache_allocs);
	P("cache_frees", s.cache_frees);
	P("refills", s.refills);
	P("refills_skipped", s.refills_skipped);
	P("batches_moved", s.batches_moved);
	P("avg_usage", s.avg_usage);
	P("warnings", s.warnings);
	P("reports_suppressed", s.reports_suppressed);
	P("fixups", s.fixups);
#undef P
}
