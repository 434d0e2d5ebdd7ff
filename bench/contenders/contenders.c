/* SPDX-License-Identifier: MIT */
/*
 * contenders.c - the allocators sheaf-bench compares.
 *
 * Peers are loaded with dlopen(RTLD_LOCAL) and called through the malloc/free
 * that dlsym finds in their own handle, so several allocators live in one
 * process and their windows can alternate (driver.h).  RTLD_LOCAL keeps them
 * from interposing on the process's malloc: glibc stays the malloc of
 * everything else.  jemalloc uses initial-exec TLS, which a dlopen'd library
 * may only have if glibc kept static TLS surplus for it; main() re-executes
 * the driver with GLIBC_TUNABLES=glibc.rtld.optional_static_tls raised.
 *
 * Sheaf is referenced weakly: the driver builds and reports the peers even
 * when a part of the library (the malloc front end) is not in this build,
 * and the report says which Sheaf contenders were absent.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"
#include "sheaf.h"
#include "sheaf_malloc.h"
#include "sheaf_stats.h"

#pragma weak sheaf_cache_create
#pragma weak sheaf_cache_destroy
#pragma weak sheaf_cache_alloc
#pragma weak sheaf_cache_free
#pragma weak sheaf_cache_alloc_bulk
#pragma weak sheaf_cache_free_bulk
#pragma weak sheaf_cache_free_rcu
#pragma weak sheaf_malloc
#pragma weak sheaf_free
#pragma weak sheaf_stats_print
#pragma weak sheaf_stats_get
#pragma weak sheaf_global_stats_get
#pragma weak sheaf_percpu_mode

/* Column order of the report. */
struct bench_alloc bench_allocs[] = {
	{ .name = "floor", .kind = BK_FLOOR },
	{ .name = "glibc", .kind = BK_MALLOC, .apis = BENCH_API_MALLOC, .peer = true },
	{ .name = "jemalloc", .kind = BK_MALLOC, .apis = BENCH_API_MALLOC, .peer = true },
	{ .name = "mimalloc", .kind = BK_MALLOC, .apis = BENCH_API_MALLOC, .peer = true },
	{ .name = "tcmalloc", .kind = BK_MALLOC, .apis = BENCH_API_MALLOC, .peer = true },
	{ .name = "dpdk-mempool", .kind = BK_DPDK, .apis = BENCH_API_CACHE, .peer = true },
	{ .name = "sheaf-malloc", .kind = BK_MALLOC, .apis = BENCH_API_MALLOC },
	{ .name = "sheaf", .kind = BK_SHEAF, .apis = BENCH_API_CACHE },
	{ .name = "sheaf-k7",
	  .kind = BK_SHEAF,
	  .apis = BENCH_API_CACHE,
	  .cache_flags = SHEAF_KERNEL_COMPAT },
	/* Sheaf given DPDK's per-lcore cache size as its sheaf capacity, so the
	 * mempool comparison can also be made at equal per-CPU caching. */
	{ .name = "sheaf-c512", .kind = BK_SHEAF, .apis = BENCH_API_CACHE, .capacity = 512 },
	/* The cost of the free checks (README "Errors"): the same library, a private
	 * copy loaded with RTLD_LOCAL and SHEAF_FREE_CHECKS=0 set in it, measured in
	 * the same run as `sheaf` and `sheaf-malloc` (init_sheaf_checks_copy). */
	{ .name = "sheaf-malloc-nochecks",
	  .kind = BK_MALLOC,
	  .apis = BENCH_API_NOCHECKS,
	  .copy = true },
	{ .name = "sheaf-nochecks", .kind = BK_SHEAF, .apis = BENCH_API_NOCHECKS, .copy = true },
	/* The checked side, loaded the same way (init_sheaf_checks_copy with "1"): the
	 * linked library and a private copy of it differ by a few per cent with the same
	 * settings (pair/256 through malloc: 1.044x over 30 processes, docs/benchmarks.md),
	 * so the free-checks targets compare a copy with a copy. */
	{ .name = "sheaf-malloc-checks",
	  .kind = BK_MALLOC,
	  .apis = BENCH_API_CHECKSCOPY,
	  .copy = true },
	{ .name = "sheaf-checks", .kind = BK_SHEAF, .apis = BENCH_API_CHECKSCOPY, .copy = true },
	/* The previous revision (issue 14): a libsheaf.so built from an earlier commit
	 * (scripts/build-prev.sh), given with --prev-lib or SHEAF_BENCH_PREV_LIB, loaded
	 * as a private copy and measured in the same phases as its current counterpart
	 * (init_sheaf_prev; the report's "Against the previous revision"). */
	{ .name = "sheaf-malloc-prev",
	  .kind = BK_MALLOC,
	  .apis = BENCH_API_MALLOC,
	  .copy = true,
	  .prev_of = "sheaf-malloc" },
	{ .name = "sheaf-prev",
	  .kind = BK_SHEAF,
	  .apis = BENCH_API_CACHE,
	  .copy = true,
	  .prev_of = "sheaf" },
};
int bench_nallocs = (int)(sizeof(bench_allocs) / sizeof(bench_allocs[0]));

