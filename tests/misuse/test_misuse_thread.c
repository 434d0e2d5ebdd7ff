/* SPDX-License-Identifier: MIT */
/* The misuse suite (misuse_suite.h) on a plain cache in per-thread mode (SHEAF_PERCPU=thread, .env sidecar). */
#define MS_FLAVOR MS_PLAIN
#include "misuse_suite.h"

int main(void)
{
	return ms_main();
}
