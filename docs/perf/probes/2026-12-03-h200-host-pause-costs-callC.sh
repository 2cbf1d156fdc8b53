#!/bin/bash
# Session 19, call C: the GPU-service rows of A (the working tree without the submit's
# prefetch) and B (with it), taking turns, then B with the submit's steps stamped
# (docs/perf/probes/2026-12-03-submit-stamps.patch). Every binary has the ping-pong-after-a-pause row.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in A B A B Bstamps; do
  echo "== $(date +%T) $v"
  f=$OUT/rows_${v}_$(date +%s).txt
  timeout 90 stdbuf -oL -eL ab/s19/ab/roundtrip_$v --bench > $f 2>&1; echo "rc=$?"
  grep -v " INFO " $f | sed -n '/GPU service/,/the service ran/p' | grep "floor\|round trip:\|idle\|PROBE\|clock saw\|spinning\|tasks/s" | cut -c1-250 | head -24
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) zprobe"
./ab/s19/zprobe
echo "== $(date +%T) done"
