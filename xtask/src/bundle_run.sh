#!/usr/bin/env bash
# Runs a Tandem GPU bundle (written by `cargo xtask gpu-bundle`) on a machine with an NVIDIA GPU:
# every test binary, then every bench binary, then, when the bundle has the Python package's
# wheel, its GPU tests (pytest) and benches with the machine's python3 (PyTorch and CuPy). No
# Rust toolchain is needed here.
#
#   bash gpu-bundle/run.sh [--test-threads N]    (or TANDEM_TEST_THREADS=N; default: parallel)
#   bash gpu-bundle/run.sh --python-only         (the Python part alone)
#   bash gpu-bundle/run.sh --parts tests,cpp     (some parts: tests, benches, python, cpp)
#
# Each binary may run TANDEM_BINARY_TIMEOUT seconds (default 240): a hung GPU test fails its
# binary, names the tests still running, and the run goes on to the next binary.
#
# Then the C++ examples (capi/examples/cpp) are configured with CMake and built with nvcc against
# the bundled C ABI (capi/), and run against the bundle's `tandem blob run` and `tandem share
# serve`: the row `cpp-examples`. Without cmake or nvcc that row fails, saying which is missing.
#
# GPU tests must not skip: TANDEM_REQUIRE_GPU=1 makes a missing device a failure.
# TANDEM_BIN_DIR names the folder of the bundled programs (helpers that tests start). Each binary
# runs in crates/<its crate folder>/ (as under cargo, where the cwd is the crate root), which
# holds the files its crate's gpu-bundle-files.txt listed. Full logs go to
# ${OUT:-/tmp}/tandem-gpu-logs/. Ends with a table; exits non-zero if any binary failed.
set -uo pipefail

bundle_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
test_threads=${TANDEM_TEST_THREADS:-}
binary_timeout=${TANDEM_BINARY_TIMEOUT:-240}
parts=tests,benches,python,cpp
while [ $# -gt 0 ]; do
  case "$1" in
    --python-only) parts=python; shift ;;
    --parts) parts=${2:-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    --parts=*) parts=${1#*=}; shift ;;
    --test-threads) test_threads=${2:-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    --test-threads=*) test_threads=${1#*=}; shift ;;
    -h | --help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
for part in ${parts//,/ }; do
  case "$part" in
    tests | benches | python | cpp) ;;
    *) echo "run.sh: --parts takes tests, benches, python, cpp; got '$part'" >&2; exit 2 ;;
  esac
done
# Whether part $1 was asked for.
wanted() { [[ ",$parts," == *",$1,"* ]]; }
if [ -n "$test_threads" ] && ! [[ $test_threads =~ ^[1-9][0-9]*$ ]]; then
  echo "run.sh: --test-threads needs a positive integer, got '$test_threads'" >&2
  exit 2
fi

# The binaries travel packed (bin.tar.xz); unpacked once, beside it, by tar with xz, else by
# Python's tarfile (a machine without xz-utils).
if [ ! -d "$bundle_dir/bin" ]; then
  tar -xJf "$bundle_dir/bin.tar.xz" -C "$bundle_dir" 2>/dev/null \
    || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$bundle_dir/bin.tar.xz" "$bundle_dir" \
    || { echo "run.sh: cannot unpack bin.tar.xz" >&2; exit 1; }
fi

export TANDEM_REQUIRE_GPU=1
export TANDEM_BIN_DIR="$bundle_dir/bin"
# No trailing ':' when LD_LIBRARY_PATH was unset: an empty entry would mean the current folder.
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log_dir="${OUT:-/tmp}/tandem-gpu-logs"
mkdir -p "$log_dir" || { echo "run.sh: cannot create $log_dir" >&2; exit 1; }

echo "== GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    || echo "nvidia-smi failed"
else
  echo "nvidia-smi not found"
fi

rows=()
failures=0

