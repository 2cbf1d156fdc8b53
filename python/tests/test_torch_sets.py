"""Named weight sets (:mod:`tandem.torch`) on the CPU device: manifests,
versions, fingerprints, bad input, a standby that serves on after its
publisher's SIGKILL, a process started after the crash, and publishers and
consumers killed at random moments with nothing lost or left behind."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

import tandem

from torch_or_skip import import_torch

torch = import_torch()

import tandem.torch as tt


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )


def odd_tensors() -> dict:
    """Every kind of tensor a set carries: dtypes of each size, a scalar,
    an empty tensor, one of more bytes than the rest together."""
    return {
        "bf16": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
        "f16": torch.linspace(-1, 1, 7, dtype=torch.float16),
        "f64": torch.tensor(3.25, dtype=torch.float64),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "bool": torch.tensor([[True, False], [False, True]]),
        "c64": torch.tensor([1 + 2j, -3j], dtype=torch.complex64),
        "empty": torch.empty(0, 3),
        "big": torch.arange(70_000, dtype=torch.int32),
    }


def same(loaded: dict, state: dict) -> None:
    assert list(loaded) == list(state)
    for name, tensor in state.items():
        got = loaded[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape, name
        assert got.stride() == tensor.stride(), name
        assert torch.equal(got, tensor), name


def test_a_published_set_loads_by_name_without_a_copy(client):
    net = model()
    info = tt.publish("net", net, client=client)
    assert (info["name"], info["version"], info["tensors"]) == ("net", 1, len(net.state_dict()))
    loaded = tt.load("net", client=client)
    same(loaded, net.state_dict())
    # Mapped once per process: a second load views the same memory.
    again = tt.load("net", client=client)
    assert all(again[k].data_ptr() == loaded[k].data_ptr() for k in loaded)
    # A module takes them as its own, no copy, and computes the same bits.
    fresh = model()
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    fresh.load_state_dict(loaded, assign=True)
    assert fresh[0].weight.data_ptr() == loaded["0.weight"].data_ptr()
    x = torch.linspace(-2, 2, 48).reshape(3, 16)
    assert torch.equal(fresh(x), net(x))
    odd = odd_tensors()
    tt.publish("odd", odd, client=client)
    same(tt.load("odd", client=client, verify=True), odd)
    tt.delete("net", client=client)
    tt.delete("odd", client=client)


def test_manifests_list_every_tensor_and_fingerprint_its_bytes(client):
    state = odd_tensors()
    info = tt.publish("manifest", state, client=client)
    with client.get(info["manifest"]).mirror() as text:
        manifest = json.loads(bytes(text))
    assert manifest["format"] == tt.FORMAT
    assert [t["name"] for t in manifest["tensors"]] == list(state)
    assert len(manifest["buffers"]) == len(info["buffers"]) == 1, "packed into one buffer"
    assert manifest["devices"] == [0], "each buffer's device, for loaders"
    for entry, tensor in zip(manifest["tensors"], state.values()):
        assert entry["dtype"] == str(tensor.dtype).removeprefix("torch.")
        assert entry["shape"] == list(tensor.shape) and entry["stride"] == list(tensor.stride())
        assert entry["offset"] % 64 == 0
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        assert entry["digest"] == hashlib.blake2b(raw, digest_size=16).hexdigest()
    assert info["fingerprint"] == manifest["fingerprint"]
    assert info["nbytes"] == sum(manifest["buffers"]) + len(json.dumps(manifest, separators=(",", ":")))
    tt.delete("manifest", client=client)


def test_a_large_set_is_packed_into_several_buffers(client, monkeypatch):
    monkeypatch.setattr(tt, "_PACK_BYTES", 4096)
    state = {f"w{i}": torch.full((300,), float(i)) for i in range(10)}  # 1200 bytes each
    state["huge"] = torch.arange(5000, dtype=torch.float64)  # more than a pack alone
    info = tt.publish("packed", state, client=client)
    assert len(info["buffers"]) == 5, "three tensors a pack, the huge one alone"
    same(tt.load("packed", client=client, verify=True), state)
    tt.delete("packed", client=client)


def test_tied_weights_are_stored_once_and_stay_tied(client):
    embed = torch.nn.Embedding(64, 16)
    head = torch.nn.Linear(16, 64, bias=False)
    head.weight = embed.weight
    net = torch.nn.ModuleDict({"embed": embed, "head": head})
    info = tt.publish("tied", net, client=client)
    assert info["nbytes"] < 2 * embed.weight.numel() * 4, "one copy of the tied weight"
    loaded = tt.load("tied", client=client, verify=True)
    assert loaded["embed.weight"].data_ptr() == loaded["head.weight"].data_ptr()
    same(loaded, net.state_dict())
    tt.delete("tied", client=client)


def test_versions_keep_the_previous_and_outlive_their_retirement(client):
    net = model()
    v1 = tt.publish("versions", net, client=client)
    held = tt.load("versions", client=client)
    v2 = tt.publish("versions", net.state_dict(), client=client)
    assert (v1["version"], v2["version"]) == (1, 2)
    assert v1["fingerprint"] == v2["fingerprint"], "the same weights, the same fingerprint"
    changed = {k: v + 1 for k, v in net.state_dict().items()}
    v3 = tt.publish("versions", changed, client=client)
    assert v3["version"] == 3 and v3["fingerprint"] != v1["fingerprint"]
    same(tt.load("versions", client=client), changed)
    same(tt.load("versions", version=2, client=client), net.state_dict())
    with pytest.raises(tandem.errors.UnknownSetError):
        tt.load("versions", version=1, client=client)
    # Version 1 was retired; the tensors held from it are still its bytes.
    same(held, net.state_dict())
    assert [(s["name"], s["version"]) for s in tt.list(client=client)] == [
        ("versions", 2),
        ("versions", 3),
    ]
    tt.delete("versions", client=client)
    with pytest.raises(tandem.errors.UnknownSetError):
        tt.load("versions", client=client)
    assert tt.list(client=client) == []
    retired = set(v1["buffers"])
    assert {b["id"] for b in client.ls()} == retired, "only what is held stays"
    del held
    gc.collect()
    assert client.ls() == []


def test_bad_input_is_refused_with_a_typed_error(client):
    with pytest.raises(tandem.errors.UnknownSetError) as unknown:
        tt.load("nobody", client=client)
    assert isinstance(unknown.value, KeyError)
    for name in ["", "a\nb", "x" * 256]:
        with pytest.raises(tandem.errors.SetNameError):
            tt.publish(name, {"a": torch.ones(2)}, client=client)
        with pytest.raises(tandem.errors.SetNameError):
            client.get_set(name)
    with pytest.raises(tandem.errors.ArgumentError):
        tt.load(7, client=client)  # type: ignore[arg-type]
    with pytest.raises(tandem.errors.ArgumentError):
        tt.load("x", version=0, client=client)
    with pytest.raises(tandem.errors.NotContiguousError):
        tt.publish("bad", {"t": torch.ones(4, 4).t()}, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized dtypes are deprecated: still made
        quantized = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8)
    with pytest.raises(tandem.errors.DtypeError):
        tt.publish("bad", {"q": quantized}, client=client)
    with pytest.raises(tandem.errors.UnsupportedError):
        tt.publish("bad", {"n": 3}, client=client)
    with pytest.raises(tandem.errors.UnsupportedError):
        tt.publish("bad", [torch.ones(1)], client=client)
    assert client.ls() == [], "refused before anything was allocated"
    # A set being published has no version to load yet.
    staged = client.create(16)
    client.stage(staged.id, "publishing")
    with pytest.raises(tandem.errors.SetPublishingError):
        tt.load("publishing", client=client)
    del staged
    gc.collect()
    with pytest.raises(tandem.errors.UnknownSetError):
        tt.load("publishing", client=client)
    assert client.ls() == [], "a staged buffer let go of is freed"


def publish_by_hand(client, name: str, manifest: dict, data: bytes) -> None:
    """Binds a set whose manifest is written here, not by publish."""
    buf = client.create(len(data))
    client.stage(buf.id, name)
    memoryview(buf)[:] = data
    buf.seal()
    text = json.dumps(manifest).encode()
    man = client.create(len(text))
    client.stage(man.id, name)
    memoryview(man)[:] = text
    man.seal()
    client.bind_set(name, man.id, [buf.id], len(manifest["tensors"]))


def test_a_dtype_this_pytorch_lacks_and_a_forged_manifest_are_refused(client):
    entry = {
        "name": "w", "dtype": "float99", "shape": [2], "stride": [1],
        "buffer": 0, "offset": 0, "nbytes": 8, "digest": "00",
    }  # fmt: skip
    manifest = {
        "format": tt.FORMAT,
        "buffers": [8],
        "tensors": [entry],
        "fingerprint": tt._fingerprint([entry]),
    }
    publish_by_hand(client, "future", manifest, bytes(8))
    with pytest.raises(tandem.errors.DtypeError):
        tt.load("future", client=client)
    manifest["fingerprint"] = "0" * 64
    publish_by_hand(client, "forged", manifest, bytes(8))
    with pytest.raises(tandem.errors.ManifestError):
        tt.load("forged", client=client)
    entry["dtype"] = "float32"
    manifest["fingerprint"] = tt._fingerprint([entry])
    publish_by_hand(client, "tampered", manifest, bytes(8))
    assert tt.load("tampered", client=client)["w"].tolist() == [0.0, 0.0]
    with pytest.raises(tandem.errors.ManifestError):
        tt.load("tampered", client=client, verify=True)
    for devices in (["x"], [-1], [0, 0], "0"):
        publish_by_hand(client, "misplaced", dict(manifest, devices=devices), bytes(8))
        with pytest.raises(tandem.errors.ManifestError):
            tt.load("misplaced", client=client)
    for name in ["future", "forged", "tampered", "misplaced"]:
        tt.delete(name, client=client)


# A process serving the model: loads the set, says so, then answers each
# line on stdin with the model's output for a fixed input, as hex.
SERVE = textwrap.dedent(
    """\
    import sys, torch, tandem, tandem.torch as tt
    client = tandem.share.connect(sys.argv[1])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                              torch.nn.ReLU(), torch.nn.Linear(32, 4))
    net.load_state_dict(tt.load(sys.argv[2], client=client), assign=True)
    x = torch.linspace(-2, 2, 48).reshape(3, 16)
    print("ready", flush=True)
    for _ in sys.stdin:
        print(net(x).detach().numpy().tobytes().hex(), flush=True)
    """
)

PUBLISH = textwrap.dedent(
    """\
    import sys, time, torch, tandem, tandem.torch as tt
    client = tandem.share.connect(sys.argv[1])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                              torch.nn.ReLU(), torch.nn.Linear(32, 4))
    tt.publish(sys.argv[2], net, client=client)
    print("published", flush=True)
    time.sleep(600)
    """
)


def python(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_standby_serves_on_after_the_publisher_is_killed(client):
    x = torch.linspace(-2, 2, 48).reshape(3, 16)
    expected = model()(x).detach().numpy().tobytes().hex()
    publisher = python(PUBLISH, client.socket, "failover")
    standby = None
    try:
        assert publisher.stdout.readline().strip() == "published"
        standby = python(SERVE, client.socket, "failover")
        assert standby.stdout.readline().strip() == "ready"
        publisher.send_signal(signal.SIGKILL)
        publisher.wait(30)
        standby.stdin.write("go\n")
        standby.stdin.flush()
        assert standby.stdout.readline().strip() == expected, "the standby serves the same bits"
        # A process started after the crash maps the set by name.
        later = python(SERVE, client.socket, "failover")
        assert later.stdout.readline().strip() == "ready"
        later.stdin.write("go\n")
        later.stdin.close()
        assert later.stdout.readline().strip() == expected
        assert later.wait(30) == 0
    finally:
        for process in (publisher, standby):
            if process is not None:
                process.kill()
                process.wait(30)
    tt.delete("failover", client=client)
    deadline = time.monotonic() + 10
    while client.ls() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.ls() == []


def killable(work) -> int:
    """Forks a child that runs `work` until killed; it exits 3 if `work`
    fails, so a failure is told from a kill."""
    pid = os.fork()
    if pid == 0:
        try:
            while True:
                work()
        except BaseException as e:
            os.write(2, f"child failed: {e!r}\n".encode())
            os._exit(3)
    return pid


def test_kill_9_at_random_moments_loses_nothing_and_leaves_nothing(client, shm):
    state = model().state_dict()
    fingerprint = tt.publish("killed", state, client=client)["fingerprint"]
    shm_before = shm()
    random.seed(68)

    def consume() -> None:
        got = tt.load("killed", client=client)
        same(got, state)
        assert tt.list(client=client)[-1]["name"] == "killed"

    def publish() -> None:
        assert tt.publish("killed", state, client=client)["fingerprint"] == fingerprint

    started = time.monotonic()
    for round in range(200):
        children = [killable(publish), killable(consume), killable(consume)]
        time.sleep(random.uniform(0, 0.02))
        random.shuffle(children)
        for pid in children:
            time.sleep(random.uniform(0, 0.002))
            os.kill(pid, signal.SIGKILL)
        for pid in children:
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status), f"round {round}: a child failed ({status:#x})"
        # Whole or absent: the latest version loads, every byte as published.
        same(tt.load("killed", client=client), state)
    assert time.monotonic() - started < 120
    # Nothing lost: what the daemon holds is the kept versions' buffers,
    # once it has seen the last killed child go.
    kept = set()
    for version in tt.list(client=client):
        assert version["name"] == "killed" and version["tensors"] == len(state)
        kept |= {version["manifest"], *version["buffers"]}
    deadline = time.monotonic() + 10
    while {b["id"] for b in client.ls()} != kept and time.monotonic() < deadline:
        time.sleep(0.02)
    assert {b["id"] for b in client.ls()} == kept
    tt.delete("killed", client=client)
    gc.collect()
    assert client.ls() == []
    assert shm() <= shm_before, "nothing left in /dev/shm"
