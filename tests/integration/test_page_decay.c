/* The page provider's decay (src/page/page.c, README "Memory given back"): free slab pages
 * stay resident while a program's live memory swings, so the swings do not fault the
 * memory in again, and they are given back once they stay unused for SHEAF_PURGE_MS.
 * Run with SHEAF_REAP_MS=0 (test_page_decay.env): no reaper shrinks the idle cache, so
 * what gives the pages back here is the decay alone. */
#include "harness.h"
#include "base/base.h"

#include <sys/resource.h>
#include <time.h>

#include <sheaf.h>

#define OBJ      256
#define SWING    (16u << 20) /* bytes allocated and freed per round */
#define NOBJ     (SWING / OBJ)
#define ROUNDS   6
#define PURGE_MS 400  /* SHEAF_PURGE_MS of the .env file */
#define PATIENCE 3000 /* ms the decay may take here before the test fails */

static long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* A page taken and freed: the page provider checks the decay epoch on both. */
static void page_op(void)
{
	struct sheaf_cache *t = sheaf_cache_create("decay-tick", 2048, NULL);
	REQUIRE(t);
	void *p = sheaf_cache_alloc(t);
	REQUIRE(p);
	sheaf_cache_free(t, p);
	sheaf_cache_destroy(t);
}

static void test_swing_then_decay(void)
{
	struct sheaf_cache *c = sheaf_cache_create("decay-256", OBJ, NULL);
	REQUIRE(c);
	void **v = sheaf_os_map(NOBJ * sizeof(void *)); /* bookkeeping off the heap */
	REQUIRE(v);
	memset(v, 0, NOBJ * sizeof(void *));
	long faults[ROUNDS];
	size_t rss_freed = 0;
	for (int r = 0; r < ROUNDS; r++) {
		long f0 = minor_faults();
		for (size_t i = 0; i < NOBJ; i++) {
			v[i] = sheaf_cache_alloc(c);
			REQUIRE(v[i]);
			memset(v[i], r + 1, OBJ);
		}
		faults[r] = minor_faults() - f0;
		for (size_t i = 0; i < NOBJ; i++)
			sheaf_cache_free(c, v[i]);
		rss_freed = th_rss();
	}
	long later = 0;
	for (int r = 1; r < ROUNDS; r++)
		later += faults[r];
	printf("# minor faults per round of %u MiB: first %ld, later %ld on average\n", SWING >> 20,
	       faults[0], later / (ROUNDS - 1));
	/* The first round faults the memory in (4,096 pages); a later one reuses the
	 * resident free pages.  Purging what exceeds 1/8 of the pages in use, as before the
	 * decay, faulted over half of them in again every round. */
	CHECK(faults[0] >= (long)(SWING / 4096) / 2);
	CHECKF(later / (ROUNDS - 1) < faults[0] / 10, "later rounds fault %ld pages each",
	       later / (ROUNDS - 1));

	/* Now nothing is allocated: the free pages go back to the OS within the decay time
	 * (give or take an epoch), found by the page operations of an otherwise idle program. */
	long t0 = now_ms(), took = -1;
	size_t rss = rss_freed;
	while (now_ms() - t0 < PATIENCE) {
		sleep_ms(PURGE_MS / 8);
		page_op();
		rss = th_rss();
		if (rss + (6u << 20) <= rss_freed) {
			took = now_ms() - t0;
			break;
		}
	}
	printf("# RSS after the last free %zu MiB, %zu MiB %ld ms later (SHEAF_PURGE_MS=%d)\n",
	       rss_freed >> 20, rss >> 20, took, PURGE_MS);
	CHECKF(took >= 0, "RSS still %zu MiB of %zu after %d ms", rss >> 20, rss_freed >> 20,
	       PATIENCE);
	sheaf_os_unmap(v, NOBJ * sizeof(void *));
	sheaf_cache_destroy(c);
}

int main(void)
{
	RUN(test_swing_then_decay);
	return th_done();
}
