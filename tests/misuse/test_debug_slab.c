/* SPDX-License-Identifier: MIT */
/*
 * test_debug_slab.c - debug caches (kernel slab_debug= semantics): each kind
 * of heap bug is caught and its report names the cache, the object, what is
 * wrong and where, and the last allocation and free sites (checked in a child
 * process, which the report aborts), plus option parsing and layout.
 *
 * The deliberate corruptions are written with raw_write(), which ASan does
 * not instrument: in an ASan build the slots are poisoned (track.h) and ASan
 * would otherwise stop the stray write before Sheaf's own check can see it.
 */
#include <pthread.h>
#include <signal.h>

#include "harness.h"
#include "cache/cache.h"
#include "sheaf.h"
#include "sheaf_stats.h"

#if defined(__SANITIZE_ADDRESS__)
#define NO_ASAN __attribute__((no_sanitize_address, noinline))
#else
#define NO_ASAN __attribute__((noinline))
#endif

static NO_ASAN void raw_write(void *p, long off, int v, size_t n)
{
	volatile unsigned char *b = (volatile unsigned char *)p + off;
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)v;
}

struct obj {
	long a, b, c, d; /* 32 bytes */
};

/* True if some address printed after @marker (up to the next line that does
 * not start a backtrace entry) lies within [fn, fn + 4 KiB). */
static bool site_after(const char *err, const char *marker, void (*fn)(void *))
{
	const char *p = strstr(err, marker);
	uintptr_t lo = (uintptr_t)fn, hi = lo + 4096;
	if (!p)
		return false;
	const char *end = p;
	/* the marker's line and its "#n" backtrace lines */
	for (;;) {
		end = strchr(end, '\n');
		if (!end || strncmp(end + 1, "sheaf:     #", 12) != 0)
			break;
		end++;
	}
	for (const char *q = p; (q = strstr(q, "0x")) && (!end || q < end); q += 2) {
		uintptr_t a = (uintptr_t)strtoull(q, NULL, 16);
		if (a > lo && a < hi)
			return true;
	}
	return false;
}

static bool aborted(const struct th_child *r)
{
	return r->signaled && r->sig == SIGABRT;
}

static struct sheaf_cache *mk(const char *name, unsigned flags)
{
	struct sheaf_cache_args a = { .flags = flags };
	struct sheaf_cache *c = sheaf_cache_create(name, sizeof(struct obj), &a);
	REQUIRE(c != NULL);
	return c;
}

/* ---- double free --------------------------------------------------------------- */

static __attribute__((noinline)) void child_double_free(void *arg)
{
	struct sheaf_cache *c = mk("dbg-dfree", 0); /* selected by the option */
	struct obj *o = sheaf_cache_alloc(c);
	fprintf(stderr, "@obj=%p\n", (void *)o);
	sheaf_cache_free(c, o);
	sheaf_cache_free(c, o);
	fprintf(stderr, "@survived\n");
}

static void test_double_free(void)
{
	struct th_child r;
	th_run_child(child_double_free, NULL, &r);
	CHECKF(aborted(&r), "status %d sig %d: %s", r.status, r.sig, r.err);
	CHECK(strstr(r.err, "@survived") == NULL);
	const char *o = strstr(r.err, "@obj=");
	REQUIRE(o);
	char want[160], addr[32] = { 0 };
	sscanf(o + 5, "%31s", addr);
	snprintf(want, sizeof(want),
		 "sheaf: double free: cache 'dbg-dfree' address %s: the object is already free",
		 addr);
	CHECKF(strstr(r.err, want) != NULL, "no '%s' in: %s", want, r.err);
	CHECKF(site_after(r.err, "last allocated at", child_double_free), "%s", r.err);
	CHECKF(site_after(r.err, "last freed at", child_double_free), "%s", r.err);
}

/* The same through free_bulk: the recorded free and the operation that found it name
 * the program's call site (both named sheaf_cache_free_bulk until 2026-11-29). */
static __attribute__((noinline)) void child_double_free_bulk(void *arg)
{
	struct sheaf_cache *c = mk("dbg-dfree-bulk", 0);
	void *v[1] = { sheaf_cache_alloc(c) };
	sheaf_cache_free_bulk(c, 1, v);
	sheaf_cache_free_bulk(c, 1, v);
	fprintf(stderr, "@survived\n");
}

