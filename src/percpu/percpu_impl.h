/* SPDX-License-Identifier: MIT */
/*
 * percpu_impl.h - what percpu.c and gauges.c share (private to src/percpu/).
 */
#ifndef SHEAF_PERCPU_IMPL_H
#define SHEAF_PERCPU_IMPL_H

#include "percpu/percpu.h"

/* CPU @k's pcs of @c (per-CPU mode), or NULL before its first lock. */
static inline struct sheaf_pcs *cpu_pcs_get(struct sheaf_cache *c, int k)
{
	return __atomic_load_n(&c->cpu_pcs[k], __ATOMIC_ACQUIRE);
}

/* Does @c keep its sheaves per CPU (the mode, and the table exists)? */
static inline bool percpu_cache(const struct sheaf_cache *c)
{
	return sheaf_reg.mode == SHEAF_MODE_PERCPU && c->cpu_pcs;
}

#endif /* SHEAF_PERCPU_IMPL_H */
