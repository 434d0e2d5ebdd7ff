/* SPDX-License-Identifier: MIT */
/*
 * stats.c - statistics defined once (sheaf_stats.h SHEAF_STAT_EVENTS), exported as a
 * versioned struct, aligned text and JSON from one emitter (docs/stats.md).
 */
#include <errno.h>
#include <string.h>

#include "cache/cache.h"

static const char *const stat_names[SHEAF_STAT_NR] = {
#define SHEAF_X_NAME(n, d) #n,
	SHEAF_STAT_EVENTS(SHEAF_X_NAME)
#undef SHEAF_X_NAME
};

SHEAF_API const char *sheaf_stat_name(enum sheaf_stat_item item)
{
	return (unsigned)item < SHEAF_STAT_NR ? stat_names[item] : NULL;
}

/* Objects in the prefilled sheaves the program holds: taken from the slabs (so in
 * objects_inuse) but not handed out yet (sheaf_stats.h objects_cached). */
static uint64_t prefilled_objects(struct sheaf_cache *c)
{
	uint64_t n = 0;
	if (c->is_meta)
		return 0; /* lends none; fork leaves its lock out (cache/init.c walk_locks) */
	sheaf_mutex_lock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	const struct sheaf_list *pos;
	for (pos = c->prefilled.next; pos != &c->prefilled; pos = pos->next)
		n += sheaf_rd(sheaf_container_of(pos, struct sheaf_sheaf, link)->size);
	sheaf_mutex_unlock(&c->prefilled_lock, SHEAF_LOCK_PREFILLED);
	return n;
}

/* The smallest size a caller's struct can have: its size and version words.  A smaller
 * st->size got its size word written past the end of what the caller said it had (a
 * struct of 1-3 bytes took 4); now -EINVAL with nothing written. */
#define STATS_HEAD (2 * sizeof(uint32_t))

SHEAF_API int sheaf_stats_get(struct sheaf_cache *c, struct sheaf_stats *st)
{
	if (!c || !st)
		return -EINVAL;
	if (!sheaf_cache_check(c))
		return -EINVAL; /* a destroyed or foreign handle: reported */
	uint32_t want = st->size ? st->size : (uint32_t)sizeof(*st);
	if (want < STATS_HEAD)
		return -EINVAL; /* no room for size and version: nothing written */
	struct sheaf_stats tmp;
	memset(&tmp, 0, sizeof(tmp));
	tmp.size = (uint32_t)sizeof(tmp);
	tmp.version = SHEAF_STATS_VERSION;
	snprintf(tmp.name, sizeof(tmp.name), "%s", c->name);
	sheaf_pcs_harvest_self(c); /* per-thread mode: exact for the caller's own operations */
	sheaf_pcs_stats_events(c, tmp.events);
	sheaf_pcs_stats_gauge(c, &tmp.objects_in_pcs, &tmp.percpu_slots);
	tmp.object_size = c->object_size;
	tmp.slot_size = c->slot_size;
	tmp.objs_per_slab = c->objs_per_slab;
	tmp.slab_order = c->order;
	tmp.sheaf_capacity = atomic_load(&c->sheaf_capacity);
	uint64_t barn_objs = 0;
	for (int i = 0; i < sheaf_g.nnodes; i++) {
		sheaf_slab_node_counts(c->node[i], &tmp.slabs, &tmp.partial_slabs,
				       &tmp.objects_inuse);
		/* A shared barn counts once; a metadata cache's is always empty, its lock
		 * never taken (cache/init.c walk_locks). */
		if (!c->is_meta && !sheaf_barn_is_alias(c, i))
			sheaf_barn_counts(c->node[i]->barn, &tmp.barn_full, &tmp.barn_empty,
					  &barn_objs, &tmp.barn_locks, &tmp.barn_objects);
	}
	tmp.objects_in_barns = barn_objs;
	tmp.objects_total = tmp.slabs * c->objs_per_slab;
	tmp.rcu_inflight_sheaves = (uint64_t)atomic_load(&c->rcu_inflight_sheaves);
	tmp.rcu_inflight_objects = (uint64_t)atomic_load(&c->rcu_inflight_objects);
	tmp.objects_cached = tmp.objects_in_pcs + tmp.objects_in_barns + tmp.rcu_inflight_objects +
			     prefilled_objects(c);
	tmp.bytes_from_os = tmp.slabs * (SHEAF_PAGE_SIZE << c->order);
	tmp.bytes_returned = atomic_load(&c->bytes_returned);
	tmp.nodes = (uint64_t)sheaf_g.nnodes;
	tmp.pcs_lock_waits = atomic_load_explicit(&c->pcs_lock_waits, memory_order_relaxed);
	tmp.capacity_grows = atomic_load_explicit(&c->capacity_grows, memory_order_relaxed);
	tmp.capacity_shrinks = atomic_load_explicit(&c->capacity_shrinks, memory_order_relaxed);
	tmp.capacity_default = c->capacity_default;
	memcpy(st, &tmp, SHEAF_MIN((size_t)want, sizeof(tmp)));
	st->size = SHEAF_MIN(want, (uint32_t)sizeof(tmp));
	return 0;
}