static void test_double_free_bulk(void)
{
	struct th_child r;
	th_run_child(child_double_free_bulk, NULL, &r);
	CHECKF(aborted(&r), "status %d sig %d: %s", r.status, r.sig, r.err);
	CHECK(strstr(r.err, "sheaf: double free: cache 'dbg-dfree-bulk'") != NULL);
	CHECKF(site_after(r.err, "last freed at", child_double_free_bulk), "%s", r.err);
	CHECKF(site_after(r.err, "operation called from", child_double_free_bulk), "%s", r.err);
}

/* ---- write after free ------------------------------------------------------------ */

static __attribute__((noinline)) void child_write_after_free(void *arg)
{
	struct sheaf_cache *c = mk("dbg-uaf", 0);
	struct obj *o = sheaf_cache_alloc(c);
	fprintf(stderr, "@obj=%p\n", (void *)o);
	sheaf_cache_free(c, o);
	raw_write(o, 12, 0x42, 1); /* a stray write into the free object */
	/* Debug caches have no sheaves: the next allocation pops the same slot
	 * (the head of the slab's free list) and checks its poison. */
	struct obj *p = sheaf_cache_alloc(c);
	fprintf(stderr, "@survived %p\n", (void *)p);
}

static void test_write_after_free(void)
{
	struct th_child r;
	th_run_child(child_write_after_free, NULL, &r);
	CHECKF(aborted(&r), "status %d sig %d: %s", r.status, r.sig, r.err);
	const char *o = strstr(r.err, "@obj=");
	REQUIRE(o);
	char want[160], addr[32] = { 0 };
	sscanf(o + 5, "%31s", addr);
	snprintf(want, sizeof(want),
		 "sheaf: write after free: cache 'dbg-uaf' address %s: poison overwritten", addr);
	CHECKF(strstr(r.err, want) != NULL, "no '%s' in: %s", want, r.err);
	CHECKF(strstr(r.err, "first bad byte at offset 12: 0x42") != NULL, "%s", r.err);
	CHECK(strstr(r.err, "6b 6b 6b 6b 42 6b") != NULL); /* the bytes around it */
	CHECKF(site_after(r.err, "last allocated at", child_write_after_free), "%s", r.err);
	CHECKF(site_after(r.err, "last freed at", child_write_after_free), "%s", r.err);
	CHECK(site_after(r.err, "operation called from", child_write_after_free));
}

/* ---- red-zone overwrite ------------------------------------------------------------ */

static __attribute__((noinline)) void child_redzone(void *arg)
{
	long where = (long)(intptr_t)arg;
	struct sheaf_cache *c = mk("dbg-rz", 0);
	struct obj *o = sheaf_cache_alloc(c);
	fprintf(stderr, "@obj=%p\n", (void *)o);
	if (where >= 0)
		raw_write(o, (long)sizeof(*o) + where, 0, 1); /* overflow past the end */
	else
		raw_write(o, where, 0, 1); /* underflow before the start */
	sheaf_cache_free(c, o);
	fprintf(stderr, "@survived\n");
}

static void test_redzone_overwrite(void)
{
	struct th_child r;
	th_run_child(child_redzone, (void *)(intptr_t)3, &r);
	CHECKF(aborted(&r), "status %d sig %d: %s", r.status, r.sig, r.err);
	CHECKF(strstr(r.err, "sheaf: buffer overflow: cache 'dbg-rz' address 0x") != NULL, "%s",
	       r.err);
	CHECKF(strstr(r.err, "first bad byte 3 bytes after the object: 0x00") != NULL, "%s", r.err);
	CHECK(strstr(r.err, "cc cc cc 00 cc") != NULL);
	CHECKF(site_after(r.err, "last allocated at", child_redzone), "%s", r.err);
	CHECK(strstr(r.err, "last freed: never") != NULL);

	th_run_child(child_redzone, (void *)(intptr_t)-5, &r);
	CHECKF(aborted(&r), "%s", r.err);
	CHECKF(strstr(r.err, "first bad byte 5 bytes before the object: 0x00") != NULL, "%s",
	       r.err);
}

