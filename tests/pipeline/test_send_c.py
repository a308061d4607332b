"""``headrace.pipeline._send.send_file``, the C loop that sends a file chunk of a send
step (pipeline/writer.py), on its own: its contract with the Python path that stands behind it."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from test_writer import MB, SIZE, START, content, read_exactly  # noqa: F401 (a fixture)

from headrace.pipeline import writer


def test_the_c_loop_sends_what_the_reader_takes_and_stops_at_the_time_limit_or_the_file_end(content):
    """``headrace.pipeline._send.send_file``: the whole chunk to a reader that keeps reading,
    across many fillings of the socket; what fits when nobody reads, once its time is up; what the
    file has when it is shorter; nothing, without raising, on a bad descriptor (the Python
    path then tells why)."""
    if writer._send_in_c is None:
        pytest.skip("headrace.pipeline._send was not built (no C compiler at install)")
    path, data = content
    fd = os.open(path, os.O_RDONLY)
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(read_exactly(b, 4 * MB, 65536, 0)))
        reader.start()
        assert writer._send_in_c(a.fileno(), fd, START, 4 * MB, 10_000) == 4 * MB
        reader.join(10)
        assert bytes(got) == data[START : START + 4 * MB]

        started = time.monotonic()
        sent = writer._send_in_c(a.fileno(), fd, 0, SIZE, 200)  # nobody reads
        assert 0 < sent < SIZE and 0.15 < time.monotonic() - started < 5
        assert bytes(read_exactly(b, sent, 65536, 0)) == data[:sent]

        reader = threading.Thread(target=lambda: got.extend(read_exactly(b, 100, 100, 0)))
        got.clear()
        reader.start()
        assert writer._send_in_c(a.fileno(), fd, len(data) - 100, 1000, 1000) == 100  # file end
        reader.join(10)
        assert bytes(got) == data[-100:]
        assert writer._send_in_c(a.fileno(), 999_999, 0, 10, 100) == 0
    finally:
        a.close()
        b.close()
        os.close(fd)
