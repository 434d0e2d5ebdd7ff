/* SPDX-License-Identifier: MIT */
/*
 * mallinfo.c - glibc's introspection calls answered with Sheaf's figures under the
 * preload: mallinfo2, mallinfo, malloc_stats and malloc_info (glibc's XML shape).
 * Without them a preloaded program's monitoring would read glibc's unused arena.
 * docs/malloc.md ("Introspection") says which of Sheaf's figures each field holds.
 *
 * The figures come from sheaf_stats_get() on each size-class cache (exact for
 * per-CPU sheaves, which it locks in turn) and from the extent registry; a call
 * costs a few microseconds per class and touches nothing on the allocation paths.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "malloc/malloc.h"

#define EXPORT __attribute__((visibility("default")))

struct class_figs {
	size_t size;        /* class size */
	uint64_t used;      /* objects the program holds */
	uint64_t cached;    /* free objects in sheaves, barns and RCU sheaves */
	uint64_t slab_free; /* free objects on slabs */
	uint64_t bytes;     /* slab memory of the class */
};

struct figs {
	struct class_figs cls[SHEAF_SC_COUNT];
	uint64_t slab_bytes, used_bytes, cached_objs, cached_bytes, free_objs, free_bytes;
	size_t ext_count, ext_bytes, xc_count, xc_bytes;
	uint64_t heap_reserved;
};

/* When the core could not start, glibc serves the small blocks (preload.c's fallback):
 * its arena is then the program's small-block memory, and its figures join Sheaf's.
 * Until 2026-11-29 mallinfo2 said 0 bytes in use under SHEAF_HEAP_GB=0 while the program
 * held 560,000 bytes of glibc's blocks. */
static void glibc_figures(struct figs *f)
{
	static struct mallinfo2 (*glibc_mallinfo2)(void);
	if (!sheaf_preload_fallback_on || !sheaf_preload_fallback_on())
		return;
	if (!glibc_mallinfo2) /* dlsym may allocate: glibc serves it */
		*(void **)&glibc_mallinfo2 = dlsym(RTLD_NEXT, "mallinfo2");
	if (!glibc_mallinfo2)
		return;
	struct mallinfo2 g = glibc_mallinfo2();
	f->slab_bytes += g.arena;
	f->used_bytes += g.uordblks;
	f->free_objs += g.ordblks;
	f->free_bytes += g.fordblks;
	f->cached_objs += g.smblks;
	f->cached_bytes += g.fsmblks;
}

static void gather(struct figs *f)
{
	memset(f, 0, sizeof(*f));
	for (unsigned int i = 0; i < SHEAF_SC_COUNT; i++) {
		struct class_figs *k = &f->cls[i];
		k->size = sheaf_sc_size[i];
		struct sheaf_cache *c =
			atomic_load_explicit(&sheaf_malloc_classes[i], memory_order_acquire);
		struct sheaf_stats st = { .size = sizeof(st) };
		if (!c || sheaf_stats_get(c, &st) != 0)
			continue;
		/* objects_inuse counts cached objects too (docs/stats.md); racy sums can
		 * briefly disagree, hence the clamps. */
		k->cached = st.objects_cached;
		k->used = st.objects_inuse > st.objects_cached ?
				  st.objects_inuse - st.objects_cached :
				  0;
		k->slab_free = st.objects_total > st.objects_inuse ?
				       st.objects_total - st.objects_inuse :
				       0;
		k->bytes = st.bytes_from_os;
		f->slab_bytes += k->bytes;
		f->used_bytes += k->used * k->size;
		f->cached_objs += k->cached;
		f->cached_bytes += k->cached * k->size;
		f->free_objs += k->slab_free;
		f->free_bytes += k->slab_free * k->size;
	}
	glibc_figures(f);
	sheaf_malloc_extent_live_stat(&f->ext_count, &f->ext_bytes);
	sheaf_malloc_extent_cache_stat(&f->xc_count, &f->xc_bytes);
	struct sheaf_global_stats g = { .size = sizeof(g) };
	if (sheaf_global_stats_get(&g) == 0)
		f->heap_reserved = g.heap_reserved;
}

/* The slab memory of malloc's classes stands for glibc's arena (main heap); extents
 * for its mmapped chunks; objects cached in sheaves and barns for its fastbins. */
EXPORT struct mallinfo2 mallinfo2(void)
{
	struct figs f;
	gather(&f);
	struct mallinfo2 m = {
		.arena = f.slab_bytes,
		.ordblks = f.free_objs,
		.smblks = f.cached_objs,
		.hblks = f.ext_count,
		.hblkhd = f.ext_bytes,
		.usmblks = 0,
		.fsmblks = f.cached_bytes,
		.uordblks = f.used_bytes,
		.fordblks = f.slab_bytes > f.used_bytes ? f.slab_bytes - f.used_bytes : 0,
		.keepcost = f.xc_bytes,
	};
	return m;
}

