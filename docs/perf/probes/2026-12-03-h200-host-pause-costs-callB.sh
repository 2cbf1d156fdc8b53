#!/bin/bash
# Session 19, call B: the host's cold reads after a pause (cold-after-pause, by how the pause
# was spent); the roundtrip bench of the working tree (the ping-pong after a pause, and the
# cold submit's steps stamped: roundtrip_probe); the share bench's open, its steps printed by
# the client and by the daemon (share_probe and bin/tandem, built with the share-open probe).
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo; nproc
echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) shmem: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled) hugepages: $(cat /proc/sys/vm/nr_hugepages)"
echo "== $(date +%T) cold"
for m in plain spin naps keeper1 keeper5; do ./ab/s19/cold-after-pause $m; done | tee $OUT/cold.txt
echo "== $(date +%T) roundtrip_probe"
timeout 100 stdbuf -oL -eL ab/s19/roundtrip_probe --bench > $OUT/roundtrip.txt 2>&1; echo "rc=$?"
grep -v " INFO " $OUT/roundtrip.txt | sed -n '/GPU service/,/the service ran/p' | grep "floor\|round trip:\|idle\|PROBE\|clock saw\|spinning" | cut -c1-260 | head -30
rm -f /dev/shm/*tandem* /dev/shm/TNDM* 2>/dev/null
export TANDEM_BIN_DIR=$PWD/ab/s19/bin
med() { sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print "-"}'; }
for legacy in 0 1; do
  echo "== $(date +%T) share probe, legacy=$legacy"
  f=$OUT/share_$legacy.txt
  (cd share && TANDEM_CUDA_SHARE_LEGACY=$legacy TANDEM_PROBE_SHARE=1 timeout 80 ../ab/s19/share_probe --bench) > $f 2>&1
  echo "rc=$?"
  grep -a -v " INFO \|PROBE" $f | grep -a -E "open|handle|re-open" | head -14
  awk '/share bench on CUDA/{c=1} c' $f > /tmp/cuda.txt
  d=/tmp/cuda.txt
  echo "CUDA opens (first 200 = polling daemon): $(grep -a -c 'PROBE share open' $d)"
  echo "client call median ns: $(grep -a 'PROBE share open' $d | head -200 | sed 's/.*call \([0-9]*\) ns.*/\1/' | med); map: $(grep -a 'PROBE share open' $d | head -200 | sed 's/.*map \([0-9]*\) ns.*/\1/' | med)"
  echo "client exchange send: $(grep -a 'PROBE client exchange' $d | head -200 | awk '{print $5}' | med) readable: $(grep -a 'PROBE client exchange' $d | head -200 | awk '{print $8}' | med) received: $(grep -a 'PROBE client exchange' $d | head -200 | awk '{print $11}' | med)"
  echo "daemon await ready: $(grep -a 'PROBE daemon await' $d | head -200 | awk '{print $7}' | sort | uniq -c | tr '\n' ' ') awaited us: $(grep -a 'PROBE daemon await' $d | head -200 | awk '{print $9}' | med) recv us: $(grep -a 'PROBE daemon await' $d | head -200 | awk '{print $12}' | med) slots: $(grep -a 'PROBE daemon await' $d | head -1 | awk '{print $15}')"
  echo "daemon handle ns: $(grep -a 'PROBE daemon open' $d | head -200 | awk '{print $5}' | med) reply ns: $(grep -a 'PROBE daemon open' $d | head -200 | awk '{print $8}' | med)"
  echo "vmm 2 MiB reserve/map/access ns: $(grep -a 'vmm map (2097152' $d | sed 's/.*reserve \([0-9]*\) ns.*/\1/' | med) $(grep -a 'vmm map (2097152' $d | sed 's/.*, map \([0-9]*\) ns.*/\1/' | med) $(grep -a 'vmm map (2097152' $d | sed 's/.*access \([0-9]*\) ns.*/\1/' | med); import ns: $(grep -a 'PROBE share import' $d | sed 's/.*import \([0-9]*\) ns.*/\1/' | med)"
done
echo "== $(date +%T) done"
