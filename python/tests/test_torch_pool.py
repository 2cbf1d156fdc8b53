"""The pool's entry points (``tandem_pool_alloc``/``tandem_pool_free``, what
PyTorch's pluggable allocator calls under ``tandem.torch.pool``) called
through ctypes against a daemon on the CPU device, where PyTorch has no
CUDA: segments are daemon buffers, a free gives them back, the daemon's
limits refuse with a null, a publish of pool-born tensors copies nothing, a
forked child leaves its parent's segments alone, and a process killed
holding segments leaves nothing behind."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import tandem

from torch_or_skip import import_torch

torch = import_torch()

import tandem.torch as tt

MIB = 1 << 20


def entry_points() -> ctypes.CDLL:
    """The package's library, its pool entry points typed as PyTorch calls
    them."""
    lib = ctypes.CDLL(tandem._tandem.__file__)
    lib.tandem_pool_alloc.restype = ctypes.c_void_p
    lib.tandem_pool_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.tandem_pool_free.restype = None
    lib.tandem_pool_free.argtypes = [
        ctypes.c_void_p,
        ctypes.c_ssize_t,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    return lib


LIB_SETUP = """
    import ctypes, sys, tandem
    lib = ctypes.CDLL(tandem._tandem.__file__)
    lib.tandem_pool_alloc.restype = ctypes.c_void_p
    lib.tandem_pool_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
"""


def tensor_at(ptr: int, nbytes: int, dtype=torch.float32) -> torch.Tensor:
    """A CPU tensor over `nbytes` of pool memory at `ptr` (the CPU device's
    memory is host memory), as a tensor PyTorch allocated there would be."""
    raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
    return torch.frombuffer(raw, dtype=dtype)


def held_ids(client) -> set:
    return {b["id"] for b in client.ls()}


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def lib(client):
    tt._attach_pool(client)
    yield entry_points()
    # The daemon stops with its last client: the pool's too.
    tt._detach_pool()


def test_a_segment_is_a_daemon_buffer_until_freed(client, lib):
    before = tandem._tandem._pool_status()["segments"]
    ptr = lib.tandem_pool_alloc(2 * MIB, 0, None)
    assert ptr, tandem._tandem._pool_status()["last_error"]
    status = tandem._tandem._pool_status()
    assert status["segments"] == before + 1
    segment, offset = tandem._tandem._pool_find(ptr + 100)
    assert offset == 100 and segment.nbytes == 2 * MIB and not segment.sealed
    info = client.stat(segment.id)
    assert (info["nbytes"], info["sealed"], info["leases"]) == (2 * MIB, False, 1)
    # The memory is the caller's to write from its first byte.
    tensor_at(ptr, 2 * MIB).fill_(1.5)
    assert float(tensor_at(ptr, 2 * MIB).sum()) == 1.5 * (2 * MIB // 4)
    assert tandem._tandem._pool_find(ptr + 2 * MIB) is None, "one past the end"
    del segment
    lib.tandem_pool_free(ptr, 2 * MIB, 0, None)
    assert tandem._tandem._pool_status()["segments"] == before
    assert wait_until(lambda: info["id"] not in held_ids(client)), "freed by the daemon"


def test_bad_calls_return_null_or_nothing_and_say_why(client, lib):
    assert lib.tandem_pool_alloc(-1, 0, None) is None
    assert "-1 bytes" in tandem._tandem._pool_status()["last_error"]
    assert lib.tandem_pool_alloc(MIB, 7, None) is None, "no device 7"
    assert "device 7" in tandem._tandem._pool_status()["last_error"]
    lib.tandem_pool_free(0x1000, 16, 0, None)
    assert "did not allocate" in tandem._tandem._pool_status()["last_error"]
    # Without a pool attached (a fresh process), an alloc is null too.
    script = textwrap.dedent(LIB_SETUP) + textwrap.dedent(
        """
        assert lib.tandem_pool_alloc(4096, 0, None) is None
        print(tandem._tandem._pool_status()["last_error"])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "no client" in out.stdout
    # Another client while this one's segments live is refused.
    ptr = lib.tandem_pool_alloc(MIB, 0, None)
    other = tandem.share.connect(client.socket)
    with pytest.raises(tandem.ArgumentError, match="another client"):
        tt._attach_pool(other)
    with pytest.raises(tandem.ArgumentError, match="1 segment"):
        tt._detach_pool()
    lib.tandem_pool_free(ptr, MIB, 0, None)