static int clamp_int(size_t v)
{
	return v > INT_MAX ? INT_MAX : (int)v;
}

/* The old interface: the same figures in int, clamped (glibc wraps them instead). */
EXPORT struct mallinfo mallinfo(void)
{
	struct mallinfo2 m2 = mallinfo2();
	struct mallinfo m = {
		.arena = clamp_int(m2.arena),
		.ordblks = clamp_int(m2.ordblks),
		.smblks = clamp_int(m2.smblks),
		.hblks = clamp_int(m2.hblks),
		.hblkhd = clamp_int(m2.hblkhd),
		.usmblks = clamp_int(m2.usmblks),
		.fsmblks = clamp_int(m2.fsmblks),
		.uordblks = clamp_int(m2.uordblks),
		.fordblks = clamp_int(m2.fordblks),
		.keepcost = clamp_int(m2.keepcost),
	};
	return m;
}

/* glibc's lines first (scripts read them), then one line per size class in use.
 * "max mmap" is the current figure: Sheaf keeps no high-water mark. */
EXPORT void malloc_stats(void)
{
	struct figs f;
	gather(&f);
	FILE *o = stderr;
	fprintf(o, "Arena 0:\n");
	fprintf(o, "system bytes     = %10llu\n", (unsigned long long)f.slab_bytes);
	fprintf(o, "in use bytes     = %10llu\n", (unsigned long long)f.used_bytes);
	fprintf(o, "Total (incl. mmap):\n");
	fprintf(o, "system bytes     = %10llu\n", (unsigned long long)(f.slab_bytes + f.ext_bytes));
	fprintf(o, "in use bytes     = %10llu\n", (unsigned long long)(f.used_bytes + f.ext_bytes));
	fprintf(o, "max mmap regions = %10llu\n", (unsigned long long)f.ext_count);
	fprintf(o, "max mmap bytes   = %10llu\n", (unsigned long long)f.ext_bytes);
	fprintf(o, "sheaf-malloc: %zu extents in use, %zu cached (%zu bytes); size classes:\n",
		f.ext_count, f.xc_count, f.xc_bytes);
	for (unsigned int i = 0; i < SHEAF_SC_COUNT; i++) {
		const struct class_figs *k = &f.cls[i];
		if (!k->bytes && !k->used)
			continue;
		fprintf(o,
			"  malloc-%-6zu %10llu used %10llu cached %10llu free on slabs %10llu bytes\n",
			k->size, (unsigned long long)k->used, (unsigned long long)k->cached,
			(unsigned long long)k->slab_free, (unsigned long long)k->bytes);
	}
}

/* glibc's XML (malloc_info(3)): one heap; <sizes> lists the free objects of each
 * class, as glibc lists its free chunks by size; "fast" are the objects cached in
 * sheaves and barns, "rest" those free on slabs, "mmap" the extents in use. */
EXPORT int malloc_info(int options, FILE *fp)
{
	/* glibc 2.36 returns the error code itself, errno untouched (its manual page
	 * says -1 and errno): a replacement answers as the library it replaces. */
	if (options != 0 || !fp)
		return EINVAL;
	struct figs f;
	gather(&f);
	unsigned long long sys = f.slab_bytes;
	fprintf(fp, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
	size_t from = 1;
	for (unsigned int i = 0; i < SHEAF_SC_COUNT; i++) {
		const struct class_figs *k = &f.cls[i];
		uint64_t n = k->cached + k->slab_free;
		if (n)
			fprintf(fp,
				"  <size from=\"%zu\" to=\"%zu\" total=\"%llu\" count=\"%llu\"/>\n",
				from, k->size, (unsigned long long)(n * k->size),
				(unsigned long long)n);
		from = k->size + 1;
	}
	fprintf(fp, "</sizes>\n");
	for (int pass = 0; pass < 2; pass++) {
		fprintf(fp, "<total type=\"fast\" count=\"%llu\" size=\"%llu\"/>\n",
			(unsigned long long)f.cached_objs, (unsigned long long)f.cached_bytes);
		fprintf(fp, "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n",
			(unsigned long long)f.free_objs, (unsigned long long)f.free_bytes);
		if (pass == 1)
			fprintf(fp, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n",
				f.ext_count, f.ext_bytes);
		fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n", sys);
		fprintf(fp, "<system type=\"max\" size=\"%llu\"/>\n", sys);
		fprintf(fp, "<aspace type=\"total\" size=\"%llu\"/>\n",
			pass ? (unsigned long long)f.heap_reserved : sys);
		fprintf(fp, "<aspace type=\"mprotect\" size=\"%llu\"/>\n", sys);
		if (pass == 0)
			fprintf(fp, "</heap>\n");
	}
	fprintf(fp, "</malloc>\n");
	return 0;
}
