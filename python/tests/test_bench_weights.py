"""The GPU benches' plan on any machine: `bench/weights.py --dry-run` checks
its workers' code, its set's plan and its import of `bench/handoff.py`, so
that a run on the GPU machine does not fail on a slip; without a device the
bench says it was skipped, and fails under TANDEM_REQUIRE_GPU=1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "weights.py"


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_the_dry_run_checks_the_plan_and_the_workers():
    pytest.importorskip("torch")
    out = run("--dry-run")
    assert out.returncode == 0, out.stderr
    assert "256 tensors, 10.00 GiB" in out.stdout
    assert "workers map, torch.load, safetensors, serve, alloc compile" in out.stdout
    assert "safetensors: " in out.stdout
    smaller = run("--dry-run", "--gib", "0.5", "--tensors", "200")
    assert "200 tensors, 0.50 GiB" in smaller.stdout


def test_without_a_device_it_says_skipped_or_fails_when_one_is_required():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the bench would run")
    out = run(TANDEM_REQUIRE_GPU="0")
    assert out.returncode == 0 and "skipped: no CUDA device" in out.stdout
    required = run(TANDEM_REQUIRE_GPU="1")
    assert required.returncode != 0 and "TANDEM_REQUIRE_GPU=1" in required.stdout + required.stderr
