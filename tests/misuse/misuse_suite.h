/* SPDX-License-Identifier: MIT */
/*
 * misuse_suite.h - every misuse of the object API that Sheaf promises to report
 * (README "Errors"), one child process per kind and per entry point: the child must
 * print exactly one line "sheaf: <kind>: cache '<name>' address 0x<addr>..." and abort,
 * or, under SHEAF_ON_ERROR=warn, report, leak and go on.  A last test makes every
 * misuse under warn and then checks that no object is handed out twice and that no
 * two live objects overlap.
 *
 * The same suite runs on three kinds of cache (the including file sets MS_FLAVOR):
 * a plain cache, a cache with a constructor and a SHEAF_TYPESAFE_BY_RCU cache (their
 * free objects keep their contents, so the double-free mark lives outside the
 * object: the constructed state and RCU readers must be unharmed), and in both
 * per-CPU modes (the .env sidecar of test_misuse_thread selects per-thread sheaves).
 */
#ifndef MISUSE_SUITE_H
#define MISUSE_SUITE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <urcu/urcu-memb.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_stats.h"
#include "barn/barn.h" /* struct sheaf_sheaf: the objects a prefilled sheaf holds */

/* Internal (tests link the static library): switch the error mode in a child. */
void sheaf_error_set_warn(int warn);
unsigned long sheaf_error_count(void);

enum {
	MS_PLAIN,
	MS_CTOR,
	MS_TYPESAFE
};
#ifndef MS_FLAVOR
#define MS_FLAVOR MS_PLAIN
#endif

#define MS_SIZE       64
#define MS_CTOR_MAGIC 0xc0457c0457c04570ull

struct ms_obj {
	uint64_t ctor_state; /* set by the constructor; must survive every free */
	uint64_t words[MS_SIZE / 8 - 1];
};

static void ms_ctor(void *p)
{
	struct ms_obj *o = p;
	o->ctor_state = MS_CTOR_MAGIC;
	for (unsigned i = 0; i < MS_SIZE / 8 - 1; i++)
		o->words[i] = MS_CTOR_MAGIC + i;
}

static struct sheaf_cache *ms_new_cache(const char *name)
{
	struct sheaf_cache_args a = { 0 };
	if (MS_FLAVOR == MS_CTOR)
		a.ctor = ms_ctor;
	if (MS_FLAVOR == MS_TYPESAFE)
		a.flags = SHEAF_TYPESAFE_BY_RCU;
	struct sheaf_cache *c = sheaf_cache_create(name, MS_SIZE, &a);
	REQUIRE(c);
	return c;
}

static struct sheaf_cache *ms_a, *ms_b; /* "ms-a", "ms-b" */

/* ---- Child-process checks --------------------------------------------------------- */

struct ms_case {
	void (*fn)(void *);
	void *arg;
};

/* One line, "sheaf: <kind>: cache '<cache>' address <addr>", and SIGABRT. */
static void ms_expect(const char *what, void (*fn)(void *), void *arg, const char *kind,
		      const char *cache, const void *addr)
{
	th_expect_report(what, fn, arg, kind, cache, addr);
}

/* Under SHEAF_ON_ERROR=warn: the child reports the same line, marked as leaked, and
 * exits 0 (it goes on after the report). */
static void ms_expect_warn(const char *what, void (*fn)(void *), void *arg, const char *kind,
			   const void *addr)
{
	struct th_child r;
	sheaf_error_set_warn(1);
	th_run_child(fn, arg, &r);
	sheaf_error_set_warn(0);
	char head[160], at[64];
	snprintf(head, sizeof(head), "sheaf: %s: ", kind);
	snprintf(at, sizeof(at), "address %#lx", (unsigned long)(uintptr_t)addr);
	CHECKF(r.exited && r.status == 0, "%s (warn): exit %d signal %d: %s", what, r.status, r.sig,
	       r.err);
	CHECKF(strstr(r.err, head) && strstr(r.err, at), "%s (warn): expected '%s' and '%s' in: %s",
	       what, head, at, r.err);
	CHECKF(strstr(r.err, "SHEAF_ON_ERROR=warn") != NULL, "%s (warn): not marked as leaked: %s",
	       what, r.err);
}

static void *ms_alloc(struct sheaf_cache *c)
{
	void *p = sheaf_cache_alloc(c);
	REQUIRE(p);
	return p;
}

/* ---- Interior pointers: every free entry point ----------------------------------------- */

static void do_interior_free(void *p)
{
	sheaf_cache_free(ms_a, (char *)p + 8);
}
static void do_interior_free_last_byte(void *p)
{
	sheaf_cache_free(ms_a, (char *)p + MS_SIZE - 1);
}
static void do_interior_bulk(void *p)
{
	void *v[1] = { (char *)p + 8 };
	sheaf_cache_free_bulk(ms_a, 1, v);
}
static void do_interior_bulk_mixed(void *p)
{
	void *q = ms_alloc(ms_a);
	void *v[3] = { q, (char *)p + 16, NULL };
	sheaf_cache_free_bulk(ms_a, 3, v);
}
/* Issue 18: a run long enough for the batch path (checked as a whole, then copied in
 * one sequence), the interior pointer in its middle. */
static void do_interior_bulk_run(void *p)
{
	void *v[41];
	REQUIRE(sheaf_cache_alloc_bulk(ms_a, 40, v) == 40);
	v[40] = v[20];
	v[20] = (char *)p + 8;
	sheaf_cache_free_bulk(ms_a, 41, v);
}
static void do_interior_rcu(void *p)
{
	sheaf_cache_free_rcu(ms_a, (char *)p + 8);
	sheaf_cache_rcu_barrier(ms_a);
}

/* A slot size that is not a power of two (48): the reciprocal test, where p + 16 is a
 * multiple of 16 but no object start. */
static struct sheaf_cache *ms_48;
static void do_interior_48(void *p)
{
	sheaf_cache_free(ms_48, p);
}
static void do_df_48(void *p)
{
	sheaf_cache_free(ms_48, p);
	sheaf_cache_free(ms_48, p);
}

