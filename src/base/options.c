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
#include <sys/auxv.h>

#include "base/base.h"

enum opt_type {
	OPT_LONG,
	OPT_BOOL,
	OPT_STR
};

struct opt {
	const char *name; /* environment SHEAF_<NAME> (upper case) */
	enum opt_type type;
	const char *def; /* default, as text */
	const char *help;
	const char *stability; /* "stable", "evolving" or "testing" (umem style) */
	long min, max;         /* OPT_LONG: accepted range */
	const char *choices;   /* OPT_STR with a fixed set: "a|b|c"; NULL: free text */
	long lval;
	char sval[256];
	int set; /* set by sheaf_option_set() */
};

/* The table keeps one option a line (tests/integration/test_man_pages.sh reads it so). */
/* clang-format off */
#define OPT(n, t, d, h, st) { .name = (n), .type = (t), .def = (d), .help = (h), .stability = (st) }
#define OPTL(n, d, lo, hi, h, st)                                                                  \
	{ .name = (n), .type = OPT_LONG, .def = (d), .help = (h), .stability = (st), .min = (lo),  \
	  .max = (hi) }
#define OPTC(n, d, ch, h, st)                                                                      \
	{ .name = (n), .type = OPT_STR, .def = (d), .help = (h), .stability = (st), .choices = (ch) }

/* The reaper (reaper.c) is on by default, except under ThreadSanitizer: TSan kills a
 * forked child that starts a thread when the parent had more than one. */
#if SHEAF_TSAN
#define SHEAF_REAP_MS_DEFAULT "0"
#else
#define SHEAF_REAP_MS_DEFAULT "250"
#endif

static struct opt opts[SHEAF_OPT_NR] = {
	[SHEAF_OPT_STATS] = OPT("STATS", OPT_BOOL, "0", "print every cache's statistics at exit (1: text, json: JSON)", "stable"),
	[SHEAF_OPT_ON_ERROR] = OPTC("ON_ERROR", "abort", "abort|warn", "abort | warn: what a detected misuse does (warn reports and leaks the object)", "stable"),
	[SHEAF_OPT_SHEAF_CAPACITY] = OPTL("SHEAF_CAPACITY", "0", 0, SHEAF_MAX_SHEAF_CAPACITY, "sheaf capacity of every cache without an explicit one (0: D1 default)", "stable"),
	[SHEAF_OPT_FAKE_NUMA] = OPT("FAKE_NUMA", OPT_STR, "", "fake topology: \"N\" nodes, CPU i on node i % N; \"N:memoryless=1,3\" makes nodes 1 and 3 memoryless", "stable"),
	[SHEAF_OPT_PERCPU] = OPTC("PERCPU", "auto", "auto|rseq|thread", "auto | rseq | thread: per-CPU sheaves with rseq, or per-thread sheaves", "stable"),
	[SHEAF_OPT_HEAP_GB] = OPTL("HEAP_GB", "64", 0, 65536, "cap of the slab heap, GiB: address space is taken in 2 MiB blocks as slabs need it, nothing is reserved ahead (docs/malloc.md, Limits); 0: no heap, the core cannot start", "stable"),
	[SHEAF_OPT_PURGE_ORDER] = OPTL("PURGE_ORDER", "4", 0, SHEAF_BLOCK_ORDER, "free page runs of 4 KiB << n or more are what a purge gives back to the OS (smaller runs wait until they merge)", "evolving"),
	[SHEAF_OPT_PURGE_MS] = OPTL("PURGE_MS", "1000", 0, 3600000, "free slab pages unused for this long, ms, are given back to the OS (decay: README, Memory given back); 0: at once", "evolving"),
	[SHEAF_OPT_BARN_MAX_FULL] = OPTL("BARN_MAX_FULL", "0", 0, 65536, "soft limit of full sheaves per barn, the ceiling of the EWMA working set (D6); 0: as many as fit in SHEAF_BARN_BYTES, at least 10 (Linux 7.0's constant)", "stable"),
	[SHEAF_OPT_BARN_MAX_EMPTY] = OPTL("BARN_MAX_EMPTY", "0", 0, 65536, "soft limit of empty sheaves per barn; 0: the same as the full limit", "stable"),
	[SHEAF_OPT_BARN_BYTES] = OPTL("BARN_BYTES", "4194304", 0, (1L << 34), "object bytes a barn's full sheaves may hold when BARN_MAX_FULL is 0 (the limit is 10..256 sheaves)", "evolving"),
	[SHEAF_OPT_BARN_EWMA] = OPT("BARN_EWMA", OPT_BOOL, "1", "trim barns to an EWMA of their working set, gradually (D6)", "evolving"),
	[SHEAF_OPT_KERNEL_COMPAT] = OPT("KERNEL_COMPAT", OPT_BOOL, "0", "every cache behaves like Linux 7.0 (no D1-D7), for comparison", "testing"),
	[SHEAF_OPT_SLAB_DEBUG] = OPT("SLAB_DEBUG", OPT_STR, "", "debug caches, kernel slab_debug= syntax: \"FZPU\" for all, \"FZPU,name1,name2\" for some", "stable"),
	[SHEAF_OPT_RCU_BARRIER] = OPTC("RCU_BARRIER", "cache", "cache|global", "cache | global: what sheaf_cache_destroy waits for (global: for comparison only)", "testing"),
	[SHEAF_OPT_VERBOSE] = OPT("VERBOSE", OPT_BOOL, "0", "print the effective options and topology at start", "stable"),
	[SHEAF_OPT_DEBUG_OBJECTS] = OPT("DEBUG_OBJECTS", OPT_BOOL, "1", "the debug-objects tracker (sheaf_debug.h) is active when the program uses it; 0 turns every hook into a no-op", "stable"),
	[SHEAF_OPT_REAP_MS] = OPTL("REAP_MS", SHEAF_REAP_MS_DEFAULT, 0, 3600000, "period of the background reaper, ms: caches idle for one period are shrunk (sheaves, barns and free pages back to the OS); 0: no reaper thread (the default in TSan builds, where a second thread stops forked children from starting threads)", "evolving"),
	[SHEAF_OPT_FREE_CHECKS] = OPT("FREE_CHECKS", OPT_BOOL, "1", "every free checks that the pointer is the start of an object and not already free (mark in the free object, docs/debugging.md); 0: only the cheaper checks of the slow paths (for comparison)", "stable"),
	[SHEAF_OPT_DEBUG_OBJECTS_POOL] = OPTC("DEBUG_OBJECTS_POOL", "batched", "batched|single", "batched | single: the tracker's record pool (single: one record at a time, for comparison only)", "testing"),
};
/* clang-format on */

