"""JAX as a consumer: a shared CUDA buffer, sealed by this process, read in
another one as a jax.Array through DLPack from a typed view, with no copy,
its values compared on the GPU. Skipped (and said) where JAX is not
importable."""

from __future__ import annotations

import pytest

from children import expect, finish, python

pytestmark = pytest.mark.gpu

N = 1 << 20

CONSUMER = """
    import os, sys
    # JAX would otherwise reserve most of the GPU's memory when it starts.
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax, jax.numpy as jnp, tandem
    client = tandem.share.connect(sys.argv[1])
    n = int(sys.argv[3])
    view = client.get(int(sys.argv[2])).view("float32", (n,))
    address = view.__cuda_array_interface__["data"][0]
    array = jax.dlpack.from_dlpack(view)
    (device,) = array.devices()
    assert device.platform == "gpu", f"on {device}"
    assert array.dtype == jnp.float32 and array.shape == (n,)
    assert array.unsafe_buffer_pointer() == address, "jax copied"
    # Both on the GPU: the comparison runs there, one bool comes back.
    expected = jnp.arange(n, dtype=jnp.float32) * 2
    assert bool(jnp.array_equal(array, expected)), "wrong values"
    print("ok", flush=True)
    sys.stdin.readline()
"""


def test_a_jax_consumer_reads_a_shared_tensor_in_place(daemon, request):
    try:
        import jax  # noqa: F401
    except ImportError as e:
        print(f"{request.node.name}: skipped: jax is not importable ({e})")
        pytest.skip(f"skipped: jax is not importable ({e})")
    import torch

    buf = daemon.create(N * 4)
    tensor = torch.from_dlpack(buf.view("float32", (N,)))
    tensor.copy_(torch.arange(N, device="cuda", dtype=torch.float32) * 2)
    buf.seal()
    consumer = python(CONSUMER, daemon.socket, buf.id, N)
    expect(consumer, "ok")
    assert daemon.stat(buf.id)["leases"] == 2  # this process's and the consumer's
    finish(consumer)
    del tensor
    daemon.delete(buf.id)
