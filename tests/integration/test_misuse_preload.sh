#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_misuse_preload.sh - misuse under LD_PRELOAD=libsheaf-malloc.so, through the C
# library's names and C++'s operator delete: free, realloc and delete of an interior
# pointer, a delayed double free, a free after a moving realloc; each is one line
# "sheaf: <kind>: cache '<class>' address <p>" and an abort (SHEAF_ON_ERROR=warn: the
# program goes on).  SHEAF_MALLOC_STATS counts every block honestly: a program that
# frees all it allocates, through reallocs that move, shows equal counts.
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"
# The misuse cases expect the default error mode, abort (README "Errors"); a user's
# SHEAF_ON_ERROR=warn would report, leak and go on.  The warn cases set it themselves.
export SHEAF_ON_ERROR=abort
# And with the free checks a user's SHEAF_FREE_CHECKS=0 would turn off.
export SHEAF_FREE_CHECKS=1
CC=${CC:-gcc}
CXX=${CXX:-g++}
command -v "$CC" >/dev/null || { echo "SKIP: $CC not installed"; exit 77; }

cat >"$WORK/bad.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";
	char *a = malloc(64), *b = malloc(64);
	if (strcmp(m, "clean")) { /* stdio's buffer is never freed: not in the clean run */
		printf("%p\n", (void *)a);
		fflush(stdout);
	}
	if (!strcmp(m, "free-interior"))
		free(a + 8);
	else if (!strcmp(m, "realloc-interior"))
		a = realloc(a + 8, 100);
	else if (!strcmp(m, "double-free")) {
		free(a);
		free(b);
		free(a);
	} else if (!strcmp(m, "realloc-freed")) {
		free(a);
		a = realloc(a, 1000);
	} else if (!strcmp(m, "free-after-move")) {
		char *q = realloc(a, 100000); /* moves: a is freed */
		free(a);
		free(q);
	} else if (!strcmp(m, "clean")) {
		for (int i = 0; i < 1000; i++) {
			char *p = malloc(10);
			p = realloc(p, 3000);   /* moves to another class */
			p = realloc(p, 200000); /* to an extent */
			p = realloc(p, 3001);   /* back */
			p = realloc(p, 3002);   /* in place */
			free(p);
		}
		free(a);
		free(b);
		free(NULL);
		char *z = realloc(NULL, 5); /* a malloc */
		z = realloc(z, 0);          /* a free (glibc's convention) */
		(void)z;
		return write(1, "clean\n", 6) == 6 ? 0 : 1;
	}
	puts("survived");
	return 0;
}
C
"$CC" -O1 -o "$WORK/bad" "$WORK/bad.c"
fail=0
n=0
check() { # description, condition
	n=$((n + 1))
	if eval "$2"; then echo "ok $n - $1"; else echo "not ok $n - $1"; fail=1; fi
}
expect() { # mode, kind, offset of the reported address from the first block
	local mode=$1 kind=$2 off=$3 rc out addr want
	set +e
	out=$(LD_PRELOAD=$LIB "$WORK/bad" "$mode" 2>"$WORK/$mode.err")
	rc=$?
	set -e
	addr=$(head -n 1 <<<"$out")
	want=$(printf '0x%x' $((addr + off)))
	check "$mode: one line, $kind at $want, abort (rc $rc: $(head -c 300 "$WORK/$mode.err"))" \
		"[ $rc -eq 134 ] && [ \$(wc -l <'$WORK/$mode.err') -eq 1 ] &&
		 grep -q \"^sheaf: $kind: cache 'malloc-64' address $want\" '$WORK/$mode.err' &&
		 ! grep -q survived <<<'$out'"
}
expect free-interior "interior pointer" 8
expect realloc-interior "interior pointer" 8
expect double-free "double free" 0
expect realloc-freed "double free" 0
expect free-after-move "double free" 0
set +e
out=$(LD_PRELOAD=$LIB SHEAF_ON_ERROR=warn "$WORK/bad" double-free 2>"$WORK/warn.err")
rc=$?
set -e
check "double free under SHEAF_ON_ERROR=warn: reported, leaked, goes on (rc $rc)" \
	'[ $rc -eq 0 ] && grep -q survived <<<"$out" && grep -q "^sheaf: double free: .*SHEAF_ON_ERROR=warn" "$WORK/warn.err"'

# Honest counts: every block freed, through moving reallocs: mallocs == frees.
line=$(LD_PRELOAD=$LIB SHEAF_MALLOC_STATS=1 "$WORK/bad" clean 2>&1 >/dev/null | grep '^sheaf-malloc:')
m=$(awk '{print $2}' <<<"$line")
f=$(awk '{print $4}' <<<"$line")
check "SHEAF_MALLOC_STATS of a clean program with moving reallocs: $line" '[ -n "$m" ] && [ "$m" -eq "$f" ] && [ "$m" -ge 4000 ]'

if command -v "$CXX" >/dev/null; then
	cat >"$WORK/del.cc" <<'CC'
#include <cstdio>
struct S { long v[8]; };
int main(int argc, char **)
{
	S *s = new S();
	std::printf("%p\n", (void *)s);
	std::fflush(stdout);
	if (argc > 1)
		operator delete(reinterpret_cast<char *>(s) + 8);
	else
		::operator delete(s, sizeof(S)); /* sized */
	std::puts("survived");
	return 0;
}
CC
	"$CXX" -O1 -w -fsized-deallocation -o "$WORK/del" "$WORK/del.cc"
	set +e
	out=$(LD_PRELOAD=$LIB "$WORK/del" interior 2>"$WORK/del.err")
	rc=$?
	set -e
	addr=$(head -n 1 <<<"$out")
	want=$(printf '0x%x' $((addr + 8)))
	check "operator delete of an interior pointer (rc $rc: $(cat "$WORK/del.err"))" \
		'[ $rc -eq 134 ] && grep -q "^sheaf: interior pointer: cache .malloc-64. address $want" "$WORK/del.err"'
	out=$(LD_PRELOAD=$LIB "$WORK/del" 2>&1)
	check "sized operator delete of a valid object: silent" '[ "$(tail -n 1 <<<"$out")" = survived ] && [ $(wc -l <<<"$out") -eq 2 ]'
fi
echo "1..$n"
exit $fail
