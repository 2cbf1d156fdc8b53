#!/bin/bash
# Session 16, call 5 (bash ab/s16/call5.sh): the GPU-service rows of new3 (ee306f8) and new4
# (new3 + the repeated task of the last-taken slot found before the select, a probe), taking
# turns; runtime_e2e of new4.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) runtime_e2e (new4)"
timeout 100 ab/s16/new4/runtime_e2e > $OUT/runtime_e2e_new4.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/runtime_e2e_new4.txt | head -8
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
for v in new3 new4 new3 new4; do
  echo "== $(date +%T) service rows: $v"
  f=$OUT/rows_${v}_$(date +%s).txt
  timeout 45 stdbuf -oL -eL ab/s16/$v/roundtrip --bench > $f 2>&1
  grep -v " INFO " $f | sed -n '1,/the service ran/p' | grep "floor (two\|round trip:\|tasks/s\|idle:"
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
