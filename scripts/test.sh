#!/usr/bin/env bash
# test.sh - install what is missing, then build and run every test under each
# configuration of the CI matrix (CMakePresets.json):
#
#   run       preset   what
#   release   release  optimised gcc build (the benchmarked one)
#   thread    release  the whole suite again with SHEAF_PERCPU=thread (per-thread sheaves)
#   norseq    release  the whole suite again with GLIBC_TUNABLES=glibc.pthread.rseq=0
#                      (glibc registers no rseq area: per-thread mode chosen by itself,
#                      as under Valgrind and on architectures without rseq)
#   asan      asan     AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan      tsan     ThreadSanitizer (deadlock detector on, except in tests that fork:
#                      tests/CMakeLists.txt says why)
#   debug     debug    SHEAF_DEBUG=2: internal asserts, invariant walkers and the lock
#                      witness (docs/locking.md), which aborts on any out-of-order lock
#   clang     clang    release built with clang (warnings are errors, as everywhere)
#   fuzz      fuzz     the libFuzzer targets (clang, ASan+UBSan), each run for
#                      SHEAF_FUZZ_SECONDS (tests/fuzz, docs/testing.md)
#
# After the release run passes (and when no ctest arguments chose a subset), the Debian
# package is built, installed and used by examples/cmake-consumer (issue 19), counted
# as one test.
#
# thread and norseq reuse the release build.  A run fails if its configure, build or
# any test fails, or if it ran no test at all.
#
# Usage: scripts/test.sh [ctest arguments...]     e.g. scripts/test.sh -R unit/
# Environment:
#   SHEAF_TEST_RUNS     runs, in order (default "release thread norseq asan tsan debug
#                       clang fuzz"); SHEAF_TEST_PRESETS is accepted as the old name
#   SHEAF_JOBS          parallel build jobs and tests (default 2: the CI machine)
# Budget: the whole matrix in under 20 minutes on the 2-CPU CI machine (each run's
# time and slowest tests are printed; over budget prints a warning).
# Logs: build/logs/<run>-{configure,build,test}.log, build/logs/package.log
set -uo pipefail

# ---- Sanitizer run-time options (one place; exported only for their run) ----
# Leak checking is on: a test that leaks malloc'd memory fails.  Slab memory
# comes from mmap, which LeakSanitizer does not track, so the objects that
# sheaf_cache_destroy deliberately keeps do not count.
ASAN_RUN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:abort_on_error=0"
UBSAN_RUN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# halt_on_error: the first race fails the test with its report on top of the log.
# detect_deadlocks=1: TSan's lock-order detector is on.  It tracks at most 64 locks
# held by one thread, and Sheaf's fork handlers hold every lock of every cache across
# fork(), which trips its internal CHECK: tests that fork get detect_deadlocks=0 from
# tests/CMakeLists.txt (their .env may also set it).  The lock order itself is checked
# everywhere by the witness of the debug run.
TSAN_RUN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:detect_deadlocks=1"

RUNS=${SHEAF_TEST_RUNS:-${SHEAF_TEST_PRESETS:-release thread norseq asan tsan debug clang fuzz}}
JOBS=${SHEAF_JOBS:-2}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# run name -> preset and extra environment
run_preset() {
	case $1 in
	thread | norseq) echo release ;;
	*) echo "$1" ;;
	esac
}
run_env() {
	case $1 in
	thread) echo "SHEAF_PERCPU=thread" ;;
	norseq) echo "GLIBC_TUNABLES=glibc.pthread.rseq=0" ;;
	asan | fuzz) echo "ASAN_OPTIONS=$ASAN_RUN_OPTIONS UBSAN_OPTIONS=$UBSAN_RUN_OPTIONS" ;;
	tsan) echo "TSAN_OPTIONS=$TSAN_RUN_OPTIONS" ;;
	esac
}

echo "== Sheaf tests: runs [$RUNS], $JOBS jobs; $(nproc) CPUs, $(uname -sr)"
if ! scripts/setup.sh; then
	echo "test.sh: scripts/setup.sh failed; cannot build" >&2
	exit 1
fi

known=$(cmake --list-presets=configure 2>/dev/null | sed -n 's/^ *"\([^"]*\)".*/\1/p')
mkdir -p build/logs
total_pass=0 total_fail=0 bad=()
summary=()
built=" "
t_all=$SECONDS

