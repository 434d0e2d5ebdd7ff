/* Each caller error produces one clear line naming cache and address, then aborts
 * (or, with SHEAF_ON_ERROR=warn, reports and leaks); checked in child processes.
 * Also: fork safety and memory exhaustion. */
#include <pthread.h>
#include <stdatomic.h>

#include "harness.h"
#include "cache/cache.h"

#include <sheaf.h>
#include <sheaf_stats.h>

static struct sheaf_cache *ca, *cb;

static void expect_abort(void (*fn)(void *), const char *what, const char *must)
{
	struct th_child r;
	th_run_child(fn, NULL, &r);
	CHECKF(r.signaled && r.sig == SIGABRT, "%s: child did not abort (exit %d sig %d)", what,
	       r.status, r.sig);
	CHECKF(strstr(r.err, "cache '") != NULL, "%s: no cache name in: %s", what, r.err);
	CHECKF(strstr(r.err, "0x") != NULL, "%s: no address in: %s", what, r.err);
	CHECKF(strstr(r.err, must) != NULL, "%s: expected '%s' in: %s", what, must, r.err);
	/* One line. */
	char *nl = strchr(r.err, '\n');
	CHECKF(nl && nl[1] == 0, "%s: not exactly one line: %s", what, r.err);
}

static void do_foreign(void *a)
{
	(void)a;
	static char buf[64];
	sheaf_cache_free(ca, buf + 8);
}
static void do_foreign_malloc(void *a)
{
	(void)a;
	void *p = malloc(100);
	sheaf_cache_free(ca, p);
}
static void do_wrong_cache(void *a)
{
	(void)a;
	void *p = sheaf_cache_alloc(cb);
	sheaf_cache_free(ca, p);
}
static void do_interior(void *a)
{
	(void)a;
	/* The fast path checks cache and node with one compare; an interior pointer of
	 * the right cache is caught where the object reaches its slab: at once for a
	 * cache without sheaves, at the latest when the sheaf is flushed (README). */
	struct sheaf_cache_args args = { .flags = SHEAF_NO_SHEAVES };
	struct sheaf_cache *c = sheaf_cache_create("noshv-int", 64, &args);
	char *p = sheaf_cache_alloc(c);
	sheaf_cache_free(c, p + 8);
}
static void do_double_free(void *a)
{
	(void)a;
	void *p = sheaf_cache_alloc(ca);
	sheaf_cache_free(ca, p);
	sheaf_cache_free(ca, p);
}
static void do_double_free_slab(void *a)
{
	(void)a;
	/* A cache without sheaves: the second free reaches the slab. */
	struct sheaf_cache_args args = { .flags = SHEAF_NO_SHEAVES };
	struct sheaf_cache *c = sheaf_cache_create("noshv", 64, &args);
	void *p = sheaf_cache_alloc(c);
	void *q = sheaf_cache_alloc(c);
	sheaf_cache_free(c, p);
	sheaf_cache_free(c, p);
	(void)q;
}
static void do_double_free_bulk(void *a)
{
	(void)a;
	void *p = sheaf_cache_alloc(ca);
	void *v[2] = { p, p };
	sheaf_cache_free_bulk(ca, 2, v);
	sheaf_cache_shrink(ca);
}

static void test_errors_abort(void)
{
	expect_abort(do_foreign, "foreign static", "did not allocate");
	expect_abort(do_foreign_malloc, "foreign malloc", "did not allocate");
	expect_abort(do_wrong_cache, "wrong cache", "wrong cache");
	expect_abort(do_interior, "interior", "not the start of an object");
	expect_abort(do_double_free, "double free", "double free");
	expect_abort(do_double_free_slab, "double free on slab", "double free");
	expect_abort(do_double_free_bulk, "double free in bulk", "double free");
}

static void do_warn_mode(void *a)
{
	(void)a;
	/* Fresh options in the child: warn mode reports and continues. */
	static char buf[64];
	sheaf_cache_free(ca, buf);
	void *p = sheaf_cache_alloc(cb);
	sheaf_cache_free(ca, p); /* leaked, not freed into the wrong cache */
	void *q = sheaf_cache_alloc(ca);
	if (!q)
		_exit(3);
	sheaf_cache_free(ca, q);
	_exit(0);
}

