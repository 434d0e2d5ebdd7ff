#!/usr/bin/env bash
# bench.sh - install what is missing, build the release preset, build the
# previous revision's library (scripts/build-prev.sh) and run the benchmark
# driver's default suite with it as a contender (issue 8, issue 14).  Arguments
# go to sheaf-bench unchanged, e.g. scripts/bench.sh --help.
#
# The previous revision is scripts/build-prev.sh's default (SHEAF_PREV_REV
# overrides it; SHEAF_PREV_REV=none leaves the comparison out).  A clone
# without that revision in its history (a shallow clone) runs without it, and
# the report says the prev contenders are absent.  An explicit --prev-lib=PATH
# argument wins: nothing is built then.
#
# Environment: SHEAF_JOBS      parallel build jobs (default: all CPUs)
#              SHEAF_PREV_REV  revision to compare with, or "none"
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
JOBS=${SHEAF_JOBS:-$(nproc)}

scripts/setup.sh || { echo "bench.sh: scripts/setup.sh failed" >&2; exit 1; }

mkdir -p build/logs
echo "== build (release preset)"
if ! cmake --preset release >build/logs/release-configure.log 2>&1; then
	tail -n 40 build/logs/release-configure.log
	echo "bench.sh: configure failed (build/logs/release-configure.log)" >&2
	exit 1
fi
# Everything, not just the driver: it also runs the preload library and helpers.
if ! cmake --build --preset release -j "$JOBS" >build/logs/release-build.log 2>&1; then
	tail -n 60 build/logs/release-build.log
	echo "bench.sh: build failed (build/logs/release-build.log)" >&2
	exit 1
fi

# Prefer the driver just built from this tree; an installed one may be older.
driver=build/release/bench/sheaf-bench
if [ ! -x "$driver" ]; then
	if command -v sheaf-bench >/dev/null 2>&1; then
		driver=$(command -v sheaf-bench)
		echo "bench.sh: $root/build/release/bench/sheaf-bench was not built;" \
			"using the installed $driver" >&2
	else
		echo "bench.sh: no benchmark driver: the release build has no" \
			"build/release/bench/sheaf-bench (target sheaf-bench, bench/CMakeLists.txt)" \
			"and none is installed on PATH" >&2
		exit 1
	fi
fi
prev=()
case " $* " in
*" --prev-lib="*) ;;
*)
	if [ "${SHEAF_PREV_REV:-}" = none ]; then
		echo "== previous revision: not compared (SHEAF_PREV_REV=none)"
	else
		echo "== previous revision (scripts/build-prev.sh${SHEAF_PREV_REV:+ $SHEAF_PREV_REV})"
		if libs=$(SHEAF_JOBS=$JOBS scripts/build-prev.sh ${SHEAF_PREV_REV:+"$SHEAF_PREV_REV"}); then
			prev=("--prev-lib=$(echo "$libs" | head -n 1)")
		else
			echo "bench.sh: no previous-revision library (see above): the run has" \
				"no sheaf-prev / sheaf-malloc-prev contenders" >&2
		fi
	fi
	;;
esac
echo "== $driver ${prev[*]} $*"
exec "$driver" "${prev[@]}" "$@"
