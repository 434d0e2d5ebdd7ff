/* SPDX-License-Identifier: MIT */
/*
 * shapes.c - workload 7 (docs/benchmarks.md): five whole-program malloc shapes,
 * written for this project after the shapes of public allocator benchmarks
 * where Sheaf's malloc trailed (issue 17): each runs as a small program of its
 * own, and the figures are its wall time and its peak RSS.
 *
 *  xmalloc   two producer threads fill batches of 4096 objects of 64 B, each
 *            batch's pointer array a 32,776-byte malloc (just above the
 *            largest size class) and written over its first 64 bytes
 *            (xmalloc-test writes up to 128); two consumer threads free the
 *            objects and the array.  Batches are handed over on a stack
 *            (last in, first out) of at most 100, as in xmalloc-test, so
 *            the live set swings by up to 400,000 objects (26 MB) when one
 *            side runs ahead of the other.
 *  large     20 live blocks of 5-25 MiB (uniform), one replaced at a time:
 *            the new block is allocated and zero-filled by the program, then
 *            the old one is freed (as a C++ unique_ptr assignment does).
 *  thread    two threads, each replacing random slots of its own 1024-slot
 *            array with blocks of random sizes, 4 B..32 KiB with density
 *            1/n^2, writing every byte, as glibc's bench-malloc-thread does.
 *  simple    one thread: for sizes 16, 32 and 64 B and batches of 25, 100,
 *            400 and 1600, allocate the batch, writing every byte, and free
 *            its first half in order and its second half in reverse order,
 *            as glibc's bench-malloc-simple does.
 *  larson    server-like: two arrays of 5000 blocks of 8..1000 B; each round
 *            starts two new threads, each taking over the array the other
 *            thread used in the previous round, and making larson's
 *            100 x 5000 replacements of random blocks (two bytes written, one
 *            read): the first frees of a round are of blocks another (now
 *            finished) thread allocated.
 *
 * Every (shape, allocator) pair runs in a fresh child process
 * (`--child=shapes:<shape>:<allocator>`) so that its RSS is its own; the
 * child runs the shape three times (once with --quick) and records the
 * median time in ms, the peak RSS (VmHWM above the RSS just before the
 * first run) in KiB and the minor page faults per run.  The order of the
 * allocators rotates from shape to shape.  Threads are not pinned: these are
 * programs, and the scheduler's placement is part of their shape.
 *
 * Bounds: the largest live set is the large shape's (at most 21 blocks of
 * 25 MiB); each child has a time limit (alarm) and the large shape checks
 * its RSS every 16 replacements and stops at 2 GiB.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "workloads.h"

static const char *const sh_allocs[] = { "glibc",    "jemalloc",     "mimalloc",
					 "tcmalloc", "sheaf-malloc", "sheaf-malloc-prev",
					 NULL };

struct sh_shape {
	const char *name;
	int (*run)(struct bench_pool *p, bool quick);
};

static inline uint64_t sh_rand(uint64_t *s)
{
	/* xorshift64*: fixed seeds give every allocator the same sequence. */
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* ---- xmalloc: batches filled by two threads, freed by two others ---------------- */

#define XM_BATCH    4096u
#define XM_INFLIGHT 100u /* xmalloc-test's batch_count_limit */

struct xm_batch {
	struct xm_batch *next;
	void *obj[XM_BATCH]; /* 8 + 4096 * 8 = 32,776 bytes */
};

struct xm_queue {
	pthread_mutex_t lock;
	pthread_cond_t more, room;
	struct xm_batch *head;   /* top of the stack; protected by lock */
	unsigned n;              /* batches queued; protected by lock */
	unsigned producers_left; /* protected by lock */
	struct bench_pool *p;
	uint64_t batches; /* per producer */
	_Atomic int failed;
};

