/* SPDX-License-Identifier: MIT */
/*
 * fuzz_cache.c - libFuzzer target: random sequences of object-API calls on up to four
 * caches (create with varied sizes, flags, capacities, alignments and constructors;
 * alloc, free, bulk, prefill, alloc_from, refill, return, free_rcu, per-cache and
 * global barriers, shrink, set_capacity, destroy, sheaf_cache_of), mixed with malloc
 * front-end calls, checked against the model in fuzz_model.h.  An input whose first
 * byte is odd may also arm injected system-call failures (docs/testing.md).
 */
#include "fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_target_cache(data, size);
	return 0;
}
