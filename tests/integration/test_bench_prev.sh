#!/usr/bin/env bash
# test_bench_prev.sh - the benchmark driver's previous-revision contenders
# (sheaf-prev, sheaf-malloc-prev; issue 14) and the report's "Against the
# previous revision" section.  Arguments: build dir, source dir
# (tests/CMakeLists.txt).
#
# Functional, not timed: the "previous revision" here is this build's own
# libsheaf.so (so no old build is needed), run with --quick and a few
# contenders.  The figures only have to be sane (a ratio of two runs of the
# same library on a loaded machine is near 1, certainly between 0.01 and 100;
# a --quick bulk row on a 2-CPU machine loaded by other builds once fell
# outside 0.05-20).
#
# Checks: without a library the prev contenders are absent with the reason and
# the section says so; a path that does not exist, and a library without
# Sheaf's symbols, leave them absent with a reason naming what failed; with the
# library (given by --prev-lib, and by SHEAF_BENCH_PREV_LIB for the child
# processes of memory and rcu) the section lists paired rows of fastpath and bulk
# and unpaired rows of memory and rcu, with ratios, spreads and verdicts, results.csv has
# the per-round ratio rows, and stdout has the summary line.
#
# Sanitizer builds leave the prev contenders out (an uninstrumented copy in an
# instrumented process, like the nochecks copies): only that is checked there.
set -u
build=${1:?build dir}
bench="$build/bench/sheaf-bench"
if [ ! -x "$bench" ]; then
	echo "not ok 1 - $bench was not built"
	echo "1..1"
	exit 1
fi
lib=$(ldd "$bench" | awk '/libsheaf\.so/ { print $3; exit }')
out=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-bench-prev.XXXXXX")
trap 'rm -rf "$out"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/tap_lib.sh"
env -u SHEAF_BENCH_PREV_LIB "$bench" --list >"$out/list-none" 2>&1
if grep -qE '^  sheaf-prev +no +skipped in sanitizer builds' "$out/list-none"; then
	check "sanitizer build: sheaf-malloc-prev is left out too" \
		grep -qE '^  sheaf-malloc-prev +no +skipped in sanitizer builds' "$out/list-none"
	finish
fi
# A bound on everything the driver may map (set after the sanitizer test above:
# a sanitizer's shadow memory needs far more address space than this).
ulimit -v 8388608 2>/dev/null
check "libsheaf.so found (ldd): '$lib'" test -f "$lib"
check "no library given: sheaf-prev absent, with the options to give one" \
	grep -qE '^  sheaf-prev +no +no previous revision given \(--prev-lib=PATH' "$out/list-none"
check "no library given: sheaf-malloc-prev absent" \
	grep -qE '^  sheaf-malloc-prev +no +no previous revision given' "$out/list-none"

"$bench" --list --prev-lib="$out/no-such-lib.so" >"$out/list-missing" 2>&1
check "a missing file: absent, the path and the error named" \
	grep -qE "^  sheaf-prev +no +copy of $out/no-such-lib.so: No such file" "$out/list-missing"

libm=$(ldd "$bench" | awk '/libm\.so/ { print $3; exit }')
if [ -n "$libm" ]; then
	"$bench" --list --prev-lib="$libm" >"$out/list-libm" 2>&1
	check "a library without Sheaf's symbols: sheaf-prev absent (object-cache API)" \
		grep -qE '^  sheaf-prev +no +a private copy of .* lacks the object-cache API' \
		"$out/list-libm"
	check "a library without Sheaf's symbols: sheaf-malloc-prev absent (sheaf_malloc)" \
		grep -qE '^  sheaf-malloc-prev +no +a private copy of .* lacks sheaf_malloc' \
		"$out/list-libm"
fi

"$bench" --list --prev-lib="$lib" >"$out/list-lib" 2>&1
check "--prev-lib: sheaf-prev loaded" grep -qE '^  sheaf-prev +yes +sheaf_cache_\* of a private copy of' \
	"$out/list-lib"