static void *xm_producer(void *x)
{
	struct xm_queue *q = x;
	struct bench_pool *p = q->p;

	for (uint64_t b = 0; b < q->batches && !atomic_load(&q->failed); b++) {
		struct xm_batch *bt = p->malloc_fn(sizeof(*bt));

		if (!bt) {
			atomic_store(&q->failed, 1);
			break;
		}
		for (unsigned i = 0; i < XM_BATCH; i++) {
			char *o = p->malloc_fn(64);

			if (!o)
				atomic_store(&q->failed, 1);
			else
				memset(o, (int)(i & 255), 64);
			bt->obj[i] = o;
		}
		pthread_mutex_lock(&q->lock);
		while (q->n >= XM_INFLIGHT && !atomic_load(&q->failed))
			pthread_cond_wait(&q->room, &q->lock);
		bt->next = q->head;
		q->head = bt;
		q->n++;
		pthread_cond_signal(&q->more);
		pthread_mutex_unlock(&q->lock);
	}
	pthread_mutex_lock(&q->lock);
	q->producers_left--;
	pthread_cond_broadcast(&q->more);
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

static void *xm_consumer(void *x)
{
	struct xm_queue *q = x;
	struct bench_pool *p = q->p;

	for (;;) {
		struct xm_batch *bt;

		pthread_mutex_lock(&q->lock);
		while (!q->head && q->producers_left)
			pthread_cond_wait(&q->more, &q->lock);
		bt = q->head;
		if (bt) {
			q->head = bt->next;
			q->n--;
			pthread_cond_signal(&q->room);
		}
		pthread_mutex_unlock(&q->lock);
		if (!bt)
			return NULL;
		for (unsigned i = 0; i < XM_BATCH; i++)
			p->free_fn(bt->obj[i]); /* free(NULL) is fine for every contender */
		p->free_fn(bt);
	}
}

static int sh_xmalloc(struct bench_pool *p, bool quick)
{
	struct xm_queue q = { .lock = PTHREAD_MUTEX_INITIALIZER,
			      .more = PTHREAD_COND_INITIALIZER,
			      .room = PTHREAD_COND_INITIALIZER,
			      .producers_left = 2,
			      .p = p,
			      .batches = quick ? 100 : 1000 };
	pthread_t t[4];
	bool started[4];

	/* Consumers first; a thread that cannot start fails the run, and
	 * whatever is left queued is freed here. */
	for (int i = 3; i >= 0; i--) {
		started[i] = !pthread_create(&t[i], NULL, i < 2 ? xm_producer : xm_consumer, &q);
		if (!started[i]) {
			pthread_mutex_lock(&q.lock);
			atomic_store(&q.failed, 1);
			if (i < 2)
				q.producers_left--;
			pthread_cond_broadcast(&q.more);
			pthread_cond_broadcast(&q.room);
			pthread_mutex_unlock(&q.lock);
		}
	}
	if (!started[2] && !started[3])
		xm_consumer(&q); /* producers wait for room: drain here */
	for (int i = 0; i < 4; i++)
		if (started[i])
			pthread_join(t[i], NULL);
	xm_consumer(&q); /* nothing is left queued after this */
	return atomic_load(&q.failed) ? -1 : 0;
}

/* ---- large: 20 live blocks of 5-25 MiB, one replaced at a time -------------------- */

#define LG_SLOTS         20u
#define LG_MIN           (5u << 20)
#define LG_MAX           (25u << 20)
#define LG_RSS_LIMIT_KIB (2l << 20) /* 2 GiB: far above the shape's own ~550 MiB */

static int sh_large(struct bench_pool *p, bool quick)
{
	void *slot[LG_SLOTS] = { 0 };
	uint64_t rng = 42, iters = quick ? 60 : 300;
	int rc = 0;

	for (uint64_t i = 0; i < iters; i++) {
		uint64_t r = sh_rand(&rng);
		unsigned k = (unsigned)(r % LG_SLOTS);
		size_t n = LG_MIN + (size_t)((r >> 16) % (LG_MAX - LG_MIN + 1));
		char *b = p->malloc_fn(n);

		if (!b) {
			rc = -1;
			break;
		}
		memset(b, 0, n);
		if (slot[k])
			p->free_fn(slot[k]);
		slot[k] = b;
		if ((i & 15) == 15 && bench_rss_kib() > LG_RSS_LIMIT_KIB) {
			rc = -1;
			break;
		}
	}
	for (unsigned k = 0; k < LG_SLOTS; k++)
		if (slot[k])
			p->free_fn(slot[k]);
	return rc;
}

/* ---- thread: per-thread random sizes in and out of a local array ------------------ */

#define TH_SLOTS 1024u

struct th_arg {
	struct bench_pool *p;
	uint64_t ops, seed;
	int failed;
};

#define TH_SIZES   8000u
#define TH_OFFSETS (4u * TH_SLOTS)

static void *th_thread(void *x)
{
	struct th_arg *a = x;
	void **slot = calloc(TH_SLOTS, sizeof(void *));
	unsigned *size = malloc(TH_SIZES * sizeof(unsigned));
	unsigned *off = malloc(TH_OFFSETS * sizeof(unsigned));
	uint64_t rng = a->seed;

	if (!slot || !size || !off) {
		a->failed = 1;
		free(slot);
		free(size);
		free(off);
		return NULL;
	}
	/* bench-malloc-thread's tables: sizes 4 B .. 32 KiB with density 1/n^2 (half of
	 * them 8 B or less, a mean of about 36 B), slots uniform; both replayed in turn. */
	for (unsigned i = 0; i < TH_SIZES; i++) {
		double u = (double)(sh_rand(&rng) >> 11) / (double)(1ull << 53);
		size[i] = (unsigned)(1.0 / ((1.0 / 32768 - 1.0 / 4) * u + 1.0 / 4));
	}
	for (unsigned i = 0; i < TH_OFFSETS; i++)
		off[i] = (unsigned)(sh_rand(&rng) % TH_SLOTS);
	for (uint64_t i = 0; i < a->ops; i++) {
		unsigned k = off[i % TH_OFFSETS];
		size_t n = size[i % TH_SIZES];
		char *o;

		if (slot[k])
			a->p->free_fn(slot[k]);
		o = a->p->malloc_fn(n);
		if (!o) {
			slot[k] = NULL;
			a->failed = 1;
			break;
		}
		for (size_t g = 0; g < n; g++) /* every byte, as the original */
			o[g] = (char)g;
		slot[k] = o;
	}
	for (unsigned k = 0; k < TH_SLOTS; k++)
		if (slot[k])
			a->p->free_fn(slot[k]);
	free(slot);
	free(size);
	free(off);
	return NULL;
}

static int sh_thread(struct bench_pool *p, bool quick)
{
	struct th_arg a[2];
	pthread_t t[2];
	int rc = 0;

	for (int i = 0; i < 2; i++) {
		a[i] = (struct th_arg){ .p = p,
					.ops = quick ? 300000 : 2000000,
					.seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) };
		if (pthread_create(&t[i], NULL, th_thread, &a[i])) {
			th_thread(&a[i]);
			t[i] = 0;
		}
	}
	for (int i = 0; i < 2; i++) {
		if (t[i])
			pthread_join(t[i], NULL);
		rc |= a[i].failed ? -1 : 0;
	}
	return rc;
}

