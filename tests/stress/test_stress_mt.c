/* Multi-threaded stress: 8+ threads with fixed seeds, objects freed by
 * other threads through a shared exchange table, thread churn in waves, content checks,
 * bulk and prefilled sheaves mixed in, and a shrinker thread; at the end the
 * conservation check must balance. */
#include "harness.h"
#include "cache/cache.h"

#include <sheaf.h>
#include <sheaf_stats.h>

#define NCACHES 3
#define SLOTS   4096
static struct sheaf_cache *caches[NCACHES];
static const size_t sizes[NCACHES] = { 24, 200, 1500 };
static _Atomic(uintptr_t) slots[SLOTS];
static atomic_int bad, stop_shrink;
static int scale = 5;

/* Object layout: [0] = cache index | tag << 8; [1] = checksum of the tag. */
static void fill(uint64_t *o, unsigned ci, uint64_t tag)
{
	tag &= 0xffffffffffffull;
	o[0] = ci | (tag << 8);
	o[1] = tag * 0x9E3779B97F4A7C15ull;
	if (sizes[ci] >= 200)
		o[(sizes[ci] / 8) - 1] = ~tag;
}
static void check_and_free(uint64_t *o)
{
	unsigned ci = (unsigned)(o[0] & 0xff);
	uint64_t tag = o[0] >> 8;
	if (ci >= NCACHES || o[1] != tag * 0x9E3779B97F4A7C15ull ||
	    (sizes[ci] >= 200 && o[(sizes[ci] / 8) - 1] != ~tag)) {
		atomic_fetch_add(&bad, 1);
		return;
	}
	sheaf_cache_free(caches[ci], o);
}

static void *worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg * 7919 + 1;
	int ops = 20000 * scale;
	for (int i = 0; i < ops; i++) {
		uint64_t r = th_rand(&seed);
		unsigned ci = (unsigned)(r % NCACHES);
		switch ((r >> 8) % 16) {
		case 0: { /* bulk */
			void *v[40];
			if (sheaf_cache_alloc_bulk(caches[ci], 40, v) == 40) {
				for (int k = 0; k < 40; k++)
					fill(v[k], ci, r + (uint64_t)k);
				for (int k = 0; k < 40; k++)
					check_and_free(v[k]);
			}
			break;
		}
		case 1: { /* prefilled sheaf */
			struct sheaf_prefilled *s =
				sheaf_cache_prefill(caches[ci], 1 + (unsigned)(r % 50));
			if (s) {
				void *o = sheaf_cache_alloc_from(caches[ci], s);
				if (o) {
					fill(o, ci, r);
					check_and_free(o);
				}
				sheaf_cache_return(caches[ci], s);
			}
			break;
		}
		default: { /* exchange through the table: frees by other threads */
			uint64_t *o = sheaf_cache_alloc(caches[ci]);
			if (!o) {
				atomic_fetch_add(&bad, 1);
				break;
			}
			fill(o, ci, r >> 16);
			uintptr_t old = atomic_exchange(&slots[(r >> 20) % SLOTS], (uintptr_t)o);
			if (old)
				check_and_free((uint64_t *)old);
		}
		}
	}
	return NULL;
}

static void *shrinker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_shrink)) {
		for (int i = 0; i < NCACHES; i++)
			sheaf_cache_shrink(caches[i]);
		usleep(2000);
	}
	return NULL;
}

static void test_stress(void)
{
	for (int i = 0; i < NCACHES; i++) {
		char name[32];
		snprintf(name, sizeof(name), "stress-%zu", sizes[i]);
		caches[i] = sheaf_cache_create(name, sizes[i], NULL);
		REQUIRE(caches[i]);
	}
	pthread_t sh;
	pthread_create(&sh, NULL, shrinker, NULL);
	const int nthreads = 10, waves = 4;
	for (int w = 0; w < waves; w++) { /* thread churn: each wave exits, a new one starts */
		pthread_t t[nthreads];
		for (int i = 0; i < nthreads; i++)
			pthread_create(&t[i], NULL, worker,
				       (void *)(uintptr_t)(w * nthreads + i + 1));
		for (int i = 0; i < nthreads; i++)
			pthread_join(t[i], NULL);
	}
	atomic_store(&stop_shrink, 1);
	pthread_join(sh, NULL);
	CHECK(atomic_load(&bad) == 0);
	for (int i = 0; i < SLOTS; i++) {
		uintptr_t o = atomic_exchange(&slots[i], 0);
		if (o)
			check_and_free((uint64_t *)o);
	}
	CHECK(atomic_load(&bad) == 0);
	for (int i = 0; i < NCACHES; i++) {
		struct sheaf_cache *c = caches[i];
		sheaf_cache_shrink(c);
		struct sheaf_stats st = { .size = sizeof(st) };
		sheaf_stats_get(c, &st);
		CHECKF(st.objects_inuse == 0 && st.slabs == 0, "%s: inuse %llu slabs %llu", st.name,
		       (unsigned long long)st.objects_inuse, (unsigned long long)st.slabs);
		uint64_t allocs =
			st.events[SHEAF_STAT_ALLOC_FASTPATH] + st.events[SHEAF_STAT_ALLOC_SLOWPATH];
		uint64_t frees =
			st.events[SHEAF_STAT_FREE_FASTPATH] + st.events[SHEAF_STAT_FREE_SLOWPATH];
		CHECKF(allocs == frees, "%s: allocs %llu frees %llu", st.name,
		       (unsigned long long)allocs, (unsigned long long)frees);
		CHECK(st.events[SHEAF_STAT_ALLOC_SLAB] == st.events[SHEAF_STAT_FREE_SLAB]);
		for (int n = 0; n < sheaf_g.nnodes; n++) {
			CHECK(sheaf_slab_node_is_valid(c->node[n]));
			CHECK(sheaf_barn_is_valid(c->node[n]->barn, c));
		}
		sheaf_cache_destroy(c);
	}
}

int main(void)
{
	const char *s = getenv("SHEAF_TEST_SCALE");
	if (s)
		scale = atoi(s) > 0 ? atoi(s) : 1;
	RUN(test_stress);
	return th_done();
}
