/* SPDX-License-Identifier: MIT */
/*
 * debug_objects.c - life-cycle tracking of program-defined objects
 * (docs/debugging.md, seed 002), after the kernel's lib/debugobjects.c.
 *
 * Data model.  One record (struct dobj) per tracked object, found through a
 * table of HASH_SIZE buckets keyed by the address's 256-byte chunk, so that a
 * free of a range visits only the buckets of its chunks.  Each bucket has its
 * own lock.  Every operation has the same shape: lock the bucket, look up the
 * record, switch on its state; on a violation copy the record to the stack,
 * unlock, then report and call the type's fix-up (never under a lock, so
 * fix-ups may call the hooks).
 *
 * Record pool (seed 002).  Records come from a private Sheaf cache
 * ("debug-objects", no debug flags, R11: never a cache under test) through
 * three levels:
 *
 *   per-thread pool  --batch of 16, O(1)-->  global pool (stack of batches)
 *         ^                                         |  overflow
 *         +--------- batch of 16, O(1) -------------+--> to-free pool (stack of batches)
 *                                                         | EWMA-throttled work
 *                                                         v
 *                                                   backing cache
 *
 * A batch is a singly linked run of records whose first record knows the
 * last one (batch_last) and the count (batch_cnt), so pushing or popping a
 * batch on a pool is two pointer writes however long it is (seed point 3).
 * Per-thread pools keep batch_last valid in every record by grouping records
 * in sixteens from the bottom of the stack: the top group is always a whole
 * batch when the count is a multiple of 16.
 *
 * - Allocation takes from the thread's pool; an empty one takes a batch from
 *   the global pool, else from the to-free pool (records waiting to be freed
 *   are reused before anything new is allocated).
 * - Refill (before any bucket lock is taken): when the global pool is below
 *   POOL_MIN, first move batches back from the to-free pool, then allocate
 *   batches from the backing cache.  Only one thread refills at a time unless
 *   the level is critical (below POOL_MIN / 2): the others go on with what is
 *   there (seed point 1).  The pool lock is dropped between batches (point 2).
 * - Free pushes onto the thread's pool; a full thread pool (PCPU_MAX) moves
 *   one batch to the global pool, or to the to-free pool when the global one
 *   holds POOL_MAX.
 * - The free work runs at most FREE_HZ times a second, from the free path,
 *   and gives at most FREE_MAX records per run back to the cache: only those
 *   beyond POOL_MAX plus the EWMA of use minus current use, and none while
 *   the global pool still has room (then it refills that instead, as there is
 *   demand).  The EWMA (alpha 1/8, sampled every 10 ms) is the tracker's
 *   estimate of how many records it will soon need again.
 *
 * The single mode (SHEAF_DEBUG_OBJECTS_POOL=single) is the comparison point:
 * one global list under one lock, every record moved on its own, refilled by
 * any thread that finds it below POOL_MIN (parallel refills), records beyond
 * POOL_MAX given back to the cache at once.
 *
 * Lock order: bucket lock (a spinlock) -> pool lock (a mutex).  The backing cache is called with no
 * tracker lock held, and check_free ignores frees made from inside the
 * tracker (in_tracker), so the core's free hook cannot recurse into us.
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
#include <dlfcn.h>
#include <execinfo.h>

#include "sheaf.h"
#include "sheaf_debug.h"
#include "debug/debug.h"

/* Buckets are keyed by 256-byte chunks: small enough that the records of
 * densely packed small objects do not pile up in one chain (a 4 KiB page of
 * 32-byte objects would be one chain of 128), large enough that checking a
 * freed object visits one or two buckets. */
#define HASH_BITS 13
#define HASH_SIZE (1u << HASH_BITS)
#define CHUNK_SHIFT 8

/* Batch size: a power of two, so that "count % BATCH" is a mask (seed 002). */
#define BATCH 16u
#define PCPU_MAX (4 * BATCH)            /* per-thread pool: 4 batches */
#define POOL_MIN (16 * BATCH)           /* global pool refill level: 256 */
#define POOL_CRIT (POOL_MIN / 2)        /* below this every thread may refill */
#define POOL_MAX (64 * BATCH)           /* global pool size before overflow: 1024 */
#define FREE_HZ 10                      /* free work runs at most 10 times a second, */
#define FREE_MAX 1024u                  /* giving back at most 1024 records a run */
#define EWMA_PERIOD_NS 10000000ull      /* usage sampled every 10 ms */
#define EWMA_SHIFT 3                    /* alpha = 1/8 */
#define EWMA_FRAC 4                     /* fixed point: 4 fraction bits */
#define REPORT_BURST 10                 /* reports printed before rate limiting, */
#define REPORT_INTERVAL_NS 1000000000ull /* then one per second */

/* Set (never cleared) when the first object is tracked; see check_free. */
static bool tracking;

struct dobj {
	struct dobj *next;              /* hash chain, or pool list */
	struct dobj *batch_last;        /* in a pool: the last record of this batch */
	void *addr;
	const struct sheaf_debug_obj_descr *descr;
	const void *site;               /* caller of the last state change */
	uint32_t batch_cnt;             /* in a pool, first of a batch: its length */
	uint8_t state;                  /* enum sheaf_debug_state */
};

/* Bucket locks are small spinlocks, as the kernel's raw spinlocks: the
 * critical sections are a short chain walk, fork_prepare can take all 8192
 * of them (ThreadSanitizer's deadlock detector cannot track that many
 * pthread mutexes held at once), and a bucket is 16 bytes.  A waiter yields
 * after a few hundred spins, so a preempted holder costs a time slice, not
 * a busy CPU. */
struct bucket {
	int lock;                       /* 0 free, 1 held */
	struct dobj *head;              /* Protected by lock. */
};

/* A stack of batches.  Protected by pool.lock. */
struct batch_stack {
	struct dobj *head;
	unsigned long cnt;              /* records, not batches */
};