const struct bench_alloc *bench_alloc_find(const char *name)
{
	for (int i = 0; i < bench_nallocs; i++)
		if (!strcmp(bench_allocs[i].name, name))
			return &bench_allocs[i];
	return NULL;
}

static struct bench_alloc *find_mut(const char *name)
{
	return (struct bench_alloc *)bench_alloc_find(name);
}

/* Load one peer and check that what dlsym gives is really its own malloc,
 * not the process's, and that it works. */
static void load_peer(struct bench_alloc *a, const char *soname)
{
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	void *m, *f;

	if (!h) {
		snprintf(a->how, sizeof(a->how), "dlopen failed: %s", dlerror());
		return;
	}
	m = dlsym(h, "malloc");
	f = dlsym(h, "free");
	if (!m || !f) {
		snprintf(a->how, sizeof(a->how), "%s has no malloc/free symbols", soname);
		return;
	}
	if (m == dlsym(RTLD_DEFAULT, "malloc")) {
		snprintf(a->how, sizeof(a->how), "%s: dlsym returned the process malloc", soname);
		return;
	}
	a->malloc_fn = (void *(*)(size_t))m;
	a->free_fn = (void (*)(void *))f;
	/* Smoke: sizes across the small classes and a large one. */
	for (size_t s = 8; s <= (1u << 20); s *= 2) {
		char *p = a->malloc_fn(s);

		if (!p) {
			snprintf(a->how, sizeof(a->how), "%s: malloc(%zu) failed", soname, s);
			return;
		}
		p[0] = p[s - 1] = 1;
		a->free_fn(p);
	}
	a->available = true;
	snprintf(a->how, sizeof(a->how), "dlopen(\"%s\", RTLD_LOCAL), malloc/free via dlsym",
		 soname);
}

/* A private copy of a libsheaf.so: @path, or (NULL) the one this driver is linked
 * with.  Its own globals, so its option can differ from the linked library's.
 * Copied to a new file name because dlopen of the same path (or of the same file)
 * returns the library already loaded.  Two Sheaf instances share nothing but the
 * thread's rseq area, which each sequence sets for itself. */
static void *load_sheaf_copy(const char *path, char *why, size_t len)
{
	Dl_info di;
	if (!path) {
		if (!sheaf_cache_create || !dladdr((void *)sheaf_cache_create, &di) ||
		    !di.dli_fname) {
			snprintf(why, len, "libsheaf.so not found (dladdr)");
			return NULL;
		}
		path = di.dli_fname;
	}
	char tmp[] = "/tmp/sheaf-bench-copy-XXXXXX";
	int out = mkstemp(tmp), in = open(path, O_RDONLY | O_CLOEXEC);
	bool ok = out >= 0 && in >= 0;
	char buf[1 << 16];
	ssize_t k;
	while (ok && (k = read(in, buf, sizeof(buf))) > 0)
		ok = write(out, buf, (size_t)k) == k;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	/* RTLD_DEEPBIND: the copy's calls to its own public functions (sheaf_cache_alloc
	 * from its metadata allocator, ...) must bind to the copy, not to the linked
	 * library that comes first in the global scope. */
	void *h = ok ? dlopen(tmp, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) : NULL;
	if (!h)
		snprintf(why, len, "copy of %s: %s", path, ok ? dlerror() : strerror(errno));
	if (out >= 0)
		unlink(tmp);
	return h;
}

static void bind_copy(void *h, struct bench_alloc *sm, struct bench_alloc *sc, const char *what);

