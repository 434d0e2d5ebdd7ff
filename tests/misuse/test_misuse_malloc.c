/* SPDX-License-Identifier: MIT */
/*
 * test_misuse_malloc.c - misuse of the malloc front end (sheaf_malloc.h; the preload
 * library's names call the same functions, tests/integration/test_misuse_preload.sh
 * runs them under LD_PRELOAD): interior pointers and double frees through free,
 * realloc and free_sized, each one line "sheaf: <kind>: cache '<name>' address <p>"
 * and abort (or report and leak under SHEAF_ON_ERROR=warn); requests of any size fail
 * cleanly without using up memory; successful calls keep errno.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>

#include "harness.h"
#include "sheaf.h"
#include "sheaf_malloc.h"

void sheaf_error_set_warn(int warn);
void *sheaf_malloc_memalign(size_t align, size_t size);
int sheaf_malloc_posix_memalign(void **memptr, size_t align, size_t size);
void *sheaf_malloc_pvalloc(size_t size);
void *sheaf_malloc_reallocarray(void *ptr, size_t nmemb, size_t size);

static void expect(const char *what, void (*fn)(void *), void *arg, const char *kind,
		   const char *cache, const void *addr)
{
	th_expect_report(what, fn, arg, kind, cache, addr);
}

static void do_free_interior(void *p)
{
	sheaf_free((char *)p + 8);
}
static void do_realloc_interior(void *p)
{
	sheaf_realloc((char *)p + 8, 200);
}
static void do_realloc_interior_same(void *p)
{
	sheaf_realloc((char *)p + 8, 60);
}
static void do_free_sized_interior(void *p)
{
	sheaf_free_sized((char *)p + 8, 56);
}
static void do_usable_interior(void *p)
{
	sheaf_usable_size((char *)p + 8);
}
static void do_usable_freed(void *p)
{
	sheaf_free(p);
	sheaf_usable_size(p);
}

static void test_interior(void)
{
	char *p = sheaf_malloc(64);
	REQUIRE(p);
	const char *cn = sheaf_cache_name(sheaf_cache_of(p));
	REQUIRE(cn);
	expect("free(p + 8)", do_free_interior, p, "interior pointer", cn, p + 8);
	expect("realloc(p + 8, 200)", do_realloc_interior, p, "interior pointer", cn, p + 8);
	expect("realloc(p + 8, same class)", do_realloc_interior_same, p, "interior pointer", cn,
	       p + 8);
	expect("free_sized(p + 8)", do_free_sized_interior, p, "interior pointer", cn, p + 8);
	expect("malloc_usable_size(p + 8)", do_usable_interior, p, "interior pointer", cn, p + 8);
	/* Of a freed block: a use after free, not a double free (nothing was freed twice;
	 * it said "double free" until 2026-11-28). */
	expect("free(p); malloc_usable_size(p)", do_usable_freed, p, "invalid pointer", cn, p);
	sheaf_free(p);
	/* A class whose size is not a power of two: p + 16 is 16-aligned but no start. */
	char *q = sheaf_malloc(48);
	REQUIRE(q);
	const char *cq = sheaf_cache_name(sheaf_cache_of(q));
	expect("free(p + 16), 48-byte class", do_free_interior, q + 8, "interior pointer", cq,
	       q + 16);
	sheaf_free(q);
}

static void *other;
static void do_df(void *p)
{
	sheaf_free(p);
	sheaf_free(p);
}
static void do_df_delayed(void *p)
{
	sheaf_free(p);
	sheaf_free(other);
	sheaf_free(p);
}
static void do_df_realloc(void *p)
{
	sheaf_free(p);
	sheaf_realloc(p, 500);
}
static void do_df_realloc_same(void *p)
{
	sheaf_free(p);
	sheaf_realloc(p, 60);
}
static void do_df_sized(void *p)
{
	sheaf_free(p);
	sheaf_free_sized(p, 64);
}
static void do_df_realloc_moved(void *p)
{
	void *q = sheaf_realloc(p, 5000); /* moves: p is freed */
	(void)q;
	sheaf_free(p);
}
static void *free_in_thread(void *p)
{
	sheaf_free(p);
	return NULL;
}
static void do_df_thread(void *p)
{
	pthread_t t;
	pthread_create(&t, NULL, free_in_thread, p);
	pthread_join(t, NULL);
	sheaf_free(p);
}

