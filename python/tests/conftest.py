"""Fixtures of the package's tests: a share daemon started for the session
(the CPU device), a blob runtime on a RAM store, and a check that nothing
is left in /dev/shm."""

from __future__ import annotations

import gc
import os
import shutil
import textwrap
from pathlib import Path

import pytest

import tandem


@pytest.fixture(scope="session")
def tandem_bin() -> str:
    """The `tandem` executable the package starts daemons with."""
    found = os.environ.get("TANDEM_BIN") or shutil.which("tandem")
    if not found:
        pytest.fail("no `tandem` executable: set TANDEM_BIN or put it on PATH")
    return found


def shm_entries() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if "tandem" in name}


@pytest.fixture(scope="session", autouse=True)
def nothing_left_in_shm():
    before = shm_entries()
    yield
    gc.collect()
    left = shm_entries() - before
    assert not left, f"left in /dev/shm: {sorted(left)}"


@pytest.fixture(scope="module")
def client(tandem_bin):
    client = tandem.share.spawn_daemon("host", tandem=tandem_bin)
    yield client
    del client
    gc.collect()


@pytest.fixture
def store_config(tmp_path: Path) -> Path:
    config = tmp_path / "store.toml"
    config.write_text(
        textwrap.dedent(
            f"""\
            metadata = "{tmp_path / 'blob.redb'}"
            [[targets]]
            kind = "ram"
            capacity = {256 << 20}
            score = 1.0
            """
        )
    )
    return config
