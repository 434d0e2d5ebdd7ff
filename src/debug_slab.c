/* SPDX-License-Identifier: MIT */
/*
 * debug_slab.c - debug caches (kernel slab_debug= semantics), first version.
 *
 * Slot layout of a debug cache: [object][state byte][pad to alignment].  The state
 * byte says whether the slot is allocated, so every double free is caught; free
 * objects are poisoned with 0x6b and checked on allocation when P is on.
 * (Red zones, store-user and the full report are added by the debug-caches work.)
 */
#include <string.h>

#include "internal.h"

#define ST_FREE  0xa5
#define ST_ALLOC 0x5a
#define POISON_FREE 0x6b

static inline unsigned char *state_of(struct sheaf_cache *c, void *obj)
{
	return (unsigned char *)obj - c->obj_offset + c->debug_offset;
}

void sheaf_debug_slab_layout(struct sheaf_cache *c)
{
	/* The free pointer moves after the object so that poison stays intact. */
	c->freeptr_offset = (uint32_t)SHEAF_ALIGN_UP(c->object_size, (size_t)2);
	c->debug_offset = c->freeptr_offset + 2;
	c->slot_size = SHEAF_ALIGN_UP((size_t)c->debug_offset + 1, c->align);
}

void sheaf_debug_slab_init(struct sheaf_cache *c, void *first_slot, unsigned nslots)
{
	for (unsigned i = 0; i < nslots; i++) {
		char *slot = (char *)first_slot + (size_t)i * c->slot_size;
		if (c->debug_flags & SHEAF_DEBUG_POISON)
			memset(slot + c->obj_offset, POISON_FREE, c->object_size);
		slot[c->debug_offset] = (char)ST_FREE;
	}
}

int sheaf_debug_slab_alloc(struct sheaf_cache *c, void *obj, const void *caller)
{
	(void)caller;
	unsigned char *st = state_of(c, obj);
	if (*st != ST_FREE) {
		sheaf_report_error(c, obj, "debug: allocating an object whose state byte is corrupt:");
		return 1;
	}
	if (c->debug_flags & SHEAF_DEBUG_POISON) {
		const unsigned char *p = obj;
		for (size_t i = 0; i < c->object_size; i++) {
			if (p[i] != POISON_FREE) {
				sheaf_report_error(c, obj, "debug: write after free at offset %zu of", i);
				return 1;
			}
		}
	}
	*st = ST_ALLOC;
	return 0;
}

int sheaf_debug_slab_free(struct sheaf_cache *c, void *obj, const void *caller)
{
	(void)caller;
	unsigned char *st = state_of(c, obj);
	if (*st == ST_FREE) {
		sheaf_report_error(c, obj, "double free of");
		return 1;
	}
	if (*st != ST_ALLOC) {
		sheaf_report_error(c, obj, "debug: freeing an object whose state byte is corrupt:");
		return 1;
	}
	*st = ST_FREE;
	if (c->debug_flags & SHEAF_DEBUG_POISON)
		memset(obj, POISON_FREE, c->object_size);
	return 0;
}

unsigned sheaf_debug_slab_flags_for(const char *name)
{
	const char *spec = sheaf_option_str(SHEAF_OPT_SLAB_DEBUG);
	if (!spec || !*spec)
		return 0;
	unsigned flags = 0;
	const char *p = spec;
	for (; *p && *p != ','; p++) {
		switch (*p) {
		case 'F': flags |= SHEAF_DEBUG_CONSISTENCY; break;
		case 'Z': flags |= SHEAF_DEBUG_REDZONE; break;
		case 'P': flags |= SHEAF_DEBUG_POISON; break;
		case 'U': flags |= SHEAF_DEBUG_STORE_USER; break;
		default: break;
		}
	}
	if (!*p)
		return flags; /* no names: every cache */
	size_t nl = strlen(name);
	while (*p == ',') {
		const char *q = ++p;
		while (*p && *p != ',')
			p++;
		if ((size_t)(p - q) == nl && !memcmp(q, name, nl))
			return flags;
	}
	return 0;
}
