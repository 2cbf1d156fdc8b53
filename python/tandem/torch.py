"""Named weight sets for PyTorch: a state dict published once per node,
loaded by name in any process of the same user, read-only and without a
copy.

    tandem.torch.publish("encoder", model)               # one copy per tensor
    ... any process, the publisher alive or not:
    model.load_state_dict(tandem.torch.load("encoder"), assign=True)

:func:`publish` packs every tensor into a few shared buffers (one copy each,
a device copy for a tensor on the GPU), writes a manifest beside them and
binds them, all at once, as the next version of the set: a reader sees a
whole version or none, and a publisher killed mid-way leaves nothing (the
daemon frees what it had staged). The set outlives its publisher, until
:func:`delete`. :func:`load` maps the buffers read-only and returns views of
them: the tensors keep their buffers, and the daemon's leases on them,
alive, so a version retired by a newer publish stays valid for whoever
still holds its tensors.

Tensors born in the pool (:func:`pool`: a PyTorch ``MemPool`` whose
segments are the daemon's buffers) are published where they are: their
segments join the set as they are, with no copy, and the manifest names
each tensor's segment and offset. Their memory is the publisher's still:
what it writes there after the publish, readers see (publish a copy of
weights that training goes on changing), and this module keeps those
tensors for the publisher's life, as PyTorch would otherwise give their
memory to new tensors. A segment already in a set (an
earlier publish of the same tensors) is copied as any other tensor is.

The manifest (JSON, in the set's first buffer) lists each tensor's name,
dtype, shape, strides, buffer, offset, length and digest (BLAKE2b of its
bytes), and a fingerprint: BLAKE2b over the names, dtypes, shapes, strides
and digests, so that two publishes of the same weights fingerprint the same
whatever their packing or version, and a reader checks the manifest whole
without reading the weights (``load(..., verify=True)`` also checks every
tensor's bytes against its digest). The version is the daemon's record of
the bind, not the manifest's: the manifest is sealed before the bind that
numbers it.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import time
import unicodedata
from collections.abc import Mapping
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple, Union

import torch

from . import _tandem, share
from .errors import (
    ArgumentError,
    DeletedError,
    DtypeError,
    ManifestError,
    NoDeviceError,
    NotContiguousError,
    SetNameError,
    ShareError,
    UnknownIdError,
    UnsupportedError,
)

__all__ = ["pool", "publish", "load", "list", "delete", "FORMAT"]

#: The manifest format this module writes and reads.
FORMAT = "tandem.torch/1"

# Every tensor starts at a multiple of this: the largest element (complex128)
# and a cache line, so that a view of any dtype is aligned.
_ALIGN = 64
# Tensors are packed into buffers of up to this many bytes (a larger tensor
# gets one of its own): few buffers, each one lease, one mapping, one open.
# A set of more than this many of them packs larger ones, so that it stays
# within the daemon's buffers per set (two buffers hold more than a pack).
_PACK_BYTES = 1 << 30
_PACKS = 48
# How long a load looks the set up and opens its buffers again when newer
# versions retire the one it looked up before its buffers were opened (a
# publisher binding faster than a reader opens).
_RETRY_SECONDS = 10.0
# Where publish puts a set's manifest, and where load opens it without asking.
_MANIFEST_DEVICE = 0

# The dtypes a set carries: plain elements whose bytes are the value.
# Quantized and bit dtypes have no such bytes.
_DTYPES = (
    "float64", "float32", "float16", "bfloat16",
    "complex128", "complex64", "complex32",
    "int64", "int32", "int16", "int8",
    "uint64", "uint32", "uint16", "uint8", "bool",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
)  # fmt: skip

_client: Optional[share.Client] = None
# The client the pool allocates through (one a process), and its MemPool on
# each device, made once: its cached segments serve every later `pool()`.
_pool_client: Optional[share.Client] = None
_mem_pools: Dict[int, Any] = {}
# Pool-born tensors published where they are, kept for the process's life:
# once freed, PyTorch's caching allocator would hand their memory to new
# tensors, and readers of the set would see those.
_published: List[List[torch.Tensor]] = []


def _check_name(name: Any) -> None:
    """Refuses a bad set name before anything is allocated (the daemon
    checks it again: at most 255 bytes, no control character)."""
    if not isinstance(name, str):
        raise ArgumentError(f"a set name is a str, not {type(name).__name__}")
    if not name or len(name.encode()) > 255:
        raise SetNameError(f"set name {name!r} is empty or longer than 255 bytes")
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise SetNameError(f"set name {name!r} has a control character")


def _default_client() -> share.Client:
    global _client
    if _client is None:
        _client = share.connect()
    return _client


def _cuda_index(device: Union[int, str, torch.device, None]) -> int:
    if device is None:
        return torch.cuda.current_device()
    place = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if place.type != "cuda":
        raise ArgumentError(f"the pool allocates on a CUDA device, not {place}")
    return torch.cuda.current_device() if place.index is None else place.index


def _attach_pool(client: share.Client) -> None:
    """Makes ``client`` the one the pool's entry points allocate through
    (what :func:`pool` does before PyTorch calls them)."""
    global _pool_client
    _tandem._pool_attach(client)
    _pool_client = client


def _detach_pool() -> None:
    """Lets go of the pool's client once the pool holds no segment."""
    global _pool_client
    _tandem._pool_detach()
    _pool_client = None


