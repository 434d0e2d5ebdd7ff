/* SPDX-License-Identifier: MIT */
/*
 * preload_check.c - the C library's allocation contracts, checked through
 * the exported names (the API conformance bugs filed against replacement
 * mallocs, glibc's malloc tests as a guide).
 * tests/integration/test_preload_api.sh runs it under LD_PRELOAD=
 * libsheaf-malloc.so and, to check the checks, without it (glibc passes).
 *
 * Usage: sheaf-preload-check [path-of-a-library-with-TLS-to-dlopen]
 * Prints one line per failed check and "preload-check: N checks, F failed";
 * with the preload active also "preload-check: served by sheaf-malloc".
 * Exit status 0 when nothing failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks, fails;

#define CHECK(c)                                                            \
	do {                                                                \
		checks++;                                                   \
		if (!(c)) {                                                 \
			fails++;                                            \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); \
		}                                                           \
	} while (0)

static void check_calloc_and_limits(void)
{
	errno = 0;
	CHECK(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM);
	char *z = calloc(1000, 7);
	CHECK(z != NULL);
	int nz = 0;
	for (int i = 0; i < 7000; i++)
		nz += z[i] != 0;
	CHECK(nz == 0);
	free(z);
	size_t bad[] = { SIZE_MAX, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX + 1, (size_t)1 << 62 };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		CHECK(malloc(bad[i]) == NULL && errno == ENOMEM);
		errno = 0;
		CHECK(aligned_alloc(64, bad[i]) == NULL && errno == ENOMEM);
		void *q = malloc(16);
		errno = 0;
		CHECK(realloc(q, bad[i]) == NULL && errno == ENOMEM);
		free(q); /* realloc failure keeps the old block */
	}
	void *m0 = malloc(0);
	CHECK(m0 != NULL);
	free(m0);
	free(NULL);
}

static void check_posix_memalign(void)
{
	void *sentinel = (void *)0x1234, *p = sentinel;
	size_t bad[] = { 0, 1, 2, 4, 3, 24, 48, sizeof(void *) + 1 };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (bad[i] == sizeof(void *))
			continue;
		p = sentinel;
		CHECK(posix_memalign(&p, bad[i], 64) == EINVAL && p == sentinel);
	}
	p = sentinel;
	CHECK(posix_memalign(&p, 64, SIZE_MAX - 100) == ENOMEM && p == sentinel);
	p = sentinel;
	CHECK(posix_memalign(&p, (size_t)1 << 20, SIZE_MAX / 2) == ENOMEM && p == sentinel);
	p = NULL;
	int e = errno = 4321;
	CHECK(posix_memalign(&p, 256, 1000) == 0 && p && ((uintptr_t)p & 255) == 0);
	CHECK(errno == e);
	free(p);
}

static void check_alignments(void)
{
	for (size_t al = 1; al <= ((size_t)1 << 20); al <<= 1) {
		size_t sizes[] = { 0, 1, al / 2, al, al + 1, 3 * al + 5, 40000 };
		for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			size_t n = sizes[i];
			char *a = aligned_alloc(al, n);
			CHECK(a != NULL && ((uintptr_t)a & (al - 1)) == 0);
			if (a) {
				memset(a, 0x5a, n);
				CHECK(malloc_usable_size(a) >= n);
			}
			void *b = NULL;
			if (al >= sizeof(void *)) {
				CHECK(posix_memalign(&b, al, n) == 0 &&
				      ((uintptr_t)b & (al - 1)) == 0);
				if (b)
					memset(b, 0xa5, n);
			}
			char *c = memalign(al, n);
			CHECK(c != NULL && ((uintptr_t)c & (al - 1)) == 0);
			free(a);
			free(b);
			free(c);
		}
	}
	/* memalign rounds a non-power-of-two alignment up (glibc). */
	volatile size_t odd = 48; /* a constant would be refused at compile time */
	char *m = memalign(odd, 100);
	CHECK(m != NULL && ((uintptr_t)m & 63) == 0);
	free(m);
	long pg = sysconf(_SC_PAGESIZE);
	char *v = valloc(10);
	CHECK(v != NULL && ((uintptr_t)v & (uintptr_t)(pg - 1)) == 0);
	free(v);
	char *pv = pvalloc(1);
	CHECK(pv != NULL && ((uintptr_t)pv & (uintptr_t)(pg - 1)) == 0 &&
	      malloc_usable_size(pv) >= (size_t)pg);
	if (pv)
		memset(pv, 1, (size_t)pg);
	free(pv);
	pv = pvalloc(0); /* glibc gives a minimal chunk, Sheaf a page */
	CHECK(pv != NULL);
	free(pv);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + seed);
}

static int same(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 31 + seed))
			return 0;
	return 1;
}