/* ---- simple: one thread, batches of small blocks allocated and freed --------------- */

static int sh_simple(struct bench_pool *p, bool quick)
{
	/* bench-malloc-simple's sizes (16, 2 x 16, 4 x 16) and batches; each block is
	 * written over its whole size, and a batch is freed half in the order it was
	 * allocated, half in the reverse order. */
	static const size_t sizes[] = { 16, 32, 64 };
	static const unsigned batches[] = { 25, 100, 400, 1600 };
	uint64_t per = quick ? 200000 : 1000000; /* blocks per (size, batch) */
	char *v[1600];

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); b++) {
			unsigned nb = batches[b];

			for (uint64_t done = 0; done < per; done += nb) {
				for (unsigned i = 0; i < nb; i++) {
					char *o = p->malloc_fn(sizes[s]);

					if (!o) {
						while (i--)
							p->free_fn(v[i]);
						return -1;
					}
					for (size_t g = 0; g < sizes[s]; g++)
						o[g] = (char)g;
					v[i] = o;
				}
				for (unsigned i = 0; i < nb / 2; i++)
					p->free_fn(v[i]);
				for (unsigned i = nb; i-- > nb / 2;)
					p->free_fn(v[i]);
			}
		}
	}
	return 0;
}

/* ---- larson: blocks freed by the thread that comes next ----------------------------- */

