#!/bin/bash
# Session 20, call 1: the roundtrip bench's GPU-service rows, A (609702b) and W (docs/perf/probes/2026-12-03-worker-warms-host-route.patch: the device's
# worker warming the host route between its naps), taking turns; each run is stopped once its
# GPU-service section has printed.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo; nproc; lscpu | grep -i "numa node\|L3\|L2" | head -6
echo "cldemote: $(grep -c -w cldemote /proc/cpuinfo) cpus"
for v in A W A W A W; do
  echo "== $(date +%T) $v"
  f=$OUT/rows_${v}_$(date +%s).txt
  stdbuf -oL -eL ab/s20/roundtrip_$v --bench > $f 2>&1 &
  pid=$!
  for i in $(seq 1 90); do
    sleep 1
    grep -q "the service ran" $f && break
  done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  grep -v " INFO " $f | sed -n '/GPU service/,/the service ran/p' | grep "floor\|round trip:\|idle\|clock saw\|spinning\|tasks/s" | cut -c1-250 | head -24
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
