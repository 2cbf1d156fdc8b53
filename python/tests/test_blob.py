"""The blob store through a runtime started for the test (a RAM store):
put and get of bytes, buffer-protocol objects and NumPy arrays, into new
and given outputs, stat, ls, rm, errors; and tandem.status of that
runtime."""

from __future__ import annotations

import gc
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
from lines import readline_within


def test_bytes_and_buffers_round_trip(store):
    assert store.put("t", "a", b"hello world") == 11
    assert store.get("t", "a") == bytearray(b"hello world")
    store.put("t", "a", bytearray(b"HELLO"), offset=0)
    assert store.get("t", "a", offset=6) == bytearray(b"world")
    out = bytearray(5)
    assert store.get("t", "a", out=out) is out and out == b"HELLO"
    store.put("t", "m", memoryview(b"xyz"))
    assert bytes(store.get("t", "m")) == b"xyz"


def test_arrays_round_trip_through_chunks(store):
    # Larger than a chunk (4 MiB): the transfer goes a chunk at a time.
    array = np.random.default_rng(7).random((6 << 20) // 8)
    assert store.put("arrays", "big", array) == array.nbytes
    back = np.empty_like(array)
    assert store.get("arrays", "big", out=back) is back
    np.testing.assert_array_equal(back, array)
    raw = np.frombuffer(store.get("arrays", "big"), dtype=np.float64)
    np.testing.assert_array_equal(raw, array)


def test_stat_ls_rm(store):
    tag = store.tag("listed")
    store.put(tag, "one", b"1")
    store.put("listed", "two", b"22")
    assert sorted(store.ls("listed")) == ["one", "two"]
    assert "listed" in store.ls()
    info = store.stat("listed", "two")
    assert info["size"] == 2 and info["durable"] is False and info["targets"] == [0]
    store.rm("listed", "one")
    assert store.ls(tag) == ["two"]


def test_errors(store, tandem_bin):
    with pytest.raises(tandem.BlobNotFoundError):
        store.get("nowhere", "x")
    store.put("e", "x", b"abc")
    with pytest.raises(tandem.BlobNotFoundError):
        store.get("e", "y")
    with pytest.raises(KeyError):
        store.stat("e", "y")
    with pytest.raises(tandem.BlobNameError):
        store.put("e", "", b"abc")
    with pytest.raises(tandem.BlobRangeError):
        store.get("e", "x", out=bytearray(10))
    with pytest.raises(tandem.UnsupportedError):
        store.put("e", "z", object())
    with pytest.raises(tandem.UnsupportedError):
        store.get("e", "x", out=b"abc")  # not writable
    with pytest.raises(tandem.BlobError):
        tandem.blob.fork("/nonexistent/store.toml", tandem=tandem_bin)


@pytest.mark.parametrize("compression", ["none", "zstd", "lz4:fast", "dynamic:zstd:best"])
def test_compressed_puts_read_back_the_same_bytes(store, compression):
    # Larger than a chunk: each chunk is a put in the same context.
    array = np.tile(np.arange(1024, dtype=np.uint32), (5 << 20) // 4096)
    size = store.put("packed", compression, array, compression=compression)
    assert size == array.nbytes
    back = np.empty_like(array)
    store.get("packed", compression, out=back)
    np.testing.assert_array_equal(back, array)
    info = store.stat("packed", compression)
    if compression == "none":
        assert info["codecs"] == [] and info["stored"] >= array.nbytes
    else:
        # A repeating pattern compresses: fewer bytes stored than put.
        codec = next(part for part in compression.split(":") if part in ("lz4", "zstd"))
        assert info["codecs"] == [codec], info
        assert 0 < info["stored"] < array.nbytes, info


def test_persistence_reaches_the_store(store):
    assert store.put("kept", "v", b"x", persistence="volatile") == 1
    assert store.stat("kept", "v")["persistence"] == "volatile"
    # A RAM store keeps nothing past a restart: a put that must survive one
    # is refused, which it would not be if the context were dropped.
    with pytest.raises(tandem.BlobError):
        store.put("kept", "t", b"x", persistence="long-term")
    assert "t" not in store.ls("kept")


@pytest.mark.parametrize(
    "keywords, argument",
    [
        ({"compression": "gzip"}, "compression"),
        ({"compression": "zstd:slow"}, "compression"),
        ({"persistence": "forever"}, "persistence"),
    ],
)
def test_unknown_context_values_are_named(store, keywords, argument):
    with pytest.raises(tandem.ArgumentError, match=rf"^{argument} "):
        store.put("ctx", "x", b"abc", **keywords)
    with pytest.raises(TypeError):
        store.put("ctx", "x", b"abc", 0, None, "zstd")  # keyword-only


def test_status_is_what_tandem_status_json_prints(store):
    status = tandem.status(store.segment)
    assert status["segment"] == store.segment
    assert status["runtime"]["pid"] == store.runtime_pid
    assert any(pool["name"] == "blob" for pool in status["pools"])
    with pytest.raises(tandem.StatusError):
        tandem.status("tandem-no-such-segment")


def test_attach_reaches_the_same_store(store):
    other = tandem.blob.attach(store.segment)
    other.put("shared", "x", b"seen")
    assert store.get("shared", "x") == b"seen"
    assert other.runtime_pid == store.runtime_pid


def test_a_forked_runtime_stops_with_its_client(store_config, tandem_bin):
    store = tandem.blob.fork(store_config, tandem=tandem_bin)
    pid = store.runtime_pid
    del store
    gc.collect()
    if wait_for_exit(pid):
        return
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the forked runtime outlived its client")


PUTTER = """
    import signal, sys, time, numpy as np, tandem
    # Ctrl-C as an interactive Python takes it: a child of a shell's
    # background job starts with SIGINT ignored, and Python keeps that.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    store = tandem.blob.fork(sys.argv[1], tandem=sys.argv[2], heap_bytes=16 << 20)
    data = np.zeros(64 << 20, dtype=np.uint8)
    print("putting", store.runtime_pid, flush=True)
    try:
        while True:
            store.put("t", "big", data)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


def test_ctrl_c_ends_a_transfer(store_config, tandem_bin):
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PUTTER), str(store_config), tandem_bin],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        word, runtime_pid = readline_within(child, 30).split()
        assert word == "putting"
        time.sleep(0.5)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        assert readline_within(child, 5).strip() == "interrupted"
        assert time.monotonic() - sent < 5
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
    assert wait_for_exit(int(runtime_pid)), "the runtime outlived its client"


def wait_for_exit(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_runtime_that_dies_starting_says_why(tandem_bin):
    with tempfile.TemporaryDirectory(prefix="tandem-python-test-") as folder:
        config = Path(folder) / "store.toml"
        # A valid configuration whose metadata cannot be created: the store
        # opens it only once the runtime runs.
        config.write_text(
            'metadata = "/proc/tandem-no-such-dir/blob.redb"\n'
            "[[targets]]\n"
            'kind = "ram"\n'
            f"capacity = {16 << 20}\n"
            "score = 1.0\n"
        )
        with pytest.raises(tandem.BlobRuntimeError) as refused:
            tandem.blob.fork(str(config), tandem=tandem_bin)
    message = str(refused.value)
    assert "exit status" in message and "stderr" in message, message
    assert "blob.redb" in message, message
