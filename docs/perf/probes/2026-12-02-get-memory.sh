#!/bin/bash
# One served get of a 64 MiB blob to a pipe, as blob_served's bounded-memory test does it, with the
# get's memory sampled every few ms from /proc (the peak of each field).
set -u
T=${TANDEM_BIN_DIR}/tandem
d=$(mktemp -d)
cat > $d/tandem.toml <<TOML
workers = 2
devices = []
[blob]
metadata = "$d/meta.redb"
[[blob.targets]]
kind = "file"
path = "$d/target0.dat"
capacity = 134217728
score = 0.5
TOML
mkfifo $d/in
RUST_LOG=warn $T blob run --config $d/tandem.toml < $d/in > $d/run.out 2>&1 &
runpid=$!
exec 7> $d/in
sleep 3
head -c 67108864 /dev/urandom > $d/data
RUST_LOG=warn $T blob put - --config $d/tandem.toml --tag big --name served < $d/data; echo "put rc=$?"
sample() {
  local pid=$1
  declare -A peak
  while [ -e /proc/$pid/status ]; do
    while read -r k v _; do
      case $k in VmRSS:|VmHWM:|RssAnon:|RssFile:|RssShmem:) [ "${v:-0}" -gt "${peak[$k]:-0}" ] 2>/dev/null && peak[$k]=$v;; esac
    done < /proc/$pid/status 2>/dev/null
    sleep 0.005
  done
  for k in "${!peak[@]}"; do echo "peak $k ${peak[$k]} kB"; done
}
for out in pipe file; do
  if [ $out = pipe ]; then
    RUST_LOG=warn $T blob get served --config $d/tandem.toml --tag big > >(cat > /dev/null) &
  else
    RUST_LOG=warn $T blob get served --config $d/tandem.toml --tag big -o $d/back &
  fi
  pid=$!
  echo "get to a $out (pid $pid):"
  sample $pid
  wait $pid; echo "get rc=$?"
done
exec 7>&-
wait $runpid; echo "run rc=$?"; tail -5 $d/run.out
rm -rf $d
