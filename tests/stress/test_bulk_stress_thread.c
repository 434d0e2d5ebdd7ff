/* SPDX-License-Identifier: MIT */
/* The bulk paths under concurrency (bulk_suite.h) in forced per-thread mode
 * (SHEAF_PERCPU=thread, see the .env sidecar): the batch copy is one memcpy. */
#include "bulk_suite.h"

int main(void)
{
	return bs_main("per-thread");
}
