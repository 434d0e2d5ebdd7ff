# SPDX-License-Identifier: MIT
# preload_test_lib.sh - sourced by tests/integration/test_preload_*.sh.
# Usage in a test:  . "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"
# Provides: $LIB (libsheaf-malloc.so), $WORK (a temporary directory removed at
# exit), preloaded CMD... (runs CMD with the library preloaded and every
# process's call counts appended to $STATS), require_served MIN PROG (fails
# unless the processes named PROG made at least MIN allocating calls).
set -euo pipefail

BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
LIB=$BUILD/src/malloc/preload/libsheaf-malloc.so

# A sanitizer runtime intercepts malloc itself: preloading Sheaf under it would
# test the sanitizer's allocator, not ours (and ASan must be first in the
# preload list).  These tests are for the release and debug builds.
san=$(sed -n 's/^SHEAF_SANITIZE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$san" ]; then
	echo "skipped: SHEAF_SANITIZE=$san build: the sanitizer runtime replaces malloc, so the preload library cannot be tested here"
	exit 0
fi
if [ ! -f "$LIB" ]; then
	echo "FAIL: $LIB not built" >&2
	exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-preload.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STATS=$WORK/malloc-stats.txt
: >"$STATS"

preloaded() {
	LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=$STATS "$@"
}

# require_served MIN PROG: the counter lines of processes named PROG (one per
# process, "sheaf-malloc: N mallocs, M frees (pid P, PROG)") sum to >= MIN.
require_served() {
	local min=$1 prog=$2
	local sum
	sum=$(awk -v p="$prog" '$0 ~ "^sheaf-malloc: " && $NF == p")" { m += $2; f += $4; n++ }
		END { printf "%d %d %d", m, f, n }' "$STATS")
	read -r m f n <<<"$sum"
	echo "served by sheaf-malloc: $n $prog process(es), $m mallocs, $f frees"
	if [ "$n" -eq 0 ] || [ "$m" -lt "$min" ] || [ "$f" -eq 0 ]; then
		echo "FAIL: expected at least $min allocating calls by $prog under the preload" >&2
		cat "$STATS" >&2
		exit 1
	fi
}
