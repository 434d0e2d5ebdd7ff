#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_fork_rcu.sh - fork() in per-thread mode under the preload library while
# another thread has objects in a partly filled rcu_free sheaf: the child comes back
# and allocates (tests/integration/fork_rcu_orphan.c; it hung in every run until
# 2026-11-29).  Also run in per-CPU mode, where it always came back.
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"

cc -O2 -I"$SRC/include" -o "$WORK/fork_rcu_orphan" "$SRC/tests/integration/fork_rcu_orphan.c" \
	"$LIB" -lpthread
fail=0
for mode in thread auto; do
	set +e
	out=$(ulimit -v 4000000 && SHEAF_PERCPU=$mode LD_PRELOAD=$LIB timeout 120 "$WORK/fork_rcu_orphan" 2>&1)
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		echo "ok: SHEAF_PERCPU=$mode: $out"
	else
		echo "FAIL: SHEAF_PERCPU=$mode (exit $rc): $out" >&2
		fail=1
	fi
done
exit $fail
