/* SPDX-License-Identifier: MIT */
/*
 * options.c - every run-time option in one table (docs/options.md).
 *
 * Sources, later ones winning: the compiled default; SHEAF_OPTIONS="a=1,b=2"; the
 * variable SHEAF_<NAME>; sheaf_option_set() before initialisation.  Read once at
 * initialisation; docs/options.md mirrors this table.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum opt_type { OPT_LONG, OPT_BOOL, OPT_STR };

struct opt {
	const char *name;    /* environment SHEAF_<NAME> (upper case) */
	enum opt_type type;
	const char *def;     /* default, as text */
	const char *help;
	const char *stability; /* "stable", "evolving" or "testing" (umem style) */
	long lval;
	char sval[256];
	int set;             /* set by sheaf_option_set() */
};

#define OPT(n, t, d, h, st) { .name = (n), .type = (t), .def = (d), .help = (h), .stability = (st) }

/* The reaper (reaper.c) is on by default, except under ThreadSanitizer: TSan kills a
 * forked child that starts a thread when the parent had more than one. */
#include "percpu/rseq.h" /* SHEAF_RSEQ_TSAN */
#if SHEAF_RSEQ_TSAN
#define SHEAF_REAP_MS_DEFAULT "0"
#else
#define SHEAF_REAP_MS_DEFAULT "250"
#endif

static struct opt opts[SHEAF_OPT_NR] = {
	[SHEAF_OPT_STATS] = OPT("STATS", OPT_BOOL, "0", "print every cache's statistics at exit (1: text, json: JSON)", "stable"),
	[SHEAF_OPT_ON_ERROR] = OPT("ON_ERROR", OPT_STR, "abort", "abort | warn: what a detected misuse does (warn reports and leaks the object)", "stable"),
	[SHEAF_OPT_SHEAF_CAPACITY] = OPT("SHEAF_CAPACITY", OPT_LONG, "0", "sheaf capacity of every cache without an explicit one (0: D1 default)", "stable"),
	[SHEAF_OPT_FAKE_NUMA] = OPT("FAKE_NUMA", OPT_STR, "", "fake topology: \"N\" nodes, CPU i on node i % N; \"N:memoryless=1,3\" makes nodes 1 and 3 memoryless", "stable"),
	[SHEAF_OPT_PERCPU] = OPT("PERCPU", OPT_STR, "auto", "auto | rseq | thread: per-CPU sheaves with rseq, or per-thread sheaves", "stable"),
	[SHEAF_OPT_HEAP_GB] = OPT("HEAP_GB", OPT_LONG, "64", "cap of the slab heap, GiB: address space is taken in 2 MiB blocks as slabs need it, nothing is reserved ahead (docs/malloc.md, Limits)", "stable"),
	[SHEAF_OPT_PURGE_ORDER] = OPT("PURGE_ORDER", OPT_LONG, "4", "free page runs of 4 KiB << n are given back to the OS at once", "evolving"),
	[SHEAF_OPT_BARN_MAX_FULL] = OPT("BARN_MAX_FULL", OPT_LONG, "0", "soft limit of full sheaves per barn, the ceiling of the EWMA working set (D6); 0: as many as fit in SHEAF_BARN_BYTES, at least 10 (Linux 7.0's constant)", "stable"),
	[SHEAF_OPT_BARN_MAX_EMPTY] = OPT("BARN_MAX_EMPTY", OPT_LONG, "0", "soft limit of empty sheaves per barn; 0: the same as the full limit", "stable"),
	[SHEAF_OPT_BARN_BYTES] = OPT("BARN_BYTES", OPT_LONG, "4194304", "object bytes a barn's full sheaves may hold when BARN_MAX_FULL is 0 (the limit is 10..256 sheaves)", "evolving"),
	[SHEAF_OPT_BARN_EWMA] = OPT("BARN_EWMA", OPT_BOOL, "1", "trim barns to an EWMA of their working set, gradually (D6)", "evolving"),
	[SHEAF_OPT_KERNEL_COMPAT] = OPT("KERNEL_COMPAT", OPT_BOOL, "0", "every cache behaves like Linux 7.0 (no D1-D7), for comparison", "testing"),
	[SHEAF_OPT_SLAB_DEBUG] = OPT("SLAB_DEBUG", OPT_STR, "", "debug caches, kernel slab_debug= syntax: \"FZPU\" for all, \"FZPU,name1,name2\" for some", "stable"),
	[SHEAF_OPT_RCU_BARRIER] = OPT("RCU_BARRIER", OPT_STR, "cache", "cache | global: what sheaf_cache_destroy waits for (global: for comparison only)", "testing"),
	[SHEAF_OPT_VERBOSE] = OPT("VERBOSE", OPT_BOOL, "0", "print the effective options and topology at start", "stable"),
	[SHEAF_OPT_DEBUG_OBJECTS] = OPT("DEBUG_OBJECTS", OPT_BOOL, "1", "the debug-objects tracker (sheaf_debug.h) is active when the program uses it; 0 turns every hook into a no-op", "stable"),
	[SHEAF_OPT_REAP_MS] = OPT("REAP_MS", OPT_LONG, SHEAF_REAP_MS_DEFAULT, "period of the background reaper, ms: caches idle for one period are shrunk (sheaves, barns and free pages back to the OS); 0: no reaper thread (the default in TSan builds, where a second thread stops forked children from starting threads)", "evolving"),
	[SHEAF_OPT_DEBUG_OBJECTS_POOL] = OPT("DEBUG_OBJECTS_POOL", OPT_STR, "batched", "batched | single: the tracker's record pool (single: one record at a time, for comparison only)", "testing"),
};

