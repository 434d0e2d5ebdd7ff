/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_core_started.c - when the core could not start (its first mmap failed),
 * malloc of a size class fails with ENOMEM and tries the start-up again a second later
 * (docs/malloc.md, "When the core cannot start").  If the core has started meanwhile
 * through the object API, malloc works at once: until 2026-11-29 it kept failing with
 * ENOMEM for the rest of that second although the core was up (an adversarial
 * mmap-failure sweep: sheaf_cache_create worked, the malloc after it did not).
 */
#include "harness.h"
#include "base/base.h"
#include "sheaf.h"
#include "sheaf_malloc.h"

static void t_core_started(void)
{
	/* Nothing of Sheaf has run yet in this process: the core's start-up fails. */
	sheaf_fault_arm(SHEAF_FAULT_MMAP, 1, true);
	errno = 0;
	void *p = sheaf_malloc(48);
	CHECK(!p && errno == ENOMEM);
	sheaf_fault_disarm_all();
	struct sheaf_cache *c = sheaf_cache_create("core-started", 64, NULL);
	REQUIRE(c); /* the object API retries the start-up at once */
	errno = 0;
	p = sheaf_malloc(48);
	CHECKF(p != NULL, "malloc after the core started: errno %d\n", errno);
	sheaf_free(p);
	sheaf_cache_destroy(c);
}

int main(void)
{
	RUN(t_core_started);
	return th_done();
}
