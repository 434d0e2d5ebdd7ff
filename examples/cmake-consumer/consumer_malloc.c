/* SPDX-License-Identifier: MIT */
/* Linked with Sheaf::sheaf-malloc: malloc is Sheaf's, which mallinfo2 shows
 * (its figures are Sheaf's size classes; glibc's would count its own arena). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sheaf_malloc.h>

int main(void)
{
	enum {
		N = 10000,
		SIZE = 200
	};
	static void *v[N];
	size_t before = mallinfo2().uordblks;
	for (int i = 0; i < N; i++) {
		v[i] = malloc(SIZE);
		if (!v[i])
			return 1;
		memset(v[i], 0, SIZE);
	}
	size_t after = mallinfo2().uordblks;
	/* Sheaf's malloc knows the block: its usable size is its class's (224). */
	size_t usable = sheaf_usable_size(v[0]);
	for (int i = 0; i < N; i++)
		free(v[i]);
	if (after < before + (size_t)N * SIZE || usable != 224) {
		fprintf(stderr,
			"consumer-malloc: malloc is not Sheaf's (uordblks %zu -> %zu, usable %zu)\n",
			before, after, usable);
		return 1;
	}
	printf("consumer-malloc: %d blocks from Sheaf's malloc (mallinfo2 in use grew by %zu bytes)\n",
	       N, after - before);
	return 0;
}
