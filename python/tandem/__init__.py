"""Tandem from Python: GPU (and CPU device) tensors shared between processes
by id through the share daemon (:mod:`tandem.share`), the blob store
(:mod:`tandem.blob`), and a runtime's status (:func:`status`). Memory reaches
NumPy, PyTorch, CuPy and JAX through DLPack without a copy."""

from __future__ import annotations

import json
from typing import Any, Optional

from . import blob, errors, share
from ._tandem import status_json as _status_json

# The exception classes, at the package's root as in `errors`: a star import and
# `__all__ +=` of a submodule's `__all__` are forms type checkers read as written.
from .errors import *

__all__ = ["blob", "errors", "share", "status"]
__all__ += errors.__all__


def status(segment: Optional[str] = None) -> dict[str, Any]:
    """What ``tandem status --json`` prints for the runtime of CPU segment
    ``segment`` (default: the one live runtime), as a dict."""
    return json.loads(_status_json(segment))
