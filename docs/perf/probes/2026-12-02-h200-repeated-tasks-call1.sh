#!/bin/bash
# Session 16, call 1 (bash ab/s16/call1.sh): the GPU-service rows of ffa69de (base) and of
# repeated tasks taken from the poll (new), taking turns; runtime_e2e of the new code.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) runtime_e2e (new)"
timeout 150 ab/s16/new/runtime_e2e > $OUT/runtime_e2e.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked|repeated" $OUT/runtime_e2e.txt | head -8
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
for v in base new base new; do
  echo "== $(date +%T) service rows: $v"
  bin=ab/s16/$v/roundtrip
  f=$OUT/rows_${v}_$(date +%s).txt
  timeout 70 stdbuf -oL -eL $bin --bench > $f 2>&1
  grep -v " INFO " $f | sed -n '1,/the service ran/p' | grep -v "every thread\|blocks on\|^CUDA device 0, the\|as global rank\|spinning through"
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