static void zero_pcs(struct sheaf_cache *c, struct sheaf_pcs *pcs, void *arg)
{
	(void)c;
	(void)arg;
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		sheaf_wr(pcs->stat[i], 0);
}

SHEAF_API void sheaf_stats_reset(struct sheaf_cache *c)
{
	/* NULL does nothing (README "Errors"); a destroyed or foreign handle is reported
	 * (it was walked as if live until 2026-11-29: adversarial review). */
	if (!c || !sheaf_cache_check(c))
		return;
	/* Per-thread mode: the caller's own fast-path operations since its last slow path
	 * are folded in first, to be zeroed too (they showed after the reset until
	 * 2026-11-29: 19 allocations made before it; per-CPU mode harvests each CPU as it
	 * locks it). */
	sheaf_pcs_harvest_self(c);
	sheaf_pcs_for_each(c, zero_pcs, NULL);
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		atomic_store(&c->stat_atomic[i], 0);
}

/* ---- One emitter, two formats ----------------------------------------------------- */

/* clang-format off */
#define GAUGES(X)                                                                                          \
	X(object_size) X(slot_size) X(objs_per_slab) X(slab_order) X(sheaf_capacity) X(slabs) X(partial_slabs) \
	X(objects_total) X(objects_inuse) X(objects_cached) X(objects_in_pcs) X(objects_in_barns) X(barn_full) \
	X(barn_empty) X(rcu_inflight_sheaves) X(rcu_inflight_objects) X(bytes_from_os) X(bytes_returned)     \
	X(nodes) X(percpu_slots) X(barn_locks) X(barn_objects) X(pcs_lock_waits) \
	X(capacity_default) X(capacity_grows) X(capacity_shrinks)
/* clang-format on */

/* Length of the UTF-8 sequence at @s (1-4), or 0 when it is not a valid one (a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
static int utf8_len(const unsigned char *s)
{
	unsigned char c = s[0];
	int n = c >= 0xc2 && c <= 0xdf ? 2 :
		c >= 0xe0 && c <= 0xef ? 3 :
		c >= 0xf0 && c <= 0xf4 ? 4 :
					 0;
	if (!n)
		return 0;
	unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* @s as a JSON string: quotes and backslashes escaped, control characters as \u00XX,
 * valid UTF-8 as it is and any other byte as U+FFFD (a cache's name is the program's,
 * and the copy in sheaf_stats is cut at 47 bytes, maybe inside a character;
 * sheaf_stats.h promises one JSON object). */
static void json_string(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	fputc('"', f);
	while (*s) {
		unsigned char ch = *s;
		if (ch == '"' || ch == '\\') {
			fprintf(f, "\\%c", ch);
		} else if (ch < 0x20 || ch == 0x7f) {
			fprintf(f, "\\u%04x", ch);
		} else if (ch >= 0x80) {
			int n = utf8_len(s);
			if (n) {
				fwrite(s, 1, (size_t)n, f);
				s += n;
				continue;
			}
			fputs("\\ufffd", f);
		} else {
			fputc(ch, f);
		}
		s++;
	}
	fputc('"', f);
}

