#!/bin/bash
# Session 21, call 1: what a pause costs a first read by page and mapping (pagewalk.cu), then the
# roundtrip bench's GPU-service rows, A (12d5d9a) and H (ab/s21/thp-segment-probe.patch: the device
# segment a private anonymous mapping advised MADV_HUGEPAGE), taking turns.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo; nproc; lscpu | grep -i "numa node\|L3" | head -4
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/shmem_enabled /sys/kernel/mm/transparent_hugepage/defrag
echo "== $(date +%T) pagewalk"
nvcc -O2 -o /tmp/pagewalk ab/s21/pagewalk.cu && /tmp/pagewalk
for v in A H A H A H; do
  echo "== $(date +%T) $v"
  f=$OUT/rows_${v}_$(date +%s).txt
  stdbuf -oL -eL ab/s21/roundtrip_$v --bench > $f 2>&1 &
  pid=$!
  for i in $(seq 1 90); do
    sleep 1
    grep -q "the service ran" $f && break
  done
  grep AnonHuge /proc/$pid/smaps_rollup
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  grep -v " INFO " $f | sed -n '/GPU service/,/the service ran/p' | grep "floor\|round trip:\|idle\|clock saw\|spinning\|tasks/s" | cut -c1-250 | head -24
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