/* A private copy with SHEAF_FREE_CHECKS=@checks for the malloc contender @mname and
 * the object-cache contender @cname. */
static void init_sheaf_checks_copy(const char *checks, const char *mname, const char *cname)
{
	struct bench_alloc *sm = find_mut(mname), *sc = find_mut(cname);
	char why[160] = "", what[96];
	void *h = load_sheaf_copy(NULL, why, sizeof(why));
	int (*set)(const char *, const char *) =
		h ? (int (*)(const char *, const char *))dlsym(h, "sheaf_option_set") : NULL;
	if (h && (!set || set("FREE_CHECKS", checks) != 0)) {
		snprintf(why, sizeof(why),
			 "the copy refused SHEAF_FREE_CHECKS=%s (too old, or already started)",
			 checks);
		h = NULL;
	}
	if (!h) {
		snprintf(sm->how, sizeof(sm->how), "%s", why);
		snprintf(sc->how, sizeof(sc->how), "%s", why);
		return;
	}
	snprintf(what, sizeof(what), "a private copy of libsheaf.so, SHEAF_FREE_CHECKS=%s", checks);
	bind_copy(h, sm, sc, what);
}

/* Bind the malloc contender @sm and the object-cache contender @sc to the copy @h,
 * through dlsym: a symbol the copy lacks leaves its contender absent, with the
 * name of the missing symbol (or a bulk call NULL: see bench_phase.needs_bulk). */
static void bind_copy(void *h, struct bench_alloc *sm, struct bench_alloc *sc, const char *what)
{
	sm->malloc_fn = (void *(*)(size_t))dlsym(h, "sheaf_malloc");
	sm->free_fn = (void (*)(void *))dlsym(h, "sheaf_free");
	sm->available = sm->malloc_fn && sm->free_fn;
	if (sm->available)
		snprintf(sm->how, sizeof(sm->how), "sheaf_malloc/sheaf_free of %s", what);
	else
		snprintf(sm->how, sizeof(sm->how), "%s lacks %s", what,
			 sm->malloc_fn ? "sheaf_free" : "sheaf_malloc");
	sc->c_create =
		(struct sheaf_cache * (*)(const char *, size_t, const struct sheaf_cache_args *))
			dlsym(h, "sheaf_cache_create");
	sc->c_destroy = (void (*)(struct sheaf_cache *))dlsym(h, "sheaf_cache_destroy");
	sc->c_alloc = (void *(*)(struct sheaf_cache *))dlsym(h, "sheaf_cache_alloc");
	sc->c_free = (void (*)(struct sheaf_cache *, void *))dlsym(h, "sheaf_cache_free");
	sc->c_alloc_bulk = (size_t(*)(struct sheaf_cache *, size_t,
				      void **))dlsym(h, "sheaf_cache_alloc_bulk");
	sc->c_free_bulk =
		(void (*)(struct sheaf_cache *, size_t, void **))dlsym(h, "sheaf_cache_free_bulk");
	sc->c_free_rcu = (void (*)(struct sheaf_cache *, void *))dlsym(h, "sheaf_cache_free_rcu");
	if (!sc->c_alloc_bulk || !sc->c_free_bulk)
		sc->c_alloc_bulk = NULL, sc->c_free_bulk = NULL;
	sc->available = sc->c_create && sc->c_destroy && sc->c_alloc && sc->c_free;
	if (sc->available)
		snprintf(sc->how, sizeof(sc->how), "sheaf_cache_* of %s%s", what,
			 sc->c_alloc_bulk ? "" : " (no bulk calls: left out of the bulk workload)");
	else
		snprintf(sc->how, sizeof(sc->how),
			 "%s lacks the object-cache API (sheaf_cache_create/destroy/alloc/free)",
			 what);
}