static void test_interior(void)
{
	struct sheaf_cache_args a48 = { .flags = MS_FLAVOR == MS_TYPESAFE ? SHEAF_TYPESAFE_BY_RCU :
									    0,
					.ctor = MS_FLAVOR == MS_CTOR ? ms_ctor : NULL };
	ms_48 = sheaf_cache_create("ms-48", 48, &a48);
	REQUIRE(ms_48);
	char *q = ms_alloc(ms_48);
	ms_expect("free(p + 16), 48-byte slots", do_interior_48, q + 16, "interior pointer",
		  "ms-48", q + 16);
	ms_expect("free(p + 8), 48-byte slots", do_interior_48, q + 8, "interior pointer", "ms-48",
		  q + 8);
	ms_expect("free p twice, 48-byte slots", do_df_48, q, "double free", "ms-48", q);
	sheaf_cache_free(ms_48, q);
	void *p = ms_alloc(ms_a);
	ms_expect("free(p + 8)", do_interior_free, p, "interior pointer", "ms-a", (char *)p + 8);
	ms_expect("free(p + size - 1)", do_interior_free_last_byte, p, "interior pointer", "ms-a",
		  (char *)p + MS_SIZE - 1);
	ms_expect("free_bulk({p + 8})", do_interior_bulk, p, "interior pointer", "ms-a",
		  (char *)p + 8);
	ms_expect("free_bulk({q, p + 16})", do_interior_bulk_mixed, p, "interior pointer", "ms-a",
		  (char *)p + 16);
	ms_expect("free_bulk({20 objects, p + 8, 20 objects})", do_interior_bulk_run, p,
		  "interior pointer", "ms-a", (char *)p + 8);
	ms_expect("free_rcu(p + 8)", do_interior_rcu, p, "interior pointer", "ms-a", (char *)p + 8);
	ms_expect_warn("free(p + 8)", do_interior_free, p, "interior pointer", (char *)p + 8);
	sheaf_cache_free(ms_a, p);
}

/* ---- Double frees ------------------------------------------------------------------- */

static void do_df_immediate(void *p)
{
	sheaf_cache_free(ms_a, p);
	sheaf_cache_free(ms_a, p);
}
static void *ms_other;
static void do_df_delayed(void *p)
{
	sheaf_cache_free(ms_a, p);
	sheaf_cache_free(ms_a, ms_other);
	sheaf_cache_free(ms_a, p);
}
static void do_df_many_between(void *p)
{
	void *v[300];
	for (int i = 0; i < 300; i++)
		v[i] = ms_alloc(ms_a);
	sheaf_cache_free(ms_a, p);
	for (int i = 0; i < 300; i++) /* p moves on: full sheaves go to the barn */
		sheaf_cache_free(ms_a, v[i]);
	sheaf_cache_free(ms_a, p);
}
static void *ms_page_pair(struct sheaf_cache *c, void **keep)
{
	/* Two live objects on one page (so one slab): the slab stays after a shrink. */
	void *v[64];
	void *x = NULL;
	for (int i = 0; i < 64; i++)
		v[i] = ms_alloc(c);
	for (int i = 0; i < 64 && !x; i++)
		for (int j = 0; j < 64 && !x; j++)
			if (i != j && ((uintptr_t)v[i] >> 12) == ((uintptr_t)v[j] >> 12)) {
				x = v[i];
				*keep = v[j];
			}
	for (int i = 0; i < 64; i++)
		if (v[i] != x && v[i] != *keep)
			sheaf_cache_free(c, v[i]);
	REQUIRE(x);
	return x;
}
static void do_df_after_shrink(void *p)
{
	sheaf_cache_free(ms_a, p);
	sheaf_cache_shrink(ms_a); /* p is back on its slab's free list */
	sheaf_cache_free(ms_a, p);
}
static void *free_in_thread(void *p)
{
	sheaf_cache_free(ms_a, p);
	return NULL;
}
static void do_df_other_thread(void *p)
{
	pthread_t t;
	pthread_create(&t, NULL, free_in_thread, p);
	pthread_join(t, NULL);
	sheaf_cache_free(ms_a, p);
}
static void *free_in_thread_and_stay(void *p)
{
	sheaf_cache_free(ms_a, p);
	return NULL;
}
static void do_df_thread_alive(void *p)
{
	/* The first free stays in the other thread's sheaf (per-thread mode) or its
	 * CPU's (per-CPU mode): the second free must find it there. */
	pthread_t t;
	pthread_create(&t, NULL, free_in_thread_and_stay, p);
	pthread_join(t, NULL);
	free_in_thread(p);
}
static void do_df_bulk(void *p)
{
	void *v[3] = { p, ms_other, p };
	sheaf_cache_free_bulk(ms_a, 3, v);
}
/* Issue 18: [a, b, a] with a long run between: a's first visit is checked and copied
 * with the run, its second must still be caught. */
static void do_df_bulk_run(void *p)
{
	void *v[42];
	v[0] = p;
	REQUIRE(sheaf_cache_alloc_bulk(ms_a, 40, v + 1) == 40);
	v[41] = p;
	sheaf_cache_free_bulk(ms_a, 42, v);
}
/* Issue 18: the batch check takes four objects of one slab a round (percpu/fastpath.h),
 * testing and writing their marks in order; a pointer given twice within one round, or
 * across two, must be caught as well.  ms_grp: eight objects of the first bulk allocation
 * of a new cache (one new slab), allocated by the parent; ms_grp[0] is the duplicate. */
static struct sheaf_cache *ms_g;
static void *ms_grp[8];
/* @arg: eight indexes into ms_grp, the order of the bulk free. */
static void do_df_bulk_pattern(void *arg)
{
	const int *idx = arg;
	void *v[8];
	for (int i = 0; i < 8; i++)
		v[i] = ms_grp[idx[i]];
	sheaf_cache_free_bulk(ms_g, 8, v);
}
static void test_double_free_bulk_rounds(void)
{
	static const struct {
		const char *what;
		int idx[8];
	} cases[] = {
		{ "free_bulk({a, a, ...})", { 0, 0, 1, 2, 3, 4, 5, 6 } },
		{ "free_bulk({b, a, c, a, ...})", { 1, 0, 2, 0, 3, 4, 5, 6 } },
		{ "free_bulk({a, b, c, a, ...})", { 0, 1, 2, 0, 3, 4, 5, 6 } },
		{ "free_bulk({b, c, d, a, a, ...})", { 1, 2, 3, 0, 0, 4, 5, 6 } }, /* two rounds */
	};
	ms_g = ms_new_cache("ms-g");
	REQUIRE(sheaf_cache_alloc_bulk(ms_g, 8, ms_grp) == 8);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ms_expect(cases[i].what, do_df_bulk_pattern, (void *)cases[i].idx, "double free",
			  "ms-g", ms_grp[0]);
	sheaf_cache_free_bulk(ms_g, 8, ms_grp);
	sheaf_cache_destroy(ms_g);
}
/* Issue 18: a bulk free spread over several slabs (300 objects of 64 bytes, 64 a slab):
 * the batch check's rounds go on in each new slab (percpu/freecheck.c), and a double free
 * or an interior pointer there, after the first slab changes, must be caught as well.
 * ms_big: the first bulk allocation of a new cache, by the parent. */