/* Is @v one of the '|'-separated words of @choices? */
static bool is_choice(const char *choices, const char *v)
{
	size_t n = strlen(v);
	for (const char *c = choices; *c;) {
		const char *bar = strchr(c, '|');
		size_t k = bar ? (size_t)(bar - c) : strlen(c);
		if (k == n && !strncasecmp(c, v, n))
			return true;
		c += k + (bar ? 1 : 0);
	}
	return false;
}

/* SHEAF_SLAB_DEBUG: blocks separated by ';', each the kernel's slab_debug= letters
 * (F Z P U T A O, '-'; any case), then optionally ',' and cache names. */
static bool slab_debug_ok(const char *v)
{
	bool letters = true;
	for (; *v; v++) {
		if (*v == ';')
			letters = true;
		else if (*v == ',')
			letters = false;
		else if (letters && !strchr("FZPUTAO-", toupper((unsigned char)*v)))
			return false;
	}
	return true;
}

/* A number of 1..@max, all digits (no sign, no space, decimal): its value, or -1;
 * *@end after it. */
static long small_number(const char *v, const char **end, long max)
{
	long n = 0;
	const char *p = v;
	for (; isdigit((unsigned char)*p) && n <= max; p++)
		n = n * 10 + (*p - '0');
	*end = p;
	return p == v || n < 1 || n > max ? -1 : n;
}

/* SHEAF_FAKE_NUMA: "" (none), "N" with N in 1..SHEAF_MAX_NODES, or "N:memoryless=L"
 * where L is a list of nodes and ranges ("1,3", "1-3") of 1..N-1 (node 0 keeps its
 * memory).  Until 2026-11-29 "0" or "x" ran a one-node fake topology, and a bad
 * memoryless list was dropped with a line but the fake topology kept: neither what the
 * strict rule says (docs/options.md). */
