"""Two share daemons as two nodes of a cluster (an etcd the test starts, NIXL
over UCX on TCP, each daemon on its own loopback address), fetched from in
Python: every size byte for byte, and each failure its exception. Skipped,
saying why, without etcd and NIXL (``TANDEM_ETCD``, ``TANDEM_NIXL_LIBRARY``);
``TANDEM_REQUIRE_CLUSTER=1`` makes their absence a failure."""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tandem
from tandem.errors import (
    ArgumentError,
    ClusterRefusedError,
    NotExportedError,
    RemoteGoneError,
    UnknownNodeError,
)


def needs() -> tuple[str, str]:
    """The etcd binary and NIXL's library, or a skip (a failure when required)."""
    etcd = os.environ.get("TANDEM_ETCD", "")
    nixl = os.environ.get("TANDEM_NIXL_LIBRARY", "")
    missing = [
        f"{name} is not set (or names no file)"
        for name, path in (("TANDEM_ETCD", etcd), ("TANDEM_NIXL_LIBRARY", nixl))
        if not os.path.isfile(path)
    ]
    if missing:
        why = "; ".join(missing)
        if os.environ.get("TANDEM_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"{why}, but TANDEM_REQUIRE_CLUSTER=1 requires it")
        pytest.skip(f"no etcd or NIXL: {why}")
    return etcd, nixl


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Cluster:
    """An etcd and daemons, each in a folder of its own under one temporary folder."""

    def __init__(self, tandem_bin: str, etcd: str, nixl: str) -> None:
        self.tandem_bin = tandem_bin
        self.nixl = nixl
        self.dir = tempfile.TemporaryDirectory(prefix="tandem-pycluster-")
        self.root = Path(self.dir.name)
        self.children: list[subprocess.Popen] = []
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.children.append(
            subprocess.Popen(
                [
                    etcd,
                    "--name=t",
                    f"--data-dir={self.root / 'etcd'}",
                    f"--listen-client-urls={self.etcd_url}",
                    f"--advertise-client-urls={self.etcd_url}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-cluster=t=http://127.0.0.1:{peer}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=1) as r:
                    if b"true" in r.read():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("etcd did not start")
            time.sleep(0.05)

    def node(self, name: str, host: str, token: str = "py-token") -> tuple[Path, int]:
        """Starts node `name` listening on `host`; its socket and pid."""
        home = self.root / name
        home.mkdir(mode=0o700)
        token_file = home / "token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        config = home / "tandem.toml"
        config.write_text(
            f'[cluster]\netcd = ["{self.etcd_url}"]\nnode = "{name}"\n'
            f'listen = "{host}:{free_port(host)}"\ntoken_file = "{token_file}"\n'
            f'nixl_library = "{self.nixl}"\n'
        )
        sock = home / "share.sock"
        daemon = subprocess.Popen(
            [self.tandem_bin, "share", "serve", "--backend", "host", "--socket", str(sock),
             "--config", str(config), "--announce", "--exit-on-stdin-eof"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "UCX_TLS": "tcp", "RUST_LOG": "warn"},
        )
        self.children.append(daemon)
        line = daemon.stdout.readline().decode()
        assert line.startswith("ready"), line
        return sock, daemon.pid

    def close(self) -> None:
        for child in reversed(self.children):
            if child.stdin:
                child.stdin.close()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout:
                child.stdout.close()
        self.dir.cleanup()

    def killed(self, pid: int) -> None:
        """Reaps daemon `pid`, which the test killed, and removes what it left in /dev/shm
        (the CPU device's IPC segments it exported, named after it)."""
        for child in self.children:
            if child.pid == pid:
                child.wait()
        for left in Path("/dev/shm").glob(f"tdm-{pid:x}-*"):
            left.unlink(missing_ok=True)


@pytest.fixture
def cluster(tandem_bin):
    etcd, nixl = needs()
    made = Cluster(tandem_bin, etcd, nixl)
    yield made
    gc.collect()
    made.close()


def pattern(nbytes: int) -> np.ndarray:
    """The tests' bytes: 0..250 over and over."""
    return np.resize(np.arange(251, dtype=np.uint8), nbytes)


def publish(client, nbytes: int, export: bool = True) -> int:
    buf = client.create(nbytes)
    view = np.asarray(buf)
    view[:] = pattern(nbytes)
    del view
    buf.seal()
    if export:
        client.export(buf.id)
    return buf.id


def test_every_size_arrives_byte_for_byte(cluster):
    a_sock, _ = cluster.node("node-a", "127.0.0.1")
    b_sock, _ = cluster.node("node-b", "127.0.0.2")
    a = tandem.share.connect(a_sock)
    for nbytes in (1, 4096, 64 << 20, 1 << 30):
        buf_id = publish(a, nbytes)
        copy = tandem.share.fetch(f"node-a/{buf_id}", socket=b_sock)
        assert copy.sealed and len(copy) == nbytes
        got = np.asarray(copy)
        assert np.array_equal(got, pattern(nbytes)), nbytes
        del got, copy
        a.delete(buf_id)


def test_failures_are_typed(cluster):
    a_sock, a_pid = cluster.node("node-a", "127.0.0.1")
    b_sock, _ = cluster.node("node-b", "127.0.0.2")
    c_sock, _ = cluster.node("node-c", "127.0.0.3", token="another-token")
    a = tandem.share.connect(a_sock)
    b = tandem.share.connect(b_sock)
    private = publish(a, 4096, export=False)
    with pytest.raises(NotExportedError):
        b.fetch(f"node-a/{private}")
    with pytest.raises(UnknownNodeError):
        b.fetch("node-z/1")
    with pytest.raises(ArgumentError):
        b.fetch("node-a")
    exported = publish(a, 4096)
    with pytest.raises(ClusterRefusedError):
        tandem.share.fetch(f"node-a/{exported}", socket=c_sock)
    big = publish(a, 1 << 30)
    import threading

    threading.Timer(0.3, os.kill, (a_pid, signal.SIGKILL)).start()
    with pytest.raises((RemoteGoneError, UnknownNodeError)):
        b.fetch(f"node-a/{big}")
    cluster.killed(a_pid)
    # Nothing was left on node-b.
    assert b.status()["objects"] == 0
