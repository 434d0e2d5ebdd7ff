#!/usr/bin/env bash
# test_debug_sanitizers.sh - memcheck and ASan see inside Sheaf (src/slab/track.h,
# issue 7): a program with the heap bugs of the misuse tests (use after free,
# read after free, overflow, double free, uninitialised read, and the same
# through sheaf_malloc) is run
#   - under valgrind --error-exitcode against a Sheaf built with
#     SHEAF_VALGRIND=ON, and
#   - built with -fsanitize=address against a Sheaf built with ASan,
# and each run must report its bug the way the tool reports it for glibc
# malloc (kind of access, "inside a block ... free'd", "after a block").  A
# clean run of the same program, with every API and several threads, must
# produce no report at all under either tool (no false positives).
#
# Usage: test_debug_sanitizers.sh BUILD_DIR SOURCE_DIR
# The two instrumented libraries are built (once, incrementally) under
# BUILD_DIR/debug-tools/; an ASan BUILD_DIR is reused as it is.
set -uo pipefail
# The double-free case expects the default error mode, abort (README "Errors"); a user's
# SHEAF_ON_ERROR=warn would report, leak and go on.
export SHEAF_ON_ERROR=abort
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$build/debug-tools
mkdir -p "$work"
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; [ -n "${3:-}" ] && sed 's/^/#   /' "$3" | head -40; fi; }

cat >"$work/bugs.c" <<'EOF'
/* A program with one heap bug per mode (test_debug_sanitizers.sh). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sheaf.h"
#include "sheaf_debug.h"
#include "sheaf_malloc.h"

static volatile char sink;

static void *worker(void *arg)
{
	struct sheaf_cache *c = arg;
	void *v[500];
	for (int r = 0; r < 20; r++) {
		for (int i = 0; i < 500; i++) {
			v[i] = sheaf_cache_alloc(c);
			memset(v[i], r, 40);
		}
		for (int i = 0; i < 500; i++)
			sheaf_cache_free(c, v[i]);
		char *m = sheaf_malloc(100 + r);
		memset(m, 1, 100 + r);
		sheaf_free(m);
	}
	return NULL;
}

static const struct sheaf_debug_obj_descr descr = { .name = "clean_obj" };

/* Every API, several threads, no bug: the tools must stay silent. */
static int clean(struct sheaf_cache *c)
{
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, worker, c);
	worker(c);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	void *v[300];
	if (sheaf_cache_alloc_bulk(c, 300, v) != 300)
		return 1;
	for (int i = 0; i < 300; i++)
		memset(v[i], 2, 40);
	sheaf_cache_free_bulk(c, 300, v);
	struct sheaf_prefilled *p = sheaf_cache_prefill(c, 10);
	for (int i = 0; i < 10; i++) {
		char *o = sheaf_cache_alloc_from(c, p);
		memset(o, 3, 40);
		sheaf_cache_free(c, o);
	}
	sheaf_cache_return(c, p);
	struct sheaf_cache_args a = { .flags = SHEAF_DEBUG_ALL };
	struct sheaf_cache *d = sheaf_cache_create("bugs-debug", 24, &a);
	for (int i = 0; i < 100; i++) {
		char *o = sheaf_cache_alloc(d);
		memset(o, 4, 24);
		sheaf_debug_object_init(o, &descr);
		sheaf_debug_object_activate(o, &descr);
		sheaf_debug_object_deactivate(o, &descr);
		sheaf_cache_free(d, o);
	}
	for (int i = 0; i < 200; i++) {
		char *o = sheaf_cache_alloc(c);
		memset(o, 5, 40);
		sheaf_cache_free_rcu(c, o);
	}
	sheaf_cache_rcu_barrier(c);
	for (int i = 0; i < 200; i++) {
		char *o = sheaf_cache_alloc(c);
		memset(o, 6, 40);
		sheaf_cache_free(c, o);
	}
	char *z = sheaf_calloc(10, 10);
	for (int i = 0; i < 100; i++)
		if (z[i])
			return 1;
	z = sheaf_realloc(z, 5000);
	sheaf_free(z);
	sheaf_cache_shrink(c);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "clean";
	struct sheaf_cache *c = sheaf_cache_create("bugs", 40, NULL);
	char *o = sheaf_cache_alloc(c);
	memset(o, 0, 40);
	if (!strcmp(mode, "clean"))
		return clean(c);
	if (!strcmp(mode, "uaf-write")) {
		sheaf_cache_free(c, o);
		o[5] = 1;
	} else if (!strcmp(mode, "uaf-read")) {
		sheaf_cache_free(c, o);
		sink = o[7];
	} else if (!strcmp(mode, "overflow")) {
		o[40] = 1; /* one past the 40-byte object */
	} else if (!strcmp(mode, "double-free")) {
		sheaf_cache_free(c, o);
		sheaf_cache_free(c, o);
	} else if (!strcmp(mode, "uninit")) {
		char *u = sheaf_cache_alloc(c);
		if (u[3] == 42) /* never written */
			puts("42");
	} else if (!strcmp(mode, "malloc-uaf")) {
		char *m = sheaf_malloc(200);
		sheaf_free(m);
		m[100] = 1;
	} else {
		return 2;
	}
	puts("done");
	return 0;
}
EOF

