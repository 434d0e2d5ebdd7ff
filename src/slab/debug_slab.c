/* SPDX-License-Identifier: MIT */
/*
 * debug_slab.c - debug caches: red zones, poisoning, store-user and
 * consistency checks, with the kernel's slab_debug= semantics
 * (docs/debugging.md; K§3).
 *
 * A cache is a debug cache when it is created with SHEAF_DEBUG_* flags or
 * its name is selected by the SLAB_DEBUG option:
 *
 *     SHEAF_SLAB_DEBUG="FZPU"                every cache
 *     SHEAF_SLAB_DEBUG="FZ,cache-a,req-*"    F and Z for cache-a and caches
 *                                            whose name starts with "req-"
 *     SHEAF_SLAB_DEBUG="FZ,a;P,b"            blocks separated by ';'
 *     SHEAF_SLAB_DEBUG=",a"  /  "-"          all flags for a  /  none
 *
 * F consistency checks, Z red zones, P poisoning, U store user (call site and
 * a short backtrace of the last allocation and free).  The tracker's record
 * cache ("debug-objects") and the internal metadata caches are never debug
 * caches: their records must not come from a cache under test (R11).
 *
 * Debug caches have no sheaves (K§3: capacity 0): every allocation and free
 * goes through the slab path, which calls the hooks below, so every object
 * is checked on every operation.  Slot layout (offsets from the slot start):
 *
 *   [left red zone][object (object_size)][right red zone][meta: state, link,
 *    alloc track, free track]
 *
 * The free-list link lives in the metadata, never in the object, so poison
 * covers the whole object and a write after free anywhere in it is caught
 * at the next allocation.  Patterns are the kernel's: 0x6b poison with 0xa5
 * in the last byte, red zones 0xbb while free and 0xcc while allocated.
 *
 * A hook that finds corruption prints one report (cache, object, what is
 * wrong and where, the bytes around it, the last allocation and free sites)
 * and, following SHEAF_ON_ERROR, aborts or returns nonzero so that the core
 * leaks the object.  The slab's free-list links are encoded by the core
 * (slab.c: hardened freelist, always on).
 */
#include <execinfo.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <dlfcn.h>

#include "slab/slab.h"

#define POISON_FREE  0x6b
#define POISON_END   0xa5
#define RED_INACTIVE 0xbb
#define RED_ACTIVE   0xcc
#define RZ_SIZE      16u /* bytes of red zone on each side (at least) */
#define BT_DEPTH     6   /* frames kept per track beyond the caller */

#define STATE_FREE  0x5fee5fee5fee5feeull /* slot on the free list */
#define STATE_ALLOC 0xa110ca7eda110ca7ull /* slot handed out */

struct track {
	const void *caller;       /* the core's caller: the program's call site */
	const void *bt[BT_DEPTH]; /* a short backtrace, innermost first */
	uint64_t when_ns;
	int32_t tid;
	int32_t cpu;
};

struct meta {
	uint64_t state; /* STATE_FREE / STATE_ALLOC */
	uint16_t link;  /* the core's free-list link (freeptr_offset) */
	uint16_t pad[3];
	struct track alloc, free; /* only with U */
};

#define META_SIZE_NOUSER offsetof(struct meta, alloc)

static inline struct meta *meta_of(const struct sheaf_cache *c, char *slot)
{
	return (struct meta *)(slot + c->debug_offset);
}

/* ---- Option parsing --------------------------------------------------------- */

static unsigned letters_to_flags(const char *s, size_t n)
{
	unsigned f = 0;
	if (n == 0)
		return SHEAF_DEBUG_ALL; /* kernel: no letters means every check */
	for (size_t i = 0; i < n; i++) {
		switch (s[i] | 0x20) {
		case 'f':
			f |= SHEAF_DEBUG_CONSISTENCY;
			break;
		case 'z':
			f |= SHEAF_DEBUG_REDZONE;
			break;
		case 'p':
			f |= SHEAF_DEBUG_POISON;
			break;
		case 'u':
			f |= SHEAF_DEBUG_STORE_USER;
			break;
		case 'a':
			f |= SHEAF_DEBUG_ALL;
			break;
		default: /* '-' and the kernel's letters we have no use for */
			break;
		}
	}
	return f;
}

