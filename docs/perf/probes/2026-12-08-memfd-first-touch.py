"""Writes one byte per 4 KiB page of a fresh 1 GiB memfd mapping, then of the same
mapping again: the first pass is what a fetch's READ into a fresh host copy pays in page
faults on top of the bytes; the second is what it pays into a copy already touched (a kept
allocation). The loop's own cost is in both passes."""
import mmap
import os
import time

SIZE = 1 << 30
PAGE = 4096

fd = os.memfd_create("first-touch")
os.ftruncate(fd, SIZE)
view = mmap.mmap(fd, SIZE)
for label in ("fresh", "touched"):
    started = time.perf_counter()
    for offset in range(0, SIZE, PAGE):
        view[offset] = 7
    took = time.perf_counter() - started
    print(f"{label:8s} {SIZE // PAGE} pages in {took:.3f} s ({took / (SIZE // PAGE) * 1e6:.2f} us a page)")
view.close()
os.close(fd)
