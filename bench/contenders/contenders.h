/* SPDX-License-Identifier: MIT */
/*
 * contenders.h - the allocators under test.  A contender is a malloc/free pair
 * of a peer loaded with dlopen (glibc, jemalloc, mimalloc, tcmalloc), a Sheaf
 * object cache or Sheaf's malloc (linked), a DPDK mempool (dpdk.c), or the
 * no-allocator floor; a pool is a contender bound to one object size.
 *
 * Every allocator is called through one indirect call per operation (a
 * function pointer from dlsym, or Sheaf's exported function), so none of them
 * gets an inlined fast path the others lack.  DPDK's get/put are inline in its
 * headers; they are wrapped in one out-of-line function each (dpdk.c), which
 * is the same one call.
 */
#ifndef SHEAF_BENCH_CONTENDERS_H
#define SHEAF_BENCH_CONTENDERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct sheaf_cache;
struct sheaf_cache_args;

/* ---- allocators ------------------------------------------------------------ */

enum bench_kind {
	BK_FLOOR,  /* no allocator: preallocated objects, for the hand-off floor */
	BK_MALLOC, /* malloc/free pair of functions */
	BK_SHEAF,  /* a Sheaf object cache */
	BK_DPDK,   /* a DPDK rte_mempool with per-lcore cache */
};

#define BENCH_API_MALLOC 1u
#define BENCH_API_CACHE  2u
/* The same Sheaf with its free checks off (SHEAF_FREE_CHECKS=0): only in the phases
 * that measure what the checks cost (fastpath pair and batch100). */
#define BENCH_API_NOCHECKS 4u
/* The checked side of that comparison, loaded like the nochecks copies (a private copy,
 * SHEAF_FREE_CHECKS=1): only in the fast-path pair and batch100 phases. */
#define BENCH_API_CHECKSCOPY 8u

struct bench_alloc {
	const char *name; /* short id used in CSV and --allocs: "mimalloc" */
	enum bench_kind kind;
	unsigned apis; /* BENCH_API_*: in which comparisons it takes part */
	bool peer;     /* counts for "best peer" */
	bool available;
	/* A private copy of a libsheaf.so (load_sheaf_copy): its caches are not the
	 * linked library's, so the linked statistics calls must not see them. */
	bool copy;
	/* A previous-revision contender: the name of the current contender it is
	 * compared with ("sheaf" for "sheaf-prev"), else NULL. */
	const char *prev_of;
	char how[200]; /* how it was loaded, or why it is not available */
	void *(*malloc_fn)(size_t);
	void (*free_fn)(void *);
	unsigned cache_flags; /* BK_SHEAF: SHEAF_* flags of the caches */
	unsigned capacity;    /* BK_SHEAF: sheaf_capacity of the caches (0: Sheaf's default) */
	/* BK_SHEAF: the library's entry points (the linked ones, or a private copy's). */
	struct sheaf_cache *(*c_create)(const char *, size_t, const struct sheaf_cache_args *);
	void (*c_destroy)(struct sheaf_cache *);
	void *(*c_alloc)(struct sheaf_cache *);
	void (*c_free)(struct sheaf_cache *, void *);
	/* BK_SHEAF: the bulk calls (NULL where the library has none). */
	size_t (*c_alloc_bulk)(struct sheaf_cache *, size_t, void **);
	void (*c_free_bulk)(struct sheaf_cache *, size_t, void **);
	/* BK_SHEAF: sheaf_cache_free_rcu (NULL where the library has none). */
	void (*c_free_rcu)(struct sheaf_cache *, void *);
};

extern struct bench_alloc bench_allocs[];
extern int bench_nallocs;

/* One allocator bound to one object size. */
struct bench_pool {
	const struct bench_alloc *a;
	enum bench_kind kind;
	size_t size;
	void *(*malloc_fn)(size_t);
	void (*free_fn)(void *);
	struct sheaf_cache *cache;
	void *(*c_alloc)(struct sheaf_cache *);
	void (*c_free)(struct sheaf_cache *, void *);
	size_t (*c_alloc_bulk)(struct sheaf_cache *, size_t, void **);
	void (*c_free_bulk)(struct sheaf_cache *, size_t, void **);
	void *mp; /* BK_DPDK: struct rte_mempool * */
	void *(*d_get)(void *);
	void (*d_put)(void *, void *);
	int (*d_get_bulk)(void *, void **, unsigned);
	void (*d_put_bulk)(void *, void **, unsigned);
	void **floor_objs;
	size_t floor_n, floor_i;
};

/* Load the peers and look up Sheaf (called once by main).  @prev_lib: the path of
 * a libsheaf.so of an earlier revision for the sheaf-prev and sheaf-malloc-prev
 * contenders, or NULL (then they are absent). */
