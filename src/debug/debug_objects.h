/* SPDX-License-Identifier: MIT */
/*
 * debug_objects.h - the core's view of the debug-objects tracker (docs/debugging.md).
 *
 * The public API is include/sheaf_debug.h.  When the program tracks its first
 * object, the tracker installs sheaf_debug_objects_check_free() in the core's
 * sheaf_free_check_hook (internal.h), so that every free of Sheaf memory
 * reports active tracked objects inside it (the kernel's
 * debug_check_no_obj_freed()); until then the core pays one load of a NULL
 * pointer per free, and nothing at all on the per-CPU fast path.
 */
#ifndef SHEAF_DEBUG_OBJECTS_H
#define SHEAF_DEBUG_OBJECTS_H

#include <stddef.h>

/* Report every active tracked object in [addr, addr + size) ("free" on an
 * active object, then its fixup_free), and stop tracking every object there.
 * Takes bucket locks: must not be called with a tracker lock held.  Frees of
 * the tracker's own records are ignored. */
void sheaf_debug_objects_check_free(const void *addr, size_t size);

#endif /* SHEAF_DEBUG_OBJECTS_H */