#define MS_BIG 300
static struct sheaf_cache *ms_s;
static void *ms_big[MS_BIG];
/* @arg: the index that takes the bad pointer; the duplicate of ms_big[250] when it is
 * below 300 (the object it replaces is leaked), ms_big[arg - 300] + 8 otherwise. */
static void do_bulk_slabs(void *arg)
{
	static void *v[MS_BIG];
	size_t at = (size_t)arg;
	for (int i = 0; i < MS_BIG; i++)
		v[i] = ms_big[i];
	if (at < MS_BIG)
		v[at] = ms_big[250];
	else
		v[at - MS_BIG] = (char *)ms_big[at - MS_BIG] + 8;
	sheaf_cache_free_bulk(ms_s, MS_BIG, v);
}
static void test_bulk_slabs(void)
{
	ms_s = ms_new_cache("ms-s");
	REQUIRE(sheaf_cache_alloc_bulk(ms_s, MS_BIG, ms_big) == MS_BIG);
	ms_expect("free_bulk({300 objects over 5 slabs, a at 250 and 253})", do_bulk_slabs,
		  (void *)(size_t)253, "double free", "ms-s", ms_big[250]);
	ms_expect("free_bulk({300 objects over 5 slabs, a at 250 and 299})", do_bulk_slabs,
		  (void *)(size_t)299, "double free", "ms-s", ms_big[250]);
	ms_expect("free_bulk({300 objects over 5 slabs, a at 20 and 250})", do_bulk_slabs,
		  (void *)(size_t)20, "double free", "ms-s", ms_big[250]);
	ms_expect("free_bulk({300 objects over 5 slabs, p + 8 at 201})", do_bulk_slabs,
		  (void *)(size_t)(MS_BIG + 201), "interior pointer", "ms-s",
		  (char *)ms_big[201] + 8);
	sheaf_cache_free_bulk(ms_s, MS_BIG, ms_big);
	sheaf_cache_destroy(ms_s);
}
/* A double free in a bulk call whose earlier objects empty the duplicate's slab
 * (cache/bulk.c bulk_marked_ok): 2,000 survivors of 6,000 objects (every third kept,
 * the others freed), shuffled, with sheaves of 7, so that the call flushes sheaves to
 * slabs and releases slabs before it reaches the duplicate.  The object was read there
 * and, found nowhere, taken for a live one and freed again: handed out twice later
 * (an adversarial run of 2026-11-28).  ms_ev: the survivors, allocated by the parent;
 * @arg: 0 for [b, a, ..., a], 1 for a freed before the call and passed last, 2 for
 * [b, a, ..., a + 8] (an interior pointer whose object the call frees first: reported as
 * one, not as an invalid pointer after the slab went). */
#define MS_EV 2000
static struct sheaf_cache *ms_e;
static void *ms_ev[MS_EV], *ms_epre;
static void do_bulk_emptied(void *arg)
{
	static void *v[MS_EV];
	for (int i = 0; i < MS_EV; i++)
		v[i] = ms_ev[i];
	if (arg == (void *)2) {
		v[MS_EV - 1] = (char *)v[1] + 8;
	} else if (arg) {
		sheaf_cache_free(ms_e, ms_epre);
		v[MS_EV - 1] = ms_epre;
	} else {
		v[MS_EV - 1] = v[1];
	}
	sheaf_cache_free_bulk(ms_e, MS_EV, v);
}
static void test_bulk_emptied_slab(void)
{
	struct sheaf_cache_args a = { .sheaf_capacity = 7 };
	if (MS_FLAVOR == MS_CTOR)
		a.ctor = ms_ctor;
	if (MS_FLAVOR == MS_TYPESAFE)
		a.flags = SHEAF_TYPESAFE_BY_RCU;
	ms_e = sheaf_cache_create("ms-e", MS_SIZE, &a);
	REQUIRE(ms_e);
	static void *all[3 * MS_EV];
	REQUIRE(sheaf_cache_alloc_bulk(ms_e, 3 * MS_EV, all) == 3 * MS_EV);
	int k = 0;
	for (int i = 0; i < 3 * MS_EV; i++) {
		if (i % 3 == 0)
			ms_ev[k++] = all[i];
		else
			sheaf_cache_free(ms_e, all[i]);
	}
	uint64_t r = 12345;
	for (int i = MS_EV - 1; i > 0; i--) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		int j = (int)((r >> 33) % (uint64_t)(i + 1));
		void *t = ms_ev[i];
		ms_ev[i] = ms_ev[j];
		ms_ev[j] = t;
	}
	ms_epre = sheaf_cache_alloc(ms_e);
	REQUIRE(ms_epre);
	ms_expect("free_bulk({2000 objects over emptied slabs, a at 1 and 1999})", do_bulk_emptied,
		  (void *)0, "double free", "ms-e", ms_ev[1]);
	ms_expect("free a; free_bulk({2000 objects over emptied slabs, a last})", do_bulk_emptied,
		  (void *)1, "double free", "ms-e", ms_epre);
	ms_expect("free_bulk({2000 objects over emptied slabs, a at 1, a + 8 last})",
		  do_bulk_emptied, (void *)2, "interior pointer", "ms-e", (char *)ms_ev[1] + 8);
	sheaf_cache_free(ms_e, ms_epre);
	sheaf_cache_free_bulk(ms_e, MS_EV, ms_ev);
	sheaf_cache_destroy(ms_e);
}
static void do_df_bulk_after_free(void *p)
{
	sheaf_cache_free(ms_a, p);
	void *v[2] = { ms_other, p };
	sheaf_cache_free_bulk(ms_a, 2, v);
}
static void do_df_free_then_rcu(void *p)
{
	sheaf_cache_free(ms_a, p);
	sheaf_cache_free_rcu(ms_a, p);
	sheaf_cache_rcu_barrier(ms_a);
}
static void do_df_rcu_twice(void *p)
{
	sheaf_cache_free_rcu(ms_a, p);
	sheaf_cache_free_rcu(ms_a, ms_other);
	sheaf_cache_free_rcu(ms_a, p);
	sheaf_cache_rcu_barrier(ms_a);
}
static void do_df_rcu_then_free(void *p)
{
	sheaf_cache_free_rcu(ms_a, p);
	sheaf_cache_free(ms_a, p);
	sheaf_cache_rcu_barrier(ms_a);
}
static void do_df_rcu_done_then_free(void *p)
{
	sheaf_cache_free_rcu(ms_a, p);
	sheaf_cache_rcu_barrier(ms_a); /* p is back in the cache */
	sheaf_cache_free(ms_a, p);
}