static bool name_matches(const char *pat, size_t n, const char *name)
{
	if (n && pat[n - 1] == '*')
		return strncmp(pat, name, n - 1) == 0;
	return strlen(name) == n && strncmp(pat, name, n) == 0;
}

unsigned sheaf_debug_slab_flags_for(const char *name)
{
	const char *opt = sheaf_option_str(SHEAF_OPT_SLAB_DEBUG);
	unsigned flags = 0;
	if (!opt || !*opt || !name || !strcmp(name, "debug-objects"))
		return 0;
	/* Blocks "letters[,name...]" separated by ';'; a later block wins. */
	for (const char *blk = opt; *blk;) {
		const char *end = strchr(blk, ';');
		size_t blen = end ? (size_t)(end - blk) : strlen(blk);
		const char *comma = memchr(blk, ',', blen);
		size_t llen = comma ? (size_t)(comma - blk) : blen;
		unsigned f = letters_to_flags(blk, llen);
		if (!comma) {
			flags = f; /* letters only: every cache */
		} else {
			for (const char *p = comma + 1; p < blk + blen;) {
				const char *q = memchr(p, ',', (size_t)(blk + blen - p));
				size_t nlen = q ? (size_t)(q - p) : (size_t)(blk + blen - p);
				if (nlen && name_matches(p, nlen, name))
					flags = f;
				p += nlen + 1;
			}
		}
		blk += blen + (end ? 1 : 0);
	}
	return flags;
}

/* ---- Backtraces (store user) ---------------------------------------------------- */

static __thread int in_backtrace;

static void prime_backtrace(void)
{
	/* glibc's backtrace() loads libgcc_s and allocates on first use: do it
	 * once at cache creation, not inside an allocation. */
	void *buf[2];
	in_backtrace = 1;
	backtrace(buf, 2);
	in_backtrace = 0;
}

static void set_track(struct track *t, const void *caller)
{
	void *bt[BT_DEPTH + 3];
	int n = 0;
	memset(t, 0, sizeof(*t));
	t->caller = caller;
	if (!in_backtrace) {
		in_backtrace = 1;
		n = backtrace(bt, BT_DEPTH + 3);
		in_backtrace = 0;
	}
	/* Keep the frames beyond the program's call site (printed on its own);
	 * if inlining hid it, skip this function and the hook. */
	int from = 2;
	for (int i = 0; i < n; i++)
		if (bt[i] == caller) {
			from = i + 1;
			break;
		}
	for (int i = from, j = 0; i < n && j < BT_DEPTH; i++, j++)
		t->bt[j] = bt[i];
	t->when_ns = sheaf_os_now_ns();
	t->tid = (int32_t)syscall(SYS_gettid);
	t->cpu = sheaf_os_getcpu();
}

/* ---- Layout and slab initialisation --------------------------------------------- */

static pthread_once_t bt_once = PTHREAD_ONCE_INIT;

/* Slot size of @c's objects with debug flags @f (and the offsets, if @set). */
static size_t layout_for(struct sheaf_cache *c, unsigned f, bool set)
{
	size_t a = SHEAF_MAX(c->align, (size_t)8);
	size_t left = (f & SHEAF_DEBUG_REDZONE) ? SHEAF_ALIGN_UP((size_t)RZ_SIZE, a) : 0;
	size_t end = left + c->object_size;
	if (f & SHEAF_DEBUG_REDZONE)
		end += RZ_SIZE;
	size_t meta = SHEAF_ALIGN_UP(end, (size_t)8);
	size_t msize = (f & SHEAF_DEBUG_STORE_USER) ? sizeof(struct meta) : META_SIZE_NOUSER;
	size_t slot = SHEAF_ALIGN_UP(meta + msize, a);
	if (set) {
		c->obj_offset = (uint32_t)left;
		c->debug_offset = (uint32_t)meta;
		c->freeptr_offset = (uint32_t)(meta + offsetof(struct meta, link));
		c->slot_size = slot;
	}
	return slot;
}

