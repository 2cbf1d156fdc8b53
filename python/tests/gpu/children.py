"""The GPU tests' other processes: producers and consumers running Python
code, driven a line at a time through their stdin and stdout."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def python(code: str, *args) -> subprocess.Popen:
    """Another Python process running `code` with `args`, its stdin and
    stdout pipes."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def expect(process: subprocess.Popen, word: str) -> str:
    """The process's next line, which must start with `word`."""
    line = process.stdout.readline().strip()
    assert line.startswith(word), f"expected {word!r}, got {line!r} (exit {process.poll()})"
    return line[len(word) :].strip()


def finish(process: subprocess.Popen) -> None:
    """Lets the process go on (a line on its stdin) and waits for it."""
    process.stdin.write("\n")
    process.stdin.flush()
    assert process.wait(timeout=120) == 0