static void test_double_free(void)
{
	void *p = ms_alloc(ms_a);
	ms_other = ms_alloc(ms_a);
	ms_expect("free a; free a", do_df_immediate, p, "double free", "ms-a", p);
	ms_expect("free a; free b; free a", do_df_delayed, p, "double free", "ms-a", p);
	ms_expect("free a; 300 frees; free a", do_df_many_between, p, "double free", "ms-a", p);
	void *keep, *x = ms_page_pair(ms_a, &keep);
	ms_expect("free a; shrink; free a", do_df_after_shrink, x, "double free", "ms-a", x);
	sheaf_cache_free(ms_a, keep);
	sheaf_cache_free(ms_a, x);
	if (!SANITIZE_THREAD) {
		ms_expect("free a in a thread; free a", do_df_other_thread, p, "double free",
			  "ms-a", p);
		ms_expect("free a in two threads", do_df_thread_alive, p, "double free", "ms-a", p);
	} else {
		/* TSan cannot start threads in a forked child: in this process, under warn
		 * (the report is counted, the object leaked). */
		void *q = ms_alloc(ms_a);
		unsigned long before = sheaf_error_count();
		sheaf_error_set_warn(1);
		do_df_other_thread(q);
		sheaf_error_set_warn(0);
		CHECKF(sheaf_error_count() == before + 1, "free a in a thread; free a: %lu reports",
		       sheaf_error_count() - before);
	}
	ms_expect("free_bulk({a, b, a})", do_df_bulk, p, "double free", "ms-a", p);
	ms_expect("free a; free_bulk({b, a})", do_df_bulk_after_free, p, "double free", "ms-a", p);
	ms_expect("free_bulk({a, 40 objects, a})", do_df_bulk_run, p, "double free", "ms-a", p);
	ms_expect("free a; free_rcu a", do_df_free_then_rcu, p, "double free", "ms-a", p);
	ms_expect("free_rcu a twice", do_df_rcu_twice, p, "double free", "ms-a", p);
	ms_expect("free_rcu a; free a", do_df_rcu_then_free, p, "double free", "ms-a", p);
	ms_expect("free_rcu a; barrier; free a", do_df_rcu_done_then_free, p, "double free", "ms-a",
		  p);
	ms_expect_warn("free a; free b; free a", do_df_delayed, p, "double free", p);
	ms_expect_warn("free_bulk({a, b, a})", do_df_bulk, p, "double free", p);
	ms_expect_warn("free_bulk({a, 40 objects, a})", do_df_bulk_run, p, "double free", p);
	sheaf_cache_free(ms_a, ms_other);
	sheaf_cache_free(ms_a, p);
}

/* A live object may hold any bytes, including whatever a free writes into a free one:
 * never a report for it.  The program copies a freed object's bytes (a use after free
 * read, but of its own memory) into live ones and frees those. */
/* Reads a freed object on purpose: not through ASan's checks. */
__attribute__((no_sanitize_address, noinline)) static void ms_copy_raw(unsigned char *dst,
								       const void *src, size_t n)
{
	const volatile unsigned char *s = src;
	for (size_t i = 0; i < n; i++)
		dst[i] = s[i];
}

static void test_no_false_report(void)
{
	struct sheaf_cache *c = ms_new_cache("ms-copy");
	unsigned char img[MS_SIZE + 64];
	struct ms_obj *d = ms_alloc(c);
	size_t span = sheaf_cache_object_size(c);
	sheaf_cache_free(c, d);
	ms_copy_raw(img, d, span); /* the free object's bytes, mark included when in the object */
	for (int round = 0; round < 4; round++) {
		void *v[200];
		for (int i = 0; i < 200; i++) {
			v[i] = ms_alloc(c);
			memcpy(v[i], img, span);
		}
		for (int i = 0; i < 200; i++)
			sheaf_cache_free(c, v[i]);
	}
	sheaf_cache_destroy(c);
	CHECK(1); /* no abort above */
}

/* ---- Wrong cache, foreign pointers ------------------------------------------------------- */

static void do_wrong_cache(void *p)
{
	sheaf_cache_free(ms_a, p);
}
static void do_wrong_cache_bulk(void *p)
{
	void *v[1] = { p };
	sheaf_cache_free_bulk(ms_a, 1, v);
}
static int ms_cmp(const void *x, const void *y);

/* A pointer that is not @ms_a's (@p: another cache's object, or no object) in a run
 * long enough for the batch path, right after a whole round of four objects of one slab
 * (four of 40 fresh objects in one page, which lies in one slab): the check that goes on
 * from the object that stopped the round must look that object's slab up, not take it
 * as the run's (issue 18; one draft did, and only this case caught it). */
static void do_wrong_cache_bulk_run(void *p)
{
	void *v[40], *w[41];
	REQUIRE(sheaf_cache_alloc_bulk(ms_a, 40, v) == 40);
	qsort(v, 40, sizeof(v[0]), ms_cmp);
	size_t i = 0;
	while (i + 3 < 40 && ((uintptr_t)v[i] >> 12) != ((uintptr_t)v[i + 3] >> 12))
		i++;
	REQUIRE(i + 3 < 40);
	size_t k = 0;
	for (size_t j = i; j < i + 4; j++)
		w[k++] = v[j];
	w[k++] = p;
	for (size_t j = 0; j < 40; j++)
		if (j < i || j >= i + 4)
			w[k++] = v[j];
	sheaf_cache_free_bulk(ms_a, 41, w);
}
static void do_wrong_cache_rcu(void *p)
{
	sheaf_cache_free_rcu(ms_a, p);
	sheaf_cache_rcu_barrier(ms_a);
}
static char ms_static[256] __attribute__((aligned(64)));
static void do_foreign(void *p)
{
	sheaf_cache_free(ms_a, p);
}

static void test_wrong_and_foreign(void)
{
	void *q = ms_alloc(ms_b);
	ms_expect("free into the wrong cache", do_wrong_cache, q, "wrong cache", "ms-a", q);
	ms_expect("free_bulk into the wrong cache", do_wrong_cache_bulk, q, "wrong cache", "ms-a",
		  q);
	ms_expect("free_bulk({20 objects, q of another cache, 20 objects})",
		  do_wrong_cache_bulk_run, q, "wrong cache", "ms-a", q);
	ms_expect("free_rcu into the wrong cache", do_wrong_cache_rcu, q, "wrong cache", "ms-a", q);
	ms_expect("free of a static buffer", do_foreign, ms_static, "invalid pointer", "ms-a",
		  ms_static);
	ms_expect("free_bulk({20 objects, a static buffer, 20 objects})", do_wrong_cache_bulk_run,
		  ms_static, "invalid pointer", "ms-a", ms_static);
	void *m = malloc(64);
	ms_expect("free of glibc's memory", do_foreign, m, "invalid pointer", "ms-a", m);
	free(m);
	sheaf_cache_free(ms_b, q);
}