#define LA_SLOTS   5000u
#define LA_THREADS 2u

struct la_arg {
	struct bench_pool *p;
	void **slot;
	uint64_t ops, rng;
	int failed;
};

static void *la_thread(void *x)
{
	struct la_arg *a = x;

	for (uint64_t i = 0; i < a->ops; i++) {
		uint64_t r = sh_rand(&a->rng);
		unsigned k = (unsigned)(r % LA_SLOTS);
		size_t n = 8 + (size_t)((r >> 20) % 993); /* 8..1000 B */
		char *o;

		a->p->free_fn(a->slot[k]);
		o = a->p->malloc_fn(n);
		if (!o) {
			a->slot[k] = NULL;
			a->failed = 1;
			break;
		}
		/* larson's own touch: two bytes written, one read */
		((volatile char *)o)[0] = 'a';
		(void)((volatile char *)o)[0];
		((volatile char *)o)[1] = 'b';
		a->slot[k] = o;
	}
	return NULL;
}

static int sh_larson(struct bench_pool *p, bool quick)
{
	void **arr[LA_THREADS];
	/* Generations of threads; each thread makes larson's 100 x 5000 replacements
	 * before the next one takes its array over. */
	unsigned rounds = quick ? 1 : 4;
	uint64_t rng = 4141;
	int rc = 0;

	for (unsigned t = 0; t < LA_THREADS; t++) {
		arr[t] = calloc(LA_SLOTS, sizeof(void *));
		if (!arr[t])
			rc = -1;
	}
	for (unsigned t = 0; t < LA_THREADS && !rc; t++)
		for (unsigned k = 0; k < LA_SLOTS && !rc; k++) {
			char *o = p->malloc_fn(8 + (size_t)(sh_rand(&rng) % 993));

			if (!o)
				rc = -1;
			else
				o[0] = 1;
			arr[t][k] = o;
		}
	for (unsigned r = 0; r < rounds && !rc; r++) {
		struct la_arg a[LA_THREADS];
		pthread_t th[LA_THREADS];
		bool started[LA_THREADS];

		for (unsigned t = 0; t < LA_THREADS; t++) {
			/* Thread t of this round takes the array thread t-1 of the
			 * previous round used. */
			a[t] = (struct la_arg){ .p = p,
						.slot = arr[(t + r) % LA_THREADS],
						.ops = (quick ? 20 : 100) * LA_SLOTS,
						.rng = rng + 977u * (r * LA_THREADS + t) };
			started[t] = !pthread_create(&th[t], NULL, la_thread, &a[t]);
			if (!started[t])
				la_thread(&a[t]);
		}
		for (unsigned t = 0; t < LA_THREADS; t++) {
			if (started[t])
				pthread_join(th[t], NULL);
			if (a[t].failed)
				rc = -1;
		}
	}
	for (unsigned t = 0; t < LA_THREADS; t++) {
		if (!arr[t])
			continue;
		for (unsigned k = 0; k < LA_SLOTS; k++)
			p->free_fn(arr[t][k]);
		free(arr[t]);
	}
	return rc;
}

