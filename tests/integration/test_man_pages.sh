#!/usr/bin/env bash
# test_man_pages.sh BUILD_DIR SOURCE_DIR
# The manual pages stay true (issue 19): sheaf(3) names every public function of
# include/*.h and every option of the options table; sheafinfo(1) names every
# option sheafinfo accepts; both format without a groff warning.
set -uo pipefail
src=$(cd "$2" && pwd) || exit 1
build=$(cd "$1" && pwd) || exit 1
fails=0 checks=0
ok() { checks=$((checks + 1)); echo "ok $checks - $*"; }
bad() { checks=$((checks + 1)) fails=$((fails + 1)); echo "not ok $checks - $*"; }

for page in man/sheaf.3 man/sheafinfo.1; do
	if warn=$(groff -man -ww -z "$src/$page" 2>&1) && [ -z "$warn" ]; then
		ok "$page formats without warnings"
	else
		bad "$page: $warn"
	fi
done

# The troff source escapes '-' as '\-': compare against the text with it undone.
text3=$(sed 's/\\-/-/g' "$src/man/sheaf.3")
missing=
for f in $(sed -n 's/^SHEAF_API[^(]*[ *]\([a-z_0-9]*\)(.*/\1/p' "$src"/include/*.h | sort -u); do
	grep -q "\\b$f\\b" <<<"$text3" || missing="$missing $f"
done
n=$(sed -n 's/^SHEAF_API[^(]*[ *]\([a-z_0-9]*\)(.*/\1/p' "$src"/include/*.h | sort -u | wc -l)
if [ "$n" -gt 40 ] && [ -z "$missing" ]; then
	ok "sheaf(3) names all $n public functions"
else
	bad "sheaf(3) misses public functions:$missing (found $n)"
fi

opts_file=$(grep -rl 'OPT("STATS"' "$src/src" | head -n 1)
missing=
names=$(sed -n 's/.*= OPT[A-Z]*("\([A-Z_0-9]*\)".*/\1/p' "$opts_file")
for o in $names; do
	grep -q "^\\.B SHEAF_$o\$" <<<"$text3" || missing="$missing SHEAF_$o"
done
if [ "$(wc -w <<<"$names")" -gt 10 ] && [ -z "$missing" ]; then
	ok "sheaf(3) documents all $(wc -w <<<"$names") options of ${opts_file#$src/}"
else
	bad "sheaf(3) misses options:$missing"
fi

text1=$(sed 's/\\-/-/g' "$src/man/sheafinfo.1")
missing=
info=$build/tools/sheafinfo/sheafinfo
for o in $("$info" --help | grep -o -- '--[a-z]*' | sort -u); do
	grep -q -- "$o" <<<"$text1" || missing="$missing $o"
done
if [ -x "$info" ] && [ -z "$missing" ]; then
	ok "sheafinfo(1) documents every option of sheafinfo --help"
else
	bad "sheafinfo(1) misses:$missing"
fi
echo "1..$checks"
[ $fails -eq 0 ]