void bench_allocs_init(bool sanitized, const char *prev_lib);
const struct bench_alloc *bench_alloc_find(const char *name);
/* Bind @a to objects of @size bytes, at most @max_live of them alive at once
 * (DPDK pools and the floor are sized from it).  0, or -1 with why[] set. */
int bench_pool_open(struct bench_pool *p, const struct bench_alloc *a, size_t size, size_t max_live,
		    char *why, size_t whylen);
void bench_pool_close(struct bench_pool *p);
/* Sheaf's statistics of a Sheaf pool into @f (for the profile file). */
void bench_pool_dump_stats(const struct bench_pool *p, FILE *f, const char *heading);
/* The columns of bench_pool_profile(), as a Markdown header row. */
extern const char bench_profile_header[];
/* Sheaf's counters of a Sheaf pool per 1,000 allocations, as Markdown cells
 * ("| a | b |..."); 0, or -1 when not a Sheaf pool or no statistics. */
int bench_pool_profile(const struct bench_pool *p, char *buf, size_t len);
/* Sheaf's view of the topology: 0, or -1 when Sheaf is not linked. */
int bench_sheaf_topology(unsigned *nodes, unsigned *memory_nodes, unsigned *cpus);
const char *bench_sheaf_mode(void);

static inline void *bench_alloc(struct bench_pool *p)
{
	switch (p->kind) {
	case BK_MALLOC:
		return p->malloc_fn(p->size);
	case BK_SHEAF:
		return p->c_alloc(p->cache);
	case BK_DPDK:
		return p->d_get(p->mp);
	case BK_FLOOR:
	default: {
		/* Only the producer calls this; the ring never holds more than
		 * floor_n objects, so none is handed out twice in flight. */
		void *o = p->floor_objs[p->floor_i];

		p->floor_i = p->floor_i + 1 == p->floor_n ? 0 : p->floor_i + 1;
		return o;
	}
	}
}

static inline void bench_free(struct bench_pool *p, void *o)
{
	switch (p->kind) {
	case BK_MALLOC:
		p->free_fn(o);
		break;
	case BK_SHEAF:
		p->c_free(p->cache, o);
		break;
	case BK_DPDK:
		p->d_put(p->mp, o);
		break;
	case BK_FLOOR:
	default:
		break;
	}
}

/* Bulk (the bulk workload): @n objects into @v, all or nothing (0 or -1), and back.
 * Sheaf and DPDK pay one call for the batch (sheaf_cache_alloc_bulk/_free_bulk,
 * rte_mempool_get_bulk/put_bulk); a malloc has no bulk call, so it pays one per object,
 * which is what a program using it would do.  The floor hands out no objects. */
static inline int bench_alloc_bulk(struct bench_pool *p, void **v, unsigned n)
{
	switch (p->kind) {
	case BK_SHEAF:
		if (p->c_alloc_bulk)
			return p->c_alloc_bulk(p->cache, n, v) == n ? 0 : -1;
		break;
	case BK_DPDK:
		return p->d_get_bulk(p->mp, v, n);
	default:
		break;
	}
	for (unsigned i = 0; i < n; i++) {
		v[i] = bench_alloc(p);
		if (!v[i]) {
			while (i--)
				bench_free(p, v[i]);
			return -1;
		}
	}
	return 0;
}

static inline void bench_free_bulk(struct bench_pool *p, void **v, unsigned n)
{
	switch (p->kind) {
	case BK_SHEAF:
		if (p->c_free_bulk) {
			p->c_free_bulk(p->cache, n, v);
			return;
		}
		break;
	case BK_DPDK:
		p->d_put_bulk(p->mp, v, n);
		return;
	default:
		break;
	}
	for (unsigned i = 0; i < n; i++)
		bench_free(p, v[i]);
}

/* ---- DPDK (dpdk.c; only when built with libdpdk) ------------------------------ */

int bench_dpdk_init(char *why, size_t whylen);
void *bench_dpdk_pool_create(size_t size, size_t n, char *why, size_t whylen);
void bench_dpdk_pool_free(void *mp);
void *bench_dpdk_get(void *mp);
void bench_dpdk_put(void *mp, void *obj);
int bench_dpdk_get_bulk(void *mp, void **objs, unsigned n); /* 0, or -1: none taken */
void bench_dpdk_put_bulk(void *mp, void **objs, unsigned n);
/* Run @remote on EAL worker lcore 1 while the caller (the main lcore) runs
 * @local; wait for both. */
int bench_dpdk_run_pair(void (*local)(void *), void (*remote)(void *), void *arg);
const char *bench_dpdk_version(void);

#endif /* SHEAF_BENCH_CONTENDERS_H */
