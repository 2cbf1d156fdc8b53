"""CUDA buffers under fork and read-only mappings: a child forked from a
process that holds a CUDA tensor of a shared buffer gets a clear error for
what needs the GPU (the driver cannot be used in a forked child) while the
rest of the client works, and nothing the parent holds changes; a reader's
in-place PyTorch op on a sealed buffer faults in that reader instead of
changing what every later reader sees."""

from __future__ import annotations

import gc
import multiprocessing

import pytest

import tandem
from children import expect, python

pytestmark = pytest.mark.gpu

N = 1 << 20


def child_of_a_cuda_process(client, buf_id: int, results) -> None:
    try:
        try:
            client.get(buf_id)
            results.put(("opened", "a forked child mapped CUDA memory"))
            return
        except tandem.NoDeviceError as e:
            refused = str(e)
        info = client.stat(buf_id)  # needs no device: answered
        client.delete(buf_id)
        results.put(("ok", f"{refused} | leases {info['leases']}"))
    except BaseException as e:  # reported to the parent, which fails the test
        results.put(("failed", repr(e)))


def test_a_forked_child_of_a_cuda_process_is_refused_the_gpu_and_the_parent_keeps_its_tensor(
    daemon,
):
    import torch

    buf = daemon.create(N * 4)
    tensor = torch.from_dlpack(buf.view("float32", (N,)))
    tensor.copy_(torch.arange(N, device="cuda", dtype=torch.float32))
    buf.seal()
    held = torch.from_dlpack(daemon.get(buf.id).view("float32", (N,)))
    expected = torch.arange(N, device="cuda", dtype=torch.float32)
    gc.collect()
    leases = daemon.stat(buf.id)["leases"]

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=child_of_a_cuda_process, args=(daemon, buf.id, results))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    outcome, detail = results.get(timeout=10)
    assert outcome == "ok", detail
    assert "forked" in detail and "spawn" in detail, detail

    gc.collect()
    info = daemon.stat(buf.id)
    assert info["deleted"] and info["leases"] == leases, info
    assert torch.equal(held, expected), "the parent's tensor"
    fresh = daemon.create(N * 4)
    torch.from_dlpack(fresh.view("float32", (N,))).fill_(-1)
    fresh.seal()
    torch.cuda.synchronize()
    assert torch.equal(held, expected), "the parent's tensor, after a new buffer"
    daemon.delete(fresh.id)


WRITER_OF_A_SEALED_BUFFER = """
    import sys, torch, tandem
    client = tandem.share.connect(sys.argv[1])
    tensor = torch.from_dlpack(client.get(int(sys.argv[2])).view("float32"))
    print("mapped", flush=True)
    try:
        tensor.mul_(100)
        torch.cuda.synchronize()
        print("stored", flush=True)
    except RuntimeError as e:
        print("faulted", str(e).splitlines()[0], flush=True)
"""


def test_an_in_place_op_on_a_sealed_buffer_faults_and_changes_nothing(daemon):
    import torch

    buf = daemon.create(N * 4)
    torch.from_dlpack(buf.view("float32", (N,))).copy_(
        torch.arange(N, device="cuda", dtype=torch.float32)
    )
    buf.seal()
    writer = python(WRITER_OF_A_SEALED_BUFFER, daemon.socket, buf.id)
    expect(writer, "mapped")
    line = writer.stdout.readline().strip()
    writer.wait(timeout=120)
    assert not line.startswith("stored"), "a reader's store into a sealed buffer went through"
    assert line.startswith("faulted") or writer.returncode != 0, (line, writer.returncode)
    reader = torch.from_dlpack(daemon.get(buf.id).view("float32", (N,)))
    assert torch.equal(reader, torch.arange(N, device="cuda", dtype=torch.float32))
    daemon.delete(buf.id)