/* Run @fn in a child with SHEAF_ON_ERROR=warn (reports, leaks, continues). */
static void run_warn_child(void (*fn)(void *), struct th_child *r)
{
	sheaf_error_set_warn(1);
	th_run_child(fn, NULL, r);
	sheaf_error_set_warn(0);
}

static void test_warn_mode(void)
{
	struct th_child r;
	run_warn_child(do_warn_mode, &r);
	CHECK(r.exited && r.status == 0);
	CHECK(strstr(r.err, "leaked") != NULL);
	CHECK(strstr(r.err, "did not allocate") != NULL);
	CHECK(strstr(r.err, "wrong cache") != NULL);
}

/* A report is no cancellation point: it is often written with a lock held, and write(2)
 * is one.  A thread with a cancel pending that makes a mistake under warn mode writes the
 * whole line and goes on to its next cancellation point (until 2026-11-30 it was
 * cancelled inside the report's write). */
static atomic_int after_report;
static void *cancelled_reporter(void *a)
{
	static char buf[64];
	(void)a;
	pthread_cancel(pthread_self()); /* deferred: pending until a cancellation point */
	sheaf_cache_free(ca, buf);
	atomic_store(&after_report, 1);
	pthread_testcancel();
	return NULL;
}
static void do_cancelled_report(void *a)
{
	(void)a;
	pthread_t t;
	void *r;
	if (pthread_create(&t, NULL, cancelled_reporter, NULL) || pthread_join(t, &r))
		_exit(2);
	_exit(r != PTHREAD_CANCELED ? 3 : atomic_load(&after_report) ? 0 : 4);
}
static void test_report_not_cancellation_point(void)
{
	struct th_child r;
	run_warn_child(do_cancelled_report, &r);
	CHECKF(r.exited && r.status == 0, "exit %d sig %d (4: cancelled in the report): %s",
	       r.status, r.sig, r.err);
	CHECKF(strstr(r.err, "did not allocate") && strstr(r.err, "SHEAF_ON_ERROR=warn)\n"),
	       "the whole line: %s", r.err);
}

/* A cache name with a newline cannot split a report in two (the second line posing as
 * a report of its own, adversarial run of 2026-11-29): control characters are written
 * as \xNN, and the report stays one line. */
static void do_forged_name(void *a)
{
	(void)a;
	struct sheaf_cache *c = sheaf_cache_create("req\nsheaf: forged\t", 64, NULL);
	void *p = c ? sheaf_cache_alloc(c) : NULL;
	if (!p)
		_exit(2);
	sheaf_cache_free(c, p);
	sheaf_cache_free(c, p);
	_exit(0);
}

static void test_name_one_line(void)
{
	struct th_child r;
	run_warn_child(do_forged_name, &r);
	CHECK(r.exited && r.status == 0);
	CHECKF(strstr(r.err, "sheaf: double free: cache 'req\\x0asheaf: forged\\x09' address") ==
		       r.err,
	       "expected the name escaped: %s", r.err);
	CHECKF(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "not one line: %s", r.err);
}

/* Exhaustion: NULL + ENOMEM, and the cache keeps working afterwards. */
static void do_exhaust(void *a)
{
	(void)a;
	struct sheaf_cache *c = sheaf_cache_create("exhaust", 4096, NULL);
	if (!c)
		_exit(10);
	sheaf_os_inject_heap_failure(2000); /* 8 MiB of order-0/1 slabs, then "mmap fails" */
	void **v = calloc(1 << 20, sizeof(void *));
	size_t n = 0;
	for (;;) {
		errno = 0;
		void *p = sheaf_cache_alloc(c);
		if (!p) {
			if (errno != ENOMEM)
				_exit(11);
			break;
		}
		memset(p, 1, 4096);
		v[n++] = p;
	}
	if (n < 100)
		_exit(12);
	for (size_t i = 0; i < n; i += 2)
		sheaf_cache_free(c, v[i]);
	/* Freed objects are reusable: the cache stays usable. */
	for (int i = 0; i < 50; i++) {
		void *p = sheaf_cache_alloc(c);
		if (!p)
			_exit(13);
		sheaf_cache_free(c, p);
	}
	sheaf_os_inject_heap_failure(-1);
	_exit(0);
}