static void init_sheaf_prev(const char *path)
{
	struct bench_alloc *sm = find_mut("sheaf-malloc-prev"), *sc = find_mut("sheaf-prev");
	char why[160] = "", what[200];
	void *h = load_sheaf_copy(path, why, sizeof(why));

	if (!h) {
		snprintf(sm->how, sizeof(sm->how), "%s", why);
		snprintf(sc->how, sizeof(sc->how), "%s", why);
		return;
	}
	snprintf(what, sizeof(what), "a private copy of %s", path);
	bind_copy(h, sm, sc, what);
	if (sc->available) {
		/* As init_sheaf: a cache with Sheaf's defaults must come up before the
		 * workloads rely on it. */
		struct sheaf_cache_args args = { 0 };
		struct sheaf_cache *c = sc->c_create("bench-prev-probe", 64, &args);

		if (c) {
			sc->c_destroy(c);
		} else {
			sc->available = false;
			snprintf(sc->how, sizeof(sc->how), "%.120s: sheaf_cache_create: %s", what,
				 strerror(errno));
		}
	}
	if (sm->available) {
		void *p = sm->malloc_fn(64);

		if (p) {
			sm->free_fn(p);
		} else {
			sm->available = false;
			snprintf(sm->how, sizeof(sm->how), "%.120s: sheaf_malloc(64) failed", what);
		}
	}
}

static void init_sheaf(void)
{
	struct bench_alloc *sm = find_mut("sheaf-malloc");

	if (sheaf_malloc && sheaf_free) {
		sm->malloc_fn = sheaf_malloc;
		sm->free_fn = sheaf_free;
		sm->available = true;
		snprintf(sm->how, sizeof(sm->how), "sheaf_malloc/sheaf_free, linked");
	} else {
		snprintf(sm->how, sizeof(sm->how),
			 "not in this build of libsheaf (sheaf_malloc missing)");
	}
	for (int i = 0; i < bench_nallocs; i++) {
		struct bench_alloc *a = &bench_allocs[i];
		struct sheaf_cache_args args = { .flags = a->cache_flags,
						 .sheaf_capacity = a->capacity };
		struct sheaf_cache *c;

		if (a->kind != BK_SHEAF || a->copy)
			continue;
		a->c_create = sheaf_cache_create;
		a->c_destroy = sheaf_cache_destroy;
		a->c_alloc = sheaf_cache_alloc;
		a->c_free = sheaf_cache_free;
		a->c_alloc_bulk = sheaf_cache_alloc_bulk;
		a->c_free_bulk = sheaf_cache_free_bulk;
		a->c_free_rcu = sheaf_cache_free_rcu;
		if (!sheaf_cache_create || !sheaf_cache_alloc || !sheaf_cache_free ||
		    !sheaf_cache_destroy) {
			snprintf(a->how, sizeof(a->how),
				 "not in this build of libsheaf "
				 "(object-cache API missing)");
			continue;
		}
		/* Check the flags are accepted before the workloads rely on them. */
		c = sheaf_cache_create("bench-probe", 64, &args);
		if (!c) {
			snprintf(a->how, sizeof(a->how), "sheaf_cache_create(flags %#x): %s",
				 a->cache_flags, strerror(errno));
			continue;
		}
		sheaf_cache_destroy(c);
		a->available = true;
		char cap[32] = "";

		if (a->capacity)
			snprintf(cap, sizeof(cap), ", sheaf capacity %u", a->capacity);
		snprintf(a->how, sizeof(a->how), "sheaf_cache_* API, linked, flags %#x%s%s",
			 a->cache_flags,
			 a->cache_flags & SHEAF_KERNEL_COMPAT ? " (SHEAF_KERNEL_COMPAT)" : "", cap);
	}
}

void bench_allocs_init(bool sanitized, const char *prev_lib)
{
	static const struct {
		const char *name, *soname;
	} peers[] = {
		{ "jemalloc", "libjemalloc.so.2" },
		{ "mimalloc", "libmimalloc.so.2" },
		{ "tcmalloc", "libtcmalloc_minimal.so.4" },
	};
	struct bench_alloc *a;

	a = find_mut("floor");
	a->available = true;
	snprintf(a->how, sizeof(a->how), "no allocator: preallocated objects cycled");

	a = find_mut("glibc");
	a->malloc_fn = malloc;
	a->free_fn = free;
	a->available = true;
	snprintf(a->how, sizeof(a->how), "%s",
		 sanitized ? "the process malloc (the sanitizer's interceptor in this build)" :
			     "the process malloc (glibc)");

	for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++) {
		a = find_mut(peers[i].name);
		if (sanitized)
			snprintf(a->how, sizeof(a->how),
				 "skipped in sanitizer builds: its uninstrumented atomics hand "
				 "memory between threads unseen by the sanitizer");
		else
			load_peer(a, peers[i].soname);
	}

	a = find_mut("dpdk-mempool");
