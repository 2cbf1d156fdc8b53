"""Shared buffers on the CPU device: NumPy through DLPack and the buffer
protocol, capsule ownership, two processes sharing by id, a consumer killed
while it holds a view, and bad input."""

from __future__ import annotations

import ctypes
import gc
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tandem
from lines import readline_within
from polling import freed, wait_for


# NumPy imports DLPack writable from 2.1 on (versioned capsules); before, every
# import is read-only, and writes go through the buffer protocol.
NUMPY_DLPACK_WRITES = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def leases(client, buf_id: int) -> int:
    gc.collect()
    return client.stat(buf_id)["leases"]


def test_numpy_writes_through_dlpack_and_reads_the_sealed_buffer(client):
    buf = client.create(64)
    assert not buf.sealed and buf.nbytes == 64 and len(buf) == 64
    array = np.from_dlpack(buf.view("float32", (4, 4)))
    assert array.shape == (4, 4) and array.dtype == np.float32
    assert array.flags.writeable == NUMPY_DLPACK_WRITES
    if not NUMPY_DLPACK_WRITES:
        array = np.asarray(buf).view(np.float32).reshape(4, 4)
    array[:] = np.arange(16, dtype=np.float32).reshape(4, 4)
    buf.seal()
    assert buf.sealed
    again = client.get(buf.id)
    read = np.from_dlpack(again.view("float32"))
    assert read.shape == (16,)
    assert not read.flags.writeable
    np.testing.assert_array_equal(read, np.arange(16, dtype=np.float32))
    raw = np.from_dlpack(again)
    assert raw.dtype == np.uint8 and raw.shape == (64,)


def test_the_buffer_protocol_lends_bytes_in_place(client):
    buf = client.create(16)
    assert type(buf) is tandem.share.HostBuffer and isinstance(buf, tandem.share.Buffer)
    view = memoryview(buf)
    assert not view.readonly and view.nbytes == 16 and view.format == "B"
    assert view.shape == (16,) and view.strides == (1,) and view.obj is buf
    view[:4] = b"abcd"
    assert bytes(np.from_dlpack(buf)[:4]) == b"abcd"
    assert np.asarray(buf).ctypes.data == np.from_dlpack(buf).ctypes.data  # in place
    buf.seal()
    sealed = memoryview(buf)
    assert sealed.readonly and bytes(sealed[:4]) == b"abcd"
    with pytest.raises(TypeError):
        sealed[0] = 1
    opened = client.get(buf.id)
    assert type(opened) is tandem.share.HostBuffer and bytes(memoryview(opened)[:4]) == b"abcd"
    with pytest.raises(TypeError):
        tandem.share.HostBuffer()  # made by a client only
    del view, sealed


def test_a_memoryview_keeps_its_buffer_mapped(client):
    buf = client.create(8)
    buf.seal()
    buf_id = buf.id
    view = memoryview(client.get(buf_id))
    del buf
    assert leases(client, buf_id) == 1 and bytes(view) == bytes(8)
    view.release()
    assert leases(client, buf_id) == 0


def test_mirrors_copy_back_a_writers_bytes_only(client):
    buf = client.create(8)
    with buf.mirror() as host:
        assert isinstance(host, bytearray)
        host[:] = b"12345678"
    assert bytes(np.from_dlpack(buf)) == b"12345678"
    buf.seal()
    with buf.mirror() as host:
        assert host == b"12345678" and isinstance(host, bytes)


