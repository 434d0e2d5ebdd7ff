#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# fastpath-golden.sh - count the instructions of the release-build fast paths of
# sheaf_cache_alloc and sheaf_cache_free, and of the malloc front end's sheaf_malloc and
# sheaf_free (issue 4: the fast path must stay short) and compare them with the
# committed golden file tools/fastpath-golden.txt.
#
# Usage: tools/fastpath-golden.sh [--update] [--show] LIBSHEAF.so [GOLDEN]
#
# Which path is counted: the common case, from the function's entry to its `ret`.
# The walk disassembles the function (objdump -d), starts at its first instruction,
# steps to the next instruction at every conditional jump (the fast paths are laid
# out so that success falls through: every jcc leaves for the slow path, rseq.h),
# follows an unconditional `jmp` whose target lies inside the function, and stops at
# the first `ret`, which is counted.  So for sheaf_cache_alloc the count covers:
# load the rseq offset, publish the rseq_cs descriptor, read cpu_id, load the CPU's
# main, test its size, pop, count, commit, ret; for sheaf_cache_free: the pagemap key
# (subtract, bound, shift, load), the same rseq prologue, key and capacity tests,
# store, commit, ret.  Abort handlers (.text.unlikely) and slow paths are not counted.
#
# The free path also makes the checks of README "Errors" (src/slab/freecheck.h): a NULL
# cache test (2), the cache's kind of mark (3), the object-start test, and inside the
# sequence the free mark (load the key, compare, branch, store: 4); the allocation tests for
# a NULL cache and clears the mark (5).  The path counted is the common case, a slot size
# that is a power of two, whose object-start test is one `and` with the slot mask (3 with
# its branch): free 20 -> 32, alloc 12 -> 18.  Other slot sizes take the reciprocal multiply
# instead (mask, multiply, shift, multiply back, compare: 8, and one more flag test): about
# 38.  SHEAF_FREE_CHECKS=0 runs the same code without the mark and the object-start test
# (bench contender sheaf-nochecks, docs/benchmarks.md).
#
# Since 2026-11-28 (third session) each sequence finds the CPU's main through a shift of
# the CPU number (rseq.h SHEAF_RSEQ_LOAD_MAIN), each CPU's entry of mainv being a cache
# line of its own (docs/percpu.md "One line per CPU"): one instruction more on every
# path.  The same change tests the cache's kind of mark and the object start as one
# instruction each with the field in memory (config.h sheaf_u8_any, sheaf_u8_is,
# sheaf_and_zero: testb/cmpb/test, where the compiler had loaded the field first), one
# fewer for sheaf_cache_alloc and sheaf_free and two fewer for sheaf_cache_free.  Golden
# 18 / 31 / 22 / 31 (was 18 / 32 / 21 / 31); the breakdowns below are as they were
# before that.
#
# Since 2026-11-28 (fourth session): 18 / 29 / 20 / 30.  sheaf_cache_free tests "the usual
# cache, and an object start of it" as one `test` of the pointer with the cache's
# free_p2_mask (the slot mask for a plain power-of-two cache, all ones otherwise) instead
# of the kind of mark and then the slot mask (-2).  sheaf_malloc compares the size with the
# table's bound in memory, which stays 0 until the table has no NULL entry (a placeholder
# cache for the classes not made yet), instead of a size compare and a NULL test (-2).
# sheaf_free compares the heap offset with the bound in memory instead of loading it
# first (-1).
#
# The malloc front end's sheaf_malloc and sheaf_free (src/malloc/malloc.h) are counted the
# same way, for a power-of-two size class (64 or 256 bytes, the benchmark's rows).
# sheaf_malloc, 21: the size bound and the table load of the class cache (8), the same pop
# as sheaf_cache_alloc (11), the mark's clearing (1: a class cache's mark, if any, is always
# the second word, so its kind is not tested; 4 until 2026-11-27), ret.  sheaf_free, 31:
# the page-map key (subtract, bound, shift, load, zero test: 10; 12 until 2026-11-27, when
# sheaf_heap and sheaf_page_fast_limit became hidden symbols, read RIP-relative without a
# lea each), one test of the node's
# malloc_p2_mask that covers "a class with a power-of-two slot and the free mark, and an
# object start" (and, with its copy and branch, and the load of the class cache: 4), the push
# with the free mark (17 with ret).  Until 2026-11-25 the checks cost sheaf_free 7 more
# instructions and two taken branches (40, the cache's kind of mark tested twice, the
# power-of-two case out of line); with SHEAF_FREE_CHECKS=0 it is 35 (the failed mask test,
# then the same tests as before: was 33), and a class whose slot is not a power of two takes
# the reciprocal multiply (45, as before).
#
# Since 2026-11-29 (ninth session): sheaf_free 33.  The test of the node's malloc_p2_mask
# (a `test` and its branch) became the same divisibility test for every class (the offset
# in the slab, `and` with the slab mask, times ceil(2^64 / slot) below that factor: a copy,
# `and`, `imul`, `cmp` and the branch; slab.h malloc_div_c), +3.  A program that frees
# sizes of both kinds at random mispredicted the branch between the power-of-two test and
# the reciprocal one on about every other free: larson 0.73x, the malloc mix of random
# sizes 0.54-0.66x the time before; one class's loops 1.00-1.06x (docs/benchmarks.md,
# ninth session).  A class whose slot is not a power of two now takes this path too (it
# took about 45).
#
# Since 2026-11-29 (tenth session): 18 / 28 / 20 / 30.  Every page-map entry below the
# fast paths' bound is a node's address or SHEAF_KEY_NONE, the address of read-only
# zeroes (src/page/page.h "Keys"), never 0, so sheaf_free reads the node's fields with no
# test of the key for 0 and its branch (-2).  The free mark is the key, in %rdx for the
# compare with the main's, instead of a load of a random word (-1 on both frees;
# slab/freecheck.h).  A first version kept 0 for "no slab" and read the fields at an
# offset of two registers from a zero page below the page map: the same counts, but one
# cycle more on the load chain of every malloc free (pair/256 1.05x the revision before,
# tools/prev-ratios.sh, docs/benchmarks.md tenth session).
#
# Fails when a count exceeds 45, when any counted instruction carries a `lock` prefix
# (or is xchg with memory, implicitly locked), or when a count differs from the golden
# file (then rerun with --update and commit the new file if the change is intended).
set -euo pipefail