/* A red zone damaged while the object is free is found at the next allocation. */
static __attribute__((noinline)) void child_redzone_free(void *arg)
{
	struct sheaf_cache *c = mk("dbg-rz", 0);
	struct obj *o = sheaf_cache_alloc(c);
	sheaf_cache_free(c, o);
	raw_write(o, (long)sizeof(*o), 0x77, 2);
	sheaf_cache_alloc(c);
}

static void test_redzone_while_free(void)
{
	struct th_child r;
	th_run_child(child_redzone_free, NULL, &r);
	CHECKF(aborted(&r), "%s", r.err);
	CHECKF(strstr(r.err, "red zone overwritten while the object was free") != NULL, "%s",
	       r.err);
	CHECK(strstr(r.err, "first bad byte 0 bytes after the object: 0x77") != NULL);
}

/* ---- foreign free ------------------------------------------------------------------ */

static __attribute__((noinline)) void child_foreign(void *arg)
{
	int kind = (int)(intptr_t)arg;
	struct sheaf_cache *c = mk("dbg-foreign", 0);
	struct sheaf_cache *other = mk("dbg-other", 0);
	static struct obj not_ours;
	struct obj *o = sheaf_cache_alloc(c);
	struct obj *q = sheaf_cache_alloc(other);
	if (kind == 0)
		sheaf_cache_free(c, &not_ours); /* never from Sheaf */
	else if (kind == 1)
		sheaf_cache_free(c, q); /* from another cache */
	else
		sheaf_cache_free(c, (char *)o + 8); /* inside an object */
	fprintf(stderr, "@survived\n");
}

static void test_foreign_free(void)
{
	struct th_child r;
	char want[160];
	th_run_child(child_foreign, (void *)0, &r);
	CHECKF(aborted(&r), "%s", r.err);
	CHECKF(strstr(r.err, "sheaf: invalid pointer: cache 'dbg-foreign' address 0x") != NULL,
	       "%s", r.err);
	th_run_child(child_foreign, (void *)1, &r);
	CHECKF(aborted(&r), "%s", r.err);
	CHECKF(strstr(r.err, "free of an object of cache 'dbg-other'") != NULL, "%s", r.err);
	th_run_child(child_foreign, (void *)2, &r);
	CHECKF(aborted(&r), "%s", r.err);
	snprintf(want, sizeof(want), "sheaf: interior pointer: cache 'dbg-foreign' address");
	CHECKF(strstr(r.err, want) != NULL, "%s", r.err);
}

/* ---- warn mode: reported, leaked, the program goes on --------------------------------- */

static void child_warn(void *arg)
{
	sheaf_error_set_warn(1); /* as SHEAF_ON_ERROR=warn */
	struct sheaf_cache *c = mk("dbg-warn", 0);
	struct obj *o = sheaf_cache_alloc(c);
	sheaf_cache_free(c, o);
	raw_write(o, 0, 0x11, 4);
	struct obj *p = sheaf_cache_alloc(c); /* o is corrupt: leaked, another one comes */
	fprintf(stderr, "@same=%d\n", p == o);
	sheaf_cache_free(c, p);
	sheaf_cache_free(c, p); /* double free: reported, ignored */
	struct obj *x = sheaf_cache_alloc(c), *y = sheaf_cache_alloc(c);
	fprintf(stderr, "@distinct=%d\n", x != y && x != o && y != o);
}

static void test_warn_mode(void)
{
	struct th_child r;
	th_run_child(child_warn, NULL, &r);
	CHECKF(r.exited && r.status == 0, "status %d sig %d: %s", r.status, r.sig, r.err);
	CHECK(strstr(r.err, "write after free") != NULL);
	CHECK(strstr(r.err, "double free") != NULL);
	CHECK(strstr(r.err, "object leaked, continuing") != NULL);
	CHECK(strstr(r.err, "@same=0") != NULL);
	CHECK(strstr(r.err, "@distinct=1") != NULL);
}

/* ---- prefilled sheaves of a debug cache are checked like any allocation ---------------- */

