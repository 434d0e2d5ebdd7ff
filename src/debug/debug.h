/* SPDX-License-Identifier: MIT */
/*
 * debug/debug.h - the debug layer's interface (layer 8 of src/README.md).
 *
 * Owns: the debug-objects tracker (public API include/sheaf_debug.h): object states
 * and their hash, reports and fixups, initialisation and the self-test
 * (debug_objects.c), the state changes and the check of every free (hooks.c), the
 * record pool that moves records in batches and throttles its frees (pool.c); they
 * share debug_impl.h (docs/debugging.md).
 *
 * May call: cache/ (its records are objects of an ordinary cache) and everything
 * below; it reaches into frees through sheaf_free_check_hook_set (percpu/).
 *
 * The public API is include/sheaf_debug.h.  When the program tracks its first
 * object, the tracker installs sheaf_debug_objects_check_free() in the core's
 * sheaf_free_check_hook (percpu/percpu.h), so that every free of Sheaf memory
 * reports active tracked objects inside it (the kernel's
 * debug_check_no_obj_freed()); until then the core pays one load of a NULL
 * pointer per free, and nothing at all on the per-CPU fast path.
 */
#ifndef SHEAF_LAYER_DEBUG_H
#define SHEAF_LAYER_DEBUG_H

#include "cache/cache.h"

/* Report every active tracked object in [addr, addr + size) ("free" on an
 * active object, then its fixup_free), and stop tracking every object there.
 * Takes bucket locks: must not be called with a tracker lock held.  Frees of
 * the tracker's own records are ignored. */
void sheaf_debug_objects_check_free(const void *addr, size_t size);

#endif /* SHEAF_LAYER_DEBUG_H */
