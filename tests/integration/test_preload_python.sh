#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_preload_python.sh - Python 3 under libsheaf-malloc.so with
# PYTHONMALLOC=malloc (every object allocation goes to malloc, not pymalloc):
# a workload of its own (objects of every size, large buffers, realloc-heavy
# strings and lists, threads that free each other's objects, ctypes calling
# the C allocator directly, a fork), then modules of the standard library's
# regression suite (Debian libpython3.11-testsuite).
. "$2/src/malloc/preload/preload_test_lib.sh" "$1" "$2"
PY=/usr/bin/python3
[ -x $PY ] || { echo "skipped: $PY not installed"; exit 0; }
$PY -c 'import test.support' 2>/dev/null ||
	{ echo "skipped: the regression suite (libpython3.11-testsuite) is not installed"; exit 0; }
export PYTHONMALLOC=malloc PYTHONDONTWRITEBYTECODE=1

cat >"$WORK/workload.py" <<'PY'
import ctypes, ctypes.util, gc, hashlib, json, os, random, re, threading, queue, zlib

random.seed(5)
# Objects of every size class and beyond, kept and dropped at random.
keep = []
for i in range(200000):
    n = random.choice((1, 7, 30, 100, 500, 3000, 20000, 70000)) if i % 50 == 0 else random.randrange(64)
    keep.append(bytearray(n))
    if len(keep) > 5000:
        del keep[random.randrange(len(keep))]
# realloc: growing strings, lists and bytearrays.
s = ""
for i in range(20000):
    s += str(i)
b = bytearray()
for i in range(3000):
    b += os.urandom(i % 700)
big = [0] * 10
for i in range(18):
    big = big * 2
assert len(big) == 10 * 2 ** 18
# Dicts, JSON, regular expressions, compression, hashing.
d = {str(i): [i, {"x": i * 1.5}] for i in range(100000)}
blob = json.dumps(d)
assert json.loads(blob) == d
assert len(re.findall(r'"(\d*7)"', blob)) == 10000
z = zlib.compress(blob.encode() * 4, 9)
assert zlib.decompress(z) == blob.encode() * 4
assert hashlib.sha256(z).hexdigest()
# Threads: objects made in one thread and freed in another.
q = queue.Queue(maxsize=1000)
def producer():
    for i in range(60000):
        q.put([i] * (i % 40) + [bytes(i % 3000)])
    q.put(None)
def consumer(out):
    n = 0
    while (x := q.get()) is not None:
        n += len(x)
    out.append(n)
res = []
ts = [threading.Thread(target=producer), threading.Thread(target=consumer, args=(res,))]
for t in ts: t.start()
for t in ts: t.join()
assert res and res[0] > 0
# The C allocator through ctypes (the preloaded malloc/realloc/free).
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.realloc.restype = ctypes.c_void_p
libc.realloc.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
libc.free.argtypes = (ctypes.c_void_p,)
libc.malloc_usable_size.restype = ctypes.c_size_t
libc.malloc_usable_size.argtypes = (ctypes.c_void_p,)
for n in (1, 100, 5000, 40000, 3 << 20):
    p = libc.malloc(n)
    ctypes.memset(p, 0x41, n)
    assert libc.malloc_usable_size(p) >= n
    p = libc.realloc(p, n * 2)
    assert ctypes.string_at(p, n) == b"A" * n
    libc.free(p)
# fork with threads alive, then allocation in the child.
t = threading.Thread(target=lambda: [bytearray(100) for _ in range(200000)])
t.start()
pid = os.fork()
if pid == 0:
    os._exit(0 if len(json.dumps({i: str(i) for i in range(50000)})) > 0 else 1)
t.join()
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 0
gc.collect()
print("workload ok")
PY

t0=$SECONDS
preloaded $PY "$WORK/workload.py"
t1=$SECONDS
echo "workload: $((t1 - t0)) s"
require_served 1000000 python3

# Regression-test modules chosen to exercise the allocator (containers,
# strings, threads, GC) and to finish in well under a minute on 2 vCPUs
# (test_weakref passes too but takes 10-20 s, mostly waiting).  -j0 would
# run them in parallel worker processes, which the counter also covers, but
# serial output is easier to read in CI logs.
MODULES="test_dict test_list test_set test_tuple test_unicode test_bytes test_json test_re
	test_collections test_itertools test_functools test_sort test_heapq test_deque
	test_string test_math test_gc test_threading test_array"
: >"$STATS"
preloaded $PY -m test -q $MODULES 2>&1 | tail -n 15
rc=${PIPESTATUS[0]}
echo "regression suite: $((SECONDS - t1)) s, exit status $rc"
[ "$rc" -eq 0 ] || { echo "FAIL: python3 -m test failed under the preload" >&2; exit 1; }
require_served 10000000 python3
echo "PASS"