static __attribute__((noinline)) void child_prefill(void *arg)
{
	struct sheaf_cache *c = mk("dbg-prefill", 0);
	struct sheaf_prefilled *p = sheaf_cache_prefill(c, 8);
	REQUIRE(p != NULL);
	struct obj *o[4];
	for (int i = 0; i < 4; i++) {
		o[i] = sheaf_cache_alloc_from(c, p);
		REQUIRE(o[i] != NULL);
		memset(o[i], i, sizeof(*o[i]));
	}
	for (int i = 0; i < 4; i++)
		sheaf_cache_free(c, o[i]);
	sheaf_cache_return(c, p); /* the unused ones go back to the slabs */
	fprintf(stderr, "@clean\n");
	if (!arg)
		return;
	/* A stray write into a free object is caught when a prefilled sheaf hands
	 * it out again. */
	struct obj *x = sheaf_cache_alloc(c);
	sheaf_cache_free(c, x);
	raw_write(x, 20, 0x55, 1);
	p = sheaf_cache_prefill(c, 64); /* takes every free object of the slab */
	for (int i = 0; i < 64; i++)
		sheaf_cache_alloc_from(c, p);
	fprintf(stderr, "@survived\n");
}

static void test_prefill(void)
{
	struct th_child r;
	th_run_child(child_prefill, NULL, &r);
	CHECKF(r.exited && r.status == 0 && strstr(r.err, "@clean"), "status %d sig %d: %s",
	       r.status, r.sig, r.err);
	CHECK(strstr(r.err, "BUG") == NULL);
	th_run_child(child_prefill, (void *)1, &r);
	CHECKF(aborted(&r), "status %d sig %d: %s", r.status, r.sig, r.err);
	CHECKF(strstr(r.err, "sheaf: write after free: cache 'dbg-prefill'") &&
		       strstr(r.err, "poison overwritten") != NULL &&
		       strstr(r.err, "first bad byte at offset 20: 0x55") != NULL,
	       "%s", r.err);
}

/* ---- threads: cross-thread frees in a debug cache are clean ------------------------- */

#define MT_THREADS 4
#define MT_OBJS    1500
static struct sheaf_cache *mt_cache;
static void *mt_objs[MT_THREADS][MT_OBJS];
static pthread_barrier_t mt_barrier;

static void *mt_worker(void *arg)
{
	int me = (int)(intptr_t)arg;
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < MT_OBJS; i++) {
			mt_objs[me][i] = sheaf_cache_alloc(mt_cache);
			memset(mt_objs[me][i], me, sizeof(struct obj));
		}
		pthread_barrier_wait(&mt_barrier);
		/* free the neighbour's objects: every free is a remote one */
		int other = (me + 1) % MT_THREADS;
		for (int i = 0; i < MT_OBJS; i++)
			sheaf_cache_free(mt_cache, mt_objs[other][i]);
		pthread_barrier_wait(&mt_barrier);
	}
	return NULL;
}

static void child_threads(void *arg)
{
	mt_cache = mk("dbg-mt", 0);
	pthread_barrier_init(&mt_barrier, NULL, MT_THREADS);
	pthread_t t[MT_THREADS];
	for (int i = 0; i < MT_THREADS; i++)
		pthread_create(&t[i], NULL, mt_worker, (void *)(intptr_t)i);
	for (int i = 0; i < MT_THREADS; i++)
		pthread_join(t[i], NULL);
	struct sheaf_stats st = { .size = sizeof(st) };
	sheaf_stats_get(mt_cache, &st);
	fprintf(stderr, "@inuse=%llu\n", (unsigned long long)st.objects_inuse);
}

static void test_threads(void)
{
	struct th_child r;
	th_run_child(child_threads, NULL, &r);
	CHECKF(r.exited && r.status == 0, "status %d sig %d: %s", r.status, r.sig, r.err);
	CHECK(strstr(r.err, "BUG") == NULL);
	CHECKF(strstr(r.err, "@inuse=0") != NULL, "%s", r.err);
}

/* ---- selection, layout and clean operation -------------------------------------------- */