static bool fake_numa_ok(const char *v)
{
	if (!*v)
		return true;
	const char *p;
	long n = small_number(v, &p, SHEAF_MAX_NODES);
	if (n < 0)
		return false;
	if (!*p)
		return true;
	if (strncmp(p, ":memoryless=", 12) != 0)
		return false;
	p += 12;
	for (;;) {
		long a = small_number(p, &p, n - 1), b = a;
		if (a < 0)
			return false;
		if (*p == '-') {
			b = small_number(p + 1, &p, n - 1);
			if (b < a)
				return false;
		}
		if (!*p)
			return true;
		if (*p++ != ',')
			return false;
	}
}

/* Parse @v into @o, strictly: a number must be all digits (decimal, or 0x hex), fit a
 * long and lie in [min, max]; a word must be one of the choices.  On error @o keeps
 * its value (the default, or an earlier source). */
static int parse_into(struct opt *o, const char *v)
{
	if (o->type == OPT_STR) {
		size_t n = strlen(v);
		if (n >= sizeof(o->sval) || (o->choices && !is_choice(o->choices, v)))
			return -EINVAL;
		if (o == &opts[SHEAF_OPT_SLAB_DEBUG] && !slab_debug_ok(v))
			return -EINVAL;
		if (o == &opts[SHEAF_OPT_FAKE_NUMA] && !fake_numa_ok(v))
			return -EINVAL;
		memcpy(o->sval, v, n + 1);
		for (size_t i = 0; o->choices && i < n; i++)
			o->sval[i] = (char)tolower((unsigned char)o->sval[i]);
		return 0;
	}
	if (o->type == OPT_BOOL) {
		/* An empty value is an error too: until 2026-11-29 it read as 0, so that
		 * SHEAF_FREE_CHECKS= turned the checks off without a word.  "json" is a
		 * value of SHEAF_STATS only (stored as 2). */
		if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
		    !strcasecmp(v, "on")) {
			o->lval = 1;
			return 0;
		}
		if (o == &opts[SHEAF_OPT_STATS] && !strcasecmp(v, "json")) {
			o->lval = 2;
			return 0;
		}
		if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
		    !strcasecmp(v, "off")) {
			o->lval = 0;
			return 0;
		}
		return -EINVAL;
	}
	/* No sign, no spaces: strtol would accept " -5" or "+5" and wrap "-1". */
	if (!isdigit((unsigned char)v[0]))
		return -EINVAL;
	char *end;
	int saved = errno;
	errno = 0;
	/* Decimal, or hex after "0x": a leading zero is not octal ("010" is ten). */
	bool hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
	long l = strtol(v, &end, hex ? 16 : 10);
	int e = errno;
	errno = saved;
	if (e || end == v || *end || l < o->min || l > o->max)
		return -EINVAL;
	o->lval = l;
	return 0;
}

/* One line naming the option, the value and what is accepted; the old value stays. */
/* @v (@vlen bytes, not necessarily terminated) as a report shows it: at most 48 bytes,
 * then how long it was, so that the line keeps its end within the reporter's 1 KiB
 * (a value of 500 bytes lost "accepted ... (keeping ...)" until 2026-11-29). */
static void shown(char *out, size_t cap, const char *v, size_t vlen)
{
	enum {
		SHOWN_MAX = 48
	};
	size_t n = vlen < SHOWN_MAX ? vlen : SHOWN_MAX;
	char head[SHOWN_MAX + 1];
	memcpy(head, v, n);
	head[n] = 0;
	if (vlen > SHOWN_MAX)
		sheaf_fmt(out, cap, "%s... (%zu bytes)", head, vlen);
	else
		sheaf_fmt(out, cap, "%s", head);
}

