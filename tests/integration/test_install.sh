#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR
#
# Checks what issues 3 and 19 promise a user of `cmake --install build --prefix P`:
# P/include/{sheaf,sheaf_stats,sheaf_malloc}.h, P/lib/libsheaf.so,
# P/lib/libsheaf.a and P/lib/pkgconfig/sheaf.pc; that each installed header
# compiles on its own, from C and from C++; and that a small program built only
# with `pkg-config sheaf` runs, linked against the shared library and, with
# `pkg-config --static`, against libsheaf.a; and that examples/cmake-consumer builds
# with find_package(Sheaf CONFIG) against the install moved elsewhere (relocatable)
# and runs with each imported target.  Every check prints one line; any
# failure fails the test (nothing is skipped).
set -uo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
	exit 2
fi
build=$(cd "$1" && pwd) || exit 1
src=$(cd "$2" && pwd) || exit 1

fails=0 checks=0
ok() { checks=$((checks + 1)); echo "ok $checks - $*"; }
bad() { checks=$((checks + 1)) fails=$((fails + 1)); echo "not ok $checks - $*"; }
die() { bad "$*"; echo "1..$checks"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sheaf-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
P=$tmp/prefix

# The consumer must be compiled the way the library was: a library built with
# a sanitizer needs the sanitizer's run time in the program too.
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
[ -f "$build/CMakeCache.txt" ] || die "no CMakeCache.txt in $build"
CC=$(cache_get CMAKE_C_COMPILER)
CXX=$(cache_get CMAKE_CXX_COMPILER)
CC=${CC:-cc} CXX=${CXX:-c++}
san=()
case $(cache_get SHEAF_SANITIZE) in
address) san=(-fsanitize=address,undefined -fno-omit-frame-pointer) ;;
thread) san=(-fsanitize=thread) ;;
esac

# ---- install ----------------------------------------------------------------
if cmake --install "$build" --prefix "$P" >"$tmp/install.log" 2>&1; then
	ok "cmake --install $build --prefix P"
else
	cat "$tmp/install.log"
	die "cmake --install failed"
fi

for h in sheaf.h sheaf_stats.h sheaf_malloc.h; do
	if [ -f "$P/include/$h" ]; then ok "P/include/$h"; else bad "P/include/$h missing"; fi
done
for f in lib/libsheaf.so lib/libsheaf.a lib/pkgconfig/sheaf.pc; do
	if [ -e "$P/$f" ]; then
		ok "P/$f"
	else
		# Say where it went instead, e.g. a multiarch lib/x86_64-linux-gnu.
		where=$(cd "$P" && find . -name "$(basename "$f")" | head -n 3 | tr '\n' ' ')
		bad "P/$f missing${where:+ (installed as: $where)}"
	fi
done
# (Outputs are captured before grep: with pipefail, `cmd | grep -q` fails at
# random when grep exits early and cmd gets SIGPIPE.)
if [ -e "$P/lib/libsheaf.so" ]; then
	dyn=$(readelf -d "$P/lib/libsheaf.so")
	if grep -q 'SONAME.*libsheaf\.so' <<<"$dyn"; then ok "libsheaf.so has a SONAME"; else bad "libsheaf.so has no SONAME"; fi
fi
[ $fails -eq 0 ] || die "installed tree incomplete; listing:$(cd "$P" && find . -type f | sed 's/^/ /')"

# ---- pkg-config ---------------------------------------------------------------
export PKG_CONFIG_PATH=$P/lib/pkgconfig
if ! pcflags=$(pkg-config --cflags sheaf 2>"$tmp/pc.err") ||
	! pclibs=$(pkg-config --libs sheaf 2>>"$tmp/pc.err") ||
	! pcstatic=$(pkg-config --static --libs sheaf 2>>"$tmp/pc.err"); then
	cat "$tmp/pc.err"
	die "pkg-config sheaf failed"
fi
ok "pkg-config: cflags '$pcflags', libs '$pclibs', static '$pcstatic'"
# The .pc file must describe P, not the prefix the build was configured for.
pc_inc=$(pkg-config --variable=includedir sheaf)
pc_lib=$(pkg-config --variable=libdir sheaf)
if [ "$(cd "$pc_inc" 2>/dev/null && pwd)" = "$P/include" ]; then
	ok "sheaf.pc includedir is P/include"
else
	bad "sheaf.pc includedir is '$pc_inc', not P/include (is sheaf.pc relocatable to --prefix?)"
fi
if [ "$(cd "$pc_lib" 2>/dev/null && pwd)" = "$P/lib" ]; then
	ok "sheaf.pc libdir is P/lib"
else
	bad "sheaf.pc libdir is '$pc_lib', not P/lib"
