/* SPDX-License-Identifier: MIT */
/*
 * sheafinfo - a slabinfo-like view of the caches of a running process that uses
 * Sheaf, linked or through the preload library (man sheafinfo(1),
 * docs/introspection.md).
 *
 * How: the library exports a self-describing root (src/cache/introspect.h).
 * This tool finds it in the ELF files the target has mapped (/proc/PID/maps, then
 * the dynamic symbol table, the static one, or the section of that name), reads it
 * and everything it points to with process_vm_readv(2), and sums the counters the
 * way sheaf_stats_get() does (docs/stats.md).  The kernel decides who may read: the
 * process's own user or root (PTRACE_MODE_ATTACH), so this tool checks nothing
 * itself and needs no help from the target: no thread, no signal, no option.
 *
 * The target keeps running while it is read, so every figure is a snapshot and
 * every walk is bounded and validated: a cache whose nodes do not point back at it,
 * a list longer than possible or a pointer into unmapped memory makes that cache be
 * read again (a few times), never a crash or an endless loop.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cache/introspect.h"

#ifndef SHEAFINFO_VERSION
#define SHEAFINFO_VERSION "unknown"
#endif

#define MAX_EVENTS    128        /* counters per cache this tool can sum */
#define MAX_INSTANCES 4          /* Sheaf copies in one process (libsheaf.so + preload) */
#define MAX_CACHES    65536      /* bound of the cache-list walk */
#define MAX_LIST_WALK (1u << 22) /* bound of a partial-slab or pcs list walk */
#define READ_RETRIES  8          /* re-reads of a cache that changed under us */

static const char *prog = "sheafinfo";
static pid_t target_pid;

/* ---- Errors: one line, then exit ---------------------------------------------------- */

/* One line on stderr, then exit with @status. */
static void __attribute__((noreturn, format(printf, 2, 0)))
vdie(int status, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	exit(status);
}

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vdie(1, fmt, ap);
}

/* A usage error (a bad option value, or options that do not go together): one line,
 * exit status 2 (docs/introspection.md; these exited 1 until 2026-11-29). */
static void __attribute__((noreturn, format(printf, 1, 2))) die_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vdie(2, fmt, ap);
}

static void __attribute__((noreturn)) die_permission(void)
{
	die("permission denied reading process %d: only its own user or root may inspect it",
	    (int)target_pid);
}

static void __attribute__((noreturn)) die_gone(void)
{
	die("process %d exited while it was being read", (int)target_pid);
}

/* ---- Reading the target ------------------------------------------------------------- */

/* 0, or -EFAULT (not mapped: the structure changed under us), -EPERM, -ESRCH. */
static int rd(uint64_t addr, void *buf, size_t len)
{
	if (!len)
		return 0;
	if (!addr)
		return -EFAULT;
	struct iovec local = { buf, len };
	struct iovec remote = { (void *)(uintptr_t)addr, len };
	ssize_t n = process_vm_readv(target_pid, &local, 1, &remote, 1, 0);
	if (n == (ssize_t)len)
		return 0;
	if (n >= 0)
		return -EFAULT; /* partly mapped */
	return -errno;
}

/* Fatal errors of a read end the program; -EFAULT goes back to the caller. */
static int rd_or_die(uint64_t addr, void *buf, size_t len)
{
	int r = rd(addr, buf, len);
	if (r == -EPERM || r == -EACCES)
		die_permission();
	if (r == -ESRCH)
		die_gone();
	if (r && r != -EFAULT)
		die("reading process %d: %s", (int)target_pid, strerror(-r));
	return r;
}

static uint64_t get_field(const unsigned char *base, struct sheaf_ix_field f)
{
	switch (f.size) {
	case 1:
		return base[f.off];
	case 2: {
		uint16_t v;
		memcpy(&v, base + f.off, 2);
		return v;
	}
	case 4: {
		uint32_t v;
		memcpy(&v, base + f.off, 4);
		return v;
	}
	default: {
		uint64_t v;
		memcpy(&v, base + f.off, 8);
		return v;
	}
	}
}

static uint64_t get_elem(const unsigned char *base, struct sheaf_ix_field f, uint64_t i)
{
	struct sheaf_ix_field e = { (uint32_t)(f.off + i * f.size), f.size };
	return get_field(base, e);
}

/* Bytes of a structure that cover every field given (read in one call). */
static size_t span(const struct sheaf_ix_field *f, int n)
{
	size_t end = 0;
	for (int i = 0; i < n; i++)
		if (f[i].off + f[i].size > end)
			end = f[i].off + f[i].size;
	return end;
}

/* ---- One Sheaf instance in the target ------------------------------------------------- */

struct instance {
	char path[PATH_MAX]; /* the ELF file that holds the root */
	uint64_t root_addr;
	struct sheaf_ix_root ix;
	char ev_name[MAX_EVENTS][40];
	int initialised;
	int mode, ncpus, nnodes;
	uint64_t heap_cap, heap_mapped, heap_returned;
	/* spans, computed once */
	size_t cache_span, node_span, barn_span, sheaf_span, slab_span, pcs_span;
};

struct cache_info {
	int inst;
	uint64_t addr;
	char name[64];
	uint64_t object_size, slot_size, objs_per_slab, order, sheaf_capacity;
	uint64_t slabs, partial_slabs, objects_total, objects_inuse, objects_in_pcs,
		objects_in_barns, barn_full, barn_empty, barn_locks, rcu_inflight_sheaves,
		rcu_inflight_objects, objects_cached, bytes_from_os, bytes_returned, percpu_slots;
	uint64_t ev[MAX_EVENTS];
};

static struct instance inst[MAX_INSTANCES];
static int ninst;

static int sane_field(struct sheaf_ix_field f)
{
	return f.size >= 1 && f.size <= (1u << 16) && f.off < (1u << 20);
}

/* Fields read as integers (or pointers) must have an integer's size. */
static int int_field(struct sheaf_ix_field f)
{
	return f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8;
}