check "--prev-lib: sheaf-malloc-prev loaded" \
	grep -qE '^  sheaf-malloc-prev +yes +sheaf_malloc/sheaf_free of a private copy of' "$out/list-lib"

allocs=glibc,sheaf,sheaf-prev,sheaf-malloc,sheaf-malloc-prev
timeout 300 env -u SHEAF_BENCH_PREV_LIB "$bench" --quick --no-plots --only=fastpath \
	--allocs="$allocs" --out="$out/none" >"$out/none.stdout" 2>"$out/none.stderr"
check "run without a library exits 0" test $? -eq 0
check "without a library the section says why" \
	grep -q '^Not measured: no previous revision given' "$out/none/report.md"
check "without a library no ratio rows" bash -c "! grep -q ',prev-ratio:' '$out/none/results.csv'"

SHEAF_BENCH_PREV_LIB="$lib" timeout 300 "$bench" --quick --no-plots --only=fastpath,bulk,memory,rcu \
	--allocs="$allocs" --out="$out/run" >"$out/stdout" 2>"$out/stderr"
rc=$?
check "run with the library (SHEAF_BENCH_PREV_LIB) exits 0" test "$rc" -eq 0
[ "$rc" -eq 0 ] || sed 's/^/# /' "$out/stderr" | tail -n 20
r="$out/run/report.md"
check "report has the section" grep -q '^## Against the previous revision' "$r"
check "no child process failed" bash -c "! grep -q 'ended with' '$r'"
check "stdout has the summary" grep -qE '^sheaf-bench: against the previous revision: [0-9]+ rows' \
	"$out/stdout"
# A section row: | wl | variant | series | contender | unit, head | cur | prev | ratio | lo–hi | windows | verdict |
row_ok() { # row_ok <workload> <variant> <series> <contender> <paired|unpaired>
	awk -F' *\\| *' -v w="$1" -v v="$2" -v s="$3" -v c="$4" -v k="$5" '
		$2 == w && $3 == v && $4 == s && $5 == c {
			found = 1
			r = $9 + 0
			if (r < 0.01 || r > 100) { print "# ratio out of range: " $0; bad = 1 }
			if (k == "paired" ? $11 !~ /^[0-9]+ paired$/ : $11 !~ /\(unpaired\)$/) {
				print "# not " k ": " $0
				bad = 1
			}
			if ($12 !~ /within noise|beyond noise/) { print "# no verdict: " $0; bad = 1 }
			if (k == "paired" && $10 !~ /^[0-9.]+–[0-9.]+$/) { print "# no spread: " $0; bad = 1 }
		}
		END { exit !(found && !bad) }' "$r"
}
check "fastpath pair/64 sheaf: paired ratio" row_ok fastpath pair/64 real sheaf paired
check "fastpath pair/64 sheaf-malloc: paired ratio" row_ok fastpath pair/64 real sheaf-malloc paired
check "bulk bulk32/64 sheaf: paired ratio" row_ok bulk bulk32/64 real sheaf paired
check "memory hold1M/64 peak sheaf (child processes): unpaired ratio" \
	row_ok memory hold1M/64 peak sheaf unpaired
check "memory hold1M/64 peak sheaf-malloc: unpaired ratio" \
	row_ok memory hold1M/64 peak sheaf-malloc unpaired
check "rcu partial N=10 per-cache avg sheaf (the prev mode's children): unpaired ratio" \
	row_ok rcu "partial N=10" "per-cache avg" sheaf unpaired
check "results.csv has the per-round ratios (3 rounds with --quick)" \
	grep -qE '^fastpath,pair/64,real,prev-ratio:sheaf,ratio,median,[0-9.e+-]+,3,' \
	"$out/run/results.csv"
check "the prev contenders have their own figures" \
	grep -qE '^fastpath,pair/64,real,sheaf-prev,ns/pair,median,[0-9.e+-]+,' "$out/run/results.csv"
check "the per-contender tables do not show the ratio rows" \
	bash -c "! grep -q '| prev-ratio:' '$r'"
finish