def test_the_daemons_buffer_limit_refuses_with_a_null(tandem_bin):
    folder = tempfile.mkdtemp(prefix="tandem-pool-test-")
    socket = os.path.join(folder, "share.sock")
    serve = [tandem_bin, "share", "serve", "--backend", "host", "--socket", socket]
    daemon = subprocess.Popen(
        [*serve, "--announce", "--max-buffers", "2"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert daemon.stdout.readline().startswith("ready")
        limited = tandem.share.connect(socket)
        tt._attach_pool(limited)
        lib = entry_points()
        first = lib.tandem_pool_alloc(MIB, 0, None)
        second = lib.tandem_pool_alloc(MIB, 0, None)
        assert first and second
        assert lib.tandem_pool_alloc(MIB, 0, None) is None, "over --max-buffers"
        assert "busy" in tandem._tandem._pool_status()["last_error"].lower()
        lib.tandem_pool_free(first, MIB, 0, None)
        third = lib.tandem_pool_alloc(MIB, 0, None)
        assert third, "room again once one is freed"
        for ptr in (second, third):
            lib.tandem_pool_free(ptr, MIB, 0, None)
        assert tandem._tandem._pool_status()["segments"] == 0
        tt._detach_pool()
        del limited
        gc.collect()
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        os.rmdir(folder)


def test_a_publish_of_pool_born_tensors_copies_nothing(client, lib):
    ptr = lib.tandem_pool_alloc(2 * MIB, 0, None)
    assert ptr
    weight = tensor_at(ptr, 4096).view(32, 32)
    bias = tensor_at(ptr + 4096, 128)
    weight.copy_(torch.arange(1024, dtype=torch.float32).view(32, 32))
    bias.fill_(0.25)
    state = {"weight": weight, "bias": bias, "scale": torch.tensor([2.0])}
    info = tt.publish("pooled", state, client=client)
    segment, _ = tandem._tandem._pool_find(ptr)
    assert segment.id in info["buffers"], "the segment itself joined the set"
    assert segment.sealed
    assert info["copied"] == 4, "only the tensor born outside the pool was copied"
    loaded = tt.load("pooled", client=client, verify=True)
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor), name
    # No copy: a reader in another process sees the publisher's bytes where
    # they were born, a write made after the publish included.
    weight[0, 0] = -7.0
    reader = textwrap.dedent(
        """
        import sys, tandem, tandem.torch as tt
        client = tandem.share.connect(sys.argv[1])
        print(float(tt.load("pooled", client=client)["weight"][0, 0]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", reader, client.socket], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == -7.0
    # A second publish of the same tensors copies them: the segment is in a
    # set already.
    again = tt.publish("pooled-again", state, client=client)
    assert segment.id not in again["buffers"] and again["copied"] >= 4096 + 128
    # The set holds the segment past the pool's free, until it is deleted.
    del segment, loaded
    lib.tandem_pool_free(ptr, 2 * MIB, 0, None)
    gc.collect()
    assert info["buffers"][-1] in held_ids(client)
    assert torch.equal(tt.load("pooled", client=client)["bias"], torch.full((128 // 4,), 0.25))
    tt.delete("pooled", client=client)
    tt.delete("pooled-again", client=client)
    gc.collect()
    assert wait_until(lambda: held_ids(client) == set())


def test_a_forked_child_leaves_its_parents_segments_alone(client, lib):
    ptr = lib.tandem_pool_alloc(MIB, 0, None)
    segment_id = tandem._tandem._pool_find(ptr)[0].id
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # The parent's segment is not the child's to free or find...
            lib.tandem_pool_free(ptr, MIB, 0, None)
            assert tandem._tandem._pool_find(ptr) is None
            # ...and the child's own segments are its own.
            own = lib.tandem_pool_alloc(MIB, 0, None)
            assert own and tandem._tandem._pool_status()["segments"] == 1
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert tandem._tandem._pool_find(ptr)[0].id == segment_id
    assert client.stat(segment_id)["leases"] == 1, "the parent's lease stands"
    tensor_at(ptr, MIB).fill_(3.0)
    # The child's segment went with it.
    assert wait_until(lambda: held_ids(client) == {segment_id})
    lib.tandem_pool_free(ptr, MIB, 0, None)
    assert wait_until(lambda: held_ids(client) == set())


HOLDER = textwrap.dedent(LIB_SETUP) + textwrap.dedent(
    """
    import tandem.torch as tt
    client = tandem.share.connect(sys.argv[1])
    tt._attach_pool(client)
    ptrs = [lib.tandem_pool_alloc(int(sys.argv[2]), 0, None) for _ in range(3)]
    assert all(ptrs)
    print("holding", flush=True)
    sys.stdin.readline()
    """
)


def test_a_process_killed_holding_segments_leaves_nothing(client, shm):
    before = shm()
    for _ in range(5):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, client.socket, str(MIB)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout.readline().strip() == "holding"
        assert len(held_ids(client)) == 3
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        assert wait_until(lambda: held_ids(client) == set()), "the daemon took them back"
    gc.collect()
    assert shm() <= before, "nothing left in /dev/shm"


def test_the_pool_needs_a_cuda_daemon(client):
    with pytest.raises(tandem.UnsupportedError, match="host"):
        with tt.pool(client):
            pass
