#!/bin/bash
# Session 20, call 5: the client_queues bench, A (609702b) and C (609702b with
# docs/perf/probes/2026-12-03-skip-own-lanes-probe.patch: a worker that has adopted lanes does not
# poll its own device's), taking turns; the no-op rows only.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in A C A C A C; do
  echo "== $(date +%T) $v"
  f=$OUT/cq_${v}_$(date +%s).txt
  timeout 60 ab/s20/cq_$v --bench > $f 2>&1; echo "rc=$?"
  grep -v " INFO " $f | grep "no-op" | grep -v "no target" | cut -c1-200
  rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
done
echo "== $(date +%T) done"