pc_libs=$(pkg-config --libs liburcu-memb liburcu-mb liburcu-qsbr)

# configure_lib DIR EXTRA-CMAKE-ARGS...: build only the static library.
build_lib() {
	local dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			-DSHEAF_BUILD_TESTS=OFF -DSHEAF_BUILD_BENCH=OFF "$@" >"$dir.log" 2>&1 || return 1
	fi
	ninja -C "$dir" sheaf_static >>"$dir.log" 2>&1
}

# ---- memcheck ---------------------------------------------------------------
if ! command -v valgrind >/dev/null; then
	bad "valgrind is not installed (scripts/setup.sh installs it)"
else
	vdir=$work/valgrind
	mkdir -p "$vdir"
	if build_lib "$vdir" -DSHEAF_VALGRIND=ON -DSHEAF_SANITIZE=; then
		ok "Sheaf built with SHEAF_VALGRIND=ON"
	else
		bad "Sheaf built with SHEAF_VALGRIND=ON"
		sed 's/^/#   /' "$vdir.log" | tail -20
	fi
	if gcc -std=gnu11 -g -O1 -D_GNU_SOURCE -I"$src/include" "$work/bugs.c" "$vdir/libsheaf.a" \
		$pc_libs -lpthread -o "$work/bugs-vg" 2>"$work/cc-vg.log"; then
		ok "bug program linked against the memcheck-annotated Sheaf"
	else
		bad "bug program linked against the memcheck-annotated Sheaf"
		cat "$work/cc-vg.log"
	fi
	vg() { # mode -> $work/vg-mode.log, exit status in $rc
		timeout 120 valgrind -q --error-exitcode=99 --leak-check=no \
			"$work/bugs-vg" "$1" >"$work/vg-$1.out" 2>"$work/vg-$1.log"
		rc=$?
	}
	vg clean
	check '[ $rc -eq 0 ] && ! grep -q "Invalid\|uninitialised" "$work/vg-clean.log"' \
		"memcheck: a clean run with every API and 4 threads reports nothing (rc $rc)" "$work/vg-clean.log"
	vg uaf-write
	check '[ $rc -eq 99 ] && grep -q "Invalid write of size 1" "$work/vg-uaf-write.log" &&
		grep -q "Address 0x[0-9a-f]* is 5 bytes inside a block of size 40 free.d" "$work/vg-uaf-write.log"' \
		"memcheck: write after sheaf_cache_free (rc $rc)" "$work/vg-uaf-write.log"
	check 'grep -q "by 0x[0-9A-F]*: main (bugs.c" "$work/vg-uaf-write.log" &&
		grep -q "sheaf_cache_free" "$work/vg-uaf-write.log"' \
		"memcheck: the report has the access and the free stack" "$work/vg-uaf-write.log"
	vg uaf-read
	check '[ $rc -eq 99 ] && grep -q "Invalid read of size 1" "$work/vg-uaf-read.log" &&
		grep -q "7 bytes inside a block of size 40 free.d" "$work/vg-uaf-read.log"' \
		"memcheck: read after free (rc $rc)" "$work/vg-uaf-read.log"
	vg overflow
	check '[ $rc -eq 99 ] && grep -q "Invalid write of size 1" "$work/vg-overflow.log" &&
		grep -q "0 bytes after a block of size 40 alloc.d" "$work/vg-overflow.log"' \
		"memcheck: overflow past the object (rc $rc)" "$work/vg-overflow.log"
	vg double-free
	# memcheck reports the second FREELIKE_BLOCK; Sheaf may then also catch it
	# (top of the sheaf) and abort, as it does without Valgrind.
	check '{ [ $rc -eq 99 ] || [ $rc -eq 134 ]; } && grep -q "Invalid free()" "$work/vg-double-free.log" &&
		grep -q "0 bytes inside a block of size 40 free.d" "$work/vg-double-free.log"' \
		"memcheck: double free (rc $rc)" "$work/vg-double-free.log"
	vg uninit
	check '[ $rc -eq 99 ] && grep -q "depends on uninitialised value" "$work/vg-uninit.log"' \
		"memcheck: a new object is uninitialised, as malloc's (rc $rc)" "$work/vg-uninit.log"
	vg malloc-uaf
	check '[ $rc -eq 99 ] && grep -q "Invalid write of size 1" "$work/vg-malloc-uaf.log" &&
		grep -q "inside a block of size [0-9]* free.d" "$work/vg-malloc-uaf.log"' \
		"memcheck: write after sheaf_free (rc $rc)" "$work/vg-malloc-uaf.log"
