/* SPDX-License-Identifier: MIT */
/* The misuse suite (misuse_suite.h) on a plain cache, per-CPU mode where available. */
#define MS_FLAVOR MS_PLAIN
#include "misuse_suite.h"

int main(void)
{
	return ms_main();
}
