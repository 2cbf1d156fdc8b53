"""A Python caller's blob put/get through tandem.blob, 4 KiB and 64 MiB,
against numpy.save/numpy.load of the same bytes in the same folder, and (4
KiB) against the Rust client's own figures read from the blob bench's log
(`--rust-log`: the line `host, 4 KiB from a client in another process`), which
is the binding's overhead. One run; means and ratios printed.

    TANDEM_BIN=.../tandem python3 blob.py [--rust-log tandem-blob.bench.blob.log]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np

import tandem

RUST_LINE = re.compile(
    r"4 KiB from a client in another process: put ([\d.]+) us \(RAM\), "
    r"([\d.]+) us \(file, durable\), get ([\d.]+) us"
)


def mean_us(rounds: int, call) -> float:
    start = time.perf_counter()
    for i in range(rounds):
        call(i)
    return (time.perf_counter() - start) / rounds * 1e6


def rust_figures(path: str | None) -> dict[str, float] | None:
    if not path or not os.path.isfile(path):
        return None
    with open(path) as log:
        found = RUST_LINE.search(log.read())
    if not found:
        return None
    put_ram, put_file, get_ram = map(float, found.groups())
    return {"put RAM": put_ram, "put file": put_file, "get RAM": get_ram}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rust-log", help="the Rust blob bench's output")
    parser.add_argument("--dir", help="the folder (disk) of the store and the .npy files")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="tandem-blob-bench-", dir=args.dir)
    try:
        return bench(folder, rust_figures(args.rust_log))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def bench(folder: str, rust: dict[str, float] | None) -> int:
    os.environ.setdefault("RUST_LOG", "warn")  # the runtime's log: only what goes wrong
    config = os.path.join(folder, "store.toml")
    with open(config, "w") as f:
        f.write(
            f'metadata = "{folder}/meta.redb"\n'
            f'[[targets]]\nkind = "ram"\ncapacity = {512 << 20}\nscore = 1.0\n'
            f'[[targets]]\nkind = "file"\npath = "{folder}/target0.dat"\n'
            f"capacity = {1 << 30}\nscore = 0.5\n"
        )
    store = tandem.blob.fork(config)
    rows = []
    for size, rounds in ((4096, 2000), (64 << 20, 5)):
        data = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
        out = np.empty_like(data)
        label = "4 KiB" if size == 4096 else "64 MiB"
        npy = os.path.join(folder, "x.npy")
        put_ram = mean_us(rounds, lambda i: store.put("b", f"r{i % 64}", data))
        put_file = mean_us(rounds, lambda i: store.put("b", f"f{i % 64}", data, score=0.5))
        get_ram = mean_us(rounds, lambda i: store.get("b", f"r{i % 64}", out=out))
        get_file = mean_us(rounds, lambda i: store.get("b", f"f{i % 64}", out=out))
        save = mean_us(rounds, lambda i: np.save(npy, data))
        load = mean_us(rounds, lambda i: np.load(npy))
        rows.append((label, put_ram, put_file, get_ram, get_file, save, load))
        for i in range(min(rounds, 64)):
            store.rm("b", f"r{i}")
            store.rm("b", f"f{i}")
    print("blob put/get from Python (tandem.blob, a runtime forked on a RAM and a file target)")
    print(f"against numpy.save/numpy.load in the same folder ({folder}); means, us")
    for label, put_ram, put_file, get_ram, get_file, save, load in rows:
        print(
            f"  {label:>6}: put {put_ram:10.1f} (RAM) {put_file:10.1f} (file) | "
            f"numpy.save {save:10.1f} | file put/save {put_file / save:6.2f}x"
        )
        print(
            f"  {label:>6}: get {get_ram:10.1f} (RAM) {get_file:10.1f} (file) | "
            f"numpy.load {load:10.1f} | file get/load {get_file / load:6.2f}x"
        )
    small = rows[0]
    if rust:
        print("  4 KiB, Python against the Rust client (the binding's overhead):")
        for name, python_us in (
            ("put RAM", small[1]),
            ("put file", small[2]),
            ("get RAM", small[3]),
        ):
            print(
                f"    {name:<8} python {python_us:8.1f} us, rust {rust[name]:8.1f} us: "
                f"{python_us / rust[name]:5.2f}x"
            )
    else:
        print("  (no Rust client figures: pass --rust-log with the blob bench's output)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
