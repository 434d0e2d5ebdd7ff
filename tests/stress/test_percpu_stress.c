/* SPDX-License-Identifier: MIT */
/* Per-CPU sheaves stress suite (percpu_suite.h) in the default mode: per-CPU with
 * restartable sequences wherever glibc registered rseq and the build supports it. */
#include "percpu_suite.h"

int main(void)
{
	/* sheaf_rseq_cpu() needs the offset read at init. */
	struct sheaf_cache *probe = sheaf_cache_create("percpu-probe", 8, NULL);
	REQUIRE(probe);
	sheaf_cache_destroy(probe);
	const char *opt = getenv("SHEAF_PERCPU");
	bool want = SHEAF_HAVE_RSEQ && sheaf_rseq_cpu() >= 0 && !(opt && !strcmp(opt, "thread"));
	return ps_main(want,
		       want ? "rseq registered by glibc" : "no rseq here: per-thread fallback");
}
