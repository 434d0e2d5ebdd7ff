/* SPDX-License-Identifier: MIT */
/*
 * sheaf_debug.h - debug objects: life-cycle tracking of program-defined
 * objects (docs/debugging.md), after the Linux kernel's debugobjects.
 *
 * A program describes each kind of object it wants tracked (timers, work
 * items, requests) with a struct sheaf_debug_obj_descr and calls the
 * sheaf_debug_object_*() hooks at the points of the object's life:
 *
 *     none --init--> init --activate--> active --deactivate--> inactive
 *                      ^                  ^                       |
 *                      |                  +-------activate--------+
 *     init / inactive --destroy--> destroyed --free--> freed (record gone)
 *
 * A call that does not fit the object's state (activating a destroyed
 * object, freeing an active one, initialising an active one, deactivating an
 * object never initialised) prints one report on stderr naming the type,
 * the address, the state and the caller, counts a warning, and calls the
 * type's fix-up callback for that operation, if any.  A fix-up returns true
 * when it repaired the object (for instance by stopping a timer and
 * deactivating it); those are counted as fixups.  Reports are rate-limited:
 * a burst of 10, then at most one per second, with the number suppressed.
 * The tracker never aborts the program.
 *
 * Freeing memory through Sheaf (sheaf_cache_free, sheaf_free) that still
 * holds an active tracked object is reported the same way ("free" on an
 * active object); memory freed by other means can be checked with
 * sheaf_debug_check_no_obj_freed().
 *
 * Tracking records come from a private Sheaf cache ("debug-objects"), never
 * from a cache under test, through a pool that moves them in batches of 16
 * (per-thread pools in front of a global stack of batches) and returns them
 * to the cache throttled by an EWMA of use (seed 002).  SHEAF_DEBUG_OBJECTS_POOL
 * =single (or sheaf_debug_objects_set_pool()) selects a one-record-at-a-time
 * pool instead, for comparison only.  SHEAF_DEBUG_OBJECTS=0 turns every hook
 * into a no-op.
 *
 * All functions are thread-safe.  A type's callbacks run without any tracker
 * lock held, so they may call the hooks themselves.
 */
#ifndef SHEAF_DEBUG_H
#define SHEAF_DEBUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "sheaf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* States of a tracked object; sheaf_debug_state_name() gives their names. */
enum sheaf_debug_state {
	SHEAF_DEBUG_STATE_NONE = 0,     /* not tracked */
	SHEAF_DEBUG_STATE_INIT,         /* initialised, never activated */
	SHEAF_DEBUG_STATE_INACTIVE,     /* deactivated; may be activated again */
	SHEAF_DEBUG_STATE_ACTIVE,       /* in use: must not be freed or re-initialised */
	SHEAF_DEBUG_STATE_DESTROYED,    /* destroyed: only free is allowed */
	SHEAF_DEBUG_STATE_FREED,        /* set as the record is released: never reported, and
					 * sheaf_debug_object_state() then gives NONE */
	SHEAF_DEBUG_STATE_NOTAVAILABLE, /* an operation found no record for the address */
	SHEAF_DEBUG_STATE_NR
};

/* Per-type descriptor.  Every callback is optional (NULL).  A fix-up gets the
 * object's address and the state the tracker found, and returns true if it
 * repaired the object.  The descriptor must outlive every object of its type. */
struct sheaf_debug_obj_descr {
	const char *name;
	/* A pointer printed with reports (for instance a timer's callback), so
	 * that the report says whose object it is. */
	const void *(*debug_hint)(const void *addr);
	/* True if @addr is a statically initialised object: activate and
	 * assert_init then start tracking it instead of reporting. */
	bool (*is_static_object)(const void *addr);
	bool (*fixup_init)(void *addr, enum sheaf_debug_state state);
	bool (*fixup_activate)(void *addr, enum sheaf_debug_state state);
	bool (*fixup_destroy)(void *addr, enum sheaf_debug_state state);
	bool (*fixup_free)(void *addr, enum sheaf_debug_state state);
	bool (*fixup_assert_init)(void *addr, enum sheaf_debug_state state);
};

