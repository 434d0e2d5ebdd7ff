/* Each layer alone: page heap lookups, slabs, barns, sheaves. */
#include "harness.h"

#include <sched.h>
#include "cache/cache.h"
#include "slab/track.h"

#include <sheaf.h>
#include <sheaf_stats.h>

static struct sheaf_cache *mk(const char *name, size_t size, unsigned cap, unsigned flags)
{
	struct sheaf_cache_args a = { .sheaf_capacity = cap, .flags = flags };
	struct sheaf_cache *c = sheaf_cache_create(name, size, &a);
	REQUIRE(c != NULL);
	return c;
}

/* Page provider: O(1) lookup says "not ours" for foreign, metadata and free pointers. */
static void test_page_lookup(void)
{
	struct sheaf_cache *c = mk("pg", 64, 0, 0);
	void *o = sheaf_cache_alloc(c);
	REQUIRE(o);
	int local;
	void *heap = malloc(32);
	CHECK(sheaf_cache_of(o) == c);
	CHECK(sheaf_page_key(&local) == 0); /* stack */
	CHECK(sheaf_page_key(heap) == 0);   /* glibc heap */
	CHECK(sheaf_page_key(NULL) == 0);
	CHECK(sheaf_page_key((void *)-1) == 0);
	CHECK(sheaf_page_key(sheaf_heap.pagemap) == 0); /* metadata lives outside the range */
	CHECK(sheaf_page_key(sheaf_heap.desc) == 0);
	CHECK(sheaf_page_key(sheaf_heap.base + sheaf_heap.size - 1) ==
	      0); /* reserved, never used */
	CHECK(sheaf_page_slab(&local) == NULL);
	struct sheaf_slab *s = sheaf_page_slab(o);
	CHECK(s && s->pg_kind == SHEAF_PG_SLAB && s->sl_node->cache == c);
	CHECK(sheaf_slab_is_valid(c, s));
	free(heap);
	sheaf_cache_free(c, o);
	sheaf_cache_destroy(c);
}

/* Buddy allocator: split, coalesce, alignment, and a freed block is given back. */
static void test_page_buddy(void)
{
	REQUIRE(sheaf_ensure_init() == 0);
	void *p[16];
	for (int i = 0; i < 16; i++) {
		unsigned order = (unsigned)(i % 4);
		p[i] = sheaf_page_alloc(order, 0);
		REQUIRE(p[i]);
		CHECK((((uintptr_t)p[i] - (uintptr_t)sheaf_heap.base) &
		       ((SHEAF_PAGE_SIZE << order) - 1)) == 0);
		memset(p[i], 0x5a, SHEAF_PAGE_SIZE << order);
	}
	for (int i = 0; i < 16; i++)
		for (int j = i + 1; j < 16; j++)
			CHECK(p[i] != p[j]);
	size_t before = sheaf_heap.returned_bytes;
	for (int i = 0; i < 16; i++)
		sheaf_page_free(p[i], (unsigned)(i % 4), 0);
	sheaf_page_purge_all();
	CHECK(sheaf_heap.returned_bytes > before);
	void *big = sheaf_page_alloc(SHEAF_BLOCK_ORDER, 0); /* a whole block */
	CHECK(big != NULL);
	if (big)
		sheaf_page_free(big, SHEAF_BLOCK_ORDER, 0);
}

