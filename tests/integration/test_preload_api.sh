#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_api.sh - the allocation contracts through the names that
# libsheaf-malloc.so exports (C: src/malloc/preload/preload_check.c, C++:
# preload_check_cxx.cc), first without the preload (glibc must pass: this
# checks the checks), then with it; the counter must show the calls were ours.
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"

check=$BUILD/src/malloc/preload/sheaf-preload-check
checkxx=$BUILD/src/malloc/preload/sheaf-preload-check-cxx

# A library with dynamic TLS for the dlopen check: its TLS blocks are
# allocated through malloc by the dynamic loader, per thread, and freed at
# thread exit and dlclose.
cat >"$WORK/tlsdemo.c" <<'C'
__thread char demo_buf[8192];
void *sheaf_demo_tls_touch(unsigned long n);
void *sheaf_demo_tls_touch(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		demo_buf[i] = (char)i;
	return demo_buf;
}
C
cc -shared -fPIC -O1 -o "$WORK/libtlsdemo.so" "$WORK/tlsdemo.c"

# A library whose constructor allocates before libsheaf-malloc.so's own
# constructor has run (it is initialised first when listed first) and calls
# dlsym for a missing symbol, whose error message glibc allocates with calloc
# (a known pitfall of replacement mallocs: allocation before init and during dlsym).  Blocks it
# keeps are freed by the program's exit path.
cat >"$WORK/early.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void *kept[1000];
__attribute__((constructor)) static void early(void)
{
	for (int i = 0; i < 1000; i++) {
		kept[i] = malloc((size_t)(i * 53) % 5000 + 1);
		memset(kept[i], 1, 1);
	}
	if (dlsym(RTLD_NEXT, "sheaf_no_such_symbol") != NULL || dlerror() == NULL)
		abort();
	char *s = strdup("early");
	free(s);
}
__attribute__((destructor)) static void late(void)
{
	for (int i = 0; i < 1000; i++)
		free(kept[i]);
}
C
cc -shared -fPIC -O1 -o "$WORK/libearly.so" "$WORK/early.c"
for order in "$WORK/libearly.so:$LIB" "$LIB:$WORK/libearly.so"; do
	LD_PRELOAD=$order SHEAF_MALLOC_STATS=$WORK/early.txt "$check" >/dev/null ||
		{ echo "FAIL: LD_PRELOAD=$order" >&2; exit 1; }
done
grep -c '^sheaf-malloc: ' "$WORK/early.txt" | grep -qx 2
echo "early allocation and dlsym in a constructor: ok (both preload orders)"

# Built as a replacement malloc must be (glibc manual, "Replacing malloc"): initial-exec
# TLS only (STATIC_TLS, no general-dynamic TLS relocation that would call
# __tls_get_addr, which allocates) and no lazy binding (BIND_NOW).
if command -v readelf >/dev/null; then
	flags=$(readelf -d "$LIB" | sed -n 's/.*(FLAGS) *//p')
	grep -q STATIC_TLS <<<"$flags" && grep -q BIND_NOW <<<"$flags" ||
		{ echo "FAIL: $LIB flags '$flags' lack STATIC_TLS or BIND_NOW" >&2; exit 1; }
	if readelf -rW "$LIB" | grep -q DTPMOD; then
		echo "FAIL: $LIB has dynamic TLS relocations" >&2
		exit 1
	fi
	echo "ELF flags: $flags, no dynamic TLS"
fi

echo "== glibc"
"$check" "$WORK/libtlsdemo.so" | tail -n 3
"$checkxx" | tail -n 2
for mode in auto thread; do
	echo "== libsheaf-malloc.so, SHEAF_PERCPU=$mode"
	out=$(SHEAF_PERCPU=$mode preloaded "$check" "$WORK/libtlsdemo.so")
	echo "$out" | tail -n 3
	grep -q "served by sheaf-malloc" <<<"$out"
done
# The core cannot start (no heap: as under a low `ulimit -v`): one line on
# stderr, then glibc serves the small blocks and Sheaf's extents the large
# ones; every contract still holds.
out=$(SHEAF_HEAP_GB=0 preloaded "$check" "$WORK/libtlsdemo.so" 2>"$WORK/nocore.err")
echo "$out" | tail -n 1
grep -q "Sheaf could not start" "$WORK/nocore.err"
grep -q "preload-check: [0-9]* checks, 0 failed" <<<"$out"
out=$(preloaded "$checkxx")
echo "$out" | tail -n 3
grep -q "served by sheaf-malloc" <<<"$out"
require_served 100000 sheaf-preload-check
require_served 10000 sheaf-preload-check-cxx
# SHEAF_MALLOC_STATS=1 prints the line on stderr.
line=$(LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=1 /bin/true 2>&1)
echo "$line"
grep -Eq '^sheaf-malloc: [0-9]+ mallocs, [0-9]+ frees$' <<<"$line"
# A value that is neither 1 nor an absolute path is said (it prints on stderr), and one
# too long to keep is said too: both went unmentioned before.
out=$(LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=counts.txt /bin/true 2>&1)
grep -qx "sheaf: SHEAF_MALLOC_STATS='counts.txt': accepted 0, 1 or an absolute path (printing on stderr)" <<<"$out" &&
	grep -Eq '^sheaf-malloc: [0-9]+ mallocs' <<<"$out" && [ ! -e counts.txt ] ||
	{ echo "FAIL: relative SHEAF_MALLOC_STATS: $out" >&2; exit 1; }
