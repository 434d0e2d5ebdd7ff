#!/usr/bin/env bash
# test_check_size.sh - no source file of src/ over 800 lines and no function over 60
# (tools/check-size.py), and the checker fails on a planted long function and a
# planted long file.
# Usage: test_check_size.sh BUILD_DIR SOURCE_DIR
set -u
src=${2:?source dir}
check="$src/tools/check-size.py"
fail=0

echo "== the tree"
python3 "$check" "$src" || fail=1

work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fresh_copy() {
	rm -rf "$work/t"
	mkdir -p "$work/t"
	cp -r "$src/src" "$work/t/"
}
expect_failure() {
	local name=$1 pattern=$2 out rc
	out=$(python3 "$check" "$work/t" 2>&1)
	rc=$?
	if [ $rc -ne 1 ] || ! grep -q -- "$pattern" <<<"$out"; then
		echo "FAIL ($name): exit $rc, expected 1 and '$pattern'; output:"
		echo "$out"
		fail=1
	else
		echo "ok ($name): $(grep -m1 -- "$pattern" <<<"$out")"
	fi
}

echo "== a function of 61 lines"
fresh_copy
{
	printf '\nint planted_long(int x);\nint planted_long(int x)\n{\n'
	for i in $(seq 1 57); do printf '\tx += %d;\n' "$i"; done
	printf '\treturn x;\n}\n'
} >>"$work/t/src/page/page.c"
expect_failure function 'src/page/page.c:.*planted_long() is 61 lines'

echo "== a file of 801 lines"
fresh_copy
for i in $(seq 1 801); do printf '/* %d */\n' "$i"; done >"$work/t/src/base/planted.h"
expect_failure file 'src/base/planted.h: 801 lines'

echo "== the unchanged copy passes"
fresh_copy
python3 "$check" "$work/t" >/dev/null || { echo "FAIL: a clean copy does not pass"; fail=1; }
exit $fail