/* Check a root read from the target, and load its names and globals. */
static const char *instance_setup(struct instance *in)
{
	const struct sheaf_ix_root *ix = &in->ix;
	if (memcmp(ix->magic, SHEAF_IX_MAGIC, 8) != 0)
		return "bad magic";
	if (ix->version != SHEAF_IX_VERSION)
		return "unsupported introspection version";
	if (ix->size < sizeof(*ix) || ix->ptr_size != 8 || ix->stat_nr == 0 ||
	    ix->stat_nr > MAX_EVENTS || ix->max_nodes == 0 || ix->max_nodes > 4096)
		return "inconsistent root";
	const struct sheaf_ix_field *all = &ix->list_next;
	const struct sheaf_ix_field *end = (const struct sheaf_ix_field *)&ix->fc_inuse_shift;
	for (const struct sheaf_ix_field *f = all; f < end; f++)
		if (!sane_field(*f))
			return "inconsistent field layout";
	const struct sheaf_ix_field ints[] = {
		ix->list_next,
		ix->cache_object_size,
		ix->cache_slot_size,
		ix->cache_objs_per_slab,
		ix->cache_order,
		ix->cache_sheaf_capacity,
		ix->cache_node,
		ix->cache_cpu_pcs,
		ix->cache_stat_atomic,
		ix->cache_rcu_inflight_sheaves,
		ix->cache_rcu_inflight_objects,
		ix->cache_bytes_returned,
		ix->node_cache,
		ix->node_nr_slabs,
		ix->barn_full,
		ix->barn_nr_full,
		ix->barn_nr_empty,
		ix->barn_nr_locks,
		ix->sheaf_size,
		ix->sheaf_capacity,
		ix->sheaf_nalloc,
		ix->slab_fc,
		ix->pcs_main,
		ix->pcs_spare,
		ix->pcs_nalloc_base,
		ix->pcs_size_base,
		ix->pcs_stat,
		ix->pcs_cached,
		ix->pcs_cache,
	};
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if (!int_field(ints[i]))
			return "inconsistent field sizes";
	if (ix->cache_node.size != 8 || ix->cache_mainv.size < 8 || ix->cache_mainv.size > 4096 ||
	    ix->list_next.size != 8 || ix->fc_inuse_shift > 63)
		return "inconsistent pointer fields";
	if (ix->ev_alloc_fast >= ix->stat_nr || ix->ev_alloc_slow >= ix->stat_nr ||
	    ix->ev_free_fast >= ix->stat_nr || ix->ev_free_slow >= ix->stat_nr)
		return "inconsistent event indexes";

	struct sheaf_ix_field cf[] = { ix->cache_name,
				       ix->cache_object_size,
				       ix->cache_slot_size,
				       ix->cache_objs_per_slab,
				       ix->cache_order,
				       ix->cache_sheaf_capacity,
				       ix->cache_list,
				       ix->cache_pcs_list,
				       ix->cache_cpu_pcs,
				       ix->cache_rcu_inflight_sheaves,
				       ix->cache_rcu_inflight_objects,
				       ix->cache_bytes_returned };
	in->cache_span = span(cf, (int)(sizeof(cf) / sizeof(cf[0])));
	size_t node_end = ix->cache_node.off + (size_t)ix->max_nodes * ix->cache_node.size;
	size_t stat_end =
		ix->cache_stat_atomic.off + (size_t)ix->stat_nr * ix->cache_stat_atomic.size;
	if (node_end > in->cache_span)
		in->cache_span = node_end;
	if (stat_end > in->cache_span)
		in->cache_span = stat_end;
	/* mainv is added per read: it depends on ncpus. */
	struct sheaf_ix_field bf[] = { ix->barn_full, ix->barn_nr_full, ix->barn_nr_empty,
				       ix->barn_nr_locks };
	in->barn_span = span(bf, 4);
	struct sheaf_ix_field nf[] = { ix->node_cache, ix->node_nr_slabs, ix->node_partial,
				       ix->node_barn };
	in->node_span = span(nf, 4);
	/* The barn inside the node: the node read covers it too. */
	if (!ix->node_barn_is_ptr && ix->node_barn.off + in->barn_span > in->node_span)
		in->node_span = ix->node_barn.off + in->barn_span;
	if (ix->node_barn_is_ptr && ix->node_barn.size != 8)
		return "inconsistent barn pointer";
	struct sheaf_ix_field sf[] = { ix->sheaf_size, ix->sheaf_capacity, ix->sheaf_nalloc,
				       ix->sheaf_link };
	in->sheaf_span = span(sf, 4);
	struct sheaf_ix_field lf[] = { ix->slab_fc, ix->slab_list };
	in->slab_span = span(lf, 2);
	struct sheaf_ix_field pf[] = { ix->pcs_main,      ix->pcs_spare, ix->pcs_nalloc_base,
				       ix->pcs_size_base, ix->pcs_link,  ix->pcs_cached,
				       ix->pcs_cache };
	in->pcs_span = span(pf, 7);
	size_t pstat_end = ix->pcs_stat.off + (size_t)ix->stat_nr * ix->pcs_stat.size;
	if (pstat_end > in->pcs_span)
		in->pcs_span = pstat_end;

	uint64_t names[MAX_EVENTS];
	rd_or_die(ix->stat_names, names, ix->stat_nr * sizeof(uint64_t));
	for (uint32_t i = 0; i < ix->stat_nr; i++) {
		char b[40] = "";
		if (rd_or_die(names[i], b, sizeof(b) - 1) != 0)
			snprintf(b, sizeof(b), "EVENT_%u", i);
		b[sizeof(b) - 1] = 0;
		for (char *p = b; *p; p++)
			if (!isalnum((unsigned char)*p) && *p != '_')
				*p = '_';
		memcpy(in->ev_name[i], b, sizeof(b));
	}
	return NULL;
}

