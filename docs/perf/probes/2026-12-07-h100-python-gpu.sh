#!/bin/bash
# 2026-12-07, H100: the bundle's Python GPU tests (`tests`: python/tests/gpu, the pool's
# 100 kill rounds included) or its benches (`bench`: the scrape bench, then bench/weights.py),
# each in a call of its own so that neither outruns the 10-minute limit. Run from the
# repository root with the bundle carried as gpu-bundle/.
set -u
export TANDEM_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bundle=$PWD/gpu-bundle
[ -d "$bundle/bin" ] || tar -xJf "$bundle/bin.tar.xz" -C "$bundle"
export TANDEM_BIN_DIR=$bundle/bin TANDEM_BIN=$bundle/bin/tandem
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
site=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$site" "$bundle"/python/tandem-*.whl
export PYTHONPATH=$site
case ${1:-tests} in
  tests)
    cd "$bundle/crates/python" &&
      timeout -k 5 "${TANDEM_PY_CAP:-540}" python3 -m pytest -p no:cacheprovider -rs tests/gpu
    echo "pytest rc=$?; leftovers in /dev/shm: $(ls /dev/shm | grep -ic tandem)" ;;
  bench)
    (cd "$bundle/crates/cli" && timeout -k 5 150 "$bundle/bin/tandem-cli.bench.scrape" --bench)
    echo "scrape rc=$?"
    cd "$bundle/crates/python" &&
      timeout -k 5 "${TANDEM_PY_CAP:-400}" python3 bench/weights.py
    echo "weights rc=$?" ;;
esac
