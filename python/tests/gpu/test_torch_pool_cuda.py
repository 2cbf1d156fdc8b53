"""The pool (``tandem.torch.pool``) under PyTorch's CUDA allocations: a few
transformer layers built in the pool, published with no copy, loaded by two
other processes that compute the same bits; then publishers and consumers
killed at random moments, with the device's free memory back to its
baseline once every holder is gone."""

from __future__ import annotations

import random
import signal
import time

import pytest

from children import expect, finish, python

pytestmark = pytest.mark.gpu

# The model and its input, the same in every process (no download).
MODEL = """
    import sys, time, torch, tandem, tandem.torch as tt
    def model():
        torch.manual_seed(68)
        layer = lambda: torch.nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)
        return torch.nn.Sequential(*[layer() for _ in range(4)]).cuda().eval()
    def answer(net):
        torch.manual_seed(1)
        x = torch.randn(4, 32, 256, device="cuda")
        with torch.inference_mode():
            y = net(x)
        torch.cuda.synchronize()
        return y.cpu().numpy().tobytes().hex()
    client = tandem.share.connect(sys.argv[1])
"""

PUBLISHER = MODEL + """
    with tt.pool(client):
        net = model()
        expected = answer(net)  # the activations are born in the pool too
    info = tt.publish(sys.argv[2], net, client=client)
    segments = tandem._tandem._pool_status()["segments"]
    print("published", info["copied"], len(info["buffers"]), segments, flush=True)
    print("answer", expected, flush=True)
    sys.stdin.readline()
"""

CONSUMER = MODEL + """
    net = model()
    net.load_state_dict(tt.load(sys.argv[2], client=client), assign=True)
    shared = {t.data_ptr() for t in tt.load(sys.argv[2], client=client).values()}
    assert all(p.data_ptr() in shared for p in net.parameters()), "no copy"
    print("answer", answer(net), flush=True)
    sys.stdin.readline()
"""


def test_a_model_born_in_the_pool_is_served_bit_for_bit_by_two_other_processes(daemon):
    publisher = python(PUBLISHER, daemon.socket, "pool-model")
    copied, buffers, segments = map(int, expect(publisher, "published").split())
    assert copied == 0, "every tensor was born in the pool"
    assert buffers >= 1 and segments >= buffers
    expected = expect(publisher, "answer")
    consumers = [python(CONSUMER, daemon.socket, "pool-model") for _ in range(2)]
    for consumer in consumers:
        assert expect(consumer, "answer") == expected, "the same bits"
    finish(publisher)
    # The set outlives its publisher.
    later = python(CONSUMER, daemon.socket, "pool-model")
    assert expect(later, "answer") == expected
    for consumer in [*consumers, later]:
        finish(consumer)
    daemon.delete_set("pool-model")


# Round workers: each sets itself up (PyTorch, its context, the model) and
# says "ready", then does its part on "go" until it is killed.
WORKER = MODEL + """
    role, name = sys.argv[3], sys.argv[2]
    base = {k: v.contiguous() for k, v in model().state_dict().items()}
    print("ready", flush=True)
    sys.stdin.readline()
    if role == "publish":
        while True:
            with tt.pool(client):
                state = {k: v.clone() for k, v in base.items()}
            tt.publish(name, state, client=client)
            del state
    elif role == "map":
        while True:
            tensors = tt.load(name, client=client)
            torch._foreach_norm(list(tensors.values()))
            del tensors
    else:
        held = tt.load(name, client=client)
        torch._foreach_norm(list(held.values()))
        torch.cuda.synchronize()
        print("holding", flush=True)
        time.sleep(600)
"""


class Warm:
    """Workers started ahead of their round, so that a round waits for no
    interpreter and no CUDA context."""

    def __init__(self, socket, name: str, ahead: int):
        self.socket, self.name, self.ahead = str(socket), name, ahead
        self.waiting = {role: [] for role in ("publish", "map", "hold")}

    def take(self, role: str):
        while len(self.waiting[role]) < self.ahead:
            self.waiting[role].append(python(WORKER, self.socket, self.name, role))
        worker = self.waiting[role].pop(0)
        expect(worker, "ready")
        worker.stdin.write("go\n")
        worker.stdin.flush()
        return worker

    def close(self):
        for workers in self.waiting.values():
            for worker in workers:
                worker.kill()
                worker.wait(60)


def quiet(daemon, seconds: float = 60.0) -> None:
    """Waits until the daemon holds no buffer (its killed clients seen)."""
    deadline = time.monotonic() + seconds
    while daemon.ls() and time.monotonic() < deadline:
        time.sleep(0.05)


def settle(torch, baseline: int, seconds: float = 60.0) -> int:
    """The device's free memory once it is back to `baseline` (or the
    deadline passed)."""
    deadline = time.monotonic() + seconds
    free = torch.cuda.mem_get_info()[0]
    while free < baseline and time.monotonic() < deadline:
        time.sleep(0.1)
        free = torch.cuda.mem_get_info()[0]
    return free


def test_kill_9_at_random_moments_leaks_no_device_memory(daemon):
    import torch

    name = "pool-killed"
    torch.cuda.init()
    # One whole round first: the daemon's context sets itself up (its
    # event pools, its first mappings) before the baseline is taken.
    first = python(WORKER, daemon.socket, name, "publish")
    expect(first, "ready")
    first.stdin.write("go\n")
    first.stdin.flush()
    deadline = time.monotonic() + 120
    while not daemon.list_sets() and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill()
    first.wait(60)
    daemon.delete_set(name)
    quiet(daemon)
    time.sleep(1)
    baseline = torch.cuda.mem_get_info()[0]
    random.seed(68)
    warm = Warm(daemon.socket, name, ahead=3)
    try:
        publisher = warm.take("publish")
        deadline = time.monotonic() + 120
        while not daemon.list_sets() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert daemon.list_sets(), "a first version bound"
        publisher.kill()
        for round in range(100):
            workers = [warm.take(role) for role in ("publish", "map", "hold")]
            time.sleep(random.uniform(0, 0.05))
            random.shuffle(workers)
            for worker in workers:
                time.sleep(random.uniform(0, 0.005))
                worker.send_signal(signal.SIGKILL)
            for worker in workers:
                assert worker.wait(60) == -signal.SIGKILL, f"round {round}: a worker failed"
            versions = daemon.list_sets()
            assert versions and all(v["name"] == name for v in versions), f"round {round}"
    finally:
        warm.close()
    daemon.delete_set(name)
    quiet(daemon)
    free = settle(torch, baseline)
    # The driver's own bookkeeping may move by a page table's worth.
    assert free >= baseline - (2 << 20), f"{(baseline - free) >> 20} MiB not given back"
    assert daemon.ls() == [], "every buffer freed"
