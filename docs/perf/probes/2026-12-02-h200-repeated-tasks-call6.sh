#!/bin/bash
# Session 16, call 6 (bash ab/s16/call6.sh): runtime_e2e of new5 (new4 as landed: the repeated
# task found among all polls, the per-slot take without it), then the GPU-service rows of new5 and
# new3, one turn each.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) runtime_e2e (new5)"
timeout 60 ab/s16/new5/runtime_e2e > $OUT/runtime_e2e_new5.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/runtime_e2e_new5.txt | head -8
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
for v in new5 new3; do
  echo "== $(date +%T) service rows: $v"
  f=$OUT/rows_${v}_$(date +%s).txt
  timeout 40 stdbuf -oL -eL ab/s16/$v/roundtrip --bench > $f 2>&1
  grep -v " INFO " $f | sed -n '1,/the service ran/p' | grep "floor (two\|round trip:\|tasks/s\|idle:"
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
