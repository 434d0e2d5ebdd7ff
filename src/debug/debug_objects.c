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
 * tracker (dobj_in_tracker), so the core's free hook cannot recurse into us.
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

#include "debug/debug_impl.h"

bool dobj_tracking;
struct bucket dobj_buckets[HASH_SIZE];
struct dobj_pool dobj_pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .min_global = ~0ul };
__thread struct pcpool dobj_tl_pool;
__thread int dobj_in_tracker;
struct sheaf_cache *dobj_backing;
pthread_key_t dobj_exit_key;
pthread_once_t dobj_init_once = PTHREAD_ONCE_INIT;
bool dobj_enabled = true;
int dobj_pool_mode = SHEAF_DEBUG_POOL_BATCHED;
bool dobj_pool_started;
struct dobj_counters dobj_st;

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

/* ---- Initialisation ------------------------------------------------------- */

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork (design §7): no tracker lock may be held across it, or the child would
 * hang on its first hook.  Ranks DOBJ_REPORT, DOBJ_BUCKET and DOBJ_POOL of the core's
 * lock table (base/lock.h): the report lock (never held with another), every bucket,
 * then the pool -- the lock order of the hooks. */
static void fork_take_report(void)
{
	sheaf_mutex_lock(&report_lock, SHEAF_LOCK_DOBJ_REPORT);
}

static void fork_release_report(bool child)
{
	(void)child;
	sheaf_mutex_unlock(&report_lock, SHEAF_LOCK_DOBJ_REPORT);
}

static void fork_take_buckets(void)
{
	for (unsigned int i = 0; i < HASH_SIZE; i++)
		bucket_lock(&dobj_buckets[i]);
}

static void fork_release_buckets(bool child)
{
	(void)child;
	for (unsigned int i = HASH_SIZE; i-- > 0;)
		bucket_unlock(&dobj_buckets[i]);
}

static void fork_take_pool(void)
{
	sheaf_mutex_lock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
}

static void fork_release_pool(bool child)
{
	sheaf_mutex_unlock(&dobj_pool.lock, SHEAF_LOCK_DOBJ_POOL);
	if (child) {
		/* Threads that were refilling or running the free work are gone; the
		 * records in their per-thread pools are lost to the child (counted as
		 * pool_percpu). */
		__atomic_store_n(&dobj_st.refilling, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&dobj_st.working, 0, __ATOMIC_RELAXED);
	}
}

static int fork_register(void)
{
	static const struct sheaf_fork_ops report = { fork_take_report, fork_release_report };
	static const struct sheaf_fork_ops bucket = { fork_take_buckets, fork_release_buckets };
	static const struct sheaf_fork_ops pl = { fork_take_pool, fork_release_pool };
	sheaf_fork_register(SHEAF_LOCK_DOBJ_REPORT, &report);
	sheaf_fork_register(SHEAF_LOCK_DOBJ_BUCKET, &bucket);
	sheaf_fork_register(SHEAF_LOCK_DOBJ_POOL, &pl);
	return sheaf_fork_handlers_install();
}

void dobj_tracker_init(void)
{
	/* Options come from the one table (options.c, docs/options.md). */
	if (sheaf_ensure_init() != 0 || !sheaf_option_long(SHEAF_OPT_DEBUG_OBJECTS))
		dobj_enabled = false;
	if (!strcmp(sheaf_option_str(SHEAF_OPT_DEBUG_OBJECTS_POOL), "single") && !dobj_pool_started)
		dobj_pool_mode = SHEAF_DEBUG_POOL_SINGLE;
	if (pthread_key_create(&dobj_exit_key, dobj_thread_exit) != 0 || fork_register() != 0)
		dobj_enabled = false;
	if (!dobj_enabled)
		return;
	dobj_in_tracker++;
	dobj_backing = sheaf_cache_create("debug-objects", sizeof(struct dobj), NULL);
	/* glibc's backtrace() loads libgcc_s and allocates on first use; the
	 * check_free report uses it inside the core's free path. */
	void *prime[2];
	backtrace(prime, 2);
	dobj_in_tracker--;
	if (!dobj_backing) {
		static const char msg[] = "sheaf: debug-objects: cannot create the record cache; "
					  "tracking disabled\n";
		if (write(2, msg, sizeof(msg) - 1) < 0) {
			/* nothing more we can do */
		}
		dobj_enabled = false;
	}
}

static void selftest_once(void);
static int selftest_state; /* 0 not run, 1 running, 2 done */

bool dobj_tracker_ready(void)
{
	pthread_once(&dobj_init_once, dobj_tracker_init);
	/* Debug builds check the state machine and every fix-up path once
	 * before the first real object (as the kernel's selftest does), so a broken
	 * transition fails at start-up rather than in the middle of a report. */
	if (sheaf_config_debug && dobj_enabled &&
	    sheaf_unlikely(__atomic_load_n(&selftest_state, __ATOMIC_ACQUIRE) == 0))
		selftest_once();
	return dobj_enabled;
}

