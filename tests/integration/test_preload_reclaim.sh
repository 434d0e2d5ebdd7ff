#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_reclaim.sh - under a limit, memory a program has freed serves its next
# allocation at once: an allocation that the kernel refuses (ENOMEM) first gives back
# what Sheaf keeps for reuse and tries again (malloc/malloc.c sheaf_malloc_reclaim).
# Three cases of tests/integration/rlimit_reclaim.c, each run under glibc too (the
# behaviour asked of Sheaf is glibc's):
#   - small blocks freed, then large ones under `ulimit -v` (the freed slab pages
#     waited for their decay, SHEAF_PURGE_MS: 245 of 277 blocks of 1 MiB fitted);
#   - large blocks freed (kept in the extent cache), then a limit set at run time, then
#     small blocks (the small path never gave the cache back: 146,000 of 885,000);
#   - the same under `ulimit -d` (RLIMIT_DATA was not taken for a limit: 737,000).
# Each case fails with the library of 3df49b1.
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"

cc -O2 -o "$WORK/rlimit_reclaim" "$SRC/tests/integration/rlimit_reclaim.c"
fail=0

# case, limit (a ulimit option and value, or none), then the command
check() {
	local what=$1 lim=$2 out rc
	shift 2
	set +e
	if [ "$lim" = none ]; then
		# Bounded by the program itself: 200 MiB and what it keeps of them.
		out=$(timeout 120 "$@" 2>&1)
	else
		out=$(ulimit $lim && timeout 120 "$@" 2>&1)
	fi
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		echo "ok: $what: $out"
	else
		echo "FAIL: $what (exit $rc): $out" >&2
		fail=1
	fi
}

for c in "small-then-large|-v 300000" "large-then-small|none" "data-large-then-small|-d 300000"; do
	case=${c%%|*}
	lim=${c#*|}
	check "glibc $case" "$lim" "$WORK/rlimit_reclaim" "$case"
	check "sheaf $case" "$lim" env LD_PRELOAD="$LIB" SHEAF_MALLOC_STATS="$STATS" \
		"$WORK/rlimit_reclaim" "$case"
done
# The extent case tests something only if Sheaf kept the large blocks.
if [ "$fail" -eq 0 ]; then
	kept=$(preloaded "$WORK/rlimit_reclaim" large-then-small | sed -n 's/^kept \([0-9]*\) KiB.*/\1/p')
	if [ "${kept:-0}" -lt 32768 ]; then
		echo "FAIL: Sheaf kept ${kept:-0} KiB of 200 MiB of freed large blocks: the case tests nothing" >&2
		fail=1
	fi
fi
[ "$fail" -eq 0 ] || exit 1
require_served 1000 rlimit_reclaim
echo "PASS"
