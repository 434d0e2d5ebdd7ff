#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# check-format.sh - check C sources against .clang-format with the installed
# clang-format (Debian 12: clang-format 14, from scripts/setup.sh).
#
# Usage: tools/check-format.sh             the formatted set (below): fail on any difference
#        tools/check-format.sh --diff BASE  only the lines changed since git revision BASE,
#                                           in every C file (run it before landing a change)
#        tools/check-format.sh --all        every C file; report, fail if any differs
#        tools/check-format.sh --fix FILE.. format FILEs in place
#        tools/check-format.sh FILE...      check these files
#
# The formatted set is every C file (.c .h .cc) under the folders and files listed in
# tools/format-clean.txt, one path per line ('#' starts a comment; a folder covers
# everything below it, so new files there are checked from the start).  A file or
# folder joins the list once `--fix` has been run over it; the aim is the whole tree
# (src include tests bench tools).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
cf=${CLANG_FORMAT:-clang-format}
if ! command -v "$cf" >/dev/null; then
	echo "check-format: $cf not found (Debian: apt-get install clang-format; scripts/setup.sh)" >&2
	exit 2
fi

c_files() { # c_files PATH... -> the C sources under them, sorted
	local p
	for p in "$@"; do
		if [ -d "$p" ]; then
			find "$p" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) \
				-not -path '*/results/*'
		elif [ -f "$p" ]; then
			echo "$p"
		else
			echo "check-format: $p does not exist" >&2
		fi
	done | sort -u
}

check_files() { # check_files FILE... -> 0 if all are formatted
	local f bad=0 n=0
	for f in "$@"; do
		n=$((n + 1))
		if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
			echo "check-format: $f is not formatted; the changes clang-format wants:"
			"$cf" --style=file "$f" | diff -u "$f" - | sed -n '3,40p'
			bad=$((bad + 1))
		fi
	done
	if [ "$bad" -gt 0 ]; then
		echo "check-format: $bad of $n files differ from .clang-format ($("$cf" --version))"
		echo "check-format: fix with tools/check-format.sh --fix FILE..."
		return 1
	fi
	echo "check-format: $n files formatted ($("$cf" --version | sed 's/.*version //'))"
	return 0
}

case "${1:-}" in
--diff)
	base=${2:?--diff needs a git revision}
	# git clang-format prints the changes it would make to the lines changed
	# since BASE; nothing (or "no modified files") means they are formatted.
	out=$(git clang-format --binary "$(command -v "$cf")" --style=file --diff "$base" -- \
		src include tests bench tools 2>&1)
	if [ -z "$out" ] || echo "$out" | grep -qE '^(no modified files to format|clang-format did not modify any files)$'; then
		echo "check-format: lines changed since $base are formatted"
		exit 0
	fi
	echo "$out"
	echo "check-format: lines changed since $base differ from .clang-format"
	exit 1
	;;
--all)
	mapfile -t files < <(c_files src include tests bench tools)
	check_files "${files[@]}"
	;;
--fix)
	shift
	[ $# -gt 0 ] || { echo "check-format: --fix needs files or folders" >&2; exit 2; }
	mapfile -t files < <(c_files "$@")
	"$cf" --style=file -i "${files[@]}" && echo "check-format: formatted ${#files[@]} files"
	;;
"")
	mapfile -t paths < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' tools/format-clean.txt | grep -v '^$')
	mapfile -t files < <(c_files "${paths[@]}")
	check_files "${files[@]}"
	;;
*)
	check_files "$@"
	;;
esac
