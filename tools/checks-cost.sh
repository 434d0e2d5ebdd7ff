#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# checks-cost.sh - what the free checks cost (issue 15), as the median over several
# processes: each run of sheaf-bench measures sheaf-checks against sheaf-nochecks and
# sheaf-malloc-checks against sheaf-malloc-nochecks (private copies of the library,
# loaded the same way, with SHEAF_FREE_CHECKS 1 and 0) in the fast-path pair and
# batch100 rows, in interleaved windows of one process (docs/benchmarks.md "The cost of
# the free checks").  One process is not enough: two instances of the same library with
# the same settings in one process differ by a factor that is stable within the process
# but changes from process to process (0.5x-1.9x at batch100/256 through malloc on the
# 2-vCPU VM, docs/benchmarks.md, 2026-11-25), so a single run's ratio says more about
# where that run's memory landed than about the checks.  This script runs the
# comparison RUNS times, each in a new process, and prints, per row and API, the
# median of the per-run ratios (checks on / checks off), its range, and how many runs
# were within 5 %; then each variant's median over the runs and their ratio (the two
# instances' placements are independent draws, so this is the steadier figure).
#
# Usage: tools/checks-cost.sh [RUNS] [SHEAF-BENCH]
#   RUNS defaults to 11; SHEAF-BENCH to build/release/bench/sheaf-bench.
# Timings: run it on a quiet machine (each run takes a few seconds).
set -euo pipefail
runs=${1:-11}
bench=${2:-build/release/bench/sheaf-bench}
[[ $runs =~ ^[0-9]+$ && $runs -ge 1 && $runs -le 1000 ]] || { echo "checks-cost: RUNS must be 1..1000" >&2; exit 2; }
[[ -x $bench ]] || { echo "checks-cost: no such program: $bench (build the release preset)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((i = 1; i <= runs; i++)); do
	if ! "$bench" --only=fastpath --allocs=sheaf-checks,sheaf-nochecks,sheaf-malloc-checks,sheaf-malloc-nochecks \
		--no-plots --out="$tmp/run$i" >"$tmp/log$i" 2>&1; then
		echo "checks-cost: run $i failed:" >&2
		tail -5 "$tmp/log$i" >&2
		exit 1
	fi
	printf 'run %d/%d done\n' "$i" "$runs" >&2
done
# results.csv: workload,variant,topology,contender,unit,headline_stat,headline,...
for f in "$tmp"/run*/results.csv; do
	awk -F, '$1 == "fastpath" && $3 == "real" { h[$2 "," $4] = $7 }
		END {
			for (k in h) {
				split(k, p, ",")
				if (p[2] == "sheaf-checks" || p[2] == "sheaf-malloc-checks") {
					off = h[p[1] "," substr(p[2], 1, length(p[2]) - 7) "-nochecks"]
					if (off > 0) printf "%s %s %.4f\n", p[1], p[2], h[k] / off
				}
			}
		}' "$f"
done | sort -k1,1 -k2,2 -k3,3n | awk '
	{ key = $1 " " $2; r[key, ++n[key]] = $3; if (!(key in seen)) { seen[key] = 1; order[++nk] = key } }
	END {
		printf "%-14s %-19s %5s %8s %17s %8s\n", "row", "api", "runs", "median", "range", "<=1.05"
		for (i = 1; i <= nk; i++) {
			k = order[i]; m = n[k]
			med = (m % 2) ? r[k, (m + 1) / 2] : (r[k, m / 2] + r[k, m / 2 + 1]) / 2
			ok = 0
			for (j = 1; j <= m; j++) if (r[k, j] <= 1.05) ok++
			split(k, p, " ")
			printf "%-14s %-19s %5d %8.3f %8.3f-%-8.3f %5d/%d\n", p[1], p[2], m, med, r[k, 1], r[k, m], ok, m
		}
	}'
echo
for f in "$tmp"/run*/results.csv; do
	awk -F, '$1 == "fastpath" && $3 == "real" && ($4 ~ /^sheaf(-malloc)?-(no)?checks$/) { print $2, $4, $7 }' "$f"
done | sort -k1,1 -k2,2 -k3,3n | awk '
	{ key = $1 " " $2; r[key, ++n[key]] = $3 }
	END {
		for (k in n) {
			m = n[k]
			med[k] = (m % 2) ? r[k, (m + 1) / 2] : (r[k, m / 2] + r[k, m / 2 + 1]) / 2
		}
		printf "%-14s %-19s %12s %12s %8s\n", "row", "api", "median on", "median off", "ratio"
		for (k in med) {
			split(k, p, " ")
			if (p[2] ~ /-nochecks$/) continue
			off = p[1] " " substr(p[2], 1, length(p[2]) - 7) "-nochecks"
			if (off in med)
				printf "%-14s %-19s %9.3f ns %9.3f ns %8.3f\n", p[1], p[2], med[k], med[off], med[k] / med[off]
		}
	}' | { IFS= read -r head; echo "$head"; sort; }