/* Globals change (init, heap growth): read them at every refresh. */
static int instance_refresh(struct instance *in)
{
	int st = 0, mode = 0, ncpus = 0, nnodes = 0;
	if (rd_or_die(in->ix.init_state, &st, sizeof(st)) ||
	    rd_or_die(in->ix.mode, &mode, sizeof(mode)) ||
	    rd_or_die(in->ix.ncpus, &ncpus, sizeof(ncpus)) ||
	    rd_or_die(in->ix.nnodes, &nnodes, sizeof(nnodes)) ||
	    rd_or_die(in->ix.heap_cap, &in->heap_cap, 8) ||
	    rd_or_die(in->ix.heap_mapped, &in->heap_mapped, 8) ||
	    rd_or_die(in->ix.heap_returned, &in->heap_returned, 8))
		return -EFAULT;
	in->initialised = st == 2;
	if (!in->initialised)
		return 0;
	if (ncpus <= 0 || ncpus > 1 << 16 || nnodes <= 0 || nnodes > (int)in->ix.max_nodes)
		return -EFAULT;
	in->mode = mode;
	in->ncpus = ncpus;
	in->nnodes = nnodes;
	return 0;
}

/* ---- Reading one cache, as sheaf_stats_get() sums it (src/cache/stats.c) ------------- */

struct sheaf_hdr {
	uint64_t size, capacity, nalloc, next;
};

static int read_sheaf(const struct instance *in, uint64_t addr, struct sheaf_hdr *h)
{
	unsigned char b[256];
	if (in->sheaf_span > sizeof(b))
		return -EFAULT;
	int r = rd_or_die(addr, b, in->sheaf_span);
	if (r)
		return r;
	struct sheaf_ix_field next = { in->ix.sheaf_link.off + in->ix.list_next.off,
				       in->ix.list_next.size };
	h->size = get_field(b, in->ix.sheaf_size);
	h->capacity = get_field(b, in->ix.sheaf_capacity);
	h->nalloc = get_field(b, in->ix.sheaf_nalloc);
	h->next = get_field(b, next);
	if (h->size > h->capacity && h->capacity)
		return -EFAULT;
	return 0;
}

/* One pcs: its counters, plus the fast-path counts not yet harvested (the same
 * arithmetic as sheaf_pcs_harvest: pops since the last unlock are main->nalloc -
 * nalloc_base, pushes the size change plus those pops). */
static int read_pcs(const struct instance *in, struct cache_info *ci, uint64_t pcs_addr,
		    uint64_t published_main, bool percpu)
{
	const struct sheaf_ix_root *ix = &in->ix;
	unsigned char *b = malloc(in->pcs_span);
	if (!b)
		die("out of memory");
	int r = rd_or_die(pcs_addr, b, in->pcs_span);
	if (r || get_field(b, ix->pcs_cache) != ci->addr) {
		free(b);
		return -EFAULT;
	}
	for (uint32_t i = 0; i < ix->stat_nr; i++)
		ci->ev[i] += get_elem(b, ix->pcs_stat, i);
	uint64_t main = percpu ? published_main : get_field(b, ix->pcs_main);
	uint64_t spare = get_field(b, ix->pcs_spare);
	uint64_t cached = get_field(b, ix->pcs_cached);
	uint64_t nalloc_base = get_field(b, ix->pcs_nalloc_base);
	uint64_t size_base = get_field(b, ix->pcs_size_base);
	free(b);
	struct sheaf_hdr m = { 0, 0, 0, 0 }, s = { 0, 0, 0, 0 };
	if (main && read_sheaf(in, main, &m) == 0 && m.capacity > 0) {
		uint64_t d_alloc = m.nalloc - nalloc_base;
		int64_t d_free = (int64_t)m.size - (int64_t)size_base + (int64_t)d_alloc;
		/* A lock holder may be between changing main and rebasing: a difference
		 * that cannot be real is dropped (the next read has it). */
		if (d_alloc < (1ull << 40)) {
			ci->ev[ix->ev_alloc_fast] += d_alloc;
			if (d_free > 0 && d_free < (1ll << 40))
				ci->ev[ix->ev_free_fast] += (uint64_t)d_free;
		}
		if (percpu) {
			/* Unlocked CPU: its sheaves can be counted exactly. */
			cached = m.size;
			if (spare && read_sheaf(in, spare, &s) == 0)
				cached += s.size;
		}
	}
	ci->objects_in_pcs += cached;
	return 0;
}