static void test_exhaustion(void)
{
	struct th_child r;
	th_run_child(do_exhaust, NULL, &r);
	CHECKF(r.exited && r.status == 0, "exit %d sig %d: %s", r.status, r.sig, r.err);
}

/* fork: with other threads busy in the allocator, the child can allocate and free. */
static atomic_int stop;
static void *busy(void *arg)
{
	(void)arg;
	void *v[64];
	while (!atomic_load(&stop)) {
		for (int i = 0; i < 64; i++)
			v[i] = sheaf_cache_alloc(ca);
		for (int i = 0; i < 64; i++)
			sheaf_cache_free(ca, v[i]);
		sheaf_cache_shrink(cb);
	}
	return NULL;
}
static void test_fork(void)
{
	pthread_t t[8];
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, busy, NULL);
	for (int k = 0; k < 20; k++) {
		pid_t pid = fork();
		if (pid == 0) {
			alarm(20);
			void *v[1000];
			for (int i = 0; i < 1000; i++) {
				v[i] = sheaf_cache_alloc(i % 2 ? ca : cb);
				if (!v[i])
					_exit(2);
			}
			for (int i = 0; i < 1000; i++)
				sheaf_cache_free(i % 2 ? ca : cb, v[i]);
			struct sheaf_cache *n = sheaf_cache_create("child", 100, NULL);
			void *p = sheaf_cache_alloc(n);
			sheaf_cache_free(n, p);
			sheaf_cache_destroy(n);
			_exit(0);
		}
		int st;
		waitpid(pid, &st, 0);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child %d: status %d", k, st);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
}

/* destroy with objects still allocated: one line with name and count; memory kept. */
static void do_leak_destroy(void *a)
{
	(void)a;
	struct sheaf_cache *c = sheaf_cache_create("leaky", 100, NULL);
	char *p[3];
	for (int i = 0; i < 3; i++)
		p[i] = sheaf_cache_alloc(c);
	void *q = sheaf_cache_alloc(c);
	sheaf_cache_free(c, q);
	sheaf_cache_destroy(c);
	for (int i = 0; i < 3; i++)
		memset(p[i], 7, 100); /* still ours, still mapped */
	_exit(p[0][99] == 7 ? 0 : 5);
}

static void test_destroy_leak(void)
{
	struct th_child r;
	th_run_child(do_leak_destroy, NULL, &r);
	CHECKF(r.exited && r.status == 0, "exit %d sig %d", r.status, r.sig);
	CHECKF(strstr(r.err, "cache 'leaky' destroyed with 3 objects still allocated") != NULL,
	       "got: %s", r.err);
}

/* destroy with a prefilled sheaf not returned: the sheaf is named, its objects (never
 * handed out) go back, and only what the program holds is counted as allocated.  Until
 * 2026-11-29 a forgotten sheaf of 8 was "121 objects still allocated" (its capacity),
 * and an empty one was not mentioned. */
static void do_destroy_prefilled(void *a)
{
	(void)a;
	struct sheaf_cache *c = sheaf_cache_create("lender", 64, NULL);
	void *p = sheaf_cache_alloc(c);
	struct sheaf_prefilled *pf = sheaf_cache_prefill(c, 8);
	if (!p || !pf)
		_exit(6);
	sheaf_cache_destroy(c);
	struct sheaf_cache *d = sheaf_cache_create("lender2", 64, NULL);
	struct sheaf_prefilled *e = sheaf_cache_prefill(d, 600); /* oversize: its own mapping */
	if (!e)
		_exit(7);
	while (sheaf_cache_alloc_from(d, e))
		; /* objects leaked on purpose: counted below */
	sheaf_cache_destroy(d);
	_exit(0);
}

