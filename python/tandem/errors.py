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
    """The daemon is at a limit (connections, descriptors, buffers, named
    sets)."""


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


class UnknownSetError(ShareError, KeyError):
    """No named set has this name, or it keeps no such version."""


class SetPublishingError(ShareError):
    """The named set has no version yet: one is being published (try again
    once it is bound)."""


class SetNameError(ShareError, ValueError):
    """A set name that is empty, longer than 255 bytes, or has a control
    character."""


class ManifestError(ShareError):
    """A named set's manifest this package cannot use: another format, a
    fingerprint or a tensor's digest that does not match its bytes."""


class ClusterError(ShareError):
    """A fetch from another node of the daemon's cluster failed; nothing of it
    is left on either node."""


class NoClusterError(ClusterError):
    """The daemon is in no cluster (its config has no ``[cluster]``)."""


class ClusterUnavailableError(ClusterError, ConnectionError):
    """etcd, where the cluster's nodes are found, did not answer."""


class UnknownNodeError(ClusterError, KeyError):
    """No node of this name is in the cluster: never joined, or its lease
    expired."""


class NotExportedError(ClusterError, PermissionError):
    """The buffer exists on its node, but was not exported."""


class RemoteGoneError(ClusterError, ConnectionError):
    """The node holding the buffer went away mid-fetch."""


class ClusterRefusedError(ClusterError, PermissionError):
    """The other node refused this one: a different cluster token."""


class TransferError(ClusterError):
    """NIXL failed to move the bytes, or not within the fetch's deadline."""


class ViewError(ShareError, ValueError):
    """A view's dtype is unknown, or its shape does not cover the buffer."""


class UnsupportedError(TandemError, TypeError):
    """An object Tandem cannot take: no DLPack nor buffer protocol, not
    contiguous, read-only where it is written, on an unknown device."""


class NotContiguousError(UnsupportedError):
    """A tensor that is not contiguous (or not strided): a named set stores
    each tensor's bytes in one piece."""


class DtypeError(UnsupportedError):
    """A dtype a named set cannot carry (quantized, bits), or one the
    PyTorch loading the set lacks."""


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


# Computed: nothing star-imports this module (the package imports each
# class by name and lists them in its own `__all__`, which type checkers
# read), so one written list of the names is enough.
__all__ = [
    name
    for name, value in list(globals().items())
    if isinstance(value, type)
    and issubclass(value, Exception)
    and value.__module__ == __name__
]