static int parse_into(struct opt *o, const char *v)
{
	if (o->type == OPT_STR) {
		size_t n = strlen(v);
		if (n >= sizeof(o->sval))
			return -EINVAL;
		memcpy(o->sval, v, n + 1);
		return 0;
	}
	if (o->type == OPT_BOOL) {
		if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") ||
		    !strcasecmp(v, "json")) {
			o->lval = !strcasecmp(v, "json") ? 2 : 1;
			return 0;
		}
		if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
		    !*v) {
			o->lval = 0;
			return 0;
		}
		return -EINVAL;
	}
	char *end;
	errno = 0;
	long l = strtol(v, &end, 0);
	if (errno || end == v || *end)
		return -EINVAL;
	o->lval = l;
	return 0;
}

static struct opt *find(const char *name)
{
	for (int i = 0; i < SHEAF_OPT_NR; i++)
		if (!strcasecmp(opts[i].name, name))
			return &opts[i];
	return NULL;
}

static void apply_combined(const char *s)
{
	/* SHEAF_OPTIONS="a=1,b=2"; values may not contain ',' except FAKE_NUMA/SLAB_DEBUG,
	 * which take the rest of the string when they come last. */
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", s);
	char *p = buf;
	while (p && *p) {
		char *eq = strchr(p, '=');
		if (!eq)
			break;
		*eq = 0;
		struct opt *o = find(p);
		char *v = eq + 1;
		char *comma = (o && (o == &opts[SHEAF_OPT_FAKE_NUMA] || o == &opts[SHEAF_OPT_SLAB_DEBUG])) ? NULL
															: strchr(v, ',');
		if (comma)
			*comma = 0;
		if (!o)
			sheaf_os_print("sheaf: SHEAF_OPTIONS: unknown option '%s' ignored", p);
		else if (!o->set && parse_into(o, v) != 0)
			sheaf_os_print("sheaf: SHEAF_OPTIONS: bad value '%s' for %s ignored", v, o->name);
		p = comma ? comma + 1 : NULL;
	}
}

static int options_ready;

void sheaf_options_init(void)
{
	for (int i = 0; i < SHEAF_OPT_NR; i++)
		if (!opts[i].set)
			parse_into(&opts[i], opts[i].def);
	const char *comb = getenv("SHEAF_OPTIONS");
	if (comb)
		apply_combined(comb);
	for (int i = 0; i < SHEAF_OPT_NR; i++) {
		char var[64];
		snprintf(var, sizeof(var), "SHEAF_%s", opts[i].name);
		const char *v = getenv(var);
		if (v && !opts[i].set && parse_into(&opts[i], v) != 0)
			sheaf_os_print("sheaf: %s: bad value '%s' ignored (default %s)", var, v, opts[i].def);
	}
	options_ready = 1;
}

long sheaf_option_long(enum sheaf_option_id id) { return opts[id].lval; }
const char *sheaf_option_str(enum sheaf_option_id id) { return opts[id].sval; }

SHEAF_API int sheaf_option_set(const char *name, const char *value)
{
	if (!name || !value)
		return -EINVAL;
	if (!strncasecmp(name, "SHEAF_", 6))
		name += 6;
	struct opt *o = find(name);
	if (!o)
		return -ENOENT;
	if (atomic_load(&sheaf_g.init_state) != 0)
		return -EBUSY;
	struct opt tmp = *o;
	if (parse_into(&tmp, value) != 0)
		return -EINVAL;
	*o = tmp;
	o->set = 1;
	return 0;
}

void sheaf_options_print(FILE *f)
{
	for (int i = 0; i < SHEAF_OPT_NR; i++) {
		const struct opt *o = &opts[i];
		if (o->type == OPT_STR)
			fprintf(f, "SHEAF_%-16s = %-10s  (%s) %s\n", o->name, o->sval, o->stability, o->help);
		else
			fprintf(f, "SHEAF_%-16s = %-10ld  (%s) %s\n", o->name, o->lval, o->stability, o->help);
	}
}
