/* SPDX-License-Identifier: MIT */
/*
 * harness.h - Sheaf's test harness: TAP output, CHECK macros that
 * count failures, and a helper that runs a function in a child process and
 * captures its exit status and stderr (for misuse tests that must abort).
 */
#ifndef SHEAF_HARNESS_H
#define SHEAF_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Which sanitizer the test is built with (gcc defines __SANITIZE_*, clang __has_feature). */
#if defined(__SANITIZE_THREAD__)
#define SANITIZE_THREAD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SANITIZE_THREAD 1
#endif
#endif
#ifndef SANITIZE_THREAD
#define SANITIZE_THREAD 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZE_ADDRESS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZE_ADDRESS 1
#endif
#endif
#ifndef SANITIZE_ADDRESS
#define SANITIZE_ADDRESS 0
#endif

static int th_fails, th_checks, th_tests;

#define CHECK(cond)                                                                       \
	do {                                                                              \
		th_checks++;                                                              \
		if (!(cond)) {                                                            \
			th_fails++;                                                       \
			fprintf(stderr, "# FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                         \
	} while (0)

#define CHECKF(cond, ...)                                                                 \
	do {                                                                              \
		th_checks++;                                                              \
		if (!(cond)) {                                                            \
			th_fails++;                                                       \
			fprintf(stderr, "# FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                     \
			fputc('\n', stderr);                                              \
		}                                                                         \
	} while (0)

/* Abort the whole test at once (for conditions later checks depend on). */
#define REQUIRE(cond)                                                                      \
	do {                                                                               \
		th_checks++;                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "# FATAL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			printf("Bail out!\n");                                             \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

/* Run one named sub-test and print a TAP line for it. */
#define RUN(fn)                                                                               \
	do {                                                                                  \
		int before_ = th_fails;                                                       \
		th_tests++;                                                                   \
		fn();                                                                         \
		printf("%s %d - %s\n", th_fails == before_ ? "ok" : "not ok", th_tests, #fn); \
		fflush(stdout);                                                               \
	} while (0)

static inline int th_done(void)
{
	printf("1..%d\n# %d checks, %d failed\n", th_tests, th_checks, th_fails);
	return th_fails ? 1 : 0;
}

/* Result of th_run_child(). */
struct th_child {
	int exited, status, signaled, sig;
	char err[8192]; /* the child's stderr, NUL-terminated (truncated) */
};

/* Fork, run fn(arg) in the child with stderr captured, wait. */
static inline void th_run_child(void (*fn)(void *), void *arg, struct th_child *r)
{
	int p[2];
	memset(r, 0, sizeof(*r));
	if (pipe(p) != 0) {
		perror("pipe");
		exit(2);
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		dup2(p[1], 2);
		/* Keep the core dumps of deliberate aborts out of the way. */
		signal(SIGABRT, SIG_DFL);
		fn(arg);
		_exit(0);
	}
	close(p[1]);
	size_t n = 0;
	for (;;) {
		ssize_t k = read(p[0], r->err + n, sizeof(r->err) - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
		if (n == sizeof(r->err) - 1)
			break;
	}
	r->err[n] = 0;
	char sink[512];
	while (read(p[0], sink, sizeof(sink)) > 0)
		;
	close(p[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	r->exited = WIFEXITED(st);
	r->status = r->exited ? WEXITSTATUS(st) : -1;
	r->signaled = WIFSIGNALED(st);
	r->sig = r->signaled ? WTERMSIG(st) : 0;
	/* A sanitizer's report in a child is never what a test expects, and tests print
	 * the child's stderr only in some of their failure messages: pass it on. */
	if (strstr(r->err, "Sanitizer"))
		fprintf(stderr, "# child's stderr (a sanitizer report):\n%s\n", r->err);
}

/* A small deterministic PRNG (xorshift64*), for fixed-seed stress tests. */
/* Run @fn(@arg) in a child and check Sheaf's one-line misuse report: it aborts with
 * "sheaf: <kind>: cache '<cache>' ... address <addr>" and nothing else on stderr. */
static inline void th_expect_report(const char *what, void (*fn)(void *), void *arg,
				    const char *kind, const char *cache, const void *addr)
{
	struct th_child r;
	th_run_child(fn, arg, &r);
	char head[160], at[64];
	snprintf(head, sizeof(head), "sheaf: %s: cache '%s'", kind, cache);
	snprintf(at, sizeof(at), "address %#lx", (unsigned long)(uintptr_t)addr);
	/* A test that expects the abort sets SHEAF_ON_ERROR=abort in its .env sidecar: say so
	 * when one that does not ran under a user's SHEAF_ON_ERROR=warn. */
	const char *hint = strstr(r.err, "SHEAF_ON_ERROR=warn") ?
				   " (SHEAF_ON_ERROR=warn: this test needs abort, in its .env)" :
				   "";
	CHECKF(r.signaled && r.sig == SIGABRT, "%s: did not abort (exit %d, signal %d)%s: %s", what,
	       r.status, r.sig, hint, r.err);
	CHECKF(strncmp(r.err, head, strlen(head)) == 0, "%s: expected '%s...' got: %s", what, head,
	       r.err);
	CHECKF(strstr(r.err, at) != NULL, "%s: expected '%s' in: %s", what, at, r.err);
	char *nl = strchr(r.err, '\n');
	CHECKF(nl && nl[1] == 0, "%s: not exactly one line: %s", what, r.err);
}

static inline uint64_t th_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Threads of this process whose name (comm) starts with @prefix; -1 if /proc is not
 * readable. */
static inline int th_threads_named(const char *prefix)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[300], comm[64] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, prefix, strlen(prefix)))
			n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* Address space (@field 0) or resident set (1) of this process in bytes, from
 * /proc/self/statm; 0 if it cannot be read. */
static inline size_t th_statm(int field)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;
	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			size = res = 0;
		fclose(f);
	}
	return (field ? res : size) * (size_t)sysconf(_SC_PAGESIZE);
}

/* Resident set size of this process in bytes. */
static inline size_t th_rss(void)
{
	return th_statm(1);
}

/* Address space of this process in bytes (what RLIMIT_AS counts). */
static inline size_t th_vm_size(void)
{
	return th_statm(0);
}

#endif /* SHEAF_HARNESS_H */
