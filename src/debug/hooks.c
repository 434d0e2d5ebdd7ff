/* SPDX-License-Identifier: MIT */
/*
 * hooks.c - the tracker's API: object state changes (init, activate, deactivate,
 * destroy, free, assert_init), their checks, reports and fixups, and the check of
 * every free of Sheaf memory (debug_objects.c has the design).
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

#include "debug/debug_impl.h"

/* ---- The hooks ------------------------------------------------------------ */

#define CALLER() __builtin_extract_return_addr(__builtin_return_address(0))

/* The record of @addr (NULL: none), its bucket locked in *@bp either way. */
static struct dobj *lookup_lock(const void *addr, struct bucket **bp)
{
	struct bucket *b = dobj_bucket_of(addr);
	bucket_lock(b);
	*bp = b;
	return dobj_lookup_locked(b, addr);
}

/* Report @op on the object of record @o: its state copied under @b's lock, the
 * report made after unlocking; returns that state (for the fix-up). */
static enum sheaf_debug_state report_unlock(struct bucket *b, const struct dobj *o, const char *op,
					    const void *caller)
{
	struct snapshot s;
	dobj_snap(&s, o);
	bucket_unlock(b);
	dobj_report(op, &s, caller);
	return s.state;
}

/* Report @op on an object the tracker has no record of; returns its state for the
 * fix-up (SHEAF_DEBUG_STATE_NOTAVAILABLE). */
static enum sheaf_debug_state report_untracked(void *addr, const struct sheaf_debug_obj_descr *d,
					       const char *op, const void *caller)
{
	struct snapshot s = { addr, d, NULL, SHEAF_DEBUG_STATE_NOTAVAILABLE };
	dobj_report(op, &s, caller);
	return s.state;
}

static void do_init(void *addr, const struct sheaf_debug_obj_descr *d, const void *caller)
{
	struct bucket *b = dobj_bucket_of(addr);
	struct dobj *o = dobj_lookup_or_alloc(b, addr, d, caller);
	if (!o) {
		bucket_unlock(b);
		/* No memory for a record: say so (counted, rate-limited); the
		 * object's later operations will report "not available". */
		(void)report_untracked(addr, d, "init (out of memory for a tracking record)",
				       caller);
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
		dobj_fixup(d->fixup_init, addr, report_unlock(b, o, "init", caller));
		break;
	default: /* destroyed */
		(void)report_unlock(b, o, "init", caller);
		break;
	}
	dobj_housekeeping();
}

SHEAF_API void sheaf_debug_object_init(void *addr, const struct sheaf_debug_obj_descr *d)
{
	if (!dobj_tracker_ready() || !addr || !d)
		return;
	do_init(addr, d, CALLER());
}

SHEAF_API int sheaf_debug_object_activate(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	if (!dobj_tracker_ready() || !addr || !d)
		return 0;
	struct bucket *b;
	struct dobj *o = lookup_lock(addr, &b);
	if (o) {
		switch (o->state) {
		case SHEAF_DEBUG_STATE_INIT:
		case SHEAF_DEBUG_STATE_INACTIVE:
			o->state = SHEAF_DEBUG_STATE_ACTIVE;
			o->site = caller;
			bucket_unlock(b);
			dobj_housekeeping();
			return 0;
		case SHEAF_DEBUG_STATE_ACTIVE:
			if (dobj_fixup(d->fixup_activate, addr,
				       report_unlock(b, o, "activate", caller)))
				return 0;
			return -EINVAL;
		default: /* destroyed: never activated again */
			(void)report_unlock(b, o, "activate", caller);
			return -EINVAL;
		}
	}
	bucket_unlock(b);
	/* Not tracked: a statically initialised object starts its tracking
	 * here; anything else is activated without ever being initialised. */
	if (d->is_static_object && d->is_static_object(addr)) {
		do_init(addr, d, caller);
		bucket_lock(b);
		o = dobj_lookup_locked(b, addr);
		if (o && o->state == SHEAF_DEBUG_STATE_INIT) {
			o->state = SHEAF_DEBUG_STATE_ACTIVE;
			o->site = caller;
		}
		bucket_unlock(b);
		return 0;
	}
	if (dobj_fixup(d->fixup_activate, addr, report_untracked(addr, d, "activate", caller)))
		return 0;
	return -EINVAL;
}

SHEAF_API void sheaf_debug_object_deactivate(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	if (!dobj_tracker_ready() || !addr || !d)
		return;
	struct bucket *b;
	struct dobj *o = lookup_lock(addr, &b);
	if (o) {
		switch (o->state) {
		case SHEAF_DEBUG_STATE_INIT:
		case SHEAF_DEBUG_STATE_INACTIVE:
		case SHEAF_DEBUG_STATE_ACTIVE:
			o->state = SHEAF_DEBUG_STATE_INACTIVE;
			o->site = caller;
			bucket_unlock(b);
			dobj_housekeeping();
			return;
		default:
			(void)report_unlock(b, o, "deactivate", caller);
			return;
		}
	}
	bucket_unlock(b);
	(void)report_untracked(addr, d, "deactivate", caller);
}

SHEAF_API void sheaf_debug_object_destroy(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	if (!dobj_tracker_ready() || !addr || !d)
		return;
	struct bucket *b;
	struct dobj *o = lookup_lock(addr, &b);
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
		dobj_housekeeping();
		return;
	case SHEAF_DEBUG_STATE_ACTIVE:
		dobj_fixup(d->fixup_destroy, addr, report_unlock(b, o, "destroy", caller));
		return;
	default:
		(void)report_unlock(b, o, "destroy", caller);
		return;
	}
}

