#!/bin/bash
# Session 20, call 4 (bash ab/s20/call4.sh): the bundle of 609702b's benches (run.sh --parts benches).
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) benches"
TANDEM_BINARY_TIMEOUT=120 timeout 380 bash gpu-bundle/run.sh --parts benches > $OUT/benches.txt 2>&1
echo "run.sh rc=$?"
grep -a -E "BELOW|meets|target|^== |binaries|host threads" $OUT/benches.txt | grep -v " INFO " | cut -c1-230 > $OUT/rows.txt
cat $OUT/rows.txt | tail -130
echo "== $(date +%T) done"
echo "perf: $(which perf 2>/dev/null || echo none)"
