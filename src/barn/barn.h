/* SPDX-License-Identifier: MIT */
/*
 * barn/barn.h - the barn layer's interface (layer 4 of src/README.md).
 *
 * Owns: the sheaf (a bare array of object pointers, K§1.4) as a data type, the
 * sentinel sheaf, and the per-node barns of full and empty sheaves with their soft
 * limits and working-set trimming (K§1.3, D6).  A barn is a passive store:
 * it moves whole sheaves under its lock and never touches a slab.
 *
 * May call: slab/ (types only), page/, base/.
 */
#ifndef SHEAF_LAYER_BARN_H
#define SHEAF_LAYER_BARN_H

#include "slab/slab.h"

/* ---- Sheaf: a bare array of object pointers (K§1.4) --------------------------------- */

#define SHEAF_SH_OVERSIZE  0x1u /* prefilled sheaf larger than the cache's capacity */
#define SHEAF_SH_PREFILLED 0x2u /* lent out through the prefill API */
#define SHEAF_SH_RCU       0x4u /* collects free_rcu objects */

struct sheaf_sheaf {
	uint32_t size;          /* valid entries; owner-only while installed (design §6) */
	uint32_t capacity;      /* entries in objects[]; 0 for the sentinel */
	uintptr_t key;          /* the free fast path accepts objects whose pagemap key equals
				   this (the cache node serving the owning CPU); 0 accepts none */
	uint64_t nalloc;        /* fast-path pops while installed as main (stat harvest) */
	struct sheaf_list link; /* barn list, or rcu list; protected by whoever holds the sheaf */
	struct sheaf_cache *cache;
	int32_t node;   /* rcu sheaves: the barn they return to */
	uint32_t flags; /* SHEAF_SH_* */
	void *objects[];
};
#define SHEAF_SHEAF_HDR ((uint32_t)sizeof(struct sheaf_sheaf))

/* Size 0, capacity 0, key 0: "empty" to pop, "full" to push, matches no object
 * (K§1.5 bootstrap sheaf; design §6 per-CPU lock).  Defined in barn.c. */
extern struct sheaf_sheaf sheaf_sentinel_sheaf;
/* Every object of @s is an object of @c, and its size fits (the sentinel is valid). */
bool sheaf_sheaf_is_valid(const struct sheaf_cache *c, const struct sheaf_sheaf *s);

/* ---- Barn: per node per cache, full and empty sheaves (K§1.3, D6) -------------------- */

/* A barn's sheaves are LIFO stacks linked through sheaf->link.next (NULL-terminated):
 * taking or giving a sheaf touches the barn and that sheaf only, never a neighbour's
 * header, which across CPUs is one cache-line transfer fewer per sheaf moved. */
struct sheaf_barn {
	pthread_mutex_t lock;
	struct sheaf_sheaf *full;  /* top of the stack of full sheaves; protected by lock */
	struct sheaf_sheaf *empty; /* top of the stack of empty sheaves; protected by lock */
	unsigned nr_full;          /* protected by lock; read racily (sheaf_rd) to fail fast */
	unsigned nr_empty;         /* protected by lock; read racily */
	unsigned max_full;         /* soft limits; written under lock (D6, adaptive capacity),
				    read racily (sheaf_rd) by the fail-fast tests */
	unsigned max_empty;
	bool enabled; /* false: no barn (KERNEL_COMPAT on a memoryless node) */
	/* D6: working-set estimate, protected by lock. */
	uint32_t ewma_low;       /* EWMA (x16) of the lowest nr_full seen per interval: full
				    sheaves that sat unused through the interval */
	uint32_t interval_low;   /* lowest nr_full in the current interval */
	uint32_t ewma_low_empty; /* the same for empty sheaves */
	uint32_t interval_low_empty;
	uint32_t interval_ops;      /* barn operations in the current interval */
	uint32_t nr_locks;          /* lock acquisitions ever (gauge barn_locks); under lock */
	uint64_t nr_objects;        /* objects moved in or out in full sheaves ever (gauge
				    barn_objects); protected by lock */
	uint64_t interval_start_ns; /* when the current interval began; protected by lock */
	atomic_int adapt_due;       /* +1: the last interval's rate asks for a larger capacity,
				    -1: for a smaller one; taken by the next slow path (percpu/sheaf.c) */
	uint32_t trim_due;          /* an interval ended: the next slow path trims (racy read) */
} sheaf_aligned(SHEAF_CACHELINE);   /* one per node, side by side: no false sharing */

/* Is node @i's barn another node's (a memoryless node sharing its nearest memory
 * node's, cache/create.c)?  Walks over every barn of a cache skip these, so that no barn
 * is locked twice or counted twice. */
static inline bool sheaf_barn_is_alias(const struct sheaf_cache *c, int i)
{
	int m = sheaf_g.node_mem_nid[i];
	return m != i && c->node[i]->barn == c->node[m]->barn;
}

void sheaf_barn_init(struct sheaf_barn *b, bool enabled, bool compat);
/* Soft limits for a barn whose full sheaves hold @sheaf_bytes of objects each (D6). */
void sheaf_barn_set_limits(struct sheaf_barn *b, size_t sheaf_bytes);
struct sheaf_sheaf *sheaf_barn_get_empty(struct sheaf_barn *b);
struct sheaf_sheaf *sheaf_barn_get_full(struct sheaf_barn *b, uint32_t min_size);
void sheaf_barn_put_empty(struct sheaf_barn *b, struct sheaf_sheaf *s);
void sheaf_barn_put_full(struct sheaf_barn *b, struct sheaf_sheaf *s);
/* Give an empty sheaf, get a full one; NULL if the barn has none (@empty not taken). */
struct sheaf_sheaf *sheaf_barn_replace_empty(struct sheaf_barn *b, struct sheaf_sheaf *empty);
/* Give a full sheaf, get an empty one (may be NULL: caller allocates); -E2BIG when the
 * barn is over its full limit (@full not taken). */
int sheaf_barn_replace_full(struct sheaf_barn *b, struct sheaf_sheaf *full,
			    struct sheaf_sheaf **empty);
/* Two-sheaf exchanges (one lock for up to @n sheaves each way).  swap_fulls puts up to
 * nfull full sheaves (within the limit; *put says how many) and returns the empties
 * taken (at most *put).  swap_empties takes up to @want full sheaves and, if it got
 * any, puts the nempty empties. */
unsigned sheaf_barn_swap_fulls(struct sheaf_barn *b, struct sheaf_sheaf **full, unsigned nfull,
			       struct sheaf_sheaf **empty_out, unsigned *put);
unsigned sheaf_barn_swap_empties(struct sheaf_barn *b, struct sheaf_sheaf **empty, unsigned nempty,
				 struct sheaf_sheaf **full_out, unsigned want);
/* Take every sheaf out of the barn (shrink/destroy). */
void sheaf_barn_take_all(struct sheaf_barn *b, struct sheaf_list *full, struct sheaf_list *empty);
/* D6: sheaves beyond the working set, taken out for the caller to flush and free. */
void sheaf_barn_trim(struct sheaf_barn *b, struct sheaf_list *full, struct sheaf_list *empty);
bool sheaf_barn_is_valid(struct sheaf_barn *b, const struct sheaf_cache *c);
bool sheaf_barn_holds(struct sheaf_barn *b, const void *obj); /* double-free search */
void sheaf_barn_counts(struct sheaf_barn *b, uint64_t *full, uint64_t *empty, uint64_t *objs,
		       uint64_t *locks, uint64_t *moved);

#endif /* SHEAF_LAYER_BARN_H */
