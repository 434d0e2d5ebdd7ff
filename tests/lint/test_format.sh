#!/usr/bin/env bash
# test_format.sh - the C sources that tools/format-clean.txt lists follow .clang-format
# (tools/check-format.sh, with the installed clang-format), and the check fails on a
# file that does not.  Arguments: build dir, source dir (tests/CMakeLists.txt).
set -u
build=${1:?build dir}
src=${2:?source dir}
check="$src/tools/check-format.sh"
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); echo "not ok $n - $1"; fails=$((fails + 1)); }

if out=$("$check" 2>&1); then
	ok "formatted set: ${out##*$'\n'}"
else
	echo "$out" | sed 's/^/# /'
	bad "files of the formatted set differ from .clang-format"
fi

# A file with a wrong indentation and a brace on the wrong line must be reported.
tmp=$(mktemp -d "$build/format-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf 'int f(int x) {\n  return x;\n}\n' >"$tmp/bad.c"
if "$check" "$tmp/bad.c" >/dev/null 2>&1; then
	bad "a badly formatted file is not reported"
else
	ok "a badly formatted file is reported"
fi
printf 'int f(int x)\n{\n\treturn x;\n}\n' >"$tmp/good.c"
if "$check" "$tmp/good.c" >/dev/null 2>&1; then
	ok "a formatted file passes"
else
	bad "a formatted file is reported"
fi
echo "1..$n"
[ "$fails" -eq 0 ]
