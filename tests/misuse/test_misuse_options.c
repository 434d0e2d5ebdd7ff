/* SPDX-License-Identifier: MIT */
/*
 * test_misuse_options.c - every SHEAF_* option is parsed strictly: garbage, overflow
 * and out-of-range values are refused with one line naming the option, the value and
 * what is accepted, and the default (or earlier source) is kept.  Each case runs in a
 * child that sets the variable before Sheaf starts (options are read once).
 */
#include "harness.h"
#include "cache/cache.h"

#include <sheaf.h>

struct opt_case {
	const char *var, *value;
	enum sheaf_option_id id;
	long want;            /* effective value afterwards (OPT_LONG/BOOL) */
	const char *want_str; /* or string value */
	const char *msg;      /* expected in the one line; NULL: no line at all */
};

/* 300 bytes of cache names (a value that is well formed, only too long). */
#define NAMES10  "n1,n2,n3,n"
#define NAMES100 NAMES10 NAMES10 NAMES10 NAMES10 NAMES10 NAMES10 NAMES10 NAMES10 NAMES10 NAMES10

static const struct opt_case cases[] = {
	{ "SHEAF_SHEAF_CAPACITY", "4294967297", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL,
	  "SHEAF_SHEAF_CAPACITY='4294967297' ignored: accepted an integer in 0..4096 (keeping 0)" },
	{ "SHEAF_SHEAF_CAPACITY", "1073741824", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL, "in 0..4096" },
	{ "SHEAF_SHEAF_CAPACITY", "99999999999999999999999", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL,
	  "in 0..4096" },
	{ "SHEAF_SHEAF_CAPACITY", "12abc", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL, "'12abc' ignored" },
	{ "SHEAF_SHEAF_CAPACITY", "-1", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL, "'-1' ignored" },
	{ "SHEAF_SHEAF_CAPACITY", " 5", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL, "' 5' ignored" },
	{ "SHEAF_SHEAF_CAPACITY", "", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL,
	  "SHEAF_SHEAF_CAPACITY='' ignored" },
	{ "SHEAF_SHEAF_CAPACITY", "0x20", SHEAF_OPT_SHEAF_CAPACITY, 32, NULL, NULL },
	/* A leading zero is decimal (docs/options.md), not octal: 8 until 2026-11-28. */
	{ "SHEAF_SHEAF_CAPACITY", "010", SHEAF_OPT_SHEAF_CAPACITY, 10, NULL, NULL },
	{ "SHEAF_SHEAF_CAPACITY", "08", SHEAF_OPT_SHEAF_CAPACITY, 8, NULL, NULL },
	{ "SHEAF_SHEAF_CAPACITY", "4096", SHEAF_OPT_SHEAF_CAPACITY, 4096, NULL, NULL },
	{ "SHEAF_HEAP_GB", "18446744073709551617", SHEAF_OPT_HEAP_GB, 64, NULL,
	  "SHEAF_HEAP_GB='18446744073709551617' ignored: accepted an integer in 0..65536 (keeping 64)" },
	{ "SHEAF_PURGE_ORDER", "99", SHEAF_OPT_PURGE_ORDER, 4, NULL, "in 0..9" },
	{ "SHEAF_PURGE_MS", "3600001", SHEAF_OPT_PURGE_MS, 1000, NULL,
	  "SHEAF_PURGE_MS='3600001' ignored: accepted an integer in 0..3600000 (keeping 1000)" },
	{ "SHEAF_PURGE_MS", "0", SHEAF_OPT_PURGE_MS, 0, NULL, NULL },
	{ "SHEAF_REAP_MS", "abc", SHEAF_OPT_REAP_MS, -1, NULL, "SHEAF_REAP_MS='abc' ignored" },
	{ "SHEAF_BARN_MAX_FULL", "4294967296", SHEAF_OPT_BARN_MAX_FULL, 0, NULL, "in 0..65536" },
	{ "SHEAF_STATS", "maybe", SHEAF_OPT_STATS, 0, NULL, "accepted 0, 1 or json" },
	{ "SHEAF_FREE_CHECKS", "2", SHEAF_OPT_FREE_CHECKS, 1, NULL,
	  "SHEAF_FREE_CHECKS='2' ignored: accepted 0 or 1" },
	{ "SHEAF_ON_ERROR", "wran", SHEAF_OPT_ON_ERROR, 0, "abort",
	  "accepted one of abort|warn (keeping abort)" },
	{ "SHEAF_ON_ERROR", "WARN", SHEAF_OPT_ON_ERROR, 0, "warn", NULL },
	{ "SHEAF_PERCPU", "fast", SHEAF_OPT_PERCPU, 0, "auto", "one of auto|rseq|thread" },
	{ "SHEAF_OPTIONS", "SHEAF_CAPACITY=70000", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL,
	  "SHEAF_OPTIONS: SHEAF_SHEAF_CAPACITY='70000' ignored" },
	/* Found silent by an adversarial run (2026-11-28): */
	{ "SHEAF_OPTIONS", "SHEAF_SHEAF_CAPACITY=9", SHEAF_OPT_SHEAF_CAPACITY, 9, NULL, NULL },
	{ "SHEAF_OPTIONS", "sheaf_capacity", SHEAF_OPT_SHEAF_CAPACITY, 0, NULL,
	  "SHEAF_OPTIONS: 'sheaf_capacity' has no value; ignored" },
	/* An entry without a value ends at its ',' (2026-11-29: "verbose,sheaf_capacity=7"
	 * was an unknown option 'verbose,sheaf_capacity', and the 7 was lost). */
	{ "SHEAF_OPTIONS", "verbose,sheaf_capacity=7", SHEAF_OPT_SHEAF_CAPACITY, 7, NULL,
	  "SHEAF_OPTIONS: 'verbose' has no value; ignored" },
	{ "SHEAF_OPTIONS", "stats=0,,sheaf_capacity=6", SHEAF_OPT_SHEAF_CAPACITY, 6, NULL, NULL },
	/* Too long is said as such (2026-11-29: "accepted letters of F Z P U ..."). */
	{ "SHEAF_SLAB_DEBUG", "F," NAMES100 NAMES100 NAMES100, SHEAF_OPT_SLAB_DEBUG, 0, "",
	  "... (302 bytes)' ignored: accepted at most 255 bytes (keeping none)" },
	{ "SHEAF_SLAB_DEBUG", "QQQ", SHEAF_OPT_SLAB_DEBUG, 0, "",
	  "SHEAF_SLAB_DEBUG='QQQ' ignored: accepted letters of F Z P U T A O -" },
	{ "SHEAF_SLAB_DEBUG", "fz,opts;P,other", SHEAF_OPT_SLAB_DEBUG, 0, "fz,opts;P,other", NULL },
	/* SHEAF_FAKE_NUMA follows the same rule (2026-11-29: "0" and "x" ran one fake node,
	 * and a bad memoryless list was dropped while the fake topology stayed). */
	{ "SHEAF_FAKE_NUMA", "2:memoryless=5", SHEAF_OPT_FAKE_NUMA, 0, "",
	  "SHEAF_FAKE_NUMA='2:memoryless=5' ignored: accepted N of 1..64, then optionally "
	  "':memoryless=' nodes of 1..N-1 (keeping none)" },
	{ "SHEAF_FAKE_NUMA", "0", SHEAF_OPT_FAKE_NUMA, 0, "", "SHEAF_FAKE_NUMA='0' ignored" },
	{ "SHEAF_FAKE_NUMA", "x", SHEAF_OPT_FAKE_NUMA, 0, "", "SHEAF_FAKE_NUMA='x' ignored" },
	{ "SHEAF_FAKE_NUMA", "65", SHEAF_OPT_FAKE_NUMA, 0, "", "SHEAF_FAKE_NUMA='65' ignored" },
	{ "SHEAF_FAKE_NUMA", "2:memoryless=0", SHEAF_OPT_FAKE_NUMA, 0, "",
	  "SHEAF_FAKE_NUMA='2:memoryless=0' ignored" },
	{ "SHEAF_FAKE_NUMA", "2:memoryless=2", SHEAF_OPT_FAKE_NUMA, 0, "",
	  "SHEAF_FAKE_NUMA='2:memoryless=2' ignored" },
	{ "SHEAF_FAKE_NUMA", "3:memoryless=", SHEAF_OPT_FAKE_NUMA, 0, "",
	  "SHEAF_FAKE_NUMA='3:memoryless=' ignored" },
	{ "SHEAF_FAKE_NUMA", "4:memoryless=3-1", SHEAF_OPT_FAKE_NUMA, 0, "",
	  "SHEAF_FAKE_NUMA='4:memoryless=3-1' ignored" },
	{ "SHEAF_FAKE_NUMA", "4:memoryless=1-2,3", SHEAF_OPT_FAKE_NUMA, 0, "4:memoryless=1-2,3",
	  NULL },
	{ "SHEAF_FAKE_NUMA", "2", SHEAF_OPT_FAKE_NUMA, 0, "2", NULL },
	/* Found by an adversarial run (2026-11-29): an empty switch read as 0, so that
	 * SHEAF_FREE_CHECKS= turned the checks off without a word; "json" was taken by
	 * every switch; the line named the default, not the value kept. */
	{ "SHEAF_FREE_CHECKS", "", SHEAF_OPT_FREE_CHECKS, 1, NULL,
	  "SHEAF_FREE_CHECKS='' ignored: accepted 0 or 1 (keeping 1)" },
	{ "SHEAF_VERBOSE", "json", SHEAF_OPT_VERBOSE, 0, NULL,
	  "SHEAF_VERBOSE='json' ignored: accepted 0 or 1 (keeping 0)" },
	{ "SHEAF_STATS", "JSON", SHEAF_OPT_STATS, 2, NULL, NULL },
	/* A long value is shown cut with its length, so that the line keeps its end (a
	 * value of 500 bytes lost it, 2026-11-29). */
	{ "SHEAF_FREE_CHECKS",
	  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
	  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
	  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
	  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
	  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
	  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
	  "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01",
	  SHEAF_OPT_FREE_CHECKS, 1, NULL,
	  "\\x01\\x01... (140 bytes)' ignored: accepted 0 or 1 (keeping 1)" },
};

