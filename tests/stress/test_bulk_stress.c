/* SPDX-License-Identifier: MIT */
/* The bulk paths under concurrency (bulk_suite.h) in per-CPU mode (restartable
 * sequences; per-thread where the build or the machine has no rseq). */
#include "bulk_suite.h"

int main(void)
{
	return bs_main(NULL);
}
