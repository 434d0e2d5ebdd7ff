#!/bin/bash
# SPDX-License-Identifier: MIT
# A setuid (secure-execution, AT_SECURE) program ignores every SHEAF_* variable, as
# glibc ignores its malloc tunables there: SHEAF_ON_ERROR=warn cannot weaken the
# checks of a privileged program.  A setuid-root copy of a program that frees an
# object twice runs as an unprivileged user with SHEAF_ON_ERROR=warn: it must still
# abort.  The same copy without the setuid bit, same user, same variable, goes on
# (so the variable does reach an ordinary program).
#
# Needs root (to make a setuid-root copy) and a filesystem mounted without nosuid;
# otherwise the test is skipped (exit 77, counted as a skip by ctest).
set -euo pipefail
build=$1
prog="$build/tests/misuse_double_free"
[ -x "$prog" ] || { echo "not ok - $prog not built"; exit 1; }
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: not root, cannot make a setuid-root copy"
	exit 77
fi
user=nobody
id "$user" >/dev/null 2>&1 || { echo "SKIP: no user '$user'"; exit 77; }
uid=$(id -u "$user")
gid=$(id -g "$user")
dir=$(mktemp -d /tmp/sheaf-setuid.XXXXXX)
trap 'rm -rf "$dir"' EXIT
command -v setpriv >/dev/null || { echo "SKIP: setpriv (util-linux) not installed"; exit 77; }
opts=$(findmnt -n -o OPTIONS -T "$dir" 2>/dev/null | tr ',' '\n')
if grep -qx -e nosuid -e noexec <<<"$opts"; then
	echo "SKIP: $dir is on a filesystem mounted nosuid or noexec"
	exit 77
fi
chmod 755 "$dir"
cp "$prog" "$dir/plain"
cp "$prog" "$dir/suid"
chown root:root "$dir/plain" "$dir/suid"
chmod 755 "$dir/plain"
chmod 4755 "$dir/suid"
as_user() { setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"; }
fail=0
n=0
check() { # name, condition
	n=$((n + 1))
	if eval "$2"; then echo "ok $n - $1"; else echo "not ok $n - $1"; fail=1; fi
}
set +e
out=$(as_user env SHEAF_ON_ERROR=warn "$dir/plain" 2>"$dir/plain.err")
rc=$?
check "an ordinary program honours SHEAF_ON_ERROR=warn (rc $rc, $(head -c 200 "$dir/plain.err"))" \
	'[ $rc -eq 0 ] && [ "$out" = survived ] && grep -q "^sheaf: double free: cache .setuid-demo." "$dir/plain.err"'
out=$(as_user env SHEAF_ON_ERROR=warn SHEAF_OPTIONS=ON_ERROR=warn SHEAF_FREE_CHECKS=0 "$dir/suid" 2>"$dir/suid.err")
rc=$?
check "the setuid copy ignores SHEAF_* and aborts at the double free (rc $rc, $(head -c 200 "$dir/suid.err"))" \
	'[ $rc -eq 134 ] && [ -z "$out" ] && grep -q "^sheaf: double free: cache .setuid-demo." "$dir/suid.err" && ! grep -q "SHEAF_ON_ERROR=warn" "$dir/suid.err"'
ids=$(as_user "$dir/suid" ids)
check "the copy really ran setuid as $user ($ids)" '[ "$ids" = "euid 0 ruid $uid" ]'
set -e
echo "1..$n"
exit $fail
