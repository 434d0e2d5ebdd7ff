# SPDX-License-Identifier: MIT
# tap_lib.sh - TAP output for the script tests that check commands (sourced by
# test_bench_smoke.sh and test_bench_prev.sh): check <description> <command...>
# runs the command and prints "ok N" or "not ok N"; finish prints the plan and a
# summary and exits with the result.
fails=0
n=0
check() { # check <description> <command...>
	n=$((n + 1))
	local what=$1
	shift
	if "$@"; then
		echo "ok $n - $what"
	else
		echo "not ok $n - $what"
		fails=$((fails + 1))
	fi
}
finish() {
	echo "1..$n"
	echo "# $((n - fails)) passed, $fails failed"
	[ "$fails" -eq 0 ]
	exit
}