void sheaf_debug_slab_layout(struct sheaf_cache *c)
{
	unsigned f = c->debug_flags & SHEAF_DEBUG_ALL;
	/* The kernel drops poisoning where object contents must survive a free:
	 * constructed objects and TYPESAFE_BY_RCU caches. */
	if (c->ctor || (c->flags & SHEAF_TYPESAFE_BY_RCU))
		f &= ~SHEAF_DEBUG_POISON;
	/* Any debug flag makes a debug cache (no sheaves, checked state word). */
	if (!f)
		f = SHEAF_DEBUG_CONSISTENCY;
	/* Objects near the largest slot size: give up the red zones, then the
	 * tracks, rather than fail the cache's creation; beyond that the cache
	 * stays a normal one (the core's layout is left as it is). */
	const size_t max_slot = SHEAF_PAGE_SIZE << SHEAF_MAX_ORDER;
	if (layout_for(c, f, false) > max_slot)
		f &= ~SHEAF_DEBUG_REDZONE;
	if (layout_for(c, f, false) > max_slot)
		f &= ~SHEAF_DEBUG_STORE_USER;
	if (layout_for(c, f, false) > max_slot) {
		c->debug_flags = 0;
		return;
	}
	c->debug_flags = f;
	layout_for(c, f, true);
	if (f & SHEAF_DEBUG_STORE_USER)
		pthread_once(&bt_once, prime_backtrace);
}

/* Red zone bytes of a slot: [0, obj_offset) and [obj_offset + size, debug_offset). */
static void set_redzones(const struct sheaf_cache *c, char *slot, int v)
{
	size_t obj_end = c->obj_offset + c->object_size;
	memset(slot, v, c->obj_offset);
	memset(slot + obj_end, v, c->debug_offset - obj_end);
}

static void poison_object(const struct sheaf_cache *c, char *obj)
{
	memset(obj, POISON_FREE, c->object_size - 1);
	obj[c->object_size - 1] = (char)POISON_END;
}

void sheaf_debug_slab_init(struct sheaf_cache *c, void *first_slot, unsigned nslots)
{
	unsigned f = c->debug_flags;
	for (unsigned i = 0; i < nslots; i++) {
		char *slot = (char *)first_slot + (size_t)i * c->slot_size;
		struct meta *m = meta_of(c, slot);
		if (f & SHEAF_DEBUG_REDZONE)
			set_redzones(c, slot, RED_INACTIVE);
		if (f & SHEAF_DEBUG_POISON)
			poison_object(c, slot + c->obj_offset);
		m->state = STATE_FREE;
		if (f & SHEAF_DEBUG_STORE_USER)
			memset(&m->alloc, 0, 2 * sizeof(struct track));
	}
}

/* ---- Reports ---------------------------------------------------------------------- */

struct rbuf {
	char b[3072];
	size_t n;
};

