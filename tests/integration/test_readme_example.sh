#!/usr/bin/env bash
# test_readme_example.sh BUILD_DIR SOURCE_DIR
# The README's "Using it" example runs as printed: its code block, put in a main(), is
# compiled against the build's libsheaf and run; it must exit 0 with nothing on stderr
# (no misuse report, no leak report at destroy).  Until 2026-11-29 the example freed
# its object twice (sheaf_cache_free, then sheaf_cache_free_rcu) and aborted, and left
# the prefilled sheaf's object allocated (a new user's review).
set -uo pipefail
build=$(cd "$1" && pwd) || exit 1
src=$(cd "$2" && pwd) || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The first ```c block after "## Using it".
body=$(awk '/^## Using it/ { f = 1 } f && /^```c$/ { b = 1; next } b && /^```$/ { exit } b' "$src/README.md")
if [ -z "$body" ] || ! grep -q sheaf_cache_create <<<"$body"; then
	echo "not ok 1 - no C example found under README's 'Using it'"
	exit 1
fi
{
	grep '^#include' <<<"$body"
	grep -v '^#include' <<<"$body" | awk '/^struct [a-z_]+ \{.*\};$/ { print; next } { rest = rest $0 "\n" } END { printf "int main(void)\n{\n%s\treturn 0;\n}\n", rest }'
} >"$tmp/example.c"
# Compiled the way the library was: a sanitizer build's library needs its run time.
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cc=$(cache_get CMAKE_C_COMPILER)
cc=${cc:-cc}
san=()
case $(cache_get SHEAF_SANITIZE) in
address) san=(-fsanitize=address,undefined -fno-omit-frame-pointer) ;;
thread) san=(-fsanitize=thread) ;;
esac
limit=4000000
[ ${#san[@]} -eq 0 ] || limit=unlimited # the sanitizers reserve terabytes of shadow
# The example's free_rcu and destroy run liburcu's barrier, whose hand-off TSan cannot
# see (tests/stress/rcu.tsan.supp, docs/rcu.md "Sanitizers").
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$src/tests/stress/rcu.tsan.supp"
if ! "$cc" -std=gnu11 -Wall -Wextra -Werror -Wno-unused-variable "${san[@]}" -I"$src/include" "$tmp/example.c" \
	-o "$tmp/example" -L"$build" -lsheaf -Wl,-rpath,"$build" 2>"$tmp/cc.err"; then
	cat "$tmp/example.c" "$tmp/cc.err"
	echo "not ok 1 - the README example does not compile"
	exit 1
fi
echo "ok 1 - the README example compiles"
if (ulimit -v "$limit"; timeout 60 "$tmp/example") 2>"$tmp/run.err" && [ ! -s "$tmp/run.err" ]; then
	echo "ok 2 - the README example runs cleanly"
	exit 0
fi
cat "$tmp/example.c" "$tmp/run.err"
echo "not ok 2 - the README example fails or reports"
exit 1
