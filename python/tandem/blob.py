"""The blob store through a runtime serving it: tags of named blobs, put and
get at offsets, from and into bytes, buffer-protocol objects and DLPack
tensors (CPU and CUDA).

    store = tandem.blob.attach()               # the live runtime, or
    store = tandem.blob.fork("store.toml")     # one started for this process
    store.put("weights", "layer0", tensor)
    store.get("weights", "layer0", out=other_tensor)
"""

from __future__ import annotations

import os
from typing import Optional

from ._tandem import BlobClient
from ._tandem import attach as _attach
from ._tandem import fork as _fork
from .share import _tandem_binary

__all__ = ["BlobClient", "attach", "fork"]


def attach(segment: Optional[str] = None) -> BlobClient:
    """Attaches to the runtime of CPU segment ``segment`` (default: the one
    live runtime), which must serve the blob pool (``tandem blob run``)."""
    return _attach(segment)


def fork(
    config: str | os.PathLike,
    tandem: Optional[str | os.PathLike] = None,
    heap_bytes: int = 16 << 20,
) -> BlobClient:
    """Starts ``tandem blob run`` on the store ``config`` describes (a TOML
    file: ``metadata`` and ``[[targets]]``, or a runtime's configuration with
    a ``[blob]`` table) for this process, and attaches to it; it stops when
    the client is gone, or this process dies.
    ``heap_bytes`` is each client's heap in the runtime (eight clients at
    most), which transfers go through a chunk at a time."""
    return _fork(os.fspath(config), _tandem_binary(tandem), heap_bytes)
