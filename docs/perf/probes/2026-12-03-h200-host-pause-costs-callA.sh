#!/bin/bash
# Session 19, call A: the host's cold reads after a pause (cold-after-pause), the share
# bench with the open's phases printed (share_probe: VMM fd handles, then legacy ones), and
# the bundle of 07d4f7e's benches (run.sh --parts benches).
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo; nproc
echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) shmem: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled) hugepages: $(cat /proc/sys/vm/nr_hugepages) cpuidle: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>&1)"
echo "== $(date +%T) cold"
for m in plain spin naps keeper1 keeper5; do ./ab/s19/cold-after-pause $m; done
tar -xJf gpu-bundle/bin.tar.xz -C gpu-bundle
export TANDEM_BIN_DIR=$PWD/gpu-bundle/bin
for legacy in 0 1; do
  echo "== $(date +%T) share probe, legacy=$legacy"
  (cd gpu-bundle/crates/share && TANDEM_CUDA_SHARE_LEGACY=$legacy TANDEM_PROBE_SHARE=1 timeout 80 ../../../ab/s19/share_probe --bench) > $OUT/share_probe_$legacy.txt 2>&1
  echo "rc=$?"
  grep -a -v " INFO \|PROBE" $OUT/share_probe_$legacy.txt | grep -a -E "open|handle|re-open|x " | head -20
  grep -a PROBE $OUT/share_probe_$legacy.txt | sort | uniq -c | sort -rn | head -3
done
echo "== $(date +%T) benches"
TANDEM_BINARY_TIMEOUT=120 timeout 370 bash gpu-bundle/run.sh --parts benches > $OUT/benches.txt 2>&1
echo "run.sh rc=$?"
grep -a -E "BELOW|meets|target|^== |binaries|host threads|missed|met" $OUT/benches.txt | grep -v " INFO " | cut -c1-230 > $OUT/rows.txt
tail -120 $OUT/rows.txt
echo "== $(date +%T) done"
