"""Tandem's exceptions: a class per kind of failure, some also deriving
from the built-in that says the same (``KeyError`` for an unknown id,
``TimeoutError`` for a seal that did not come), so either may be caught."""


class TandemError(Exception):
    """Every failure of a Tandem call."""


class ArgumentError(TandemError, ValueError):
    """An argument no call could take, named in the message: a negative
    size, id, device, offset or timeout, an unknown backend, compression or
    persistence name."""


class ShareError(TandemError):
    """A shared-buffer call failed."""


class NoDaemonError(ShareError, ConnectionError):
    """No share daemon serves the socket (start one: ``tandem share serve``,
    or ``tandem.share.spawn_daemon()``)."""


class DaemonGoneError(ShareError, ConnectionError):
    """The daemon went away; buffers already mapped stay usable."""


class RefusedError(ShareError, PermissionError):
    """The daemon refused this client (another user, version or backend)."""


class BusyError(ShareError):
    """The daemon is at a limit (connections, descriptors, buffers)."""


class UnknownIdError(ShareError, KeyError):
    """No buffer has this id."""


class DeletedError(ShareError, KeyError):
    """The buffer was deleted."""


class NotSealedError(ShareError, TimeoutError):
    """The buffer was not sealed before the timeout."""


class SealedError(ShareError):
    """The buffer is sealed: it cannot be written or sealed again."""


class InvalidSizeError(ShareError, ValueError):
    """A size of zero, or beyond the device."""


class StreamError(ShareError, ValueError):
    """A stream handle the buffer's device has no use for: any but ``None``
    on the CPU device, which has no streams; 0 (ambiguous) or a negative
    value on CUDA."""


class NoDeviceError(ShareError):
    """No such device, or one this process cannot reach."""


class DeviceError(ShareError):
    """A device (driver) call failed."""


class ProtocolError(ShareError):
    """The daemon's wire was broken."""


class ViewError(ShareError, ValueError):
    """A view's dtype is unknown, or its shape does not cover the buffer."""


class UnsupportedError(TandemError, TypeError):
    """An object Tandem cannot take: no DLPack nor buffer protocol, not
    contiguous, read-only where it is written, on an unknown device."""


class BlobError(TandemError):
    """A blob store call failed."""


class BlobNotFoundError(BlobError, KeyError):
    """No such blob or tag."""


class BlobNameError(BlobError, ValueError):
    """An empty name, one too long, or one with control characters."""


class BlobRangeError(BlobError, ValueError):
    """A range outside the blob, empty, or too large."""


class BlobSpaceError(BlobError):
    """The store has no room."""


class BlobRuntimeError(BlobError):
    """The runtime serving the store did not answer (gone, not found,
    stopped)."""


class StatusError(TandemError):
    """No runtime's status could be read."""


__all__ = [
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
    "ViewError",
    "UnsupportedError",
    "BlobError",
    "BlobNotFoundError",
    "BlobNameError",
    "BlobRangeError",
    "BlobSpaceError",
    "BlobRuntimeError",
    "StatusError",
]
