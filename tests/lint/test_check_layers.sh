#!/usr/bin/env bash
# test_check_layers.sh - the layer order of src/ holds (tools/check-layers.py), and
# the checker itself fails on the mistakes it exists for: an upward include, a
# lower layer's private header, a source file outside the layer folders.
# Usage: test_check_layers.sh BUILD_DIR SOURCE_DIR
set -u
src=${2:?source dir}
check="$src/tools/check-layers.py"
fail=0

echo "== the tree"
python3 "$check" "$src" || fail=1

work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT

# expect_failure NAME FILE PATTERN: the checker must exit 1 and name FILE with PATTERN.
expect_failure() {
	local name=$1 file=$2 pattern=$3 out rc
	out=$(python3 "$check" "$work/t" 2>&1)
	rc=$?
	if [ $rc -ne 1 ] || ! grep -q -- "$file.*$pattern" <<<"$out"; then
		echo "FAIL ($name): exit $rc, expected 1 naming $file ($pattern); output:"
		echo "$out"
		fail=1
	else
		echo "ok ($name): $(grep -m1 -- "$file" <<<"$out")"
	fi
}

fresh_copy() {
	rm -rf "$work/t"
	mkdir -p "$work/t"
	cp -r "$src/src" "$src/include" "$work/t/"
}

echo "== an upward include: the page provider includes the malloc front end"
fresh_copy
sed -i '0,/^#include "page\/page.h"/s//#include "page\/page.h"\n#include "malloc\/malloc.h"/' "$work/t/src/page/page.c"
expect_failure upward src/page/page.c 'includes layer malloc/'

echo "== a lower layer's private header"
fresh_copy
printf '#include "percpu/rseq.h"\n' >>"$work/t/src/cache/stats.c"
expect_failure private src/cache/stats.c 'private header of layer percpu/'

echo "== a source file outside the layers"
fresh_copy
printf '/* stray */\n' >"$work/t/src/stray.c"
expect_failure stray src/stray.c 'outside every layer folder'

echo "== the unchanged copy passes"
fresh_copy
python3 "$check" "$work/t" >/dev/null || { echo "FAIL: a clean copy does not pass"; fail=1; }

exit $fail
