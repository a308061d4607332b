"""Over TLS, file chunks go through the TLS transport (read, then encrypted), never with
sendfile to the raw socket: a slow TLS reader gets bytes chunks and file chunks intact and in
order, pipelined requests answered in order, on both event loops."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading

import pytest
from test_writer import LOOPS, SIZE, START, FileServer, content, frame, pieces, read_exactly, run
from tlsfiles import make_pki

from headrace.pipeline import Limits, serve

__all__ = ["content"]  # the fixture, used by name


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def tls_client(port: int, ca) -> ssl.SSLSocket:
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    raw.connect(("127.0.0.1", port))
    raw.settimeout(30)
    context = ssl.create_default_context(cafile=str(ca))
    return context.wrap_socket(raw, server_hostname="localhost")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_slow_tls_reader_gets_file_and_bytes_chunks_intact_and_in_order(
    content, pki, loop_kind
):
    path, data = content
    many = b"".join(
        data[c[0] : c[0] + c[1]] if isinstance(c, tuple) else c for c in pieces()
    )
    expected = {
        "before": b"before-the-file",
        "file": b"head" + data[START : START + SIZE] + b"tail",
        "many": many,
        "after": b"after-the-file",
    }

    async def main():
        handler = FileServer(path)
        limits = Limits(max_frame=1 << 20, per_connection=1 << 20, per_broker=1 << 24,
                        requests_per_connection=50)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.broker)
        server, router = await serve(handler, "127.0.0.1", 0, limits, ssl=context)
        port = server.sockets[0].getsockname()[1]
        got: dict = {}

        def read():
            with tls_client(port, pki.ca) as s:
                s.sendall(frame(b"before-the-file") + frame(b"send-the-file") + frame(b"send-many-pieces")
                          + frame(b"after-the-file"))
                for name in ("before", "file", "many", "after"):
                    (size,) = struct.unpack(">i", read_exactly(s, 4, 4, 0))
                    got[name] = read_exactly(s, size, 64 * 1024, 0.0005)

        try:
            thread = threading.Thread(target=read)
            thread.start()
            steps = 0
            while thread.is_alive():
                conn = next(iter(router.connections), None)
                if conn is not None and conn._writer is not None:
                    steps = max(steps, conn._writer.sendfile_steps)
                await asyncio.sleep(0.01)
            assert got.keys() == expected.keys()
            for name, value in expected.items():
                assert got[name] == value, f"{name}: {len(got[name])} bytes, not as sent"
            assert handler.sent.wait(5)
            assert steps >= SIZE // (1 << 20), f"{steps} read steps for {SIZE} bytes over TLS"
        finally:
            server.close()
            await router.close()

    run(loop_kind, main)
