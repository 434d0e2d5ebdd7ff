#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# prev-ratios.sh - the working tree's library against an earlier revision's, as the median
# over several processes of the per-process ratios (docs/benchmarks.md, 2026-11-28 third
# session).  Each run of sheaf-bench measures `sheaf` against `sheaf-prev` (and
# `sheaf-malloc` against `sheaf-malloc-prev`) in alternating windows of one process; one
# process is one placement of each library's memory, which alone moves some rows by
# 10-30 %, so a single run's ratio says as much about the placement as about the code.
# This script repeats the run RUNS times, each in a new process, and prints per row and
# API the median of the ratios (current / previous; below 1 is faster) and all of them.
#
# Usage: tools/prev-ratios.sh [-n RUNS] [-a ALLOCS] REV WORKLOAD
#   REV       a revision that scripts/build-prev.sh can build (it is built if needed),
#             or the path of a libsheaf.so built elsewhere (an experiment)
#   WORKLOAD  one of sheaf-bench's paired workloads: fastpath, bulk, xcpu, mix
#   -n RUNS   processes (default 5)
#   -a ALLOCS contenders (default sheaf,sheaf-prev,sheaf-malloc,sheaf-malloc-prev)
# Example: tools/prev-ratios.sh -n 6 -a sheaf,sheaf-prev b3ef5ca xcpu
# Timings: run it on a quiet machine; xcpu takes about 40 s a run, fastpath about 5.
set -euo pipefail
runs=5
allocs=sheaf,sheaf-prev,sheaf-malloc,sheaf-malloc-prev
while getopts "n:a:" opt; do
	case $opt in
	n) runs=$OPTARG ;;
	a) allocs=$OPTARG ;;
	*) echo "usage: $0 [-n RUNS] [-a ALLOCS] REV WORKLOAD" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ $# -eq 2 ]] || { echo "usage: $0 [-n RUNS] [-a ALLOCS] REV WORKLOAD" >&2; exit 2; }
rev=$1 workload=$2
[[ $runs =~ ^[0-9]+$ && $runs -ge 1 && $runs -le 100 ]] || { echo "prev-ratios: RUNS must be 1..100" >&2; exit 2; }
case $workload in fastpath | bulk | xcpu | mix) ;; *) echo "prev-ratios: WORKLOAD must be fastpath, bulk, xcpu or mix" >&2; exit 2 ;; esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=$root/build/release/bench/sheaf-bench
[[ -x $bench ]] || { echo "prev-ratios: no $bench (cmake --preset release && cmake --build --preset release)" >&2; exit 2; }
# REV may also be the path of a built libsheaf.so (an experiment's build tree).
if [[ -f $rev ]]; then
	lib=$rev
else
	lib=$("$root/scripts/build-prev.sh" "$rev" | head -n 1)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((i = 1; i <= runs; i++)); do
	if ! "$bench" --only="$workload" --allocs="$allocs" --prev-lib="$lib" --no-plots \
		--out="$tmp/run$i" >"$tmp/log$i" 2>&1; then
		echo "prev-ratios: run $i failed:" >&2
		tail -5 "$tmp/log$i" >&2
		exit 1
	fi
	printf 'run %d/%d done\n' "$i" "$runs" >&2
done
# results.csv: workload,variant,topology,contender,unit,headline_stat,headline,...
for f in "$tmp"/run*/results.csv; do
	awk -F, -v w="$workload" '$1 == w && $3 == "real" { h[$2 "," $4] = $7 }
		END {
			for (k in h) {
				split(k, p, ",")
				if (p[2] != "sheaf" && p[2] != "sheaf-malloc") continue
				prev = h[p[1] "," p[2] "-prev"]
				if (prev > 0) printf "%s %s %.3f\n", p[1], p[2], h[k] / prev
			}
		}' "$f"
done | sort -k1,1 -k2,2 -k3,3n | awk '
	{ key = $1 " " $2; r[key, ++n[key]] = $3; if (!(key in seen)) { seen[key] = 1; order[++nk] = key } }
	END {
		printf "%-16s %-14s %5s %8s  %s\n", "row", "api", "runs", "median", "ratios (current / previous)"
		for (i = 1; i <= nk; i++) {
			k = order[i]; m = n[k]
			med = (m % 2) ? r[k, (m + 1) / 2] : (r[k, m / 2] + r[k, m / 2 + 1]) / 2
			all = ""
			for (j = 1; j <= m; j++) all = all " " r[k, j]
			split(k, p, " ")
			printf "%-16s %-14s %5d %8.3f %s\n", p[1], p[2], m, med, all
		}
	}'
