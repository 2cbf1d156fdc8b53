"""CUDA tensors between processes through the share daemon, and through the
blob store: PyTorch and CuPy consumers with no copy, a consumer killed while
it holds a tensor, a producer exiting first, a seal recorded on the
producer's stream, blob put/get of CUDA tensors."""

from __future__ import annotations

import signal

import pytest

import tandem
from children import expect, finish, python
from polling import freed, wait_for

pytestmark = pytest.mark.gpu

N = 1 << 20

PRODUCER = """
    import sys, torch, tandem
    client = tandem.share.connect(sys.argv[1])
    n = int(sys.argv[2])
    buf = client.create(n * 4)
    tensor = torch.from_dlpack(buf.view("float32", (n,)))
    tensor.copy_(torch.arange(n, device="cuda", dtype=torch.float32) * 2)
    buf.seal()
    print("id", buf.id, flush=True)
    sys.stdin.readline()
"""

CONSUMER = """
    import sys, cupy, torch, tandem
    client = tandem.share.connect(sys.argv[1])
    buf = client.get(int(sys.argv[2]))
    n = int(sys.argv[3])
    view = buf.view("float32", (n,))
    address = view.__cuda_array_interface__["data"][0]
    tensor = torch.from_dlpack(view)
    array = cupy.from_dlpack(view)
    through_cai = cupy.asarray(view)
    assert tensor.is_cuda and tensor.data_ptr() == address, "torch copied"
    assert array.data.ptr == address and through_cai.data.ptr == address, "cupy copied"
    expected = torch.arange(n, device="cuda", dtype=torch.float32) * 2
    assert torch.equal(tensor, expected)
    assert bool((array == cupy.arange(n, dtype=cupy.float32) * 2).all())
    print("holding", flush=True)
    sys.stdin.readline()
    # Still valid whatever happened meanwhile (the producer gone).
    assert torch.equal(tensor * 1, expected) and float(array.sum()) == float(expected.sum())
    print("ok", flush=True)
    sys.stdin.readline()
"""




def test_torch_and_cupy_consumers_read_a_producers_tensor_in_place(daemon):
    producer = python(PRODUCER, daemon.socket, N)
    buf_id = int(expect(producer, "id"))
    consumer = python(CONSUMER, daemon.socket, buf_id, N)
    expect(consumer, "holding")
    assert daemon.stat(buf_id)["leases"] == 2
    consumer.stdin.write("\n")
    consumer.stdin.flush()
    expect(consumer, "ok")
    finish(consumer)
    finish(producer)
    daemon.delete(buf_id)
    assert wait_for(lambda: freed(daemon, buf_id))


def test_a_consumer_killed_while_it_holds_the_tensor_gives_it_back(daemon):
    producer = python(PRODUCER, daemon.socket, N)
    buf_id = int(expect(producer, "id"))
    finish(producer)  # the daemon keeps the sealed buffer
    consumer = python(CONSUMER, daemon.socket, buf_id, N)
    expect(consumer, "holding")
    daemon.delete(buf_id)
    assert daemon.stat(buf_id)["leases"] == 1
    consumer.send_signal(signal.SIGKILL)
    consumer.wait(timeout=60)
    assert wait_for(lambda: freed(daemon, buf_id)), "the killed consumer's lease stayed"
    assert daemon.status()["objects"] == 0


def test_the_producer_exits_while_a_consumer_still_uses_its_tensor(daemon):
    producer = python(PRODUCER, daemon.socket, N)
    buf_id = int(expect(producer, "id"))
    consumer = python(CONSUMER, daemon.socket, buf_id, N)
    expect(consumer, "holding")
    finish(producer)  # gone: the daemon owns the memory
    consumer.stdin.write("\n")
    consumer.stdin.flush()
    expect(consumer, "ok")
    finish(consumer)
    daemon.delete(buf_id)


def test_put_copies_a_cuda_tensor_into_a_buffer_on_its_device(daemon):
    import torch

    source = torch.randn(N, device="cuda")
    buf = daemon.put(source)
    assert buf.sealed and buf.nbytes == source.numel() * 4
    back = torch.from_dlpack(daemon.get(buf.id).view("float32", (N,)))
    assert back.data_ptr() != source.data_ptr() and torch.equal(back, source)
    daemon.delete(buf.id)


def test_a_consumer_stream_waits_for_the_seal(daemon):
    import torch

    buf = daemon.create(N * 4)
    torch.from_dlpack(buf.view("float32", (N,))).fill_(3.0)
    buf.seal()
    reader = daemon.get(buf.id)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        tensor = torch.from_dlpack(reader.view("float32", (N,)))
        total = tensor.sum()
    stream.synchronize()
    assert float(total) == 3.0 * N
    # -1: no ordering asked, also accepted.
    assert reader.__dlpack__(stream=-1, max_version=(1, 0)) is not None
    with pytest.raises(BufferError):
        reader.__dlpack__(stream=0)
    daemon.delete(buf.id)


@pytest.mark.parametrize("lend", ["object", "handle"])
def test_a_seal_on_the_producers_stream_orders_readers_after_its_work(daemon, lend):
    import torch

    buf = daemon.create(N * 4)
    side = torch.cuda.Stream()  # non-blocking: the legacy default stream does not wait for it
    with torch.cuda.stream(side):
        tensor = torch.from_dlpack(buf.view("float32", (N,)))
        torch.cuda._sleep(100_000_000)  # the fill lands long after seal() returns
        tensor.fill_(5.0)
    buf.seal(stream=side if lend == "object" else side.cuda_stream)
    reader = daemon.get(buf.id)
    # Queued on the default stream, which the export makes wait for the seal.
    total = torch.from_dlpack(reader.view("float32", (N,))).sum()
    assert float(total) == 5.0 * N
    del tensor
    daemon.delete(buf.id)


def test_seal_refuses_stream_0_on_cuda(daemon):
    buf = daemon.create(64)
    with pytest.raises(tandem.StreamError):
        buf.seal(stream=0)  # ambiguous: legacy or per-thread
    assert not buf.sealed
    buf.seal(stream=2)  # the per-thread default stream
    assert buf.sealed
    daemon.delete(buf.id)


@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_seal_takes_a_librarys_default_stream_object(daemon, library):
    # Its handle is 0, CUDA's null stream: the legacy default stream, where
    # a raw 0 is refused as ambiguous.
    if library == "torch":
        import torch

        stream = torch.cuda.current_stream()
        assert stream.cuda_stream == 0
    else:
        import cupy

        stream = cupy.cuda.Stream.null
        assert stream.ptr == 0
    buf = daemon.create(64)
    buf.seal(stream=stream)
    assert buf.sealed
    daemon.delete(buf.id)


def test_blob_put_and_get_of_cuda_tensors(store_config):
    import cupy
    import torch

    store = tandem.blob.fork(store_config)
    source = torch.randn(3 << 20, device="cuda")  # 12 MiB: several chunks
    assert store.put("cuda", "t", source) == source.numel() * 4
    out = torch.empty_like(source)
    assert store.get("cuda", "t", out=out) is out
    assert torch.equal(out, source)
    on_host = store.get("cuda", "t")
    assert bytes(on_host) == source.cpu().numpy().tobytes()
    array = cupy.arange(1 << 16, dtype=cupy.int32)
    store.put("cuda", "c", array)
    back = cupy.zeros_like(array)
    store.get("cuda", "c", out=back)
    assert bool((back == array).all())
