#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_api.sh - the allocation contracts through the names that
# libsheaf-malloc.so exports (C: src/preload/preload_check.c, C++:
# preload_check_cxx.cc), first without the preload (glibc must pass: this
# checks the checks), then with it; the counter must show the calls were ours.
. "$2/src/preload/preload_test_lib.sh" "$1" "$2"

check=$BUILD/src/preload/sheaf-preload-check
checkxx=$BUILD/src/preload/sheaf-preload-check-cxx

# A library with dynamic TLS for the dlopen check: its TLS blocks are
# allocated through malloc by the dynamic loader, per thread, and freed at
# thread exit and dlclose.
cat >"$WORK/tlsdemo.c" <<'C'
__thread char demo_buf[8192];
void *sheaf_demo_tls_touch(unsigned long n);
void *sheaf_demo_tls_touch(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		demo_buf[i] = (char)i;
	return demo_buf;
}
C
cc -shared -fPIC -O1 -o "$WORK/libtlsdemo.so" "$WORK/tlsdemo.c"

echo "== glibc"
"$check" "$WORK/libtlsdemo.so" | tail -n 3
"$checkxx" | tail -n 2
echo "== libsheaf-malloc.so"
out=$(preloaded "$check" "$WORK/libtlsdemo.so")
echo "$out" | tail -n 3
grep -q "served by sheaf-malloc" <<<"$out"
out=$(preloaded "$checkxx")
echo "$out" | tail -n 3
grep -q "served by sheaf-malloc" <<<"$out"
require_served 100000 sheaf-preload-check
require_served 10000 sheaf-preload-check-cxx
# SHEAF_MALLOC_STATS=1 prints the line on stderr.
line=$(LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=1 /bin/true 2>&1)
echo "$line"
grep -Eq '^sheaf-malloc: [0-9]+ mallocs, [0-9]+ frees$' <<<"$line"
# Installed beside libsheaf.so, and usable from there.
cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
	{ cat "$WORK/install.log"; exit 1; }
inst=$(find "$WORK/prefix" -name libsheaf-malloc.so)
[ -n "$inst" ] && [ -e "$(dirname "$inst")/libsheaf.so" ] ||
	{ echo "FAIL: libsheaf-malloc.so not installed beside libsheaf.so" >&2; exit 1; }
echo "installed: ${inst#"$WORK/prefix/"}"
LD_PRELOAD=$inst SHEAF_MALLOC_STATS=$WORK/installed.txt sort </dev/null
grep -E '^sheaf-malloc: [1-9][0-9]* mallocs, [0-9]+ frees \(pid [0-9]+, sort\)$' "$WORK/installed.txt"
echo "PASS"