fi
# Everything below builds through pkg-config; with a wrong .pc each step would
# only repeat this failure (or, worse, find an older installation).
[ $fails -eq 0 ] || die "sheaf.pc does not describe the installed tree: cannot check a consumer"

# ---- headers stand alone -----------------------------------------------------------
for h in sheaf.h sheaf_stats.h sheaf_malloc.h; do
	printf '#include <%s>\nint sheaf_install_probe;\n' "$h" >"$tmp/hdr.c"
	if "$CC" -std=c11 -Wall -Wextra -Werror $pcflags -c "$tmp/hdr.c" -o "$tmp/hdr.o" 2>"$tmp/cc.err"; then
		ok "$h compiles alone (C11)"
	else
		cat "$tmp/cc.err"
		bad "$h does not compile alone (C11)"
	fi
	cp "$tmp/hdr.c" "$tmp/hdr.cc"
	if "$CXX" -Wall -Wextra -Werror $pcflags -c "$tmp/hdr.cc" -o "$tmp/hdr.o" 2>"$tmp/cc.err"; then
		ok "$h compiles alone (C++)"
	else
		cat "$tmp/cc.err"
		bad "$h does not compile alone (C++)"
	fi
done

# A program's own feature macros are its own: one that defines _GNU_SOURCE itself, and
# one that asks for POSIX strerror_r, build with the flags pkg-config gives under
# -Werror (both failed while sheaf.pc and the CMake targets forced -D_GNU_SOURCE).
printf '#define _GNU_SOURCE\n#include <sheaf.h>\nint sheaf_install_probe;\n' >"$tmp/gnu.c"
printf '#define _POSIX_C_SOURCE 200809L\n#include <string.h>\n#include <sheaf.h>\n%s\n' \
	'int probe(char *b) { int r = strerror_r(1, b, 16); return r; }' >"$tmp/posix.c"
for f in gnu posix; do
	if "$CC" -std=c11 -Wall -Wextra -Werror $pcflags -c "$tmp/$f.c" -o "$tmp/$f.o" 2>"$tmp/cc.err"; then
		ok "a program's own feature macros are left alone ($f.c)"
	else
		cat "$tmp/cc.err"
		bad "pkg-config's flags change a program's feature macros ($f.c)"
	fi
done

# ---- a user program ------------------------------------------------------------------
cat >"$tmp/user.c" <<'PROG'
#include <sheaf.h>
#include <sheaf_stats.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define N 1000

int main(void)
{
	static void *objs[N];
	struct sheaf_cache *c = sheaf_cache_create("install-test", 96, NULL);
	if (!c) {
		perror("sheaf_cache_create");
		return 1;
	}
	for (int i = 0; i < N; i++) {
		objs[i] = sheaf_cache_alloc(c);
		if (!objs[i]) {
			fprintf(stderr, "alloc %d failed\n", i);
			return 1;
		}
		memset(objs[i], i & 0xff, 96);
	}
	for (int i = 0; i < N; i++) {
		const unsigned char *p = objs[i];
		if (p[0] != (i & 0xff) || p[95] != (i & 0xff)) {
			fprintf(stderr, "object %d overwritten\n", i);
			return 1;
		}
		if (sheaf_cache_of(objs[i]) != c) {
			fprintf(stderr, "sheaf_cache_of(object %d) is not its cache\n", i);
			return 1;
		}
	}
	for (int i = 0; i < N; i++)
		sheaf_cache_free(c, objs[i]);
	if (sheaf_cache_alloc_bulk(c, N, objs) != N) {
		fprintf(stderr, "bulk alloc failed\n");
		return 1;
	}
	sheaf_cache_free_bulk(c, N, objs);

	/* The statistics entry points are exported too. */
	struct sheaf_stats st = { .size = sizeof(st) };
	if (sheaf_stats_get(c, &st) != 0 || st.version != SHEAF_STATS_VERSION ||
	    strcmp(st.name, "install-test") != 0 || st.object_size != 96) {
		fprintf(stderr, "sheaf_stats_get failed or gave a wrong name or size\n");
		return 1;
	}
	/* Everything was freed, so destroy must report nothing on stderr. */
	sheaf_cache_destroy(c);
	printf("install-test: %d objects allocated, checked and freed twice\n", N);
	return 0;
}
PROG

# run_user WHAT COMMAND...: must exit 0 and print nothing on stderr (no leak
# report from sheaf_cache_destroy, no sanitizer report).
run_user() {
	local what=$1 rc
	shift
	"$@" >"$tmp/run.out" 2>"$tmp/run.err"
	rc=$?
	if [ $rc -eq 0 ] && [ ! -s "$tmp/run.err" ]; then
		ok "$what program runs: $(cat "$tmp/run.out")"
	else
		cat "$tmp/run.out" "$tmp/run.err"
		bad "$what program failed (exit $rc, or output on stderr)"
	fi
}

