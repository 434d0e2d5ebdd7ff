#!/bin/bash
# Issue 3 point 4 (D3): the producer/consumer run on a fake 2-node topology whose
# consumer node (CPU 1 -> node 1) is memoryless.
set -e
bin="$1/tests/integration_test_xcpu"
SHEAF_FAKE_NUMA="2:memoryless=1" exec "$bin" memoryless