static void bad_value(const char *src, const struct opt *o, const char *v, size_t vlen)
{
	char what[96], val[256], kept[256]; /* shown(): 48 bytes, 4 each escaped */
	/* Too long is said as such: a SHEAF_SLAB_DEBUG naming many caches was told its
	 * letters were wrong (until 2026-11-29). */
	if (o->type == OPT_STR && vlen >= sizeof(o->sval))
		sheaf_fmt(what, sizeof(what), "at most %zu bytes", sizeof(o->sval) - 1);
	else if (o->type == OPT_LONG)
		sheaf_fmt(what, sizeof(what), "an integer in %ld..%ld", o->min, o->max);
	else if (o->type == OPT_BOOL)
		sheaf_fmt(what, sizeof(what), "%s",
			  o == &opts[SHEAF_OPT_STATS] ? "0, 1 or json" : "0 or 1");
	else if (o->choices)
		sheaf_fmt(what, sizeof(what), "one of %s", o->choices);
	else if (o == &opts[SHEAF_OPT_SLAB_DEBUG])
		sheaf_fmt(what, sizeof(what),
			  "letters of F Z P U T A O -, then ',' and cache names");
	else if (o == &opts[SHEAF_OPT_FAKE_NUMA])
		sheaf_fmt(what, sizeof(what),
			  "N of 1..%d, then optionally ':memoryless=' nodes of 1..N-1",
			  SHEAF_MAX_NODES);
	else
		sheaf_fmt(what, sizeof(what), "at most %zu bytes", sizeof(o->sval) - 1);
	/* The value kept is the one in effect (an earlier source's, or the default). */
	if (o->type == OPT_BOOL && o->lval == 2)
		sheaf_fmt(kept, sizeof(kept), "json");
	else if (o->type != OPT_STR)
		sheaf_fmt(kept, sizeof(kept), "%ld", o->lval);
	else if (o->sval[0])
		shown(kept, sizeof(kept), o->sval, strlen(o->sval));
	else
		sheaf_fmt(kept, sizeof(kept), "none");
	shown(val, sizeof(val), v, vlen);
	sheaf_os_print("sheaf: %s%sSHEAF_%s='%s' ignored: accepted %s (keeping %s)", src ? src : "",
		       src ? ": " : "", o->name, val, what, kept);
}

static struct opt *find_exact(const char *name)
{
	for (int i = 0; i < SHEAF_OPT_NR; i++)
		if (!strcasecmp(opts[i].name, name))
			return &opts[i];
	return NULL;
}

/* An option by its name with or without the SHEAF_ prefix ("SHEAF_SHEAF_CAPACITY",
 * "SHEAF_CAPACITY", "sheaf_capacity"), alike in SHEAF_OPTIONS and sheaf_option_set. */
static struct opt *find(const char *name)
{
	struct opt *o = find_exact(name);
	if (!o && !strncasecmp(name, "SHEAF_", 6))
		o = find_exact(name + 6);
	return o;
}

/* An option by a name of @nlen bytes, not terminated (a SHEAF_OPTIONS entry's), copied
 * into @nbuf (64 bytes; cut to 63, which no option's name reaches) for a report. */
static struct opt *find_n(const char *name, size_t nlen, char *nbuf)
{
	size_t n = SHEAF_MIN(nlen, (size_t)63);
	memcpy(nbuf, name, n);
	nbuf[n] = 0;
	return n == nlen ? find(nbuf) : NULL;
}

/* One SHEAF_OPTIONS entry for @o: its value @v of @vlen bytes, not terminated.  Read in
 * place, with no copy of the whole string: until 2026-11-29 a SHEAF_OPTIONS past its
 * 1,023rd byte was cut off without a word and the cut value applied. */
static void apply_entry(struct opt *o, const char *v, size_t vlen)
{
	char vbuf[1024];
	if (o->set)
		return;
	if (vlen >= sizeof(vbuf)) { /* longer than any option takes: refused, never cut */
		bad_value("SHEAF_OPTIONS", o, v, vlen);
		return;
	}
	memcpy(vbuf, v, vlen);
	vbuf[vlen] = 0;
	if (parse_into(o, vbuf) != 0)
		bad_value("SHEAF_OPTIONS", o, vbuf, vlen);
}

