"""Handing a 1 GiB CUDA tensor to another process, from the producer's data
being ready (its fill kernel done) to the consumer's first kernel over it done:
Tandem's share daemon (the consumer opens the buffer by id and wraps it
through DLPack, as a user's program does), a one-tensor weight set born in
the pool (tandem.torch: the consumer loads it by name; ready is the bind,
the publisher's digest of the bytes on the host not counted), against
torch.multiprocessing (a CUDA tensor through a Queue, spawn) and a copy
through shared host memory. One run of ROUNDS hand-offs each; medians and
ratios printed.

    TANDEM_BIN=.../tandem python3 handoff.py [--mib 1024] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

try:
    import torch
    import torch.multiprocessing as mp
except ImportError as missing:
    # A machine without PyTorch has no CUDA device for this bench; a GPU
    # machine (TANDEM_REQUIRE_GPU=1) must have it.
    if os.environ.get("TANDEM_REQUIRE_GPU") == "1":
        raise SystemExit(f"handoff: {missing}, and TANDEM_REQUIRE_GPU=1")
    print(f"handoff: skipped: no CUDA device ({missing})")
    sys.exit(0)


def now() -> float:
    """Wall clock shared by the processes of one host."""
    return time.time()


def first_kernel(tensor: torch.Tensor) -> None:
    """The consumer's first kernel over the data, waited for."""
    tensor.sum()
    torch.cuda.synchronize()


def fill(n: int, value: float) -> torch.Tensor:
    tensor = torch.empty(n, device="cuda", dtype=torch.float32)
    tensor.fill_(value)
    torch.cuda.synchronize()
    return tensor


# --- Tandem ---------------------------------------------------------------


def tandem_producer(socket, n, rounds, ids, done):
    import tandem

    client = tandem.share.connect(socket)
    torch.cuda.init()
    for r in range(rounds):
        buf = client.create(n * 4)
        torch.from_dlpack(buf.view("float32", (n,))).fill_(float(r))
        torch.cuda.synchronize()
        ready = now()
        buf.seal()
        ids.put((buf.id, ready))
        done.get()  # the consumer's kernel ran; the buffer may go
        client.delete(buf.id)
        del buf


def tandem_consumer(socket, n, rounds, ids, done, results):
    import tandem

    client = tandem.share.connect(socket)
    torch.zeros(1, device="cuda").sum()  # a warm context, as a server's worker has
    for _ in range(rounds):
        buf_id, ready = ids.get()
        tensor = torch.from_dlpack(client.get(buf_id).view("float32", (n,)))
        first_kernel(tensor)
        results.put(now() - ready)
        del tensor
        done.put(True)


def run_tandem(n, rounds):
    import tandem

    os.environ.setdefault("RUST_LOG", "warn")  # the daemon's log: only what goes wrong
    daemon = tandem.share.spawn_daemon("cuda")
    return run_pair(
        tandem_producer, tandem_consumer, (str(daemon.socket), n, rounds), rounds
    )


# --- a weight set born in the pool (tandem.torch) ----------------------------


def set_producer(socket, n, rounds, names, done):
    import tandem
    import tandem.torch as tt

    client = tandem.share.connect(socket)
    torch.cuda.init()
    for r in range(rounds):
        with tt.pool(client):
            tensor = torch.empty(n, device="cuda", dtype=torch.float32)
        tensor.fill_(float(r))
        torch.cuda.synchronize()
        tt.publish(f"handoff-{r}", {"x": tensor}, client=client)
        names.put((f"handoff-{r}", now()))
        done.get()
        tt.delete(f"handoff-{r}", client=client)


def set_consumer(socket, n, rounds, names, done, results):
    import tandem
    import tandem.torch as tt

    client = tandem.share.connect(socket)
    torch.zeros(1, device="cuda").sum()
    for _ in range(rounds):
        name, ready = names.get()
        tensor = tt.load(name, client=client)["x"]
        first_kernel(tensor)
        results.put(now() - ready)
        del tensor
        done.put(True)