static void check_realloc(void)
{
	unsigned char *p = realloc(NULL, 10);
	CHECK(p != NULL);
	fill(p, 10, 1);
	size_t steps[] = { 10,      17,      100,   1000,  5000, 40000, 100000,
			   1 << 20, 3 << 20, 70000, 30000, 900,  24,    3 };
	size_t cur = 10;
	for (unsigned i = 1; i < sizeof(steps) / sizeof(steps[0]); i++) {
		size_t n = steps[i];
		unsigned char *q = realloc(p, n);
		CHECK(q != NULL);
		if (!q)
			break;
		size_t keep = cur < n ? cur : n;
		CHECK(same(q, keep, 1));
		CHECK(malloc_usable_size(q) >= n);
		fill(q, n, 1);
		p = q;
		cur = n;
	}
	errno = 0;
	/* realloc(p, 0) frees p and returns NULL (glibc's behaviour). */
	CHECK(realloc(p, 0) == NULL);
	/* reallocarray */
	size_t *a = reallocarray(NULL, 100, sizeof(size_t));
	CHECK(a != NULL);
	for (size_t i = 0; i < 100; i++)
		a[i] = i;
	errno = 0;
	CHECK(reallocarray(a, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
	size_t *b = reallocarray(a, 1000, sizeof(size_t));
	CHECK(b != NULL && b[99] == 99);
	free(b);
}

static void check_usable_and_errno(void)
{
	CHECK(malloc_usable_size(NULL) == 0);
	for (size_t n = 0; n < 70000; n = n * 3 / 2 + 1) {
		char *p = malloc(n);
		CHECK(p != NULL && malloc_usable_size(p) >= n);
		if (p && malloc_usable_size(p))
			memset(p, 0x33, malloc_usable_size(p));
		errno = 777;
		free(p);
		CHECK(errno == 777);
	}
	errno = 12345;
	free(NULL);
	CHECK(errno == 12345);
	/* A large block (extent) too. */
	void *big = malloc(5 << 20);
	errno = 999;
	free(big);
	CHECK(errno == 999);
}

/* free_sized (C23), which the README names among the malloc front end's entry points:
 * exported by the preload library (it was not until 2026-11-29), and a right size frees
 * the block (every size of its class is right: docs/malloc.md). */
static void check_free_sized(void)
{
	void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
	CHECK(fs != NULL);
	if (!fs)
		return;
	for (size_t n = 1; n < (3u << 20); n = n * 5 / 2 + 1) {
		char *p = malloc(n);
		CHECK(p != NULL);
		memset(p, 0x44, n);
		errno = 4321;
		fs(p, n);
		CHECK(errno == 4321);
	}
	fs(NULL, 10);
	/* free_aligned_sized, C23's other sized free (not exported before 2026-11-29: a
	 * program that called it reached the C library's with Sheaf's block). */
	void (*fas)(void *, size_t, size_t) =
		(void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
	void *own = dlsym(RTLD_DEFAULT, "sheaf_free_sized");
	Dl_info di, own_di;
	CHECK(fas != NULL && own != NULL && dladdr((void *)fas, &di) && dladdr(own, &own_di) &&
	      di.dli_fbase == own_di.dli_fbase);
	if (!fas)
		return;
	for (size_t al = 8; al <= (1u << 16); al <<= 2) {
		for (size_t n = al; n < (3u << 20); n = n * 5 / 2 + al) {
			n -= n % al; /* aligned_alloc: a multiple of the alignment */
			char *p = aligned_alloc(al, n);
			CHECK(p != NULL && ((uintptr_t)p & (al - 1)) == 0);
			memset(p, 0x45, n);
			errno = 4322;
			fas(p, al, n);
			CHECK(errno == 4322);
		}
	}
	fas(NULL, 64, 10);
}

/* ---- fork from a process with 8 busy threads ------------------------------------ */

static atomic_int stop;

static void *busy(void *arg)
{
	unsigned long seed = (unsigned long)(uintptr_t)arg * 2654435761u + 1;
	void *slots[64] = { 0 };
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		seed = seed * 6364136223846793005ul + 1442695040888963407ul;
		unsigned k = (unsigned)(seed >> 58);
		free(slots[k]);
		size_t n = (seed >> 20) % 3 == 0 ? (seed >> 8) % 100000 : (seed >> 8) % 600;
		slots[k] = malloc(n);
		if (slots[k])
			memset(slots[k], 1, n < 64 ? n : 64);
	}
	for (int i = 0; i < 64; i++)
		free(slots[i]);
	return NULL;
}

static void check_fork_busy(void)
{
	pthread_t t[8];
	atomic_store(&stop, 0);
	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, busy, (void *)(uintptr_t)(i + 1)) == 0);
	usleep(20000);
	int ok = 0, rounds = 12;
	for (int r = 0; r < rounds; r++) {
		pid_t pid = fork();
		if (pid == 0) {
			alarm(20); /* a deadlock in the child fails, not hangs */
			void *v[2000];
			for (int i = 0; i < 2000; i++) {
				size_t n = (size_t)(i * 37) % 70000 + 1;
				v[i] = malloc(n);
				if (!v[i])
					_exit(3);
				memset(v[i], 7, n < 16 ? n : 16);
			}
			for (int i = 0; i < 2000; i++)
				free(v[i]);
			/* A thread in the child allocates too. */
			pthread_t c;
			if (pthread_create(&c, NULL, busy, (void *)99) != 0)
				_exit(4);
			usleep(1000);
			atomic_store(&stop, 1);
			pthread_join(c, NULL);
			_exit(0);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			printf("fork round %d: child status 0x%x\n", r, st);
		usleep(2000);
	}
	CHECK(ok == rounds);
	atomic_store(&stop, 1);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
}

/* ---- threads that exit holding objects, freed later by others ----------------------- */

#define NOBJ 3000
static void *handoff[4][NOBJ];

static void *producer(void *arg)
{
	void **v = arg;
	for (int i = 0; i < NOBJ; i++) {
		size_t n = (size_t)(i % 50) * 24 + 1 + (i % 97 == 0 ? 50000 : 0);
		v[i] = malloc(n);
		if (v[i])
			memset(v[i], i & 0xff, n);
	}
	/* Free some of its own so its cache holds objects at exit. */
	for (int i = 0; i < NOBJ; i += 3) {
		free(v[i]);
		v[i] = NULL;
	}
	return NULL;
}

static void check_thread_exit(void)
{
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, producer, handoff[i]) == 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	int bad = 0;
	for (int k = 0; k < 4; k++)
		for (int i = 0; i < NOBJ; i++)
			if (handoff[k][i]) {
				bad += *(unsigned char *)handoff[k][i] != (unsigned char)(i & 0xff);
				free(handoff[k][i]);
			}
	CHECK(bad == 0);
	/* The memory is usable again. */
	void *v[1000];
	for (int i = 0; i < 1000; i++) {
		v[i] = malloc(100);
		CHECK(v[i] != NULL);
	}
	for (int i = 0; i < 1000; i++)
		free(v[i]);
}