/* ---- the workload --------------------------------------------------------------------- */

static const struct sh_shape sh_shapes[] = {
	{ "xmalloc", sh_xmalloc }, { "large", sh_large },   { "thread", sh_thread },
	{ "simple", sh_simple },   { "larson", sh_larson },
};
#define SH_NSHAPES (sizeof(sh_shapes) / sizeof(sh_shapes[0]))
#define SH_NALLOCS (sizeof(sh_allocs) / sizeof(sh_allocs[0]) - 1)

#define SH_ROUNDS_MAX 3
#define SH_ROUND_WL   "shapes-round" /* the rounds' own records: not in the report's tables */

static int sh_rounds(const struct bench_ctx *ctx)
{
	return ctx->quick ? 1 : SH_ROUNDS_MAX;
}

/* @a's figure in round @r of @shape (NAN if that child did not report it). */
static double sh_round_value(const struct bench_ctx *ctx, const char *shape, int r,
			     const char *series, const char *a)
{
	char v[48];

	snprintf(v, sizeof(v), "%s/%d", shape, r);
	return bench_headline(bench_find(ctx, SH_ROUND_WL, v, series, a));
}

/* @a against @b on @series: the median over the rounds of the ratio within each round
 * (the two ran one after the other, so a slow phase of the host touches both). */
static double sh_ratio(const struct bench_ctx *ctx, const char *shape, const char *series,
		       const char *a, const char *b)
{
	double q[SH_ROUNDS_MAX];
	int n = 0;

	for (int r = 0; r < sh_rounds(ctx); r++) {
		double x = sh_round_value(ctx, shape, r, series, a);
		double y = sh_round_value(ctx, shape, r, series, b);

		if (!isnan(x) && !isnan(y) && y > 0)
			q[n++] = x / y;
	}
	struct bench_stat st;
	bench_stat_compute(q, n, &st); /* NAN when n is 0 */
	return st.med;
}

/* The rounds of @a on @shape as the workload's records: time (median of the rounds),
 * peak (the highest, as one process's VmHWM over its runs was), faults (mean). */
static void sh_combine(struct bench_ctx *ctx, const char *shape, const char *a)
{
	double t[SH_ROUNDS_MAX], peak = NAN, faults = 0;
	int n = 0, nf = 0;
	struct bench_stat st;

	for (int r = 0; r < sh_rounds(ctx); r++) {
		double x = sh_round_value(ctx, shape, r, "time", a);
		double pk = sh_round_value(ctx, shape, r, "peak", a);
		double f = sh_round_value(ctx, shape, r, "faults", a);

		if (!isnan(x))
			t[n++] = x;
		if (!isnan(pk) && (isnan(peak) || pk > peak))
			peak = pk;
		if (!isnan(f)) {
			faults += f;
			nf++;
		}
	}
	if (!n)
		return;
	bench_stat_compute(t, n, &st);
	bench_record(ctx, "shapes", shape, "time", a, "ms", BH_MEDIAN, &st);
	memset(&st, 0, sizeof(st));
	st.n = 1;
	if (!isnan(peak)) {
		st.min = st.p10 = st.p25 = st.med = st.p75 = st.max = peak;
		bench_record(ctx, "shapes", shape, "peak", a, "KiB", BH_VALUE, &st);
	}
	if (nf) {
		st.min = st.p10 = st.p25 = st.med = st.p75 = st.max = faults / nf;
		bench_record(ctx, "shapes", shape, "faults", a, "faults", BH_VALUE, &st);
	}
}

/* Shape number @s: each contender in a fresh child process, one run per child, in
 * rounds (every contender once a round, the order turned by one each round), so that
 * the host's slow and fast phases fall on every contender alike; then the rounds
 * combined. */