@contextlib.contextmanager
def pool(
    client: Optional[share.Client] = None,
    device: Union[int, str, torch.device, None] = None,
) -> Iterator[Any]:
    """Routes this thread's CUDA allocations on ``device`` (default: the
    current one) to the daemon's memory while the ``with`` block runs:
    tensors made inside live in shared buffers from their first byte, and
    :func:`publish` shares them with no copy. Yields the
    ``torch.cuda.MemPool``. PyTorch's caching allocator works above it as
    for any pool (blocks, streams, reuse); each segment it asks for is a
    buffer of ``client`` (default: the daemon on the default socket), so
    the daemon's limits apply (a refusal is PyTorch's out-of-memory error)
    and a process that dies gives its segments back. One client a process
    serves the pool."""
    client = client or _default_client()
    if client.backend != "cuda":
        raise UnsupportedError(
            f"the pool allocates CUDA memory; this daemon serves the {client.backend} backend"
        )
    if not torch.cuda.is_available():
        raise NoDeviceError("the pool allocates CUDA memory, and PyTorch sees no CUDA device")
    index = _cuda_index(device)
    _attach_pool(client)
    mem_pool = _mem_pools.get(index)
    if mem_pool is None:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            _tandem.__file__, "tandem_pool_alloc", "tandem_pool_free"
        )
        mem_pool = _mem_pools[index] = torch.cuda.MemPool(allocator.allocator())
    with torch.cuda.use_mem_pool(mem_pool, index):
        yield mem_pool


def _dtype_name(key: str, tensor: torch.Tensor) -> str:
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise DtypeError(f"{key}: a named set cannot carry dtype {name}")
    return name


def _state_of(obj: Any) -> Dict[str, torch.Tensor]:
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, Mapping):
        raise UnsupportedError(
            f"publish takes a state dict or a module, not {type(obj).__name__}"
        )
    state = {}
    for key, tensor in obj.items():
        if not isinstance(key, str):
            raise UnsupportedError(f"state dict key {key!r} is not a string")
        if not isinstance(tensor, torch.Tensor):
            raise UnsupportedError(f"{key}: {type(tensor).__name__} is not a tensor")
        if tensor.layout != torch.strided or not tensor.is_contiguous():
            raise NotContiguousError(
                f"{key}: not contiguous (strides {tuple(tensor.stride())}): "
                "publish tensor.contiguous() instead"
            )
        state[key] = tensor.detach()
    return state


def _device_of(tensor: torch.Tensor, backend: str) -> int:
    """The daemon's device a tensor's bytes go to: its own GPU on a CUDA
    daemon, else device 0 (a host tensor copied to a GPU, or the CPU device)."""
    if backend == "cuda" and tensor.device.type == "cuda":
        return tensor.device.index or 0
    return 0


