"""Shared buffers: device (or CPU device) memory handed between processes by
id, owned by the share daemon, so a producer may exit while consumers still
use what it made.

    client = tandem.share.connect()            # or tandem.share.spawn_daemon()
    buf = client.create(nbytes)                # writable by this process
    torch.from_dlpack(buf.view("float32", (n,))).fill_(1.0)
    buf.seal()                                 # read-only from here on
    ... another process: client.get(buf.id)
    client.export(buf.id)                      # other nodes may fetch it now
    ... on another node: tandem.share.fetch(f"nodeA/{id}")

A buffer on the CPU device is a :class:`HostBuffer`, which also has the buffer
protocol (``memoryview(buf)``, ``numpy.asarray(buf)``: bytes in place, read-only
once sealed). Arrays made from a buffer (``from_dlpack``, ``memoryview``) keep
it mapped, and the daemon's lease on it held, until they are gone.
"""

from __future__ import annotations

import os
import shutil
from typing import Optional

from ._tandem import Buffer, Client, HostBuffer, Mirror, View
from ._tandem import connect as _connect
from ._tandem import spawn_daemon as _spawn_daemon

__all__ = [
    "Buffer",
    "Client",
    "HostBuffer",
    "Mirror",
    "View",
    "connect",
    "fetch",
    "spawn_daemon",
]


def connect(socket: Optional[str | os.PathLike] = None) -> Client:
    """Connects to the daemon serving ``socket`` (default: the user's
    default socket, where ``tandem share serve`` listens)."""
    return _connect(None if socket is None else os.fspath(socket))


def fetch(remote: str, device: int = 0, socket: Optional[str | os.PathLike] = None) -> Buffer:
    """Copies buffer ``remote`` (``"NODE/ID"``, exported on node NODE of the
    cluster of the daemon serving ``socket``) into a new sealed buffer on
    ``device`` here: ``connect(socket).fetch(remote, device)``. A failure is
    a :class:`tandem.errors.ClusterError` (or another ``ShareError``)."""
    return connect(socket).fetch(remote, device)


def spawn_daemon(
    backend: str = "auto", tandem: Optional[str | os.PathLike] = None
) -> Client:
    """Starts a daemon for this process and connects to it; it stops when the
    client and its buffers are gone, or this process dies. ``backend``:
    ``"auto"`` (CUDA when built with it and a device answers), ``"host"`` or
    ``"cuda"``. ``tandem`` is the ``tandem`` executable: default
    ``$TANDEM_BIN``, else ``$TANDEM_BIN_DIR/tandem``, else ``tandem`` on
    ``PATH``."""
    return _spawn_daemon(backend, _tandem_binary(tandem))


def _tandem_binary(tandem: Optional[str | os.PathLike]) -> Optional[str]:
    if tandem is not None:
        return os.fspath(tandem)
    if os.environ.get("TANDEM_BIN") or os.environ.get("TANDEM_BIN_DIR"):
        return None  # the client library's own lookup reads them
    return shutil.which("tandem")
