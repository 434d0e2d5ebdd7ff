#!/usr/bin/env bash
# test_locking_doc.sh - docs/locking.md's lock table is the one generated from
# SHEAF_LOCK_TABLE in the lock header (tools/gen-locking-doc.py), and the check fails
# when the two disagree.
# Arguments: build dir, source dir (tests/CMakeLists.txt).
set -u
src=${2:?source dir}
gen="$src/tools/gen-locking-doc.py"
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); echo "not ok $n - $1"; fails=$((fails + 1)); }

if ! command -v python3 >/dev/null; then
	echo "not ok 1 - python3 is needed to run $gen"
	echo "1..1"
	exit 1
fi

if out=$(python3 "$gen" --check "$src" 2>&1); then
	ok "docs/locking.md matches the lock table: $out"
else
	echo "$out" | sed 's/^/# /'
	bad "docs/locking.md is out of date (run tools/gen-locking-doc.py)"
fi

# A copy whose header gained a rank must be reported stale, then fixed by the script.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-lockdoc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
header=$(grep -rl --include=lock.h 'SHEAF_LOCK_TABLE' "$src/src" | head -n 1)
rel=${header#"$src"/}
mkdir -p "$tmp/docs" "$tmp/$(dirname "$rel")"
cp "$src/docs/locking.md" "$tmp/docs/"
sed 's/^\(\tX(DOBJ_POOL, \)/\tX(TEST_EXTRA, "test extra lock", "x.c", "nothing", "taken")                 \\\n\1/' \
	"$header" >"$tmp/$rel"
if grep -q TEST_EXTRA "$tmp/$rel" && ! python3 "$gen" --check "$tmp" >"$tmp/out" 2>&1 &&
	grep -q "test extra lock" "$tmp/out"; then
	ok "a rank added to the header and not to the document is reported"
else
	sed 's/^/# /' "$tmp/out"
	bad "a stale document is not reported"
fi
if python3 "$gen" "$tmp" >/dev/null && python3 "$gen" --check "$tmp" >/dev/null &&
	grep -q '`test extra lock`' "$tmp/docs/locking.md"; then
	ok "the script rewrites the table from the header"
else
	bad "the script does not rewrite the table"
fi
echo "1..$n"
[ $fails -eq 0 ]
