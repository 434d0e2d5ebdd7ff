#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_git.sh - git under libsheaf-malloc.so on a repository of 3,000
# commits that the test creates: git fast-import of a generated stream (two
# branches, merges, 200 files edited, renamed and deleted), then log, diff,
# blame, rev-list, a full repack with delta search (threads, zlib, large
# buffers), gc and fsck, all preloaded.  The results must equal glibc's run
# on the same repository.
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"
command -v git >/dev/null || { echo "skipped: git not installed"; exit 0; }

export GIT_CONFIG_NOSYSTEM=1 HOME=$WORK GIT_AUTHOR_DATE= GIT_COMMITTER_DATE=
export LC_ALL=C TZ=UTC

# A fast-import stream: 3,000 commits; every commit edits a few of 200 files,
# some commits add, rename or delete files, every 100th merges a side branch.
awk 'BEGIN {
	srand(11);
	nfiles = 200; mark = 0; t = 1500000000;
	for (c = 1; c <= 3000; c++) {
		br = (c % 100 < 90) ? "main" : "side";
		printf "commit refs/heads/%s\nmark :%d\n", br, c;
		printf "author A U Thor <a@example.org> %d +0000\n", t + c * 60;
		printf "committer C O Mitter <c@example.org> %d +0000\n", t + c * 60;
		msg = sprintf("commit %d on %s: change %d files", c, br, 1 + c % 5);
		printf "data %d\n%s\n", length(msg), msg;
		if (c > 1 && lastmark[br] > 0) printf "from :%d\n", lastmark[br];
		else if (c > 1) printf "from :%d\n", lastmark["main"];
		if (br == "main" && c % 100 == 0 && lastmark["side"] > 0) printf "merge :%d\n", lastmark["side"];
		for (k = 0; k <= c % 5; k++) {
			f = int(rand() * nfiles);
			body = "";
			n = 5 + int(rand() * 40);
			for (l = 0; l < n; l++) body = body sprintf("line %d of file %d at commit %d: %s\n", l, f, c, substr("the quick brown fox jumps over the lazy dog", 1 + l % 20));
			printf "M 100644 inline dir%d/file%d.txt\ndata %d\n%s\n", f % 10, f, length(body), body;
		}
		# Delete or rename the file just written (it exists on this branch).
		if (c % 37 == 0) printf "D dir%d/file%d.txt\n", f % 10, f;
		else if (c % 53 == 0) printf "R dir%d/file%d.txt dir%d/moved%d.txt\n", f % 10, f, f % 10, c;
		printf "\n";
		lastmark[br] = c;
	}
}' >"$WORK/stream"
echo "stream: $(wc -c <"$WORK/stream") bytes"

run_git() { # run_git DIR  -> prints a summary of the repository
	local d=$1
	git -C "$d" log --oneline --all | wc -l
	git -C "$d" log --stat --format='%H %s' main | md5sum
	git -C "$d" rev-list --count --all
	git -C "$d" diff --stat main~500 main | tail -n 1
	git -C "$d" blame -s main -- dir3/file13.txt 2>/dev/null | md5sum
	git -C "$d" log --format=%H -S'file 42 at commit 2' --all | md5sum
	git -C "$d" repack -q -a -d -f --window=10 --depth=10
	git -C "$d" gc --quiet --prune=now
	git -C "$d" count-objects -v | grep -E '^(count|in-pack|garbage)'
	git -C "$d" fsck --full --strict --no-progress 2>&1 | md5sum
	git -C "$d" archive --format=tar main | md5sum
}

for kind in glibc sheaf; do
	git init -q -b main "$WORK/$kind"
	t0=$SECONDS
	if [ $kind = glibc ]; then
		git -C "$WORK/$kind" fast-import --quiet <"$WORK/stream"
		run_git "$WORK/$kind" >"$WORK/$kind.out"
	else
		preloaded git -C "$WORK/$kind" fast-import --quiet <"$WORK/stream"
		export -f run_git
		preloaded bash -c 'run_git "$1"' _ "$WORK/$kind" >"$WORK/$kind.out"
	fi
	echo "$kind: $((SECONDS - t0)) s"
done
cat "$WORK/sheaf.out"
if ! cmp -s "$WORK/glibc.out" "$WORK/sheaf.out"; then
	echo "FAIL: results differ from the glibc run" >&2
	diff "$WORK/glibc.out" "$WORK/sheaf.out" >&2 || true
	exit 1
fi
[ "$(sed -n 3p "$WORK/sheaf.out")" -eq 3000 ]
require_served 1000000 git
echo "PASS"
