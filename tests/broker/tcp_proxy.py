"""A TCP proxy for fault tests that can cut one Kafka client off: a network partition between
two brokers without touching either.

``TcpProxy`` listens on 127.0.0.1 and forwards every connection to ``target`` (settable after
the proxy starts, so a broker can advertise the proxy's port before it knows its own). It
reads the first request frame of each connection to learn the Kafka client id (a Headrace
broker's inter-broker clients are ``headrace-broker-<id>-<channel>``, one per kind of traffic).
``cut(client_id)`` blackholes that client, and every client whose id starts with it and a
``-`` (``cut("headrace-broker-3")``: all of broker 3's channels): its connections, open or new, stop carrying bytes either way (nothing is closed, as
when packets are dropped: the client sees its requests time out). ``heal()`` ends the cut: the
blackholed connections are closed, so the client connects again and is forwarded.
"""

from __future__ import annotations

import socket
import struct
import threading


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def client_id_of(frame: bytes) -> str | None:
    """The client id in a request frame's body (header v1/v2: int16 api key, int16 version,
    int32 correlation id, int16-length client id)."""
    if len(frame) < 10:
        return None
    (length,) = struct.unpack_from(">h", frame, 8)
    if length < 0 or 10 + length > len(frame):
        return None
    return frame[10 : 10 + length].decode(errors="replace")


class _Link:
    def __init__(self, proxy: TcpProxy, downstream: socket.socket) -> None:
        self.proxy = proxy
        self.down = downstream
        self.up: socket.socket | None = None
        self.client_id: str | None = None
        self.was_cut = False

    @property
    def cut(self) -> bool:
        """Cut now, or once cut (a connection that dropped bytes never carries any again)."""
        if not self.was_cut and self.client_id is not None:
            self.was_cut = any(
                self.client_id == x or self.client_id.startswith(x + "-")
                for x in tuple(self.proxy.cut_ids)
            )
        return self.was_cut

    def run(self) -> None:
        try:
            head = _exactly(self.down, 4)
            if head is None:
                return
            (size,) = struct.unpack(">i", head)
            if not 0 <= size <= 100 << 20:
                return
            body = _exactly(self.down, size)
            if body is None:
                return
            self.client_id = client_id_of(body)
            self.up = socket.create_connection(self.proxy.target, timeout=10)
            self.up.settimeout(None)
            if not self.cut:
                self.up.sendall(head + body)
            threading.Thread(target=self._pump, args=(self.up, self.down), daemon=True).start()
            self._pump(self.down, self.up)
        except OSError:
            pass
        finally:
            self.close()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if not self.cut:  # cut: dropped, as a partitioned network drops packets
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            self.close()

    def close(self) -> None:
        for s in (self.down, self.up):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        with self.proxy.lock:
            self.proxy.links.discard(self)


class TcpProxy:
    def __init__(self, target: tuple[str, int] | None = None) -> None:
        self.target = target
        self.cut_ids: set[str] = set()
        self.links: set[_Link] = set()
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            link = _Link(self, sock)
            with self.lock:
                self.links.add(link)
            threading.Thread(target=link.run, daemon=True).start()

    def cut(self, client_id: str) -> None:
        self.cut_ids.add(client_id)

    def heal(self) -> None:
        """End every cut: the blackholed connections are closed (their clients reconnect)."""
        self.cut_ids.clear()
        with self.lock:
            doomed = [link for link in self.links if link.was_cut]
        for link in doomed:
            link.close()

    def close(self) -> None:
        self.server.close()
        with self.lock:
            links = list(self.links)
        for link in links:
            link.close()