/* ---- dlopen of a library with dynamic TLS (allocated through malloc) ------------------ */

static void *(*tls_fn)(size_t);

static void *tls_thread(void *arg)
{
	(void)arg;
	char *p = tls_fn(100);
	return p;
}

static void check_dlopen(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	CHECK(h != NULL);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return;
	}
	tls_fn = (void *(*)(size_t))dlsym(h, "sheaf_demo_tls_touch");
	CHECK(tls_fn != NULL);
	if (tls_fn) {
		for (int r = 0; r < 20; r++) {
			pthread_t t[4];
			for (int i = 0; i < 4; i++)
				pthread_create(&t[i], NULL, tls_thread, NULL);
			for (int i = 0; i < 4; i++)
				pthread_join(t[i], NULL);
		}
		CHECK(tls_fn(10) != NULL);
	}
	CHECK(dlclose(h) == 0);
}

/* ---- memory of glibc's own allocator ---------------------------------------------- */

/* glibc's allocator under its internal names: memory allocated this way
 * before or beside the preload may reach free and realloc. */
extern void *__libc_malloc(size_t n);

static void check_libc_memory(void)
{
	for (int i = 0; i < 50; i++) {
		size_t n = (size_t)(i * 97) % 3000 + 1;
		unsigned char *p = __libc_malloc(n);
		CHECK(p != NULL);
		if (!p)
			continue;
		fill(p, n, 9);
		CHECK(malloc_usable_size(p) >= n);
		if (i % 2) {
			unsigned char *q = realloc(p, n * 3);
			CHECK(q != NULL && same(q, n, 9));
			p = q;
		}
		errno = 4444;
		free(p);
		CHECK(errno == 4444);
	}
}

int main(int argc, char **argv)
{
	void (*counts)(uint64_t *, uint64_t *) =
		(void (*)(uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "sheaf_preload_counts");
	uint64_t m0 = 0, f0 = 0, m1 = 0, f1 = 0;
	if (counts)
		counts(&m0, &f0);
	check_calloc_and_limits();
	check_posix_memalign();
	check_alignments();
	check_realloc();
	check_usable_and_errno();
	if (counts) /* the Sheaf preload, not another allocator */
		check_free_sized();
	check_thread_exit();
	check_libc_memory();
	if (argc > 1)
		check_dlopen(argv[1]);
	check_fork_busy();
	if (counts) {
		counts(&m1, &f1);
		CHECK(m1 - m0 > 10000 && f1 - f0 > 10000);
		printf("preload-check: served by sheaf-malloc (%llu mallocs, %llu frees)\n",
		       (unsigned long long)(m1 - m0), (unsigned long long)(f1 - f0));
	}
	printf("preload-check: %d checks, %d failed\n", checks, fails);
	return fails != 0;
}