out=$(LD_PRELOAD=$LIB SHEAF_MALLOC_STATS="/$(printf 'x%.0s' $(seq 600))" /bin/true 2>&1)
[ "$out" = "sheaf: SHEAF_MALLOC_STATS ignored: longer than 511 bytes" ] ||
	{ echo "FAIL: long SHEAF_MALLOC_STATS: $out" >&2; exit 1; }
# A file that cannot be opened is said, and the line goes to stderr (it went nowhere,
# without a word, before).
out=$(LD_PRELOAD=$LIB SHEAF_MALLOC_STATS="$WORK/no-such-dir/counts.txt" /bin/true 2>&1)
grep -qx "sheaf: SHEAF_MALLOC_STATS: cannot open the file (errno 2); the line is on stderr" <<<"$out" &&
	grep -Eq '^sheaf-malloc: [0-9]+ mallocs, [0-9]+ frees \(pid [0-9]+, true\)$' <<<"$out" ||
	{ echo "FAIL: SHEAF_MALLOC_STATS file that cannot be opened: $out" >&2; exit 1; }
# The counts are read off the statistics at exit (no counting on the calls): a parent
# that keeps 5000 blocks over a fork prints them, its child, which allocates and frees
# 300 blocks of its own and leaves the parent's alone, prints its own only.
cat >"$WORK/forkcount.c" <<'C'
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void *volatile keep[5000];
int main(void)
{
	for (int i = 0; i < 5000; i++)
		keep[i] = malloc(40 + i % 200);
	pid_t pid = fork();
	if (pid == 0) {
		for (int i = 0; i < 300; i++) {
			void *volatile p = malloc(24);
			free(p);
		}
		exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	for (int i = 0; i < 5000; i++)
		free(keep[i]);
	return 0;
}
C
cc -O1 -o "$WORK/forkcount" "$WORK/forkcount.c"
LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=$WORK/fork.txt "$WORK/forkcount"
cat "$WORK/fork.txt"
[ "$(wc -l <"$WORK/fork.txt")" -eq 2 ] || { echo "FAIL: two lines expected" >&2; exit 1; }
read -r cm cf < <(sed -n '1s/^sheaf-malloc: \([0-9]*\) mallocs, \([0-9]*\) frees.*/\1 \2/p' "$WORK/fork.txt")
read -r pm pf < <(sed -n '2s/^sheaf-malloc: \([0-9]*\) mallocs, \([0-9]*\) frees.*/\1 \2/p' "$WORK/fork.txt")
[ "$cm" -ge 300 ] && [ "$cm" -lt 1000 ] && [ "$cf" -ge 300 ] && [ "$cf" -lt 1000 ] ||
	{ echo "FAIL: the child's line counts $cm mallocs, $cf frees (300 of its own expected)" >&2; exit 1; }
[ "$pm" -ge 5000 ] && [ "$pf" -ge 5000 ] ||
	{ echo "FAIL: the parent's line counts $pm mallocs, $pf frees (5000 expected)" >&2; exit 1; }
echo "fork: the child counts its own blocks ($cm, $cf), the parent all of its own ($pm, $pf): ok"
# When the core cannot start (SHEAF_HEAP_GB=0) glibc serves the small blocks through the
# preload: they count as mallocs as their frees count as frees (until 2026-11-29 the
# parent's line said '0 mallocs, 5000 frees').
rm -f "$WORK/fallback.txt"
SHEAF_HEAP_GB=0 LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=$WORK/fallback.txt "$WORK/forkcount" 2>/dev/null
cat "$WORK/fallback.txt"
read -r cm cf < <(sed -n '1s/^sheaf-malloc: \([0-9]*\) mallocs, \([0-9]*\) frees.*/\1 \2/p' "$WORK/fallback.txt")
read -r pm pf < <(sed -n '2s/^sheaf-malloc: \([0-9]*\) mallocs, \([0-9]*\) frees.*/\1 \2/p' "$WORK/fallback.txt")
[ "$cm" -ge 300 ] && [ "$cm" -lt 1000 ] && [ "$cf" -ge 300 ] && [ "$cf" -lt 1000 ] &&
	[ "$pm" -ge 5000 ] && [ "$pf" -ge 5000 ] ||
	{ echo "FAIL: glibc fallback: child $cm mallocs, $cf frees (300 expected), parent $pm, $pf (5000 expected)" >&2; exit 1; }
echo "glibc fallback: the child counts ($cm, $cf), the parent ($pm, $pf): ok"
# The same with another thread in the parent, which made 5000 malloc/free pairs (fast
# paths only) and is still running at the fork: they are the parent's, not the child's.
# In per-thread mode its counts since its latest slow path were read neither by the
# parent before the fork nor as the child's base, and the child's line had all 5000
# (until 2026-11-29).
cat >"$WORK/forkthread.c" <<'C'
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static int ready[2], done[2];
static void *churn(void *arg)
{
	(void)arg;
	for (int i = 0; i < 5000; i++) {
		void *volatile p = malloc(64);
		free(p);
	}
	char b = 0;
	if (write(ready[1], &b, 1) != 1 || read(done[0], &b, 1) != 1)
		abort();
	return NULL;
}
int main(void)
{
	pthread_t t;
	char b = 0;
	if (pipe(ready) || pipe(done) || pthread_create(&t, NULL, churn, NULL) ||
	    read(ready[0], &b, 1) != 1)
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		for (int i = 0; i < 300; i++) {
			void *volatile p = malloc(24);
			free(p);
		}
		exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	if (write(done[1], &b, 1) != 1)
		abort();
	pthread_join(t, NULL);
	return 0;
}
C
cc -O1 -pthread -o "$WORK/forkthread" "$WORK/forkthread.c"
for mode in auto thread; do
	rm -f "$WORK/forkt.txt"
	SHEAF_PERCPU=$mode LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=$WORK/forkt.txt "$WORK/forkthread"
	read -r cm cf < <(sed -n '1s/^sheaf-malloc: \([0-9]*\) mallocs, \([0-9]*\) frees.*/\1 \2/p' "$WORK/forkt.txt")
	read -r pm pf < <(sed -n '2s/^sheaf-malloc: \([0-9]*\) mallocs, \([0-9]*\) frees.*/\1 \2/p' "$WORK/forkt.txt")
	[ "$cm" -ge 300 ] && [ "$cm" -lt 1000 ] && [ "$cf" -ge 300 ] && [ "$cf" -lt 1000 ] ||
		{ echo "FAIL: SHEAF_PERCPU=$mode: with a thread of the parent running, the child's line counts $cm mallocs, $cf frees (300 of its own expected)" >&2; exit 1; }
	[ "$pm" -ge 5000 ] && [ "$pf" -ge 5000 ] ||
		{ echo "FAIL: SHEAF_PERCPU=$mode: the parent's line counts $pm mallocs, $pf frees (5000 expected)" >&2; exit 1; }
	echo "fork with a thread running, SHEAF_PERCPU=$mode: the child counts its own ($cm, $cf), the parent its own ($pm, $pf): ok"
done
# A child that resets a class's statistics (sheaf_stats_reset on the handle
# sheaf_cache_of gives) lowers its counts below its base: they print as 0, where
# the difference wrapped to about 1.8e19 until 2026-11-30.
cat >"$WORK/forkreset.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void)
{
	/* The preload library's own calls, found where the program runs under it. */
	void *(*cache_of)(const void *) = (void *(*)(const void *))dlsym(RTLD_DEFAULT, "sheaf_cache_of");
	void (*reset)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "sheaf_stats_reset");
	if (!cache_of || !reset)
		return 2;
	for (int i = 0; i < 1000; i++)
		free(malloc(64));
	void *p = malloc(64);
	pid_t pid = fork();
	if (pid == 0) {
		reset(cache_of(p));
		exit(0);
	}
	waitpid(pid, NULL, 0);
	free(p);
	return 0;
}
C
cc -O1 -o "$WORK/forkreset" "$WORK/forkreset.c" -ldl
LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=$WORK/reset.txt "$WORK/forkreset"
read -r cm cf < <(sed -n '1s/^sheaf-malloc: \([0-9]*\) mallocs, \([0-9]*\) frees.*/\1 \2/p' "$WORK/reset.txt")
[ "$cm" -le 1000 ] && [ "$cf" -le 1000 ] ||
	{ echo "FAIL: a child that reset a class's statistics printed $cm mallocs, $cf frees" >&2; exit 1; }