struct pcpool {
	struct dobj *head;
	unsigned int cnt;
	unsigned int ops;               /* operations since the last EWMA check */
	bool registered;                /* thread-exit destructor armed */
};

static struct bucket buckets[HASH_SIZE]; /* zero: unlocked and empty, untouched until used */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
}

static void bucket_lock(struct bucket *b)
{
	unsigned int spins = 0;
	while (__atomic_exchange_n(&b->lock, 1, __ATOMIC_ACQUIRE)) {
		while (__atomic_load_n(&b->lock, __ATOMIC_RELAXED)) {
			if (++spins < 256)
				cpu_relax();
			else
				sched_yield();
		}
	}
}

static void bucket_unlock(struct bucket *b)
{
	__atomic_store_n(&b->lock, 0, __ATOMIC_RELEASE);
}

static struct {
	pthread_mutex_t lock;
	struct batch_stack global;      /* single mode: a plain list of records */
	struct batch_stack to_free;
	unsigned long min_global;       /* low-water mark of global.cnt */
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .min_global = ~0ul };

static __thread struct pcpool tl_pool;
static __thread int in_tracker;         /* >0 while calling the backing cache */

static struct sheaf_cache *backing;
static pthread_key_t exit_key;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static bool enabled = true;             /* written once under init_once */
static int pool_mode = SHEAF_DEBUG_POOL_BATCHED;
static bool pool_started;               /* a record was allocated: mode is fixed */

/* Counters: relaxed atomics, summed on read. */
static struct {
	unsigned long in_use, max_in_use;
	unsigned long cache_allocs, cache_frees;
	unsigned long refills, refills_skipped, batches_moved;
	unsigned long warnings, suppressed, fixups;
	unsigned long avg_fp;           /* EWMA of in_use, EWMA_FRAC fraction bits */
	unsigned long long ewma_next;   /* next sample time (ns) */
	unsigned long long work_next;   /* next free work time (ns) */
	int refilling;                  /* threads refilling from the cache */
	int working;                    /* the free work is running */
} st;

#define ADD(field, n) __atomic_fetch_add(&st.field, (n), __ATOMIC_RELAXED)
#define SUB(field, n) __atomic_fetch_sub(&st.field, (n), __ATOMIC_RELAXED)
#define GET(field) __atomic_load_n(&st.field, __ATOMIC_RELAXED)

static const char *const state_names[SHEAF_DEBUG_STATE_NR] = {
	[SHEAF_DEBUG_STATE_NONE] = "none",
	[SHEAF_DEBUG_STATE_INIT] = "initialized",
	[SHEAF_DEBUG_STATE_INACTIVE] = "inactive",
	[SHEAF_DEBUG_STATE_ACTIVE] = "active",
	[SHEAF_DEBUG_STATE_DESTROYED] = "destroyed",
	[SHEAF_DEBUG_STATE_FREED] = "freed",
	[SHEAF_DEBUG_STATE_NOTAVAILABLE] = "not available",
};

SHEAF_API const char *sheaf_debug_state_name(enum sheaf_debug_state s)
{
	return (unsigned int)s < SHEAF_DEBUG_STATE_NR ? state_names[s] : "invalid";
}

static unsigned long long now_ns(void)
{
	struct timespec ts;
	/* The coarse clock is a vDSO read without a fence; 4 ms resolution is
	 * plenty for a 10 Hz throttle and a 10 ms EWMA period. */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* ---- Initialisation ------------------------------------------------------- */

static void thread_exit(void *arg);
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork (design §7): no tracker lock may be held across it, or the child would
 * hang on its first hook.  Order: the report lock (never held with another),
 * every bucket, then the pool -- the lock order of the hooks. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&report_lock);
	for (unsigned int i = 0; i < HASH_SIZE; i++)
		bucket_lock(&buckets[i]);
	pthread_mutex_lock(&pool.lock);
}

static void fork_release(void)
{
	pthread_mutex_unlock(&pool.lock);
	for (unsigned int i = HASH_SIZE; i-- > 0;)
		bucket_unlock(&buckets[i]);
	pthread_mutex_unlock(&report_lock);
}

static void fork_child(void)
{
	fork_release();
	/* Threads that were refilling or running the free work are gone; the
	 * records in their per-thread pools are lost to the child (counted as
	 * pool_percpu). */
	__atomic_store_n(&st.refilling, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&st.working, 0, __ATOMIC_RELAXED);
}

static void tracker_init(void)
{
	/* Options come from the one table (options.c, docs/options.md). */
	if (sheaf_ensure_init() != 0 || !sheaf_option_long(SHEAF_OPT_DEBUG_OBJECTS))
		enabled = false;
	if (!strcmp(sheaf_option_str(SHEAF_OPT_DEBUG_OBJECTS_POOL), "single") && !pool_started)
		pool_mode = SHEAF_DEBUG_POOL_SINGLE;
	if (pthread_key_create(&exit_key, thread_exit) != 0 ||
	    pthread_atfork(fork_prepare, fork_release, fork_child) != 0)
		enabled = false;
	if (!enabled)
		return;
	in_tracker++;
	backing = sheaf_cache_create("debug-objects", sizeof(struct dobj), NULL);
	/* glibc's backtrace() loads libgcc_s and allocates on first use; the
	 * check_free report uses it inside the core's free path. */
	void *prime[2];
	backtrace(prime, 2);
	in_tracker--;
	if (!backing) {
		static const char msg[] = "sheaf: debug-objects: cannot create the record cache; "
					  "tracking disabled\n";
		if (write(2, msg, sizeof(msg) - 1) < 0) {
			/* nothing more we can do */
		}
		enabled = false;
	}
}

static void selftest_once(void);
static int selftest_state; /* 0 not run, 1 running, 2 done */

static inline bool tracker_ready(void)
{
	pthread_once(&init_once, tracker_init);
	/* Debug builds check the state machine and every fix-up path once
	 * before the first real object (as the kernel's selftest does), so a broken
	 * transition fails at start-up rather than in the middle of a report. */
	if (sheaf_config_debug && enabled &&
	    sheaf_unlikely(__atomic_load_n(&selftest_state, __ATOMIC_ACQUIRE) == 0))
		selftest_once();
	return enabled;
}