/* The same with SHEAF_OPTIONS set too (an earlier source): the line names the value
 * kept, which is the earlier source's (it named the compiled default until 2026-11-29). */
static const struct two_source {
	const char *options;
	struct opt_case k;
} two_sources[] = {
	{ "sheaf_capacity=9",
	  { "SHEAF_SHEAF_CAPACITY", "bad", SHEAF_OPT_SHEAF_CAPACITY, 9, NULL,
	    "SHEAF_SHEAF_CAPACITY='bad' ignored: accepted an integer in 0..4096 (keeping 9)" } },
	{ "free_checks=0",
	  { "SHEAF_FREE_CHECKS", "", SHEAF_OPT_FREE_CHECKS, 0, NULL,
	    "SHEAF_FREE_CHECKS='' ignored: accepted 0 or 1 (keeping 0)" } },
	{ "stats=json", { "SHEAF_STATS", "2", SHEAF_OPT_STATS, 2, NULL, "(keeping json)" } },
};

static void child(void *arg)
{
	const struct opt_case *k = arg;
	for (size_t i = 0; i < sizeof(two_sources) / sizeof(two_sources[0]); i++)
		if (k == &two_sources[i].k)
			setenv("SHEAF_OPTIONS", two_sources[i].options, 1);
	setenv(k->var, k->value, 1);
	struct sheaf_cache *c = sheaf_cache_create("opts", 64, NULL);
	if (!c)
		_exit(2);
	if (k->want_str) {
		if (strcmp(sheaf_option_str(k->id), k->want_str))
			_exit(3);
	} else if (k->want >= 0 && sheaf_option_long(k->id) != k->want) {
		_exit(4);
	}
	_exit(0);
}