#ifdef SHEAF_BENCH_DPDK
	if (sanitized) {
		snprintf(a->how, sizeof(a->how), "skipped in sanitizer builds");
	} else {
		a->available = true; /* the EAL starts on first use (bench_pool_open) */
		snprintf(a->how, sizeof(a->how),
			 "%s rte_mempool, per-lcore cache %d, EAL lcores 0-1, "
			 "rte_mempool_get/put",
			 bench_dpdk_version(), 512);
	}
#else
	snprintf(a->how, sizeof(a->how), "not built: libdpdk (pkg-config) not found%s",
		 sanitized ? " or sanitizer build" : "");
#endif
	init_sheaf();
	if (sanitized) {
		static const char *const copies[] = { "sheaf-nochecks", "sheaf-malloc-nochecks",
						      "sheaf-checks", "sheaf-malloc-checks" };
		for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++)
			snprintf(find_mut(copies[i])->how, sizeof(a->how),
				 "skipped in sanitizer builds");
	} else {
		init_sheaf_checks_copy("0", "sheaf-malloc-nochecks", "sheaf-nochecks");
		init_sheaf_checks_copy("1", "sheaf-malloc-checks", "sheaf-checks");
	}
	a = find_mut("sheaf-prev");
	if (sanitized) {
		/* Like the nochecks copies: an uninstrumented library in an instrumented
		 * process. */
		snprintf(a->how, sizeof(a->how), "skipped in sanitizer builds");
		snprintf(find_mut("sheaf-malloc-prev")->how, sizeof(a->how), "%s", a->how);
	} else if (!prev_lib || !*prev_lib) {
		snprintf(a->how, sizeof(a->how),
			 "no previous revision given (--prev-lib=PATH or SHEAF_BENCH_PREV_LIB; "
			 "scripts/build-prev.sh builds one)");
		snprintf(find_mut("sheaf-malloc-prev")->how, sizeof(a->how), "%s", a->how);
	} else {
		init_sheaf_prev(prev_lib);
	}
}

int bench_pool_open(struct bench_pool *p, const struct bench_alloc *a, size_t size, size_t max_live,
		    char *why, size_t whylen)
{
	memset(p, 0, sizeof(*p));
	p->a = a;
	p->kind = a->kind;
	p->size = size;
	switch (a->kind) {
	case BK_MALLOC:
		p->malloc_fn = a->malloc_fn;
		p->free_fn = a->free_fn;
		return 0;
	case BK_SHEAF: {
		struct sheaf_cache_args args = { .flags = a->cache_flags,
						 .sheaf_capacity = a->capacity };
		char name[48];

		snprintf(name, sizeof(name), "bench-%s-%zu", a->name, size);
		p->cache = a->c_create(name, size, &args);
		if (!p->cache) {
			snprintf(why, whylen, "sheaf_cache_create: %s", strerror(errno));
			return -1;
		}
		p->c_alloc = a->c_alloc;
		p->c_free = a->c_free;
		p->c_alloc_bulk = a->c_alloc_bulk;
		p->c_free_bulk = a->c_free_bulk;
		return 0;
	}
	case BK_DPDK:
#ifdef SHEAF_BENCH_DPDK
		if (bench_dpdk_init(why, whylen)) {
			find_mut(a->name)->available = false;
			snprintf(find_mut(a->name)->how, sizeof(a->how), "EAL did not start: %s",
				 why);
			return -1;
		}
		p->mp = bench_dpdk_pool_create(size, max_live, why, whylen);
		if (!p->mp)
			return -1;
		p->d_get = bench_dpdk_get;
		p->d_put = bench_dpdk_put;
		p->d_get_bulk = bench_dpdk_get_bulk;
		p->d_put_bulk = bench_dpdk_put_bulk;
		return 0;
#else
		snprintf(why, whylen, "DPDK not built");
		return -1;
#endif
	case BK_FLOOR:
	default: {
		/* The workloads touch one word of each object, so a floor
		 * object needs one cache line whatever the size: 64-byte slots
		 * keep the floor's working set at 32 KiB and free of the set
		 * aliasing of a large stride, so it stays a floor. */
		size_t stride = 64;
		char *block;

		/* More than the ring and a burst hold, so no object is handed
		 * out twice while in flight (bench_alloc()). */
		p->floor_n = max_live < 2 * BENCH_RING_SLOTS ? 2 * BENCH_RING_SLOTS : max_live;
		block = aligned_alloc(64, p->floor_n * stride);
		p->floor_objs = malloc(p->floor_n * sizeof(void *));
		if (!block || !p->floor_objs) {
			free(block);
			free(p->floor_objs);
			snprintf(why, whylen, "out of memory");
			return -1;
		}
		memset(block, 0, p->floor_n * stride);
		for (size_t i = 0; i < p->floor_n; i++)
			p->floor_objs[i] = block + i * stride;
		return 0;
	}
	}
}

