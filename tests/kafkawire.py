"""A bare Kafka wire client for tests that must send exact (or deliberately bad) bytes."""

from __future__ import annotations

import socket
import struct

from headrace.protocol import (
    RequestHeader,
    decode_response,
    decode_response_header,
    encode_request,
    encode_request_header,
    response_header_is_flexible,
)


class WireClient:
    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, msg, client_id: str | None = "wire-test") -> int:
        self.correlation_id += 1
        header = encode_request_header(RequestHeader(api_key, version, self.correlation_id, client_id))
        body = header + encode_request(api_key, version, msg)
        self.send_raw(struct.pack(">i", len(body)) + body)
        return self.correlation_id

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def receive(self, api_key: int, version: int):
        """(correlation id, decoded response) of the next response frame."""
        frame = self.read_frame()
        correlation_id, offset = decode_response_header(frame, response_header_is_flexible(api_key, version))
        return correlation_id, decode_response(api_key, version, frame, offset)

    def request(self, api_key: int, version: int, msg):
        sent = self.send(api_key, version, msg)
        correlation_id, response = self.receive(api_key, version)
        assert correlation_id == sent
        return response

    def closed_by_peer(self) -> bool:
        """True when the broker closed the connection (read returns EOF or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
