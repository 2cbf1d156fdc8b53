"""Fixtures of the package's tests: a share daemon started for each module
(the CPU device), a blob runtime on a RAM store, and a check that nothing
is left in /dev/shm."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
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
    """Tandem's segments: runtimes' (`tandem-...`) and the CPU device's IPC
    segments (`tdm-...`)."""
    return {
        name
        for name in os.listdir("/dev/shm")
        if name.startswith("tdm-") or "tandem" in name
    }


@pytest.fixture
def shm():
    """`shm_entries`, for a test that checks what it left in /dev/shm
    before the session ends."""
    return shm_entries


SHM_BEFORE = pytest.StashKey[set]()


def pytest_sessionstart(session):
    session.stash[SHM_BEFORE] = shm_entries()


def pytest_sessionfinish(session, exitstatus):
    """Fails the run when segments outlive it: checked once every fixture
    (daemons, runtimes) is gone."""
    gc.collect()
    left = shm_entries() - session.stash[SHM_BEFORE]
    if left:
        print(f"\nleft in /dev/shm: {sorted(left)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="module")
def client(tandem_bin):
    client = tandem.share.spawn_daemon("host", tandem=tandem_bin)
    yield client
    del client
    gc.collect()


def write_ram_store_config(folder: Path) -> Path:
    """A RAM store's configuration in `folder`, its metadata beside it."""
    config = folder / "store.toml"
    config.write_text(
        textwrap.dedent(
            f"""\
            metadata = "{folder / 'blob.redb'}"
            [[targets]]
            kind = "ram"
            capacity = {256 << 20}
            score = 1.0
            """
        )
    )
    return config


@pytest.fixture
def store_config():
    """A RAM store's configuration, in a folder removed afterwards (pytest's
    tmp_path would keep it in /tmp)."""
    with tempfile.TemporaryDirectory(prefix="tandem-python-test-") as folder:
        yield write_ram_store_config(Path(folder))


@pytest.fixture
def store(store_config, tandem_bin):
    """A blob runtime on a RAM store, started for the test."""
    store = tandem.blob.fork(store_config, tandem=tandem_bin, heap_bytes=16 << 20)
    yield store
    del store
    gc.collect()


@pytest.fixture
def other_store_config():
    """A second RAM store's configuration, for a test with two stores."""
    with tempfile.TemporaryDirectory(prefix="tandem-python-test-") as folder:
        yield write_ram_store_config(Path(folder))