update=0
show=0
while [[ $# -gt 0 && $1 == --* ]]; do
	case $1 in
	--update) update=1 ;;
	--show) show=1 ;;
	*) echo "usage: $0 [--update] [--show] LIBSHEAF.so [GOLDEN]" >&2; exit 2 ;;
	esac
	shift
done
lib=${1:?usage: $0 [--update] [--show] LIBSHEAF.so [GOLDEN]}
golden=${2:-$(dirname "$0")/fastpath-golden.txt}
limit=45
fns=(sheaf_cache_alloc sheaf_cache_free sheaf_malloc sheaf_free)

command -v objdump >/dev/null || { echo "fastpath-golden: objdump not found (binutils)" >&2; exit 2; }
[[ -f $lib ]] || { echo "fastpath-golden: no such library: $lib" >&2; exit 2; }

# Print "count lockcount" and, on stderr with --show, the path.
walk() {
	local fn=$1
	objdump -d --no-show-raw-insn -M att "$lib" |
		awk -v fn="$fn" -v show="$show" '
		function hex(s,   i, v) {   # portable (mawk has no strtonum)
			v = 0; s = tolower(s)
			for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
			return v
		}
		$0 ~ "^[0-9a-f]+ <" fn ">:$" { infn = 1; next }
		infn && /^$/ { infn = 0 }
		infn && /^ *[0-9a-f]+:\t/ {
			split($0, f, "\t")
			a = f[1]; sub(/^ */, "", a); sub(/:$/, "", a)
			ins = f[2]
			addr = hex(a)
			n++; A[n] = addr; I[n] = ins; idx[addr] = n
		}
		END {
			if (!n) { print "-1 0"; exit }
			lo = A[1]; hi = A[n]
			i = 1; cnt = 0; locks = 0; steps = 0
			while (i >= 1 && i <= n && steps < 1000) {
				steps++
				ins = I[i]; cnt++
				if (show) printf("  %s\n", ins) > "/dev/stderr"
				if (ins ~ /^lock / || ins ~ /^xchg .*\(/ || ins ~ /^xchg .*,.*\(/) locks++
				split(ins, w, /[ \t]+/); op = w[1]
				if (op ~ /^ret/) { print cnt, locks; exit }
				if (op == "jmp" || op == "jmpq") {
					t = w[2]
					if (t ~ /^[0-9a-f]+$/ && (hex(t) in idx)) { i = idx[hex(t)]; continue }
					print -2, locks; exit   # leaves the function before any ret
				}
				i++
			}
			print -3, locks
		}'
}

declare -A got
fail=0
for fn in "${fns[@]}"; do
	[[ $show == 1 ]] && echo "$fn:" >&2
	read -r cnt locks < <(walk "$fn")
	if (( cnt < 0 )); then
		echo "FAIL $fn: common path not found (code $cnt): is $lib a release build with the rseq fast path?"
		fail=1
		continue
	fi
	got[$fn]=$cnt
	echo "$fn: $cnt instructions, $locks lock-prefixed (limit $limit, none locked)"
	if (( cnt > limit )); then echo "FAIL $fn: $cnt > $limit"; fail=1; fi
	if (( locks > 0 )); then echo "FAIL $fn: lock-prefixed instruction on the fast path"; fail=1; fi
done

if [[ $update == 1 ]]; then
	{
		echo "# Fast-path instruction counts of the release libsheaf.so on x86-64"
		echo "# (tools/fastpath-golden.sh: entry to ret along the common case)."
		for fn in "${fns[@]}"; do echo "$fn ${got[$fn]:-?}"; done
	} > "$golden"
	echo "updated $golden"
	exit $fail
fi

[[ -f $golden ]] || { echo "FAIL: no golden file $golden (run with --update)"; exit 1; }
for fn in "${fns[@]}"; do
	want=$(awk -v fn="$fn" '$1 == fn { print $2 }' "$golden")
	if [[ -z $want ]]; then echo "FAIL $fn: not in $golden"; fail=1; continue; fi
	if [[ ${got[$fn]:-} != "$want" ]]; then
		echo "FAIL $fn: ${got[$fn]:-?} instructions, golden file says $want (rerun with --show to see the path; --update if intended)"
		fail=1
	fi
done
[[ $fail == 0 ]] && echo "fastpath-golden: OK"
exit $fail