/* The life-cycle hooks.  activate returns 0, or -EINVAL when the object could
 * not be activated (reported; fixed up when the fix-up returned true, in
 * which case 0). */
SHEAF_API void sheaf_debug_object_init(void *addr, const struct sheaf_debug_obj_descr *d);
SHEAF_API int sheaf_debug_object_activate(void *addr, const struct sheaf_debug_obj_descr *d);
SHEAF_API void sheaf_debug_object_deactivate(void *addr, const struct sheaf_debug_obj_descr *d);
SHEAF_API void sheaf_debug_object_destroy(void *addr, const struct sheaf_debug_obj_descr *d);
SHEAF_API void sheaf_debug_object_free(void *addr, const struct sheaf_debug_obj_descr *d);
SHEAF_API void sheaf_debug_object_assert_init(void *addr, const struct sheaf_debug_obj_descr *d);

/* The state the tracker holds for @addr (NONE when untracked). */
SHEAF_API enum sheaf_debug_state sheaf_debug_object_state(const void *addr);
SHEAF_API const char *sheaf_debug_state_name(enum sheaf_debug_state s);

/* Report every active object in [addr, addr + size) and stop tracking every
 * object there: call it before freeing memory that Sheaf did not hand out.
 * Sheaf's own frees do this by themselves while any object is tracked. */
SHEAF_API void sheaf_debug_check_no_obj_freed(const void *addr, size_t size);

/* Record pool (seed 002).  Must be chosen before the first object is tracked;
 * returns 0, -EINVAL or -EBUSY.  Environment: SHEAF_DEBUG_OBJECTS_POOL=batched
 * (default) or single. */
enum sheaf_debug_pool_mode {
	SHEAF_DEBUG_POOL_BATCHED = 0, /* per-thread pools + global stack of batches + EWMA */
	SHEAF_DEBUG_POOL_SINGLE,      /* one global list, records moved one at a time */
};
SHEAF_API int sheaf_debug_objects_set_pool(enum sheaf_debug_pool_mode m);

/* Give records that the pool holds beyond its minimum back to the backing
 * cache now, ignoring the EWMA throttle (for tests and tools). */
SHEAF_API void sheaf_debug_objects_shrink(void);

#define SHEAF_DEBUG_OBJECTS_STATS_VERSION 1

struct sheaf_debug_objects_stats {
	uint32_t size;               /* set by the caller to sizeof; 0 = the library's */
	uint32_t version;            /* SHEAF_DEBUG_OBJECTS_STATS_VERSION */
	uint32_t pool_mode;          /* enum sheaf_debug_pool_mode */
	uint32_t enabled;            /* 0 after SHEAF_DEBUG_OBJECTS=0 */
	uint64_t objs_in_use;        /* records tracking an object now */
	uint64_t objs_max_in_use;    /* high-water mark of objs_in_use */
	uint64_t pool_global;        /* free records in the global pool */
	uint64_t pool_to_free;       /* free records waiting to go back to the cache */
	uint64_t pool_percpu;        /* free records in per-thread pools */
	uint64_t pool_min_free;      /* low-water mark of pool_global */
	uint64_t cache_allocs;       /* records taken from the backing cache */
	uint64_t cache_frees;        /* records given back to the backing cache */
	uint64_t refills;            /* pool refills from the backing cache */
	uint64_t refills_skipped;    /* refills left to a concurrent refiller (not critical) */
	uint64_t batches_moved;      /* batch moves between the pools */
	uint64_t avg_usage;          /* EWMA of objs_in_use, sampled every 10 ms */
	uint64_t warnings;           /* reports (printed or suppressed) */
	uint64_t reports_suppressed; /* reports not printed by the rate limit */
	uint64_t fixups;             /* fix-up callbacks that returned true */
	uint64_t reserved[8];
};

/* Fill *st.  Returns 0, or -EINVAL for a bad size. */
SHEAF_API int sheaf_debug_objects_stats_get(struct sheaf_debug_objects_stats *st);
/* Aligned "name : value" lines; a NULL @f prints nothing. */
SHEAF_API void sheaf_debug_objects_stats_print(FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* SHEAF_DEBUG_H */
