#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# shape-ratios.sh - one malloc shape of sheaf-bench (bench/workloads/shapes.c) run as
# interleaved child processes: each round runs Sheaf's malloc front end with the free checks
# on, the same with them off (SHEAF_FREE_CHECKS=0), an earlier revision's library and
# mimalloc, one child each, one after the other; then per contender the median time and
# per pair the median of the rounds' ratios (docs/benchmarks.md, 2026-11-29 ninth session).
# The report's shapes rows are three runs per contender, not interleaved, and this host's
# speed moves by a third between minutes: a ratio taken within a round is what survives that.
#
# Usage: tools/shape-ratios.sh [-n ROUNDS] [-r REV] SHAPE
#   SHAPE     xmalloc, large, thread, simple or larson
#   -n ROUNDS rounds (default 5)
#   -r REV    the earlier revision (default scripts/build-prev.sh's; built if needed),
#             or the path of a libsheaf.so built elsewhere
# Each child runs the shape three times and reports its median (sheaf-bench --child=...).
set -uo pipefail

rounds=5
rev=
while getopts "n:r:" o; do
	case $o in
	n) rounds=$OPTARG ;;
	r) rev=$OPTARG ;;
	*)
		echo "usage: $0 [-n ROUNDS] [-r REV] SHAPE" >&2
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 1 ]; then
	echo "usage: $0 [-n ROUNDS] [-r REV] SHAPE" >&2
	exit 2
fi
shape=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
driver=build/release/bench/sheaf-bench
if [ ! -x "$driver" ]; then
	echo "$0: no $driver (cmake --preset release && cmake --build --preset release)" >&2
	exit 1
fi
# REV may also be the path of a built libsheaf.so (an experiment's build tree).
if [[ -n $rev && -f $rev ]]; then
	prevlib=$rev
else
	prevlib=$(scripts/build-prev.sh $rev | head -n 1) || {
		echo "$0: scripts/build-prev.sh failed" >&2
		exit 1
	}
fi

# One child: its median time in ms (the "time" record's median field), or "nan".
run_child() { # contender allocator env...
	local alloc=$1
	shift
	env "$@" "$driver" --prev-lib="$prevlib" --allocs="$alloc" \
		--child="shapes:$shape:$alloc" 2>/dev/null |
		awk -F'\t' '$4 == "time" { print $12; found = 1 } END { if (!found) print "nan" }'
}

for r in $(seq "$rounds"); do
	echo "$r checks $(run_child sheaf-malloc SHEAF_FREE_CHECKS=1)"
	echo "$r nochecks $(run_child sheaf-malloc SHEAF_FREE_CHECKS=0)"
	echo "$r prev $(run_child sheaf-malloc-prev SHEAF_FREE_CHECKS=1)"
	echo "$r mimalloc $(run_child mimalloc SHEAF_FREE_CHECKS=1)"
	echo "round $r/$rounds done" >&2
done | python3 -c '
import sys, statistics
t = {}
for line in sys.stdin:
    r, who, ms = line.split()
    t.setdefault(r, {})[who] = float(ms)
who = ["checks", "nochecks", "prev", "mimalloc"]
print("%-10s %9s  %s" % ("contender", "median ms", "per round"))
for w in who:
    v = [t[r][w] for r in t if w in t[r]]
    print("%-10s %9.1f  %s" % (w, statistics.median(v), " ".join("%.1f" % x for x in v)))
print("%-18s %7s  %s" % ("ratio", "median", "per round"))
for a, b in [("checks", "nochecks"), ("checks", "prev"), ("nochecks", "prev"),
             ("checks", "mimalloc"), ("prev", "mimalloc")]:
    v = [t[r][a] / t[r][b] for r in t if a in t[r] and b in t[r] and t[r][b] > 0]
    if v:
        print("%-18s %7.3f  %s" % (a + "/" + b, statistics.median(v),
                                   " ".join("%.3f" % x for x in v)))
'