fi

# ---- AddressSanitizer -------------------------------------------------------
if grep -q '^SHEAF_SANITIZE:STRING=address' "$build/CMakeCache.txt" 2>/dev/null &&
	[ -f "$build/libsheaf.a" ]; then
	alib=$build/libsheaf.a
	ok "ASan: reusing the ASan build $build"
else
	adir=$work/asan
	mkdir -p "$adir"
	if build_lib "$adir" -DSHEAF_SANITIZE=address; then
		ok "Sheaf built with SHEAF_SANITIZE=address"
	else
		bad "Sheaf built with SHEAF_SANITIZE=address"
		sed 's/^/#   /' "$adir.log" | tail -20
	fi
	alib=$adir/libsheaf.a
fi
if gcc -std=gnu11 -g -O1 -D_GNU_SOURCE -fsanitize=address,undefined -fno-omit-frame-pointer \
	-I"$src/include" "$work/bugs.c" "$alib" $pc_libs -lpthread -o "$work/bugs-asan" \
	2>"$work/cc-asan.log"; then
	ok "bug program built with -fsanitize=address"
else
	bad "bug program built with -fsanitize=address"
	cat "$work/cc-asan.log"
fi
as() {
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1 \
		timeout 120 "$work/bugs-asan" "$1" >"$work/asan-$1.out" 2>"$work/asan-$1.log"
	rc=$?
}
as clean
check '[ $rc -eq 0 ] && ! grep -q "ERROR: AddressSanitizer" "$work/asan-clean.log"' \
	"ASan: a clean run with every API and 4 threads reports nothing (rc $rc)" "$work/asan-clean.log"
as uaf-write
check '[ $rc -ne 0 ] && grep -q "ERROR: AddressSanitizer: use-after-poison" "$work/asan-uaf-write.log" &&
	grep -q "WRITE of size 1" "$work/asan-uaf-write.log" && grep -q "in main .*bugs.c" "$work/asan-uaf-write.log"' \
	"ASan: write after sheaf_cache_free (rc $rc)" "$work/asan-uaf-write.log"
as uaf-read
check '[ $rc -ne 0 ] && grep -q "use-after-poison" "$work/asan-uaf-read.log" &&
	grep -q "READ of size 1" "$work/asan-uaf-read.log"' \
	"ASan: read after free (rc $rc)" "$work/asan-uaf-read.log"
as overflow
check '[ $rc -ne 0 ] && grep -q "use-after-poison" "$work/asan-overflow.log" &&
	grep -q "WRITE of size 1" "$work/asan-overflow.log"' \
	"ASan: overflow into the slot padding (rc $rc)" "$work/asan-overflow.log"
as double-free
check '[ $rc -ne 0 ] && grep -q "sheaf: double free: cache .bugs. address 0x" "$work/asan-double-free.log" &&
	! grep -q "^done" "$work/asan-double-free.out"' \
	"ASan: double free found through the shadow and reported by Sheaf (rc $rc)" "$work/asan-double-free.log"
as malloc-uaf
check '[ $rc -ne 0 ] && grep -q "use-after-poison" "$work/asan-malloc-uaf.log"' \
	"ASan: write after sheaf_free (rc $rc)" "$work/asan-malloc-uaf.log"

echo "1..$n"
[ $fails -eq 0 ]
