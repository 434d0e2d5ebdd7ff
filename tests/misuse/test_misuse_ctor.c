/* SPDX-License-Identifier: MIT */
/* The misuse suite (misuse_suite.h) on a cache with a constructor (the mark lives past the object). */
#define MS_FLAVOR MS_CTOR
#include "misuse_suite.h"

int main(void)
{
	return ms_main();
}