static void apply_combined(const char *s)
{
	/* SHEAF_OPTIONS="a=1,b=2"; values may not contain ',' except FAKE_NUMA/SLAB_DEBUG,
	 * which take the rest of the string when they come last. */
	const char *p = s;
	while (*p) {
		/* The '=' of this entry, not of a later one: "verbose,stats=1" was read as
		 * an unknown option 'verbose,stats' and its stats=1 lost (until 2026-11-29). */
		size_t elen = strcspn(p, ",");
		const char *eq = memchr(p, '=', elen);
		if (!elen || !eq) { /* an empty entry (",,") is skipped, as a trailing ',' */
			char name[64];
			find_n(p, elen, name);
			if (elen)
				sheaf_os_print("sheaf: SHEAF_OPTIONS: '%s' has no value; ignored",
					       name);
			if (!p[elen])
				return;
			p += elen + 1;
			continue;
		}
		char name[64];
		struct opt *o = find_n(p, (size_t)(eq - p), name);
		const char *v = eq + 1;
		bool rest = o == &opts[SHEAF_OPT_FAKE_NUMA] || o == &opts[SHEAF_OPT_SLAB_DEBUG];
		const char *comma = rest ? NULL : strchr(v, ',');
		size_t vlen = comma ? (size_t)(comma - v) : strlen(v);
		if (o)
			apply_entry(o, v, vlen);
		else
			sheaf_os_print("sheaf: SHEAF_OPTIONS: unknown option '%s' ignored", name);
		if (!comma)
			return;
		p = comma + 1;
	}
}

/* A secure-execution process (setuid, setgid, file capabilities: AT_SECURE) ignores
 * every SHEAF_* variable, as glibc ignores its malloc tunables there: nobody may
 * weaken the checks (SHEAF_ON_ERROR=warn, SHEAF_FREE_CHECKS=0) or make a privileged
 * program write files (SHEAF_MALLOC_STATS=/path) through the environment. */
bool sheaf_options_secure(void)
{
	return getauxval(AT_SECURE) != 0;
}

static const char *env(const char *name)
{
	return sheaf_options_secure() ? NULL : getenv(name);
}

static void options_read(void)
{
	for (int i = 0; i < SHEAF_OPT_NR; i++)
		if (!opts[i].set)
			parse_into(&opts[i], opts[i].def);
	const char *comb = env("SHEAF_OPTIONS");
	if (comb)
		apply_combined(comb);
	for (int i = 0; i < SHEAF_OPT_NR; i++) {
		char var[64];
		sheaf_fmt(var, sizeof(var), "SHEAF_%s", opts[i].name);
		const char *v = env(var);
		if (v && !opts[i].set && parse_into(&opts[i], v) != 0)
			bad_value(NULL, &opts[i], v, strlen(v));
	}
}

/* Options are read once (docs/options.md), whoever asks first: until 2026-11-29 they
 * were read again by every start-up attempt and by sheaf_init after an early report had
 * read them, so that each refused value's line came again (25 times in a program that
 * retried a create 25 times under SHEAF_HEAP_GB=0).  sheaf_option_set writes its value
 * into the table itself, so nothing it sets needs a second reading. */
static pthread_once_t options_once = PTHREAD_ONCE_INIT;

void sheaf_options_init(void)
{
	pthread_once(&options_once, options_read);
}

/* error.c: the error mode, also for a report made before Sheaf initialised. */
int sheaf_options_on_error_warn(void)
{
	sheaf_options_init();
	return !strcmp(opts[SHEAF_OPT_ON_ERROR].sval, "warn");
}

long sheaf_option_long(enum sheaf_option_id id)
{
	return opts[id].lval;
}
const char *sheaf_option_str(enum sheaf_option_id id)
{
	return opts[id].sval;
}

SHEAF_API int sheaf_option_set(const char *name, const char *value)
{
	if (!name || !value)
		return -EINVAL;
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
			fprintf(f, "SHEAF_%-16s = %-10s  (%s) %s\n", o->name, o->sval, o->stability,
				o->help);
		else if (o == &opts[SHEAF_OPT_STATS] && o->lval == 2) /* stored as 2 */
			fprintf(f, "SHEAF_%-16s = %-10s  (%s) %s\n", o->name, "json", o->stability,
				o->help);
		else
			fprintf(f, "SHEAF_%-16s = %-10ld  (%s) %s\n", o->name, o->lval,
				o->stability, o->help);
	}
}