static int read_cache(const struct instance *in, uint64_t addr, struct cache_info *ci)
{
	const struct sheaf_ix_root *ix = &in->ix;
	memset(ci, 0, sizeof(*ci));
	ci->addr = addr;
	size_t mainv_end = ix->cache_mainv.off + (size_t)(in->ncpus + 2) * ix->cache_mainv.size;
	size_t len = in->cache_span > mainv_end ? in->cache_span : mainv_end;
	unsigned char *b = malloc(len);
	unsigned char *nb = malloc(in->node_span);
	unsigned char *barnbuf = malloc(in->barn_span);
	uint64_t *cpus = NULL;
	int r = -EFAULT;
	if (!b || !nb || !barnbuf)
		die("out of memory");
	if (rd_or_die(addr, b, len))
		goto out;

	/* Identity: a NUL-terminated name, a sane geometry, and (below) nodes that point
	 * back at this cache -- the per-cache check that we are reading a live cache and
	 * not memory that was reused.  A name is the program's, any bytes, maybe none
	 * (sheaf_cache_create copies it as given): until 2026-11-29 a name that was not
	 * printable ASCII (UTF-8, a tab, "") left the cache out, counted as "changing too
	 * fast to read" although the program was idle. */
	size_t nl = ix->cache_name.size < sizeof(ci->name) ? ix->cache_name.size :
							     sizeof(ci->name) - 1;
	memcpy(ci->name, b + ix->cache_name.off, nl);
	ci->name[nl] = 0;
	if (strlen(ci->name) >= nl)
		goto out;
	ci->object_size = get_field(b, ix->cache_object_size);
	ci->slot_size = get_field(b, ix->cache_slot_size);
	ci->objs_per_slab = get_field(b, ix->cache_objs_per_slab);
	ci->order = get_field(b, ix->cache_order);
	ci->sheaf_capacity = get_field(b, ix->cache_sheaf_capacity);
	if (!ci->objs_per_slab || ci->objs_per_slab > 65535 || ci->order > 20 || !ci->slot_size ||
	    ci->object_size > ci->slot_size)
		goto out;

	/* Nodes: slabs, partial lists, barns (sheaf_slab_node_counts, sheaf_barn_counts). */
	uint64_t barns_seen[256] = { 0 };
	for (int i = 0; i < in->nnodes; i++) {
		uint64_t n = get_elem(b, ix->cache_node, (uint64_t)i);
		if (!n) {
			if (i == 0)
				goto out;
			continue;
		}
		if (rd_or_die(n, nb, in->node_span) || get_field(nb, ix->node_cache) != addr)
			goto out;
		int64_t total = (int64_t)get_field(nb, ix->node_nr_slabs);
		uint64_t head = n + ix->node_partial.off;
		struct sheaf_ix_field pnext = { ix->node_partial.off + ix->list_next.off,
						ix->list_next.size };
		uint64_t pos = get_field(nb, pnext), part = 0, part_inuse = 0;
		while (pos != head) {
			unsigned char sb[128];
			if (++part > MAX_LIST_WALK || in->slab_span > sizeof(sb))
				goto out;
			uint64_t slab = pos - ix->slab_list.off;
			if (rd_or_die(slab, sb, in->slab_span))
				goto out;
			uint64_t fc = get_field(sb, ix->slab_fc);
			part_inuse += (fc >> ix->fc_inuse_shift) & ix->fc_inuse_mask;
			struct sheaf_ix_field snext = { ix->slab_list.off + ix->list_next.off,
							ix->list_next.size };
			pos = get_field(sb, snext);
		}
		uint64_t off_list = total > (int64_t)part ? (uint64_t)total - part : 0;
		ci->slabs += total > 0 ? (uint64_t)total : 0;
		ci->partial_slabs += part;
		ci->objects_inuse += part_inuse + off_list * ci->objs_per_slab;

		/* The barn: inside the node, or where the node's pointer says. */
		const unsigned char *bb = nb + ix->node_barn.off;
		if (ix->node_barn_is_ptr) {
			uint64_t barn = get_field(nb, ix->node_barn);
			/* A memoryless node shares its nearest memory node's barn (D3): each
			 * barn counts once. */
			const int nseen = (int)(sizeof(barns_seen) / sizeof(barns_seen[0]));
			bool seen = false;
			for (int j = 0; j < i && j < nseen; j++)
				seen = seen || barns_seen[j] == barn;
			if (i < nseen)
				barns_seen[i] = barn;
			if (seen)
				continue;
			if (!barn || rd_or_die(barn, barnbuf, in->barn_span))
				goto out;
			bb = barnbuf;
		}
#define BARN(fld) get_field(bb, ix->fld)
		uint64_t nr_full = BARN(barn_nr_full);
		ci->barn_full += nr_full;
		ci->barn_empty += BARN(barn_nr_empty);
		ci->barn_locks += BARN(barn_nr_locks);
		uint64_t s = BARN(barn_full);
#undef BARN
		for (uint64_t steps = 0; s; steps++) {
			struct sheaf_hdr h;
			if (steps > nr_full + 64 || read_sheaf(in, s, &h))
				goto out;
			ci->objects_in_barns += h.size;
			s = h.next ? h.next - ix->sheaf_link.off : 0;
		}
	}
	ci->objects_total = ci->slabs * ci->objs_per_slab;

	/* CPUs' or threads' sheaves and their counters (sheaf_pcs_for_each, but unlocked). */
	uint64_t cpu_pcs = get_field(b, ix->cache_cpu_pcs);
	if (in->mode == 1 && cpu_pcs) {
		cpus = calloc((size_t)in->ncpus, sizeof(*cpus));
		if (!cpus)
			die("out of memory");
		if (rd_or_die(cpu_pcs, cpus, (size_t)in->ncpus * sizeof(*cpus)))
			goto out;
		for (int k = 0; k < in->ncpus; k++) {
			if (!cpus[k])
				continue;
			/* Each entry's first word: the library pads an entry to a cache
			 * line (src/slab/slab.h struct sheaf_mainv_slot). */
			uint64_t at =
				ix->cache_mainv.off + ((uint64_t)k + 2) * ix->cache_mainv.size;
			uint64_t m = get_field(b, (struct sheaf_ix_field){ (uint32_t)at, 8 });
			if (read_pcs(in, ci, cpus[k], m, true))
				goto out;
		}
		ci->percpu_slots = (uint64_t)in->ncpus;
	} else {
		uint64_t head = addr + ix->cache_pcs_list.off;
		struct sheaf_ix_field lnext = { ix->cache_pcs_list.off + ix->list_next.off,
						ix->list_next.size };
		uint64_t pos = get_field(b, lnext);
		while (pos != head) {
			uint64_t next;
			if (ci->percpu_slots++ > MAX_LIST_WALK)
				goto out;
			uint64_t pcs = pos - ix->pcs_link.off;
			if (read_pcs(in, ci, pcs, 0, false) ||
			    rd_or_die(pos + ix->list_next.off, &next, sizeof(next)))
				goto out;
			pos = next;
		}
	}
	for (uint32_t i = 0; i < ix->stat_nr; i++)
		ci->ev[i] += get_elem(b, ix->cache_stat_atomic, i);
	ci->rcu_inflight_sheaves = get_field(b, ix->cache_rcu_inflight_sheaves);
	ci->rcu_inflight_objects = get_field(b, ix->cache_rcu_inflight_objects);
	ci->objects_cached = ci->objects_in_pcs + ci->objects_in_barns + ci->rcu_inflight_objects;
	ci->bytes_from_os = ci->slabs * ((uint64_t)ix->page_size << ci->order);
	ci->bytes_returned = get_field(b, ix->cache_bytes_returned);
	r = 0;
out:
	free(b);
	free(nb);
	free(barnbuf);
	free(cpus);
	return r;
}

/* ---- Every cache of every instance ------------------------------------------------------ */

struct snapshot {
	struct cache_info *c;
	size_t n, cap;
	unsigned skipped; /* caches that kept changing while read */
};

static void snap_add(struct snapshot *s, const struct cache_info *ci)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->c = realloc(s->c, s->cap * sizeof(*s->c));
		if (!s->c)
			die("out of memory");
	}
	s->c[s->n++] = *ci;
}

