#!/bin/bash
# Session 20, call 2: the roundtrip bench patched with docs/perf/probes/2026-12-03-warm-probe.patch (roundtrip_P):
# after the busy host rows, 32 host round trips after 1 s asleep and 32 after 1 s spinning, the
# device's worker warming the host route before every other pause (PROBE_WARM); run twice.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for run in 1 2; do
  echo "== $(date +%T) P run $run"
  f=$OUT/rows_P${run}.txt
  stdbuf -oL -eL ab/s20/roundtrip_P --bench > $f 2>&1 &
  pid=$!
  for i in $(seq 1 150); do
    sleep 1
    grep -q "the service ran" $f && break
  done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  grep -v " INFO " $f | sed -n '/GPU service/,/the service ran/p' | grep "floor\|round trip:\|idle\|PROBE" | cut -c1-400 | head -24
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