/* ---- Handles: prefilled sheaves, NULL and destroyed caches ----------------------------- */

static struct sheaf_prefilled *ms_pf;
static void do_return_wrong(void *a)
{
	(void)a;
	sheaf_cache_return(ms_b, ms_pf);
}
static void do_alloc_from_wrong(void *a)
{
	(void)a;
	sheaf_cache_alloc_from(ms_b, ms_pf);
}
/* An address 8 bytes into a lent sheaf, or one no sheaf can be at: reported as no
 * prefilled sheaf.  alloc_from took the word past the first as the owner cache and read
 * its name (SIGSEGV), and read a handle outside the heap as a sheaf (SIGSEGV for NULL + 8;
 * an ASan report for a small glibc block), until 2026-11-30. */
static void do_alloc_from_bad(void *bad)
{
	sheaf_cache_alloc_from(ms_a, bad);
}
static void do_size_bad(void *bad)
{
	(void)sheaf_prefilled_size(bad);
}
static void do_refill_wrong(void *a)
{
	(void)a;
	struct sheaf_prefilled *p = ms_pf;
	sheaf_cache_refill(ms_b, &p, 4);
}
/* A sheaf returned, then returned again or refilled: an oversize one (more than the
 * cache's capacity) of more than 505 objects had a mapping of its own, unmapped by the
 * first return; both calls read it and died of SIGSEGV, without a report, until
 * 2026-11-29 (it lives in a metadata slab since 2026-11-30). */
static void do_return_twice(void *pf)
{
	sheaf_cache_return(ms_a, pf);
	sheaf_cache_return(ms_a, pf);
}
static void do_refill_returned(void *pf)
{
	struct sheaf_prefilled *p = pf;
	sheaf_cache_return(ms_a, p);
	sheaf_cache_refill(ms_a, &p, 4);
}
/* A returned sheaf of more than 505 objects was unmapped at its return, and alloc_from
 * and sheaf_prefilled_size read it: SIGSEGV until 2026-11-30 (every sheaf now lives in
 * a metadata slab, checked through the page map before it is read). */
static void do_alloc_from_returned(void *pf)
{
	sheaf_cache_return(ms_a, pf);
	sheaf_cache_alloc_from(ms_a, pf);
}
static void do_size_returned(void *pf)
{
	sheaf_cache_return(ms_a, pf);
	(void)sheaf_prefilled_size(pf);
}
/* A NULL array of objects to free: nothing was said until 2026-11-30. */
static void do_free_bulk_null_array(void *a)
{
	(void)a;
	sheaf_cache_free_bulk(ms_a, 3, NULL);
}
static void do_alloc_null(void *a)
{
	(void)a;
	sheaf_cache_alloc(NULL);
}
static void do_free_null_cache(void *p)
{
	sheaf_cache_free(NULL, p);
}
static void do_bulk_null_cache(void *p)
{
	void *v[1] = { p };
	sheaf_cache_free_bulk(NULL, 1, v);
}
static struct sheaf_cache *ms_dead;
static void do_alloc_destroyed(void *a)
{
	(void)a;
	sheaf_cache_alloc(ms_dead);
}
static void do_free_destroyed(void *p)
{
	sheaf_cache_free(ms_dead, p);
}
static void do_destroy_twice(void *a)
{
	(void)a;
	sheaf_cache_destroy(ms_dead);
}
static void do_prefill_destroyed(void *a)
{
	(void)a;
	sheaf_cache_prefill(ms_dead, 4);
}
static void do_shrink_destroyed(void *a)
{
	(void)a;
	sheaf_cache_shrink(ms_dead);
}
static void do_stats_destroyed(void *a)
{
	(void)a;
	struct sheaf_stats st = { .size = sizeof(st) };
	sheaf_stats_get(ms_dead, &st);
}
static void do_reset_destroyed(void *a)
{
	(void)a;
	sheaf_stats_reset(ms_dead);
}
static void do_barrier_destroyed(void *a)
{
	(void)a;
	sheaf_cache_rcu_barrier(ms_dead);
}
static void do_free_rcu_destroyed(void *p)
{
	sheaf_cache_free_rcu(ms_dead, p);
}

/* Accessors and printers of a bad handle report it too (README "Errors"): NULL answered
 * NULL / 0 / nothing, and a destroyed cache was read as live, until 2026-11-29. */
static void do_name_null(void *a)
{
	(void)a;
	if (sheaf_cache_name(NULL) != NULL)
		_exit(9);
}
static void do_object_size_null(void *a)
{
	(void)a;
	if (sheaf_cache_object_size(NULL) != 0)
		_exit(9);
}
static void do_stats_print_null(void *a)
{
	(void)a;
	sheaf_stats_print(NULL, stdout);
}
static void do_stats_print_json_null(void *a)
{
	(void)a;
	sheaf_stats_print_json(NULL, stdout);
}
static void do_name_destroyed(void *a)
{
	(void)a;
	(void)sheaf_cache_name(ms_dead);
}
static void do_object_size_destroyed(void *a)
{
	(void)a;
	(void)sheaf_cache_object_size(ms_dead);
}

static void do_free_in_prefilled(void *o)
{
	sheaf_cache_free(ms_a, o);
}