def test_versioned_and_legacy_capsules(client):
    buf = client.create(32)
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    assert get_name(buf.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert get_name(buf.__dlpack__()) == b"dltensor"
    assert get_name(buf.__dlpack__(max_version=(0, 8))) == b"dltensor"
    assert buf.__dlpack_device__() == (1, 0)


def test_capsules_never_consumed_give_their_lease_back(client):
    # A process holds one lease per buffer it maps, however many handles.
    buf = client.create(32)
    buf.seal()
    reader = client.get(buf.id)
    assert leases(client, buf.id) == 1
    capsules = [reader.__dlpack__(max_version=(1, 0)) for _ in range(3)]
    capsules += [reader.view("int32").__dlpack__() for _ in range(3)]
    buf_id = buf.id
    del reader, buf
    assert leases(client, buf_id) == 1  # the capsules keep the mapping
    del capsules
    assert leases(client, buf_id) == 0


@pytest.mark.parametrize("order", ["arrays_first", "buffer_first", "interleaved"])
def test_arrays_keep_the_buffer_mapped_whatever_the_order_of_drops(client, order):
    buf = client.create(4096)
    np.asarray(buf)[:] = 7
    buf.seal()
    buf_id = buf.id
    reader = client.get(buf_id)
    del buf
    arrays = [np.from_dlpack(reader), np.from_dlpack(reader.view("uint32", (1024,)))]
    if order == "arrays_first":
        del arrays
        assert leases(client, buf_id) == 1
        del reader
    elif order == "buffer_first":
        del reader
        assert leases(client, buf_id) == 1
        assert (arrays[0] == 7).all() and (arrays[1] == 0x07070707).all()
        del arrays
    else:
        first = arrays.pop()
        del reader
        assert (first == 0x07070707).all()
        del first
        assert leases(client, buf_id) == 1
        del arrays
    assert leases(client, buf_id) == 0


def test_dlpack_refusals_are_buffer_errors(client):
    buf = client.create(16)
    with pytest.raises(BufferError):
        buf.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        buf.__dlpack__(stream=5)
    assert buf.__dlpack__(stream=None, dl_device=(1, 0), copy=False) is not None
    assert not hasattr(buf, "__cuda_array_interface__")


def test_put_copies_an_array_into_a_sealed_buffer(client):
    source = np.arange(1000, dtype=np.float64)
    buf = client.put(source)
    assert buf.sealed and buf.nbytes == source.nbytes
    np.testing.assert_array_equal(np.from_dlpack(client.get(buf.id).view("float64")), source)
    raw = client.put(b"hello")
    assert bytes(np.from_dlpack(raw)) == b"hello"
    with pytest.raises(tandem.UnsupportedError):
        client.put(np.arange(16, dtype=np.int32).reshape(4, 4)[:, 1])


class CudaStreamProtocol:
    """A stream as cuda.core and others lend it: `__cuda_stream__()`, a
    (version, handle) pair."""

    def __init__(self, answer):
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer


class CudaStreamAttribute:
    """A stream as PyTorch lends it: its handle in `cuda_stream`."""

    def __init__(self, handle):
        self.cuda_stream = handle


class CudaStreamPointer:
    """A stream as CuPy lends it: its handle in `ptr`."""

    def __init__(self, handle):
        self.ptr = handle


@pytest.mark.parametrize(
    "stream, error",
    [
        (7, tandem.StreamError),
        (-1, tandem.StreamError),
        (CudaStreamAttribute(7), tandem.StreamError),
        (CudaStreamProtocol((0, 7)), tandem.StreamError),
        (CudaStreamPointer(7), tandem.StreamError),
        ("7", TypeError),
        (7.0, TypeError),
        (CudaStreamAttribute("7"), TypeError),
        (CudaStreamPointer("7"), TypeError),
        (CudaStreamProtocol(7), TypeError),
        (CudaStreamProtocol((0, "7")), TypeError),
        (1 << 70, tandem.StreamError),
    ],
)
def test_seal_takes_no_stream_on_the_cpu_device(client, stream, error):
    buf = client.create(8)
    with pytest.raises(error):
        buf.seal(stream=stream)
    # Refused before anything changed: still the writer's, and sealable.
    assert not buf.sealed
    memoryview(buf)[:2] = b"ok"
    buf.seal(stream=None)
    assert buf.sealed and bytes(memoryview(client.get(buf.id))[:2]) == b"ok"


@pytest.mark.parametrize(
    "lent",
    [CudaStreamAttribute, CudaStreamPointer, lambda handle: CudaStreamProtocol((0, handle))],
    ids=["cuda_stream", "ptr", "__cuda_stream__"],
)
def test_a_stream_objects_handle_0_is_the_legacy_default_stream(client, lent):
    # The CPU device refuses every stream, naming the handle it was given:
    # the legacy default stream's 1 for an object's 0, a raw 0 as passed.
    buf = client.create(8)
    with pytest.raises(tandem.StreamError, match=r"^stream 1 "):
        buf.seal(stream=lent(0))
    with pytest.raises(tandem.StreamError, match=r"^stream 0 "):
        buf.seal(stream=0)
    with pytest.raises(tandem.StreamError, match=r"^stream 7 "):
        buf.seal(stream=lent(7))
    with pytest.raises(TypeError):
        buf.seal(stream=lent("7"))
    assert not buf.sealed


def test_bad_input(client):
    buf = client.create(10)
    with pytest.raises(tandem.ViewError):
        buf.view("float32")  # 10 bytes are no whole number of them
    with pytest.raises(tandem.ViewError):
        buf.view("float16", (3, 3))
    with pytest.raises(tandem.ViewError):
        buf.view("float33")
    with pytest.raises(tandem.UnknownIdError):
        client.get(1 << 40)
    with pytest.raises(KeyError):
        client.stat(1 << 40)
    with pytest.raises(tandem.InvalidSizeError):
        client.create(0)
    buf.seal()
    with pytest.raises(tandem.SealedError):
        buf.seal()
    with pytest.raises(ValueError):
        np.from_dlpack(buf)[0] = 1  # the read-only flag, honoured by NumPy
    with pytest.raises(TypeError):
        ctypes.c_char.from_buffer(buf)  # writable memory asked for
    unsealed = client.create(8)
    with pytest.raises(tandem.NotSealedError):
        client.get(unsealed.id, timeout=0.1)
    with pytest.raises(TimeoutError):
        client.get(unsealed.id, timeout=0)


def test_delete_of_a_buffer_in_use_frees_it_at_the_last_release(client):
    buf = client.create(1 << 20)
    buf.seal()
    buf_id = buf.id
    array = np.from_dlpack(client.get(buf_id))
    client.delete(buf_id)
    assert client.stat(buf_id)["deleted"]
    with pytest.raises(tandem.DeletedError):
        client.get(buf_id)
    del buf
    assert array.sum() == 0  # still mapped
    assert client.stat(buf_id)["leases"] == 1
    del array
    assert wait_for(lambda: freed(client, buf_id))



CONSUMER = """
    import sys, numpy as np, tandem
    client = tandem.share.connect(sys.argv[1])
    buf = client.get(int(sys.argv[2]))
    array = np.from_dlpack(buf.view("int64"))
    print(int(array.sum()), flush=True)
    sys.stdin.readline()
"""


def consumer(client, buf_id: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CONSUMER), str(client.socket), str(buf_id)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_two_processes_share_a_buffer_by_id(client):
    source = np.arange(1 << 16, dtype=np.int64)
    buf = client.put(source)
    child = consumer(client, buf.id)
    assert int(child.stdout.readline()) == int(source.sum())
    assert leases(client, buf.id) == 2  # this process's and the consumer's
    child.stdin.write("\n")
    child.stdin.close()
    assert child.wait(timeout=30) == 0
    assert wait_for(lambda: leases(client, buf.id) == 1)


PRODUCER = """
    import sys, tandem
    client = tandem.share.connect(sys.argv[1])
    buf = client.create(8 * 4096)
    memoryview(buf).cast("q")[0] = 7
    buf.seal()
    print(buf.id, flush=True)
"""


def test_a_producer_that_exits_right_after_sealing_leaves_a_readable_buffer(client):
    # The seal's record runs on a thread of the producer: seal() waits for it,
    # or the exit would take it along and every reader would wait for ever.
    producer = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PRODUCER), str(client.socket)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    buf_id = int(producer.stdout)
    buf = client.get(buf_id)
    assert memoryview(buf).cast("q")[0] == 7
    del buf
    client.delete(buf_id)
    assert wait_for(lambda: freed(client, buf_id))