def _plan(
    state: Dict[str, torch.Tensor], backend: str, pooled: Dict[str, Tuple[int, int]]
) -> Tuple[List[Dict[str, Any]], List[Tuple[int, int]]]:
    """Where each tensor goes: its manifest entry (less its digest), and the
    buffers to create, as (device, bytes). A tensor in ``pooled`` stays
    where it is: (the index of its segment among the pool's, its offset);
    the pool's segments follow the created buffers."""
    entries: List[Dict[str, Any]] = []
    buffers: List[Tuple[int, int]] = []
    open_buffer: Dict[int, int] = {}  # device -> index of the buffer being filled
    # A tensor under several names (tied weights) is stored once: every
    # name views the same bytes, in the set as in the module.
    placed: Dict[Tuple[Any, ...], Tuple[int, int]] = {}
    total = sum(t.numel() * t.element_size() for k, t in state.items() if k not in pooled)
    pack = max(_PACK_BYTES, total // _PACKS + 1)
    for key, tensor in state.items():
        dtype = _dtype_name(key, tensor)
        nbytes = tensor.numel() * tensor.element_size()
        device = _device_of(tensor, backend)
        same = (tensor.device, tensor.data_ptr(), nbytes)
        if key in pooled:
            at, offset = pooled[key]
            at = -1 - at  # told from a created buffer until they are counted
        elif nbytes and same in placed:
            at, offset = placed[same]
        else:
            filling = open_buffer.get(device)
            at = len(buffers) if filling is None else filling
            offset = 0 if filling is None else -(-buffers[at][1] // _ALIGN) * _ALIGN
            if filling is None or (offset + nbytes > pack and offset > 0):
                at, offset = len(buffers), 0
                buffers.append((device, 0))
                open_buffer[device] = at
            buffers[at] = (device, max(buffers[at][1], offset + nbytes))
            placed[same] = (at, offset)
        entries.append(
            {
                "name": key,
                "dtype": dtype,
                "shape": builtins.list(tensor.shape),
                "stride": builtins.list(tensor.stride()),
                "buffer": at,
                "offset": offset,
                "nbytes": nbytes,
            }
        )
    for entry in entries:
        if entry["buffer"] < 0:
            entry["buffer"] = len(buffers) - 1 - entry["buffer"]
    # A buffer holds at least a byte: a set of empty tensors gets one anyway.
    return entries, [(device, max(size, 1)) for device, size in buffers]


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes, as a flat uint8 view."""
    return tensor.reshape(-1).view(torch.uint8)


def _fingerprint(entries: List[Dict[str, Any]]) -> str:
    content = sorted(
        (e["name"], e["dtype"], e["shape"], e["stride"], e["digest"]) for e in entries
    )
    text = json.dumps(content, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=32).hexdigest()


def _seal(buffer: share.Buffer, base: torch.Tensor) -> None:
    """Seals a buffer written through `base` once the work queued on its
    device's current stream (the copies) is done."""
    if base.device.type == "cuda":
        # The stream object, not its handle: a handle of 0 is ambiguous.
        buffer.seal(stream=torch.cuda.current_stream(base.device))
    else:
        buffer.seal()


def _pooled(
    state: Dict[str, torch.Tensor], client: share.Client, name: str
) -> Tuple[Dict[str, Tuple[int, int]], List[Tuple[share.Buffer, torch.Tensor]]]:
    """The tensors born in this process's pool of ``client``, published
    where they are: each tensor's (segment index, offset), and the
    segments, each staged for ``name`` here, with a tensor of its device.
    A segment the daemon will not stage (sealed in a set already, staged
    by a publish that failed) leaves its tensors to be copied."""
    if client is not _pool_client:
        return {}, []
    places: Dict[str, Tuple[int, int]] = {}
    segments: List[Tuple[share.Buffer, torch.Tensor]] = []
    index: Dict[int, int] = {}  # segment id -> its index, or -1: not staged
    for key, tensor in state.items():
        if not tensor.numel():
            continue
        found = _tandem._pool_find(tensor.data_ptr())
        if found is None:
            continue
        segment, offset = found
        if segment.id not in index:
            index[segment.id] = -1
            if not segment.sealed:
                try:
                    client.stage(segment.id, name)
                except ShareError:
                    continue
                index[segment.id] = len(segments)
                segments.append((segment, tensor))
        if index[segment.id] >= 0:
            places[key] = (index[segment.id], offset)
    return places, segments


def _create_staged(client: share.Client, name: str, nbytes: int, device: int) -> share.Buffer:
    buffer = client.create(nbytes, device)
    client.stage(buffer.id, name)
    return buffer


def publish(
    name: str, state: Any, *, client: Optional[share.Client] = None
) -> Dict[str, Any]:
    """Publishes ``state`` (a state dict, or a module's) as the next version
    of named set ``name``, through ``client`` (default: the daemon on the
    default socket). Every tensor is copied once into a few shared buffers,
    but for those born in the :func:`pool` of the same client, which stay
    where they are; they, with the manifest, are bound to ``name`` at once.
    Returns the version bound: ``name``, ``version``, ``manifest``,
    ``buffers`` (ids), ``tensors``, ``nbytes``, the manifest's
    ``fingerprint``, and ``copied``, the bytes copied."""
    _check_name(name)
    client = client or _default_client()
    tensors = _state_of(state)
    # Each buffer is staged before it is written (a pool's segment before
    # its seal): a publisher killed from here on leaves nothing behind (the
    # daemon frees what it staged; a segment goes with its process).
    pooled, segments = _pooled(tensors, client, name)
    entries, sizes = _plan(tensors, client.backend, pooled)
    buffers = [_create_staged(client, name, size, device) for device, size in sizes]
    bases = [torch.from_dlpack(buffer) for buffer in buffers]
    copied: Set[Tuple[int, int]] = set()
    for entry, tensor in zip(entries, tensors.values()):
        place = (entry["buffer"], entry["offset"])
        if entry["nbytes"] and place not in copied and entry["buffer"] < len(bases):
            copied.add(place)
            start = entry["offset"]
            target = bases[entry["buffer"]][start : start + entry["nbytes"]]
            target.copy_(_bytes_of(tensor))
    for buffer, base in [*zip(buffers, bases), *segments]:
        _seal(buffer, base)
    for entry, tensor in zip(entries, tensors.values()):
        if entry["buffer"] < len(bases):
            start = entry["offset"]
            stored = bases[entry["buffer"]][start : start + entry["nbytes"]]
        else:
            stored = _bytes_of(tensor)
        digest = hashlib.blake2b(stored.cpu().numpy(), digest_size=16)
        entry["digest"] = digest.hexdigest()
    manifest = {
        "format": FORMAT,
        "buffers": [size for _, size in sizes] + [segment.nbytes for segment, _ in segments],
        # Each buffer's device, so that a loader opens it without asking the daemon first.
        "devices": [device for device, _ in sizes] + [base.device.index or 0 for _, base in segments],
        "tensors": entries,
        "fingerprint": _fingerprint(entries),
    }
    text = json.dumps(manifest, separators=(",", ":")).encode()
    manifest_buffer = _create_staged(client, name, len(text), _MANIFEST_DEVICE)
    manifest_base = torch.from_dlpack(manifest_buffer)
    manifest_base.copy_(torch.frombuffer(bytearray(text), dtype=torch.uint8))
    _seal(manifest_buffer, manifest_base)
    ids = [buffer.id for buffer in buffers] + [segment.id for segment, _ in segments]
    bound = client.bind_set(name, manifest_buffer.id, ids, len(entries))
    bound["fingerprint"] = manifest["fingerprint"]
    bound["copied"] = sum(size for _, size in sizes)
    _published.append([tensors[key] for key in pooled])
    return bound


def _open(
    client: share.Client, name: str, version: Optional[int]
) -> Tuple[Dict[str, Any], List[share.Buffer]]:
    """A version of the set: its manifest, read, and its buffers, opened
    each on the device the manifest names (an open that names none asks
    the daemon where the buffer is first)."""
    deadline = time.monotonic() + _RETRY_SECONDS
    while True:
        info = client.get_set(name, version)
        try:
            manifest = _manifest(client.get(info["manifest"], device=_MANIFEST_DEVICE))
            devices = manifest.get("devices", [None] * len(info["buffers"]))
            if not isinstance(devices, builtins.list) or len(devices) != len(info["buffers"]):
                raise ManifestError(
                    f"the manifest's devices do not name the set's {len(info['buffers'])} buffers"
                )
            if not all(d is None or (type(d) is int and d >= 0) for d in devices):
                raise ManifestError(f"the manifest's devices are not device ordinals: {devices}")
            return manifest, [
                client.get(id, device=device) for id, device in zip(info["buffers"], devices)
            ]
        except (DeletedError, UnknownIdError):
            # Retired by newer versions between the look-up and the opens.
            if version is not None or time.monotonic() > deadline:
                raise


def _manifest(buffer: share.Buffer) -> Dict[str, Any]:
    with buffer.mirror() as text:
        try:
            manifest = json.loads(bytes(text))
        except ValueError as e:
            raise ManifestError(f"the manifest is not JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ManifestError(f"the manifest is not {FORMAT}")
    if _fingerprint(manifest["tensors"]) != manifest["fingerprint"]:
        raise ManifestError("the manifest does not match its fingerprint")
    return manifest


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if name not in _DTYPES or not isinstance(dtype, torch.dtype):
        raise DtypeError(f"this PyTorch ({torch.__version__}) has no dtype {name}")
    return dtype


def load(
    name: str,
    device: Union[str, torch.device, None] = None,
    version: Optional[int] = None,
    *,
    client: Optional[share.Client] = None,
    verify: bool = False,
) -> Dict[str, torch.Tensor]:
    """The tensors of named set ``name`` (its latest version, or
    ``version``), by their names: read-only views of the shared buffers, no
    copy, on the device holding them; on another ``device``, copied there.
    ``module.load_state_dict(tensors, assign=True)`` makes them a module's
    own (for inference: the memory is read-only). ``verify`` also checks
    every tensor's bytes against its digest. Through ``client`` (default:
    the daemon on the default socket)."""
    _check_name(name)
    client = client or _default_client()
    manifest, buffers = _open(client, name, version)
    bases = [torch.from_dlpack(buffer) for buffer in buffers]
    if len(bases) != len(manifest["buffers"]):
        raise ManifestError(
            f"the manifest names {len(manifest['buffers'])} buffers, the set {len(bases)}"
        )
    tensors = {}
    for entry in manifest["tensors"]:
        start = entry["offset"]
        stored = bases[entry["buffer"]][start : start + entry["nbytes"]]
        if verify:
            digest = hashlib.blake2b(stored.cpu().numpy(), digest_size=16)
            if digest.hexdigest() != entry["digest"]:
                raise ManifestError(f"{entry['name']}: its bytes do not match its digest")
        dtype = _dtype(entry["dtype"])
        if entry["nbytes"]:
            tensor = stored.view(dtype).as_strided(entry["shape"], entry["stride"])
        else:
            # No bytes to view: its offset may lie past its buffer's end.
            tensor = torch.empty(entry["shape"], dtype=dtype, device=stored.device)
        if device is not None and tensor.device != torch.device(device):
            tensor = tensor.to(device)
        tensors[entry["name"]] = tensor
    return tensors


def list(*, client: Optional[share.Client] = None) -> List[Dict[str, Any]]:
    """Every version of every named set the daemon keeps: ``name``,
    ``version``, ``manifest``, ``buffers``, ``tensors`` and ``nbytes``."""
    return (client or _default_client()).list_sets()


def delete(name: str, *, client: Optional[share.Client] = None) -> None:
    """Deletes named set ``name``: nobody can load it any more; its memory
    is freed once the last process holding its tensors lets go."""
    _check_name(name)
    (client or _default_client()).delete_set(name)