static void test_strict_options(void)
{
	const size_t ncases = sizeof(cases) / sizeof(cases[0]);
	const size_t ntwo = sizeof(two_sources) / sizeof(two_sources[0]);
	for (size_t i = 0; i < ncases + ntwo; i++) {
		const struct opt_case *k = i < ncases ? &cases[i] : &two_sources[i - ncases].k;
		struct th_child r;
		th_run_child(child, (void *)k, &r);
		CHECKF(r.exited && r.status == 0, "%s=%s: exit %d (3/4: value not kept): %s",
		       k->var, k->value, r.status, r.err);
		if (k->msg) {
			CHECKF(strstr(r.err, k->msg) != NULL, "%s=%s: expected '%s' in: %s", k->var,
			       k->value, k->msg, r.err);
			char *nl = strchr(r.err, '\n');
			CHECKF(nl && nl[1] == 0, "%s=%s: not one line: %s", k->var, k->value,
			       r.err);
		} else {
			CHECKF(r.err[0] == 0, "%s=%s: unexpected output: %s", k->var, k->value,
			       r.err);
		}
	}
}

/* sheaf_option_set takes the names SHEAF_OPTIONS takes, with or without the prefix
 * (SHEAF_CAPACITY was -ENOENT while SHEAF_OPTIONS took it). */
static void set_child(void *arg)
{
	(void)arg;
	if (sheaf_option_set("SHEAF_CAPACITY", "12") != 0 ||
	    sheaf_option_set("sheaf_capacity", "12") != 0 ||
	    sheaf_option_set("SHEAF_SHEAF_CAPACITY", "12") != 0 ||
	    sheaf_option_set("SHEAF_NO_SUCH", "1") != -ENOENT)
		_exit(5);
	struct sheaf_cache *c = sheaf_cache_create("opts", 64, NULL);
	if (!c || sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY) != 12)
		_exit(6);
	_exit(sheaf_option_set("SHEAF_CAPACITY", "8") == -EBUSY ? 0 : 7);
}

