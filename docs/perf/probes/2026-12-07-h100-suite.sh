#!/bin/bash
# 2026-12-07, H100: the bundle of gpu-bundle's commit (`cargo xtask gpu-bundle`, carried as
# gpu-bundle/): run.sh's parts (default all: tests, benches, python, cpp; `bash THIS PARTS` for
# some, e.g. tests,python,cpp in one call and benches in another), then the bundle's wheel
# installed with pip into a fresh venv and imported. Run from the repository root.
# run.sh is capped (TANDEM_SUITE_CAP, default 470 s) so the wheel check still runs inside a
# 9-minute call; a cut run.sh prints no summary table (its logs are in $OUT/logs.tgz).
set -u
export TANDEM_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
parts=${1:-tests,benches,python,cpp}
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo; nproc
echo "== $(date +%T) run.sh --parts $parts"
OUT=$OUT TANDEM_BINARY_TIMEOUT=${TANDEM_BINARY_TIMEOUT:-150} timeout -k 5 "${TANDEM_SUITE_CAP:-470}" \
  bash gpu-bundle/run.sh --parts "$parts" 2>&1 | tee "$OUT/suite.log"
echo "run.sh rc=${PIPESTATUS[0]} after $((SECONDS - t0)) s; leftovers in /dev/shm: $(ls /dev/shm | grep -ic tandem)"
echo "== $(date +%T) wheel check: $(ls gpu-bundle/python/*.whl 2>&1)"
rm -rf /tmp/wheelcheck
python3 -m venv --system-site-packages /tmp/wheelcheck
/tmp/wheelcheck/bin/pip install --no-index --no-deps gpu-bundle/python/*.whl 2>&1 | tail -3
echo "pip rc=${PIPESTATUS[0]}"
(cd /tmp && /tmp/wheelcheck/bin/python -c "import tandem; print(tandem.__file__)")
echo "import rc=$?"
(cd "$OUT" && tar -czf logs.tgz tandem-gpu-logs 2>/dev/null && rm -rf tandem-gpu-logs)
echo "== $(date +%T) done after $((SECONDS - t0)) s"
