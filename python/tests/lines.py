"""Reading a child process's output a line at a time, with a deadline, so
that a child that never answers fails its test instead of hanging it."""

from __future__ import annotations

import queue
import subprocess
import threading

import pytest


def readline_within(child: subprocess.Popen, seconds: float) -> str:
    """The child's next line of output; fails the test if none comes within
    `seconds` (the reader is then left to the child's end, which the caller
    brings by killing it)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(child.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=seconds)
    except queue.Empty:
        pytest.fail(f"no line from the child within {seconds} s")