echo "fork, a class's statistics reset in the child: its line counts $cm, $cf: ok"
# A small program stays single-threaded under the preload (the reaper starts
# only once the heap is 16 MiB): unshare(CLONE_NEWUSER) refuses a
# multi-threaded caller.  Checked where user namespaces work at all.
if unshare -U /bin/true 2>/dev/null; then
	LD_PRELOAD=$LIB unshare -U /bin/true ||
		{ echo "FAIL: unshare -U under the preload (a thread was started)" >&2; exit 1; }
	echo "unshare -U under the preload: ok"
else
	echo "unshare -U: user namespaces unavailable here, not checked"
fi
# Installed beside libsheaf.so, and usable from there.
cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
	{ cat "$WORK/install.log"; exit 1; }
inst=$(find "$WORK/prefix" -name libsheaf-malloc.so)
[ -n "$inst" ] && [ -e "$(dirname "$inst")/libsheaf.so" ] ||
	{ echo "FAIL: libsheaf-malloc.so not installed beside libsheaf.so" >&2; exit 1; }
echo "installed: ${inst#"$WORK/prefix/"}"
LD_PRELOAD=$inst SHEAF_MALLOC_STATS=$WORK/installed.txt sort </dev/null
grep -E '^sheaf-malloc: [1-9][0-9]* mallocs, [0-9]+ frees \(pid [0-9]+, sort\)$' "$WORK/installed.txt"
echo "PASS"
