#!/bin/bash
# Session 15, call 2 (bash ab/s15/call2.sh): the slot probe (dense modes added); the GPU-service
# rows of dec0fc0 (base) and of the grouped inbox heads (new), taking turns; runtime_e2e on the new
# code; blob_served's bounded-memory test five times at dec0fc0, and one served get's memory.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) slot probe"
timeout 60 ab/s15/slot_probe 100000 > $OUT/probe.txt 2>&1; cat $OUT/probe.txt
for v in base new base new; do
  echo "== $(date +%T) service rows: $v"
  if [ $v = base ]; then bin=ab/s15/base/bin/tandem-runtime.bench.roundtrip; else bin=ab/s15/new/roundtrip; fi
  f=$OUT/rows_${v}_$(date +%s).txt
  timeout 70 stdbuf -oL -eL $bin --bench > $f 2>&1
  grep -v " INFO " $f | sed -n '1,/the service ran/p' | grep -v "every thread\|blocks on\|^CUDA device 0, the\|as global rank\|spinning through"
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) runtime_e2e (new)"
timeout 120 ab/s15/new/runtime_e2e > $OUT/runtime_e2e.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/runtime_e2e.txt | head -8
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
echo "== $(date +%T) blob_served x5 (dec0fc0)"
export TANDEM_BIN_DIR=$PWD/ab/s15/base/bin
for i in 1 2 3 4 5; do
  timeout 60 ab/s15/base/bin/tandem-cli.test.blob_served large_pipes > $OUT/blob_served_$i.txt 2>&1; echo "run $i rc=$?"; grep "held\|test result" $OUT/blob_served_$i.txt | head -3
done
bash ab/s15/get_memory.sh > $OUT/get_memory.txt 2>&1; cat $OUT/get_memory.txt | tail -20
echo "== $(date +%T) done"; ls /dev/shm | grep -i tandem | head
