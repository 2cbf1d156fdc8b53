#!/bin/bash
# Session 19, call D: runtime_e2e of the working tree (the ping-pong after a pause among its
# tests), on CUDA.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) runtime_e2e"
timeout 200 ab/s19/final/runtime_e2e > $OUT/runtime_e2e.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked|pingpong" $OUT/runtime_e2e.txt | head -12
echo "== $(date +%T) done"
