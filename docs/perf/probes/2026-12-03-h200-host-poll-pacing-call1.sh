#!/bin/bash
# Session 18, call 1 (bash ab/s18/call1.sh): runtime_e2e of f3a4990 (N); the GPU-service rows
# of 1509f79 (A) and N, taking turns; then the host-route probe (P: N with the probe patch),
# its variants chosen by NVRTC defines.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) runtime_e2e (N)"
timeout 150 ab/s18/N/runtime_e2e > $OUT/runtime_e2e_N.txt 2>&1; echo "rc=$?"
grep -E "^test result|FAILED|panicked" $OUT/runtime_e2e_N.txt | head -8
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
rows() { # name binary [defines]
  echo "== $(date +%T) service rows: $1 ${3:-}"
  f=$OUT/rows_$1_$(date +%s).txt
  if [ -n "${3:-}" ]; then export TANDEM_PROBE_NVRTC="$3"; else unset TANDEM_PROBE_NVRTC; fi
  timeout 70 stdbuf -oL -eL $2 --bench > $f 2>&1
  grep -v " INFO " $f | sed -n '1,/the service ran/p' | grep "floor (two\|pinned-memory\|round trip:\|tasks/s\|idle:\|clock saw"
  grep HOSTTL $f
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
}
for v in A N A N; do rows $v ab/s18/$v/roundtrip; done
rows P-tl ab/s18/P/roundtrip "-DTANDEM_PROBE_HOST_TL"
rows P-delay400 ab/s18/P/roundtrip "-DTANDEM_PROBE_HOST_TL -DTANDEM_PROBE_HOST_DELAY_NS=400"
rows P-fence ab/s18/P/roundtrip "-DTANDEM_PROBE_HOST_TL -DTANDEM_PROBE_HOST_FENCE"
rows P-near ab/s18/P/roundtrip "-DTANDEM_PROBE_HOST_TL -DTANDEM_PROBE_NEAR_ONLY"
echo "== $(date +%T) done"