static void sh_spawn_rounds(struct bench_ctx *ctx, size_t s)
{
	const char *shape = sh_shapes[s].name;

	for (int r = 0; r < sh_rounds(ctx); r++) {
		for (size_t i = 0; i < SH_NALLOCS; i++) {
			const char *name = sh_allocs[(i + s + (size_t)r) % SH_NALLOCS];
			const struct bench_alloc *a = bench_alloc_find(name);
			char arg[128];

			if (!a || !a->available || !(a->apis & BENCH_API_MALLOC) ||
			    !bench_alloc_selected(ctx, a->name))
				continue;
			bench_progress(ctx, "shapes %s: %s, round %d of %d (child process)", shape,
				       a->name, r + 1, sh_rounds(ctx));
			snprintf(arg, sizeof(arg), "%s/%d:%s", shape, r, a->name);
			bench_spawn_child(ctx, "shapes", arg, NULL);
		}
	}
	for (size_t i = 0; i < SH_NALLOCS; i++)
		sh_combine(ctx, shape, sh_allocs[i]);
}

static void sh_run(struct bench_ctx *ctx)
{
	double log_rss = 0;
	int n_rss = 0;

	for (size_t s = 0; s < SH_NSHAPES; s++) {
		const char *shape = sh_shapes[s].name;
		char text[200];
		double r;

		sh_spawn_rounds(ctx, s);
		r = sh_ratio(ctx, shape, "time", "sheaf-malloc", "mimalloc");
		snprintf(text, sizeof(text), "shape %s: sheaf-malloc's time <= 1.0x mimalloc's",
			 shape);
		if (isnan(r))
			bench_target(ctx, "shapes", -1, text, "not measured");
		else
			bench_target(ctx, "shapes", r <= 1.0, text, "%.2fx", r);
		if (!strcmp(shape, "large")) {
			double g = sh_ratio(ctx, shape, "time", "sheaf-malloc", "glibc");
			double t = sh_ratio(ctx, shape, "time", "sheaf-malloc", "tcmalloc");
			/* At most the faster of the two: the larger of the two ratios. */
			double best = isnan(g) ? t : isnan(t) ? g : fmax(g, t);
			snprintf(text, sizeof(text),
				 "shape large: sheaf-malloc's time <= 1.0x the best of glibc and "
				 "tcmalloc");
			if (isnan(best))
				bench_target(ctx, "shapes", -1, text, "not measured");
			else
				bench_target(ctx, "shapes", best <= 1.0, text,
					     "%.2fx glibc, %.2fx tcmalloc", g, t);
		}
		r = sh_ratio(ctx, shape, "peak", "sheaf-malloc", "mimalloc");
		if (!isnan(r) && r > 0) {
			log_rss += log(r);
			n_rss++;
		}
	}
	if (n_rss == (int)SH_NSHAPES)
		bench_target(ctx, "shapes", exp(log_rss / n_rss) <= 1.1,
			     "shapes: sheaf-malloc's peak RSS <= 1.1x mimalloc's (geometric mean)",
			     "%.2fx", exp(log_rss / n_rss));
	else
		bench_target(ctx, "shapes", -1,
			     "shapes: sheaf-malloc's peak RSS <= 1.1x mimalloc's (geometric mean)",
			     "not measured for every shape");
}

