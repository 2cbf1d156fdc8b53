#!/bin/bash
# Session 15, call 1 (bash ab/s15/call1.sh): the slot probe, the GPU-service rows of the bundle
# at dec0fc0, then the bundle's whole suite.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== $(date +%T) slot probe"
timeout 60 ab/s15/slot_probe 100000 > $OUT/probe.txt 2>&1; cat $OUT/probe.txt
echo "== $(date +%T) service rows"
timeout 60 stdbuf -oL -eL gpu-bundle/bin/tandem-runtime.bench.roundtrip --bench > $OUT/rows.txt 2>&1
grep -v " INFO " $OUT/rows.txt | sed -n '1,/the service ran/p' | grep -v "every thread\|blocks on"
echo "== $(date +%T) suite"
TANDEM_BINARY_TIMEOUT=150 timeout 400 bash gpu-bundle/run.sh --parts tests,python,cpp > $OUT/suite.txt 2>&1
grep -v " INFO " $OUT/suite.txt | sed -n '/== summary/,$p' | grep -v " ok$" 
grep -c " ok$" $OUT/suite.txt
grep -h "test result\|finished in" $OUT/tandem-gpu-logs/tandem-tests.test.runtime_e2e.log 2>/dev/null | tail -3
echo "== $(date +%T) done"; ls /dev/shm | grep -i tandem | head