static void test_handles(void)
{
	/* An object still in a prefilled sheaf the program holds is free: freeing it is
	 * a double free (the search looks into lent sheaves). */
	struct sheaf_prefilled *pf = sheaf_cache_prefill(ms_a, 4);
	REQUIRE(pf && sheaf_prefilled_size(pf) >= 4);
	void *in_sheaf = ((struct sheaf_sheaf *)pf)->objects[1];
	ms_expect("free of an object in a prefilled sheaf", do_free_in_prefilled, in_sheaf,
		  "double free", "ms-a", in_sheaf);
	sheaf_cache_return(ms_a, pf);

	ms_pf = sheaf_cache_prefill(ms_a, 4);
	REQUIRE(ms_pf);
	ms_expect("return a prefilled sheaf to another cache", do_return_wrong, NULL, "wrong sheaf",
		  "ms-b", ms_pf);
	ms_expect("alloc_from another cache's sheaf", do_alloc_from_wrong, NULL, "wrong sheaf",
		  "ms-b", ms_pf);
	ms_expect("refill another cache's sheaf", do_refill_wrong, NULL, "wrong sheaf", "ms-b",
		  ms_pf);
	ms_expect_warn("return a prefilled sheaf to another cache", do_return_wrong, NULL,
		       "wrong sheaf", ms_pf);
	/* A sheaf of 17 fills its 192-byte metadata slot: 8 bytes before its end, the fields
	 * alloc_from reads lie in the next slot, poisoned while free (ASan builds died of
	 * use-after-poison there, without the report). */
	struct sheaf_stats sb = { .size = sizeof(sb) };
	REQUIRE(sheaf_stats_get(ms_b, &sb) == 0 && sheaf_cache_set_capacity(ms_b, 4) == 0);
	struct sheaf_prefilled *p17 = sheaf_cache_prefill(ms_b, 17);
	REQUIRE(p17);
	ms_expect("alloc_from at the end of a sheaf", do_alloc_from_bad, (char *)p17 + 184,
		  "wrong sheaf", "ms-a", (char *)p17 + 184);
	sheaf_cache_return(ms_b, p17);
	REQUIRE(sheaf_cache_set_capacity(ms_b, (unsigned)sb.sheaf_capacity) == 0);
	void *bad[] = { (char *)ms_pf + 8, (char *)ms_pf + 64, (void *)8, &bad };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ms_expect("alloc_from of no prefilled sheaf", do_alloc_from_bad, bad[i],
			  "wrong sheaf", "ms-a", bad[i]);
		ms_expect("size of no prefilled sheaf", do_size_bad, bad[i], "wrong sheaf", "?",
			  bad[i]);
	}
	sheaf_cache_return(ms_a, ms_pf);

	struct sheaf_prefilled *big = sheaf_cache_prefill(ms_a, 1000);
	REQUIRE(big && sheaf_prefilled_size(big) >= 1000);
	ms_expect("return an oversize prefilled sheaf twice", do_return_twice, big, "wrong sheaf",
		  "ms-a", big);
	ms_expect("refill a returned oversize sheaf", do_refill_returned, big, "wrong sheaf",
		  "ms-a", big);
	ms_expect_warn("return an oversize prefilled sheaf twice", do_return_twice, big,
		       "wrong sheaf", big);
	ms_expect("alloc_from a returned oversize sheaf", do_alloc_from_returned, big,
		  "wrong sheaf", "ms-a", big);
	ms_expect("size of a returned oversize sheaf", do_size_returned, big, "wrong sheaf", "?",
		  big);
	sheaf_cache_return(ms_a, big);
	pf = sheaf_cache_prefill(ms_a, 4);
	REQUIRE(pf);
	ms_expect("return a prefilled sheaf twice", do_return_twice, pf, "wrong sheaf", "ms-a", pf);
	sheaf_cache_return(ms_a, pf);

	/* One object over the cache's capacity: an oversize sheaf in a metadata slab (up to
	 * 505 objects), which its return frees.  The second return and the refill read the
	 * freed slot: an ASan build died there of use-after-poison, without the report,
	 * until 2026-11-29 (found by fuzz_cache, corpus found-refill-freed-sheaf). */
	struct sheaf_stats st = { .size = sizeof(st) };
	REQUIRE(sheaf_stats_get(ms_a, &st) == 0 && st.sheaf_capacity < 400);
	struct sheaf_prefilled *mid = sheaf_cache_prefill(ms_a, (unsigned)st.sheaf_capacity + 1);
	REQUIRE(mid);
	ms_expect("return an oversize sheaf of a metadata slab twice", do_return_twice, mid,
		  "wrong sheaf", "ms-a", mid);
	ms_expect("refill a returned oversize sheaf of a metadata slab", do_refill_returned, mid,
		  "wrong sheaf", "ms-a", mid);
	ms_expect_warn("refill a returned oversize sheaf of a metadata slab", do_refill_returned,
		       mid, "wrong sheaf", mid);
	ms_expect("alloc_from a returned oversize sheaf of a metadata slab", do_alloc_from_returned,
		  mid, "wrong sheaf", "ms-a", mid);
	ms_expect("size of a returned oversize sheaf of a metadata slab", do_size_returned, mid,
		  "wrong sheaf", "?", mid);
	sheaf_cache_return(ms_a, mid);

	void *p = ms_alloc(ms_a);
	ms_expect("sheaf_cache_alloc(NULL)", do_alloc_null, NULL, "invalid cache", "?", NULL);
	ms_expect("free_bulk from a NULL array", do_free_bulk_null_array, NULL, "invalid pointer",
		  "ms-a", NULL);
	ms_expect("sheaf_cache_free(NULL, p)", do_free_null_cache, p, "invalid cache", "?", NULL);
	ms_expect("sheaf_cache_free_bulk(NULL, ...)", do_bulk_null_cache, p, "invalid cache", "?",
		  NULL);
	ms_expect("sheaf_cache_name(NULL)", do_name_null, NULL, "invalid cache", "?", NULL);
	ms_expect("sheaf_cache_object_size(NULL)", do_object_size_null, NULL, "invalid cache", "?",
		  NULL);
	ms_expect("sheaf_stats_print(NULL, f)", do_stats_print_null, NULL, "invalid cache", "?",
		  NULL);
	ms_expect("sheaf_stats_print_json(NULL, f)", do_stats_print_json_null, NULL,
		  "invalid cache", "?", NULL);
	sheaf_cache_free(ms_a, p);

	ms_dead = ms_new_cache("ms-dead");
	void *d = ms_alloc(ms_dead);
	sheaf_cache_free(ms_dead, d);
	sheaf_cache_destroy(ms_dead);
	ms_expect("alloc from a destroyed cache", do_alloc_destroyed, NULL, "destroyed cache",
		  "ms-dead", ms_dead);
	ms_expect("free into a destroyed cache", do_free_destroyed, d, "destroyed cache", "ms-dead",
		  ms_dead);
	ms_expect("destroy twice", do_destroy_twice, NULL, "destroyed cache", "ms-dead", ms_dead);
	ms_expect("prefill a destroyed cache", do_prefill_destroyed, NULL, "destroyed cache",
		  "ms-dead", ms_dead);
	ms_expect("shrink a destroyed cache", do_shrink_destroyed, NULL, "destroyed cache",
		  "ms-dead", ms_dead);
	ms_expect("statistics of a destroyed cache", do_stats_destroyed, NULL, "destroyed cache",
		  "ms-dead", ms_dead);
	ms_expect("statistics reset of a destroyed cache", do_reset_destroyed, NULL,
		  "destroyed cache", "ms-dead", ms_dead);
	ms_expect("RCU barrier of a destroyed cache", do_barrier_destroyed, NULL, "destroyed cache",
		  "ms-dead", ms_dead);
	ms_expect("free_rcu into a destroyed cache", do_free_rcu_destroyed, d, "destroyed cache",
		  "ms-dead", ms_dead);
	ms_expect("name of a destroyed cache", do_name_destroyed, NULL, "destroyed cache",
		  "ms-dead", ms_dead);
	ms_expect("object size of a destroyed cache", do_object_size_destroyed, NULL,
		  "destroyed cache", "ms-dead", ms_dead);
	ms_expect_warn("destroy twice", do_destroy_twice, NULL, "destroyed cache", ms_dead);
}