def test_a_consumer_killed_while_it_holds_a_view_gives_its_lease_and_memory_back(client):
    buf = client.put(np.ones(1 << 18, dtype=np.int64))
    buf_id = buf.id
    child = consumer(client, buf_id)
    assert int(child.stdout.readline()) == 1 << 18
    client.delete(buf_id)
    del buf
    gc.collect()
    assert client.stat(buf_id)["leases"] == 1  # the consumer's
    held = client.status()["bytes"]
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdin.close()

    assert wait_for(lambda: freed(client, buf_id)), "the daemon kept the killed consumer's lease"
    assert client.status()["bytes"] <= held - (1 << 21)



WAITER = """
    import signal, sys, time, tandem
    # Ctrl-C as an interactive Python takes it: a child of a shell's
    # background job starts with SIGINT ignored, and Python keeps that.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    client = tandem.share.connect(sys.argv[1])
    print("waiting", flush=True)
    started = time.monotonic()
    try:
        client.get(int(sys.argv[2]), timeout=60)
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic() - started:.2f}", flush=True)
"""


def test_ctrl_c_ends_a_wait_for_a_seal(client):
    unsealed = client.create(8)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WAITER), str(client.socket), str(unsealed.id)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert readline_within(child, 30).strip() == "waiting"
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        line = readline_within(child, 10).split()
        assert child.wait(timeout=10) == 0
    finally:
        child.kill()
        child.wait()
    assert line[0] == "interrupted" and float(line[1]) < 5, line
