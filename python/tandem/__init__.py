"""Tandem from Python: GPU (and CPU device) tensors shared between processes
by id through the share daemon (:mod:`tandem.share`), PyTorch weight sets
published once and loaded by name (:mod:`tandem.torch`, imported on its
own: it needs PyTorch), the blob store (:mod:`tandem.blob`), and a runtime's
status (:func:`status`). Memory reaches NumPy, PyTorch, CuPy and JAX through
DLPack without a copy."""

from __future__ import annotations

import json
from typing import Any, Optional

from . import blob, errors, share
from ._tandem import status_json as _status_json

# The exception classes, each named: type checkers read `__all__` as written,
# not as computed from `errors.__all__`.
from .errors import (
    TandemError,
    ArgumentError,
    ShareError,
    NoDaemonError,
    DaemonGoneError,
    RefusedError,
    BusyError,
    UnknownIdError,
    DeletedError,
    NotSealedError,
    SealedError,
    InvalidSizeError,
    StreamError,
    NoDeviceError,
    DeviceError,
    ProtocolError,
    UnknownSetError,
    SetPublishingError,
    SetNameError,
    ManifestError,
    ClusterError,
    NoClusterError,
    ClusterUnavailableError,
    UnknownNodeError,
    NotExportedError,
    RemoteGoneError,
    ClusterRefusedError,
    TransferError,
    ViewError,
    UnsupportedError,
    NotContiguousError,
    DtypeError,
    BlobError,
    BlobNotFoundError,
    BlobNameError,
    BlobRangeError,
    BlobSpaceError,
    BlobRuntimeError,
    StatusError,
)

__all__ = [
    "blob",
    "errors",
    "share",
    "status",
    "TandemError",
    "ArgumentError",
    "ShareError",
    "NoDaemonError",
    "DaemonGoneError",
    "RefusedError",
    "BusyError",
    "UnknownIdError",
    "DeletedError",
    "NotSealedError",
    "SealedError",
    "InvalidSizeError",
    "StreamError",
    "NoDeviceError",
    "DeviceError",
    "ProtocolError",
    "UnknownSetError",
    "SetPublishingError",
    "SetNameError",
    "ManifestError",
    "ClusterError",
    "NoClusterError",
    "ClusterUnavailableError",
    "UnknownNodeError",
    "NotExportedError",
    "RemoteGoneError",
    "ClusterRefusedError",
    "TransferError",
    "ViewError",
    "UnsupportedError",
    "NotContiguousError",
    "DtypeError",
    "BlobError",
    "BlobNotFoundError",
    "BlobNameError",
    "BlobRangeError",
    "BlobSpaceError",
    "BlobRuntimeError",
    "StatusError",
]


def status(segment: Optional[str] = None) -> dict[str, Any]:
    """What ``tandem status --json`` prints for the runtime of CPU segment
    ``segment`` (default: the one live runtime), as a dict."""
    return json.loads(_status_json(segment))