/* One cache's statistics, already read, as text or JSON. */
static void emit_stats(const struct sheaf_stats *sp, FILE *f, bool json)
{
	const struct sheaf_stats st = *sp;
	if (json) {
		fputs("{\"name\":", f);
		json_string(f, st.name);
		fprintf(f, ",\"version\":%u,\"mode\":\"%s\",\"events\":{", st.version,
			sheaf_percpu_mode());
		for (int i = 0; i < SHEAF_STAT_NR; i++)
			fprintf(f, "%s\"%s\":%llu", i ? "," : "", stat_names[i],
				(unsigned long long)st.events[i]);
		fprintf(f, "},\"gauges\":{");
		int first = 1;
#define X(g)                                                                         \
	fprintf(f, "%s\"%s\":%llu", first ? "" : ",", #g, (unsigned long long)st.g); \
	first = 0;
		GAUGES(X)
#undef X
		fprintf(f, "}}");
		return;
	}
	/* sheaf_fmt writes the name's control characters as \xNN: a newline in it broke
	 * the block's first line in two (until 2026-11-29). */
	char head[4 * sizeof(st.name) + 48];
	sheaf_fmt(head, sizeof(head), "cache %s (%s)", st.name, sheaf_percpu_mode());
	fprintf(f, "%s\n", head);
	for (int i = 0; i < SHEAF_STAT_NR; i++)
		fprintf(f, "  %-24s : %llu\n", stat_names[i], (unsigned long long)st.events[i]);
#define X(g) fprintf(f, "  %-24s : %llu\n", #g, (unsigned long long)st.g);
	GAUGES(X)
#undef X
}

static void emit(struct sheaf_cache *c, FILE *f, bool json)
{
	struct sheaf_stats st = { .size = sizeof(st) };
	sheaf_stats_get(c, &st);
	emit_stats(&st, f, json);
}

/* A NULL cache is reported like any bad handle (it printed nothing, silently, until
 * 2026-11-29); a NULL stream prints nothing. */
SHEAF_API void sheaf_stats_print(struct sheaf_cache *c, FILE *f)
{
	if (sheaf_cache_check(c) && f)
		emit(c, f, false);
}

SHEAF_API void sheaf_stats_print_json(struct sheaf_cache *c, FILE *f)
{
	if (sheaf_cache_check(c) && f) {
		emit(c, f, true);
		fputc('\n', f);
	}
}

/* The statistics of the listed cache with the smallest id at or above *@cursor, which
 * moves past it; false when there is none.  Read under caches_lock, written after it
 * (print_all): a stream allocates its buffer at its first write, and under the preload
 * library that malloc may create a size class, which takes caches_lock -- printing
 * under it hung for good (sheaf_stats_print_all to a fopen'd file or an open_memstream,
 * 2026-11-29).  By id, not by place in the list: a cache destroyed meanwhile moved the
 * later ones up, and the one after it was left out although it lived through the
 * whole print (until 2026-11-29).  Ids are unique among live caches: none is printed
 * twice; a cache created meanwhile may be (if its id is above the cursor) or not. */
static bool next_stats(uint32_t *cursor, struct sheaf_stats *st)
{
	struct sheaf_cache *best = NULL;
	sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	for (struct sheaf_list *pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches;
	     pos = pos->next) {
		struct sheaf_cache *c = sheaf_container_of(pos, struct sheaf_cache, cache_list);
		if (c->id >= *cursor && (!best || c->id < best->id))
			best = c;
	}
	bool found = false;
	if (best) {
		*cursor = best->id + 1;
		memset(st, 0, sizeof(*st));
		st->size = sizeof(*st);
		found = sheaf_stats_get(best, st) == 0;
	}
	sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
	return found;
}

static void print_all(FILE *f, bool json)
{
	struct sheaf_stats st;
	uint32_t cursor = 0;
	for (int n = 0; atomic_load(&sheaf_g.init_state) == 2 && next_stats(&cursor, &st); n++) {
		if (json)
			fputs(n ? ",\n" : "\n", f);
		emit_stats(&st, f, json);
	}
}

SHEAF_API void sheaf_stats_print_all(FILE *f)
{
	if (f)
		print_all(f, false);
}

SHEAF_API void sheaf_stats_print_all_json(FILE *f)
{
	if (!f)
		return;
	fputc('[', f);
	print_all(f, true);
	fputs("\n]\n", f);
}

SHEAF_API int sheaf_global_stats_get(struct sheaf_global_stats *st)
{
	if (!st)
		return -EINVAL;
	uint32_t want = st->size ? st->size : (uint32_t)sizeof(*st);
	if (want < STATS_HEAD)
		return -EINVAL;
	struct sheaf_global_stats tmp;
	memset(&tmp, 0, sizeof(tmp));
	tmp.size = sizeof(tmp);
	tmp.version = SHEAF_STATS_VERSION;
	if (atomic_load(&sheaf_g.init_state) == 2) {
		sheaf_mutex_lock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
		tmp.heap_reserved = sheaf_heap.blocks_mapped << SHEAF_BLOCK_SHIFT;
		tmp.heap_mapped = sheaf_heap.mapped_bytes;
		tmp.heap_returned = sheaf_heap.returned_bytes;
		sheaf_mutex_unlock(&sheaf_heap.lock, SHEAF_LOCK_HEAP);
		tmp.meta_bytes = sheaf_meta_bytes();
		sheaf_mutex_lock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		struct sheaf_list *pos;
		for (pos = sheaf_reg.caches.next; pos != &sheaf_reg.caches; pos = pos->next)
			tmp.caches++;
		sheaf_mutex_unlock(&sheaf_reg.caches_lock, SHEAF_LOCK_CACHES);
		tmp.nodes = (uint64_t)sheaf_g.nnodes;
		for (int i = 0; i < sheaf_g.nnodes; i++)
			tmp.memory_nodes += sheaf_g.node_has_mem[i] ? 1 : 0;
		tmp.cpus = (uint64_t)sheaf_g.ncpus;
	}
	memcpy(st, &tmp, SHEAF_MIN((size_t)want, sizeof(tmp)));
	st->size = SHEAF_MIN(want, (uint32_t)sizeof(tmp));
	return 0;
}
