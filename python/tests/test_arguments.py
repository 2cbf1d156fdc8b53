"""Bad arguments get exceptions that say what is wrong with which argument:
negative and oversized integers, timeouts, empty objects, backend names, a
store that does not start, and a runtime that must be named with
`segment=`."""

from __future__ import annotations

import gc
import math
import threading
import time

import numpy as np
import pytest

import tandem


def refused_as_argument(raised: pytest.ExceptionInfo, argument: str) -> None:
    """The exception is the package's ValueError whose message starts with
    the argument's name, where PyO3 would raise an OverflowError naming
    none."""
    assert isinstance(raised.value, tandem.ArgumentError)
    assert isinstance(raised.value, ValueError)
    assert not isinstance(raised.value, OverflowError)
    assert str(raised.value).startswith(f"{argument}: "), str(raised.value)


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda client: client.create(-1), "nbytes"),
        (lambda client: client.create(8, device=-1), "device"),
        (lambda client: client.get(-1), "id"),
        (lambda client: client.get(1, device=-2), "device"),
        (lambda client: client.stat(-1), "id"),
        (lambda client: client.delete(-3), "id"),
        (lambda client: client.put(b"x", device=-1), "device"),
    ],
)
def test_negative_share_arguments_are_named(client, call, argument):
    with pytest.raises(tandem.ArgumentError) as raised:
        call(client)
    refused_as_argument(raised, argument)
    assert "is negative" in str(raised.value)


def test_oversized_and_non_integer_arguments_are_named(client):
    with pytest.raises(tandem.ArgumentError) as raised:
        client.create(1 << 64)
    refused_as_argument(raised, "nbytes")
    assert "too large" in str(raised.value)
    with pytest.raises(TypeError, match="nbytes"):
        client.create("8")
    # Integers of any kind with __index__ are still taken.
    assert client.create(np.int64(8)).nbytes == 8


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda store: store.put("t", "a", b"x", offset=-1), "offset"),
        (lambda store: store.get("t", "a", offset=-1), "offset"),
        (lambda store: store.put(-1, "a", b"x"), "tag"),
        (lambda store: store.stat(-1, "a"), "tag"),
    ],
)
def test_negative_blob_arguments_are_named(store, call, argument):
    with pytest.raises(tandem.ArgumentError) as raised:
        call(store)
    refused_as_argument(raised, argument)


def test_a_negative_heap_is_named(store_config, tandem_bin):
    with pytest.raises(tandem.ArgumentError) as raised:
        tandem.blob.fork(store_config, tandem=tandem_bin, heap_bytes=-1)
    refused_as_argument(raised, "heap_bytes")


@pytest.mark.parametrize("timeout", [-1, -0.5, math.nan])
def test_a_negative_or_nan_timeout_is_named(client, timeout):
    unsealed = client.create(8)
    with pytest.raises(tandem.ArgumentError) as raised:
        client.get(unsealed.id, timeout=timeout)
    refused_as_argument(raised, "timeout")
    assert not isinstance(raised.value, tandem.ViewError)


@pytest.mark.parametrize("timeout", [None, math.inf, 1e300])
def test_none_and_infinity_wait_for_the_seal(client, timeout):
    buf = client.create(8)
    sealer = threading.Timer(0.3, buf.seal)
    sealer.start()
    started = time.monotonic()
    try:
        opened = client.get(buf.id, timeout=timeout)
    finally:
        sealer.join()
    assert opened.sealed and opened.id == buf.id
    assert time.monotonic() - started >= 0.25


@pytest.mark.parametrize("empty", [b"", np.zeros(0), np.zeros((0, 3), dtype=np.float32)])
def test_an_empty_share_put_says_it_is_empty(client, empty):
    with pytest.raises(tandem.InvalidSizeError, match="empty"):
        client.put(empty)


@pytest.mark.parametrize("empty", [b"", np.zeros(0), np.zeros((3, 0))])
def test_an_empty_blob_put_says_it_is_empty(store, empty):
    with pytest.raises(tandem.BlobRangeError, match="empty"):
        store.put("t", "empty", empty)
    assert "t" not in store.ls()  # refused before the tag was made


def test_an_unknown_backend_is_a_value_error_listing_the_choices(tandem_bin):
    with pytest.raises(tandem.ArgumentError) as raised:
        tandem.share.spawn_daemon("rocm", tandem=tandem_bin)
    refused_as_argument(raised, "backend")
    assert not isinstance(raised.value, TypeError)
    assert '"rocm"' in str(raised.value) and '"host"' in str(raised.value)


def test_a_bad_store_configuration_says_what_is_wrong(tmp_path, tandem_bin):
    config = tmp_path / "store.toml"
    config.write_text('metadata = "x.redb"\nunknown = 1\n')
    with pytest.raises(tandem.BlobError, match="bad store configuration") as raised:
        tandem.blob.fork(config, tandem=tandem_bin)
    assert str(config) in str(raised.value) and "unknown" in str(raised.value)


def test_a_store_that_does_not_start_gives_the_runtimes_exit_status(tmp_path, tandem_bin):
    # Valid, but its metadata cannot be made (/proc takes no new files): the
    # runtime exits at once.
    config = tmp_path / "store.toml"
    config.write_text(
        'metadata = "/proc/tandem/blob.redb"\n'
        '[[targets]]\nkind = "ram"\ncapacity = 1048576\nscore = 1.0\n'
    )
    with pytest.raises(tandem.BlobRuntimeError) as raised:
        tandem.blob.fork(config, tandem=tandem_bin)
    message = str(raised.value)
    assert "blob run" in message and str(config) in message, message
    assert "exit status: 1" in message, message


def test_several_runtimes_are_told_apart_with_segment_not_a_cli_flag(
    store_config, other_store_config, tandem_bin
):
    first = tandem.blob.fork(store_config, tandem=tandem_bin)
    second = tandem.blob.fork(other_store_config, tandem=tandem_bin)
    try:
        calls = [(tandem.blob.attach, tandem.BlobRuntimeError), (tandem.status, tandem.StatusError)]
        for call, error in calls:
            with pytest.raises(error) as raised:
                call()
            message = str(raised.value)
            assert "segment=" in message and "--segment" not in message, message
            assert first.segment in message and second.segment in message, message
    finally:
        del first, second
        gc.collect()
