"""File chunks in responses: sent with sendfile in steps, in order with the other responses,
their ``on_sent`` called once the bytes have left or the connection closed.

The handler answers ``send-the-file`` with a region of a real file (a chunk object holding its
descriptor, as storage's FileRegion does) between two byte chunks, and anything else with
its own bytes. Clients are real blocking sockets in threads, with small receive buffers, so
the broker side meets a full socket many times. Every test runs on asyncio's loop and on
uvloop's (the broker's), and with a file chunk sent by the C loop
(``headrace.pipeline._send``, when built) and by its Python twin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
import time

import pytest

from headrace.pipeline import Limits, Response, serve, writer

MB = 1 << 20
SIZE = 16 * MB  # more than the socket buffers on both sides hold
START = 12345  # the region starts here in the file


class Chunk:
    """A file chunk: ``length`` bytes at ``position`` of the file open as ``fd``."""

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd, self.position, self.length = fd, position, length

    def __len__(self) -> int:
        return self.length


class FileServer:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY)
        self.sent = threading.Event()  # on_sent of the file response was called
        self.sent_at: float | None = None

    def handle(self, request):
        data = bytes(request.frame)
        if data == b"answer-then-close":  # closed in the next pass, before the writer's pump
            asyncio.get_running_loop().call_soon(request.connection.close)
            return [b"goodbye"]
        if data == b"send-many-pieces":
            return Response(pieces(self.fd), lambda: None)
        if data != b"send-the-file":
            return [data]

        def on_sent():
            assert not self.sent.is_set(), "on_sent called twice"
            self.sent_at = time.monotonic()
            self.sent.set()

        return Response([b"head", Chunk(self.fd, START, SIZE), b"tail"], on_sent)

    def connection_closed(self, connection):
        pass


def pieces(fd=None):
    """File chunks between bytes chunks, one of them large (so that a step may stop within
    it): the chunks when ``fd`` is given, else what they hold, given the file's content."""
    spec = [b"a", (START, MB), b"bb" * 1000, (7, 3 * MB), bytes(range(256)) * 8192, (START, 1),
            (99, MB), b"ccc"]
    if fd is None:
        return spec
    return [Chunk(fd, *c) if isinstance(c, tuple) else c for c in spec]


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def client(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    s.connect(("127.0.0.1", port))
    s.settimeout(30)
    return s


def read_exactly(s: socket.socket, n: int, piece: int, pause: float) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(min(piece, n - len(out)))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
        if pause:
            time.sleep(pause)
    return bytes(out)


@pytest.fixture(autouse=True, params=["c", "python"])
def sender(request, monkeypatch):
    """Which loop sends a file chunk: the C one or the Python one it stands in for."""
    if request.param == "c" and writer._send_in_c is None:
        pytest.skip("headrace.pipeline._send was not built (no C compiler at install)")
    if request.param == "python":
        monkeypatch.setattr(writer, "_send_in_c", None)
    return request.param


@pytest.fixture
def content(tmp_path):
    data = os.urandom(START + SIZE + 100)
    path = tmp_path / "segment"
    path.write_bytes(data)
    return path, data


def descriptors_of(inode: tuple[int, int]) -> int:
    """How many of this process's descriptors refer to ``inode`` (device, inode number)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:  # (closed meanwhile)
            continue
        count += (st.st_dev, st.st_ino) == inode
    return count


async def settles_at(inode: tuple[int, int], count: int, seconds: float = 2.0) -> bool:
    """Does the number of descriptors of ``inode`` reach ``count`` within ``seconds``?"""
    for _ in range(int(seconds / 0.01)):
        if descriptors_of(inode) == count:
            return True
        await asyncio.sleep(0.01)
    return False


def run(loop_kind: str, main) -> None:
    if loop_kind == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


LOOPS = ["asyncio", "uvloop"]


@contextlib.asynccontextmanager
async def file_server(path, **limits):
    """A server whose handler is a ``FileServer`` of ``path``: (handler, router, port)."""
    handler = FileServer(path)
    bounds = {"max_frame": MB, "per_connection": MB, "per_broker": 16 * MB,
              "requests_per_connection": 50, **limits}
    server, router = await serve(handler, "127.0.0.1", 0, Limits(**bounds))
    try:
        yield handler, router, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await router.close()
        os.close(handler.fd)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_slow_reader_gets_the_file_bytes_intact_in_many_steps_and_in_order(
    content, loop_kind
):
    path, data = content
    expected = b"head" + data[START : START + SIZE] + b"tail"

    async def main():
        async with file_server(path) as (handler, router, port):
            got: dict = {}

            def read():
                with client(port) as s:
                    requests = (b"before-the-file", b"send-the-file", b"after-the-file")
                    s.sendall(b"".join(map(frame, requests)))
                    for name in ("before", "file", "after"):
                        (size,) = struct.unpack(">i", read_exactly(s, 4, 4, 0))
                        if name == "file":
                            half = read_exactly(s, size // 2, 64 * 1024, 0.001)
                            got["sent_at_half"] = handler.sent.is_set()
                            got[name] = half + read_exactly(s, size - len(half), 64 * 1024, 0.001)
                            got["read_at"] = time.monotonic()
                        else:
                            got[name] = read_exactly(s, size, size, 0)

            thread = threading.Thread(target=read)
            thread.start()
            while thread.is_alive():
                await asyncio.sleep(0.01)
            conn = next(iter(router.connections), None)
            steps = conn._writer.sendfile_steps if conn is not None else None
            await asyncio.sleep(0.1)
            assert got["before"] == b"before-the-file" and got["after"] == b"after-the-file"
            assert got["file"] == expected
            assert not got["sent_at_half"], "on_sent before the bytes had left"
            assert handler.sent.wait(5)
            if steps is not None:  # (the connection may be gone already)
                assert steps >= 10, f"{steps} sendfile steps for a slow reader"

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_connection_closed_mid_send_calls_on_sent_and_frees_its_descriptor(
    content, loop_kind
):
    path, _ = content

    async def main():
        async with file_server(path) as (handler, router, port):
            s = await asyncio.to_thread(client, port)
            s.sendall(frame(b"send-the-file"))
            await asyncio.to_thread(read_exactly, s, 100_000, 100_000, 0)
            (conn,) = router.connections
            st = os.fstat(conn.extra("socket").fileno())
            inode = (st.st_dev, st.st_ino)
            # the writer waits for the socket with its own descriptor
            assert await settles_at(inode, 2), "the server's socket and the writer's copy"
            assert not handler.sent.is_set()
            s.close()
            for _ in range(500):
                if handler.sent.is_set() and not router.connections:
                    break
                await asyncio.sleep(0.01)
            assert handler.sent.is_set(), "on_sent not called after the connection closed"
            assert await settles_at(inode, 0), "a descriptor of the socket was left open"

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_file_cut_short_mid_send_closes_the_connection(content, tmp_path, loop_kind):
    path, data = content
    copy = tmp_path / "cut"
    copy.write_bytes(data)

    async def main():
        async with file_server(copy) as (handler, router, port):
            s = await asyncio.to_thread(client, port)
            s.sendall(frame(b"send-the-file"))
            await asyncio.to_thread(read_exactly, s, 100_000, 100_000, 0)
            os.truncate(copy, START + SIZE // 2)  # the length was sent: the rest cannot be

            def drain():
                got = 100_000
                while chunk := s.recv(1 << 20):
                    got += len(chunk)
                return got

            got = await asyncio.to_thread(drain)  # ends: the broker side closed
            s.close()
            assert got < 4 + 4 + SIZE // 2 + 4, "more bytes than the file held"
            for _ in range(200):
                if handler.sent.is_set():
                    break
                await asyncio.sleep(0.01)
            assert handler.sent.is_set()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_many_file_and_bytes_chunks_arrive_in_order_to_a_slow_reader(content, loop_kind):
    path, data = content
    expected = b"".join(
        data[c[0] : c[0] + c[1]] if isinstance(c, tuple) else c for c in pieces()
    )

    async def main():
        async with file_server(path) as (handler, router, port):

            def read():
                with client(port) as s:
                    s.sendall(frame(b"send-many-pieces") * 3 + frame(b"after-the-pieces"))
                    out = []
                    for _ in range(4):
                        (size,) = struct.unpack(">i", read_exactly(s, 4, 4, 0))
                        out.append(read_exactly(s, size, 32 * 1024, 0.0002))
                    return out

            got = await asyncio.to_thread(read)
            assert got[:3] == [expected] * 3
            assert got[3] == b"after-the-pieces"

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_readers_that_stop_reading_do_not_hold_up_other_connections(content, loop_kind):
    """More stalled readers than the writer has send threads: a step waits for a full socket
    only so long, so another connection still gets its whole file."""
    path, data = content
    expected = b"head" + data[START : START + SIZE] + b"tail"

    async def main():
        async with file_server(path, per_broker=64 * MB) as (handler, router, port):
            with contextlib.ExitStack() as stalled:
                for _ in range(2 * writer.SEND_THREADS):
                    s = stalled.enter_context(await asyncio.to_thread(client, port))
                    s.sendall(frame(b"send-the-file"))  # and never read
                await asyncio.sleep(0.2)

                def read():
                    with client(port) as s:
                        s.sendall(frame(b"send-the-file"))
                        (size,) = struct.unpack(">i", read_exactly(s, 4, 4, 0))
                        return read_exactly(s, size, 1 << 20, 0)

                got = await asyncio.wait_for(asyncio.to_thread(read), 20)
                assert got == expected

    run(loop_kind, main)


@pytest.mark.parametrize("send_buffer", [65536, -1])
def test_the_send_buffer_setting_sizes_each_connections_socket(content, send_buffer):
    """``socket.send.buffer.bytes`` (Limits.send_buffer): SO_SNDBUF of each connection as
    set (Linux reports it doubled), or the kernel's own when -1."""
    path, _ = content

    async def main():
        async with file_server(path, send_buffer=send_buffer) as (handler, router, port):
            s = await asyncio.to_thread(client, port)
            s.sendall(frame(b"echo-this-frame"))
            await asyncio.to_thread(read_exactly, s, 19, 19, 0)
            (conn,) = router.connections
            sock = conn._transport.get_extra_info("socket")
            size = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            default = socket.socket()
            kernel = default.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            default.close()
            s.close()
            if send_buffer > 0:
                assert size == 2 * send_buffer
            else:
                assert size != 2 * 65536 and size >= kernel

    run("uvloop", main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_responses_completed_in_one_pass_leave_in_one_write(content, loop_kind):
    """Pipelined requests that arrive together are answered together: one write to the
    transport for their responses (not one each), in order."""
    path, _ = content
    payloads = [b"request %03d" % i for i in range(50)]

    async def main():
        async with file_server(path, requests_per_connection=100) as (handler, router, port):
            s = await asyncio.to_thread(client, port)
            s.sendall(b"".join(frame(p) for p in payloads))  # one segment on loopback
            got = await asyncio.to_thread(read_exactly, s, sum(4 + len(p) for p in payloads),
                                          1 << 16, 0)
            assert got == b"".join(frame(p) for p in payloads)
            (conn,) = router.connections
            assert conn._writer.transport_writes <= 5, conn._writer.transport_writes
            s.close()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_connection_closed_right_after_a_response_still_sends_it(content, loop_kind):
    """Closing a connection (as a failed authentication or a shutdown does) sends what was
    written before, though the writer's pump for that pass has not run yet."""
    path, _ = content

    async def main():
        async with file_server(path, requests_per_connection=10) as (handler, router, port):
            s = await asyncio.to_thread(client, port)
            s.sendall(frame(b"answer-then-close"))
            got = await asyncio.to_thread(read_exactly, s, 11, 11, 0)
            assert got == frame(b"goodbye")
            assert await asyncio.to_thread(s.recv, 1) == b""  # then closed
            s.close()

    run(loop_kind, main)

