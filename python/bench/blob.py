"""A Python caller's blob put/get through tandem.blob, 4 KiB and 64 MiB,
against numpy.save/numpy.load of the same bytes in the same folder, and
against the Rust client's own figures for the same puts and gets (the
binding's overhead): the blob bench's `client` section, run by this one
(`--rust-bench`, default `$TANDEM_BIN_DIR/tandem-blob.bench.blob`, a GPU
bundle's). One run; means and ratios printed.

    TANDEM_BIN=.../tandem python3 blob.py [--rust-bench PATH]

PATH is the blob bench's binary: a bundle's `bin/tandem-blob.bench.blob`, or
what `cargo bench -p tandem-blob --features demo --bench blob --no-run` built.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import tandem

# The Rust bench's line per size (`client_latency` in blob/benches/blob.rs).
RUST_LINE = re.compile(
    r"(4 KiB|64 MiB) from a client in another process: put ([\d.]+) us \(RAM\), "
    r"([\d.]+) us \(file, durable\), get ([\d.]+) us \(RAM\), ([\d.]+) us \(file\)"
)
# The sizes and rounds, and the client's heap, of the Rust bench's section.
SIZES = (("4 KiB", 4096, 2000), ("64 MiB", 64 << 20, 5))
HEAP_BYTES = 16 << 20
FIGURES = ("put RAM", "put file", "get RAM", "get file")


def mean_us(rounds: int, call) -> float:
    start = time.perf_counter()
    for i in range(rounds):
        call(i)
    return (time.perf_counter() - start) / rounds * 1e6


def rust_figures(bench: str | None) -> dict[str, dict[str, float]] | None:
    """The Rust client's means (us) per size and figure, from a run of the
    blob bench's `client` section; None when no bench is named."""
    if not bench:
        return None
    print(f"the Rust client's figures: {bench} client", flush=True)
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
    run = subprocess.run(
        [bench, "client"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    figures = {
        found.group(1): dict(zip(FIGURES, map(float, found.groups()[1:])))
        for found in RUST_LINE.finditer(run.stdout)
    }
    if run.returncode != 0 or len(figures) != len(SIZES):
        raise RuntimeError(f"the Rust blob bench failed (exit {run.returncode}):\n{run.stdout}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bundled = os.path.join(os.environ.get("TANDEM_BIN_DIR", ""), "tandem-blob.bench.blob")
    parser.add_argument(
        "--rust-bench",
        default=bundled if os.environ.get("TANDEM_BIN_DIR") else None,
        help="the Rust blob bench's binary, run for the Rust client's figures",
    )
    parser.add_argument("--dir", help="the folder (disk) of the store and the .npy files")
    args = parser.parse_args()
    try:
        rust = rust_figures(args.rust_bench)
    except (OSError, RuntimeError) as e:
        print(f"blob.py: {e}", file=sys.stderr)
        return 1
    folder = tempfile.mkdtemp(prefix="tandem-blob-bench-", dir=args.dir)
    try:
        return bench(folder, rust)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def bench(folder: str, rust: dict[str, dict[str, float]] | None) -> int:
    os.environ.setdefault("RUST_LOG", "warn")  # the runtime's log: only what goes wrong
    config = os.path.join(folder, "store.toml")
    with open(config, "w") as f:
        f.write(
            f'metadata = "{folder}/meta.redb"\n'
            f'[[targets]]\nkind = "ram"\ncapacity = {512 << 20}\nscore = 1.0\n'
            f'[[targets]]\nkind = "file"\npath = "{folder}/target0.dat"\n'
            f"capacity = {1 << 30}\nscore = 0.5\n"
        )
    store = tandem.blob.fork(config, heap_bytes=HEAP_BYTES)
    rows = []
    for label, size, rounds in SIZES:
        data = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
        out = np.empty_like(data)
        npy = os.path.join(folder, "x.npy")
        python = {
            "put RAM": mean_us(rounds, lambda i: store.put("b", f"r{i % 64}", data)),
            "put file": mean_us(rounds, lambda i: store.put("b", f"f{i % 64}", data, score=0.5)),
            "get RAM": mean_us(rounds, lambda i: store.get("b", f"r{i % 64}", out=out)),
            "get file": mean_us(rounds, lambda i: store.get("b", f"f{i % 64}", out=out)),
        }
        save = mean_us(rounds, lambda i: np.save(npy, data))
        load = mean_us(rounds, lambda i: np.load(npy))
        rows.append((label, python, save, load))
        for i in range(min(rounds, 64)):
            store.rm("b", f"r{i}")
            store.rm("b", f"f{i}")
    print("blob put/get from Python (tandem.blob, a runtime forked on a RAM and a file target)")
    print(f"against numpy.save/numpy.load in the same folder ({folder}); means, us")
    for label, python, save, load in rows:
        print(
            f"  {label:>6}: put {python['put RAM']:10.1f} (RAM) {python['put file']:10.1f} (file) | "
            f"numpy.save {save:10.1f} | file put/save {python['put file'] / save:6.2f}x"
        )
        print(
            f"  {label:>6}: get {python['get RAM']:10.1f} (RAM) {python['get file']:10.1f} (file) | "
            f"numpy.load {load:10.1f} | file get/load {python['get file'] / load:6.2f}x"
        )
    if rust is None:
        print("  (no Rust client figures: pass --rust-bench, or set TANDEM_BIN_DIR to a bundle's bin/)")
        return 0
    print("  Python against the Rust client, the same calls (the binding's overhead):")
    for label, python, _, _ in rows:
        for name in FIGURES:
            ours, theirs = python[name], rust[label][name]
            print(
                f"  {label:>6} {name:<8}: python {ours:10.1f} us, rust {theirs:10.1f} us: "
                f"{ours / theirs:5.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
