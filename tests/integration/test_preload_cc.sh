#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_cc.sh - the C compiler under libsheaf-malloc.so: gcc -O2 builds
# a generated 12-file program (the driver, cc1, as, collect2 and ld all
# preloaded).  Every object file must be byte-identical to the one built on
# glibc's malloc, and the program must run and print the expected result.
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"
CC=${CC:-gcc}
command -v "$CC" >/dev/null || { echo "skipped: $CC not installed"; exit 0; }

mkdir -p "$WORK/src" "$WORK/glibc" "$WORK/sheaf"
N=12
# Each module: a struct type, a hash table, a sort, 60 generated functions
# (enough inlining and optimisation work for cc1 to allocate a lot).
for m in $(seq 1 $N); do
	{
		echo "#include <stdlib.h>"
		echo "#include <string.h>"
		echo "#include \"common.h\""
		echo "struct rec$m { long key; double val; char name[24]; struct rec$m *next; };"
		echo "static struct rec$m *tab$m[256];"
		echo "static unsigned h$m(long k) { return (unsigned)((unsigned long)k * 2654435761u >> 24) & 255; }"
		echo "static void put$m(long k, double v) { struct rec$m *r = calloc(1, sizeof(*r)); r->key = k; r->val = v; r->next = tab$m[h$m(k)]; tab$m[h$m(k)] = r; }"
		echo "static double get$m(long k) { for (struct rec$m *r = tab$m[h$m(k)]; r; r = r->next) if (r->key == k) return r->val; return 0; }"
		echo "static int cmp$m(const void *a, const void *b) { long x = *(const long *)a, y = *(const long *)b; return (x > y) - (x < y); }"
		for f in $(seq 1 60); do
			echo "static long f${m}_$f(long x) { long s = 0; for (int i = 0; i < $((f % 7 + 3)); i++) { s += (x ^ (i * $f)) % $((f + 11)); if (s & 1) s = s * 3 + $m; else s /= 2; } return s + get$m(x % 50); }"
		done
		echo "long module$m(long seed) {"
		echo "  long v[64]; for (int i = 0; i < 64; i++) { v[i] = (seed * (i + 1)) % 1000; put$m(i, (double)v[i]); }"
		echo "  qsort(v, 64, sizeof(long), cmp$m);"
		echo "  long acc = v[0] + v[63];"
		for f in $(seq 1 60); do echo "  acc += f${m}_$f(acc % 100000 + $f);"; done
		echo "  for (int b = 0; b < 256; b++) while (tab$m[b]) { struct rec$m *r = tab$m[b]; tab$m[b] = r->next; free(r); }"
		echo "  return acc % 1000003;"
		echo "}"
	} >"$WORK/src/mod$m.c"
done
{
	echo "#ifndef COMMON_H"
	echo "#define COMMON_H"
	for m in $(seq 1 $N); do echo "long module$m(long seed);"; done
	echo "#endif"
} >"$WORK/src/common.h"
{
	echo "#include <stdio.h>"
	echo "#include \"common.h\""
	echo "int main(void) { long t = 0;"
	for m in $(seq 1 $N); do echo "  t = (t * 31 + module$m(t + $m)) % 1000000007;"; done
	echo "  printf(\"result %ld\\n\", t); return 0; }"
} >"$WORK/src/main.c"

build() { # build OUTDIR [preloaded]
	local out=$1
	shift
	for f in "$WORK"/src/*.c; do
		"$@" "$CC" -O2 -Wall -c "$f" -o "$out/$(basename "$f" .c).o" &
	done
	wait
	"$@" "$CC" -O2 -o "$out/prog" "$out"/*.o
}
t0=$SECONDS
build "$WORK/glibc" env
t1=$SECONDS
build "$WORK/sheaf" env LD_PRELOAD="$LIB" SHEAF_MALLOC_STATS="$STATS"
t2=$SECONDS
echo "glibc $((t1 - t0)) s, sheaf $((t2 - t1)) s"
for o in "$WORK"/glibc/*.o; do
	if ! cmp -s "$o" "$WORK/sheaf/$(basename "$o")"; then
		echo "FAIL: $(basename "$o") differs from the glibc build" >&2
		exit 1
	fi
done
echo "$(ls "$WORK"/sheaf/*.o | wc -l) object files identical"
want=$("$WORK/glibc/prog")
got=$(preloaded "$WORK/sheaf/prog")
echo "$got"
[ "$got" = "$want" ]
require_served 50000 cc1
require_served 100 gcc
echo "PASS"
