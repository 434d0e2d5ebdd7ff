#!/usr/bin/env bash
# test_preload_mallinfo.sh BUILD_DIR SOURCE_DIR
# Under the preload, mallinfo2/mallinfo/malloc_stats/malloc_info answer with Sheaf's
# figures (issue 19): mallinfo2().uordblks follows the program's allocations, and
# malloc_stats prints glibc's lines plus Sheaf's classes (src/malloc/preload/mallinfo.c).
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"

check=$BUILD/src/malloc/preload/sheaf-preload-mallinfo-check
out=$(preloaded "$check" 2>"$WORK/stats.err") || {
	echo "$out"
	cat "$WORK/stats.err"
	echo "FAIL: mallinfo checks under the preload"
	exit 1
}
echo "$out"
err=$(cat "$WORK/stats.err")
for want in '^Arena 0:' '^in use bytes += +[0-9]+' '^max mmap regions' '^sheaf-malloc: .*size classes' '^  malloc-224 '; do
	if ! grep -Eq "$want" <<<"$err"; then
		echo "$err"
		echo "FAIL: malloc_stats printed no line matching '$want'"
		exit 1
	fi
done
echo "ok malloc_stats prints glibc's lines and Sheaf's classes"

# When the core cannot start (SHEAF_HEAP_GB=0), glibc serves the small blocks, and its
# figures join Sheaf's: mallinfo2 said 0 bytes in use until 2026-11-29.
if out=$(SHEAF_HEAP_GB=0 preloaded "$check" fallback 2>&1); then
	echo "ok the fallback to glibc: $(grep 'uordblks grew' <<<"$out")"
else
	echo "$out"
	echo "FAIL: mallinfo2 under SHEAF_HEAP_GB=0 (glibc serves the small blocks)"
	exit 1
fi
