/* SPDX-License-Identifier: MIT */
/* test_misuse_malloc.c in per-thread mode (SHEAF_PERCPU=thread, .env sidecar): the
 * malloc front end's free then takes the per-thread push (percpu/fastpath.h), which
 * makes the same checks. */
#include "test_misuse_malloc.c"
