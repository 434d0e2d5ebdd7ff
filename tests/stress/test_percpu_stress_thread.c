/* SPDX-License-Identifier: MIT */
/* Per-CPU sheaves stress suite (percpu_suite.h) in forced per-thread mode
 * (SHEAF_PERCPU=thread, see the .env sidecar). */
#include "percpu_suite.h"

int main(void)
{
	return ps_main(false, "SHEAF_PERCPU=thread");
}