/* ---- Batches and pools ---------------------------------------------------- */

/* Counts are written under pool.lock but read without it as a hint
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
	if (pool.global.cnt < pool.min_global)
		pool.min_global = pool.global.cnt;
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
		pthread_setspecific(exit_key, p);
	}
}

/* Put a detached batch in the global pool, or the to-free pool when full. */
static void park_batch(struct dobj *first)
{
	pthread_mutex_lock(&pool.lock);
	if (pool.global.cnt + first->batch_cnt <= POOL_MAX)
		stack_push_batch(&pool.global, first);
	else
		stack_push_batch(&pool.to_free, first);
	pthread_mutex_unlock(&pool.lock);
	ADD(batches_moved, 1);
}

static void thread_exit(void *arg)
{
	struct pcpool *p = arg;
	while (p->cnt)
		park_batch(pcp_take_group(p));
	p->registered = false;
}

static void backing_free_list(struct dobj *o)
{
	unsigned long n = 0;
	in_tracker++;
	while (o) {
		struct dobj *next = o->next;
		sheaf_cache_free(backing, o);
		o = next;
		n++;
	}
	in_tracker--;
	ADD(cache_frees, n);
}

/* Allocate one batch of up to BATCH records from the backing cache, with
 * batch_last valid in every record.  NULL if the cache has none. */
