/* SPDX-License-Identifier: MIT */
/* Per-CPU sheaves stress suite (percpu_suite.h) with rseq disabled in glibc
 * (GLIBC_TUNABLES=glibc.pthread.rseq=0, see the .env sidecar): per-thread fallback
 * chosen automatically, and the rseq fast path must fail harmlessly (cpu_id -2). */
#include "percpu_suite.h"

int main(void)
{
	return ps_main(false, "GLIBC_TUNABLES=glibc.pthread.rseq=0");
}