void bench_pool_close(struct bench_pool *p)
{
	switch (p->kind) {
	case BK_SHEAF:
		if (p->cache)
			p->a->c_destroy(p->cache);
		break;
	case BK_DPDK:
#ifdef SHEAF_BENCH_DPDK
		if (p->mp)
			bench_dpdk_pool_free(p->mp);
#endif
		break;
	case BK_FLOOR:
		if (p->floor_objs) {
			free(p->floor_objs[0]);
			free(p->floor_objs);
		}
		break;
	case BK_MALLOC:
	default:
		break;
	}
	memset(p, 0, sizeof(*p));
}

void bench_pool_dump_stats(const struct bench_pool *p, FILE *f, const char *heading)
{
	/* Not a private copy's cache: the linked library's statistics would walk (and lock
	 * the CPUs of) a cache that is not its own, whose objects its page map does not
	 * know (SHEAF_DEBUG=2's walkers abort on that). */
	if (p->kind != BK_SHEAF || !p->cache || !sheaf_stats_print || p->a->copy)
		return;
	fprintf(f, "==== %s\n", heading);
	sheaf_stats_print(p->cache, f);
	fprintf(f, "\n");
}

const char bench_profile_header[] =
	"| allocations | refill | flush | barn get | barn get fail | barn put | barn put fail | "
	"barn trim | barn locks | slab alloc | slab free | KiB returned |";

int bench_pool_profile(const struct bench_pool *p, char *buf, size_t len)
{
	struct sheaf_stats st;
	double n, k;

	if (p->kind != BK_SHEAF || !p->cache || !sheaf_stats_get || p->a->copy)
		return -1; /* a private copy's cache: see bench_pool_dump_stats() */
	memset(&st, 0, sizeof(st));
	st.size = sizeof(st);
	if (sheaf_stats_get(p->cache, &st))
		return -1;
	n = (double)(st.events[SHEAF_STAT_ALLOC_FASTPATH] + st.events[SHEAF_STAT_ALLOC_SLOWPATH]);
	if (n <= 0)
		return -1;
	k = 1000.0 / n;
	/* Events per 1,000 allocations over the phase (its cache was created
	 * for it): where the objects that missed the sheaves went. */
	snprintf(
		buf, len,
		"| %.0f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f |",
		n, k * (double)st.events[SHEAF_STAT_SHEAF_REFILL],
		k * (double)st.events[SHEAF_STAT_SHEAF_FLUSH],
		k * (double)st.events[SHEAF_STAT_BARN_GET],
		k * (double)st.events[SHEAF_STAT_BARN_GET_FAIL],
		k * (double)st.events[SHEAF_STAT_BARN_PUT],
		k * (double)st.events[SHEAF_STAT_BARN_PUT_FAIL],
		k * (double)st.events[SHEAF_STAT_BARN_TRIM], k * (double)st.barn_locks,
		k * (double)st.events[SHEAF_STAT_ALLOC_SLAB],
		k * (double)st.events[SHEAF_STAT_FREE_SLAB], k * (double)st.bytes_returned / 1024);
	return 0;
}

int bench_sheaf_topology(unsigned *nodes, unsigned *memory_nodes, unsigned *cpus)
{
	struct sheaf_global_stats st;

	if (!sheaf_global_stats_get)
		return -1;
	memset(&st, 0, sizeof(st));
	st.size = sizeof(st);
	if (sheaf_global_stats_get(&st))
		return -1;
	*nodes = (unsigned)st.nodes;
	*memory_nodes = (unsigned)st.memory_nodes;
	*cpus = (unsigned)st.cpus;
	return 0;
}

const char *bench_sheaf_mode(void)
{
	return sheaf_percpu_mode ? sheaf_percpu_mode() : "(sheaf_percpu_mode not linked)";
}
