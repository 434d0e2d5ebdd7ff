#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# malloc-callgrind.sh - instructions per operation of the preload library against
# other mallocs, counted with callgrind (issue 17).  Counts are not timings: they are
# valid on a loaded machine.
#
# Usage: tools/malloc-callgrind.sh LIBSHEAF-MALLOC.so [OTHER.so ...]
#   e.g. tools/malloc-callgrind.sh build/release/src/malloc/preload/libsheaf-malloc.so \
#            /usr/lib/x86_64-linux-gnu/libmimalloc.so.2
#
# For each library and shape of tools/malloc-ops.c it runs the loop twice (N1 and N2
# repetitions) and prints (Ir(N2) - Ir(N1)) / (N2 - N1): start-up and exit cancel out,
# the loop's own few instructions stay in.  Under Valgrind glibc registers no rseq
# area, so Sheaf runs in its per-thread mode (docs/percpu.md): this counts that path,
# not the per-CPU one; tools/fastpath-golden.sh counts the per-CPU path statically.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 LIB.so [LIB.so ...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "malloc-callgrind: valgrind not found" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${CC:-cc} -O2 -o "$tmp/malloc-ops" "$here/malloc-ops.c"

ir() { # lib shape n
	valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=/dev/null \
		env LD_PRELOAD="$1" "$tmp/malloc-ops" "$2" "$3" 2>&1 |
		awk '/Collected :/ { v = $4 } END { print v }'
}

printf '%-12s' shape
for lib in "$@"; do printf ' %14s' "$(basename "$lib" | cut -c1-14)"; done
printf '\n'
for shape in pair calloc realloc batch; do
	if [[ $shape == batch ]]; then n1=200 n2=1200; else n1=20000 n2=120000; fi
	printf '%-12s' "$shape"
	for lib in "$@"; do
		a=$(ir "$lib" $shape $n1)
		b=$(ir "$lib" $shape $n2)
		printf ' %14d' $(((b - a) / (n2 - n1)))
	done
	printf '\n'
done
