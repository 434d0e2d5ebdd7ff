/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_sizeclass.c - the size-class ladder (src/malloc/sizeclass.h): lookup
 * gives the smallest class that fits, the stated fragmentation bound holds
 * for every size, and the class alignments are what aligned allocation
 * relies on.
 */
#include "harness.h"
#include "malloc/sizeclass.h"

static void t_lookup_is_smallest_fit(void)
{
	int bad = 0;
	for (size_t n = 0; n <= SHEAF_SC_MAX; n++) {
		unsigned int i = sheaf_sc_index(n);
		if (i >= SHEAF_SC_COUNT || sheaf_sc_size[i] < n ||
		    (i > 0 && sheaf_sc_size[i - 1] >= n)) {
			if (bad++ < 5)
				fprintf(stderr, "# n=%zu -> class %u\n", n, i);
		}
	}
	CHECK(bad == 0);
	CHECK(sheaf_sc_index(SHEAF_SC_MAX) == SHEAF_SC_COUNT - 1);
	CHECK(sheaf_sc_size[SHEAF_SC_COUNT - 1] == SHEAF_SC_MAX);
}

static void t_ladder_is_increasing_and_quantised(void)
{
	for (unsigned int i = 1; i < SHEAF_SC_COUNT; i++) {
		CHECK(sheaf_sc_size[i] > sheaf_sc_size[i - 1]);
		CHECK(sheaf_sc_size[i] % 16 == 0); /* max_align_t for every object >= 16 B */
	}
	CHECK(sheaf_sc_size[0] == 8);
}

/* The bound stated in sizeclass.h: < 1.25 n above 128 B, at most 15 B below. */
static void t_fragmentation_bound(void)
{
	double worst = 0;
	size_t worst_n = 0;
	for (size_t n = 1; n <= SHEAF_SC_MAX; n++) {
		size_t c = sheaf_sc_size[sheaf_sc_index(n)];
		if (n > 128) {
			CHECKF(c * 4 < n * 5, "n=%zu class=%zu", n, c);
			double r = (double)c / (double)n;
			if (r > worst) {
				worst = r;
				worst_n = n;
			}
		} else if (n > 8) {
			CHECKF(c - n <= 15, "n=%zu class=%zu", n, c);
		} else {
			CHECK(c == 8);
		}
	}
	printf("# worst ratio above 128 B: %.4f at n=%zu\n", worst, worst_n);
	CHECK(worst < 1.25);
}

static void t_alignment(void)
{
	for (unsigned int i = 0; i < SHEAF_SC_COUNT; i++) {
		size_t a = sheaf_sc_align(i);
		CHECK(a >= 8 && (a & (a - 1)) == 0 && a <= SHEAF_SC_ALIGN_MAX);
		CHECK(sheaf_sc_size[i] % a == 0);
		/* power-of-two classes up to 4 KiB are aligned to their size */
		if ((sheaf_sc_size[i] & (sheaf_sc_size[i] - 1)) == 0 && sheaf_sc_size[i] <= 4096)
			CHECK(a == sheaf_sc_size[i]);
	}
	/* Aligned search always ends: the last class has the largest alignment. */
	CHECK(sheaf_sc_align(SHEAF_SC_COUNT - 1) == SHEAF_SC_ALIGN_MAX);
}

int main(void)
{
	RUN(t_lookup_is_smallest_fit);
	RUN(t_ladder_is_increasing_and_quantised);
	RUN(t_fragmentation_bound);
	RUN(t_alignment);
	return th_done();
}