# Sums passed/failed/ignored over every "test result:" line of a log (one per harness);
# prints nothing when there is none.
tally() {
  awk '/^test result: / {
         n++
         for (i = 1; i < NF; i++) {
           if ($(i + 1) ~ /^passed;?$/) p += $i
           if ($(i + 1) ~ /^failed;?$/) f += $i
           if ($(i + 1) ~ /^ignored;?$/) g += $i
         }
       }
       END { if (n) print p, f, g }' "$1"
}

# run_binary KIND NAME CRATE: runs one binary, logs it, and adds its row to the table.
run_binary() {
  local kind=$1 name=$2 crate=$3
  local bin="$bundle_dir/bin/$name" log="$log_dir/$name.log" workdir="$bundle_dir/crates/$crate"
  local args=() rc counts passed=- failed=- ignored=- status
  echo
  echo "== $kind $name"
  if [ ! -x "$bin" ]; then
    rows+=("$name|-|-|-|FAIL (missing)")
    failures=$((failures + 1))
    return
  fi
  if [ "$kind" = test ]; then
    [ -n "$test_threads" ] && args+=("--test-threads=$test_threads")
    (cd "$workdir" && exec timeout -k 5 "$binary_timeout" "$bin" ${args[@]+"${args[@]}"}) \
      </dev/null >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "-- timed out after ${binary_timeout}s; tests that never finished:"
      (cd "$workdir" && "$bin" --list 2>/dev/null) | sed -n 's/: test$//p' | while read -r t; do
        grep -q "^test $t \.\.\. " "$log" || echo "   $t"
      done
    fi
    grep -E '^test result: ' "$log"
    counts=$(tally "$log")
    [ -n "$counts" ] && read -r passed failed ignored <<<"$counts"
    if [ "$rc" -ne 0 ]; then
      status="FAIL (exit $rc)"
    elif [ -z "$counts" ]; then
      status="FAIL (no test result line)"
    else
      status=ok
    fi
    if [ "$status" != ok ]; then
      echo "-- last lines of $log:"
      tail -n 40 "$log"
    fi
  else
    # Benches print the comparison tables that are the point of running them: show them live.
    (cd "$workdir" && exec timeout -k 5 "$binary_timeout" "$bin" --bench) </dev/null 2>&1 \
      | tee "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then status=ok; else status="FAIL (exit $rc)"; fi
  fi
  [ "$status" = ok ] || failures=$((failures + 1))
  rows+=("$name|$passed|$failed|$ignored|$status")
}

# Sums passed/failed/skipped of pytest's last summary line in a log ("3 passed, 1 skipped in
# 2.0s"); prints nothing when there is none.
pytest_tally() {
  awk '/ in [0-9.]+s/ && /(passed|failed|skipped|error)/ { line = $0 }
       END {
         if (line == "") exit
         gsub(/=/, "", line)
         n = split(line, w, /[ ,]+/)
         for (i = 1; i < n; i++) {
           if (w[i] !~ /^[0-9]+$/) continue
           if (w[i + 1] ~ /^passed/) p += w[i]
           if (w[i + 1] ~ /^(failed|errors?)$/) f += w[i]
           if (w[i + 1] ~ /^skipped/) s += w[i]
         }
         print p + 0, f + 0, s + 0
       }' "$1"
}