def run_set(n, rounds):
    import tandem

    os.environ.setdefault("RUST_LOG", "warn")
    daemon = tandem.share.spawn_daemon("cuda")
    return run_pair(set_producer, set_consumer, (str(daemon.socket), n, rounds), rounds)


# --- torch.multiprocessing ----------------------------------------------------


def torch_producer(n, rounds, queue, done):
    torch.cuda.init()
    for r in range(rounds):
        tensor = fill(n, float(r))
        ready = now()
        queue.put((tensor, ready))
        done.get()  # the producer must outlive the consumer's use
        del tensor


def torch_consumer(n, rounds, queue, done, results):
    torch.zeros(1, device="cuda").sum()
    for _ in range(rounds):
        tensor, ready = queue.get()
        first_kernel(tensor)
        results.put(now() - ready)
        del tensor
        done.put(True)


def run_torch(n, rounds):
    return run_pair(torch_producer, torch_consumer, (n, rounds), rounds)


# --- a copy through shared host memory -------------------------------------


def host_producer(n, rounds, host, queue, done):
    torch.cuda.init()
    for r in range(rounds):
        tensor = fill(n, float(r))
        ready = now()
        host.copy_(tensor)
        queue.put(ready)
        done.get()


def host_consumer(n, rounds, host, queue, done, results):
    torch.zeros(1, device="cuda").sum()
    for _ in range(rounds):
        ready = queue.get()
        tensor = host.to("cuda")
        first_kernel(tensor)
        results.put(now() - ready)
        del tensor
        done.put(True)


def run_host(n, rounds):
    host = torch.empty(n, dtype=torch.float32).share_memory_()
    return run_pair(host_producer, host_consumer, (n, rounds, host), rounds)


def run_pair(producer, consumer, args, rounds):
    """Runs producer(*args, queue, done) and consumer(*args, queue, done,
    results) as spawned processes; the consumer's hand-off times."""
    ctx = mp.get_context("spawn")
    queue, done, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=producer, args=(*args, queue, done))
    c = ctx.Process(target=consumer, args=(*args, queue, done, results))
    c.start()
    p.start()
    times = [results.get(timeout=600) for _ in range(rounds)]
    for process in (p, c):
        process.join(timeout=120)
        if process.exitcode != 0:
            raise SystemExit(f"handoff: {producer.__name__} pair failed ({process.exitcode})")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    skipped = no_device("handoff")
    if skipped is not None:
        return skipped
    for line in table(args.mib, args.rounds, with_host=True):
        print(line)
    return 0


def no_device(bench: str):
    """A bench's exit status on a machine without a CUDA device, saying so
    (a failure under TANDEM_REQUIRE_GPU=1); None where there is one."""
    if torch.cuda.is_available():
        return None
    if os.environ.get("TANDEM_REQUIRE_GPU") == "1":
        print(f"{bench}: no CUDA device, and TANDEM_REQUIRE_GPU=1")
        return 1
    print(f"{bench}: skipped: no CUDA device")
    return 0


def table(mib: int, rounds: int, with_host: bool) -> list:
    """The hand-offs measured, as printed lines: each path's median and its
    ratio to torch.multiprocessing's (what weights.py prints too)."""
    n = mib * (1 << 20) // 4
    rows = [
        ("tandem: open by id + DLPack", run_tandem(n, rounds)),
        ("tandem.torch: set from the pool, by name", run_set(n, rounds)),
        ("torch.multiprocessing Queue (spawn)", run_torch(n, rounds)),
    ]
    if with_host:
        rows.append(("copy through shared host memory", run_host(n, rounds)))
    lines = [
        f"handoff of a {mib} MiB CUDA tensor to another process, data ready to the",
        f"consumer's first kernel done; median of {rounds} ({torch.cuda.get_device_name()})",
    ]
    torch_ms = statistics.median(rows[2][1]) * 1e3
    for name, times in rows:
        ms = statistics.median(times) * 1e3
        lines.append(f"  {name:<42} {ms:10.2f} ms  {ms / torch_ms:7.2f}x torch.multiprocessing's")
    return lines


if __name__ == "__main__":
    sys.exit(main())