static void test_double_free(void)
{
	void *p = sheaf_malloc(64);
	other = sheaf_malloc(64);
	REQUIRE(p && other);
	const char *cn = sheaf_cache_name(sheaf_cache_of(p));
	expect("free p; free p", do_df, p, "double free", cn, p);
	expect("free p; free q; free p", do_df_delayed, p, "double free", cn, p);
	expect("free p; realloc p", do_df_realloc, p, "double free", cn, p);
	expect("free p; realloc p (same class)", do_df_realloc_same, p, "double free", cn, p);
	expect("free p; free_sized p", do_df_sized, p, "double free", cn, p);
	expect("realloc moved p; free p", do_df_realloc_moved, p, "double free", cn, p);
	expect("free p in a thread; free p", do_df_thread, p, "double free", cn, p);
	/* Under warn: reported, leaked, and the program goes on. */
	struct th_child r;
	sheaf_error_set_warn(1);
	th_run_child(do_df_delayed, p, &r);
	sheaf_error_set_warn(0);
	CHECKF(r.exited && r.status == 0 && strstr(r.err, "double free") &&
		       strstr(r.err, "SHEAF_ON_ERROR=warn"),
	       "warn: exit %d: %s", r.status, r.err);
	sheaf_free(other);
	sheaf_free(p);
}

static char not_ours[128];
static void do_free_foreign(void *p)
{
	sheaf_free(p);
}
static void do_free_extent_twice(void *p)
{
	sheaf_free(p);
	sheaf_free(p);
}

static void test_foreign(void)
{
	expect("free of a static buffer", do_free_foreign, not_ours + 16, "invalid pointer",
	       "malloc", not_ours + 16);
	void *big = sheaf_malloc(200000);
	REQUIRE(big);
	expect("free of a large block twice", do_free_extent_twice, big, "invalid pointer",
	       "malloc", big);
	expect("free inside a large block", do_free_foreign, (char *)big + 4096, "invalid pointer",
	       "malloc", (char *)big + 4096);
	sheaf_free(big);
}

/* sheaf_cache_of() names a block's size class (docs/malloc.md), and names no cache for
 * Sheaf's own metadata (a prefilled sheaf is one); a class is not the program's to
 * destroy.  Until 2026-11-29 sheaf_cache_of() gave the metadata cache's handle, and
 * either handle could be destroyed: every later malloc of that class, or every sheaf of
 * that size, then hit a destroyed cache. */
static void do_destroy_class(void *p)
{
	sheaf_cache_destroy(sheaf_cache_of(p));
	sheaf_free(sheaf_malloc(100)); /* still works under warn */
	_exit(0);
}
static void test_internal_handles(void)
{
	void *p = sheaf_malloc(100);
	REQUIRE(p);
	struct sheaf_cache *cl = sheaf_cache_of(p);
	REQUIRE(cl);
	expect("destroy of a malloc class", do_destroy_class, p, "invalid cache", "malloc-112", cl);
	struct th_child r;
	sheaf_error_set_warn(1);
	th_run_child(do_destroy_class, p, &r);
	sheaf_error_set_warn(0);
	CHECKF(r.exited && r.status == 0 && strstr(r.err, "invalid cache"),
	       "destroy of a malloc class (warn): exit %d signal %d: %s", r.status, r.sig, r.err);
	sheaf_free(p);

	struct sheaf_cache *c = sheaf_cache_create("handles", 64, NULL);
	REQUIRE(c);
	struct sheaf_prefilled *small = sheaf_cache_prefill(c, 4);
	REQUIRE(small);
	CHECK(sheaf_cache_of(small) == NULL); /* a sheaf of a metadata cache */
	sheaf_cache_return(c, small);
	sheaf_cache_destroy(c);
}

/* Under warn, after every kind of misuse: no object handed out twice. */
static int cmp(const void *x, const void *y)
{
	uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
	return a < b ? -1 : a > b;
}
static void do_warn_continue(void *arg)
{
	(void)arg;
	char *a = sheaf_malloc(48), *b = sheaf_malloc(48), *c = sheaf_malloc(48);
	sheaf_free(a + 8);
	sheaf_free(a);
	sheaf_free(b);
	sheaf_free(a);
	sheaf_realloc(b, 100);
	sheaf_free_sized(c, 48);
	sheaf_free_sized(c, 48);
	static uintptr_t v[4000];
	for (int i = 0; i < 4000; i++) {
		v[i] = (uintptr_t)sheaf_malloc(48);
		if (!v[i])
			_exit(20);
		memset((void *)v[i], 1, 48);
	}
	qsort(v, 4000, sizeof(v[0]), cmp);
	for (int i = 1; i < 4000; i++)
		if (v[i] < v[i - 1] + 48)
			_exit(21);
	_exit(0);
}
static void test_warn_continue(void)
{
	struct th_child r;
	sheaf_error_set_warn(1);
	th_run_child(do_warn_continue, NULL, &r);
	sheaf_error_set_warn(0);
	CHECKF(r.exited && r.status == 0, "exit %d signal %d: %s", r.status, r.sig, r.err);
	int lines = 0;
	for (const char *s = r.err; (s = strchr(s, '\n')) != NULL; s++)
		lines++;
	CHECKF(lines == 4, "expected 4 reports (interior, 3 double frees), got %d: %s", lines,
	       r.err);
}

/* No request, however large, uses up memory before failing (an address-space limit
 * keeps a regression from taking the machine down). */
