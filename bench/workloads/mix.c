/* SPDX-License-Identifier: MIT */
/*
 * mix.c - workload 5 (docs/benchmarks.md): a malloc mix with random sizes and
 * cross-thread frees.
 *
 * Two threads, pinned to CPU 0 and CPU 1, each keep a table of 4096 live
 * objects.  Each operation picks a random slot, frees its object (or, one
 * time in four, hands it to the other thread, which frees it) and puts a new
 * object of a random size there, writing its first and last byte.  Sizes:
 * "small" 8..1024 B, "wide" 8 B..64 KiB, both with small sizes far more
 * likely (log-uniform), as in real programs.  Unit: ns per malloc+free pair
 * per thread, the two threads running at once.  Headline: median.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "workloads.h"

#define MIX_SLOTS 4096u

struct mix_side {
	struct bench_pool *p;
	struct bench_ring *out, *in;
	uint64_t ops, rng, done, deadline;
	bool wide;
	_Atomic int *done_flags; /* [2] */
	int me;
	_Atomic int *go;
	uint64_t t0, t1;
	int failed;
	void *slot[MIX_SLOTS];
};

static inline uint64_t mix_rand(uint64_t *s)
{
	/* xorshift64*: fixed seeds make every allocator see the same sequence. */
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static inline size_t mix_size(uint64_t r, bool wide)
{
	/* log-uniform: pick a power of two, then a size inside it. */
	unsigned top = wide ? 16 : 10; /* 2^16 = 64 KiB, 2^10 = 1 KiB */
	unsigned lg = 3 + (unsigned)(r % (top - 3));
	size_t base = (size_t)1 << lg;

	return base + (size_t)((r >> 8) % base); /* [2^lg, 2^(lg+1)) */
}

/* Free what the other side sent.  Returns the number freed. */
static size_t mix_drain(struct mix_side *s)
{
	struct bench_ring *in = s->in;
	size_t head = atomic_load_explicit(&in->head, memory_order_acquire);
	size_t tail = atomic_load_explicit(&in->tail, memory_order_relaxed), n = 0;

	for (; tail < head; tail++, n++)
		s->p->free_fn(in->slot[tail % BENCH_RING_SLOTS]);
	atomic_store_explicit(&in->tail, tail, memory_order_release);
	return n;
}

static void mix_thread(void *x)
{
	struct mix_side *s = x;
	struct bench_ring *out = s->out;
	size_t out_head = 0, out_tail_seen = 0;
	unsigned spins = 0;
	uint64_t i;

	memset(s->slot, 0, sizeof(s->slot));
	atomic_fetch_add(s->go, 1);
	while (atomic_load(s->go) < 2)
		bench_spin(&spins);
	s->t0 = bench_now_ns();
	for (i = 0; i < s->ops; i++) {
		uint64_t r = mix_rand(&s->rng);
		unsigned k = (unsigned)(r % MIX_SLOTS);
		size_t sz = mix_size(r >> 12, s->wide);
		char *o;

		if ((i & 31) == 0) {
			mix_drain(s);
			if ((i & 1023) == 0 && i && s->deadline && bench_now_ns() > s->deadline)
				break;
		}
		if (s->slot[k]) {
			/* One in four goes to the other thread, if its ring has room. */
			if (((r >> 40) & 3) == 0) {
				if (out_head - out_tail_seen >= BENCH_RING_SLOTS)
					out_tail_seen = atomic_load_explicit(&out->tail,
									     memory_order_acquire);
				if (out_head - out_tail_seen < BENCH_RING_SLOTS) {
					out->slot[out_head % BENCH_RING_SLOTS] = s->slot[k];
					atomic_store_explicit(&out->head, ++out_head,
							      memory_order_release);
				} else {
					s->p->free_fn(s->slot[k]);
				}
			} else {
				s->p->free_fn(s->slot[k]);
			}
		}
		o = s->p->malloc_fn(sz);
		if (__builtin_expect(!o, 0)) {
			s->failed = 1;
			s->slot[k] = NULL;
			break;
		}
		o[0] = (char)i;
		o[sz - 1] = (char)i;
		s->slot[k] = o;
	}
	s->t1 = bench_now_ns();
	s->done = i;
	/* Untimed cleanup: free the table, then keep draining until the other
	 * side has finished sending. */
	for (unsigned k = 0; k < MIX_SLOTS; k++)
		if (s->slot[k])
			s->p->free_fn(s->slot[k]);
	atomic_store(&s->done_flags[s->me], 1);
	while (!atomic_load(&s->done_flags[!s->me])) {
		if (!mix_drain(s))
			bench_spin(&spins);
	}
	mix_drain(s);
}

struct mix_pair {
	struct mix_side *side[2];
};

static void mix_a(void *x)
{
	mix_thread(((struct mix_pair *)x)->side[0]);
}

static void mix_b(void *x)
{
	mix_thread(((struct mix_pair *)x)->side[1]);
}

double bench_mix_window(struct bench_pool *p, uint64_t ops, bool wide, uint64_t seed,
			uint64_t max_ns)
{
	struct bench_ring *ring[2];
	struct mix_side *side[2];
	_Atomic int done[2] = { 0, 0 }, go = 0;
	struct mix_pair pair;
	double ns = -1;
	int rc;

	ring[0] = aligned_alloc(64, sizeof(struct bench_ring));
	ring[1] = aligned_alloc(64, sizeof(struct bench_ring));
	side[0] = calloc(1, sizeof(struct mix_side));
	side[1] = calloc(1, sizeof(struct mix_side));
	if (!ring[0] || !ring[1] || !side[0] || !side[1])
		goto out;
	for (int i = 0; i < 2; i++) {
		memset(ring[i], 0, sizeof(*ring[i]));
		side[i]->p = p;
		side[i]->out = ring[i];
		side[i]->in = ring[!i];
		side[i]->ops = ops;
		side[i]->rng = seed * 2 + (uint64_t)i + 0x9E3779B97F4A7C15ull;
		side[i]->wide = wide;
		side[i]->done_flags = done;
		side[i]->me = i;
		side[i]->go = &go;
		side[i]->deadline = max_ns ? bench_now_ns() + max_ns : 0;
		pair.side[i] = side[i];
	}
	rc = bench_run_pair(p, mix_a, mix_b, &pair);
	if (!rc && !side[0]->failed && !side[1]->failed) {
		uint64_t t0 = side[0]->t0 < side[1]->t0 ? side[0]->t0 : side[1]->t0;
		uint64_t t1 = side[0]->t1 > side[1]->t1 ? side[0]->t1 : side[1]->t1;

		uint64_t did = (side[0]->done + side[1]->done) / 2;

		ns = did ? (double)(t1 - t0) / (double)did : -1;
	}
out:
	free(ring[0]);
	free(ring[1]);
	free(side[0]);
	free(side[1]);
	return ns;
}

struct mix_state {
	bool wide;
	uint64_t seed, max_ns;
};

static double mix_window(void *state, struct bench_pool *p, uint64_t n)
{
	struct mix_state *s = state;

	return bench_mix_window(p, n, s->wide, s->seed++, s->max_ns);
}

static void mix_run(struct bench_ctx *ctx)
{
	static const char *const names[] = { "small", "wide" };

	for (int w = 0; w < 2; w++) {
		struct mix_state s = { w == 1, 42, (uint64_t)(ctx->window_ms * 3e6) };
		struct bench_phase ph = {
			.workload = "mix",
			.variant = names[w],
			.topo = "real",
			.unit = "ns/pair",
			.head = BH_MEDIAN,
			.apis = BENCH_API_MALLOC,
			.size = 0,
			.max_live = 0,
			.granule = 1024,
			.reps = ctx->reps,
			.fn = mix_window,
			.state = &s,
		};
		const char *who;
		double best, sm;
		char text[160];

		bench_phase_run(ctx, &ph);
		best = bench_best_peer(ctx, "mix", names[w], "real", BENCH_API_MALLOC, &who);
		sm = bench_headline(bench_find(ctx, "mix", names[w], "real", "sheaf-malloc"));
		snprintf(text, sizeof(text),
			 "malloc mix %s: sheaf-malloc against the best malloc "
			 "(no target in the issue; for information)",
			 names[w]);
		if (isnan(best) || isnan(sm))
			bench_target(ctx, "mix", -1, text, "not measured");
		else
			bench_target(ctx, "mix", -1, text, "%.1f ns vs %s %.1f ns: %.2fx (median)",
				     sm, who, best, sm / best);
	}
}

static const struct bench_workload wl_mix = {
	.name = "mix",
	.title = "5. Malloc mix: random sizes, cross-thread frees",
	.order = 50,
	.about = "Two threads (CPU 0 and CPU 1) each keep 4096 live objects; every operation "
		 "frees a random one (a quarter of them handed to the other thread to free) "
		 "and allocates a new one of a random log-uniform size: small = 8 B..1 KiB, "
		 "wide = 8 B..64 KiB. Same random sequence for every allocator. Unit: ns per "
		 "malloc+free pair per thread with both threads running. Headline: median.",
	.run = mix_run,
};
BENCH_REGISTER(wl_mix)
