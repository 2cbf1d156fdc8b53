#!/bin/bash
# Session 18, call 2 (bash ab/s18/call2.sh): runtime_e2e with the host server's pacing (N2);
# the GPU-service rows of N2 (a 400 ns pause) and of P2 (N2 with the pause set by an NVRTC
# define: 0 = no pacing, 250, 550), taking turns.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) runtime_e2e (N2)"
timeout 150 ab/s18/N2/runtime_e2e > $OUT/runtime_e2e_N2.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/runtime_e2e_N2.txt | head -8
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
rows() { # name binary [defines]
  echo "== $(date +%T) service rows: $1 ${3:-}"
  f=$OUT/rows_$1_$(date +%s).txt
  if [ -n "${3:-}" ]; then export TANDEM_PROBE_NVRTC="$3"; else unset TANDEM_PROBE_NVRTC; fi
  timeout 75 stdbuf -oL -eL $2 --bench > $f 2>&1
  grep -v " INFO " $f | sed -n '1,/the service ran/p' | grep "floor (two\|pinned-memory\|round trip:\|tasks/s\|idle:\|clock saw\|host threads"
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
}
rows N2 ab/s18/N2/roundtrip
rows P2-0 ab/s18/P2/roundtrip "-DTANDEM_PROBE_PAUSE_NS=0"
rows P2-250 ab/s18/P2/roundtrip "-DTANDEM_PROBE_PAUSE_NS=250"
rows P2-550 ab/s18/P2/roundtrip "-DTANDEM_PROBE_PAUSE_NS=550"
rows N2 ab/s18/N2/roundtrip
rows P2-0 ab/s18/P2/roundtrip "-DTANDEM_PROBE_PAUSE_NS=0"
echo "== $(date +%T) done"