/* Walk one instance's cache list; -EFAULT if the list itself changed under us. */
static int read_instance(struct instance *in, int idx, struct snapshot *s)
{
	size_t first = s->n;
	if (instance_refresh(in))
		return -EFAULT;
	if (!in->initialised)
		return 0;
	const struct sheaf_ix_root *ix = &in->ix;
	uint64_t head = ix->caches, pos;
	if (rd_or_die(head + ix->list_next.off, &pos, sizeof(pos)))
		return -EFAULT;
	for (unsigned n = 0; pos != head; n++) {
		if (n > MAX_CACHES || !pos)
			goto changed;
		uint64_t addr = pos - ix->cache_list.off;
		struct cache_info ci;
		int r = -EFAULT;
		for (int t = 0; t < READ_RETRIES && r; t++)
			r = read_cache(in, addr, &ci);
		if (r == 0) {
			ci.inst = idx;
			snap_add(s, &ci);
		} else {
			s->skipped++;
		}
		uint64_t next;
		if (rd_or_die(pos + ix->list_next.off, &next, sizeof(next)))
			goto changed;
		pos = next;
	}
	return 0;
changed:
	s->n = first;
	return -EFAULT;
}

static void take_snapshot(struct snapshot *s)
{
	s->n = 0;
	s->skipped = 0;
	for (int i = 0; i < ninst; i++) {
		int r = -EFAULT;
		for (int t = 0; t < READ_RETRIES && r; t++)
			r = read_instance(&inst[i], i, s);
		if (r)
			die("process %d changed its cache list too fast to be read; try again",
			    (int)target_pid);
	}
}

/* ---- Finding the root: /proc/PID/maps and the ELF files mapped ------------------------- */

struct mapped_file {
	char path[PATH_MAX];
	uint64_t base; /* start of its mapping at file offset 0 */
	unsigned long ino;
};

static int elf_find_root(const char *path, uint64_t *vaddr, int *is_dyn)
{
	char buf[PATH_MAX + 32];
	int fd = -1;
	/* Through the target's root first: right inside containers and chroots. */
	if (snprintf(buf, sizeof(buf), "/proc/%d/root%s", (int)target_pid, path) < (int)sizeof(buf))
		fd = open(buf, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
		close(fd);
		return -1;
	}
	size_t sz = (size_t)st.st_size;
	const unsigned char *f = mmap(NULL, sz, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		return -1;
	int found = -1;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    (eh->e_type != ET_DYN && eh->e_type != ET_EXEC) ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > sz ||
	    (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > sz - eh->e_shoff)
		goto out;
	*is_dyn = eh->e_type == ET_DYN;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
	const char *shstr = NULL;
	if (eh->e_shstrndx < eh->e_shnum && sh[eh->e_shstrndx].sh_offset < sz)
		shstr = (const char *)f + sh[eh->e_shstrndx].sh_offset;
	/* The dynamic symbol table, then the static one. */
	for (int pass = 0; pass < 2 && found < 0; pass++) {
		uint32_t want = pass == 0 ? SHT_DYNSYM : SHT_SYMTAB;
		for (unsigned i = 0; i < eh->e_shnum && found < 0; i++) {
			if (sh[i].sh_type != want || sh[i].sh_link >= eh->e_shnum ||
			    sh[i].sh_offset > sz || sh[i].sh_size > sz - sh[i].sh_offset)
				continue;
			const Elf64_Shdr *strs = &sh[sh[i].sh_link];
			if (strs->sh_offset > sz || strs->sh_size > sz - strs->sh_offset)
				continue;
			const Elf64_Sym *sym = (const Elf64_Sym *)(f + sh[i].sh_offset);
			size_t nsym = sh[i].sh_size / sizeof(Elf64_Sym);
			const char *str = (const char *)f + strs->sh_offset;
			for (size_t k = 0; k < nsym; k++) {
				if (sym[k].st_name >= strs->sh_size || sym[k].st_shndx == SHN_UNDEF)
					continue;
				const char *nm = str + sym[k].st_name;
				size_t room = strs->sh_size - sym[k].st_name;
				if (strnlen(nm, room) < room && !strcmp(nm, SHEAF_IX_SYMBOL)) {
					*vaddr = sym[k].st_value;
					found = 0;
					break;
				}
			}
		}
	}
	/* A stripped static executable keeps its section headers. */
	for (unsigned i = 0; i < eh->e_shnum && found < 0 && shstr; i++) {
		size_t room = sh[eh->e_shstrndx].sh_size;
		if (sh[i].sh_name < room && !strcmp(shstr + sh[i].sh_name, SHEAF_IX_SECTION)) {
			*vaddr = sh[i].sh_addr;
			found = 0;
		}
	}
	if (found == 0 && *is_dyn) {
		/* Load bias: the mapping at offset 0 holds the lowest PT_LOAD, page aligned. */
		const Elf64_Phdr *ph = (const Elf64_Phdr *)(f + eh->e_phoff);
		uint64_t lo = UINT64_MAX;
		if (eh->e_phoff < sz &&
		    (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) <= sz - eh->e_phoff)
			for (unsigned i = 0; i < eh->e_phnum; i++)
				if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < lo)
					lo = ph[i].p_vaddr & ~(uint64_t)(sysconf(_SC_PAGESIZE) - 1);
		*vaddr -= lo == UINT64_MAX ? 0 : lo;
	}
out:
	munmap((void *)f, sz);
	return found;
}

/* A name as the table and the messages show it: control characters as \xNN, so that a
 * cache's name keeps its row (a newline in it broke the table) and a process's name
 * cannot move the terminal's cursor; other bytes as they are.  @out holds 4 per byte. */
static void show_name(char *out, const char *name)
{
	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			out += sprintf(out, "\\x%02x", *p);
		else
			*out++ = (char)*p;
	}
	*out = 0;
}