/* Slab layer alone: single pops, bulk refill, bulk free with detached freelists. */
static void test_slab_layer(void)
{
	struct sheaf_cache *c = mk("slab", 96, 0, SHEAF_NO_SHEAVES);
	struct sheaf_node *n = c->node[0];
	enum {
		N = 1000
	};
	void **v = calloc(N, sizeof(void *));
	unsigned got = sheaf_slab_refill(c, n, v, N, N);
	CHECK(got == N);
	/* Slab-layer objects are free from the program's view until the cache API
	 * hands them out: open them for the sanitizers as it would (track.h). */
	for (unsigned i = 0; i < got; i++)
		sheaf_track_obj_alloc(c, v[i]);
	for (unsigned i = 0; i < got; i++)
		memset(v[i], (int)i, 96);
	CHECK(sheaf_slab_node_is_valid(n));
	void *one = sheaf_slab_alloc_one(c, n);
	CHECK(one != NULL);
	uint64_t slabs = 0, part = 0, inuse = 0;
	sheaf_slab_node_counts(n, &slabs, &part, &inuse);
	CHECK(inuse == N + 1);
	for (unsigned i = 0; i < got; i++)
		sheaf_track_obj_free(c, v[i]);
	/* Free in an interleaved order so chains span several slabs. */
	for (unsigned i = 0; i < got; i += 2)
		sheaf_slab_free_bulk(c, &v[i], 1);
	void *rest[N / 2];
	unsigned k = 0;
	for (unsigned i = 1; i < got; i += 2)
		rest[k++] = v[i];
	sheaf_slab_free_bulk(c, rest, k);
	sheaf_slab_free_bulk(c, &one, 1);
	CHECK(sheaf_slab_node_is_valid(n));
	slabs = part = inuse = 0;
	sheaf_slab_node_counts(n, &slabs, &part, &inuse);
	CHECK(inuse == 0);
	CHECK(part <= c->min_partial);
	sheaf_slab_node_shrink(n, 0);
	slabs = part = inuse = 0;
	sheaf_slab_node_counts(n, &slabs, &part, &inuse);
	CHECK(slabs == 0);
	free(v);
	sheaf_cache_destroy(c);
}

/* Barn alone: limits, replace operations, take_all, walker. */
static void test_barn_layer(void)
{
	struct sheaf_cache *c = mk("barn", 64, 8, 0);
	struct sheaf_barn *b = c->node[0]->barn;
	CHECK(b->enabled);
	CHECK(b->max_full >= SHEAF_MAX_FULL_SHEAVES && b->max_full <= 256); /* D6 ceiling */
	b->max_full = SHEAF_MAX_FULL_SHEAVES; /* this test exercises the limit itself */
	CHECK(sheaf_barn_is_valid(b, c));
	struct sheaf_sheaf *full[12];
	for (int i = 0; i < 12; i++) {
		full[i] = sheaf_sheaf_new(c, 8);
		REQUIRE(full[i]);
		CHECK(sheaf_sheaf_refill(c, c->node[0], full[i], NULL) == 8);
		CHECK(sheaf_sheaf_is_valid(c, full[i]));
	}
	struct sheaf_sheaf *e = NULL;
	int puts = 0, big = 0;
	for (int i = 0; i < 12; i++) {
		int r = sheaf_barn_replace_full(b, full[i], &e);
		if (r == 0)
			puts++;
		else if (r == -E2BIG)
			big++;
		CHECK(e == NULL); /* no empty sheaves yet */
	}
	CHECK(puts == (int)b->max_full && big == 12 - puts);
	CHECK(sheaf_barn_is_valid(b, c));
	struct sheaf_sheaf *empty = sheaf_sheaf_new(c, 8);
	struct sheaf_sheaf *f = sheaf_barn_replace_empty(b, empty);
	CHECK(f && f->size == 8);
	CHECK(b->nr_empty == 1 && b->nr_full == (unsigned)puts - 1);
	CHECK(sheaf_barn_is_valid(b, c));
	sheaf_sheaf_flush(c, f, NULL);
	sheaf_sheaf_free(c, f);
	for (int i = puts; i < 12; i++) {
		sheaf_sheaf_flush(c, full[i], NULL);
		sheaf_sheaf_free(c, full[i]);
	}
	sheaf_cache_destroy(c); /* flushes the barn; must report no leak */
}

