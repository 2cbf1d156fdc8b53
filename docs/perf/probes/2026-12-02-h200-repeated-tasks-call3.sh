#!/bin/bash
# Session 16, call 3 (bash ab/s16/call3.sh): the bundle of 9e6daa6 (repeated tasks taken from
# the poll), its GPU-service rows and those of new3 (9e6daa6 + a task's arguments unpacked only
# when it has any), taking turns; runtime_e2e of new3; then the bundle's whole suite.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/b && tar xJf gpu-bundle/bin.tar.xz -C /tmp/b bin/tandem-runtime.bench.roundtrip
for v in new new3 new new3; do
  echo "== $(date +%T) service rows: $v"
  if [ $v = new ]; then bin=/tmp/b/bin/tandem-runtime.bench.roundtrip; else bin=ab/s16/new3/roundtrip; fi
  f=$OUT/rows_${v}_$(date +%s).txt
  timeout 70 stdbuf -oL -eL $bin --bench > $f 2>&1
  grep -v " INFO " $f | sed -n '1,/the service ran/p' | grep "round trip:\|tasks/s\|idle:" 
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) runtime_e2e (new3)"
timeout 150 ab/s16/new3/runtime_e2e > $OUT/runtime_e2e_new3.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/runtime_e2e_new3.txt | head -8
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
echo "== $(date +%T) suite"
TANDEM_BINARY_TIMEOUT=150 bash gpu-bundle/run.sh --parts tests,python,cpp > $OUT/suite.txt 2>&1
echo "run.sh rc=$?"
sed -n '/== summary/,$p' $OUT/suite.txt | tail -48
echo "== $(date +%T) done"
