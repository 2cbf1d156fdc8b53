"""The GPU tests' device or skip, as the Rust suites decide it: without a CUDA
device (or PyTorch, CuPy, or a package built with CUDA) a test prints
`<test>: skipped: no CUDA device` and is skipped; with TANDEM_REQUIRE_GPU=1
that is a failure."""

from __future__ import annotations

import gc
import os

import pytest

import tandem

REQUIRE_GPU_ENV = "TANDEM_REQUIRE_GPU"


def missing_cuda() -> str | None:
    """Why this machine cannot run the GPU tests, or None."""
    if not tandem._tandem.CUDA:
        return "no CUDA device (the package was built without the cuda feature)"
    try:
        import cupy  # noqa: F401
        import torch
    except ImportError as e:
        return f"no CUDA device (PyTorch and CuPy are needed: {e})"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


@pytest.fixture(autouse=True)
def cuda_or_skip(request):
    why = missing_cuda()
    if why is None:
        return
    if os.environ.get(REQUIRE_GPU_ENV) == "1":
        pytest.fail(f"{request.node.name}: {why}, and {REQUIRE_GPU_ENV}=1")
    print(f"{request.node.name}: skipped: {why}")
    pytest.skip(f"skipped: {why}")


@pytest.fixture(scope="module")
def daemon():
    """A CUDA share daemon of the test process; producers and consumers
    are other processes, connected to its socket."""
    if missing_cuda() is not None:
        yield None
        return
    client = tandem.share.spawn_daemon("cuda")
    yield client
    del client
    gc.collect()