static int sh_child(struct bench_ctx *ctx, const char *arg)
{
	char sname[32], rvariant[48];
	const char *colon = strrchr(arg, ':');
	const struct sh_shape *sh = NULL;
	const struct bench_alloc *a;
	struct bench_pool p;
	struct bench_stat st;
	int reps = ctx->quick ? 1 : 3;
	double ms[3];
	long base, hwm;
	char why[256];
	/* "shape/R:alloc" (sh_spawn_rounds): one run of round R, recorded under SH_ROUND_WL
	 * with the variant "shape/R"; "shape:alloc": three runs (one with --quick). */
	const char *wl = "shapes", *variant = sname;

	if (!colon || (size_t)(colon - arg) >= sizeof(sname))
		return 2;
	memcpy(sname, arg, (size_t)(colon - arg));
	sname[colon - arg] = 0;
	char *slash = strchr(sname, '/');
	if (slash) {
		snprintf(rvariant, sizeof(rvariant), "%s", sname);
		*slash = 0;
		reps = 1;
		wl = SH_ROUND_WL;
		variant = rvariant;
	}
	for (size_t i = 0; i < SH_NSHAPES; i++)
		if (!strcmp(sh_shapes[i].name, sname))
			sh = &sh_shapes[i];
	a = bench_alloc_find(colon + 1);
	if (!sh || !a)
		return 2;
	if (!a->available || a->kind != BK_MALLOC)
		return 3;
	if (bench_pool_open(&p, a, 64, 0, why, sizeof(why))) {
		bench_note(ctx, "shapes", "%s %s: %s", sname, a->name, why);
		return 1;
	}
	/* A watchdog: a shape that hangs or runs away ends the child (SIGALRM). */
	alarm(ctx->quick ? 60 : 300);
	if (bench_hwm_reset())
		bench_note(ctx, "shapes", "could not reset VmHWM: peak includes start-up");
	base = bench_rss_kib();
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	for (int i = 0; i < reps; i++) {
		uint64_t t0 = bench_now_ns();

		if (sh->run(&p, ctx->quick)) {
			bench_note(ctx, "shapes",
				   "%s %s: allocation failed (or RSS over its bound)", sname,
				   a->name);
			return 1;
		}
		ms[i] = (double)(bench_now_ns() - t0) / 1e6;
	}
	hwm = bench_hwm_kib();
	getrusage(RUSAGE_SELF, &ru1);
	alarm(0);
	bench_stat_compute(ms, reps, &st);
	bench_record(ctx, wl, variant, "time", a->name, "ms", BH_MEDIAN, &st);
	memset(&st, 0, sizeof(st));
	st.n = 1;
	st.min = st.p10 = st.p25 = st.med = st.p75 = st.max = (double)(hwm - base);
	bench_record(ctx, wl, variant, "peak", a->name, "KiB", BH_VALUE, &st);
	/* Minor page faults per run: a count, not a time, so valid on a busy machine
	 * (the large shape's cost is mostly faults of memory given back and taken again). */
	st.min = st.p10 = st.p25 = st.med = st.p75 = st.max =
		(double)(ru1.ru_minflt - ru0.ru_minflt) / reps;
	bench_record(ctx, wl, variant, "faults", a->name, "faults", BH_VALUE, &st);
	bench_pool_close(&p);
	return 0;
}

static const struct bench_workload wl_shapes = {
	.name = "shapes",
	.title = "7. Malloc program shapes: time and peak RSS",
	.order = 60,
	.about =
		"Five small programs of the shapes where Sheaf's malloc trailed in public "
		"allocator benchmarks, written for this project, each run in a fresh child "
		"process per allocator and run, in three rounds (every allocator once a round; the median time, and targets on the median of the per-round ratios; one round with --quick). xmalloc: "
		"2 threads fill batches of 4096 x 64 B (each batch's pointer array 32,776 B) "
		"that 2 other threads free, handed over on a stack of at most 100 batches; large: 20 live blocks of 5-25 MiB, one replaced "
		"at a time, each zero-filled; thread: 2 threads replace random slots of a "
		"1024-slot array with 4 B-32 KiB blocks (density 1/n^2, every byte written); simple: one thread allocates and "
		"frees batches of 25-1600 blocks of 16-64 B, each written, half in order, half in reverse; larson: blocks freed by the "
		"next thread (new threads each round take over the previous round's "
		"arrays; 500,000 replacements per thread, 4 rounds). Time in ms (median); peak = VmHWM above the RSS before the first "
		"run, KiB; faults = minor page faults per run (a count: valid on a busy "
		"machine).",
	.run = sh_run,
	.child = sh_child,
};
BENCH_REGISTER(wl_shapes)
