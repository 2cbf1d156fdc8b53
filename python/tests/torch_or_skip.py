"""PyTorch for the tests that need it (a module of its own: each test
folder's conftest is `conftest`, so neither can be imported by name)."""

from __future__ import annotations

import os

import pytest


def import_torch():
    """PyTorch, or the calling test module skipped where it is not installed
    (CI installs it: there, its absence is a failure, not a skip)."""
    try:
        import torch
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(
            "PyTorch is not installed in this environment (CI's has it)",
            allow_module_level=True,
        )
    return torch