/* ---- Buckets -------------------------------------------------------------- */

struct bucket *dobj_bucket_of(const void *addr)
{
	uint64_t chunk = (uint64_t)(uintptr_t)addr >> CHUNK_SHIFT;
	return &dobj_buckets[(chunk * 0x9E3779B97F4A7C15ull) >> (64 - HASH_BITS)];
}

struct dobj *dobj_lookup_locked(struct bucket *b, const void *addr)
{
	for (struct dobj *o = b->head; o; o = o->next)
		if (o->addr == addr)
			return o;
	return NULL;
}

void dobj_unlink_locked(struct bucket *b, struct dobj *o)
{
	struct dobj **pp = &b->head;
	while (*pp != o)
		pp = &(*pp)->next;
	*pp = o->next;
}

/* From now on every free of Sheaf memory is checked.  Release: a free hook
 * that sees the pointer also sees the tracker initialised. */
void dobj_start_tracking(void)
{
	__atomic_store_n(&dobj_tracking, true, __ATOMIC_RELEASE);
	sheaf_free_check_hook_set(
		sheaf_debug_objects_check_free); /* also closes the per-CPU fast free */
}

/* Look up @addr's record, or start tracking it in state INIT.  Returns with
 * the bucket locked; NULL only when the backing cache has no memory. */
struct dobj *dobj_lookup_or_alloc(struct bucket *b, void *addr,
				  const struct sheaf_debug_obj_descr *d, const void *site)
{
	struct dobj *spare = NULL;
	dobj_fill_pool();
	/* Before the bucket lock: installing the hook takes the page heap's lock, which
	 * ranks before the tracker's (base/lock.h; the fork walk takes the heap first). */
	if (!__atomic_load_n(&dobj_tracking, __ATOMIC_RELAXED))
		dobj_start_tracking();
	for (;;) {
		bucket_lock(b);
		struct dobj *o = dobj_lookup_locked(b, addr);
		if (o) {
			if (spare)
				dobj_rec_put_locked(spare);
			return o;
		}
		if (spare) {
			o = spare;
			dobj_note_in_use();
		} else {
			o = dobj_rec_alloc();
		}
		if (o) {
			o->addr = addr;
			o->descr = d;
			o->site = site;
			o->state = SHEAF_DEBUG_STATE_INIT;
			o->next = b->head;
			b->head = o;
			return o;
		}
		bucket_unlock(b);
		/* The pools ran dry under us: one record from the cache, then
		 * look again (another thread may have tracked @addr meanwhile). */
		spare = dobj_backing_alloc_one();
		if (!spare) {
			bucket_lock(b);
			return NULL;
		}
	}
}

/* ---- Reports -------------------------------------------------------------- */

void dobj_snap(struct snapshot *s, const struct dobj *o)
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
	sheaf_mutex_lock(&report_lock, SHEAF_LOCK_DOBJ_REPORT);
	unsigned long long now = dobj_now_ns();
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
	sheaf_mutex_unlock(&report_lock, SHEAF_LOCK_DOBJ_REPORT);
	if (!ok)
		ADD(suppressed, 1);
	return ok;
}

/* "sheaf: debug-objects: <op> <state> object <addr> type <name> ..." */
static const struct sheaf_debug_obj_descr selftest_descr;
static unsigned long st_warned, st_fixed; /* the self-test's own counts */

void dobj_report_bt(const char *op, const struct snapshot *s, const void *caller, void *const *bt,
		    int nbt)
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
		n += sheaf_fmt(buf + n, sizeof(buf) - n, " (%lu reports suppressed so far)", supp);
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

void dobj_report(const char *op, const struct snapshot *s, const void *caller)
{
	dobj_report_bt(op, s, caller, NULL, 0);
}

bool dobj_fixup(bool (*fn)(void *, enum sheaf_debug_state), void *addr,
		enum sheaf_debug_state state)
{
	if (fn && fn(addr, state)) {
		ADD(fixups, 1);
		return true;
	}
	return false;
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

static bool st_check(int step, enum sheaf_debug_state want, unsigned long wwant,
		     unsigned long fwant)
{
	enum sheaf_debug_state got = sheaf_debug_object_state(st_obj);
	unsigned long w = __atomic_load_n(&st_warned, __ATOMIC_RELAXED), f = st_fixed;
	if (got == want && w == wwant && f == fwant)
		return true;
	char buf[200];
	size_t n =
		sheaf_fmt(buf, sizeof(buf),
			  "sheaf: debug-objects: self-test failed at step %d: state %s (want %s), "
			  "warnings %lu (want %lu), fixups %lu (want %lu)\n",
			  step, sheaf_debug_state_name(got), sheaf_debug_state_name(want), w, wwant,
			  f, fwant);
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
	dobj_check_free(st_obj, sizeof(st_obj), NULL); /* memory freed under it: fixed */
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