static void __attribute__((format(printf, 2, 3))) rb_add(struct rbuf *r, const char *fmt, ...)
{
	va_list ap;
	if (r->n >= sizeof(r->b) - 1)
		return;
	va_start(ap, fmt);
	int k = vsnprintf(r->b + r->n, sizeof(r->b) - r->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		r->n = SHEAF_MIN(r->n + (size_t)k, sizeof(r->b) - 1);
}

static void rb_site(struct rbuf *r, const void *pc)
{
	Dl_info info;
	memset(&info, 0, sizeof(info));
	if (pc && dladdr(pc, &info) && info.dli_sname)
		rb_add(r, "%p (%s+0x%zx)", pc, info.dli_sname,
		       (size_t)((const char *)pc - (const char *)info.dli_saddr));
	else if (pc && info.dli_fname)
		rb_add(r, "%p (%s+0x%zx)", pc, info.dli_fname,
		       (size_t)((const char *)pc - (const char *)info.dli_fbase));
	else
		rb_add(r, "%p", pc);
}

static void rb_track(struct rbuf *r, const char *what, const struct track *t)
{
	if (!t->caller && !t->when_ns) {
		rb_add(r, "sheaf:   %s: never\n", what);
		return;
	}
	uint64_t now = sheaf_os_now_ns();
	rb_add(r, "sheaf:   %s at ", what);
	rb_site(r, t->caller);
	rb_add(r, " thread %d cpu %d, %llu ms ago\n", t->tid, t->cpu,
	       (unsigned long long)((now - t->when_ns) / 1000000));
	for (int i = 0; i < BT_DEPTH && t->bt[i]; i++) {
		rb_add(r, "sheaf:     #%d ", i);
		rb_site(r, t->bt[i]);
		rb_add(r, "\n");
	}
}

static void rb_bytes(struct rbuf *r, const char *label, const unsigned char *p, size_t n)
{
	rb_add(r, "sheaf:   %s:", label);
	for (size_t i = 0; i < n; i++)
		rb_add(r, " %02x", p[i]);
	rb_add(r, "\n");
}

/* Print the report; returns 1 for the hook (leak the object) unless the
 * process aborts (SHEAF_ON_ERROR=abort, the default). */
static int report(const struct sheaf_cache *c, char *slot, enum sheaf_error_kind kind,
		  const char *what, long bad_off, const void *caller)
{
	struct rbuf r;
	char *obj = slot + c->obj_offset;
	const struct meta *m = meta_of(c, slot);
	/* The first line is every reporter's (base/error.h); the details follow. */
	r.n = sheaf_error_head(r.b, sizeof(r.b) - 1, kind, c->name, obj, "%s (size %zu, slot %p)",
			       what, c->object_size, (void *)slot);
	r.b[r.n++] = '\n';
	if (bad_off != LONG_MIN) {
		const unsigned char *b = (const unsigned char *)obj + bad_off;
		if (bad_off < 0)
			rb_add(&r, "sheaf:   first bad byte %ld bytes before the object: 0x%02x\n",
			       -bad_off, *b);
		else if ((size_t)bad_off >= c->object_size)
			rb_add(&r, "sheaf:   first bad byte %zu bytes after the object: 0x%02x\n",
			       (size_t)bad_off - c->object_size, *b);
		else
			rb_add(&r, "sheaf:   first bad byte at offset %ld: 0x%02x\n", bad_off, *b);
		long from = SHEAF_MAX(bad_off - 8, -(long)c->obj_offset);
		char label[64];
		snprintf(label, sizeof(label), "bytes from offset %ld", from);
		rb_bytes(&r, label, (const unsigned char *)obj + from,
			 SHEAF_MIN((size_t)16,
				   (size_t)((long)c->debug_offset - c->obj_offset - from)));
	}
	rb_add(&r, "sheaf:   operation called from ");
	rb_site(&r, caller);
	rb_add(&r, "\n");
	if (c->debug_flags & SHEAF_DEBUG_STORE_USER) {
		rb_track(&r, "last allocated", &m->alloc);
		rb_track(&r, "last freed", &m->free);
	} else {
		rb_add(&r,
		       "sheaf:   (allocation and free sites: enable U, e.g. SHEAF_SLAB_DEBUG=FZPU)\n");
	}
	bool warn = sheaf_error_warn();
	rb_add(&r, "sheaf:   %s\n",
	       warn ? "object leaked, continuing (SHEAF_ON_ERROR=warn)" : "aborting");
	sheaf_error_emit(r.b, r.n); /* aborts unless warn */
	return 1;
}

/* First byte in [p, p+n) that differs from @v, or -1. */
static long first_not(const char *p, size_t n, int v)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] != (unsigned char)v)
			return (long)i;
	return -1;
}

/* Offset (from the object) of the first damaged red-zone byte, or LONG_MIN. */
static long check_redzones(const struct sheaf_cache *c, char *slot, int v)
{
	long k = first_not(slot, c->obj_offset, v);
	if (k >= 0)
		return k - (long)c->obj_offset;
	size_t obj_end = c->obj_offset + c->object_size;
	k = first_not(slot + obj_end, c->debug_offset - obj_end, v);
	if (k >= 0)
		return (long)c->object_size + k;
	return LONG_MIN;
}

