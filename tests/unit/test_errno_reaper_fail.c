/* SPDX-License-Identifier: MIT */
/*
 * test_errno_reaper_fail.c - a malloc that starts the reaper thread keeps errno when
 * the thread cannot be created.  glibc's pthread_create returns EAGAIN when it cannot
 * map the new thread's stack, and leaves that mmap's ENOMEM in errno; the malloc front
 * end starts the reaper from inside an allocation (once its live large blocks reach
 * 16 MiB), so under ulimit -v a 2 MiB malloc that succeeded came back with errno
 * ENOMEM until 2026-11-29 (adversarial run under the preload, ulimit -v 24000-32500).
 */
#include <sys/resource.h>

#include "harness.h"
#include "sheaf_malloc.h"

#define MiB   (1ul << 20)
#define MAGIC 4242

static void run(void *arg)
{
	(void)arg;
	sheaf_free(sheaf_malloc(16)); /* the core starts (the reaper needs it) */
	struct rlimit r;
	REQUIRE(getrlimit(RLIMIT_AS, &r) == 0);
	/* Room for 20 MiB of blocks, not for them and an 8 MiB thread stack as well. */
	r.rlim_cur = th_vm_size() + 20 * MiB;
	REQUIRE(setrlimit(RLIMIT_AS, &r) == 0);
	void *b[12];
	int n = 0, bad = 0;
	for (; n < 12; n++) {
		errno = MAGIC;
		b[n] = sheaf_malloc(2 * MiB);
		if (!b[n])
			break;
		if (errno != MAGIC) {
			fprintf(stderr, "malloc(2 MiB) #%d succeeded with errno %d\n", n, errno);
			bad++;
		}
	}
	for (int i = 0; i < n; i++)
		sheaf_free(b[i]);
	fflush(NULL);
	_exit(n >= 9 && !bad ? 0 : 1); /* the reaper's start came at the 8th */
}

static void t_errno_reaper_fail(void)
{
	struct th_child r;
	th_run_child(run, NULL, &r);
	CHECKF(r.exited && r.status == 0, "child: exit %d signal %d: %s\n", r.status, r.sig, r.err);
}

int main(void)
{
	if (SANITIZE_ADDRESS || SANITIZE_THREAD) {
		printf("skipped: the sanitizer's shadow memory does not fit an address-space limit\n");
		return 77;
	}
	RUN(t_errno_reaper_fail);
	return th_done();
}
