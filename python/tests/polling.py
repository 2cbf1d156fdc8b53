"""Waiting, with a deadline, for what a share daemon holds to change: a
killed client's lease goes once the daemon notices the death, not at once."""

from __future__ import annotations

import time
from typing import Callable

import tandem


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Whether `condition()` became true within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def freed(client, buf_id: int) -> bool:
    """Whether the daemon of `client` no longer knows buffer `buf_id`."""
    try:
        client.stat(buf_id)
        return False
    except tandem.UnknownIdError:
        return True
