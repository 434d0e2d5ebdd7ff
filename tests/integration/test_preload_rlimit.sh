#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_rlimit.sh - issue 16, "Done when" 1: under `ulimit -v 1048576` a
# program under the preload allocates at least 90 % of what the same program gets
# from glibc, and still starts 8 threads (before allocating, and again after it has
# freed everything).  The program is tests/integration/rlimit_workload.c; both runs
# happen here, so the comparison is against this machine's glibc.
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"
# The 90 % is a property of the default sheaf capacity: a user's SHEAF_SHEAF_CAPACITY=4096
# caches up to 4096 objects per sheaf, room the program no longer gets under the limit.
export SHEAF_SHEAF_CAPACITY=0

cc -O2 -pthread -o "$WORK/rlimit_workload" "$SRC/tests/integration/rlimit_workload.c"

run() { # label, then the command; prints the bytes allocated
	local label=$1 out
	shift
	# The limit bounds the run too: it cannot take more than 1 GiB of memory.
	if ! out=$(ulimit -v 1048576 && "$@"); then
		echo "FAIL: $label run: ${out:-no output}" >&2
		exit 1
	fi
	echo "$label: $out" >&2
	set -- $out
	[ "$1" = allocated ] && [ "$5" = threads ] && [ "$6" = 8 ] && [ "$7" = 8 ] && [ "$9" = 1 ] || {
		echo "FAIL: $label: expected 8 and 8 threads and ENOMEM at the end" >&2
		exit 1
	}
	echo "$2"
}

glibc=$(run glibc "$WORK/rlimit_workload")
sheaf=$(run sheaf preloaded "$WORK/rlimit_workload")
pct=$((sheaf * 100 / glibc))
echo "under ulimit -v 1048576: glibc $glibc bytes, Sheaf $sheaf bytes ($pct %)"
if [ "$pct" -lt 90 ]; then
	echo "FAIL: Sheaf allocated less than 90 % of glibc's bytes" >&2
	exit 1
fi
require_served 1000 rlimit_workload
echo "PASS"
