/* SPDX-License-Identifier: MIT */
/*
 * debug_impl.h - what the files of the debug-objects tracker share (private to
 * src/debug/; debug_objects.c explains the design): records, buckets, pools and the
 * tracker's counters.
 */
#ifndef SHEAF_DEBUG_IMPL_H
#define SHEAF_DEBUG_IMPL_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "debug/debug.h"
#include "sheaf_debug.h"

/* Buckets are keyed by 256-byte chunks: small enough that the records of
 * densely packed small objects do not pile up in one chain (a 4 KiB page of
 * 32-byte objects would be one chain of 128), large enough that checking a
 * freed object visits one or two buckets. */
#define HASH_BITS   13
#define HASH_SIZE   (1u << HASH_BITS)
#define CHUNK_SHIFT 8

/* Batch size: a power of two, so that "count % BATCH" is a mask (seed 002). */
#define BATCH              16u
#define PCPU_MAX           (4 * BATCH)    /* per-thread pool: 4 batches */
#define POOL_MIN           (16 * BATCH)   /* global pool refill level: 256 */
#define POOL_CRIT          (POOL_MIN / 2) /* below this every thread may refill */
#define POOL_MAX           (64 * BATCH)   /* global pool size before overflow: 1024 */
#define FREE_HZ            10             /* free work runs at most 10 times a second, */
#define FREE_MAX           1024u          /* giving back at most 1024 records a run */
#define EWMA_PERIOD_NS     10000000ull    /* usage sampled every 10 ms */
#define EWMA_SHIFT         3              /* alpha = 1/8 */
#define EWMA_FRAC          4              /* fixed point: 4 fraction bits */
#define REPORT_BURST       10             /* reports printed before rate limiting, */
#define REPORT_INTERVAL_NS 1000000000ull  /* then one per second */

/* Set (never cleared) when the first object is tracked; see check_free. */
extern bool dobj_tracking;

struct dobj {
	struct dobj *next;       /* hash chain, or pool list */
	struct dobj *batch_last; /* in a pool: the last record of this batch */
	void *addr;
	const struct sheaf_debug_obj_descr *descr;
	const void *site;   /* caller of the last state change */
	uint32_t batch_cnt; /* in a pool, first of a batch: its length */
	uint8_t state;      /* enum sheaf_debug_state */
};

/* Bucket locks are small spinlocks, as the kernel's raw spinlocks: the
 * critical sections are a short chain walk, fork_prepare can take all 8192
 * of them (ThreadSanitizer's deadlock detector cannot track that many
 * pthread mutexes held at once), and a bucket is 16 bytes.  A waiter yields
 * after a few hundred spins, so a preempted holder costs a time slice, not
 * a busy CPU. */
struct bucket {
	int lock;          /* 0 free, 1 held */
	struct dobj *head; /* Protected by lock. */
};

/* A stack of batches.  Protected by pool.lock. */
struct batch_stack {
	struct dobj *head;
	unsigned long cnt; /* records, not batches */
};

struct pcpool {
	struct dobj *head;
	unsigned int cnt;
	unsigned int ops; /* operations since the last EWMA check */
	bool registered;  /* thread-exit destructor armed */
};

extern struct bucket dobj_buckets[HASH_SIZE]; /* zero: unlocked and empty, untouched until used */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
}

static inline void bucket_lock(struct bucket *b)
{
	sheaf_witness_acquire(SHEAF_LOCK_DOBJ_BUCKET);
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

static inline void bucket_unlock(struct bucket *b)
{
	__atomic_store_n(&b->lock, 0, __ATOMIC_RELEASE);
	sheaf_witness_release(SHEAF_LOCK_DOBJ_BUCKET);
}

struct dobj_pool {
	pthread_mutex_t lock;
	struct batch_stack global; /* single mode: a plain list of records */
	struct batch_stack to_free;
	unsigned long min_global; /* low-water mark of global.cnt */
};
extern struct dobj_pool dobj_pool;

extern __thread struct pcpool dobj_tl_pool;
extern __thread int dobj_in_tracker; /* >0 while calling the backing cache */

extern struct sheaf_cache *dobj_backing;
extern pthread_key_t dobj_exit_key;
extern pthread_once_t dobj_init_once;
extern bool dobj_enabled; /* written once under init_once */
extern int dobj_pool_mode;
extern bool dobj_pool_started; /* a record was allocated: mode is fixed */

/* Counters: relaxed atomics, summed on read. */
struct dobj_counters {
	unsigned long in_use, max_in_use;
	unsigned long cache_allocs, cache_frees;
	unsigned long refills, refills_skipped, batches_moved;
	unsigned long warnings, suppressed, fixups;
	unsigned long avg_fp;         /* EWMA of in_use, EWMA_FRAC fraction bits */
	unsigned long long ewma_next; /* next sample time (ns) */
	unsigned long long work_next; /* next free work time (ns) */
	int refilling;                /* threads refilling from the cache */
	int working;                  /* the free work is running */
};
extern struct dobj_counters dobj_st;

#define ADD(field, n) __atomic_fetch_add(&dobj_st.field, (n), __ATOMIC_RELAXED)
#define SUB(field, n) __atomic_fetch_sub(&dobj_st.field, (n), __ATOMIC_RELAXED)
#define GET(field)    __atomic_load_n(&dobj_st.field, __ATOMIC_RELAXED)

static inline unsigned long long dobj_now_ns(void)
{
	struct timespec ts;
	/* The coarse clock is a vDSO read without a fence; 4 ms resolution is
	 * plenty for a 10 Hz throttle and a 10 ms EWMA period. */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

struct snapshot {
	const void *addr;
	const struct sheaf_debug_obj_descr *descr;
	const void *site;
	enum sheaf_debug_state state;
};

/* Shared between debug_objects.c, pool.c and hooks.c. */
void dobj_tracker_init(void); /* once, through dobj_init_once */
bool dobj_tracker_ready(void);
struct bucket *dobj_bucket_of(const void *addr);
struct dobj *dobj_lookup_locked(struct bucket *b, const void *addr);
void dobj_unlink_locked(struct bucket *b, struct dobj *o);
struct dobj *dobj_lookup_or_alloc(struct bucket *b, void *addr,
				  const struct sheaf_debug_obj_descr *d, const void *site);
void dobj_snap(struct snapshot *s, const struct dobj *o);
void dobj_report_bt(const char *op, const struct snapshot *s, const void *caller, void *const *bt,
		    int nbt);
void dobj_report(const char *op, const struct snapshot *s, const void *caller);
bool dobj_fixup(bool (*fn)(void *, enum sheaf_debug_state), void *addr,
		enum sheaf_debug_state state);
void dobj_start_tracking(void);
void dobj_thread_exit(void *arg);
void dobj_fill_pool(void);
void dobj_note_in_use(void);
struct dobj *dobj_rec_alloc(void);
struct dobj *dobj_backing_alloc_one(void);
void dobj_rec_put_locked(struct dobj *o);
void dobj_rec_free(struct dobj *o);
void dobj_housekeeping(void);
void dobj_check_free(const void *addr, size_t size, const void *caller);

#endif /* SHEAF_DEBUG_IMPL_H */