static long check_poison(const struct sheaf_cache *c, char *obj)
{
	long k = first_not(obj, c->object_size - 1, POISON_FREE);
	if (k >= 0)
		return k;
	if ((unsigned char)obj[c->object_size - 1] != POISON_END)
		return (long)c->object_size - 1;
	return LONG_MIN;
}

/* ---- The hooks ------------------------------------------------------------------------ */

/* The hooks read and write the whole slot, which the sanitizers see as
 * poisoned (track.h); they open it first and close it again at the end, and
 * the core's sheaf_track_obj_alloc then opens the object alone. */
static void slot_open(const struct sheaf_cache *c, char *slot)
{
	sheaf_track_mem_defined(slot, c->slot_size);
}
static void slot_close(const struct sheaf_cache *c, char *slot)
{
	sheaf_track_mem_noaccess(slot, c->slot_size);
}

int sheaf_debug_slab_alloc(struct sheaf_cache *c, void *obj, const void *caller)
{
	unsigned f = c->debug_flags;
	char *slot = (char *)obj - c->obj_offset;
	struct meta *m = meta_of(c, slot);
	long bad;
	int rc = 0;

	slot_open(c, slot);
	if (m->state != STATE_FREE) {
		rc = report(c, slot, SHEAF_ERR_CORRUPTION,
			    m->state == STATE_ALLOC ? "allocated object found on the free list "
						      "(double free, or free list corrupted)" :
						      "object metadata overwritten (state word)",
			    LONG_MIN, caller);
	} else if ((f & SHEAF_DEBUG_REDZONE) &&
		   (bad = check_redzones(c, slot, RED_INACTIVE)) != LONG_MIN) {
		rc = report(c, slot, SHEAF_ERR_WRITE_AFTER_FREE,
			    "red zone overwritten while the object was free", bad, caller);
	} else if ((f & SHEAF_DEBUG_POISON) && (bad = check_poison(c, (char *)obj)) != LONG_MIN) {
		rc = report(c, slot, SHEAF_ERR_WRITE_AFTER_FREE, "poison overwritten", bad, caller);
	} else {
		m->state = STATE_ALLOC;
		if (f & SHEAF_DEBUG_REDZONE)
			set_redzones(c, slot, RED_ACTIVE);
		if (f & SHEAF_DEBUG_STORE_USER)
			set_track(&m->alloc, caller);
	}
	slot_close(c, slot);
	return rc;
}

bool sheaf_debug_slab_is_free(const struct sheaf_cache *c, const void *obj)
{
	const struct meta *m = meta_of(c, (char *)obj - c->obj_offset);
	return __atomic_load_n(&m->state, __ATOMIC_RELAXED) != STATE_ALLOC;
}

int sheaf_debug_slab_free(struct sheaf_cache *c, void *obj, const void *caller)
{
	unsigned f = c->debug_flags;
	char *slot = (char *)obj - c->obj_offset;
	struct meta *m = meta_of(c, slot);
	long bad;
	int rc = 0;

	slot_open(c, slot);
	if (m->state == STATE_FREE) {
		rc = report(c, slot, SHEAF_ERR_DOUBLE_FREE, "the object is already free", LONG_MIN,
			    caller);
	} else if (m->state != STATE_ALLOC) {
		rc = report(c, slot, SHEAF_ERR_CORRUPTION,
			    "object metadata overwritten (state word)", LONG_MIN, caller);
	} else if ((f & SHEAF_DEBUG_REDZONE) &&
		   (bad = check_redzones(c, slot, RED_ACTIVE)) != LONG_MIN) {
		rc = report(c, slot, SHEAF_ERR_OVERFLOW, "red zone overwritten", bad, caller);
	} else {
		m->state = STATE_FREE;
		if (f & SHEAF_DEBUG_STORE_USER)
			set_track(&m->free, caller);
		if (f & SHEAF_DEBUG_POISON)
			poison_object(c, (char *)obj);
		if (f & SHEAF_DEBUG_REDZONE)
			set_redzones(c, slot, RED_INACTIVE);
	}
	slot_close(c, slot);
	return rc;
}