# run_python WHEEL: the Python package (python/ of the bundle, built with CUDA) installed into a
# temporary folder (no network, no Rust needed here), its GPU tests run with pytest and then its
# benches, each a row of the table; the `tandem` binary it starts daemons with is the bundle's.
run_python() {
  local wheel=$1 site log="$log_dir/python.tests.gpu.log" workdir="$bundle_dir/crates/python"
  local rc counts passed=- failed=- ignored=- status bench args
  echo
  echo "== python $(basename "$wheel")"
  if ! site=$(mktemp -d "${TMPDIR:-/tmp}/tandem-python-XXXXXX"); then
    rows+=("python (install)|-|-|-|FAIL (mktemp)")
    failures=$((failures + 1))
    return
  fi
  if ! python3 -m pip install --quiet --no-deps --no-index --target "$site" "$wheel"; then
    rm -rf "$site"
    rows+=("python (install)|-|-|-|FAIL (pip install)")
    failures=$((failures + 1))
    return
  fi
  (cd "$workdir" && PYTHONPATH="$site" TANDEM_BIN="$bundle_dir/bin/tandem" \
    exec timeout -k 5 "$binary_timeout" python3 -m pytest -p no:cacheprovider -rs tests/gpu) \
    </dev/null >"$log" 2>&1
  rc=$?
  counts=$(pytest_tally "$log")
  [ -n "$counts" ] && read -r passed failed ignored <<<"$counts"
  if [ "$rc" -ne 0 ]; then
    status="FAIL (exit $rc)"
    echo "-- last lines of $log:"
    tail -n 60 "$log"
  elif [ -z "$counts" ]; then
    status="FAIL (no pytest summary)"
  else
    status=ok
    tail -n 3 "$log"
  fi
  [ "$status" = ok ] || failures=$((failures + 1))
  rows+=("python.tests.gpu|$passed|$failed|$ignored|$status")
  # weights runs handoff.py's table among its sections.
  for bench in weights blob; do
    args=()
    # The Rust client's figures for the same calls, run by the bench itself: the binding's
    # overhead.
    [ "$bench" = blob ] && args+=(--rust-bench "$bundle_dir/bin/tandem-blob.bench.blob")
    echo
    echo "== python bench $bench"
    (cd "$workdir" && PYTHONPATH="$site" TANDEM_BIN="$bundle_dir/bin/tandem" \
      exec timeout -k 5 "$binary_timeout" python3 "bench/$bench.py" ${args[@]+"${args[@]}"}) \
      </dev/null 2>&1 | tee "$log_dir/python.bench.$bench.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then status=ok; else status="FAIL (exit $rc)"; failures=$((failures + 1)); fi
    rows+=("python.bench.$bench|-|-|-|$status")
  done
  rm -rf "$site"
}

for kind_wanted in test:tests bench:benches; do
  wanted "${kind_wanted#*:}" || continue
  while IFS=$'\t' read -r -u 3 kind name crate; do
    [ "$kind" = "${kind_wanted%:*}" ] && run_binary "$kind" "$name" "$crate"
  done 3<"$bundle_dir/binaries.tsv"
done

if wanted python; then
  wheels=0
  for wheel in "$bundle_dir"/python/tandem-*.whl; do
    [ -f "$wheel" ] && wheels=$((wheels + 1)) && run_python "$wheel"
  done
  # A part asked for that cannot run fails, as a missing binary does: a bundle built without
  # maturin would otherwise end "0 failed" with the Python package never run.
  if [ "$wheels" -eq 0 ]; then
    rows+=("python|-|-|-|FAIL (no wheel: the bundle was built without maturin)")
    failures=$((failures + 1))
  fi
fi

# start_service LOG ARGS...: starts the bundled `tandem ARGS... --announce --exit-on-stdin-eof`
# as a coprocess and sets `served` to what its ready line names; closing its stdin stops it.
start_service() {
  local log=$1 line
  shift
  coproc SERVICE { exec "$bundle_dir/bin/tandem" "$@" --announce --exit-on-stdin-eof 2>>"$log"; }
  served=
  if read -r -t 60 -u "${SERVICE[0]}" line && [[ $line == ready\ * ]]; then
    served=$(awk '{print $2}' <<<"$line")
  fi
}

# stop_service: closes the coprocess's stdin and waits for it.
stop_service() {
  local pid=$SERVICE_PID in=${SERVICE[1]}
  exec {in}>&-
  wait "$pid"
}