static void test_option_set_names(void)
{
	struct th_child r;
	th_run_child(set_child, NULL, &r);
	CHECKF(r.exited && r.status == 0, "sheaf_option_set names: exit %d: %s", r.status, r.err);
}

/* A long SHEAF_OPTIONS is read to its end (until 2026-11-29 it was cut at 1,023 bytes
 * without a word and the cut value applied: sheaf_capacity=1000 became 10); a value
 * longer than the parser takes is refused with one line, never cut. */
static void long_child(void *arg)
{
	static char buf[1200];
	size_t n = 0;
	if (arg) { /* 101 entries of padding, then the capacity: 1,029 bytes */
		for (int i = 0; i < 101; i++)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "verbose=0,");
		snprintf(buf + n, sizeof(buf) - n, "sheaf_capacity=1000");
	} else { /* a value of 1,100 digits */
		n = (size_t)snprintf(buf, sizeof(buf), "sheaf_capacity=");
		memset(buf + n, '1', 1100);
		buf[n + 1100] = 0;
	}
	setenv("SHEAF_OPTIONS", buf, 1);
	struct sheaf_cache *c = sheaf_cache_create("opts", 64, NULL);
	if (!c)
		_exit(2);
	_exit(sheaf_option_long(SHEAF_OPT_SHEAF_CAPACITY) == (arg ? 1000 : 0) ? 0 : 3);
}

static void test_options_long(void)
{
	struct th_child r;
	th_run_child(long_child, (void *)1, &r);
	CHECKF(r.exited && r.status == 0 && r.err[0] == 0,
	       "1,029-byte SHEAF_OPTIONS: exit %d (3: capacity not 1000): %s", r.status, r.err);
	th_run_child(long_child, NULL, &r);
	CHECKF(r.exited && r.status == 0, "1,100-byte value: exit %d (3: not refused): %s",
	       r.status, r.err);
	CHECKF(strstr(r.err, "SHEAF_OPTIONS: SHEAF_SHEAF_CAPACITY='1111") &&
		       strstr(r.err, "... (1100 bytes)' ignored: accepted an integer in 0..4096 "
				     "(keeping 0)") &&
		       strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
	       "1,100-byte value: expected one line, got: %s", r.err);
}

/* Options are read once: a refused value's line comes once, though a report made before
 * Sheaf started read the options, and though the start-up failed and was tried again
 * (SHEAF_HEAP_GB=0; until 2026-11-29 the line came again on each attempt). */
static void once_child(void *arg)
{
	setenv("SHEAF_STATS", "bogus", 1);
	setenv("SHEAF_ON_ERROR", "warn", 1);
	if (arg)
		setenv("SHEAF_HEAP_GB", "0", 1);
	sheaf_cache_alloc(NULL); /* reported (warn): reads the options */
	for (int i = 0; i < 3; i++)
		if (sheaf_cache_create("opts", 64, NULL))
			_exit(arg ? 2 : 0);
	_exit(arg ? 0 : 3);
}

static void test_options_read_once(void)
{
	for (int heap0 = 0; heap0 < 2; heap0++) {
		struct th_child r;
		th_run_child(once_child, heap0 ? (void *)1 : NULL, &r);
		const char *line = "SHEAF_STATS='bogus' ignored", *p = r.err;
		int n = 0;
		while ((p = strstr(p, line)) != NULL) {
			n++;
			p++;
		}
		CHECKF(r.exited && r.status == 0 && n == 1,
		       "%s: exit %d, the refused value's line %d times: %s",
		       heap0 ? "SHEAF_HEAP_GB=0, 3 creates" : "a report before start-up", r.status,
		       n, r.err);
	}
}

/* The cases expect the compiled defaults as the earlier value ('keeping 0'), and a
 * SHEAF_OPTIONS value that no variable overrides: the user's own SHEAF_* settings (say
 * SHEAF_SHEAF_CAPACITY=1, which wins over SHEAF_OPTIONS) are cleared first.  SHEAF_TEST_*
 * stay (they are the tests'). */
static void clear_user_options(void)
{
	extern char **environ;
	char name[256];
	for (size_t i = 0; environ[i];) {
		const char *eq = strchr(environ[i], '=');
		size_t n = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
		if (strncmp(environ[i], "SHEAF_", 6) || !strncmp(environ[i], "SHEAF_TEST_", 11) ||
		    n >= sizeof(name)) {
			i++;
			continue;
		}
		memcpy(name, environ[i], n);
		name[n] = 0;
		printf("# %s cleared (the cases expect the defaults)\n", name);
		unsetenv(name); /* environ[i] is now the next variable */
	}
}

int main(void)
{
	clear_user_options();
	RUN(test_strict_options);
	RUN(test_option_set_names);
	RUN(test_options_long);
	RUN(test_options_read_once);
	return th_done();
}