/* Sheaves: capacity defaults (D1), override, runtime change (D2). */
static void test_capacity(void)
{
	struct sheaf_cache *c = mk("cap", 256, 0, 0);
	uint32_t d1 = atomic_load(&c->sheaf_capacity);
	/* D1: 2 x capacity >= objects per slab + 6.19's cpu_partial (52 for 256 B). */
	CHECK(2 * d1 >= c->objs_per_slab + 52);
	struct sheaf_cache *k = mk("cap-kernel", 256, 0, SHEAF_KERNEL_COMPAT);
	CHECK(atomic_load(&k->sheaf_capacity) == 28); /* K§3 tier after rounding */
	struct sheaf_cache *o = mk("cap-override", 256, 7, 0);
	CHECK(atomic_load(&o->sheaf_capacity) == 7);
	void *v[100];
	for (int i = 0; i < 100; i++)
		v[i] = sheaf_cache_alloc(o);
	CHECK(sheaf_cache_set_capacity(o, 50) == 0);
	for (int i = 0; i < 100; i++)
		sheaf_cache_free(o, v[i]);
	for (int i = 0; i < 100; i++)
		v[i] = sheaf_cache_alloc(o);
	for (int i = 0; i < 100; i++)
		sheaf_cache_free(o, v[i]);
	sheaf_cache_shrink(o);
	struct sheaf_stats st = { .size = sizeof(st) };
	sheaf_stats_get(o, &st);
	CHECK(st.objects_inuse == 0 && st.sheaf_capacity == 50); /* nothing lost across D2 */
	CHECK(sheaf_cache_set_capacity(o, 0) == -EINVAL);
	struct sheaf_cache *ns = mk("nosheaves", 256, 0, SHEAF_NO_SHEAVES);
	CHECK(sheaf_cache_set_capacity(ns, 10) == -EINVAL);
	sheaf_cache_destroy(c);
	sheaf_cache_destroy(k);
	sheaf_cache_destroy(o);
	sheaf_cache_destroy(ns);
}

/* Geometry: order selection, alignment, hwcache, ctor keeps contents. */
static int ctor_calls;
static void ctor(void *p)
{
	memset(p, 0xab, 40);
	ctor_calls++;
}
static void test_geometry(void)
{
	struct sheaf_cache_args a = { .align = 64 };
	struct sheaf_cache *c = sheaf_cache_create("al64", 40, &a);
	REQUIRE(c);
	for (int i = 0; i < 100; i++) {
		void *p = sheaf_cache_alloc(c);
		CHECK(((uintptr_t)p & 63) == 0);
		sheaf_cache_free(c, p);
	}
	sheaf_cache_destroy(c);
	struct sheaf_cache_args h = { .flags = SHEAF_HWCACHE_ALIGN };
	c = sheaf_cache_create("hw", 100, &h);
	REQUIRE(c);
	void *p = sheaf_cache_alloc(c);
	CHECK(((uintptr_t)p & 63) == 0);
	sheaf_cache_free(c, p);
	sheaf_cache_destroy(c);
	for (size_t sz = 8; sz <= 4096; sz *= 2) {
		c = sheaf_cache_create("pow2", sz, NULL);
		REQUIRE(c);
		void *q = sheaf_cache_alloc(c);
		CHECK(((uintptr_t)q & (sz - 1)) == 0);
		CHECK((SHEAF_PAGE_SIZE << c->order) / c->slot_size >= 1);
		sheaf_cache_free(c, q);
		sheaf_cache_destroy(c);
	}
	struct sheaf_cache_args ca = { .ctor = ctor };
	c = sheaf_cache_create("ctor", 40, &ca);
	REQUIRE(c);
	void *q = sheaf_cache_alloc(c);
	CHECK(ctor_calls >= 1);
	unsigned char *u = q;
	CHECK(u[0] == 0xab && u[39] == 0xab);
	sheaf_cache_free(c, q);
	sheaf_cache_shrink(c); /* back on the slab freelist: contents still constructed */
	q = sheaf_cache_alloc(c);
	u = q;
	CHECK(u[0] == 0xab && u[39] == 0xab);
	sheaf_cache_free(c, q);
	sheaf_cache_destroy(c);
	errno = 0;
	CHECK(sheaf_cache_create("zero", 0, NULL) == NULL && errno == EINVAL);
	struct sheaf_cache_args bad = { .align = 24 };
	CHECK(sheaf_cache_create("badalign", 64, &bad) == NULL && errno == EINVAL);
	CHECK(sheaf_cache_create("huge", SHEAF_MAX_OBJECT_SIZE + 1, NULL) == NULL);
	c = sheaf_cache_create("max", SHEAF_MAX_OBJECT_SIZE, NULL);
	CHECK(c != NULL);
	if (c) {
		void *m = sheaf_cache_alloc(c);
		CHECK(m != NULL);
		if (m) {
			memset(m, 1, SHEAF_MAX_OBJECT_SIZE);
			sheaf_cache_free(c, m);
		}
		sheaf_cache_destroy(c);
	}
	/* The bound is on the slot (sheaf.h): a constructor cache keeps 16 bytes beside
	 * each object, so it takes 1 MiB - 16 and refuses 1 MiB - 15. */
	struct sheaf_cache_args wc = { .ctor = ctor };
	c = sheaf_cache_create("max-ctor", SHEAF_MAX_OBJECT_SIZE - 16, &wc);
	CHECK(c != NULL);
	sheaf_cache_destroy(c);
	errno = 0;
	CHECK(sheaf_cache_create("max-ctor", SHEAF_MAX_OBJECT_SIZE - 15, &wc) == NULL &&
	      errno == EINVAL);
}