for r in $RUNS; do
	t0=$SECONDS
	p=$(run_preset "$r")
	status=ok detail=""
	rm -f "build/logs/$r-configure.log" "build/logs/$r-build.log" "build/logs/$r-test.log"
	if ! grep -qx "$p" <<<"$known"; then
		status=FAIL detail="no such preset '$p' (have: $(echo $known))"
	elif [[ $built != *" $p "* ]]; then
		echo
		echo "== [$r] configure (preset $p)"
		if ! cmake --preset "$p" >"build/logs/$r-configure.log" 2>&1; then
			tail -n 40 "build/logs/$r-configure.log"
			status=FAIL detail="configure failed (build/logs/$r-configure.log)"
		else
			echo "== [$r] build"
			if ! cmake --build --preset "$p" -j "$JOBS" >"build/logs/$r-build.log" 2>&1; then
				# Ninja stops at the first failing step, so its error is at the end.
				tail -n 60 "build/logs/$r-build.log"
				status=FAIL detail="build failed (build/logs/$r-build.log)"
			else
				built="$built$p "
			fi
		fi
	fi
	if [ $status = ok ]; then
		read -r -a env_run <<<"$(run_env "$r")"
		echo "== [$r] ctest${env_run:+ with ${env_run[*]}}"
		env ${env_run[@]+"${env_run[@]}"} ctest --preset "$p" -j "$JOBS" --output-on-failure \
			--no-tests=error "$@" 2>&1 | tee "build/logs/$r-test.log"
		rc=${PIPESTATUS[0]}
		# ctest closes with "NN% tests passed, F tests failed out of N".
		line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' \
			"build/logs/$r-test.log" | tail -n 1)
		n=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
		f=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
		n=${n:-0} f=${f:-0}
		total_pass=$((total_pass + n - f)) total_fail=$((total_fail + f))
		if [ "$n" -eq 0 ]; then
			status=FAIL detail="ran no test"
		elif [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
			# ctest lists them as "<tab>  N - kind/name (Failed)".
			names=$(sed -n '/^The following tests FAILED:/,$s/^[[:space:]]*[0-9]* - \([^ ]*\).*/\1/p' \
				"build/logs/$r-test.log" | tr '\n' ' ')
			status=FAIL detail="$f of $n tests failed (ctest exit $rc): $names"
		else
			detail="$n tests passed"
		fi
	fi
	if [ -f "build/logs/$r-test.log" ]; then
		# The time budget goes here first.
		slow=$(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' \
			"build/logs/$r-test.log" | sort -rn | head -n 3 | awk '{printf "%s %.0fs, ", $2, $1}')
		[ -z "$slow" ] || echo "== [$r] slowest: ${slow%, }"
	fi
	dt=$((SECONDS - t0))
	echo "== [$r] $status: $detail ($(fmt_time $dt))"
	summary+=("$(printf '%-8s %-8s %-4s %-8s %s' "$r" "$p" "$status" "$(fmt_time $dt)" "$detail")")
	[ $status = ok ] || bad+=("$r")
done

# The Debian package (issue 19): cpack from the release tree, installed (dpkg -i as
# root, else unpacked) and used by examples/cmake-consumer; one step, counted as one
# test.  Skipped when the release preset did not pass or ctest arguments chose a subset.
if [[ " $RUNS " == *" release "* && " ${bad[*]:-} " != *" release "* && $# -eq 0 ]]; then
	t0=$SECONDS
	echo
	echo "== [package] cpack -G DEB, install it, build examples/cmake-consumer against it"
	if scripts/test-package.sh build/release >build/logs/package.log 2>&1; then
		status=ok total_pass=$((total_pass + 1))
	else
		grep -v '^ok ' build/logs/package.log | tail -n 30
		status=FAIL total_fail=$((total_fail + 1)) bad+=(package)
	fi
	detail=$(grep '^# [0-9]* checks' build/logs/package.log | tail -n 1)
	echo "== [package] $status: $detail ($(fmt_time $((SECONDS - t0))))"
	summary+=("$(printf '%-8s %-8s %-4s %-8s %s' package - "$status" "$(fmt_time $((SECONDS - t0)))" "$detail (build/logs/package.log)")")
fi

echo
echo "== Summary (run, preset, status, time)"
printf '%s\n' "${summary[@]}"
echo "elapsed: $(fmt_time $((SECONDS - t_all)))"
if [ $((SECONDS - t_all)) -gt 1200 ]; then
	echo "WARNING: over the 20-minute budget for this run (CI allows 25 minutes)"
fi
if [ ${#bad[@]} -ne 0 ]; then
	echo "FAILED runs: ${bad[*]}"
fi
# The plain closing line CI reads, summed over the runs.
echo "total: $total_pass passed, $total_fail failed"
[ ${#bad[@]} -eq 0 ]