static void read_comm(char *comm, size_t len)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/comm", (int)target_pid);
	FILE *f = fopen(p, "re");
	comm[0] = 0;
	if (f) {
		if (fgets(comm, (int)len, f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
}

static void find_instances(void)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d", (int)target_pid);
	struct stat st;
	if (stat(p, &st) != 0)
		die("no process with PID %d", (int)target_pid);
	snprintf(p, sizeof(p), "/proc/%d/maps", (int)target_pid);
	FILE *f = fopen(p, "re");
	if (!f) {
		if (errno == EACCES || errno == EPERM)
			die_permission();
		if (errno == ENOENT || errno == ESRCH)
			die("no process with PID %d", (int)target_pid);
		die("cannot open %s: %s", p, strerror(errno));
	}
	struct mapped_file *files = NULL;
	size_t nfiles = 0, cap = 0;
	char line[PATH_MAX + 256];
	bool any = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off;
		unsigned long ino;
		int pathpos = 0;
		char perms[8];
		any = true;
		if (sscanf(line, "%llx-%llx %7s %llx %*x:%*x %lu %n", &start, &end, perms, &off,
			   &ino, &pathpos) < 5 ||
		    !pathpos || line[pathpos] != '/' || ino == 0)
			continue;
		char *path = line + pathpos;
		path[strcspn(path, "\n")] = 0;
		if (off != 0 || strstr(path, " (deleted)"))
			continue;
		bool seen = false;
		for (size_t i = 0; i < nfiles; i++)
			if (files[i].ino == ino && !strcmp(files[i].path, path))
				seen = true;
		if (seen)
			continue;
		if (nfiles == cap) {
			cap = cap ? 2 * cap : 64;
			files = realloc(files, cap * sizeof(*files));
			if (!files)
				die("out of memory");
		}
		snprintf(files[nfiles].path, sizeof(files[nfiles].path), "%s", path);
		files[nfiles].base = start;
		files[nfiles].ino = ino;
		nfiles++;
	}
	int read_err = ferror(f);
	fclose(f);
	if (!any) {
		/* An empty maps file: a zombie or a kernel thread, or a read refused. */
		if (read_err)
			die_permission();
		die("process %d has no memory map (a kernel thread or a zombie): it does not use Sheaf",
		    (int)target_pid);
	}
	for (size_t i = 0; i < nfiles && ninst < MAX_INSTANCES; i++) {
		uint64_t vaddr = 0;
		int is_dyn = 0;
		if (elf_find_root(files[i].path, &vaddr, &is_dyn) != 0)
			continue;
		struct instance *in = &inst[ninst];
		memset(in, 0, sizeof(*in));
		snprintf(in->path, sizeof(in->path), "%s", files[i].path);
		in->root_addr = (is_dyn ? files[i].base : 0) + vaddr;
		if (rd_or_die(in->root_addr, &in->ix, sizeof(in->ix)) != 0)
			continue;
		const char *why = instance_setup(in);
		if (why) {
			static char path[4 * sizeof(in->path)];
			show_name(path, in->path);
			fprintf(stderr, "%s: %s: %s (ignored)\n", prog, path, why);
			continue;
		}
		ninst++;
	}
	free(files);
	if (!ninst) {
		char comm[64], shown[4 * sizeof(comm)];
		read_comm(comm, sizeof(comm));
		show_name(shown, comm);
		die("process %d (%s) does not use Sheaf: no Sheaf library or program is mapped in it",
		    (int)target_pid, shown);
	}
}

/* ---- Output ---------------------------------------------------------------------------- */

enum sort_key {
	SORT_MEM,
	SORT_NAME,
	SORT_SIZE,
	SORT_USED,
	SORT_TOTAL,
	SORT_SLABS,
	SORT_SHEAVES,
	SORT_BARNS,
	SORT_HIT
};
static const struct {
	const char *name;
	enum sort_key key;
} sort_names[] = {
	{ "mem", SORT_MEM },
	{ "name", SORT_NAME },
	{ "size", SORT_SIZE },
	{ "used", SORT_USED },
	{ "total", SORT_TOTAL },
	{ "slabs", SORT_SLABS },
	{ "sheaves", SORT_SHEAVES },
	{ "barns", SORT_BARNS },
	{ "hit", SORT_HIT },
	/* slabtop's letters where they mean the same. */
	{ "c", SORT_MEM },
	{ "n", SORT_NAME },
	{ "s", SORT_SIZE },
	{ "a", SORT_USED },
	{ "o", SORT_TOTAL },
	{ "l", SORT_SLABS },
};
static enum sort_key sort_by = SORT_MEM;

/* Objects the program holds: in use on slabs, minus those cached in sheaves. */
static uint64_t used_objs(const struct cache_info *c)
{
	return c->objects_inuse > c->objects_cached ? c->objects_inuse - c->objects_cached : 0;
}

/* Events that mark one entry into the slow path of a sheaf operation: the main sheaf
 * was empty or full and had to be exchanged (swap with the spare, or a trip to the
 * barn, which a refill or flush follows when it fails). */
static const char *const slow_entry_events[] = {
	"SHEAF_SWAP", "BARN_GET", "BARN_GET_FAIL", "BARN_PUT", "BARN_PUT_FAIL",
};

/* Allocations and frees (*all), and how many of them the fast path served without
 * entering the slow path: operations served by slabs (ALLOC_SLOWPATH, FREE_SLOWPATH)
 * and sheaf exchanges count as misses (docs/introspection.md). */
static uint64_t fast_ops(const struct cache_info *c, uint64_t *all)
{
	const struct instance *in = &inst[c->inst];
	const struct sheaf_ix_root *ix = &in->ix;
	uint64_t slow = c->ev[ix->ev_alloc_slow] + c->ev[ix->ev_free_slow];
	*all = c->ev[ix->ev_alloc_fast] + c->ev[ix->ev_free_fast] + slow;
	for (uint32_t e = 0; e < ix->stat_nr; e++)
		for (size_t k = 0; k < sizeof(slow_entry_events) / sizeof(slow_entry_events[0]);
		     k++)
			if (!strcmp(in->ev_name[e], slow_entry_events[k]))
				slow += c->ev[e];
	return slow < *all ? *all - slow : 0;
}

