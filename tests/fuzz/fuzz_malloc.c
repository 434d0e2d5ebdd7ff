/* SPDX-License-Identifier: MIT */
/*
 * fuzz_malloc.c - libFuzzer target: random sequences of malloc front-end calls (malloc,
 * calloc, realloc, reallocarray, aligned_alloc, posix_memalign, memalign, valloc,
 * pvalloc, free, free_sized, usable_size, malloc_trim) with sizes and alignments at the
 * edges (class boundaries, the extent threshold, impossible sizes, bad alignments),
 * checked against the model in fuzz_model.h.  An input whose first byte is odd runs
 * with injected system-call failures armed at random points (docs/testing.md).
 */
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_target_malloc(data, size);
	return 0;
}