static void test_selection_and_layout(void)
{
	CHECK(sheaf_debug_slab_flags_for("dbg-anything") == SHEAF_DEBUG_ALL);
	CHECK(sheaf_debug_slab_flags_for("dbg-zonly") == SHEAF_DEBUG_REDZONE);
	CHECK(sheaf_debug_slab_flags_for("dbg-off") == 0);
	CHECK(sheaf_debug_slab_flags_for("plain") == 0);
	CHECK(sheaf_debug_slab_flags_for("debug-objects") == 0); /* R11 */

	struct sheaf_cache *c = mk("dbg-layout", 0);
	struct sheaf_cache *plain = mk("plain", 0);
	struct sheaf_stats s = { .size = sizeof(s) }, p = { .size = sizeof(p) };
	REQUIRE(sheaf_stats_get(c, &s) == 0 && sheaf_stats_get(plain, &p) == 0);
	CHECK(s.sheaf_capacity == 0); /* debug caches have no sheaves (K§3) */
	CHECK(p.sheaf_capacity > 0);
	CHECK(s.slot_size >= 16 + 32 + 16 + 8); /* red zones and metadata around the object */
	CHECK(sheaf_cache_object_size(c) == sizeof(struct obj));

	/* A clean life is silent; objects stay aligned; poison is what P promises. */
	void *v[300];
	for (int i = 0; i < 300; i++) {
		v[i] = sheaf_cache_alloc(c);
		REQUIRE(v[i] != NULL);
		CHECK(((uintptr_t)v[i] & 15) == 0);
		CHECK(sheaf_cache_of(v[i]) == c);
		memset(v[i], i, sizeof(struct obj));
	}
	for (int i = 0; i < 300; i++)
		sheaf_cache_free(c, v[i]);
	struct obj *o = sheaf_cache_alloc(c);
	const unsigned char *b = (const unsigned char *)o;
	CHECK(b[0] == 0x6b && b[sizeof(struct obj) - 1] == 0xa5); /* uninitialised = poison */
	sheaf_cache_free(c, o);
	CHECK(sheaf_cache_alloc_bulk(c, 50, v) == 50);
	sheaf_cache_free_bulk(c, 50, v);

	/* Flags given at creation work without the option; P is dropped for ctors. */
	struct sheaf_cache_args a = { .flags = SHEAF_DEBUG_REDZONE };
	struct sheaf_cache *z = sheaf_cache_create("byflag", 24, &a);
	REQUIRE(z != NULL);
	void *zo = sheaf_cache_alloc(z);
	CHECK(zo != NULL);
	sheaf_cache_free(z, zo);
	sheaf_cache_destroy(z);
	sheaf_cache_destroy(c);
	sheaf_cache_destroy(plain);

	/* Near the largest object size the red zones and tracks give way, and at
	 * the largest the cache stays a normal one: creation never fails. */
	struct sheaf_cache_args all = { .flags = SHEAF_DEBUG_ALL };
	size_t sizes[2] = { SHEAF_MAX_OBJECT_SIZE - 64, SHEAF_MAX_OBJECT_SIZE };
	for (int i = 0; i < 2; i++) {
		struct sheaf_cache *big = sheaf_cache_create("dbg-big", sizes[i], &all);
		REQUIRE(big != NULL);
		CHECK((big->debug_flags != 0) == (i == 0));
		CHECK(!(big->debug_flags & (SHEAF_DEBUG_REDZONE | SHEAF_DEBUG_STORE_USER)));
		unsigned char *bo = sheaf_cache_alloc(big);
		REQUIRE(bo != NULL);
		if (i == 0)
			CHECK(bo[0] == 0x6b && bo[sizes[i] - 1] == 0xa5); /* P kept */
		memset(bo, 1, sizes[i]);
		sheaf_cache_free(big, bo);
		sheaf_cache_destroy(big);
	}
}

int main(void)
{
	/* Everything named dbg-* gets every check, dbg-zonly red zones only, dbg-off none. */
	REQUIRE(sheaf_option_set("SLAB_DEBUG", "FZPU,dbg-*;Z,dbg-zonly;-,dbg-off") == 0);
	RUN(test_selection_and_layout);
	RUN(test_double_free);
	RUN(test_double_free_bulk);
	RUN(test_write_after_free);
	RUN(test_redzone_overwrite);
	RUN(test_redzone_while_free);
	RUN(test_foreign_free);
	RUN(test_warn_mode);
	RUN(test_prefill);
	RUN(test_threads);
	return th_done();
}
