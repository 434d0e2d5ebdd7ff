#!/usr/bin/env bash
# test_citations.sh - every citation in the code and the docs resolves inside the
# repository (tools/check-citations.py: K§ sections of docs/kernel.md, D1-D7, the
# theory statement and the seeds of docs/design.md, docs/*.md files and links), and
# the checker itself fails on citations that do not.
# Arguments: build dir, source dir (tests/CMakeLists.txt).
set -u
src=${2:?source dir}
check="$src/tools/check-citations.py"
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); echo "not ok $n - $1"; fails=$((fails + 1)); }

if ! command -v python3 >/dev/null; then
	echo "not ok 1 - python3 is needed to run $check"
	echo "1..1"
	exit 1
fi

if out=$(python3 "$check" "$src" 2>&1); then
	ok "the source tree: ${out##*$'\n'}"
else
	echo "$out" | sed 's/^/# /'
	bad "the source tree has unresolved citations"
fi

# The checker must fail on each kind of bad citation: one file citing sections that
# do not exist, checked against the real docs/.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-citations.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for cite in "K§9.9" "K§2.6 step 12" "D8" "design §42" "seed 999" "docs/nowhere.md" \
	"nowhere.md" "DESIGN §2" "STYLE R7"; do
	printf '/* %s */\n' "$cite" >"$tmp/x.c"
	if python3 "$check" "$src" "$tmp/x.c" >/dev/null 2>&1; then
		bad "a citation of '$cite' is not reported"
	else
		ok "a citation of '$cite' is reported"
	fi
done
printf '/* K§2.6 step 5, D1-D7, design §4, seed 001, docs/kernel.md */\n' >"$tmp/x.c"
if python3 "$check" "$src" "$tmp/x.c" >/dev/null 2>&1; then
	ok "valid citations pass"
else
	bad "valid citations are reported"
fi
echo "1..$n"
[ "$fails" -eq 0 ]
