#!/bin/bash
# 2026-12-07, H100: the GPU route's bench (tandem-runtime.bench.roundtrip) before and after the
# house work (function splits, runtime.h by route), alternating in one machine start: "before" is
# the binary of the bundle built at b1b7896, carried as gpu-before/; "after" is gpu-bundle/'s.
# TANDEM_AB_AFTER names another "after" binary (a fix's, built alone), TANDEM_AB_ROUNDS the rounds
# (default 2). Full logs go to $OUT; the headline lines are printed. Run from the repository root.
set -u
export TANDEM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bundle=$PWD/gpu-bundle
[ -d "$bundle/bin" ] || tar -xJf "$bundle/bin.tar.xz" -C "$bundle"
export TANDEM_BIN_DIR=$bundle/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for round in $(seq "${TANDEM_AB_ROUNDS:-2}"); do
  for which in before after; do
    if [ "$which" = before ]; then bin=$PWD/gpu-before/tandem-runtime.bench.roundtrip
    else bin=${TANDEM_AB_AFTER:-$bundle/bin/tandem-runtime.bench.roundtrip}; fi
    log=$OUT/roundtrip-$which-$round.log
    echo "== $(date +%T) $which, round $round"
    (cd "$bundle/crates/runtime" && timeout -k 5 "${TANDEM_AB_CAP:-130}" "$bin" --bench) \
      </dev/null >"$log" 2>&1
    echo "rc=$?"
    grep -E "^CUDA device|round trip: |round trip:  |M tasks/s|after 1s idle: " "$log" \
      | grep -v "^ *as " | sed 's/(median of [^)]*)//' | cut -c1-150
  done
done
