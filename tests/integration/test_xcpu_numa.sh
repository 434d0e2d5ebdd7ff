#!/bin/bash
# Issue 3 point 4 (D3): the producer/consumer run on a fake 2-node topology whose
# consumer node (CPU 1 -> node 1) is memoryless.
set -e
bin="$1/tests/integration_test_xcpu"
# The default policy is what is measured (D3, D6): a user's SHEAF_KERNEL_COMPAT=1 or
# SHEAF_SHEAF_CAPACITY=1 would change it (test_xcpu.env sets the same).
SHEAF_FAKE_NUMA="2:memoryless=1" SHEAF_KERNEL_COMPAT=0 SHEAF_SHEAF_CAPACITY=0 \
	SHEAF_BARN_MAX_FULL=0 SHEAF_BARN_MAX_EMPTY=0 exec "$bin" memoryless
