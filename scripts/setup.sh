#!/usr/bin/env bash
# setup.sh - install what Sheaf needs to build, test and benchmark, on Debian 12.
#
# Idempotent: asks dpkg which packages are missing and installs only those, so
# on a prepared machine it returns at once without touching apt (and without
# root).  Runs `apt-get update` only when something must be installed.
#
# Usage: scripts/setup.sh [--check]
#   --check   only list what is missing; exit 1 if anything is.
set -euo pipefail

# Why each package is here (grep the tree before removing one):
PACKAGES=(
	build-essential  # gcc, g++, make, binutils (objdump for tools/fastpath-golden.sh)
	cmake ninja-build pkg-config git
	liburcu-dev      # RCU-deferred free (src/rcu/rcu_free.c), linked by libsheaf
	libnuma-dev      # topology helpers
	valgrind         # memcheck runs of the tests
	clang            # second compiler, for a clang build of the tree
	libclang-rt-14-dev  # clang's sanitizer and libFuzzer runtimes: the fuzz preset (tests/fuzz)
	clang-format     # .clang-format at the root
	python3 python3-matplotlib  # benchmark report and plots (issue 8)
	# Peers measured by the benchmarks (issue 8), loaded with LD_PRELOAD or dlopen.
	libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4
	dpdk-dev libdpdk-dev  # rte_mempool peer for the object-cache API
	# Real programs run under the preload library (issue 6).
	sqlite3 libpython3.11-testsuite
	# Manual pages (issue 19): test_man_pages formats them with groff,
	# scripts/test-package.sh finds the installed ones with man.
	groff-base man-db
)

check_only=0
case "${1:-}" in
--check) check_only=1 ;;
"") ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
	echo "setup: this script expects Debian 12 (dpkg and apt-get); install by hand:" >&2
	echo "  ${PACKAGES[*]}" >&2
	exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
	# A multi-arch package may print one status per architecture; any "installed" will do.
	if ! dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "setup: all ${#PACKAGES[@]} required packages are installed"
	exit 0
fi
echo "setup: missing: ${missing[*]}"
if [ $check_only -eq 1 ]; then
	exit 1
fi

# Root runs apt directly; otherwise sudo if we have it.
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		echo "setup: not root and no sudo; as root, run:" >&2
		echo "  apt-get update && apt-get install ${missing[*]}" >&2
		exit 1
	fi
fi

log=$(mktemp "${TMPDIR:-/tmp}/sheaf-setup.XXXXXX")
apt() {
	# Wait for a dpkg lock held by, say, unattended-upgrades instead of failing at once.
	if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get -q -y -o DPkg::Lock::Timeout=300 "$@" >>"$log" 2>&1; then
		echo "setup: 'apt-get $*' failed; last lines of $log:" >&2
		tail -n 25 "$log" >&2
		exit 1
	fi
}

t0=$(date +%s)
echo "setup: apt-get update"
apt update
echo "setup: apt-get install ${missing[*]}"
apt install --no-install-recommends "${missing[@]}"

# Check again: apt can succeed and still leave a name unresolved (a renamed package).
still=()
for p in "${missing[@]}"; do
	dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || still+=("$p")
done
if [ ${#still[@]} -ne 0 ]; then
	echo "setup: still missing after apt-get install: ${still[*]} (log: $log)" >&2
	exit 1
fi
rm -f "$log"
echo "setup: installed ${#missing[@]} package(s) in $(($(date +%s) - t0)) s"