static struct dobj *backing_alloc_batch(void)
{
	void *objs[BATCH];
	size_t got;
	in_tracker++;
	got = sheaf_cache_alloc_bulk(backing, BATCH, objs);
	if (got == 0) {
		/* All or nothing failed: try single objects. */
		while (got < BATCH && (objs[got] = sheaf_cache_alloc(backing)) != NULL)
			got++;
	}
	in_tracker--;
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

/* Make sure the pools can serve a record without the backing cache; called
 * with no lock held. */
static void fill_pool(void)
{
	struct pcpool *p = &tl_pool;
	if (pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		/* Every thread that sees a low level refills, one record at a
		 * time: the behaviour the batched pool is measured against. */
		while (__atomic_load_n(&pool.global.cnt, __ATOMIC_RELAXED) < POOL_MIN) {
			in_tracker++;
			struct dobj *o = sheaf_cache_alloc(backing);
			in_tracker--;
			if (!o)
				return;
			ADD(cache_allocs, 1);
			ADD(refills, 1);
			pthread_mutex_lock(&pool.lock);
			o->next = pool.global.head;
			pool.global.head = o;
			cnt_set(&pool.global.cnt, pool.global.cnt + 1);
			pthread_mutex_unlock(&pool.lock);
		}
		return;
	}

	if (p->cnt)
		return;
	unsigned long level = __atomic_load_n(&pool.global.cnt, __ATOMIC_RELAXED);
	if (level >= POOL_MIN)
		return;

	/* Records waiting in the to-free pool come back first: cheap, and no
	 * backing-cache traffic. */
	pthread_mutex_lock(&pool.lock);
	while (pool.global.cnt < POOL_MIN && pool.to_free.head) {
		stack_push_batch(&pool.global, stack_pop_batch(&pool.to_free));
		ADD(batches_moved, 1);
	}
	level = pool.global.cnt;
	pthread_mutex_unlock(&pool.lock);
	if (level >= POOL_MIN)
		return;

	/* Seed point 1: one refiller at a time unless the level is critical. */
	if (__atomic_fetch_add(&st.refilling, 1, __ATOMIC_ACQ_REL) > 0 && level >= POOL_CRIT) {
		__atomic_fetch_sub(&st.refilling, 1, __ATOMIC_RELEASE);
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
		pthread_mutex_lock(&pool.lock);
		stack_push_batch(&pool.global, b);
		level = pool.global.cnt;
		pthread_mutex_unlock(&pool.lock);
		if (level >= POOL_MIN)
			break;
	}
	__atomic_fetch_sub(&st.refilling, 1, __ATOMIC_RELEASE);
}

static void note_in_use(void)
{
	if (!__atomic_load_n(&pool_started, __ATOMIC_RELAXED))
		__atomic_store_n(&pool_started, true, __ATOMIC_RELAXED);
	unsigned long n = ADD(in_use, 1) + 1;
	unsigned long m = GET(max_in_use);
	while (n > m && !__atomic_compare_exchange_n(&st.max_in_use, &m, n, true, __ATOMIC_RELAXED,
						      __ATOMIC_RELAXED))
		;
}

/* Take one record from the pools; called with a bucket lock held, so it
 * never calls the backing cache.  NULL: the caller unlocks and refills. */
static struct dobj *rec_alloc(void)
{
	struct dobj *o = NULL;
	if (pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		pthread_mutex_lock(&pool.lock);
		o = pool.global.head;
		if (o) {
			pool.global.head = o->next;
			cnt_set(&pool.global.cnt, pool.global.cnt - 1);
			note_global_level_locked();
		}
		pthread_mutex_unlock(&pool.lock);
	} else {
		struct pcpool *p = &tl_pool;
		if (!p->cnt) {
			pthread_mutex_lock(&pool.lock);
			struct dobj *b = stack_pop_batch(&pool.global);
			if (!b)
				b = stack_pop_batch(&pool.to_free);
			note_global_level_locked();
			pthread_mutex_unlock(&pool.lock);
			if (!b)
				return NULL;
			ADD(batches_moved, 1);
			pcp_take_batch_from(p, b);
		}
		o = pcp_pop(p);
	}
	if (o)
		note_in_use();
	return o;
}

/* A record straight from the backing cache, with no lock held: for when the
 * pools ran dry between the refill and the bucket lock (other threads took
 * what was refilled).  Not counted in use until it is inserted. */
static struct dobj *backing_alloc_one(void)
{
	in_tracker++;
	struct dobj *o = sheaf_cache_alloc(backing);
	in_tracker--;
	if (o)
		ADD(cache_allocs, 1);
	return o;
}

/* Give back a record that was never in use, with a bucket lock held: never
 * calls the backing cache (single mode may overshoot POOL_MAX by one). */
static void rec_put_locked(struct dobj *o)
{
	if (pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		pthread_mutex_lock(&pool.lock);
		o->next = pool.global.head;
		pool.global.head = o;
		cnt_set(&pool.global.cnt, pool.global.cnt + 1);
		pthread_mutex_unlock(&pool.lock);
		return;
	}
	struct pcpool *p = &tl_pool;
	pcp_push(p, o);
	if (!p->registered) {
		p->registered = true;
		pthread_setspecific(exit_key, p);
	}
	if (p->cnt >= PCPU_MAX && p->cnt % BATCH == 0)
		park_batch(pcp_take_group(p));
}

static void ewma_sample(unsigned long long now)
{
	unsigned long long next = __atomic_load_n(&st.ewma_next, __ATOMIC_RELAXED);
	if (now < next ||
	    !__atomic_compare_exchange_n(&st.ewma_next, &next, now + EWMA_PERIOD_NS, false,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	/* One thread per period wins the exchange, so the update is not racy. */
	long cur = (long)(GET(in_use) << EWMA_FRAC);
	long avg = (long)GET(avg_fp);
	avg += (cur - avg) >> EWMA_SHIFT;
	__atomic_store_n(&st.avg_fp, (unsigned long)(avg < 0 ? 0 : avg), __ATOMIC_RELAXED);
}

/* The throttled free work (the kernel runs it from a delayed work item). */
static void free_work(unsigned long long now)
{
	unsigned long long next = __atomic_load_n(&st.work_next, __ATOMIC_RELAXED);
	if (now < next || __atomic_exchange_n(&st.working, 1, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&st.work_next, now + 1000000000ull / FREE_HZ, __ATOMIC_RELAXED);

	unsigned long avg = GET(avg_fp) >> EWMA_FRAC;
	unsigned long cur = GET(in_use);
	unsigned long keep = POOL_MAX + (avg > cur ? avg - cur : 0);
	unsigned long freed = 0;
	bool demand = false;
	while (freed < FREE_MAX) {
		struct dobj *b = NULL;
		bool moved = false;
		pthread_mutex_lock(&pool.lock);
		if (!pool.to_free.head) {
			pthread_mutex_unlock(&pool.lock);
			break;
		}
		if (pool.global.cnt + pool.to_free.head->batch_cnt <= POOL_MAX) {
			/* Room in the global pool: there is demand, keep it. */
			stack_push_batch(&pool.global, stack_pop_batch(&pool.to_free));
			moved = demand = true;
		} else if (!demand && pool.global.cnt + pool.to_free.cnt >=
						keep + pool.to_free.head->batch_cnt) {
			b = stack_pop_batch(&pool.to_free);
		}
		pthread_mutex_unlock(&pool.lock);
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
	__atomic_store_n(&st.working, 0, __ATOMIC_RELEASE);
}

/* Give a record back to the pools; called with no lock held. */
static void rec_free(struct dobj *o)
{
	SUB(in_use, 1);
	if (pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
		pthread_mutex_lock(&pool.lock);
		if (pool.global.cnt < POOL_MAX) {
			o->next = pool.global.head;
			pool.global.head = o;
			cnt_set(&pool.global.cnt, pool.global.cnt + 1);
			o = NULL;
		}
		pthread_mutex_unlock(&pool.lock);
		if (o) {
			o->next = NULL;
			backing_free_list(o);
		}
		return;
	}
	struct pcpool *p = &tl_pool;
	pcp_push(p, o);
	if (!p->registered) {
		p->registered = true;
		pthread_setspecific(exit_key, p);
	}
	if (p->cnt >= PCPU_MAX && p->cnt % BATCH == 0)
		park_batch(pcp_take_group(p));
}

/* Housekeeping after an operation, outside every lock: sample the EWMA and
 * run the free work now and then (every 64 operations of a thread at most
 * one clock read). */
static void housekeeping(void)
{
	struct pcpool *p = &tl_pool;
	if (pool_mode == SHEAF_DEBUG_POOL_SINGLE || (++p->ops & 63))
		return;
	unsigned long long now = now_ns();
	ewma_sample(now);
	if (__atomic_load_n(&pool.to_free.cnt, __ATOMIC_RELAXED))
		free_work(now);
}

/* ---- Buckets -------------------------------------------------------------- */

static struct bucket *bucket_of(const void *addr)
{
	uint64_t chunk = (uint64_t)(uintptr_t)addr >> CHUNK_SHIFT;
	return &buckets[(chunk * 0x9E3779B97F4A7C15ull) >> (64 - HASH_BITS)];
}

static struct dobj *lookup_locked(struct bucket *b, const void *addr)
{
	for (struct dobj *o = b->head; o; o = o->next)
		if (o->addr == addr)
			return o;
	return NULL;
}

static void unlink_locked(struct bucket *b, struct dobj *o)
{
	struct dobj **pp = &b->head;
	while (*pp != o)
		pp = &(*pp)->next;
	*pp = o->next;
}

/* From now on every free of Sheaf memory is checked.  Release: a free hook
 * that sees the pointer also sees the tracker initialised. */
static void start_tracking(void)
{
	__atomic_store_n(&tracking, true, __ATOMIC_RELEASE);
	sheaf_free_check_hook_set(sheaf_debug_objects_check_free); /* also closes the per-CPU fast free */
}

/* Look up @addr's record, or start tracking it in state INIT.  Returns with
 * the bucket locked; NULL only when the backing cache has no memory. */
static struct dobj *lookup_or_alloc(struct bucket *b, void *addr,
				    const struct sheaf_debug_obj_descr *d, const void *site)
{
	struct dobj *spare = NULL;
	fill_pool();
	for (;;) {
		bucket_lock(b);
		struct dobj *o = lookup_locked(b, addr);
		if (o) {
			if (spare)
				rec_put_locked(spare);
			return o;
		}
		if (spare) {
			o = spare;
			note_in_use();
		} else {
			o = rec_alloc();
		}
		if (o) {
			o->addr = addr;
			o->descr = d;
			o->site = site;
			o->state = SHEAF_DEBUG_STATE_INIT;
			o->next = b->head;
			b->head = o;
			if (!__atomic_load_n(&tracking, __ATOMIC_RELAXED))
				start_tracking();
			return o;
		}
		bucket_unlock(b);
		/* The pools ran dry under us: one record from the cache, then
		 * look again (another thread may have tracked @addr meanwhile). */
		spare = backing_alloc_one();
		if (!spare) {
			bucket_lock(b);
			return NULL;
		}
	}
}

/* ---- Reports -------------------------------------------------------------- */

struct snapshot {
	const void *addr;
	const struct sheaf_debug_obj_descr *descr;
	const void *site;
	enum sheaf_debug_state state;
};

static void snap(struct snapshot *s, const struct dobj *o)
{
	s->addr = o->addr;
	s->descr = o->descr;
	s->site = o->site;
	s->state = o->state;
}

/* "0xPC (symbol+0xoff)", or "0xPC (file+0xoff)" when the symbol is not
 * exported (executables need -rdynamic for dladdr to name their functions). */
static size_t fmt_site(char *buf, size_t n, const void *pc)
{
	Dl_info info;
	memset(&info, 0, sizeof(info));
	if (!pc || !dladdr(pc, &info))
		return sheaf_fmt(buf, n, "%p", pc);
	if (info.dli_sname)
		return sheaf_fmt(buf, n, "%p (%s+0x%zx)", pc, info.dli_sname,
					(size_t)((const char *)pc - (const char *)info.dli_saddr));
	return sheaf_fmt(buf, n, "%p (%s+0x%zx)", pc, info.dli_fname ? info.dli_fname : "?",
				(size_t)((const char *)pc - (const char *)info.dli_fbase));
}

static bool report_allowed(void)
{
	static unsigned long long window_end;
	static unsigned int printed;
	bool ok;

	ADD(warnings, 1);
	pthread_mutex_lock(&report_lock);
	unsigned long long now = now_ns();
	if (printed < REPORT_BURST) {
		printed++;
		window_end = now + REPORT_INTERVAL_NS;
		ok = true;
	} else if (now >= window_end) {
		window_end = now + REPORT_INTERVAL_NS;
		ok = true;
	} else {
		ok = false;
	}
	pthread_mutex_unlock(&report_lock);
	if (!ok)
		ADD(suppressed, 1);
	return ok;
}

/* "sheaf: debug-objects: <op> <state> object <addr> type <name> ..." */
static const struct sheaf_debug_obj_descr selftest_descr;
static unsigned long st_warned, st_fixed; /* the self-test's own counts */

static void report_bt(const char *op, const struct snapshot *s, const void *caller,
		      void *const *bt, int nbt)
{
	if (s->descr == &selftest_descr) {
		/* counted apart for the self-test's checks, never printed */
		__atomic_fetch_add(&st_warned, 1, __ATOMIC_RELAXED);
		return;
	}
	if (!report_allowed())
		return;
	char buf[2048], site[192], from[192];
	const char *name = s->descr && s->descr->name ? s->descr->name : "?";
	const void *hint = s->descr && s->descr->debug_hint ? s->descr->debug_hint(s->addr) : NULL;
	fmt_site(from, sizeof(from), caller);
	size_t n = sheaf_fmt(buf, sizeof(buf),
			     "sheaf: debug-objects: %s %s object %p type %s hint %p, "
				    "called from %s",
				    op, sheaf_debug_state_name(s->state), s->addr, name, hint, from);
	if (s->site && n < sizeof(buf)) {
		fmt_site(site, sizeof(site), s->site);
		n += sheaf_fmt(buf + n, sizeof(buf) - n, "; last changed from %s", site);
	}
	unsigned long supp = GET(suppressed);
	if (supp && n < sizeof(buf))
		n += sheaf_fmt(buf + n, sizeof(buf) - n, " (%lu reports suppressed so far)",
				      supp);
	/* A free found by the core's hook: the program's frame is a few up. */
	for (int i = 0; i < nbt && n < sizeof(buf); i++) {
		fmt_site(site, sizeof(site), bt[i]);
		n += sheaf_fmt(buf + n, sizeof(buf) - n, "\nsheaf: debug-objects:   #%d %s", i,
				      site);
	}
	if (n >= sizeof(buf) - 1)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	/* One write(2) through the reporter of every layer (base/error.h): no allocation,
	 * no interleaving with other reports.  The tracker reports and never aborts. */
	sheaf_report_write(buf, n);
}

static void report(const char *op, const struct snapshot *s, const void *caller)
{
	report_bt(op, s, caller, NULL, 0);
}

static bool fixup(bool (*fn)(void *, enum sheaf_debug_state), void *addr,
		  enum sheaf_debug_state state)
{
	if (fn && fn(addr, state)) {
		ADD(fixups, 1);
		return true;
	}
	return false;
}

/* ---- The hooks ------------------------------------------------------------ */

#define CALLER() __builtin_extract_return_addr(__builtin_return_address(0))

static void do_init(void *addr, const struct sheaf_debug_obj_descr *d, const void *caller)
{
	struct bucket *b = bucket_of(addr);
	struct dobj *o = lookup_or_alloc(b, addr, d, caller);
	struct snapshot s;
	if (!o) {
		bucket_unlock(b);
		/* No memory for a record: say so (counted, rate-limited); the
		 * object's later operations will report "not available". */
		s = (struct snapshot){ addr, d, NULL, SHEAF_DEBUG_STATE_NOTAVAILABLE };
		report("init (out of memory for a tracking record)", &s, caller);
		return;
	}
	switch (o->state) {
	case SHEAF_DEBUG_STATE_NONE:
	case SHEAF_DEBUG_STATE_INIT:
	case SHEAF_DEBUG_STATE_INACTIVE:
		/* Re-initialising an idle object is legal (kernel timers do). */
		o->state = SHEAF_DEBUG_STATE_INIT;
		o->descr = d;
		o->site = caller;
		bucket_unlock(b);
		break;
	case SHEAF_DEBUG_STATE_ACTIVE:
		snap(&s, o);
		bucket_unlock(b);
		report("init", &s, caller);
		fixup(d->fixup_init, addr, s.state);
		break;
	default: /* destroyed */
		snap(&s, o);
		bucket_unlock(b);
		report("init", &s, caller);
		break;
	}
	housekeeping();
}

SHEAF_API void sheaf_debug_object_init(void *addr, const struct sheaf_debug_obj_descr *d)
{
	if (!tracker_ready() || !addr || !d)
		return;
	do_init(addr, d, CALLER());
}

SHEAF_API int sheaf_debug_object_activate(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	struct snapshot s;
	if (!tracker_ready() || !addr || !d)
		return 0;
	struct bucket *b = bucket_of(addr);
	bucket_lock(b);
	struct dobj *o = lookup_locked(b, addr);
	if (o) {
		switch (o->state) {
		case SHEAF_DEBUG_STATE_INIT:
		case SHEAF_DEBUG_STATE_INACTIVE:
			o->state = SHEAF_DEBUG_STATE_ACTIVE;
			o->site = caller;
			bucket_unlock(b);
			housekeeping();
			return 0;
		case SHEAF_DEBUG_STATE_ACTIVE:
			snap(&s, o);
			bucket_unlock(b);
			report("activate", &s, caller);
			return fixup(d->fixup_activate, addr, s.state) ? 0 : -EINVAL;
		default: /* destroyed: never activated again */
			snap(&s, o);
			bucket_unlock(b);
			report("activate", &s, caller);
			return -EINVAL;
		}
	}
	bucket_unlock(b);
	/* Not tracked: a statically initialised object starts its tracking
	 * here; anything else is activated without ever being initialised. */
	if (d->is_static_object && d->is_static_object(addr)) {
		do_init(addr, d, caller);
		bucket_lock(b);
		o = lookup_locked(b, addr);
		if (o && o->state == SHEAF_DEBUG_STATE_INIT) {
			o->state = SHEAF_DEBUG_STATE_ACTIVE;
			o->site = caller;
		}
		bucket_unlock(b);
		return 0;
	}
	s = (struct snapshot){ addr, d, NULL, SHEAF_DEBUG_STATE_NOTAVAILABLE };
	report("activate", &s, caller);
	return fixup(d->fixup_activate, addr, s.state) ? 0 : -EINVAL;
}

SHEAF_API void sheaf_debug_object_deactivate(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	struct snapshot s;
	if (!tracker_ready() || !addr || !d)
		return;
	struct bucket *b = bucket_of(addr);
	bucket_lock(b);
	struct dobj *o = lookup_locked(b, addr);
	if (o) {
		switch (o->state) {
		case SHEAF_DEBUG_STATE_INIT:
		case SHEAF_DEBUG_STATE_INACTIVE:
		case SHEAF_DEBUG_STATE_ACTIVE:
			o->state = SHEAF_DEBUG_STATE_INACTIVE;
			o->site = caller;
			bucket_unlock(b);
			housekeeping();
			return;
		default:
			snap(&s, o);
			bucket_unlock(b);
			report("deactivate", &s, caller);
			return;
		}
	}
	bucket_unlock(b);
	s = (struct snapshot){ addr, d, NULL, SHEAF_DEBUG_STATE_NOTAVAILABLE };
	report("deactivate", &s, caller);
}

SHEAF_API void sheaf_debug_object_destroy(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	struct snapshot s;
	if (!tracker_ready() || !addr || !d)
		return;
	struct bucket *b = bucket_of(addr);
	bucket_lock(b);
	struct dobj *o = lookup_locked(b, addr);
	if (!o) {
		bucket_unlock(b);
		return;
	}
	switch (o->state) {
	case SHEAF_DEBUG_STATE_NONE:
	case SHEAF_DEBUG_STATE_INIT:
	case SHEAF_DEBUG_STATE_INACTIVE:
		o->state = SHEAF_DEBUG_STATE_DESTROYED;
		o->site = caller;
		bucket_unlock(b);
		housekeeping();
		return;
	case SHEAF_DEBUG_STATE_ACTIVE:
		snap(&s, o);
		bucket_unlock(b);
		report("destroy", &s, caller);
		fixup(d->fixup_destroy, addr, s.state);
		return;
	default:
		snap(&s, o);
		bucket_unlock(b);
		report("destroy", &s, caller);
		return;
	}
}

SHEAF_API void sheaf_debug_object_free(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	struct snapshot s;
	if (!tracker_ready() || !addr || !d)
		return;
	struct bucket *b = bucket_of(addr);
	bucket_lock(b);
	struct dobj *o = lookup_locked(b, addr);
	if (!o) {
		bucket_unlock(b);
		return;
	}
	if (o->state == SHEAF_DEBUG_STATE_ACTIVE) {
		snap(&s, o);
		bucket_unlock(b);
		report("free", &s, caller);
		fixup(d->fixup_free, addr, s.state);
		return;
	}
	o->state = SHEAF_DEBUG_STATE_FREED;
	unlink_locked(b, o);
	bucket_unlock(b);
	rec_free(o);
	housekeeping();
}

SHEAF_API void sheaf_debug_object_assert_init(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	if (!tracker_ready() || !addr || !d)
		return;
	struct bucket *b = bucket_of(addr);
	bucket_lock(b);
	struct dobj *o = lookup_locked(b, addr);
	bucket_unlock(b);
	if (o)
		return;
	if (d->is_static_object && d->is_static_object(addr)) {
		do_init(addr, d, caller);
		return;
	}
	struct snapshot s = { addr, d, NULL, SHEAF_DEBUG_STATE_NOTAVAILABLE };
	report("assert_init", &s, caller);
	fixup(d->fixup_assert_init, addr, s.state);
}

SHEAF_API enum sheaf_debug_state sheaf_debug_object_state(const void *addr)
{
	if (!tracker_ready() || !addr)
		return SHEAF_DEBUG_STATE_NONE;
	struct bucket *b = bucket_of(addr);
	bucket_lock(b);
	struct dobj *o = lookup_locked(b, addr);
	enum sheaf_debug_state s = o ? (enum sheaf_debug_state)o->state : SHEAF_DEBUG_STATE_NONE;
	bucket_unlock(b);
	return s;
}

/* Walk one bucket for records in [lo, hi): report active ones, drop all. */
/* Walk one bucket for records in [lo, hi): report each active one once and
 * run its fix-up (without the lock), then drop every record there -- also one
 * a fix-up left active: the memory is going away. */
#define CHECK_REPORTED_MAX 16

static bool was_reported(const uintptr_t *r, int n, uintptr_t a)
{
	for (int i = 0; i < n; i++)
		if (r[i] == a)
			return true;
	return false;
}

static void check_bucket(struct bucket *b, uintptr_t lo, uintptr_t hi, const void *caller)
{
	struct dobj *dead = NULL;
	uintptr_t reported[CHECK_REPORTED_MAX];
	int nrep = 0;
again:
	bucket_lock(b);
	for (struct dobj **pp = &b->head; *pp;) {
		struct dobj *o = *pp;
		uintptr_t a = (uintptr_t)o->addr;
		if (a < lo || a >= hi) {
			pp = &o->next;
			continue;
		}
		if (o->state == SHEAF_DEBUG_STATE_ACTIVE && nrep < CHECK_REPORTED_MAX &&
		    !was_reported(reported, nrep, a)) {
			struct snapshot s;
			snap(&s, o);
			bucket_unlock(b);
			reported[nrep++] = a;
			/* The program's frame is a few above the core's free path
			 * (@caller); backtrace() was primed at init. */
			void *bt[12];
			int nbt = backtrace(bt, 12), from = 0;
			for (int i = 0; i < nbt; i++)
				if (bt[i] == caller) {
					from = i + 1;
					break;
				}
			report_bt("free", &s, caller, bt + from, SHEAF_MIN(nbt - from, 5));
			/* The fix-up usually deactivates and frees the object; the
			 * bucket may have changed meanwhile: walk it again. */
			if (s.descr)
				fixup(s.descr->fixup_free, (void *)a, s.state);
			goto again;
		}
		*pp = o->next;
		o->next = dead;
		dead = o;
	}
	bucket_unlock(b);
	while (dead) {
		struct dobj *next = dead->next;
		rec_free(dead);
		dead = next;
	}
}

static void check_free(const void *addr, size_t size, const void *caller)
{
	if (!size)
		return;
	uintptr_t lo = (uintptr_t)addr, hi = lo + size;
	if (hi < lo)
		hi = UINTPTR_MAX;
	uintptr_t c0 = lo >> CHUNK_SHIFT, c1 = (hi - 1) >> CHUNK_SHIFT;
	if (c1 - c0 >= HASH_SIZE) {
		/* A huge range: walking every bucket once is cheaper. */
		for (unsigned int i = 0; i < HASH_SIZE; i++)
			check_bucket(&buckets[i], lo, hi, caller);
	} else {
		for (uintptr_t c = c0; c <= c1; c++)
			check_bucket(bucket_of((const void *)(c << CHUNK_SHIFT)), lo, hi, caller);
	}
	housekeeping();
}

void sheaf_debug_objects_check_free(const void *addr, size_t size)
{
	/* Our own record frees come through the core's hook too. */
	if (in_tracker)
		return;
	/* The interesting call site is the program's free, two frames up
	 * (core free -> hook); frame addresses beyond the immediate caller
	 * are unreliable without frame pointers, so report the hook's caller. */
	check_free(addr, size, CALLER());
}

SHEAF_API void sheaf_debug_check_no_obj_freed(const void *addr, size_t size)
{
	if (!__atomic_load_n(&tracking, __ATOMIC_ACQUIRE) || in_tracker)
		return;
	check_free(addr, size, CALLER());
}

/* ---- Pool control and statistics ------------------------------------------ */

SHEAF_API int sheaf_debug_objects_set_pool(enum sheaf_debug_pool_mode m)
{
	if (m != SHEAF_DEBUG_POOL_BATCHED && m != SHEAF_DEBUG_POOL_SINGLE)
		return -EINVAL;
	pthread_once(&init_once, tracker_init);
	if (__atomic_load_n(&pool_started, __ATOMIC_RELAXED) || GET(cache_allocs))
		return (int)m == pool_mode ? 0 : -EBUSY;
	pool_mode = m;
	return 0;
}

SHEAF_API void sheaf_debug_objects_shrink(void)
{
	if (!tracker_ready())
		return;
	/* The calling thread's pool goes back first, so that it can be freed. */
	struct pcpool *p = &tl_pool;
	while (pool_mode == SHEAF_DEBUG_POOL_BATCHED && p->cnt)
		park_batch(pcp_take_group(p));
	for (;;) {
		struct dobj *b = NULL;
		pthread_mutex_lock(&pool.lock);
		if (pool.to_free.head) {
			b = pool_mode == SHEAF_DEBUG_POOL_SINGLE ? NULL : stack_pop_batch(&pool.to_free);
		} else if (pool.global.cnt > POOL_MIN) {
			if (pool_mode == SHEAF_DEBUG_POOL_SINGLE) {
				b = pool.global.head;
				pool.global.head = b->next;
				cnt_set(&pool.global.cnt, pool.global.cnt - 1);
				b->next = NULL;
			} else if (pool.global.cnt - pool.global.head->batch_cnt >= POOL_MIN) {
				b = stack_pop_batch(&pool.global);
			}
		}
		pthread_mutex_unlock(&pool.lock);
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
	pthread_once(&init_once, tracker_init);
	memset(&s, 0, sizeof(s));
	s.size = (uint32_t)size;
	s.version = SHEAF_DEBUG_OBJECTS_STATS_VERSION;
	s.pool_mode = (uint32_t)pool_mode;
	s.enabled = enabled;
	pthread_mutex_lock(&pool.lock);
	s.pool_global = pool.global.cnt;
	s.pool_to_free = pool.to_free.cnt;
	s.pool_min_free = pool.min_global == ~0ul ? pool.global.cnt : pool.min_global;
	pthread_mutex_unlock(&pool.lock);
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
	struct sheaf_debug_objects_stats s = { .size = sizeof(s) };
	sheaf_debug_objects_stats_get(&s);
#define P(name, v) fprintf(f, "%-20s: %" PRIu64 "\n", name, (uint64_t)(v))
	fprintf(f, "%-20s: %s\n", "pool_mode", s.pool_mode == SHEAF_DEBUG_POOL_SINGLE ? "single" : "batched");
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

/* ---- Self-test (debug builds) --------------------------------------------- */

/* Fix-ups in the style of a timer: stop the object, then redo the operation. */
static bool st_fix_init(void *addr, enum sheaf_debug_state found)
{
	if (found != SHEAF_DEBUG_STATE_ACTIVE)
		return false;
	sheaf_debug_object_deactivate(addr, &selftest_descr);
	sheaf_debug_object_init(addr, &selftest_descr);
	st_fixed++;
	return true;
}
static bool st_fix_destroy(void *addr, enum sheaf_debug_state found)
{
	if (found != SHEAF_DEBUG_STATE_ACTIVE)
		return false;
	sheaf_debug_object_deactivate(addr, &selftest_descr);
	sheaf_debug_object_destroy(addr, &selftest_descr);
	st_fixed++;
	return true;
}
static bool st_fix_free(void *addr, enum sheaf_debug_state found)
{
	if (found != SHEAF_DEBUG_STATE_ACTIVE)
		return false;
	sheaf_debug_object_deactivate(addr, &selftest_descr);
	sheaf_debug_object_free(addr, &selftest_descr);
	st_fixed++;
	return true;
}
static bool st_fix_activate(void *addr, enum sheaf_debug_state found)
{
	return false; /* an active object stays active: the caller gets -EINVAL */
}

static const struct sheaf_debug_obj_descr selftest_descr = {
	.name = "selftest",
	.fixup_init = st_fix_init,
	.fixup_activate = st_fix_activate,
	.fixup_destroy = st_fix_destroy,
	.fixup_free = st_fix_free,
};

static long st_obj[4];

static bool st_check(int step, enum sheaf_debug_state want, unsigned long wwant, unsigned long fwant)
{
	enum sheaf_debug_state got = sheaf_debug_object_state(st_obj);
	unsigned long w = __atomic_load_n(&st_warned, __ATOMIC_RELAXED), f = st_fixed;
	if (got == want && w == wwant && f == fwant)
		return true;
	char buf[200];
	size_t n = sheaf_fmt(buf, sizeof(buf),
			     "sheaf: debug-objects: self-test failed at step %d: state %s (want %s), "
			     "warnings %lu (want %lu), fixups %lu (want %lu)\n",
			     step, sheaf_debug_state_name(got), sheaf_debug_state_name(want), w, wwant, f,
			     fwant);
	sheaf_report_write(buf, n);
	return false;
}

static void selftest_once(void)
{
	int zero = 0;
	if (!__atomic_compare_exchange_n(&selftest_state, &zero, 1, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return; /* another thread runs it; nothing depends on waiting */
	void *o = st_obj;
	const struct sheaf_debug_obj_descr *d = &selftest_descr;
	bool ok = true;
	sheaf_debug_object_init(o, d);
	ok = ok && st_check(1, SHEAF_DEBUG_STATE_INIT, 0, 0);
	ok = ok && sheaf_debug_object_activate(o, d) == 0;
	ok = ok && st_check(2, SHEAF_DEBUG_STATE_ACTIVE, 0, 0);
	ok = ok && sheaf_debug_object_activate(o, d) == -EINVAL; /* active twice */
	ok = ok && st_check(3, SHEAF_DEBUG_STATE_ACTIVE, 1, 0);
	sheaf_debug_object_init(o, d); /* init while active: fixed */
	ok = ok && st_check(4, SHEAF_DEBUG_STATE_INIT, 2, 1);
	sheaf_debug_object_activate(o, d);
	sheaf_debug_object_destroy(o, d); /* destroy while active: fixed */
	ok = ok && st_check(5, SHEAF_DEBUG_STATE_DESTROYED, 3, 2);
	ok = ok && sheaf_debug_object_activate(o, d) == -EINVAL; /* after destroy */
	ok = ok && st_check(6, SHEAF_DEBUG_STATE_DESTROYED, 4, 2);
	sheaf_debug_object_free(o, d);
	ok = ok && st_check(7, SHEAF_DEBUG_STATE_NONE, 4, 2);
	sheaf_debug_object_init(o, d);
	sheaf_debug_object_activate(o, d);
	sheaf_debug_object_free(o, d); /* free while active: fixed */
	ok = ok && st_check(8, SHEAF_DEBUG_STATE_NONE, 5, 3);
	sheaf_debug_object_init(o, d);
	sheaf_debug_object_activate(o, d);
	check_free(st_obj, sizeof(st_obj), NULL); /* memory freed under it: fixed */
	ok = ok && st_check(9, SHEAF_DEBUG_STATE_NONE, 6, 4);
	sheaf_debug_object_deactivate(o, d); /* untracked */
	ok = ok && st_check(10, SHEAF_DEBUG_STATE_NONE, 7, 4);
	/* The self-test's fix-ups are not the program's (its warnings never
	 * reached the counters). */
	SUB(fixups, st_fixed);
	__atomic_store_n(&selftest_state, 2, __ATOMIC_RELEASE);
	if (!ok)
		abort(); /* a debug build whose tracker is broken must not go on */
}