SHEAF_API void sheaf_debug_object_free(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	if (!dobj_tracker_ready() || !addr || !d)
		return;
	struct bucket *b;
	struct dobj *o = lookup_lock(addr, &b);
	if (!o) {
		bucket_unlock(b);
		return;
	}
	if (o->state == SHEAF_DEBUG_STATE_ACTIVE) {
		dobj_fixup(d->fixup_free, addr, report_unlock(b, o, "free", caller));
		return;
	}
	o->state = SHEAF_DEBUG_STATE_FREED;
	dobj_unlink_locked(b, o);
	bucket_unlock(b);
	dobj_rec_free(o);
	dobj_housekeeping();
}

SHEAF_API void sheaf_debug_object_assert_init(void *addr, const struct sheaf_debug_obj_descr *d)
{
	const void *caller = CALLER();
	if (!dobj_tracker_ready() || !addr || !d)
		return;
	struct bucket *b;
	struct dobj *o = lookup_lock(addr, &b);
	bucket_unlock(b);
	if (o)
		return;
	if (d->is_static_object && d->is_static_object(addr)) {
		do_init(addr, d, caller);
		return;
	}
	dobj_fixup(d->fixup_assert_init, addr, report_untracked(addr, d, "assert_init", caller));
}

SHEAF_API enum sheaf_debug_state sheaf_debug_object_state(const void *addr)
{
	if (!dobj_tracker_ready() || !addr)
		return SHEAF_DEBUG_STATE_NONE;
	struct bucket *b;
	struct dobj *o = lookup_lock(addr, &b);
	enum sheaf_debug_state s = o ? (enum sheaf_debug_state)o->state : SHEAF_DEBUG_STATE_NONE;
	bucket_unlock(b);
	return s;
}

/* Walk one bucket for records in [lo, hi): report each active one and run its
 * fix-up (without the lock), then drop every record there -- also one a fix-up
 * left active: the memory is going away.  A reported object's record is dropped
 * as soon as its fix-up returns, so that the walk, started again, never reports
 * it twice; until 2026-11-29 a list of 16 reported addresses did that, and an
 * active object found after the 16th in one bucket (objects closer than 16 bytes,
 * or a large range whose chunks share a bucket) was dropped with no report and
 * no fix-up.  At most as many fix-ups run as the bucket held records in the range
 * when the first active one was found: a fix-up that tracks a new active object in the range (one
 * that re-arms its neighbour, whose fix-up re-arms it back) made the walk loop for
 * good until 2026-11-30; past that budget an active object is reported and dropped
 * without its fix-up. */
static unsigned int bucket_count_range(struct bucket *b, uintptr_t lo, uintptr_t hi)
{
	unsigned int n = 0;
	bucket_lock(b);
	for (struct dobj *o = b->head; o; o = o->next)
		n += (uintptr_t)o->addr >= lo && (uintptr_t)o->addr < hi;
	bucket_unlock(b);
	return n;
}

static void check_bucket(struct bucket *b, uintptr_t lo, uintptr_t hi, const void *caller)
{
	struct dobj *dead = NULL;
	long fixups = -1; /* counted at the first active object: most walks find none */
again:
	bucket_lock(b);
	for (struct dobj **pp = &b->head; *pp;) {
		struct dobj *o = *pp;
		uintptr_t a = (uintptr_t)o->addr;
		if (a < lo || a >= hi) {
			pp = &o->next;
			continue;
		}
		if (o->state == SHEAF_DEBUG_STATE_ACTIVE) {
			struct snapshot s;
			dobj_snap(&s, o);
			bucket_unlock(b);
			/* The program's frame is a few above the core's free path
			 * (@caller); backtrace() was primed at init. */
			void *bt[12];
			int nbt = backtrace(bt, 12), from = 0;
			for (int i = 0; i < nbt; i++)
				if (bt[i] == caller) {
					from = i + 1;
					break;
				}
			dobj_report_bt("free", &s, caller, bt + from, SHEAF_MIN(nbt - from, 5));
			/* The fix-up usually deactivates and frees the object; the
			 * bucket may have changed meanwhile: walk it again, without
			 * the object's record if the fix-up left one. */
			if (fixups < 0)
				fixups = bucket_count_range(b, lo, hi);
			if (s.descr && fixups > 0) {
				fixups--;
				dobj_fixup(s.descr->fixup_free, (void *)a, s.state);
			}
			bucket_lock(b);
			o = dobj_lookup_locked(b, (const void *)a);
			if (o) {
				dobj_unlink_locked(b, o);
				o->next = dead;
				dead = o;
			}
			bucket_unlock(b);
			goto again;
		}
		*pp = o->next;
		o->next = dead;
		dead = o;
	}
	bucket_unlock(b);
	while (dead) {
		struct dobj *next = dead->next;
		dobj_rec_free(dead);
		dead = next;
	}
}

void dobj_check_free(const void *addr, size_t size, const void *caller)
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
			check_bucket(&dobj_buckets[i], lo, hi, caller);
	} else {
		for (uintptr_t c = c0; c <= c1; c++)
			check_bucket(dobj_bucket_of((const void *)(c << CHUNK_SHIFT)), lo, hi,
				     caller);
	}
	dobj_housekeeping();
}

void sheaf_debug_objects_check_free(const void *addr, size_t size)
{
	/* Our own record frees come through the core's hook too. */
	if (dobj_in_tracker)
		return;
	/* The interesting call site is the program's free, two frames up
	 * (core free -> hook); frame addresses beyond the immediate caller
	 * are unreliable without frame pointers, so report the hook's caller. */
	dobj_check_free(addr, size, CALLER());
}

SHEAF_API void sheaf_debug_check_no_obj_freed(const void *addr, size_t size)
{
	if (!__atomic_load_n(&dobj_tracking, __ATOMIC_ACQUIRE) || dobj_in_tracker)
		return;
	dobj_check_free(addr, size, CALLER());
}
