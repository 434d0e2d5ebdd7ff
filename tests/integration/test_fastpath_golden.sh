#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 4, done-when 1: the release-build fast paths of sheaf_cache_alloc and
# sheaf_cache_free are at most 20 instructions each on x86-64, with no lock prefix,
# and match tools/fastpath-golden.txt.  Only a release build (no sanitizer, SHEAF_DEBUG
# 0, x86-64) has the counted code; other builds skip with a message and pass.
set -euo pipefail
build=${1:?build dir}
src=${2:?source dir}
cache=$build/CMakeCache.txt
val() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -1; }
btype=$(val CMAKE_BUILD_TYPE)
san=$(val SHEAF_SANITIZE)
dbg=$(val SHEAF_DEBUG)
arch=$(uname -m)
if [[ $arch != x86_64 || $btype != Release || -n $san || ${dbg:-0} != 0 ]]; then
	echo "SKIP: fast-path golden check needs an x86-64 Release build without sanitizers and with SHEAF_DEBUG=0"
	echo "      (this build: arch $arch, CMAKE_BUILD_TYPE '$btype', SHEAF_SANITIZE '$san', SHEAF_DEBUG '${dbg:-0}')"
	exit 0
fi
lib=$(ls "$build"/libsheaf.so.*.*.* 2>/dev/null | head -1)
[[ -n $lib ]] || lib=$build/libsheaf.so
cc=gcc
if "$(val CMAKE_C_COMPILER)" --version 2>/dev/null | head -n 1 | grep -qi clang; then
	cc=clang
fi
if [[ $cc != gcc ]]; then
	# The golden counts are gcc's (the release preset's compiler); another compiler
	# (the clang preset) lays the same code out differently.  Its fast paths must still
	# stay within the limit and take no lock prefix, which the tool checks while it
	# writes the counts to a scratch file instead of comparing them.
	tmp=$(mktemp "${TMPDIR:-/tmp}/sheaf-golden.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	echo "# $cc build: limit and lock-prefix checks only (tools/fastpath-golden.txt holds gcc's counts)"
	bash "$src/tools/fastpath-golden.sh" --update --show "$lib" "$tmp"
	exit $?
fi
exec bash "$src/tools/fastpath-golden.sh" --show "$lib" "$src/tools/fastpath-golden.txt"
