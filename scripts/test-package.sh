#!/usr/bin/env bash
# test-package.sh [BUILD_DIR] - the Debian package, tested the way a user gets it
# (issue 19): `cpack -G DEB` in a release build tree, its contents checked, then
#   as root (CI):  installed for real with dpkg -i, used from /usr, removed again
#                  (unless it was installed before this run);
#   otherwise:     unpacked with dpkg -x into a scratch directory and used from there.
# "Used": examples/cmake-consumer built with find_package(Sheaf CONFIG REQUIRED)
# and run (shared, static and malloc-replacing targets), a pkg-config build, the
# installed sheafinfo reading a program under the installed preload library, and
# the manual pages found by man.  SHEAF_PACKAGE_TEST=extract forces the second way.
# Prints one line per check; exits non-zero if any fails.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd) || exit 1
fails=0 checks=0
ok() { checks=$((checks + 1)); echo "ok $checks - $*"; }
bad() { checks=$((checks + 1)) fails=$((fails + 1)); echo "not ok $checks - $*"; }
finish() {
	echo "1..$checks"
	echo "# $checks checks, $fails failed"
	[ $fails -eq 0 ]
	exit
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-package.XXXXXX") || exit 1
installed_here=0
bg=
cleanup() {
	[ -z "$bg" ] || kill "$bg" 2>/dev/null
	if [ $installed_here -eq 1 ]; then
		dpkg -P sheaf >/dev/null 2>&1 && echo "# removed (purged) the sheaf package again"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

if ! grep -q '^SHEAF_SANITIZE:[A-Z]*=$' "$build/CMakeCache.txt" 2>/dev/null; then
	bad "$build is not a build tree without sanitizers (configure it with: cmake --preset release)"
	finish
fi
# ---- cpack -------------------------------------------------------------------------
if (cd "$build" && cmake --build . >"$tmp/build.log" 2>&1 && cpack -G DEB -B "$tmp/deb" >"$tmp/cpack.log" 2>&1); then
	deb=$(ls "$tmp"/deb/sheaf_*.deb 2>/dev/null | head -n 1)
fi
if [ -n "${deb:-}" ]; then
	ok "cpack -G DEB made $(basename "$deb") ($(stat -c %s "$deb") bytes; $(dpkg-deb -f "$deb" Depends))"
else
	cat "$tmp/build.log" "$tmp/cpack.log" 2>/dev/null | tail -n 30
	bad "cpack -G DEB made no package"
	finish
fi
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in usr/lib/libsheaf.so.0 usr/lib/libsheaf.a usr/lib/libsheaf-malloc.so usr/include/sheaf.h \
	usr/include/sheaf_stats.h usr/include/sheaf_malloc.h usr/include/sheaf_debug.h usr/lib/pkgconfig/sheaf.pc \
	usr/lib/cmake/Sheaf/SheafConfig.cmake usr/lib/cmake/Sheaf/SheafConfigVersion.cmake usr/bin/sheafinfo \
	usr/share/man/man1/sheafinfo.1 usr/share/man/man3/sheaf.3; do
	if grep -qx "./$f" <<<"$contents"; then ok "package has /$f"; else bad "package lacks /$f"; fi
done
if grep -q sheaf-bench <<<"$contents"; then bad "package holds the benchmark driver"; fi

# ---- install it --------------------------------------------------------------------
mode=${SHEAF_PACKAGE_TEST:-}
if [ -z "$mode" ]; then
	if [ "$(id -u)" -eq 0 ] && command -v dpkg >/dev/null; then mode=install; else mode=extract; fi
fi
if [ "$mode" = install ]; then
	dpkg-query -W -f='${Status}' sheaf 2>/dev/null | grep -q 'install ok installed' || installed_here=1
	if dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1; then
		ok "dpkg -i $(basename "$deb")"
	else
		cat "$tmp/dpkg.log"
		bad "dpkg -i failed"
		finish
	fi
	P=/usr
	prefix_args=()
	run_env=()
else
	dpkg -x "$deb" "$tmp/root" && ok "dpkg -x into a scratch root" || { bad "dpkg -x failed"; finish; }
	P=$tmp/root/usr
	prefix_args=(-DCMAKE_PREFIX_PATH="$P")
	run_env=(env LD_LIBRARY_PATH="$P/lib")
	export PKG_CONFIG_PATH=$P/lib/pkgconfig
	export MANPATH=$P/share/man:
fi

# ---- use it ------------------------------------------------------------------------
if cmake -S "$root/examples/cmake-consumer" -B "$tmp/consumer" "${prefix_args[@]}" >"$tmp/consumer.log" 2>&1 &&
	cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1; then
	ok "examples/cmake-consumer builds against the package: $(sed -n 's/^-- Sheaf/Sheaf/p' "$tmp/consumer.log")"
	for t in consumer consumer-static consumer-malloc; do
		if out=$("${run_env[@]}" "$tmp/consumer/$t" 2>&1); then ok "$t runs: $out"; else bad "$t: $out"; fi
	done
else
	cat "$tmp/consumer.log"
	bad "examples/cmake-consumer does not build against the package"
fi

printf '#include <sheaf_malloc.h>\nint main(void) { void *p = sheaf_malloc(10); sheaf_free(p); return !p; }\n' >"$tmp/pc.c"
if cc "$tmp/pc.c" -o "$tmp/pc" $(pkg-config --cflags --libs sheaf) 2>"$tmp/pc.err" && "${run_env[@]}" "$tmp/pc"; then
	ok "a program builds with pkg-config --cflags --libs sheaf and runs"
else
	bad "pkg-config build: $(cat "$tmp/pc.err")"
fi

# The installed sheafinfo on a program running under the installed preload library.
LD_PRELOAD=$P/lib/libsheaf-malloc.so sleep 20 &
bg=$!
sleep 0.5
if out=$("$P/bin/sheafinfo" "$bg" 2>&1) && grep -q '^malloc-' <<<"$out"; then
	ok "installed sheafinfo reads sleep under the installed preload: $(grep -c '^malloc-' <<<"$out") malloc caches"
else
	bad "installed sheafinfo: $out"
fi
kill "$bg" 2>/dev/null
wait "$bg" 2>/dev/null
bg=

for page in sheafinfo.1 sheaf.3; do
	if where=$(man -w "${page%.*}" 2>/dev/null) && [[ $where == "$P"/share/man/* ]]; then
		ok "man finds $page: $where"
	else
		bad "man does not find $page under $P/share/man (got '$where')"
	fi
done
finish