static void test_huge_requests(void)
{
	/* 8 GiB of address space beyond what the process has mapped now (Sheaf's heap
	 * reservation included); not under the sanitizers, whose shadow is larger. */
	struct rlimit old;
	getrlimit(RLIMIT_AS, &old);
	if (!SANITIZE_ADDRESS && !SANITIZE_THREAD) {
		unsigned long pages = 0;
		FILE *f = fopen("/proc/self/statm", "r");
		if (f) {
			if (fscanf(f, "%lu", &pages) != 1)
				pages = 0;
			fclose(f);
		}
		if (pages) {
			struct rlimit rl = { pages * 4096ul + (8ul << 30),
					     pages * 4096ul + (8ul << 30) };
			setrlimit(RLIMIT_AS, &rl);
		}
	}
	static const size_t sizes[] = { SIZE_MAX,
					SIZE_MAX - 4096,
					SIZE_MAX / 2 + 1,
					(size_t)PTRDIFF_MAX,
					(size_t)PTRDIFF_MAX - 4095,
					(size_t)1 << 48,
					(size_t)64 << 30 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		errno = 0;
		CHECKF(sheaf_malloc(n) == NULL && errno == ENOMEM, "malloc(%zu)", n);
		errno = 0;
		CHECKF(sheaf_calloc(1, n) == NULL && errno == ENOMEM, "calloc(1, %zu)", n);
		errno = 0;
		CHECKF(sheaf_aligned_alloc(64, n) == NULL && errno == ENOMEM,
		       "aligned_alloc(64, %zu)", n);
		errno = 0;
		CHECKF(sheaf_aligned_alloc(1 << 20, n) == NULL && errno == ENOMEM,
		       "aligned_alloc(1M, %zu)", n);
		void *m = (void *)1;
		CHECKF(sheaf_malloc_posix_memalign(&m, 4096, n) == ENOMEM && m == (void *)1,
		       "posix_memalign(%zu)", n);
		void *p = sheaf_malloc(100);
		errno = 0;
		CHECKF(sheaf_realloc(p, n) == NULL && errno == ENOMEM, "realloc(p, %zu)", n);
		sheaf_free(p); /* still valid */
	}
	/* calloc and reallocarray overflow. */
	errno = 0;
	CHECK(sheaf_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(sheaf_calloc((size_t)1 << 33, (size_t)1 << 31) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(sheaf_malloc_reallocarray(NULL, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
	/* Alignments at the edges. */
	static const size_t aligns[] = { (size_t)1 << 40, (size_t)1 << 62, (size_t)1 << 63 };
	for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
		size_t al = aligns[i];
		errno = 0;
		void *p = sheaf_aligned_alloc(al, 16);
		CHECKF(p == NULL && (errno == ENOMEM || errno == EINVAL), "aligned_alloc(%#zx, 16)",
		       al);
		void *m = (void *)1;
		int rc = sheaf_malloc_posix_memalign(&m, al, 16);
		CHECKF((rc == ENOMEM || rc == EINVAL) && m == (void *)1,
		       "posix_memalign(%#zx, 16) = %d", al, rc);
		errno = 0;
		p = sheaf_malloc_memalign(al, 16);
		CHECKF(p == NULL && (errno == ENOMEM || errno == EINVAL), "memalign(%#zx, 16)", al);
	}
	errno = 0;
	CHECK(sheaf_malloc_memalign(SIZE_MAX, 16) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(sheaf_aligned_alloc(3, 16) == NULL && errno == EINVAL);
	void *m = NULL;
	CHECK(sheaf_malloc_posix_memalign(&m, 4, 16) == EINVAL);
	CHECK(sheaf_malloc_posix_memalign(&m, 24, 16) == EINVAL);
	/* A large but possible alignment works. */
	void *p = sheaf_aligned_alloc((size_t)1 << 21, 100);
	CHECK(p && ((uintptr_t)p & ((1u << 21) - 1)) == 0);
	sheaf_free(p);
	setrlimit(RLIMIT_AS, &old);
}

static void test_errno_kept(void)
{
	errno = 4321;
	void *p = sheaf_malloc(10), *q = sheaf_calloc(10, 10), *r = sheaf_malloc(100000);
	p = sheaf_realloc(p, 3000);
	r = sheaf_realloc(r, 10);
	void *s = sheaf_aligned_alloc(256, 300);
	sheaf_free(p);
	sheaf_free(q);
	sheaf_free_sized(r, 10);
	sheaf_free(s);
	sheaf_free(NULL);
	CHECKF(errno == 4321, "errno %d", errno);
}

int main(void)
{
	RUN(test_interior);
	RUN(test_double_free);
	RUN(test_foreign);
	RUN(test_internal_handles);
	RUN(test_warn_continue);
	RUN(test_huge_requests);
	RUN(test_errno_kept);
	return th_done();
}