/* ---- Bounds and input: EINVAL, no report, errno kept on success ---------------------- */

static void test_bounds(void)
{
	struct sheaf_cache_args a = { .sheaf_capacity = 1u << 30 };
	errno = 0;
	CHECK(sheaf_cache_create("ms-huge", MS_SIZE, &a) == NULL && errno == EINVAL);
	a.sheaf_capacity = SHEAF_MAX_SHEAF_CAPACITY + 1;
	errno = 0;
	CHECK(sheaf_cache_create("ms-huge", MS_SIZE, &a) == NULL && errno == EINVAL);
	a.sheaf_capacity = SHEAF_MAX_SHEAF_CAPACITY;
	struct sheaf_cache *c = sheaf_cache_create("ms-max", MS_SIZE, &a);
	CHECK(c != NULL);
	if (c) {
		CHECK(sheaf_cache_set_capacity(c, SHEAF_MAX_SHEAF_CAPACITY + 1) == -EINVAL);
		CHECK(sheaf_cache_set_capacity(c, 1u << 30) == -EINVAL);
		CHECK(sheaf_cache_set_capacity(c, 0) == -EINVAL);
		CHECK(sheaf_cache_set_capacity(c, 16) == 0);
		sheaf_cache_destroy(c);
	}
	struct sheaf_cache_args f = { .flags = 0x8000u };
	errno = 0;
	CHECK(sheaf_cache_create("ms-flags", MS_SIZE, &f) == NULL && errno == EINVAL);
	f.flags = 0x80000000u; /* the bit the malloc front end uses internally */
	errno = 0;
	CHECK(sheaf_cache_create("ms-flags", MS_SIZE, &f) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(sheaf_cache_create("ms-big", (size_t)SHEAF_MAX_OBJECT_SIZE + 1, NULL) == NULL &&
	      errno == EINVAL);
	errno = 0;
	CHECK(sheaf_cache_create("ms-zero", 0, NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(sheaf_cache_prefill(ms_a, SHEAF_MAX_SHEAF_CAPACITY + 1) == NULL && errno == EINVAL);
	/* The byte bound: 1 MiB objects, 64 of them at most per sheaf or prefill. */
	struct sheaf_cache_args big = { .sheaf_capacity = 65 };
	errno = 0;
	CHECK(sheaf_cache_create("ms-1m", 1u << 20, &big) == NULL && errno == EINVAL);
	big.sheaf_capacity = 64;
	struct sheaf_cache *m1 = sheaf_cache_create("ms-1m", 1u << 20, &big);
	CHECK(m1 != NULL);
	if (m1) {
		CHECK(sheaf_cache_set_capacity(m1, 65) == -EINVAL);
		errno = 0;
		CHECK(sheaf_cache_prefill(m1, 65) == NULL && errno == EINVAL);
		/* A bulk request beyond the machine's memory fails at once, with nothing
		 * taken (a fill would run the machine out of memory first). */
		static void *huge[1];
		errno = 0;
		CHECK(sheaf_cache_alloc_bulk(m1, (size_t)1 << 40, huge) == 0 && errno == ENOMEM);
		sheaf_cache_destroy(m1);
	}

	/* Successful calls leave errno alone. */
	errno = 1234;
	c = ms_new_cache("ms-errno");
	CHECKF(errno == 1234, "create changed errno to %d", errno);
	void *p = sheaf_cache_alloc(c);
	sheaf_cache_free(c, p);
	struct sheaf_prefilled *pf = sheaf_cache_prefill(c, 3);
	CHECK(pf != NULL);
	sheaf_cache_return(c, pf);
	void *v[50];
	CHECK(sheaf_cache_alloc_bulk(c, 50, v) == 50);
	sheaf_cache_free_bulk(c, 50, v);
	sheaf_cache_shrink(c);
	sheaf_cache_destroy(c);
	CHECKF(errno == 1234, "a successful call changed errno to %d", errno);
}

/* ---- Under warn: go on after every kind; nothing handed out twice, no overlap --------- */

#define MS_LIVE 3000
static int ms_cmp(const void *x, const void *y)
{
	uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
	return a < b ? -1 : a > b;
}

static void do_warn_continue(void *arg)
{
	(void)arg;
	struct sheaf_cache *c = ms_new_cache("ms-cont");
	struct sheaf_cache *other = ms_new_cache("ms-cont-b");
	void *keep, *f = ms_page_pair(c, &keep); /* f's slab outlives the shrink below */
	void *a = ms_alloc(c), *b = ms_alloc(c), *d = ms_alloc(c), *e = ms_alloc(c);
	sheaf_cache_free(c, (char *)a + 8); /* interior */
	sheaf_cache_free(c, a);
	sheaf_cache_free(c, b);
	sheaf_cache_free(c, a); /* delayed double free */
	void *v[3] = { d, e, d };
	sheaf_cache_free_bulk(c, 3, v); /* double free inside one bulk call */
	sheaf_cache_free(c, f);
	sheaf_cache_shrink(c);
	sheaf_cache_free(c, f); /* double free of an object back on its slab */
	if (MS_FLAVOR != MS_PLAIN) {
		/* Free after free_rcu: reported at once where the mark is outside the
		 * object; in a plain cache only at the end of the grace period, and only
		 * if the object was not handed out again meanwhile (README). */
		void *g = ms_alloc(c);
		sheaf_cache_free_rcu(c, g);
		sheaf_cache_free(c, g);
	}
	void *h = ms_alloc(c);
	sheaf_cache_free_rcu(c, h);
	sheaf_cache_free_rcu(c, h); /* free_rcu twice */
	sheaf_cache_rcu_barrier(c);
	void *w = ms_alloc(other);
	sheaf_cache_free(c, w); /* wrong cache: leaked, w stays live in other */
	struct sheaf_prefilled *pf = sheaf_cache_prefill(other, 2);
	sheaf_cache_return(c, pf); /* wrong sheaf: leaked */

	/* Allocate many: every address distinct, no two live objects overlap. */
	static uintptr_t live[MS_LIVE + 2];
	size_t n = 0;
	for (int i = 0; i < MS_LIVE; i++) {
		live[n] = (uintptr_t)sheaf_cache_alloc(c);
		if (!live[n])
			_exit(20);
		if (MS_FLAVOR == MS_CTOR && ((struct ms_obj *)live[n])->ctor_state != MS_CTOR_MAGIC)
			_exit(22); /* constructed state lost */
		memset((void *)live[n], 0x5a, MS_SIZE);
		n++;
	}
	live[n++] = (uintptr_t)w;
	live[n++] = (uintptr_t)keep;
	qsort(live, n, sizeof(live[0]), ms_cmp);
	for (size_t i = 1; i < n; i++)
		if (live[i] < live[i - 1] + MS_SIZE)
			_exit(21);
	_exit(0);
}

static void test_warn_continue(void)
{
	struct th_child r;
	sheaf_error_set_warn(1);
	th_run_child(do_warn_continue, NULL, &r);
	sheaf_error_set_warn(0);
	CHECKF(r.exited && r.status == 0,
	       "exit %d signal %d (20: no memory, 21: overlap, 22: ctor state lost): %s", r.status,
	       r.sig, r.err);
	static const char *const kinds[] = { "interior pointer", "double free", "wrong cache",
					     "wrong sheaf" };
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		CHECKF(strstr(r.err, kinds[i]) != NULL, "no '%s' report in: %s", kinds[i], r.err);
	/* interior, delayed, bulk, slab, [free after free_rcu,] free_rcu twice, wrong
	 * cache, wrong sheaf */
	int lines = 0, want = MS_FLAVOR == MS_PLAIN ? 7 : 8;
	for (const char *s = r.err; (s = strchr(s, '\n')) != NULL; s++)
		lines++;
	CHECKF(lines == want, "expected %d reports, got %d: %s", want, lines, r.err);
}

/* ---- Constructed state and RCU readers unharmed by the checks -------------------------- */

static atomic_int ms_stop;
static struct ms_obj *_Atomic ms_shared;
static atomic_long ms_reads, ms_bad;

static void *ms_reader(void *arg)
{
	(void)arg;
	urcu_memb_register_thread();
	while (!atomic_load(&ms_stop)) {
		urcu_memb_read_lock();
		struct ms_obj *o = atomic_load(&ms_shared);
		if (o) {
			/* Typesafe: the object may have been freed and reused, but it is
			 * always an ms_obj whose constructed state is intact. */
			/* Relaxed atomics: a typesafe object may be reused (and its fields
			 * rewritten with the same values) while a reader looks at it. */
			if (__atomic_load_n(&o->ctor_state, __ATOMIC_RELAXED) != MS_CTOR_MAGIC)
				atomic_fetch_add(&ms_bad, 1);
			/* Plain: free_rcu keeps every byte until the grace period ends. */
			if (MS_FLAVOR == MS_PLAIN &&
			    __atomic_load_n(&o->words[0], __ATOMIC_RELAXED) !=
				    0x1111111111111111ull)
				atomic_fetch_add(&ms_bad, 1);
			atomic_fetch_add(&ms_reads, 1);
		}
		urcu_memb_read_unlock();
	}
	urcu_memb_unregister_thread();
	return NULL;
}

static void test_readers_unharmed(void)
{
	struct sheaf_cache *c = ms_new_cache("ms-readers");
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, ms_reader, NULL);
	for (int round = 0; round < 3000; round++) {
		struct ms_obj *o = ms_alloc(c);
		if (MS_FLAVOR == MS_CTOR) {
			CHECK(o->ctor_state == MS_CTOR_MAGIC);
		} else {
			/* Written before it is published, never cleared: typesafe readers
			 * may see it after a free (the allocator writes nothing into the
			 * object), plain readers until the grace period ends. */
			__atomic_store_n(&o->ctor_state, MS_CTOR_MAGIC, __ATOMIC_RELAXED);
			for (unsigned i = 0; i < MS_SIZE / 8 - 1; i++)
				__atomic_store_n(&o->words[i], 0x1111111111111111ull,
						 __ATOMIC_RELAXED);
		}
		struct ms_obj *old = atomic_exchange(&ms_shared, o);
		if (old) {
			/* A reader may still hold @old.  A ctor cache without TYPESAFE_BY_RCU
			 * keeps its objects constructed but not readable after a free: under
			 * ASan, whose poison Sheaf sets on free, such a read is (rightly) a
			 * use after free, so there every free waits for the readers (the
			 * ASan run of this session's matrix hit it once). */
			if (MS_FLAVOR == MS_PLAIN)
				sheaf_cache_free_rcu(c, old);
			else if (round % 2 && !(MS_FLAVOR == MS_CTOR && SANITIZE_ADDRESS))
				sheaf_cache_free(c, old); /* typesafe/ctor: reuse at once is fine */
			else
				sheaf_cache_free_rcu(c, old);
		}
	}
	atomic_store(&ms_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	struct ms_obj *last = atomic_exchange(&ms_shared, NULL);
	sheaf_cache_free_rcu(c, last);
	sheaf_cache_rcu_barrier(c);
	CHECKF(atomic_load(&ms_bad) == 0, "%ld of %ld reads saw a damaged object",
	       atomic_load(&ms_bad), atomic_load(&ms_reads));
	if (MS_FLAVOR == MS_CTOR) {
		/* Every object the cache hands out is still constructed. */
		void *v[500];
		for (int i = 0; i < 500; i++) {
			v[i] = ms_alloc(c);
			CHECK(((struct ms_obj *)v[i])->ctor_state == MS_CTOR_MAGIC);
		}
		for (int i = 0; i < 500; i++)
			sheaf_cache_free(c, v[i]);
	}
	sheaf_cache_destroy(c);
}

static int ms_main(void)
{
	ms_a = ms_new_cache("ms-a");
	ms_b = ms_new_cache("ms-b");
	RUN(test_interior);
	RUN(test_double_free);
	RUN(test_double_free_bulk_rounds);
	RUN(test_bulk_slabs);
	RUN(test_bulk_emptied_slab);
	RUN(test_no_false_report);
	RUN(test_wrong_and_foreign);
	RUN(test_handles);
	RUN(test_bounds);
	RUN(test_warn_continue);
	RUN(test_readers_unharmed);
	return th_done();
}

#endif /* MISUSE_SUITE_H */
