#!/bin/bash
# SHEAF_STATS=1 prints every cache's statistics at exit as text; SHEAF_STATS=json as
# JSON that parses, with the K§6.1 event names and the gauges.
set -euo pipefail
bin="$1/tests/unit_test_core_layers"
# Under the options of that test's .env sidecar (the default policy it checks): under a
# user's SHEAF_KERNEL_COMPAT=1 its checks failed, and this script ended without a word.
export SHEAF_KERNEL_COMPAT=0 SHEAF_SHEAF_CAPACITY=0 SHEAF_BARN_MAX_FULL=0 SHEAF_BARN_MAX_EMPTY=0
out=$(SHEAF_STATS=1 "$bin" 2>&1 >/dev/null)
grep -q "^cache sheaf-meta-64 " <<<"$out" || { echo "not ok - no text statistics at exit"; exit 1; }
grep -Eq "^  ALLOC_FASTPATH +: [0-9]+" <<<"$out" || { echo "not ok - no ALLOC_FASTPATH line"; exit 1; }
echo "ok 1 - text statistics at exit"
json=$(SHEAF_STATS=json "$bin" 2>&1 >/dev/null)
python3 - "$json" <<'PY'
import json, sys
caches = json.loads(sys.argv[1])
assert isinstance(caches, list) and caches, "empty"
for c in caches:
    for k in ("ALLOC_FASTPATH", "FREE_SLOWPATH", "BARN_GET", "SHEAF_REFILL"):
        assert k in c["events"], k
    for k in ("slabs", "objects_inuse", "sheaf_capacity", "barn_locks"):
        assert k in c["gauges"], k
print("ok 2 - JSON statistics at exit parse (%d caches)" % len(caches))
PY
echo "1..2"