# The C++ examples built with nvcc and run against the bundle's runtime and share daemon.
run_cpp_examples() {
  local log="$log_dir/cpp-examples.log" work="${OUT:-/tmp}/tandem-cpp-examples" status=ok
  local build="$work/build" generator=() missing=()
  echo
  echo "== cpp-examples (capi/examples/cpp with nvcc; log in $log)"
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || missing+=(nvcc)
  if [ ${#missing[@]} -gt 0 ]; then
    rows+=("cpp-examples|-|-|-|FAIL (missing: ${missing[*]})")
    failures=$((failures + 1))
    return
  fi
  command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  # `native` (this machine's GPUs) needs CMake 3.24; older ones keep nvcc's default, whose PTX
  # the driver compiles for the GPU at load time.
  local cmake_version arch=()
  cmake_version=$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
  if printf '3.24\n%s\n' "$cmake_version" | sort -V -C; then
    arch=(-DCMAKE_CUDA_ARCHITECTURES=native)
  fi
  rm -rf "$work" && mkdir -p "$work"
  {
    cmake -S "$bundle_dir/capi/examples/cpp" -B "$build" ${generator[@]+"${generator[@]}"} \
      -DTANDEM_CUDA=ON ${arch[@]+"${arch[@]}"} -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$bundle_dir/capi" && cmake --build "$build"
  } >"$log" 2>&1 || status="FAIL (build)"
  if [ "$status" = ok ]; then
    printf 'workers = 4\n[blob]\nmetadata = "%s/meta.redb"\n[[blob.targets]]\nkind = "ram"\ncapacity = 268435456\nscore = 1.0\n' \
      "$work" >"$work/tandem.toml"
    start_service "$log" blob run --config "$work/tandem.toml"
    if [ -z "$served" ]; then
      status="FAIL (tandem blob run did not start)"
    else
      echo "$ cpp_client_blobs $served 1 & cpp_client_blobs $served 2"
      timeout 120 "$build/cpp_client_blobs" "$served" 1 >"$work/p1.txt" 2>&1 &
      local first=$!
      timeout 120 "$build/cpp_client_blobs" "$served" 2 >"$work/p2.txt" 2>&1 || status="FAIL (program 2)"
      wait "$first" || status="FAIL (program 1)"
      cat "$work/p1.txt" "$work/p2.txt"
      echo "$ c_client $served"
      timeout 60 "$build/c_client" "$served" || status="FAIL (c_client)"
      stop_service || status="FAIL (tandem blob run exit)"
    fi
  fi
  if [ "$status" = ok ]; then
    start_service "$log" share serve --socket "$work/share.sock"
    if [ -z "$served" ]; then
      status="FAIL (tandem share serve did not start)"
    else
      local id
      echo "$ cpp_share_exchange produce $served 16777216; cpp_share_exchange consume $served ID 16777216"
      id=$(timeout 60 "$build/cpp_share_exchange" produce "$served" 16777216 | sed -n 's/^id //p')
      if [ -z "$id" ]; then
        status="FAIL (producer)"
      else
        timeout 60 "$build/cpp_share_exchange" consume "$served" "$id" 16777216 || status="FAIL (consumer)"
      fi
      stop_service || status="FAIL (tandem share serve exit)"
    fi
  fi
  [ "$status" = ok ] || { failures=$((failures + 1)); echo "-- last lines of $log:"; tail -n 40 "$log"; }
  rows+=("cpp-examples|-|-|-|$status")
  rm -rf "$work"
}

wanted cpp && run_cpp_examples

echo
echo "== summary (logs in $log_dir)"
printf '%-56s %7s %7s %8s  %s\n' binary passed failed ignored status
for row in ${rows[@]+"${rows[@]}"}; do
  IFS='|' read -r name passed failed ignored status <<<"$row"
  printf '%-56s %7s %7s %8s  %s\n' "$name" "$passed" "$failed" "$ignored" "$status"
done
echo "run.sh: ${#rows[@]} binaries, $failures failed"
[ "$failures" -eq 0 ]
