#!/bin/bash
# Session 20, call 3 (bash ab/s20/call3.sh): the bundle of 609702b:
# its whole suite (tests, the Python package's GPU tests and benches, the C++ examples).
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) suite"
TANDEM_BINARY_TIMEOUT=150 timeout 420 bash gpu-bundle/run.sh --parts tests,python,cpp > $OUT/suite.txt 2>&1
echo "run.sh rc=$?"
sed -n '/== summary/,$p' $OUT/suite.txt | tail -48
echo "== $(date +%T) done"
