/* SPDX-License-Identifier: MIT */
/*
 * init.c - library initialisation: every layer brought up bottom to top, the hooks through
 * which lower layers call up registered first (src/README.md), and the fork and exit
 * handlers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_impl.h"

/* ---- Initialisation -------------------------------------------------------------- */

static void stats_at_exit(void)
{
	long mode = sheaf_option_long(SHEAF_OPT_STATS);
	if (mode == 2)
		sheaf_stats_print_all_json(stderr);
	else if (mode)
		sheaf_stats_print_all(stderr);
}

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* The child of fork: the reaper first, while the prepare handler's caches_lock is
 * still held, then the per-CPU layer releases its locks and adopts orphans. */
static void cache_fork_child(void)
{
	sheaf_reaper_fork_child();
	sheaf_percpu_fork_child();
}

int sheaf_init(void)
{
	pthread_mutex_lock(&init_lock);
	int st = atomic_load(&sheaf_g.init_state);
	if (st == 2) {
		pthread_mutex_unlock(&init_lock);
		return 0;
	}
	if (st == 1) {
		/* Re-entered from our own initialisation (e.g. a preloaded malloc). */
		pthread_mutex_unlock(&init_lock);
		return -EAGAIN;
	}
	atomic_store(&sheaf_g.init_state, 1);
	/* The hooks through which lower layers call up, before any layer runs. */
	sheaf_meta_register();
	sheaf_rcu_init();
	sheaf_options_init();
	sheaf_free_key_init();
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psize > 0)
		sheaf_bulk_limit = (size_t)pages / 2 * (size_t)psize;
	sheaf_list_init(&sheaf_reg.caches);
	sheaf_list_init(&sheaf_reg.threads);
	int r = sheaf_node_topology_init();
	if (!r)
		r = sheaf_page_init();
	if (!r)
		r = sheaf_percpu_init();
	if (r) {
		atomic_store(&sheaf_g.init_state, 0);
		pthread_mutex_unlock(&init_lock);
		return r;
	}
	atomic_store_explicit(&sheaf_g.init_state, 2, memory_order_release);
	pthread_mutex_unlock(&init_lock);
	sheaf_introspect_link(); /* keeps the root sheafinfo reads (docs/introspection.md) */
	sheaf_meta_init();
	pthread_atfork(sheaf_percpu_fork_prepare, sheaf_percpu_fork_parent, cache_fork_child);
	atexit(stats_at_exit);
	if (sheaf_option_long(SHEAF_OPT_VERBOSE)) {
		sheaf_options_print(stderr);
		fprintf(stderr, "sheaf: mode %s, %d possible CPUs, %d nodes%s\n", sheaf_percpu_mode(), sheaf_g.ncpus,
			sheaf_g.nnodes, sheaf_g.fake_numa ? " (fake)" : "");
	}
	return 0;
}

SHEAF_API const char *sheaf_percpu_mode(void)
{
	return sheaf_reg.mode == SHEAF_MODE_PERCPU ? "percpu-rseq" : "per-thread";
}
