#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run_fuzz.sh TARGET SECONDS SEED_CORPUS [libFuzzer options...]
# Run a libFuzzer target for SECONDS from the seed corpus, in a scratch copy (the
# repository's corpus is never written).  A crash leaves its input as crash-* in the
# current directory and fails (libFuzzer's exit status).  Used by the fuzz/<target>
# ctests and, for longer runs, by hand (docs/testing.md).
set -euo pipefail
target=$1 seconds=$2 seeds=$3
shift 3
work=$(mktemp -d /tmp/sheaf-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
# -rss_limit_mb bounds the run; the model holds at most 48 MiB of objects.
"$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -max_len=4096 \
	-print_final_stats=1 "$@" "$work" "$seeds"