static void test_destroy_prefilled(void)
{
	struct th_child r;
	th_run_child(do_destroy_prefilled, NULL, &r);
	CHECKF(r.exited && r.status == 0, "exit %d sig %d", r.status, r.sig);
	CHECKF(strstr(r.err, "cache 'lender' destroyed with 1 prefilled sheaf not returned") &&
		       strstr(r.err, "cache 'lender' destroyed with 1 object still allocated"),
	       "got: %s", r.err);
	CHECKF(strstr(r.err, "cache 'lender2' destroyed with 1 prefilled sheaf not returned "
			     "(0 free objects") &&
		       strstr(r.err, "cache 'lender2' destroyed with 600 objects still allocated"),
	       "got: %s", r.err);
}

/* The handle of a cache destroyed with objects still allocated is dead like any other:
 * an alloc, a free (of a leaked object) and a second destroy are each reported as a
 * destroyed cache, and the leaked objects are untouched.  Until 2026-11-29 the cache
 * stayed live and handed out objects unreported (adversarial review). */
static void do_leak_then_use(void *a)
{
	(void)a;
	struct sheaf_cache *c = sheaf_cache_create("leaky2", 256, NULL);
	char *p = sheaf_cache_alloc(c);
	if (!p)
		_exit(6);
	memset(p, 7, 256);
	sheaf_cache_destroy(c);
	void *q = sheaf_cache_alloc(c); /* reported; warn mode: NULL */
	sheaf_cache_free(c, p);         /* reported, leaked */
	sheaf_cache_destroy(c);         /* reported */
	for (int i = 0; i < 256; i++)
		if (p[i] != 7)
			_exit(7);
	_exit(q == NULL ? 0 : 5);
}

static void test_destroy_leak_dead(void)
{
	struct th_child r;
	run_warn_child(do_leak_then_use, &r);
	CHECKF(r.exited && r.status == 0, "exit %d sig %d", r.status, r.sig);
	int n = 0;
	for (const char *e = r.err; (e = strstr(e, "destroyed cache")) != NULL; e++)
		n++;
	CHECKF(n == 3, "%d destroyed-cache reports; got: %s", n, r.err);
}

/* A double free after the object's slab went back and was taken again for Sheaf's own
 * metadata (a prefilled sheaf's array) says it may be a double free; it named only the
 * metadata cache ('sheaf-meta-4096') until 2026-11-29 (adversarial review). */
static void do_free_into_meta(void *a)
{
	(void)a;
	struct sheaf_cache_args args = { .flags = SHEAF_NO_SHEAVES };
	struct sheaf_cache *c = sheaf_cache_create("reused", 64, &args);
	void *x = sheaf_cache_alloc(c);
	sheaf_cache_free(c, x);
	sheaf_cache_shrink(c);
	struct sheaf_prefilled *pf = sheaf_cache_prefill(c, 500);
	sheaf_cache_free(c, x); /* reported, whatever holds the page now */
	if (pf)
		sheaf_cache_return(c, pf);
	_exit(0);
}

static void test_free_into_meta(void)
{
	struct th_child r;
	run_warn_child(do_free_into_meta, &r);
	CHECKF(r.exited && r.status == 0, "exit %d sig %d", r.status, r.sig);
	CHECKF(strstr(r.err, "a double free?") != NULL, "got: %s", r.err);
}

int main(void)
{
	ca = sheaf_cache_create("cache-a", 64, NULL);
	cb = sheaf_cache_create("cache-b", 64, NULL);
	REQUIRE(ca && cb);
	RUN(test_errors_abort);
	RUN(test_warn_mode);
	RUN(test_report_not_cancellation_point);
	RUN(test_name_one_line);
	RUN(test_exhaustion);
	RUN(test_fork);
	RUN(test_destroy_leak);
	RUN(test_destroy_prefilled);
	RUN(test_destroy_leak_dead);
	RUN(test_free_into_meta);
	return th_done();
}
