"""A raw socket to the broker for fuzzing: send anything, then see whether it answered or closed.

Every read is bounded by READ_TIMEOUT_S. It is generous on purpose: hitting it means the broker
neither answered nor closed the connection, which is the failure these tests look for.
"""

from __future__ import annotations

import io
import socket
import struct
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from tidemark.wire.build import build

READ_TIMEOUT_S = 30.0
API_VERSIONS, METADATA = 18, 3


class BrokerHung(AssertionError):
    """The broker neither answered nor closed within READ_TIMEOUT_S."""


@dataclass
class Outcome:
    frames: list[bytes]  # complete response frames (payloads), in order
    closed: bool  # the broker closed (EOF or reset) before we stopped reading
    trailing: bytes  # bytes after the last complete frame: a torn response if non-empty


class Conn:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=READ_TIMEOUT_S)
        self.correlation_id = 0

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> bool:
        """Send raw bytes; False if the broker already closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def send_frame(self, payload: bytes) -> bool:
        return self.send(struct.pack(">i", len(payload)) + payload)

    def half_close(self) -> None:
        """No more requests: the broker sees EOF, answers what it has, and must close."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _recv(self, n: int) -> bytes:
        try:
            return self.sock.recv(n)
        except socket.timeout:
            raise BrokerHung(f"no answer and no close within {READ_TIMEOUT_S}s") from None
        except ConnectionResetError:
            return b""

    def recv_frame(self) -> bytes | None:
        """One response frame's payload, or None if the broker closed first."""
        head = self._recv_exactly(4)
        if len(head) < 4:
            return None
        (size,) = struct.unpack(">i", head)
        assert 0 <= size < 1 << 30, f"response frame with a lying size {size}"
        body = self._recv_exactly(size)
        assert len(body) == size, f"response torn: {len(body)} of {size} bytes, then close"
        return body

    def _recv_exactly(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self._recv(n - len(data))
            if not chunk:
                break
            data += chunk
        return bytes(data)

    def drain(self) -> Outcome:
        """Read until the broker closes; every complete frame received, and any torn tail."""
        data = bytearray()
        while chunk := self._recv(1 << 16):
            data += chunk
        frames, pos = [], 0
        while len(data) - pos >= 4:
            (size,) = struct.unpack_from(">i", data, pos)
            if size < 0 or len(data) - pos - 4 < size:
                break
            frames.append(bytes(data[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        return Outcome(frames, True, bytes(data[pos:]))

    # -- kio-encoded requests -------------------------------------------------------------------

    def encode(self, api_key: int, version: int, body: Any) -> bytes:
        self.correlation_id += 1
        return encode_request(api_key, version, body, self.correlation_id)

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and decode its response; fails if the broker closes or hangs."""
        assert self.send_frame(self.encode(api_key, version, body)), "broker closed before the request"
        frame = self.recv_frame()
        assert frame is not None, f"broker closed the connection instead of answering api {api_key} v{version}"
        return decode_response(api_key, version, frame, self.correlation_id)


def encode_header(api_key: int, version: int, correlation_id: int) -> bytes:
    """The request header kio would write for this API version (v1, or v2 when flexible)."""
    header_cls = load_request_schema(api_key, version).__header_schema__
    header = build(header_cls, {"request_api_key": api_key, "request_api_version": version,
                                "correlation_id": correlation_id, "client_id": "fuzz"})
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header)
    return buffer.getvalue()


def encode_request(api_key: int, version: int, body: Any, correlation_id: int) -> bytes:
    """A request frame payload (no size prefix); body is a kio entity or a dict for build()."""
    request_cls = load_request_schema(api_key, version)
    buffer = io.BytesIO(encode_header(api_key, version, correlation_id))
    buffer.seek(0, io.SEEK_END)
    entity_writer(request_cls)(buffer, body if not isinstance(body, dict) else build(request_cls, body))
    return buffer.getvalue()


def decode_response(api_key: int, version: int, frame: bytes, correlation_id: int) -> Any:
    """The response body, checking the header's correlation id and that kio decodes all of it."""
    response_cls = load_response_schema(api_key, version)
    header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
    assert header.correlation_id == correlation_id, (header.correlation_id, correlation_id)
    body, size = entity_reader(response_cls)(frame, offset)
    assert offset + size == len(frame), f"{len(frame) - offset - size} bytes after the response body"
    return body


def canary_ok(bootstrap: str) -> bool:
    """A fresh connection still gets correct ApiVersions and Metadata answers."""
    with Conn(bootstrap) as conn:
        versions = conn.request(API_VERSIONS, 3, {"client_software_name": "canary",
                                                  "client_software_version": "1"})
        assert versions.error_code == 0
        assert {API_VERSIONS, METADATA, 0, 1} <= {k.api_key for k in versions.api_keys}
        metadata = conn.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
        assert [b.node_id for b in metadata.brokers] == [0]
    return True