/* Fast-path hit rate in per mille, or -1 before any allocation or free. */
static int hit_permille(const struct cache_info *c)
{
	uint64_t all, fast = fast_ops(c, &all);
	return all ? (int)(fast * 1000 / all) : -1;
}

static uint64_t sort_val(const struct cache_info *c)
{
	switch (sort_by) {
	case SORT_SIZE:
		return c->object_size;
	case SORT_USED:
		return used_objs(c);
	case SORT_TOTAL:
		return c->objects_total;
	case SORT_SLABS:
		return c->slabs;
	case SORT_SHEAVES:
		return c->objects_in_pcs;
	case SORT_BARNS:
		return c->objects_in_barns;
	case SORT_HIT:
		return (uint64_t)(hit_permille(c) + 1);
	default:
		return c->bytes_from_os;
	}
}

static int cmp_cache(const void *a, const void *b)
{
	const struct cache_info *x = a, *y = b;
	if (sort_by != SORT_NAME) {
		uint64_t vx = sort_val(x), vy = sort_val(y);
		if (vx != vy)
			return vx < vy ? 1 : -1; /* largest first, like slabtop */
	}
	return strcmp(x->name, y->name);
}

static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "KMGTP";
	if (v < 1024) {
		snprintf(buf, len, "%lluB", (unsigned long long)v);
		return buf;
	}
	double d = (double)v / 1024;
	int u = 0;
	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f%c", d, units[u]);
	return buf;
}

static const char *mode_name(const struct instance *in)
{
	return in->mode == 1 ? "per-CPU" : "per-thread";
}

static void print_table(const struct snapshot *s, const char *comm)
{
	uint64_t used = 0, total = 0, mem = 0, caches_used = 0;
	for (size_t i = 0; i < s->n; i++) {
		used += used_objs(&s->c[i]);
		total += s->c[i].objects_total;
		mem += s->c[i].bytes_from_os;
		caches_used += s->c[i].objects_total ? 1 : 0;
	}
	char b1[32], b2[32], b3[32], cmd[256];
	show_name(cmd, strlen(comm) < 64 ? comm : "?");
	printf("sheafinfo: process %d (%s), %zu caches (%llu with slabs)", (int)target_pid, cmd,
	       s->n, (unsigned long long)caches_used);
	if (s->skipped)
		printf(", %u changing too fast to read", s->skipped);
	printf("\n");
	for (int i = 0; i < ninst; i++) {
		const struct instance *in = &inst[i];
		/* Two copies of Sheaf (say libsheaf.so and the preload): numbered, and
		 * each cache's name carries its copy's number. */
		char pre[16] = "  ";
		static char path[4 * sizeof(in->path)]; /* the file's name is anyone's */
		show_name(path, in->path);
		if (ninst > 1)
			snprintf(pre, sizeof(pre), "  [%d] ", i);
		if (!in->initialised) {
			printf("%s%s: Sheaf %s, not initialised yet\n", pre, path,
			       in->ix.lib_version);
			continue;
		}
		printf("%s%s: Sheaf %s, %s sheaves, %d CPUs, %d node%s; heap %s mapped (cap %s), %s given back\n",
		       pre, path, in->ix.lib_version, mode_name(in), in->ncpus, in->nnodes,
		       in->nnodes > 1 ? "s" : "", human(in->heap_mapped, b1, sizeof(b1)),
		       human(in->heap_cap, b2, sizeof(b2)),
		       human(in->heap_returned, b3, sizeof(b3)));
	}
	printf("  objects used / total: %llu / %llu (%.1f%%), slab memory %s\n\n",
	       (unsigned long long)used, (unsigned long long)total,
	       total ? 100.0 * (double)used / (double)total : 0.0, human(mem, b1, sizeof(b1)));
	printf("%-24s %7s %10s %10s %7s %8s %8s %9s %6s\n", "NAME", "OBJSIZE", "USED", "TOTAL",
	       "SLABS", "SHEAVES", "BARNS", "MEMORY", "HIT%");
	for (size_t i = 0; i < s->n; i++) {
		const struct cache_info *c = &s->c[i];
		int h = hit_permille(c);
		char hit[16];
		if (h < 0)
			snprintf(hit, sizeof(hit), "-");
		else
			snprintf(hit, sizeof(hit), "%d.%d", h / 10, h % 10);
		char shown[4 * sizeof(c->name)], name[sizeof(shown) + 16];
		show_name(shown, c->name);
		if (ninst > 1)
			snprintf(name, sizeof(name), "%s [%d]", shown, c->inst);
		else
			snprintf(name, sizeof(name), "%s", shown);
		printf("%-24s %7llu %10llu %10llu %7llu %8llu %8llu %9s %6s\n", name,
		       (unsigned long long)c->object_size, (unsigned long long)used_objs(c),
		       (unsigned long long)c->objects_total, (unsigned long long)c->slabs,
		       (unsigned long long)c->objects_in_pcs,
		       (unsigned long long)c->objects_in_barns,
		       human(c->bytes_from_os, b1, sizeof(b1)), hit);
	}
}

/* Length of the UTF-8 sequence at @s (2-4), or 0 when it is not a valid one (a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
static int utf8_len(const unsigned char *s)
{
	unsigned char c = s[0];
	int n = c >= 0xc2 && c <= 0xdf ? 2 :
		c >= 0xe0 && c <= 0xef ? 3 :
		c >= 0xf0 && c <= 0xf4 ? 4 :
					 0;
	unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
	unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
	if (!n || s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* A string as JSON: quotes and backslashes escaped, control characters as \u00XX, valid
 * UTF-8 as it is and any other byte as U+FFFD (a cache's name and the command name
 * are any bytes; the library's JSON statistics write them the same way). */
static void json_str(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	putchar('"');
	while (*s) {
		unsigned char ch = *s;
		int n = ch >= 0x80 ? utf8_len(s) : 1;
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			printf("\\u%04x", ch);
		else if (!n)
			fputs("\\ufffd", stdout);
		else
			fwrite(s, 1, (size_t)n, stdout);
		s += n ? n : 1;
	}
	putchar('"');
}