/* A slow path that finds its CPU's lock held yields to the holder twice, counted in
 * pcs_lock_waits, before it takes the slab path (PCS_LOCK_FAIL).  Here the holder is
 * the thread itself, pinned to one CPU, so both happen every time. */
static void test_pcs_lock_waits(void)
{
	if (strcmp(sheaf_percpu_mode(), "percpu-rseq") != 0) {
		printf("# skipped: mode %s has no per-CPU lock\n", sheaf_percpu_mode());
		return;
	}
	cpu_set_t old, one;
	REQUIRE(sched_getaffinity(0, sizeof(old), &old) == 0);
	CPU_ZERO(&one);
	for (int k = 0; k < CPU_SETSIZE; k++)
		if (CPU_ISSET(k, &old)) {
			CPU_SET(k, &one);
			break;
		}
	REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
	struct sheaf_cache *c = mk("lockwait", 64, 4, 0);
	void *warm = sheaf_cache_alloc(c); /* the CPU gets its sheaves */
	REQUIRE(warm);
	struct sheaf_stats a = { .size = sizeof(a) }, b = { .size = sizeof(b) };
	REQUIRE(sheaf_stats_get(c, &a) == 0);
	struct sheaf_pcs *pcs = sheaf_pcs_lock(c);
	REQUIRE(pcs != NULL);
	void *o = sheaf_cache_alloc(c); /* the fast path sees the lock: slow path, slab */
	CHECK(o != NULL);
	sheaf_pcs_unlock(c, pcs);
	REQUIRE(sheaf_stats_get(c, &b) == 0);
	CHECK(b.pcs_lock_waits - a.pcs_lock_waits == 2);
	CHECK(b.events[SHEAF_STAT_PCS_LOCK_FAIL] - a.events[SHEAF_STAT_PCS_LOCK_FAIL] == 1);
	sheaf_cache_free(c, o);
	sheaf_cache_free(c, warm);
	sheaf_cache_destroy(c);
	sched_setaffinity(0, sizeof(old), &old);
}

/* The object-start test (slab/freecheck.h sheaf_obj_is_start: a divisibility test by
 * multiply and compare) against the remainder, at every offset of a slab, for slot sizes
 * of every kind: powers of two, multiples of 8 and 16, 1-byte aligned odd sizes, a
 * constructor cache (its mark past the object), large slots. */
static void test_start_test_exact(void)
{
	static const size_t sizes[] = { 15,   16,   17,   24,   40,   48,    56,
					96,   100,  160,  200,  255,  384,   640,
					1000, 1024, 3000, 4096, 5000, 12345, 65536 };
	int bad = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (int kind = 0; kind < 2; kind++) {
			struct sheaf_cache_args a = { .align = 1, .ctor = kind ? ctor : NULL };
			struct sheaf_cache *c = sheaf_cache_create("start", sizes[i], &a);
			REQUIRE(c);
			for (uintptr_t off = 0; off <= c->slab_mask; off++) {
				bool want = off % c->slot_size == 0 &&
					    off / c->slot_size < c->objs_per_slab;
				if (sheaf_obj_is_start(c, (void *)(0x40000000ul + off)) != want &&
				    bad++ < 5)
					fprintf(stderr, "# size %zu slot %zu offset %zu\n",
						sizes[i], c->slot_size, (size_t)off);
			}
			sheaf_cache_destroy(c);
		}
	}
	CHECK(bad == 0);
}

int main(void)
{
	RUN(test_page_lookup);
	RUN(test_page_buddy);
	RUN(test_slab_layer);
	RUN(test_barn_layer);
	RUN(test_capacity);
	RUN(test_geometry);
	RUN(test_start_test_exact);
	RUN(test_pcs_lock_waits);
	return th_done();
}
