/* SPDX-License-Identifier: MIT */
/*
 * misuse_double_free.c - a program that frees one object twice, for
 * tests/misuse/test_setuid.sh: it prints "survived" only if Sheaf let it go on
 * (SHEAF_ON_ERROR=warn honoured); a setuid copy must ignore that variable and abort.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sheaf.h"

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "ids")) {
		printf("euid %d ruid %d\n", (int)geteuid(), (int)getuid());
		return 0;
	}
	struct sheaf_cache *c = sheaf_cache_create("setuid-demo", 64, NULL);
	if (!c)
		return 2;
	void *p = sheaf_cache_alloc(c);
	sheaf_cache_free(c, p);
	sheaf_cache_free(c, p);
	printf("survived\n");
	return 0;
}
