/* SPDX-License-Identifier: MIT */
/* The misuse suite (misuse_suite.h) on a SHEAF_TYPESAFE_BY_RCU cache (the mark lives past the object). */
#define MS_FLAVOR MS_TYPESAFE
#include "misuse_suite.h"

int main(void)
{
	return ms_main();
}
