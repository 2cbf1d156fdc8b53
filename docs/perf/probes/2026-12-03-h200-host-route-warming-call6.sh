#!/bin/bash
# Session 20, call 6: quiet lanes (a busy worker polls a lane empty for 4096 polls in a row
# every 4th sweep) against 609702b: the client_queues bench's no-op rows, A D A D A D, then the
# roundtrip bench's CUDA rows, A then D, each stopped once its CUDA part has printed.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in A D A D A D; do
  echo "== $(date +%T) client_queues $v"
  f=$OUT/cq_${v}_$(date +%s).txt
  timeout 60 ab/s20/cq_$v --bench > $f 2>&1; echo "rc=$?"
  grep -v " INFO " $f | grep "no-op" | grep -v "no target" | cut -c1-200
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
for v in A D; do
  echo "== $(date +%T) roundtrip $v"
  f=$OUT/rt_${v}.txt
  stdbuf -oL -eL ab/s20/rt_$v --bench > $f 2>&1 &
  pid=$!
  for i in $(seq 1 100); do
    sleep 1
    grep -q "CPU device (host backend)" $f && break
  done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  grep -v " INFO " $f | sed -n '/^CUDA device 0:$/,/CPU device/p' | cut -c1-220
  grep -v " INFO " $f | grep "kernel thread -> service round trip\|kernel threads -> service" | cut -c1-160
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
