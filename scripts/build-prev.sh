#!/usr/bin/env bash
# build-prev.sh [REV] - build the Sheaf library of an earlier git revision, for
# the benchmark driver's previous-revision contenders (sheaf-prev,
# sheaf-malloc-prev; docs/benchmarks.md "Against the previous revision").
#
# The revision's tree is exported with `git archive` into build/prev-<rev>/src
# and configured as a plain CMake Release build (no tests, no benchmarks,
# warnings not fatal: an older tree built by a newer compiler may warn) in
# build/prev-<rev>/build.  The working tree, the index and the branches are not
# touched; build/ is ignored by git.  A finished build is reused.
#
# On success it prints two lines on stdout, the paths of the revision's
#   libsheaf.so          (the object-cache API and sheaf_malloc/sheaf_free)
#   libsheaf-malloc.so   (the LD_PRELOAD malloc)
# and everything else on stderr.  Exit status 3: the revision is not in this
# clone's history (a shallow clone); other non-zero: the build failed.
#
# REV defaults to SHEAF_PREV_REV, or else to DEFAULT_REV below: the last
# revision before the layered redesign (issue 14: src/ in one folder per
# layer, one fast path).  Change it when a later redesign is to be compared
# against its own starting point.
#
# Environment: SHEAF_JOBS  parallel build jobs (default: all CPUs)
set -euo pipefail

DEFAULT_REV=5a9f872

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
rev=${1:-${SHEAF_PREV_REV:-$DEFAULT_REV}}
JOBS=${SHEAF_JOBS:-$(nproc)}

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "build-prev.sh: $root is not a git clone: no earlier revision to build" >&2
	exit 3
fi
if ! full=$(git rev-parse --verify -q "$rev^{commit}"); then
	if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
		echo "build-prev.sh: revision $rev is not in this shallow clone's history" \
			"(git fetch --unshallow brings it)" >&2
	else
		echo "build-prev.sh: revision $rev is not in this clone's history" >&2
	fi
	exit 3
fi
short=$(git rev-parse --short=7 "$full")
dest=build/prev-$short
src=$dest/src
bld=$dest/build
lib=$bld/libsheaf.so
preload=$bld/src/preload/libsheaf-malloc.so

if [ -f "$dest/built" ] && [ "$(cat "$dest/built")" = "$full" ] && [ -e "$lib" ] &&
	[ -e "$preload" ]; then
	echo "build-prev.sh: $short already built in $dest" >&2
else
	echo "build-prev.sh: exporting $short ($(git log -1 --format=%s "$full" | cut -c1-60)...)" \
		"to $src" >&2
	rm -rf "$dest"
	mkdir -p "$src" "$bld"
	git archive --format=tar "$full" | tar -x -C "$src"
	echo "build-prev.sh: building libsheaf.so and libsheaf-malloc.so of $short (Release)" >&2
	if ! cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHEAF_WERROR=OFF \
		-DSHEAF_BUILD_TESTS=OFF -DSHEAF_BUILD_BENCH=OFF >"$dest/configure.log" 2>&1; then
		tail -n 30 "$dest/configure.log" >&2
		echo "build-prev.sh: configure of $short failed ($dest/configure.log)" >&2
		exit 1
	fi
	if ! cmake --build "$bld" -j "$JOBS" --target sheaf_shared sheaf_malloc_preload \
		>"$dest/build.log" 2>&1; then
		tail -n 40 "$dest/build.log" >&2
		echo "build-prev.sh: build of $short failed ($dest/build.log)" >&2
		exit 1
	fi
	# The preload library's place differs between revisions: find it.
	if [ ! -e "$preload" ]; then
		preload=$(find "$bld" -name 'libsheaf-malloc.so' -print -quit)
	fi
	if [ ! -e "$lib" ] || [ -z "$preload" ]; then
		echo "build-prev.sh: $short built, but libsheaf.so or libsheaf-malloc.so" \
			"is not where expected under $bld" >&2
		exit 1
	fi
	echo "$full" >"$dest/built"
fi
[ -e "$preload" ] || preload=$(find "$bld" -name 'libsheaf-malloc.so' -print -quit)
echo "$root/$lib"
echo "$root/$preload"