# Shared: exactly what pkg-config says, and the loader finds libsheaf.so in P/lib.
if "$CC" -std=c11 -Wall -Wextra -Werror "${san[@]}" $pcflags "$tmp/user.c" -o "$tmp/user-shared" \
	$pclibs 2>"$tmp/cc.err"; then
	ok "user program links with pkg-config --cflags --libs sheaf"
	run_user "shared-linked" env LD_LIBRARY_PATH="$P/lib" "$tmp/user-shared"
	deps=$(LD_LIBRARY_PATH=$P/lib ldd "$tmp/user-shared")
	if grep -qF "=> $P/lib/libsheaf.so" <<<"$deps"; then
		ok "it loaded P/lib/libsheaf.so"
	else
		bad "it did not load P/lib/libsheaf.so: $(grep sheaf <<<"$deps")"
	fi
else
	cat "$tmp/cc.err"
	bad "user program does not link with pkg-config --cflags --libs sheaf"
fi

# Static: the --static flags with -lsheaf bound to the archive (with both
# libsheaf.so and libsheaf.a in one directory, a plain -lsheaf picks the .so).
static_libs=()
for w in $pcstatic; do
	if [ "$w" = -lsheaf ]; then static_libs+=(-Wl,-Bstatic -lsheaf -Wl,-Bdynamic); else static_libs+=("$w"); fi
done
if "$CC" -std=c11 -Wall -Wextra -Werror "${san[@]}" $pcflags "$tmp/user.c" -o "$tmp/user-static" \
	"${static_libs[@]}" 2>"$tmp/cc.err"; then
	ok "user program links statically: pkg-config --static, libsheaf.a"
	dyn=$(readelf -d "$tmp/user-static")
	if grep -q 'NEEDED.*libsheaf' <<<"$dyn"; then
		bad "static program still needs libsheaf.so"
	else
		ok "static program does not need libsheaf.so"
	fi
	run_user "statically linked" env -u LD_LIBRARY_PATH "$tmp/user-static"
else
	cat "$tmp/cc.err"
	bad "user program does not link statically against libsheaf.a"
fi

# ---- the CMake package (issue 19) -------------------------------------------------------
for f in lib/cmake/Sheaf/SheafConfig.cmake lib/cmake/Sheaf/SheafConfigVersion.cmake \
	lib/cmake/Sheaf/SheafTargets.cmake bin/sheafinfo share/man/man1/sheafinfo.1 share/man/man3/sheaf.3; do
	if [ -e "$P/$f" ]; then ok "P/$f"; else bad "P/$f missing"; fi
done
if grep -q "_GNU_SOURCE" "$P"/lib/cmake/Sheaf/SheafTargets*.cmake; then
	bad "the CMake targets force _GNU_SOURCE on their users"
else
	ok "the CMake targets leave a program's feature macros alone"
fi
# Relocatable: the installed tree is moved before anything uses it.
mv "$P" "$tmp/moved"
Q=$tmp/moved
flags="${san[*]}"
if cmake -S "$src/examples/cmake-consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$Q" \
	-DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
	>"$tmp/consumer.log" 2>&1 && cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1; then
	ok "examples/cmake-consumer builds with find_package(Sheaf CONFIG) from a moved install: $(sed -n 's/^-- Sheaf/Sheaf/p' "$tmp/consumer.log")"
	run_user "CMake consumer (Sheaf::sheaf)" "$tmp/consumer/consumer"
	run_user "CMake consumer (Sheaf::sheaf-static)" "$tmp/consumer/consumer-static"
	if [ ${#san[@]} -eq 0 ]; then
		run_user "CMake consumer (Sheaf::sheaf-malloc)" "$tmp/consumer/consumer-malloc"
	else
		echo "# consumer-malloc not run: the sanitizer owns malloc in this build"
	fi
else
	cat "$tmp/consumer.log"
	bad "examples/cmake-consumer does not build against the installed CMake package"
fi
# The version file: an incompatible request is refused.
mkdir -p "$tmp/v"
printf 'cmake_minimum_required(VERSION 3.21)\nproject(v LANGUAGES C)\nfind_package(Sheaf 99 CONFIG REQUIRED)\n' >"$tmp/v/CMakeLists.txt"
if cmake -S "$tmp/v" -B "$tmp/v/b" -DCMAKE_PREFIX_PATH="$Q" >"$tmp/v.log" 2>&1; then
	bad "find_package(Sheaf 99) succeeded: the version file does not check"
elif grep -q "considered but not accepted" "$tmp/v.log"; then
	ok "find_package(Sheaf 99) is refused (SheafConfigVersion.cmake: 0.1.0)"
else
	cat "$tmp/v.log"
	bad "find_package(Sheaf 99) failed for another reason"
fi

echo "1..$checks"
echo "# $checks checks, $fails failed"
[ $fails -eq 0 ]
