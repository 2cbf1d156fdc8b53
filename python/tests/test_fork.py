"""The package under the process topologies its users have, on the CPU
device: a `multiprocessing` child forked (the default start method on Linux)
while the parent holds buffers, PyTorch DataLoader workers, a daemon
restarted under a live client, and a reader that stores into a sealed
buffer. In each, what the parent holds is checked byte for byte."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import tandem

N = 1 << 20


def expected() -> np.ndarray:
    return (np.arange(N // 4, dtype=np.int32) % 1024).astype(np.int32)


def sealed_buffer(client, values: np.ndarray):
    buf = client.create(values.nbytes)
    np.asarray(buf).view(values.dtype)[:] = values
    buf.seal()
    return buf


def leases(client, buf_id: int) -> int:
    gc.collect()
    return client.stat(buf_id)["leases"]


def churn(client, count: int, byte: int) -> None:
    """Makes, fills with `byte`, seals and deletes `count` buffers of N bytes."""
    for _ in range(count):
        buf = client.create(N)
        np.asarray(buf)[:] = byte
        buf.seal()
        client.delete(buf.id)
        del buf


def child_uses_the_inherited_client(client, buf_id: int, results) -> None:
    """Runs in the forked child: opens the parent's buffer by id, makes and
    deletes buffers of the same size, deletes the parent's buffer and
    writes through a buffer of its own."""
    try:
        got = client.get(buf_id)
        values = np.from_dlpack(got).view(np.int32)
        assert np.array_equal(values, expected()), "the parent's bytes"
        assert client.stat(buf_id)["leases"] >= 2, "its own lease beside the parent's"
        churn(client, 8, 0xFF)
        client.delete(buf_id)
        mine = client.create(N)
        np.asarray(mine).view(np.int32)[:] = -1
        mine.seal()
        results.put(("ok", os.getpid()))
    except BaseException as e:  # reported to the parent, which fails the test
        results.put(("failed", repr(e)))


def test_a_forked_child_uses_the_client_and_the_parents_data_stays(client):
    values = expected()
    buf = sealed_buffer(client, values)
    held = np.from_dlpack(client.get(buf.id)).view(np.int32)
    before = leases(client, buf.id)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=child_uses_the_inherited_client, args=(client, buf.id, results))
    child.start()
    # The parent keeps calling while the child does.
    deadline = time.monotonic() + 60
    while child.is_alive() and time.monotonic() < deadline:
        assert client.stat(buf.id)["id"] == buf.id
    child.join(60)
    assert child.exitcode == 0
    outcome, detail = results.get(timeout=10)
    assert outcome == "ok", detail
    info = client.stat(buf.id)
    assert info["deleted"], "the child's delete counts"
    assert leases(client, buf.id) == before, "the child's lease went with it, the parent's stayed"
    churn(client, 4, 0xAB)
    assert np.array_equal(held, values), "the parent's bytes, after the child and new buffers"
    assert int(held.sum()) == int(values.sum())


def test_dataloader_workers_read_shared_buffers_by_id(client):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed in this environment")
    from torch.utils.data import DataLoader, Dataset

    buffers = [sealed_buffer(client, np.full(1024, i, dtype=np.int64)) for i in range(8)]
    ids = [buf.id for buf in buffers]
    held = [np.from_dlpack(client.get(i)).view(np.int64) for i in ids]
    before = [leases(client, i) for i in ids]

    class Shared(Dataset):
        def __len__(self):
            return len(ids)

        def __getitem__(self, index):
            # Each worker is a forked child using the parent's client.
            got = client.get(ids[index])
            return torch.from_dlpack(got.view("int64")).clone()

    loader = DataLoader(
        Shared(), batch_size=2, num_workers=2, multiprocessing_context="fork"
    )
    for epoch in range(2):
        seen = torch.cat(list(loader))
        expect = torch.stack([torch.full((1024,), i, dtype=torch.int64) for i in range(8)])
        assert torch.equal(seen, expect), f"epoch {epoch}"
    del loader
    gc.collect()
    assert [leases(client, i) for i in ids] == before
    for i, array in enumerate(held):
        assert np.array_equal(array, np.full(1024, i, dtype=np.int64))


def serve(socket: Path, tandem_bin: str) -> subprocess.Popen:
    daemon = subprocess.Popen(
        [tandem_bin, "share", "serve", "--socket", str(socket), "--backend", "host", "--announce"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = daemon.stdout.readline()
    assert line.startswith("ready "), line
    return daemon


def test_a_restarted_daemon_never_hands_out_an_old_id(tandem_bin):
    with tempfile.TemporaryDirectory(prefix="tandem-python-test-") as folder:
        socket = Path(folder) / "share.sock"
        daemon = serve(socket, tandem_bin)
        try:
            client = tandem.share.connect(str(socket))
            old = sealed_buffer(client, expected())
            held = np.from_dlpack(client.get(old.id)).view(np.int32)
            daemon.kill()
            daemon.wait()
            # What the killed daemon could not remove: its socket, and its
            # CPU device events (`tandem clean` removes a dead owner's).
            socket.unlink(missing_ok=True)
            subprocess.run([tandem_bin, "clean"], check=True, capture_output=True)
            daemon = serve(socket, tandem_bin)
            writer = tandem.share.connect(str(socket))
            new = sealed_buffer(writer, np.full(N // 4, 5, dtype=np.int32))
            assert new.id != old.id
            got = np.from_dlpack(client.get(new.id)).view(np.int32)
            assert (got == 5).all(), "the new buffer's bytes, not a cached old mapping"
            with pytest.raises(tandem.errors.UnknownIdError):
                client.get(old.id)
            assert np.array_equal(held, expected()), "the old mapping keeps its bytes"
            del got, held, old, new, writer, client
            gc.collect()
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)


def test_a_store_into_a_sealed_buffer_faults_and_changes_nothing(client):
    buf = sealed_buffer(client, expected())
    reader = textwrap.dedent(
        """\
        import ctypes, sys
        import numpy as np
        import tandem
        client = tandem.share.connect(sys.argv[1])
        array = np.from_dlpack(client.get(int(sys.argv[2])))
        assert not array.flags.writeable
        print("mapped", flush=True)
        ctypes.memset(array.ctypes.data, 0xFF, 64)
        print("stored", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", reader, client.socket, str(buf.id)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "mapped" in done.stdout, done.stderr
    assert "stored" not in done.stdout
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stderr)
    again = np.from_dlpack(client.get(buf.id)).view(np.int32)
    assert np.array_equal(again, expected())


def test_a_writer_cannot_seal_a_buffer_it_deleted(client):
    buf = client.create(64)
    client.delete(buf.id)
    with pytest.raises(tandem.errors.DeletedError):
        buf.seal()
    with pytest.raises((tandem.errors.DeletedError, tandem.errors.UnknownIdError)):
        client.get(buf.id)


def child_uses_an_inherited_blob_client(store, results) -> None:
    try:
        store.get("kept", "x")
        results.put(("used", "a forked child used its parent's runtime client"))
    except tandem.errors.BlobRuntimeError as e:
        results.put(("refused", str(e)))
    except BaseException as e:  # reported to the parent, which fails the test
        results.put(("failed", repr(e)))


def test_a_blob_client_in_a_forked_child_refuses_and_the_parents_goes_on(store):
    store.put("kept", "x", b"parent")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=child_uses_an_inherited_blob_client, args=(store, results))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    outcome, detail = results.get(timeout=10)
    assert outcome == "refused" and "forked" in detail, detail
    for i in range(20):
        store.put("kept", f"after-{i}", b"x" * 4096)
    assert bytes(store.get("kept", "x")) == b"parent"