static void print_json(const struct snapshot *s, const char *comm)
{
	printf("{\"pid\":%d,\"command\":", (int)target_pid);
	json_str(comm);
	printf(",\"time\":%lld,\"instances\":[", (long long)time(NULL));
	for (int i = 0; i < ninst; i++) {
		const struct instance *in = &inst[i];
		printf("%s{\"library\":", i ? "," : "");
		json_str(in->path);
		printf(",\"version\":");
		json_str(in->ix.lib_version);
		printf(",\"initialised\":%s", in->initialised ? "true" : "false");
		if (in->initialised)
			printf(",\"mode\":\"%s\",\"cpus\":%d,\"nodes\":%d", mode_name(in),
			       in->ncpus, in->nnodes);
		printf(",\"heap_cap\":%llu,\"heap_mapped\":%llu,\"heap_returned\":%llu}",
		       (unsigned long long)in->heap_cap, (unsigned long long)in->heap_mapped,
		       (unsigned long long)in->heap_returned);
	}
	printf("],\"skipped\":%u,\"caches\":[", s->skipped);
	for (size_t i = 0; i < s->n; i++) {
		const struct cache_info *c = &s->c[i];
		const struct instance *in = &inst[c->inst];
		printf("%s\n{\"name\":", i ? "," : "");
		json_str(c->name);
		printf(",\"instance\":%d", c->inst);
#define G(f) printf(",\"" #f "\":%llu", (unsigned long long)c->f)
		G(object_size);
		G(slot_size);
		G(objs_per_slab);
		G(order);
		G(sheaf_capacity);
		G(slabs);
		G(partial_slabs);
		G(objects_total);
		G(objects_inuse);
		G(objects_cached);
		G(objects_in_pcs);
		G(objects_in_barns);
		G(barn_full);
		G(barn_empty);
		G(rcu_inflight_sheaves);
		G(rcu_inflight_objects);
		G(bytes_from_os);
		G(bytes_returned);
		G(percpu_slots);
		G(barn_locks);
#undef G
		printf(",\"objects_used\":%llu", (unsigned long long)used_objs(c));
		int h = hit_permille(c);
		if (h < 0)
			printf(",\"fastpath_hit_rate\":null");
		else
			printf(",\"fastpath_hit_rate\":%d.%03d", h / 1000, h % 1000);
		printf(",\"events\":{");
		for (uint32_t e = 0; e < in->ix.stat_nr; e++)
			printf("%s\"%s\":%llu", e ? "," : "", in->ev_name[e],
			       (unsigned long long)c->ev[e]);
		printf("}}");
	}
	printf("\n]}\n");
}

/* ---- Main ------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [--json] [-w SECONDS [-n COUNT]] [-s KEY] PID\n"
		"Show the caches of a running process that uses Sheaf (linked or preloaded).\n"
		"  -j, --json          one JSON object instead of the table\n"
		"  -w, --watch SECS    refresh every SECS seconds (fractions allowed), like slabtop\n"
		"  -n, --count N       with -w: stop after N refreshes (default: until interrupted)\n"
		"  -s, --sort KEY      mem (default), name, size, used, total, slabs, sheaves, barns, hit\n"
		"                      (or slabtop's letters c, n, s, a, o, l)\n"
		"  -V, --version       print the version\n"
		"Only the process's own user or root may read it (the kernel checks).  Figures\n"
		"are a snapshot of a running process, read without stopping it.\n",
		prog);
}

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "watch", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'n' },
		{ "sort", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = false;
	double watch = 0;
	long count = -1;
	int o;
	while ((o = getopt_long(argc, argv, "jw:n:s:hV", lopts, NULL)) != -1) {
		char *end;
		switch (o) {
		case 'j':
			json = true;
			break;
		case 'w':
			errno = 0;
			watch = strtod(optarg, &end);
			if (errno || *end || !(watch > 0) || watch > 86400)
				die_usage("-w: '%s' is not a number of seconds in (0, 86400]",
					  optarg);
			break;
		case 'n':
			errno = 0;
			count = strtol(optarg, &end, 10);
			if (errno || *end || count < 1)
				die_usage("-n: '%s' is not a positive count", optarg);
			break;
		case 's': {
			bool ok = false;
			for (size_t i = 0; i < sizeof(sort_names) / sizeof(sort_names[0]); i++)
				if (!strcmp(optarg, sort_names[i].name)) {
					sort_by = sort_names[i].key;
					ok = true;
				}
			if (!ok)
				die_usage(
					"-s: unknown key '%s' (mem, name, size, used, total, slabs, sheaves, barns, hit)",
					optarg);
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("sheafinfo %s (introspection version %d)\n", SHEAFINFO_VERSION,
			       SHEAF_IX_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	char *end;
	errno = 0;
	long pid = strtol(argv[optind], &end, 10);
	if (errno || *end || pid <= 0 || pid > INT_MAX)
		die_usage("'%s' is not a process ID", argv[optind]);
	target_pid = (pid_t)pid;
	if (count > 0 && !(watch > 0))
		die_usage("-n needs -w");

	find_instances();
	char comm[64];
	read_comm(comm, sizeof(comm));
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	bool tty = isatty(STDOUT_FILENO);
	struct snapshot s = { NULL, 0, 0, 0 };
	for (long iter = 0; !stop; iter++) {
		take_snapshot(&s);
		qsort(s.c, s.n, sizeof(*s.c), cmp_cache);
		if (watch > 0 && tty && !json)
			fputs("\033[H\033[J", stdout); /* home, clear: slabtop's refresh */
		else if (iter && !json)
			putchar('\n');
		if (json)
			print_json(&s, comm);
		else
			print_table(&s, comm);
		fflush(stdout);
		if (!(watch > 0) || (count > 0 && iter + 1 >= count))
			break;
		struct timespec ts = { (time_t)watch,
				       (long)((watch - (double)(time_t)watch) * 1e9) };
		while (!stop && nanosleep(&ts, &ts) == -1 && errno == EINTR)
			;
		if (kill(target_pid, 0) != 0 && errno == ESRCH)
			die_gone();
	}
	free(s.c);
	return 0;
}
