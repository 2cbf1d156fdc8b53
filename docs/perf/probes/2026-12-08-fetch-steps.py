"""Reads a share daemon's log of span closes (the bench run with
2026-12-08-fetch-span-times.patch and
TMP_DAEMON_LOG=warn,tandem_share::daemon::fetch=debug) and prints each fetch step's
median time (busy + idle) by size, the first fetch of each size left out, then the
first size's percentiles.

Usage: python3 2026-12-08-fetch-steps.py STDERR_FILE"""
import collections
import re
import statistics
import sys

PATTERN = re.compile(
    r'fetch\{node="[^"]+" id=(\d+)\}(?::(\w+))?: \S+: close '
    r"time.busy=([\d.]+)(ns|µs|ms|s) time.idle=([\d.]+)(ns|µs|ms|s)"
)
MICROS = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}
SIZES = ["4 KiB", "64 MiB", "1 GiB"]


def shown(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


by_buffer = collections.OrderedDict()
for line in open(sys.argv[1], encoding="utf-8"):
    match = PATTERN.search(line)
    if not match:
        continue
    buffer, step, busy, busy_unit, idle, idle_unit = match.groups()
    took = float(busy) * MICROS[busy_unit] + float(idle) * MICROS[idle_unit]
    steps = by_buffer.setdefault(buffer, collections.OrderedDict())
    steps.setdefault(step or "whole fetch (daemon)", []).append(took)

names = []
for steps in by_buffer.values():
    names += [name for name in steps if name not in names]
print("| step | " + " | ".join(SIZES[: len(by_buffer)]) + " |")
print("| --- |" + " --- |" * len(by_buffer))
for name in names:
    cells = []
    for steps in by_buffer.values():
        times = steps.get(name, [])[1:]
        cells.append(shown(statistics.median(times)) if times else "-")
    print(f"| {name} | " + " | ".join(cells) + " |")
print()
first = next(iter(by_buffer.values()))
for name, times in first.items():
    times = sorted(times[1:])
    if not times:
        continue
    at = lambda p: times[min(len(times) - 1, int(p * len(times)))]
    print(
        f"{SIZES[0]} {name:22s} n={len(times):4d} p10={shown(at(0.1)):>9s} "
        f"p50={shown(at(0.5)):>9s} p90={shown(at(0.9)):>9s}"
    )
